//! Serving connections: an accept loop under a connection cap kept below the process's
//! file-descriptor limit (at the cap the connection idle the longest makes room; a newcomer that
//! still finds none is answered 503 and closed), HTTP/1.1 on hyper, and a watch per connection
//! that closes it when its first request does not begin within `header_timeout_s`, it idles past
//! `idle_timeout_s`, a request head takes more than `header_timeout_s` from its first byte, or
//! its answer waits more than `body_timeout_s` on a client that stopped reading. The body has its
//! own timeout in the handlers. Shutdown: stop accepting, let in-flight requests finish within
//! the grace, then cut the calls still running (503), drop the connections that still hang on,
//! and wait for what they held to be released.

mod accept;
mod connection;
mod limits;
mod watch;
mod when_woken;

use crate::AppState;
use accept::Acceptor;
use limits::Limits;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use limits::{ConnectionCapError, connection_cap, fd_limit};

/// How serving ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    /// Calls still running at the shutdown deadline, ended with 503.
    pub cut: usize,
}
/// How long the releases of cut calls are waited for before the process exits.
const RELEASE_WAIT: Duration = Duration::from_secs(5);
/// Serves `state` on `listener` (and `/metrics` on `metrics_listen`, if set) until `shutdown`
/// resolves, then shuts down as the module doc says.
pub async fn serve(listener: TcpListener, state: Arc<AppState>, shutdown: impl Future<Output = ()> + Send + 'static) -> io::Result<Served> {
    let config = &state.config;
    let cap = connection_cap(config.max_connections, fd_limit()).map_err(io::Error::other)?;
    let metrics_listener = match &config.metrics_listen {
        Some(address) => Some(
            TcpListener::bind(address)
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("server.metrics_listen: cannot listen on {address}: {e}")))?,
        ),
        None => None,
    };
    let stop = CancellationToken::new();
    let kill = CancellationToken::new();
    let connections = TaskTracker::new();
    let limits = Limits::of(config);
    let main = Acceptor {
        router: crate::router(state.clone()),
        slots: Arc::new(Semaphore::new(cap)),
        ..Acceptor::new(&limits, &stop, &kill, &connections)
    };
    let metrics = metrics_listener.map(|l| {
        let acceptor = Acceptor {
            router: crate::metrics_router(state.clone()),
            slots: Arc::new(Semaphore::new(64)),
            ..Acceptor::new(&limits, &stop, &kill, &connections)
        };
        acceptor.run(l)
    });
    let main = main.run(listener);
    let accepting = tokio::spawn(async move {
        match metrics {
            Some(metrics) => drop(tokio::join!(main, metrics)),
            None => main.await,
        }
    });
    shutdown.await;
    tracing::info!("shutting down: no new connections; in-flight calls get the grace");
    stop.cancel();
    let _ = accepting.await;
    connections.close();
    let grace = Duration::from_secs_f64(config.shutdown_grace_s);
    if tokio::time::timeout(grace, connections.wait()).await.is_err() {
        tracing::warn!(grace_s = config.shutdown_grace_s, "shutdown deadline: ending the calls still running with 503");
        state.cut.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), connections.wait()).await;
        // A connection that still has not finished (a client that stopped reading its answer)
        // is dropped now, so its call's releases are spawned before they are waited for.
        kill.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(1), connections.wait()).await;
    }
    // Leases and permits of cut (or abandoned) calls are handed back before the process exits.
    if tokio::time::timeout(RELEASE_WAIT, state.client.released()).await.is_err() {
        tracing::warn!("some releases did not finish within {RELEASE_WAIT:?}; their leases expire by themselves");
    }
    Ok(Served { cut: state.cut_calls.load(Ordering::Relaxed) })
}
