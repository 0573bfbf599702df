//! The process-local cooldown memo (SPEC §4): "skip this source until T".
//!
//! It is fed only by OPEN denials (`now + retry_after`, which is 0 for a HALF_OPEN gate), so it
//! can never keep a recovering source out after its gate closes (contract case ⑨).

use crate::time::Timestamp;
use std::time::Duration;

/// Per-source "skip until" times, indexed by the source's position in its scope.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memo {
    until: Vec<Timestamp>,
}

impl Memo {
    /// A memo for `sources` sources, none skipped.
    pub fn new(sources: usize) -> Self {
        Memo { until: vec![Timestamp::ZERO; sources] }
    }

    /// Skip `source` until `t`; only ever moves the time forward. Unknown indices are ignored.
    pub(crate) fn set_until(&mut self, source: usize, t: Timestamp) {
        if let Some(until) = self.until.get_mut(source) {
            *until = (*until).max(t);
        }
    }

    /// Records an OPEN denial seen at `now`: skip until `now + retry_after`. A zero
    /// `retry_after` (HALF_OPEN, or an OPEN gate due now) records nothing.
    pub fn note_denial(&mut self, source: usize, now: Timestamp, retry_after: Duration) {
        if !retry_after.is_zero() {
            self.set_until(source, now.saturating_add(retry_after));
        }
    }

    /// How long `source` is still skipped at `now`, if it is.
    pub fn remaining(&self, source: usize, now: Timestamp) -> Option<Duration> {
        self.until.get(source).filter(|&&until| now < until).map(|until| until.saturating_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_moves_forward_and_expires() {
        let mut memo = Memo::new(2);
        memo.set_until(0, Timestamp::from_secs(60));
        memo.set_until(0, Timestamp::from_secs(10));
        assert_eq!(memo.remaining(0, Timestamp::from_secs(59)), Some(Duration::from_secs(1)));
        assert_eq!(memo.remaining(0, Timestamp::from_secs(60)), None);
        assert_eq!(memo.remaining(1, Timestamp::ZERO), None);
        memo.set_until(7, Timestamp::from_secs(60));
        assert_eq!(memo.remaining(7, Timestamp::ZERO), None);
    }

    #[test]
    fn a_half_open_denial_never_blacklists() {
        let mut memo = Memo::new(1);
        memo.note_denial(0, Timestamp::from_secs(5), Duration::ZERO);
        assert_eq!(memo.remaining(0, Timestamp::from_secs(5)), None);
    }
}
