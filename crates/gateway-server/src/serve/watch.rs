//! A connection's watch: its phase (fresh, idle, busy), moved by its reads, writes and requests,
//! and the deadline each phase sets.

use super::Limits;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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
pub(super) struct Watch {
    phase: watch::Sender<Phase>,
    /// A write is waiting on the client (read without the lock on every write).
    stalled: std::sync::atomic::AtomicBool,
    /// Asks the connection to close (the connection cap needs its place).
    pub(super) close: CancellationToken,
}

impl Watch {
    pub(super) fn new() -> Self {
        Watch {
            phase: watch::Sender::new(Phase::Fresh { since: Instant::now() }),
            stalled: std::sync::atomic::AtomicBool::new(false),
            close: CancellationToken::new(),
        }
    }

    /// Since when the connection has had nothing to do, if it has nothing to do.
    pub(super) fn idle_since(&self) -> Option<Instant> {
        match *self.phase.borrow() {
            Phase::Fresh { since } | Phase::Idle { since, first_byte: None } => Some(since),
            _ => None,
        }
    }

    /// Bytes came in: a next request head has started, if the connection was idle.
    pub(super) fn bytes_arrived(&self) {
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
    pub(super) fn write_waits(&self) {
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
    pub(super) fn wrote(&self) {
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
    pub(super) fn begin(self: &Arc<Self>) -> Busy {
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
    pub(super) async fn expired(&self, limits: Limits) -> &'static str {
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
pub(super) struct Busy(Arc<Watch>);

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
