//! The stall clock (SPEC §4): a call is stalled when it has spent more than `stall_window` not
//! attempting **and** its scope has made no progress (no successful attempt) within
//! `stall_window`. While other calls succeed, a waiting call keeps waiting.

use crate::time::Timestamp;
use std::time::Duration;

/// Per call: time spent not attempting (waiting, backing off, napping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallStall {
    idle_since: Option<Timestamp>,
    idle: Duration,
}

impl CallStall {
    /// A call that starts (idle) at `now`.
    pub(crate) fn start(now: Timestamp) -> Self {
        CallStall { idle_since: Some(now), idle: Duration::ZERO }
    }

    /// An attempt starts at `now`: idle time stops accruing.
    pub(crate) fn attempt_started(&mut self, now: Timestamp) {
        if let Some(since) = self.idle_since.take() {
            self.idle += now.saturating_since(since);
        }
    }

    /// The attempt ended at `now`: idle time accrues again.
    pub(crate) fn attempt_ended(&mut self, now: Timestamp) {
        if self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
    }

    /// Time spent not attempting, up to `now`.
    pub(crate) fn idle(&self, now: Timestamp) -> Duration {
        self.idle + self.idle_since.map_or(Duration::ZERO, |since| now.saturating_since(since))
    }

    /// How much idle time is left before the call may be declared stalled.
    pub(crate) fn remaining(&self, window: Duration, now: Timestamp) -> Duration {
        window.saturating_sub(self.idle(now))
    }

    /// SPEC §4: idle beyond `window` and no scope progress within `window`.
    pub(crate) fn stalled(&self, scope: &ScopeProgress, window: Duration, now: Timestamp) -> bool {
        self.idle(now) > window && !scope.progressed_within(window, now)
    }
}

/// Per scope: when an attempt last succeeded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScopeProgress {
    last: Option<Timestamp>,
}

impl ScopeProgress {
    /// No progress yet.
    pub fn new() -> Self {
        ScopeProgress::default()
    }

    /// A successful attempt at `now`.
    pub fn record(&mut self, now: Timestamp) {
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
    }

    /// The time of the last progress.
    pub fn last(&self) -> Option<Timestamp> {
        self.last
    }

    /// Whether there was progress in the last `window` before `now`.
    pub(crate) fn progressed_within(&self, window: Duration, now: Timestamp) -> bool {
        self.last.is_some_and(|last| now.saturating_since(last) <= window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(300);

    #[test]
    fn only_idle_time_counts() {
        let mut call = CallStall::start(Timestamp::ZERO);
        call.attempt_started(Timestamp::from_secs(10));
        call.attempt_ended(Timestamp::from_secs(40));
        call.attempt_ended(Timestamp::from_secs(50)); // a second end does not restart idling
        assert_eq!(call.idle(Timestamp::from_secs(100)), Duration::from_secs(70));
        assert_eq!(call.remaining(WINDOW, Timestamp::from_secs(100)), Duration::from_secs(230));
    }

    #[test]
    fn stalled_needs_both_conditions() {
        let call = CallStall::start(Timestamp::ZERO);
        let mut scope = ScopeProgress::new();
        assert!(!call.stalled(&scope, WINDOW, Timestamp::from_secs(300)));
        assert!(call.stalled(&scope, WINDOW, Timestamp::from_secs(301)));
        scope.record(Timestamp::from_secs(250));
        assert!(!call.stalled(&scope, WINDOW, Timestamp::from_secs(400)));
        assert!(call.stalled(&scope, WINDOW, Timestamp::from_secs(551)));
        scope.record(Timestamp::from_secs(10)); // out-of-order reports never move progress back
        assert_eq!(scope.last(), Some(Timestamp::from_secs(250)));
    }
}
