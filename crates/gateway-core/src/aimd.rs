//! The AIMD pacer of one provider account (SPEC §4), as a pure state machine: a float
//! concurrency limit, the attempts in flight on the account (leases that expire, so a crashed
//! worker's attempts do not hold the account for ever), and the cut generation. The memory pacer
//! runs it; the Redis pacer script mirrors it rule for rule.
//!
//! Rules, exactly:
//! - the limit starts at `min(8, ceiling)`, never falls below 1 nor rises above the ceiling
//!   (the scope's concurrency);
//! - `try_acquire` prunes expired leases, then grants a lease when the leases in flight are
//!   fewer than the limit; the lease carries the generation of the moment it was taken;
//! - `release` ends the lease and applies the outcome's AIMD effect: an increase adds
//!   `1 / limit`; a decrease halves the limit and starts a new generation, but only when the
//!   lease's generation is the current one: a 429 on an attempt that began before the last cut
//!   is the same congestion event (one cut per round trip, as congestion control does).

use crate::outcome::AimdEffect;
use crate::time::Timestamp;
use std::time::Duration;

/// Limit a pacer starts at (capped by the ceiling).
pub(crate) const INITIAL_LIMIT: f64 = 8.0;
/// The limit never falls below one attempt in flight.
pub(crate) const FLOOR: f64 = 1.0;
/// Multiplicative decrease on 429.
pub const CUT: f64 = 0.5;

/// What an account's pacer runs on: its ceiling and how long a lease lives unreleased.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PacerParams {
    /// The highest limit (the scope's concurrency).
    pub ceiling: f64,
    /// A lease not released within this ends by itself (twice the slowest source's timeout).
    pub lease_ttl: Duration,
}

impl PacerParams {
    /// The highest limit, never below the floor.
    pub fn top(&self) -> f64 {
        self.ceiling.max(FLOOR)
    }

    /// The limit a fresh account starts at.
    pub fn initial_limit(&self) -> f64 {
        INITIAL_LIMIT.min(self.top())
    }

    /// How long an account's state is kept after its last use: an hour past its longest
    /// lease's life (both backends; the Redis key's TTL).
    pub fn keep_for(&self) -> Duration {
        self.lease_ttl.saturating_mul(2).saturating_add(Duration::from_secs(3600))
    }
}

/// A granted place on the account.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Unique among the account's leases.
    pub id: u64,
    /// The cut generation when it was taken.
    pub generation: u64,
}

/// The account is full: its limit and the leases in flight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Paced {
    /// The learned limit.
    pub limit: f64,
    /// Leases in flight.
    pub inflight: u32,
}

/// The learned limit, the leases in flight and the cut generation of one account.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountPacer {
    limit: f64,
    generation: u64,
    next_id: u64,
    /// Leases in flight: id and expiry.
    leases: Vec<(u64, Timestamp)>,
}

impl AccountPacer {
    /// A fresh account under `params`.
    pub fn new(params: &PacerParams) -> Self {
        AccountPacer { limit: params.initial_limit(), generation: 0, next_id: 0, leases: Vec::new() }
    }

    /// The learned limit.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// Cuts so far.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Leases in flight at `now`.
    pub fn inflight(&self, now: Timestamp) -> u32 {
        u32::try_from(self.leases.iter().filter(|(_, expires)| *expires > now).count()).unwrap_or(u32::MAX)
    }

    /// A lease when one more attempt fits under the limit at `now`.
    pub fn try_acquire(&mut self, params: &PacerParams, now: Timestamp) -> Result<Lease, Paced> {
        self.leases.retain(|(_, expires)| *expires > now);
        let inflight = u32::try_from(self.leases.len()).unwrap_or(u32::MAX);
        if f64::from(inflight) >= self.limit {
            return Err(Paced { limit: self.limit, inflight });
        }
        self.next_id += 1;
        self.leases.push((self.next_id, now.saturating_add(params.lease_ttl)));
        Ok(Lease { id: self.next_id, generation: self.generation })
    }

    /// Ends `lease` and applies `effect` (see the module doc); returns the limit after.
    pub fn release(&mut self, lease: Lease, effect: AimdEffect, params: &PacerParams) -> f64 {
        self.leases.retain(|(id, _)| *id != lease.id);
        match effect {
            AimdEffect::Increase => self.limit = (self.limit + 1.0 / self.limit).min(params.top()),
            AimdEffect::Decrease if lease.generation == self.generation => {
                self.limit = (self.limit * CUT).max(FLOOR);
                self.generation += 1;
            }
            AimdEffect::Decrease | AimdEffect::Nothing => {}
        }
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AimdEffect::{Decrease, Increase, Nothing};

    const PARAMS: PacerParams = PacerParams { ceiling: 16.0, lease_ttl: Duration::from_secs(60) };

    fn at(s: u64) -> Timestamp {
        Timestamp::from_secs(s)
    }

    #[test]
    fn starts_at_eight_or_the_ceiling_and_grows_to_the_ceiling() {
        assert_eq!(AccountPacer::new(&PARAMS).limit(), 8.0);
        assert_eq!(AccountPacer::new(&PacerParams { ceiling: 3.0, ..PARAMS }).limit(), 3.0);
        let mut p = AccountPacer::new(&PARAMS);
        for _ in 0..10_000 {
            let lease = p.try_acquire(&PARAMS, at(1)).unwrap();
            p.release(lease, Increase, &PARAMS);
        }
        assert_eq!(p.limit(), 16.0);
    }

    /// (what happens, expected limit after) — leases named by the step that took them.
    #[test]
    fn one_cut_per_round_trip() {
        let mut p = AccountPacer::new(&PARAMS);
        // A burst: eight attempts in flight, all answered 429: one cut, not eight.
        let burst: Vec<Lease> = (0..8).map(|_| p.try_acquire(&PARAMS, at(1)).unwrap()).collect();
        assert!(p.try_acquire(&PARAMS, at(1)).is_err(), "the ninth does not fit under 8");
        let after: Vec<f64> = burst.iter().map(|lease| p.release(*lease, Decrease, &PARAMS)).collect();
        assert_eq!(after, [4.0; 8]);
        // The first 429 after the cut, on an attempt begun after it, cuts at once.
        let fresh = p.try_acquire(&PARAMS, at(2)).unwrap();
        assert_eq!(p.release(fresh, Decrease, &PARAMS), 2.0);
        // Background noise: one 429 among successes cuts once; the others grow it back.
        let (a, b) = (p.try_acquire(&PARAMS, at(3)).unwrap(), p.try_acquire(&PARAMS, at(3)).unwrap());
        assert_eq!(p.release(a, Increase, &PARAMS), 2.5);
        assert_eq!(p.release(b, Decrease, &PARAMS), 1.25);
        // Recovery: additive increase, 1/limit per success, floored at 1 on the way down.
        let mut limit = p.limit();
        for _ in 0..40 {
            let lease = p.try_acquire(&PARAMS, at(4)).unwrap();
            let before = limit;
            limit = p.release(lease, Increase, &PARAMS);
            assert!((limit - (before + 1.0 / before)).abs() < 1e-12);
        }
        let generation = p.generation();
        for _ in 0..20 {
            let lease = p.try_acquire(&PARAMS, at(5)).unwrap();
            p.release(lease, Decrease, &PARAMS);
        }
        assert_eq!((p.limit(), p.generation()), (FLOOR, generation + 20));
        let lease = p.try_acquire(&PARAMS, at(5)).unwrap();
        assert_eq!(p.release(lease, Nothing, &PARAMS), FLOOR, "a transient failure says nothing of capacity");
    }

    #[test]
    fn a_lease_left_unreleased_expires() {
        let mut p = AccountPacer::new(&PacerParams { ceiling: 1.0, ..PARAMS });
        let _lost = p.try_acquire(&PARAMS, at(0)).unwrap();
        assert_eq!(p.try_acquire(&PARAMS, at(30)), Err(Paced { limit: 1.0, inflight: 1 }));
        assert_eq!(p.inflight(at(59)), 1);
        assert!(p.try_acquire(&PARAMS, at(60)).is_ok(), "a crashed worker's lease ended by itself");
    }
}
