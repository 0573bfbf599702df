//! Helpers shared by the gateway-core integration tests: policies from the seed's numbers and a
//! driver that applies an attempt outcome to a gate through the outcome table.

#![allow(dead_code, clippy::unwrap_used)]

use gateway_core::breaker::{Gate, GateParams, Reply};
use gateway_core::outcome::{BreakerEffect, OutcomeClass};
use gateway_core::policy::{BreakerConfig, BreakerPolicy};
use gateway_core::time::Timestamp;
use std::time::Duration;

/// The seed's breaker: fail_threshold 5, cooldown 60 s, defaults otherwise.
pub fn seed_breaker() -> BreakerConfig {
    BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() }
}

pub fn policy(config: BreakerConfig) -> BreakerPolicy {
    config.resolve("test.breaker").unwrap()
}

/// Gate parameters for a source with the given `max_concurrency` and 30 s timeouts.
pub fn params(config: BreakerConfig, max_concurrency: u32) -> GateParams {
    GateParams::new(&policy(config), max_concurrency, Duration::from_secs(30), Duration::from_secs(30))
}

pub fn secs(s: f64) -> Timestamp {
    Timestamp::from_millis((s * 1000.0).round() as u64)
}

/// Applies the breaker effect of `class` for an attempt admitted at `epoch`, as every call loop
/// does: through the outcome table, never a hand-written match. `None` when the gate is not told
/// (and a probe would release its lease instead).
pub fn record(gate: &mut Gate, p: &GateParams, epoch: u64, now: Timestamp, class: OutcomeClass) -> Option<Reply> {
    match class.effects().breaker {
        BreakerEffect::RecordSuccess { real } => Some(gate.record_success(p, epoch, now, real)),
        BreakerEffect::RecordFailure => Some(gate.record_failure(p, epoch, now)),
        BreakerEffect::ForceOpen => Some(gate.force_open(p, now)),
        BreakerEffect::Nothing => None,
    }
}

/// One whole attempt at `now`: `try_enter`, then the outcome if admitted. Returns the entry.
pub fn attempt(gate: &mut Gate, p: &GateParams, now: Timestamp, class: OutcomeClass) -> gateway_core::Entry {
    let entry = gate.try_enter(p, now);
    if entry.is_admitted() && record(gate, p, entry.reply.epoch, now, class).is_none() && entry.verdict == gateway_core::Verdict::Probe {
        gate.release_probe(p, entry.reply.epoch, now);
    }
    entry
}
