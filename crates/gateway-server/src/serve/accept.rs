//! The accept loop: connections accepted under the cap, the one idle the longest closed to make
//! room, a 503 for a newcomer that still finds none, and a bound on those newcomers (each holds
//! a file descriptor).

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

    /// Asks the connection idle the longest (no request in flight, none arriving) to close, and
    /// answers which. One already asked is passed over: its place is promised to the newcomer
    /// that asked, so each newcomer frees a place of its own.
    fn close_longest_idle(&self) -> Option<u64> {
        let watches = self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (_, id, watch) = watches
            .iter()
            .filter(|(_, w)| !w.close.is_cancelled())
            .filter_map(|(id, w)| w.idle_since().map(|since| (since, *id, w)))
            .min_by_key(|(since, _, _)| *since)?;
        watch.close.cancel();
        Some(id)
    }

    /// Whether the connection `id` is still open.
    fn is_open(&self, id: u64) -> bool {
        self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains_key(&id)
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
        // Newcomers past the cap waiting for room or being answered 503: each holds a file
        // descriptor, so they are bounded too (beyond, a newcomer is closed at once).
        let pending = Arc::new(Semaphore::new(MAX_PENDING));
        loop {
            let accepted = tokio::select! {
                () = self.stop.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, _)) => {
                    let slot = self.slots.clone().try_acquire_owned();
                    let waiting = match slot {
                        Ok(_) => None,
                        Err(_) => match pending.clone().try_acquire_owned() {
                            Ok(waiting) => Some(waiting),
                            // Past the bound: closed unanswered, its descriptor freed now.
                            Err(_) => continue,
                        },
                    };
                    let (router, limits, stop, kill, open, slots) =
                        (self.router.clone(), self.limits, self.stop.clone(), self.kill.clone(), self.open.clone(), self.slots.clone());
                    self.connections.spawn(async move {
                        let slot = match slot {
                            Ok(slot) => slot,
                            Err(_) => match make_room(&open, slots).await {
                                Some(slot) => slot,
                                None => return refuse(stream).await,
                            },
                        };
                        drop(waiting);
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

/// Newcomers past the cap held at once (waiting for room, or being answered 503).
const MAX_PENDING: usize = 64;
/// How long a newcomer past the cap waits for the room it made.
const ROOM_WAIT: Duration = Duration::from_millis(100);

/// A place for a newcomer at the cap: the connection idle the longest is asked to close, and
/// its place taken when it has. While no idle connection can be asked (every one is busy, or
/// already closing for another newcomer, or just accepted and not yet counted), the newcomer
/// asks again every few milliseconds, within [`ROOM_WAIT`]; so it does when the one it asked has
/// closed and it still has no place (places go to the newcomers in the order they came, and the
/// one it freed went to a newcomer ahead that could ask none).
async fn make_room(open: &Open, slots: Arc<Semaphore>) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let acquire = slots.acquire_owned();
    let deadline = tokio::time::sleep(ROOM_WAIT);
    tokio::pin!(acquire, deadline);
    let mut asked = open.close_longest_idle();
    loop {
        tokio::select! {
            biased;
            slot = &mut acquire => return slot.ok(),
            () = &mut deadline => return None,
            () = tokio::time::sleep(Duration::from_millis(5)) => {
                if asked.is_none_or(|id| !open.is_open(id)) {
                    asked = open.close_longest_idle();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A newcomer at the cap, making room; it holds the place it gets.
    fn newcomer(open: &Arc<Open>, slots: &Arc<Semaphore>) -> tokio::task::JoinHandle<Option<tokio::sync::OwnedSemaphorePermit>> {
        let (open, slots) = (open.clone(), slots.clone());
        tokio::spawn(async move { make_room(&open, slots).await })
    }

    #[tokio::test(start_paused = true)]
    async fn a_newcomer_whose_freed_place_went_to_one_ahead_asks_again() {
        let (open, slots) = (Arc::new(Open::default()), Arc::new(Semaphore::new(0)));
        // A newcomer comes while no connection can be asked (none is counted yet).
        let ahead = newcomer(&open, &slots);
        tokio::task::yield_now().await;
        // Two idle connections are counted; a second newcomer asks the idlest to close.
        let first = Arc::new(Watch::new());
        let first_id = open.add(first.clone());
        tokio::time::sleep(Duration::from_millis(1)).await;
        let second = Arc::new(Watch::new());
        open.add(second.clone());
        let behind = newcomer(&open, &slots);
        tokio::task::yield_now().await;
        assert!(first.close.is_cancelled() && !second.close.is_cancelled(), "the second newcomer asked the idlest");
        // It closes: its place goes to the newcomer ahead, who could ask none.
        open.remove(first_id);
        slots.add_permits(1);
        tokio::time::sleep(Duration::from_millis(6)).await;
        let _held = ahead.await.unwrap().expect("the newcomer ahead took the place");
        assert!(second.close.is_cancelled(), "the one behind asked again, not waiting for a place nobody frees");
        slots.add_permits(1);
        assert!(behind.await.unwrap().is_some(), "and got the place it freed");
    }
}
