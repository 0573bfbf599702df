//! The breaker parameters of one gate, resolved from its scope's policy and its source.

use crate::policy::BreakerPolicy;
use crate::time::millis;
use std::time::Duration;

/// Breaker parameters resolved for one gate: the scope's [`BreakerPolicy`] with the effective
/// consecutive threshold and probe lease of this source. Built only from a validated policy, so
/// every value is in range (the window has at least two milliseconds, cooldowns are capped…).
#[derive(Clone, Debug, PartialEq)]
pub struct GateParams {
    pub(super) threshold: u32,
    pub(super) cooldown_ms: u64,
    pub(super) max_cooldown_ms: u64,
    pub(super) min_calls: u32,
    pub(super) fail_rate: f64,
    pub(super) bucket_ms: u64,
    pub(super) half_open_successes: u32,
    pub(super) probe_ttl_ms: u64,
    pub(super) slow_rate: Option<f64>,
    pub(super) sla_cooldown_ms: Option<(u64, u64)>,
}

impl GateParams {
    /// Resolves `policy` for one source: the consecutive threshold is
    /// `max(fail_threshold, raise_by × 2)` and the probe lease, unless configured, is
    /// `max(2 × slowest_timeout, cooldown, own_timeout + 5 s)`.
    pub fn new(policy: &BreakerPolicy, raise_by: u32, slowest_timeout: Duration, own_timeout: Duration) -> Self {
        let derived_ttl = (2 * millis(slowest_timeout)).max(millis(policy.cooldown)).max(millis(own_timeout) + 5000);
        GateParams {
            threshold: policy.raised_threshold(raise_by),
            cooldown_ms: millis(policy.cooldown).max(1),
            max_cooldown_ms: millis(policy.max_cooldown).max(millis(policy.cooldown)).max(1),
            min_calls: policy.min_calls.max(1),
            fail_rate: policy.fail_rate,
            bucket_ms: (millis(policy.window) / 2).max(1),
            half_open_successes: policy.half_open_successes.max(1),
            probe_ttl_ms: policy.probe_ttl.map_or(derived_ttl, millis).max(1),
            slow_rate: policy.slow_call.map(|_| policy.slow_rate),
            sla_cooldown_ms: policy.sla_cooldown.map(|(floor, cap)| (millis(floor).max(1), millis(cap).max(1))),
        }
    }

    /// How long an untouched gate is worth keeping: it outlives every open period, the window
    /// and the probe lease, then some (an idle gate is dropped only long after its streak would
    /// have decayed anyway). The Redis key TTL; the memory gates' idle bound.
    pub fn key_ttl_ms(&self) -> u64 {
        2 * (self.max_cooldown_ms + 2 * self.bucket_ms + self.probe_ttl_ms) + 3_600_000
    }

    /// Slow-call rate that opens the gate (`None`: no slow-call channel).
    pub fn slow_rate(&self) -> Option<f64> {
        self.slow_rate
    }
    /// Floor and cap of SLA-adaptive open times, in milliseconds (`None`: off).
    pub fn sla_cooldown_ms(&self) -> Option<(u64, u64)> {
        self.sla_cooldown_ms
    }

    /// The effective consecutive threshold.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }
    /// First open duration, in milliseconds.
    pub fn cooldown_ms(&self) -> u64 {
        self.cooldown_ms
    }
    /// Cap of every open duration, in milliseconds.
    pub fn max_cooldown_ms(&self) -> u64 {
        self.max_cooldown_ms
    }
    /// Samples before the rate channel (and health evidence) counts.
    pub fn min_calls(&self) -> u32 {
        self.min_calls
    }
    /// Failure rate that opens the gate.
    pub fn fail_rate(&self) -> f64 {
        self.fail_rate
    }
    /// Width of one window bucket (half the window), in milliseconds.
    pub fn bucket_ms(&self) -> u64 {
        self.bucket_ms
    }
    /// Probe successes that close the gate.
    pub fn half_open_successes(&self) -> u32 {
        self.half_open_successes
    }
    /// Probe lease length, in milliseconds.
    pub fn probe_ttl_ms(&self) -> u64 {
        self.probe_ttl_ms
    }

    /// `min(cooldown × 2^(streak−1), max_cooldown)` for `streak ≥ 1` (the plain cooldown for
    /// streak 0), in milliseconds. With `max_cooldown = cooldown` nothing escalates.
    pub(crate) fn cooldown_eff_ms(&self, streak: u32) -> u64 {
        if streak <= 1 {
            return self.cooldown_ms.min(self.max_cooldown_ms);
        }
        let factor = 1u64.checked_shl(streak - 1).unwrap_or(u64::MAX);
        self.cooldown_ms.saturating_mul(factor).min(self.max_cooldown_ms)
    }
}
