//! The learned limit of one provider account (SPEC §4), as a pure state machine: a float
//! concurrency limit `L`, the attempts in flight on the account (leases that expire, so a
//! crashed worker's attempts do not hold the account for ever), the cut generation, and the
//! ceiling the account refused. The memory pacer runs it; the Redis pacer script mirrors it rule
//! for rule, to the last bit of every float.
//!
//! The provider's 429s have two causes: our own load passing its limit, and noise (other tenants
//! of the key, a relay's hiccups). Only the first may cut. Rules, exactly:
//! - `L` starts at `min(8, ceiling)` and stays in [1/16, ceiling] (the scope's concurrency).
//! - **Grant** while the leases in flight are fewer than `L`. Below one (`L` < 1) that is one
//!   at a time, and no sooner than (1/`L` − 1)·`srtt` after the previous one ended. A lease
//!   records the cut generation `g`, the ceiling's epoch `e`, and `n`, the leases in flight
//!   when it was granted (itself not counted).
//! - **A 429** on a lease of an older generation changes nothing (one cut per round trip).
//!   Otherwise the first that matches: below one, `L` ← max(1/16, 0.7·`L`) and a new
//!   generation; a refused probe (`W` known, `n` ≥ `W`): `W` ← `n`, held, a new epoch,
//!   `L` ← max(1, min(`L`, `n` − 1)); a burst (≥ 3 429s, this one included, answered within
//!   the last 4·`t429`): `W` ← `n`, not held, a new epoch, `L` ← max(1/16, 0.7·min(`L`, `f`))
//!   where `f`, the flight the burst met, is the larger of `n` + 1 (in flight at its grant,
//!   itself included) and the leases in flight at the 429 (its own included), a new
//!   generation; an overtaken probe (`W` known, the leases still in flight at the 429 number
//!   `W` or more): as a refused probe of `W`; anything else is noise and leaves `L` alone.
//!
//!   Two rules differ from SPEC §4, both measured in the soak (docs/SOAK.md). The burst cuts
//!   from the flight it met, as TCP's `ssthresh = FlightSize/2` does, not from a limit the
//!   account did not use: a rate-bound account's `L` may stand far above its flight, and a cut
//!   from there takes several round trips of 429s to bite. And a lone 429 that met `W` or
//!   more still in flight is a refused probe, not noise: a probe granted after it overtook it
//!   on the way to the provider and took the slot it was refused. Requests race on real networks; with
//!   SPEC's `n` ≥ `W` alone that refusal reads as noise, the probe's success then forgets the
//!   ceiling, and the limit climbs into a burst (over loopback HTTP, half again as many 429s).
//! - **A real success**: when `W` is known, the lease's epoch is the current one and its `n` ≥
//!   `W`, the ceiling rose and is forgotten. Then `L` ← min(ceiling, `L` + d/`L`), with d = 1/8
//!   when held and `L` ≥ `W` − 1 (a probe about every eight round trips), else d = 1.
//! - Empty, 5xx and invalid answers, timeouts and attempts not made do not change `L`.
//! - `srtt` and `t429` are EWMAs (gain 1/8) of the durations of answered attempts and of 429
//!   answers, in milliseconds; every 429 counts toward the burst test, whatever its generation.
//! - **The provider's rate-limit headers** (`budget.rs`): the freshest report of its request and
//!   token budgets is kept, refilled and drawn down by every lease since; while fewer than one
//!   request, or fewer tokens than the call's estimate, are left, the account grants nothing.
//!   An advertised request limit caps `L` (and `W`) at [`budget::ADVERTISED_HEADROOM`] × the
//!   requests it allows per round trip.

use crate::outcome::AimdEffect;
use crate::request::RateSignal;
use crate::time::Timestamp;
use budget::{Budget, keep_freshest};
use std::time::Duration;

pub mod budget;
#[cfg(test)]
mod tests;

/// Limit a pacer starts at (capped by the ceiling).
pub(crate) const INITIAL_LIMIT: f64 = 8.0;
/// The lowest limit: one attempt every sixteen round trips.
pub(crate) const FLOOR: f64 = 1.0 / 16.0;
/// Multiplicative decrease on a burst of 429s (or on any current 429 below one in flight).
pub const CUT: f64 = 0.7;
/// Growth per real success, over `L`, when the account holds at a refused ceiling.
pub const PROBE_GROWTH: f64 = 1.0 / 8.0;
/// A burst: this many 429s answered within [`BURST_WINDOW`] × `t429`.
pub const BURST_COUNT: usize = 3;
/// The burst window, in units of the 429 answers' EWMA latency.
pub const BURST_WINDOW: f64 = 4.0;
/// The round trip assumed before any attempt was answered, in milliseconds.
pub const DEFAULT_RTT_MS: f64 = 1000.0;

/// What an account's pacer runs on: its ceiling, how long a lease lives unreleased, and the
/// window of the provider's advertised limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PacerParams {
    /// The highest limit (the scope's concurrency).
    pub ceiling: f64,
    /// A lease not released within this ends by itself (twice the slowest source's timeout).
    pub lease_ttl: Duration,
    /// The window of the limits the provider advertises (a minute; less in a scaled soak).
    pub limit_window: Duration,
}

impl PacerParams {
    /// The highest limit, never below one.
    pub fn top(&self) -> f64 {
        self.ceiling.max(1.0)
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
    /// The refused ceiling's epoch when it was taken.
    pub epoch: u64,
    /// The account's leases in flight when it was granted, itself not counted.
    pub n: u32,
    /// When it was granted (the backend's clock).
    pub granted: Timestamp,
    /// The account's token spend (the calls' estimates) after its grant.
    pub tokens: u64,
    /// One more place fitted under the learned limit right after this grant (the reported
    /// budgets and the spacing below one in flight not asked: a refusal of theirs says when time
    /// lifts it). A waiter that took the last place does not wake the next: only a release can
    /// make room for it.
    pub room: bool,
}

/// The account is full: its limit and the leases in flight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Paced {
    /// The learned limit.
    pub limit: f64,
    /// Leases in flight.
    pub inflight: u32,
    /// How long until time alone lifts what refused (below one in flight, the spacing since the
    /// last attempt; a reported budget, its refill or its reset), when that refused; `None`
    /// when only a release frees a place (its waiters are woken by it, SPEC §6).
    pub ready_in: Option<Duration>,
}

/// An account as a status page reads it: its learned limit, the leases in flight, and the
/// ceiling it refused while that is known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AccountReading {
    /// The learned limit.
    pub limit: f64,
    /// Leases in flight.
    pub inflight: u32,
    /// The refused ceiling `W`, while it is known.
    pub learned: Option<LearnedCeiling>,
}

/// The learned ceiling `W` (SPEC §4): the in-flight count at which the account refused (a
/// burst found it, or a probe of it was refused); not the scope's ceiling, `PacerParams::ceiling`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LearnedCeiling {
    /// The in-flight count refused.
    pub at: u32,
    /// Refused by a probe of a known ceiling (hold there and probe slowly), rather than found by
    /// a burst.
    pub held: bool,
}

/// The learned limit, the leases in flight, the cut generation and the refused ceiling of one
/// account.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountPacer {
    pub(crate) limit: f64,
    pub(crate) generation: u64,
    pub(crate) learned: Option<LearnedCeiling>,
    pub(crate) epoch: u64,
    /// EWMA of answered attempts' durations, ms.
    pub(crate) srtt: Option<f64>,
    /// EWMA of 429 answers' durations, ms.
    pub(crate) t429: Option<f64>,
    /// When the last two 429s were answered, the latest first.
    pub(crate) recent_429: [Option<Timestamp>; 2],
    /// Below one in flight: the next lease no sooner than this.
    pub(crate) ready_at: Option<Timestamp>,
    next_id: u64,
    /// Leases in flight: id and expiry.
    leases: Vec<(u64, Timestamp)>,
    /// The token estimates of every lease granted.
    tokens_spent: u64,
    /// The provider's request budget as last reported.
    pub(crate) requests: Option<Budget>,
    /// The provider's token budget as last reported.
    pub(crate) tokens: Option<Budget>,
}

fn ewma(old: Option<f64>, sample: f64) -> f64 {
    match old {
        Some(old) => old + (sample - old) / 8.0,
        None => sample,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_millis() as f64
}

impl AccountPacer {
    /// A fresh account under `params`.
    pub fn new(params: &PacerParams) -> Self {
        AccountPacer {
            limit: params.initial_limit(),
            generation: 0,
            learned: None,
            epoch: 0,
            srtt: None,
            t429: None,
            recent_429: [None; 2],
            ready_at: None,
            next_id: 0,
            leases: Vec::new(),
            tokens_spent: 0,
            requests: None,
            tokens: None,
        }
    }

    /// The learned limit.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// Whether a place fits under the learned limit with `inflight` leases held.
    fn fits(&self, inflight: u32) -> bool {
        f64::from(inflight) < self.limit
    }

    /// Cuts so far.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The ceiling the account refused, while it is known.
    pub fn learned_ceiling(&self) -> Option<LearnedCeiling> {
        self.learned
    }

    /// What a status page reads of the account at `now`.
    pub fn reading(&self, now: Timestamp) -> AccountReading {
        AccountReading { limit: self.limit, inflight: self.inflight(now), learned: self.learned }
    }

    /// Leases in flight at `now`.
    pub fn inflight(&self, now: Timestamp) -> u32 {
        u32::try_from(self.leases.iter().filter(|(_, expires)| *expires > now).count()).unwrap_or(u32::MAX)
    }

    /// A lease for an attempt estimated at `tokens` when one more fits under the limit and the
    /// provider's reported budgets at `now`.
    pub fn try_acquire(&mut self, params: &PacerParams, tokens: u32, now: Timestamp) -> Result<Lease, Paced> {
        self.leases.retain(|(_, expires)| *expires > now);
        let inflight = u32::try_from(self.leases.len()).unwrap_or(u32::MAX);
        let early = self.ready_at.filter(|ready| self.limit < 1.0 && now < *ready);
        let cost = f64::from(tokens.max(1));
        let requests = self.requests.and_then(|b| b.ready_at(now, self.next_id, 1.0));
        let tokens_ready = self.tokens.and_then(|b| b.ready_at(now, self.tokens_spent, cost));
        // Time lifts a refusal of these when the last of them lifts.
        let timed = [early, requests, tokens_ready].into_iter().flatten().max();
        if !self.fits(inflight) || timed.is_some() {
            let ready_in = timed.map(|ready| ready.saturating_since(now));
            return Err(Paced { limit: self.limit, inflight, ready_in });
        }
        self.next_id += 1;
        self.tokens_spent = self.tokens_spent.saturating_add(u64::from(tokens.max(1)));
        self.leases.push((self.next_id, now.saturating_add(params.lease_ttl)));
        let room = self.fits(inflight + 1);
        Ok(Lease {
            id: self.next_id,
            generation: self.generation,
            epoch: self.epoch,
            n: inflight,
            granted: now,
            tokens: self.tokens_spent,
            room,
        })
    }

    /// Ends `lease` at `now` with `effect` and the provider's `rate` signal, if it sent one
    /// (see the module doc); returns the limit after.
    pub fn release(&mut self, lease: Lease, effect: AimdEffect, rate: Option<&RateSignal>, params: &PacerParams, now: Timestamp) -> f64 {
        self.leases.retain(|(id, _)| *id != lease.id);
        if let Some(rate) = rate {
            keep_freshest(&mut self.requests, rate.requests.as_ref(), lease.id, lease.granted, lease.id);
            keep_freshest(&mut self.tokens, rate.tokens.as_ref(), lease.id, lease.granted, lease.tokens);
        }
        let took = ms(now.saturating_since(lease.granted));
        let n = f64::from(lease.n);
        let below_one = self.limit < 1.0;
        match effect {
            AimdEffect::Increase => {
                self.srtt = Some(ewma(self.srtt, took));
                if self.learned.is_some_and(|w| lease.epoch == self.epoch && lease.n >= w.at) {
                    self.learned = None;
                }
                let d = match self.learned {
                    Some(w) if w.held && self.limit >= f64::from(w.at) - 1.0 => PROBE_GROWTH,
                    _ => 1.0,
                };
                self.limit = (self.limit + d / self.limit).min(params.top());
            }
            AimdEffect::RoundTrip => self.srtt = Some(ewma(self.srtt, took)),
            AimdEffect::Decrease => {
                let t429 = ewma(self.t429, took);
                self.t429 = Some(t429);
                let window = BURST_WINDOW * t429;
                let recent = self.recent_429.iter().flatten().filter(|at| ms(now.saturating_since(**at)) <= window).count();
                let burst = recent + 1 >= BURST_COUNT;
                self.recent_429 = [Some(now), self.recent_429[0]];
                if lease.generation == self.generation {
                    if below_one {
                        self.cut();
                    } else if self.learned.is_some_and(|w| lease.n >= w.at) {
                        self.hold(lease.n);
                    } else if burst {
                        self.learned = Some(LearnedCeiling { at: lease.n, held: false });
                        self.epoch += 1;
                        // From the flight the burst met, not from a limit the account did not
                        // use (TCP's FlightSize rule): a rate-bound account's L may stand far
                        // above its flight.
                        self.limit = self.limit.min((n + 1.0).max(f64::from(self.inflight(now)) + 1.0));
                        self.cut();
                    } else if let Some(w) = self.learned.filter(|w| self.inflight(now) >= w.at) {
                        // The flight it met is at or above W: a probe granted after it overtook
                        // it on the way and took the slot it was refused.
                        self.hold(w.at);
                    }
                }
            }
            AimdEffect::Nothing => {}
        }
        self.cap_by_advertised_limit(params);
        self.ready_at = (self.limit < 1.0).then(|| {
            let wait = self.srtt.unwrap_or(DEFAULT_RTT_MS) * (1.0 / self.limit - 1.0);
            Timestamp::from_millis(now.as_millis().saturating_add(wait.floor() as u64))
        });
        self.limit
    }

    /// An advertised request limit caps `L` and `W` (SPEC §4.5): at most
    /// [`budget::ADVERTISED_HEADROOM`] × the requests it allows per round trip.
    fn cap_by_advertised_limit(&mut self, params: &PacerParams) {
        let (Some(limit), Some(srtt)) = (self.requests.and_then(|b| b.limit), self.srtt) else { return };
        let cap = budget::ADVERTISED_HEADROOM * (limit as f64) * srtt / ms(params.limit_window).max(1.0);
        self.limit = self.limit.min(cap.max(FLOOR));
        let top = cap.ceil().max(1.0);
        if let Some(w) = &mut self.learned
            && f64::from(w.at) > top
        {
            w.at = top as u32;
        }
    }

    /// A refused probe of the ceiling `at`: hold just below it, in a new epoch.
    fn hold(&mut self, at: u32) {
        self.learned = Some(LearnedCeiling { at, held: true });
        self.epoch += 1;
        self.limit = self.limit.min(f64::from(at) - 1.0).max(1.0);
    }

    fn cut(&mut self) {
        self.limit = (self.limit * CUT).max(FLOOR);
        self.generation += 1;
    }
}
