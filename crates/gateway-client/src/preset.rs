//! Policy presets: `default` (SPEC §3–§8 as written) and `baseline`, the old library that the
//! soak compares against (SPEC §12): round-robin, the consecutive channel only with its
//! threshold raised by the scope's concurrency, a fixed cooldown, 429 spending the retry budget,
//! no AIMD, no in-call demotion, one structured re-ask. The old breaker is expressed as values
//! of the production breaker's parameters; the breaker has no knob of its own for it.

use gateway_core::policy::ScopePolicy;
use gateway_core::select::SelectorKind;
use serde::{Deserialize, Serialize};

/// A named set of behaviours applied on top of a scope's configured policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// The behaviour of the SPEC.
    #[default]
    Default,
    /// The old library, for comparison only.
    Baseline,
}

/// The loop behaviours that are not policy values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Behaviour {
    /// A 429 spends retry budget (old library) instead of being free pushback.
    pub rate_limited_consumes_budget: bool,
    /// The AIMD pacer limits in-flight attempts per source.
    pub aimd: bool,
    /// A source that failed twice in a call moves to the tail.
    pub demotion: bool,
}

impl Preset {
    /// Applies the preset to `policy` and returns the loop behaviours.
    pub fn apply(self, policy: &mut ScopePolicy) -> Behaviour {
        match self {
            Preset::Default => Behaviour { rate_limited_consumes_budget: false, aimd: true, demotion: true },
            Preset::Baseline => {
                policy.selector = SelectorKind::RoundRobin;
                let breaker = &mut policy.breaker;
                // No rate channel: its sample count is beyond reach, which also takes away the
                // health evidence that holds the consecutive channel back.
                breaker.min_calls = u32::MAX;
                // No escalation: every open time is the first.
                breaker.max_cooldown = breaker.cooldown;
                // The threshold raised by the scope's concurrency (the per-source raise of SPEC
                // §3 is below it whenever a source's concurrency is below the scope's).
                breaker.fail_threshold = breaker.raised_threshold(policy.concurrency);
                policy.structured_max_retries = policy.structured_max_retries.min(1);
                Behaviour { rate_limited_consumes_budget: true, aimd: false, demotion: false }
            }
        }
    }
}
