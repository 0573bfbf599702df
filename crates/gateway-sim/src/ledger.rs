//! What each simulated provider account saw over a run: its 429s by cause (other tenants'
//! background noise, or our own load past its in-flight or rpm limit) and its mean in flight
//! against its mean capacity (time-weighted), for the report (SPEC §4: only our own 429s should
//! cut the learned limit, and the limit should keep the account near its capacity).

use gateway_core::time::Timestamp;
use serde::Serialize;

/// Why the account answered 429.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Throttle {
    /// Other tenants of the key: it would have been refused whatever our load.
    Background,
    /// Our own load past the account's in-flight limit.
    Own,
    /// Our own load past the account's rpm.
    OwnRpm,
}

/// One account's figures, as the report shows them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AccountFigures {
    /// 429s the account would have sent anyway.
    pub background_429: u32,
    /// 429s our own load caused.
    pub own_429: u32,
    /// Of them, past the account's rpm (the rest: past its in-flight limit).
    pub rpm_429: u32,
    /// Mean requests in flight on the account, over the run.
    pub mean_inflight: f64,
    /// Mean in-flight capacity (peaks included), over the run.
    pub mean_capacity: f64,
}

impl AccountFigures {
    /// The means to three decimals (the report's JSON depends only on the seed).
    pub fn rounded(&self) -> AccountFigures {
        let r = |x: f64| (x * 1000.0).round() / 1000.0;
        AccountFigures { mean_inflight: r(self.mean_inflight), mean_capacity: r(self.mean_capacity), ..self.clone() }
    }
}

/// The running sums behind [`AccountFigures`].
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    background_429: u32,
    own_429: u32,
    rpm_429: u32,
    /// ∫ in flight dt and ∫ capacity dt, in request·ms.
    inflight_ms: f64,
    capacity_ms: f64,
    /// The time the sums reach, and the in flight and capacity since then.
    at: Option<Timestamp>,
    inflight: u32,
    capacity: u32,
}

impl Ledger {
    /// Carries the sums to `now` at the in flight and capacity held since the last change,
    /// then holds `inflight` and `capacity` from `now`.
    pub(crate) fn step(&mut self, now: Timestamp, inflight: u32, capacity: u32) {
        let dt = self.since(now);
        self.inflight_ms += dt * f64::from(self.inflight);
        self.capacity_ms += dt * f64::from(self.capacity);
        (self.at, self.inflight, self.capacity) = (Some(now), inflight, capacity);
    }

    /// Milliseconds from the last change to `now`.
    fn since(&self, now: Timestamp) -> f64 {
        self.at.map_or(0.0, |at| now.saturating_since(at).as_millis() as f64)
    }

    pub(crate) fn throttled(&mut self, cause: Throttle) {
        match cause {
            Throttle::Background => self.background_429 += 1,
            Throttle::Own => self.own_429 += 1,
            Throttle::OwnRpm => {
                self.own_429 += 1;
                self.rpm_429 += 1;
            }
        }
    }

    /// The figures from `start` to `now`.
    pub(crate) fn figures(&self, start: Timestamp, now: Timestamp) -> AccountFigures {
        let (tail, span) = (self.since(now), now.saturating_since(start).as_millis().max(1) as f64);
        AccountFigures {
            background_429: self.background_429,
            own_429: self.own_429,
            rpm_429: self.rpm_429,
            mean_inflight: (self.inflight_ms + tail * f64::from(self.inflight)) / span,
            mean_capacity: (self.capacity_ms + tail * f64::from(self.capacity)) / span,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_are_time_weighted_and_429s_kept_apart() {
        let mut l = Ledger::default();
        l.step(Timestamp::from_secs(0), 4, 16);
        l.step(Timestamp::from_secs(10), 8, 6);
        l.throttled(Throttle::Background);
        l.throttled(Throttle::Own);
        l.throttled(Throttle::OwnRpm);
        let f = l.figures(Timestamp::from_secs(0), Timestamp::from_secs(20));
        assert_eq!(f, AccountFigures { background_429: 1, own_429: 2, rpm_429: 1, mean_inflight: 6.0, mean_capacity: 11.0 });
        assert_eq!(l.figures(Timestamp::from_secs(0), Timestamp::from_secs(20)), f, "reading changes nothing");
    }
}
