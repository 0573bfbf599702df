//! The breaker section of a scope: as deserialized, and validated (SPEC §3).

use super::error::{DAY_S, Fields, PolicyError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The breaker section of a scope as deserialized: every field optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// Consecutive failures that open the gate (*required*).
    pub fail_threshold: Option<u32>,
    /// First open duration in seconds (*required*).
    pub cooldown_s: Option<f64>,
    /// Window samples before the rate channel may open (default 10).
    pub min_calls: Option<u32>,
    /// Window failure rate that opens the gate (default 0.6).
    pub fail_rate: Option<f64>,
    /// Rate window length in seconds, two buckets of half each (default 60).
    pub window_s: Option<f64>,
    /// Cap of the escalated open duration (default max(300, cooldown_s)).
    pub max_cooldown_s: Option<f64>,
    /// Probe successes that close a half-open gate (default 1).
    pub half_open_successes: Option<u32>,
    /// Probe lease length in seconds (default derived from the sources' timeouts).
    pub probe_ttl_s: Option<f64>,
    /// Attempts slower than this many seconds count as slow (default: no slow-call channel).
    pub slow_call_s: Option<f64>,
    /// Window slow-call rate that opens the gate (default 0.5; with `slow_call_s`).
    pub slow_rate: Option<f64>,
    /// Whether open times adapt to the window's success rate R:
    /// `clamp(base × (2 − R), sla_min_cooldown_s, sla_max_cooldown_s)` (default false).
    pub sla_adaptive: Option<bool>,
    /// Floor of an SLA-adaptive open time (default `cooldown_s`).
    pub sla_min_cooldown_s: Option<f64>,
    /// Cap of an SLA-adaptive open time (default `max_cooldown_s`; at most that).
    pub sla_max_cooldown_s: Option<f64>,
}

/// Validated breaker policy of one scope (SPEC §3).
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerPolicy {
    /// Configured consecutive threshold before raising by concurrency.
    pub fail_threshold: u32,
    /// First open duration; the consecutive channel always opens for exactly this long.
    pub cooldown: Duration,
    /// Window samples before the rate channel may open, and before health evidence suppresses
    /// the consecutive channel.
    pub min_calls: u32,
    /// Window failure rate that opens the gate.
    pub fail_rate: f64,
    /// Rate window length (two fixed buckets of half each).
    pub window: Duration,
    /// Cap of every open duration and so of every `retry_after`.
    pub max_cooldown: Duration,
    /// Probe successes that close a half-open gate.
    pub half_open_successes: u32,
    /// Probe lease length; `None` derives it from the sources' timeouts.
    pub probe_ttl: Option<Duration>,
    /// The slow-call channel: attempts slower than this are slow (`None`: no channel).
    pub slow_call: Option<Duration>,
    /// Window slow-call rate that opens the gate.
    pub slow_rate: f64,
    /// SLA-adaptive open times: `(floor, cap)` of `base × (2 − R)` (`None`: off).
    pub sla_cooldown: Option<(Duration, Duration)>,
}

impl BreakerPolicy {
    /// The consecutive threshold raised by a concurrency: `max(fail_threshold, raise_by × 2)`
    /// (SPEC §3: a source's own `max_concurrency`; the `baseline` preset raises it by the scope's).
    pub fn raised_threshold(&self, raise_by: u32) -> u32 {
        self.fail_threshold.max(raise_by.saturating_mul(2))
    }
}

impl BreakerConfig {
    /// `over`'s keys where it sets them, this section's elsewhere (a tier's overlay).
    pub(crate) fn overlaid(&self, over: &BreakerConfig) -> BreakerConfig {
        BreakerConfig {
            fail_threshold: over.fail_threshold.or(self.fail_threshold),
            cooldown_s: over.cooldown_s.or(self.cooldown_s),
            min_calls: over.min_calls.or(self.min_calls),
            fail_rate: over.fail_rate.or(self.fail_rate),
            window_s: over.window_s.or(self.window_s),
            max_cooldown_s: over.max_cooldown_s.or(self.max_cooldown_s),
            half_open_successes: over.half_open_successes.or(self.half_open_successes),
            probe_ttl_s: over.probe_ttl_s.or(self.probe_ttl_s),
            slow_call_s: over.slow_call_s.or(self.slow_call_s),
            slow_rate: over.slow_rate.or(self.slow_rate),
            sla_adaptive: over.sla_adaptive.or(self.sla_adaptive),
            sla_min_cooldown_s: over.sla_min_cooldown_s.or(self.sla_min_cooldown_s),
            sla_max_cooldown_s: over.sla_max_cooldown_s.or(self.sla_max_cooldown_s),
        }
    }

    /// Fills defaults and validates; `prefix` is the key of this section (e.g. `chat.breaker`).
    pub fn resolve(&self, prefix: &str) -> Result<BreakerPolicy, PolicyError> {
        let f = Fields { prefix };
        let fail_threshold = f.int("fail_threshold", f.required("fail_threshold", self.fail_threshold)?, 1, 100_000)?;
        let cooldown_s = f.required("cooldown_s", self.cooldown_s)?;
        let cooldown = f.secs("cooldown_s", cooldown_s, 0.001, DAY_S)?;
        let max_cooldown_s = self.max_cooldown_s.unwrap_or(cooldown_s.max(300.0));
        let max_cooldown = f.secs("max_cooldown_s", max_cooldown_s, cooldown_s, 7.0 * DAY_S)?;
        Ok(BreakerPolicy {
            fail_threshold,
            cooldown,
            min_calls: f.int("min_calls", self.min_calls.unwrap_or(10), 1, 1_000_000)?,
            fail_rate: f.fraction("fail_rate", self.fail_rate.unwrap_or(0.6))?,
            window: f.secs("window_s", self.window_s.unwrap_or(60.0), 0.002, DAY_S)?,
            max_cooldown,
            half_open_successes: f.int("half_open_successes", self.half_open_successes.unwrap_or(1), 1, 1000)?,
            probe_ttl: self.probe_ttl_s.map(|s| f.secs("probe_ttl_s", s, 0.001, DAY_S)).transpose()?,
            slow_call: self.slow_call_s.map(|s| f.secs("slow_call_s", s, 0.001, DAY_S)).transpose()?,
            slow_rate: f.fraction("slow_rate", self.slow_rate.unwrap_or(0.5))?,
            sla_cooldown: if self.sla_adaptive.unwrap_or(false) {
                let max_s = max_cooldown.as_secs_f64();
                let cap_s = self.sla_max_cooldown_s.unwrap_or(max_s);
                let cap = f.secs("sla_max_cooldown_s", cap_s, 0.001, max_s)?;
                Some((f.secs("sla_min_cooldown_s", self.sla_min_cooldown_s.unwrap_or(cooldown_s.min(cap_s)), 0.001, cap_s)?, cap))
            } else {
                None
            },
        })
    }
}
