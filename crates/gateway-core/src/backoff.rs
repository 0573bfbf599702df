//! Back-off after a failed attempt (SPEC §7): exponential with full jitter over an injected RNG,
//! and the pushback rule for 429 (sleep at least the provider's Retry-After).

use crate::random::unit;
use rand_core::Rng;
use std::time::Duration;

/// Exponential back-off with full jitter: the k-th sleep is uniform in `[0, min(cap, base·2^k))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Upper bound of the first sleep (SPEC default 0.25 s).
    pub base: Duration,
    /// Upper bound of every sleep (SPEC default 8 s).
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { base: Duration::from_millis(250), cap: Duration::from_secs(8) }
    }
}

impl Backoff {
    /// The ceiling of the k-th sleep (k = 0 for the first failure of a call).
    pub fn ceiling(&self, k: u32) -> Duration {
        let factor = 1u32.checked_shl(k.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The k-th sleep after a failure.
    pub fn delay<R: Rng + ?Sized>(&self, k: u32, rng: &mut R) -> Duration {
        self.ceiling(k).mul_f64(unit(rng))
    }

    /// The sleep after a 429: `max(retry_after, backoff(k))` (gRPC pushback).
    pub fn pushback<R: Rng + ?Sized>(&self, k: u32, retry_after: Option<Duration>, rng: &mut R) -> Duration {
        self.delay(k, rng).max(retry_after.unwrap_or(Duration::ZERO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    #[test]
    fn ceiling_doubles_to_the_cap() {
        let b = Backoff::default();
        let ceilings: Vec<u128> = (0..8).map(|k| b.ceiling(k).as_millis()).collect();
        assert_eq!(ceilings, [250, 500, 1000, 2000, 4000, 8000, 8000, 8000]);
        assert_eq!(b.ceiling(u32::MAX), b.cap);
    }

    #[test]
    fn delays_are_jittered_below_the_ceiling_and_seeded() {
        let b = Backoff::default();
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..6).map(|k| b.delay(k, &mut rng)).collect::<Vec<_>>()
        };
        let first = draw(1);
        assert_eq!(first, draw(1));
        assert_ne!(first, draw(2));
        for (k, d) in first.iter().enumerate() {
            assert!(*d < b.ceiling(k as u32));
        }
    }

    #[test]
    fn pushback_waits_at_least_the_retry_after() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let d = Backoff::default().pushback(0, Some(Duration::from_secs(20)), &mut rng);
        assert_eq!(d, Duration::from_secs(20));
        let d = Backoff::default().pushback(0, None, &mut rng);
        assert!(d < Duration::from_millis(250));
    }
}
