//! A connection's watch: its phase (fresh, idle, busy), moved by its reads and requests, and a
//! write waiting on the client, and the deadlines they set.
//!
//! The state is a plain value under a lock, told to nobody: a request moves it without waking
//! the connection's task. [`Watch::expired`] reads it when a timer it set fires, and every timer
//! it sets ends no later than the earliest deadline any later state could have (see
//! [`State::check_at`]), so a deadline is never missed and none is kept late: a request costs no
//! wake-up and no timer.

use super::Limits;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where a connection is: just opened (no request yet), between requests (since when, and
/// since when a next one started arriving), or serving `n` of them.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Fresh { since: Instant },
    Idle { since: Instant, first_byte: Option<Instant> },
    Busy { requests: usize },
}

/// A connection's phase, and since when a write of an answer has waited on the client, if one
/// has (whatever the phase: an answer whose request has ended may still be unsent).
#[derive(Clone, Copy, Debug)]
struct State {
    phase: Phase,
    write_stalled: Option<Instant>,
}

impl State {
    /// The earliest deadline and why the connection closes at it, if it has one.
    fn deadline(self, limits: Limits) -> Option<(Instant, &'static str)> {
        let phase = match self.phase {
            Phase::Fresh { since } => Some((since + limits.header, "no request within header_timeout_s of connecting")),
            Phase::Idle { since, first_byte: None } => Some((since + limits.idle, "idle past idle_timeout_s")),
            Phase::Idle { first_byte: Some(first), .. } => Some((first + limits.header, "request head slower than header_timeout_s")),
            Phase::Busy { .. } => None,
        };
        let stalled = self.write_stalled.map(|since| (since + limits.write, "the client stopped reading its answer"));
        phase.into_iter().chain(stalled).min_by_key(|(at, _)| *at)
    }

    /// When to look at the state again, read at `now`: at its own deadline, and no later than
    /// the shortest limit from `now`. Every state it may move to sets its deadline from a time
    /// of its own (not before `now`) plus a limit, or keeps one of this one's.
    fn check_at(self, now: Instant, limits: Limits) -> Instant {
        let soonest = now + limits.header.min(limits.idle).min(limits.write);
        self.deadline(limits).map_or(soonest, |(at, _)| at.min(soonest))
    }
}

/// A connection's state, moved by its reads and writes and by requests starting and ending.
pub(super) struct Watch {
    state: Mutex<State>,
    /// Whether `state.write_stalled` is set (read without the lock on every write).
    stalled: std::sync::atomic::AtomicBool,
    /// Asks the connection to close (the connection cap needs its place).
    pub(super) close: CancellationToken,
}

impl Watch {
    /// The watch of a connection opened now.
    pub(super) fn new() -> Self {
        Watch {
            state: Mutex::new(State { phase: Phase::Fresh { since: Instant::now() }, write_stalled: None }),
            stalled: std::sync::atomic::AtomicBool::new(false),
            close: CancellationToken::new(),
        }
    }

    /// The state, moved by `change`.
    fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// The state as it is now.
    fn state(&self) -> State {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Since when the connection has had nothing to do, if it has nothing to do.
    pub(super) fn idle_since(&self) -> Option<Instant> {
        match self.state().phase {
            Phase::Fresh { since } | Phase::Idle { since, first_byte: None } => Some(since),
            _ => None,
        }
    }

    /// Bytes came in: a next request head has started, if the connection was idle.
    pub(super) fn bytes_arrived(&self) {
        self.update(|state| match state.phase {
            Phase::Idle { since, first_byte: None } => state.phase = Phase::Idle { since, first_byte: Some(Instant::now()) },
            // A first request's head is timed from the connection's opening, not its first byte.
            Phase::Fresh { since } => state.phase = Phase::Idle { since, first_byte: Some(since) },
            _ => {}
        });
    }

    /// A write could not go out: the client is not reading.
    pub(super) fn write_waits(&self) {
        if self.stalled.swap(true, Ordering::Relaxed) {
            return;
        }
        self.update(|state| state.write_stalled = Some(Instant::now()));
    }

    /// A write went out.
    pub(super) fn wrote(&self) {
        if !self.stalled.swap(false, Ordering::Relaxed) {
            return;
        }
        self.update(|state| state.write_stalled = None);
    }

    /// A request's head is complete: the connection is busy until the guard (held by the
    /// response body) is dropped.
    pub(super) fn begin(self: &Arc<Self>) -> Busy {
        self.update(|state| {
            state.phase = match state.phase {
                Phase::Busy { requests } => Phase::Busy { requests: requests + 1 },
                Phase::Fresh { .. } | Phase::Idle { .. } => Phase::Busy { requests: 1 },
            }
        });
        Busy(self.clone())
    }

    /// Resolves when the connection should close: a first request not begun within
    /// `limits.header`, an idle time past `limits.idle`, a request head slower than
    /// `limits.header` from its first byte, or an answer the client has not read for
    /// `limits.write`.
    pub(super) async fn expired(&self, limits: Limits) -> &'static str {
        loop {
            let now = Instant::now();
            let state = self.state();
            if let Some((at, why)) = state.deadline(limits)
                && at <= now
            {
                return why;
            }
            tokio::time::sleep_until(state.check_at(now, limits)).await;
        }
    }
}

/// A request being served; dropping it (with its response body) may make the connection idle.
pub(super) struct Busy(Arc<Watch>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.update(|state| {
            state.phase = match state.phase {
                Phase::Busy { requests } if requests > 1 => Phase::Busy { requests: requests - 1 },
                _ => Phase::Idle { since: Instant::now(), first_byte: None },
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits(header: u64, idle: u64, write: u64) -> Limits {
        Limits { header: Duration::from_secs(header), idle: Duration::from_secs(idle), write: Duration::from_secs(write) }
    }

    /// What happens to the connection.
    enum Move {
        /// A request begins (and is held until an `End`).
        Begin,
        /// The request begun first of those held ends (its answer sent).
        End,
        /// A read or a write.
        Io(fn(&Watch)),
    }

    /// When a fresh watch expires (and why), with each move made at its time (ms from the start).
    async fn expiry(limits: Limits, moves: Vec<(u64, Move)>) -> (&'static str, Duration) {
        let (watch, start) = (Arc::new(Watch::new()), Instant::now());
        let mut expired = tokio::spawn({
            let watch = watch.clone();
            async move { (watch.expired(limits).await, Instant::now()) }
        });
        let mut busy = std::collections::VecDeque::new();
        for (at, change) in moves {
            tokio::select! {
                _ = &mut expired => panic!("expired before the move at {at} ms"),
                () = tokio::time::sleep_until(start + Duration::from_millis(at)) => {}
            }
            match change {
                Move::Begin => busy.push_back(watch.begin()),
                Move::End => drop(busy.pop_front()),
                Move::Io(io) => io(&watch),
            }
        }
        let waited = tokio::time::timeout(Duration::from_secs(3_600), expired).await;
        let (why, at) = waited.expect("the connection is never closed").expect("the watch's task");
        drop(busy);
        (why, at - start)
    }

    /// Within 2 ms after `ms` (tokio's timer fires on its 1 ms tick).
    fn near(at: Duration, ms: u64) -> bool {
        let want = Duration::from_millis(ms);
        at >= want && at <= want + Duration::from_millis(2)
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_request_not_begun_in_time_closes_the_connection() {
        let (why, at) = expiry(limits(10, 60, 30), vec![]).await;
        assert_eq!(why, "no request within header_timeout_s of connecting");
        assert!(near(at, 10_000), "{at:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_after_a_long_idle_is_timed_from_its_first_byte_not_from_the_idle_deadline() {
        // Idle from 1 s (its deadline 61 s), a next head's first byte at 40 s.
        let moves = vec![(0, Move::Begin), (1_000, Move::End), (40_000, Move::Io(Watch::bytes_arrived))];
        let (why, at) = expiry(limits(10, 60, 30), moves).await;
        assert_eq!(why, "request head slower than header_timeout_s");
        assert!(near(at, 50_000), "closed {at:?} after the start, not 40 + 10 s");
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_the_client_stops_reading_is_cut_at_its_own_deadline_not_the_fresh_ones() {
        let moves = vec![(500, Move::Begin), (1_000, Move::Io(Watch::write_waits))];
        let (why, at) = expiry(limits(10, 60, 2), moves).await;
        assert_eq!(why, "the client stopped reading its answer");
        assert!(near(at, 3_000), "closed {at:?} after the start, not 1 + 2 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_went_out_in_time_keeps_the_connection_open_until_it_idles_out() {
        let moves = vec![(0, Move::Begin), (20_000, Move::Io(Watch::write_waits)), (40_000, Move::Io(Watch::wrote)), (45_000, Move::End)];
        let (why, at) = expiry(limits(10, 60, 30), moves).await;
        assert_eq!(why, "idle past idle_timeout_s");
        assert!(near(at, 105_000), "closed {at:?} after the start, not 45 + 60 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_answer_stays_timed_when_a_pipelined_request_ends_before_it() {
        let moves = vec![(0, Move::Begin), (100, Move::Begin), (1_000, Move::Io(Watch::write_waits)), (1_500, Move::End)];
        let (why, at) = expiry(limits(10, 60, 2), moves).await;
        assert_eq!(why, "the client stopped reading its answer");
        assert!(near(at, 3_000), "closed {at:?} after the start, not 1 + 2 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_still_waiting_after_its_request_ended_is_cut_at_its_own_deadline() {
        // The write waits from 1 s and never goes out (the watch is not told again); its
        // request ends at 2 s and a next one begins at 5 s.
        let moves = vec![(0, Move::Begin), (1_000, Move::Io(Watch::write_waits)), (2_000, Move::End), (5_000, Move::Begin)];
        let (why, at) = expiry(limits(10, 60, 30), moves).await;
        assert_eq!(why, "the client stopped reading its answer");
        assert!(near(at, 31_000), "closed {at:?} after the start, not 1 + 30 s");
    }
}
