//! The AIMD pacer of one source (SPEC §4): a float concurrency limit that halves on 429 and
//! grows by `1/limit` per real success, and the source's in-flight count it is compared with.

use crate::outcome::{AimdEffect, OutcomeClass};

/// Limit a pacer starts at (capped by the scope concurrency).
pub const INITIAL_LIMIT: f64 = 8.0;
/// The limit never falls below one attempt in flight.
pub const FLOOR: f64 = 1.0;
/// Multiplicative decrease on 429.
pub const CUT: f64 = 0.5;

/// Concurrency limit and in-flight count of one source in one process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AimdPacer {
    limit: f64,
    ceiling: f64,
    inflight: u32,
}

impl AimdPacer {
    /// A pacer whose ceiling is the scope `concurrency`; starts at `min(8, concurrency)`.
    pub fn new(concurrency: u32) -> Self {
        let ceiling = f64::from(concurrency.max(1));
        AimdPacer { limit: INITIAL_LIMIT.min(ceiling), ceiling, inflight: 0 }
    }

    /// A pacer that never limits (the `baseline` preset has no AIMD) but still counts in-flight
    /// attempts for the selectors.
    pub fn unlimited() -> Self {
        AimdPacer { limit: f64::INFINITY, ceiling: f64::INFINITY, inflight: 0 }
    }

    /// The current limit.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// Attempts counted in flight.
    pub fn inflight(&self) -> u32 {
        self.inflight
    }

    /// Whether one more attempt fits under the limit.
    pub fn has_room(&self) -> bool {
        f64::from(self.inflight) < self.limit
    }

    /// Counts one attempt in flight if it fits; `false` means `adaptive_paced`.
    pub fn try_acquire(&mut self) -> bool {
        let room = self.has_room();
        if room {
            self.inflight += 1;
        }
        room
    }

    /// Ends one in-flight attempt (on every path: outcome, error, cancellation).
    pub fn release(&mut self) {
        self.inflight = self.inflight.saturating_sub(1);
    }

    /// Adjusts the limit as the outcome table says.
    pub fn observe_class(&mut self, class: OutcomeClass) {
        match class.effects().aimd {
            AimdEffect::Increase => self.limit = (self.limit + 1.0 / self.limit).min(self.ceiling),
            AimdEffect::Decrease => self.limit = (self.limit * CUT).max(FLOOR),
            AimdEffect::Nothing => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_eight_or_the_ceiling() {
        assert_eq!(AimdPacer::new(100).limit(), 8.0);
        assert_eq!(AimdPacer::new(3).limit(), 3.0);
        assert_eq!(AimdPacer::new(0).limit(), 1.0);
    }

    #[test]
    fn halves_on_429_to_the_floor_and_grows_to_the_ceiling() {
        let mut p = AimdPacer::new(10);
        for _ in 0..10 {
            p.observe_class(OutcomeClass::RateLimited);
        }
        assert_eq!(p.limit(), FLOOR);
        p.observe_class(OutcomeClass::Success);
        assert_eq!(p.limit(), 2.0);
        p.observe_class(OutcomeClass::Success);
        assert_eq!(p.limit(), 2.5);
        for _ in 0..1000 {
            p.observe_class(OutcomeClass::Success);
        }
        assert_eq!(p.limit(), 10.0);
        p.observe_class(OutcomeClass::Transient);
        p.observe_class(OutcomeClass::ResultInvalid);
        assert_eq!(p.limit(), 10.0);
    }

    #[test]
    fn an_unlimited_pacer_counts_but_never_refuses() {
        let mut p = AimdPacer::unlimited();
        for _ in 0..1000 {
            assert!(p.try_acquire());
        }
        p.observe_class(OutcomeClass::RateLimited);
        p.observe_class(OutcomeClass::Success);
        assert!(p.has_room());
        assert_eq!(p.inflight(), 1000);
    }

    #[test]
    fn in_flight_is_capped_by_the_limit_and_never_negative() {
        let mut p = AimdPacer::new(2);
        assert!(p.try_acquire() && p.try_acquire());
        assert!(!p.try_acquire());
        p.release();
        p.release();
        p.release();
        assert_eq!(p.inflight(), 0);
    }
}
