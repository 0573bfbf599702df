//! The accept loop: connections accepted under the cap, the one idle the longest closed to make
//! room, and a 503 for a newcomer that still finds none.

use super::Limits;
use super::connection::connection;
use super::watch::Watch;
use axum::Router;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Accepts connections until `stop`, each on a task of `connections`, at most `slots` at once.
/// At the cap, the connection idle the longest is closed to make room; a newcomer that still
/// finds no room within a moment is answered 503.
pub(super) struct Acceptor {
    pub(super) router: Router,
    pub(super) slots: Arc<Semaphore>,
    pub(super) limits: Limits,
    pub(super) stop: CancellationToken,
    pub(super) kill: CancellationToken,
    pub(super) connections: TaskTracker,
    pub(super) open: Arc<Open>,
}

/// The watches of the open connections, to find the one idle the longest.
#[derive(Default)]
pub(super) struct Open {
    next: std::sync::atomic::AtomicU64,
    watches: std::sync::Mutex<std::collections::HashMap<u64, Arc<Watch>>>,
}

impl Open {
    pub(super) fn add(&self, watch: Arc<Watch>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, watch);
        id
    }

    pub(super) fn remove(&self, id: u64) {
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
    pub(super) fn new(limits: &Limits, stop: &CancellationToken, kill: &CancellationToken, connections: &TaskTracker) -> Self {
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

    pub(super) async fn run(self, listener: TcpListener) {
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
