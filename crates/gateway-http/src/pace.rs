//! The pace a stream is read at: a token bucket of `rate` bytes a second holding at most one
//! second's worth, so that one provider streaming as fast as the network allows cannot take the
//! process's CPU from every other call. A real model streams a few kilobytes a second; the
//! bucket only ever slows a hostile or broken one.

use tokio::time::Instant;

/// A stream's read pace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pace {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Pace {
    /// A full bucket of `rate` bytes a second, as of `now`.
    pub(crate) fn new(rate: u64, now: Instant) -> Self {
        Pace { rate: rate as f64, tokens: rate as f64, at: now }
    }

    /// When the next read may be made: `now`, or the moment the bucket is no longer empty.
    pub(crate) fn ready_at(&mut self, now: Instant) -> Instant {
        self.refill(now);
        if self.tokens >= 0.0 { now } else { now + std::time::Duration::from_secs_f64(-self.tokens / self.rate) }
    }

    /// `bytes` were read at `now` (the bucket may go below empty: the next read waits longer).
    pub(crate) fn spend(&mut self, bytes: usize, now: Instant) {
        self.refill(now);
        self.tokens -= bytes as f64;
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        self.at = now;
    }
}

#[cfg(test)]
mod tests {
    use super::Pace;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn a_second_of_bytes_goes_at_once_then_the_rate_holds() {
        let t0 = Instant::now();
        let mut pace = Pace::new(1000, t0);
        assert_eq!(pace.ready_at(t0), t0, "a full bucket");
        pace.spend(1000, t0);
        assert_eq!(pace.ready_at(t0), t0, "empty, not below");
        pace.spend(500, t0);
        assert_eq!(pace.ready_at(t0), t0 + Duration::from_millis(500), "500 bytes over: half a second");
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(pace.ready_at(t1), t1);
        let t2 = t1 + Duration::from_secs(60);
        pace.spend(0, t2);
        pace.spend(1000, t2);
        assert_eq!(pace.ready_at(t2), t2, "an idle stream's bucket holds one second, no more");
        pace.spend(1, t2);
        assert!(pace.ready_at(t2) > t2);
    }
}
