//! The per-source health score (SPEC §4): an EWMA of attempt successes, fed through the outcome
//! table, so a class that says nothing about the service (a bad payload) is not fed, and an
//! answer that fails the caller's structure counts against the source.

use crate::outcome::{HealthEffect, OutcomeClass};

/// Weight of the newest observation.
pub(crate) const ALPHA: f64 = 0.2;

/// Exponentially weighted success rate in `[0, 1]`, starting optimistic at 1.0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ewma {
    value: f64,
}

impl Default for Ewma {
    fn default() -> Self {
        Ewma { value: 1.0 }
    }
}

impl Ewma {
    /// A fresh score of 1.0.
    pub fn new() -> Self {
        Ewma::default()
    }

    /// The current score.
    pub fn value(&self) -> f64 {
        self.value
    }

    /// Feeds one success (`true`) or failure.
    pub fn observe(&mut self, ok: bool) {
        let sample = if ok { 1.0 } else { 0.0 };
        self.value += ALPHA * (sample - self.value);
    }

    /// Feeds an attempt outcome as the outcome table says.
    pub fn observe_class(&mut self, class: OutcomeClass) {
        match class.effects().health {
            HealthEffect::Ok => self.observe(true),
            HealthEffect::Fail => self.observe(false),
            HealthEffect::Nothing => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_to_the_success_rate() {
        let mut e = Ewma::new();
        for i in 0..400 {
            e.observe(i % 10 == 0);
        }
        assert!((e.value() - 0.1).abs() < 0.1, "{}", e.value());
        // α = 0.2: about ten successes bring a collapsed score back near 0.9 (the slow start).
        for _ in 0..10 {
            e.observe(true);
        }
        assert!(e.value() > 0.88, "{}", e.value());
    }

    #[test]
    fn fed_through_the_table() {
        let mut e = Ewma::new();
        e.observe_class(OutcomeClass::RequestRejected);
        assert_eq!(e.value(), 1.0, "a bad payload says nothing of the source");
        e.observe_class(OutcomeClass::ResultInvalid);
        assert!((e.value() - 0.8).abs() < 1e-12, "an answer that fails the caller's structure counts against it");
        e.observe_class(OutcomeClass::RateLimited);
        assert!((e.value() - 0.64).abs() < 1e-12);
        e.observe_class(OutcomeClass::Success);
        assert!((e.value() - 0.712).abs() < 1e-12);
    }
}
