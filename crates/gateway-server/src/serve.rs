//! Serving connections: an accept loop under a connection cap kept below the process's
//! file-descriptor limit (at the cap the connection idle the longest makes room; a newcomer that
//! still finds none is answered 503 and closed), HTTP/1.1 on hyper, and a watch per connection
//! that closes it when its first request does not begin within `header_timeout_s`, it idles past
//! `idle_timeout_s`, a request head takes more than `header_timeout_s` from its first byte, or
//! its answer waits more than `body_timeout_s` on a client that stopped reading. The body has its
//! own timeout in the handlers. Shutdown: stop accepting, let in-flight requests finish within
//! the grace, then cut the calls still running (503), drop the connections that still hang on,
//! and wait for what they held to be released.

use crate::AppState;
use crate::config::ServerConfig;
use axum::Router;
use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// How serving ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    /// Calls still running at the shutdown deadline, ended with 503.
    pub cut: usize,
}

/// File descriptors kept for everything but client connections (upstream pools, Redis, files):
/// a quarter of the limit, at least this many.
const RESERVED_FDS: u64 = 256;
/// The default connection cap never exceeds this.
const DEFAULT_MAX_CONNECTIONS: u64 = 16_384;
/// How long the releases of cut calls are waited for before the process exits.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// The process's file-descriptor limit, raised to its hard maximum first (as Go's runtime does):
/// the soft limit is often 1 024 while the hard one is far higher.
pub fn fd_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(1 << 20).min(1 << 20);
    if limit.current.is_some_and(|soft| soft < hard) {
        let _ = setrlimit(Resource::Nofile, rustix::process::Rlimit { current: Some(hard), maximum: limit.maximum });
    }
    getrlimit(Resource::Nofile).current.unwrap_or(hard)
}

/// Why `server.max_connections` cannot be had with the process's file-descriptor limit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionCapError {
    /// The configured cap leaves less than the reserve free.
    #[error(
        "server.max_connections: value {max} is out of range (expected at most {most}: the file-descriptor limit {fds} less {reserve} kept for upstream connections, Redis and files)"
    )]
    OutOfRange {
        /// The configured cap.
        max: usize,
        /// The most the limit allows.
        most: u64,
        /// The file-descriptor limit.
        fds: u64,
        /// The descriptors kept for everything but client connections.
        reserve: u64,
    },
    /// The limit leaves nothing for client connections.
    #[error("server.max_connections: the file-descriptor limit {fds} leaves no room for client connections")]
    NoRoom {
        /// The file-descriptor limit.
        fds: u64,
    },
}

/// The connection cap for a file-descriptor limit of `fds`: the configured one, which must leave
/// the reserve free, or three quarters of the limit (at most 16 384).
pub fn connection_cap(configured: Option<usize>, fds: u64) -> Result<usize, ConnectionCapError> {
    let reserve = (fds / 4).max(RESERVED_FDS);
    let most = fds.saturating_sub(reserve);
    let cap = match configured {
        Some(max) if max as u64 > most => {
            return Err(ConnectionCapError::OutOfRange { max, most, fds, reserve });
        }
        Some(max) => max as u64,
        None => most.min(DEFAULT_MAX_CONNECTIONS),
    };
    if cap == 0 {
        return Err(ConnectionCapError::NoRoom { fds });
    }
    Ok(usize::try_from(cap).unwrap_or(usize::MAX))
}

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

/// A connection's time limits.
#[derive(Clone, Copy, Debug)]
struct Limits {
    idle: Duration,
    header: Duration,
    /// How long a response may wait on a client that stopped reading it (the body timeout).
    write: Duration,
}

impl Limits {
    fn of(config: &ServerConfig) -> Self {
        Limits {
            idle: Duration::from_secs_f64(config.idle_timeout_s),
            header: Duration::from_secs_f64(config.header_timeout_s),
            write: Duration::from_secs_f64(config.body_timeout_s),
        }
    }
}

/// Accepts connections until `stop`, each on a task of `connections`, at most `slots` at once.
/// At the cap, the connection idle the longest is closed to make room; a newcomer that still
/// finds no room within a moment is answered 503.
struct Acceptor {
    router: Router,
    slots: Arc<Semaphore>,
    limits: Limits,
    stop: CancellationToken,
    kill: CancellationToken,
    connections: TaskTracker,
    open: Arc<Open>,
}

/// The watches of the open connections, to find the one idle the longest.
#[derive(Default)]
struct Open {
    next: std::sync::atomic::AtomicU64,
    watches: std::sync::Mutex<std::collections::HashMap<u64, Arc<Watch>>>,
}

impl Open {
    fn add(&self, watch: Arc<Watch>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, watch);
        id
    }

    fn remove(&self, id: u64) {
        self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
    }

    /// Asks the connection idle the longest (no request in flight, none arriving) to close.
    fn close_longest_idle(&self) -> bool {
        let watches = self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let idlest = watches.values().filter_map(|w| w.idle_since().map(|since| (since, w))).min_by_key(|(since, _)| *since);
        match idlest {
            Some((_, watch)) => {
                watch.close.cancel();
                true
            }
            None => false,
        }
    }
}

impl Acceptor {
    fn new(limits: &Limits, stop: &CancellationToken, kill: &CancellationToken, connections: &TaskTracker) -> Self {
        Acceptor {
            router: Router::new(),
            slots: Arc::new(Semaphore::new(0)),
            limits: *limits,
            stop: stop.clone(),
            kill: kill.clone(),
            connections: connections.clone(),
            open: Arc::default(),
        }
    }

    async fn run(self, listener: TcpListener) {
        loop {
            let accepted = tokio::select! {
                () = self.stop.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, _)) => {
                    let slot = match self.slots.clone().try_acquire_owned() {
                        Ok(slot) => Ok(slot),
                        Err(_) if self.open.close_longest_idle() => Err(true),
                        Err(_) => Err(false),
                    };
                    let (router, limits, stop, kill, open, slots) =
                        (self.router.clone(), self.limits, self.stop.clone(), self.kill.clone(), self.open.clone(), self.slots.clone());
                    self.connections.spawn(async move {
                        let slot = match slot {
                            Ok(slot) => slot,
                            // An idle connection was asked to close: its place comes in a moment.
                            Err(true) => match tokio::time::timeout(Duration::from_millis(100), slots.acquire_owned()).await {
                                Ok(Ok(slot)) => slot,
                                _ => return refuse(stream).await,
                            },
                            Err(false) => return refuse(stream).await,
                        };
                        connection(stream, router, limits, stop, kill, &open).await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    // Out of file descriptors (or a connection reset before it was accepted):
                    // wait a moment rather than spin.
                    tracing::warn!("accept failed: {e}");
                    tokio::select! {
                        () = self.stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
            }
        }
    }
}

/// Answers a connection past the cap with 503 and closes it, within a second.
async fn refuse(mut stream: TcpStream) {
    let body = r#"{"error":{"message":"the gateway has max_connections connections open; retry shortly","type":"service_unavailable","param":null,"code":"too_many_connections"}}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

/// One connection: HTTP/1.1 until the client closes it, it times out or is asked to close
/// (made room for), `stop` (then hyper finishes the request in flight and closes) or `kill`.
async fn connection(stream: TcpStream, router: Router, limits: Limits, stop: CancellationToken, kill: CancellationToken, open: &Open) {
    // A streamed chunk goes out when it is written: without this, Nagle holds a small chunk that
    // follows the response head until the client's delayed ACK (40 ms on Linux).
    let _ = stream.set_nodelay(true);
    let watch = Arc::new(Watch::new());
    let id = open.add(watch.clone());
    let io = TokioIo::new(Watched { inner: stream, watch: watch.clone() });
    let requests = watch.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let busy = requests.begin();
        let router = router.clone();
        async move {
            let response = router.oneshot(request.map(Body::new)).await?;
            Ok::<_, std::convert::Infallible>(response.map(|body| Guarded { body, _busy: busy }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The watch times headers from the first byte, so idle connections may wait longer; a head
    // (with its read buffer) is held to 64 KiB.
    builder.header_read_timeout(None).keep_alive(true).max_buf_size(64 << 10);
    let mut conn = std::pin::pin!(builder.serve_connection(io, service));
    let mut draining = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!("connection ended: {e}");
                }
                break;
            }
            () = stop.cancelled(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            why = watch.expired(limits) => {
                tracing::debug!("closing a connection: {why}");
                break;
            }
            () = watch.close.cancelled() => {
                tracing::debug!("closing the connection idle the longest: the connection cap is reached");
                break;
            }
            () = kill.cancelled() => break,
        }
    }
    open.remove(id);
}

/// Where a connection is: just opened (no request yet), between requests (since when, and
/// since when a next one started arriving), or serving `n` of them (and since when a write of
/// the answer has waited on the client, if one has).
#[derive(Clone, Copy, Debug)]
enum Phase {
    Fresh { since: Instant },
    Idle { since: Instant, first_byte: Option<Instant> },
    Busy { requests: usize, write_stalled: Option<Instant> },
}

/// A connection's phase, moved by its reads and writes and by requests starting and ending.
struct Watch {
    phase: watch::Sender<Phase>,
    /// A write is waiting on the client (read without the lock on every write).
    stalled: std::sync::atomic::AtomicBool,
    /// Asks the connection to close (the connection cap needs its place).
    close: CancellationToken,
}

impl Watch {
    fn new() -> Self {
        Watch {
            phase: watch::Sender::new(Phase::Fresh { since: Instant::now() }),
            stalled: std::sync::atomic::AtomicBool::new(false),
            close: CancellationToken::new(),
        }
    }

    /// Since when the connection has had nothing to do, if it has nothing to do.
    fn idle_since(&self) -> Option<Instant> {
        match *self.phase.borrow() {
            Phase::Fresh { since } | Phase::Idle { since, first_byte: None } => Some(since),
            _ => None,
        }
    }

    /// Bytes came in: a next request head has started, if the connection was idle.
    fn bytes_arrived(&self) {
        self.phase.send_if_modified(|phase| match phase {
            Phase::Idle { first_byte: first @ None, .. } => {
                *first = Some(Instant::now());
                true
            }
            // A first request's head is timed from the connection's opening, not its first byte.
            Phase::Fresh { since } => {
                *phase = Phase::Idle { since: *since, first_byte: Some(*since) };
                true
            }
            _ => false,
        });
    }

    /// A write could not go out: the client is not reading.
    fn write_waits(&self) {
        if self.stalled.swap(true, Ordering::Relaxed) {
            return;
        }
        self.phase.send_if_modified(|phase| match phase {
            Phase::Busy { write_stalled: stalled @ None, .. } => {
                *stalled = Some(Instant::now());
                true
            }
            _ => false,
        });
    }

    /// A write went out.
    fn wrote(&self) {
        if !self.stalled.swap(false, Ordering::Relaxed) {
            return;
        }
        self.phase.send_if_modified(|phase| match phase {
            Phase::Busy { write_stalled: stalled @ Some(_), .. } => {
                *stalled = None;
                true
            }
            _ => false,
        });
    }

    /// A request's head is complete: the connection is busy until the guard (held by the
    /// response body) is dropped.
    fn begin(self: &Arc<Self>) -> Busy {
        self.phase.send_modify(|phase| {
            *phase = match *phase {
                Phase::Busy { requests, write_stalled } => Phase::Busy { requests: requests + 1, write_stalled },
                Phase::Fresh { .. } | Phase::Idle { .. } => Phase::Busy { requests: 1, write_stalled: None },
            }
        });
        Busy(self.clone())
    }

    /// Resolves when the connection should close: a first request not begun within
    /// `limits.header`, an idle time past `limits.idle`, a request head slower than
    /// `limits.header` from its first byte, or an answer the client has not read for
    /// `limits.write`.
    async fn expired(&self, limits: Limits) -> &'static str {
        let mut phase = self.phase.subscribe();
        loop {
            let deadline = match *phase.borrow_and_update() {
                Phase::Fresh { since } => Some((since + limits.header, "no request within header_timeout_s of connecting")),
                Phase::Idle { since, first_byte: None } => Some((since + limits.idle, "idle past idle_timeout_s")),
                Phase::Idle { first_byte: Some(first), .. } => Some((first + limits.header, "request head slower than header_timeout_s")),
                Phase::Busy { write_stalled: Some(since), .. } => Some((since + limits.write, "the client stopped reading its answer")),
                Phase::Busy { write_stalled: None, .. } => None,
            };
            let changed = async {
                // The sender lives as long as `self`: `changed` cannot fail while we wait.
                if phase.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            match deadline {
                Some((at, why)) => tokio::select! {
                    () = tokio::time::sleep_until(at) => return why,
                    () = changed => {}
                },
                None => changed.await,
            }
        }
    }
}

/// A request being served; dropping it (with its response body) may make the connection idle.
struct Busy(Arc<Watch>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.phase.send_modify(|phase| {
            *phase = match *phase {
                Phase::Busy { requests, write_stalled } if requests > 1 => Phase::Busy { requests: requests - 1, write_stalled },
                _ => Phase::Idle { since: Instant::now(), first_byte: None },
            }
        });
    }
}

/// A response body that keeps its request counted as busy until it is sent or dropped.
struct Guarded {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket, telling the watch when bytes arrive.
struct Watched {
    inner: TcpStream,
    watch: Arc<Watch>,
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.watch.bytes_arrived();
        }
        polled
    }
}

impl Watched {
    /// Tells the watch whether a write went out or waits on the client.
    fn note_write<T>(&self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match &polled {
            Poll::Pending => self.watch.write_waits(),
            Poll::Ready(_) => self.watch.wrote(),
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note_write(polled)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note_write(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::{ConnectionCapError, connection_cap};

    #[test]
    fn the_connection_cap_leaves_the_reserve_free() {
        assert_eq!(connection_cap(None, 1024), Ok(768));
        assert_eq!(connection_cap(None, 1 << 20), Ok(16_384));
        assert_eq!(connection_cap(Some(500), 1024), Ok(500));
        assert_eq!(
            connection_cap(Some(1100), 1024).unwrap_err().to_string(),
            "server.max_connections: value 1100 is out of range (expected at most 768: the file-descriptor limit 1024 less 256 kept for upstream connections, Redis and files)"
        );
        let none = connection_cap(None, 200).unwrap_err();
        assert_eq!(none, ConnectionCapError::NoRoom { fds: 200 }, "no room at all");
        assert_eq!(none.to_string(), "server.max_connections: the file-descriptor limit 200 leaves no room for client connections");
    }
}
