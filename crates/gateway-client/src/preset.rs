//! Policy presets: `default` (SPEC §3–§8 as written) and `baseline`, the old library that the
//! soak compares against (SPEC §12): round-robin, the consecutive channel only with its
//! threshold raised by the scope's concurrency, a fixed cooldown, 429 spending the retry budget,
//! no AIMD, no in-call demotion, one structured re-ask. The old breaker is expressed as values
//! of the production breaker's parameters, the old loop as rows of the outcome table, and no
//! AIMD as no pacer: neither the breaker nor the call machine has a knob of its own for it.

use gateway_core::aimd::PacerParams;
use gateway_core::outcome::OutcomeTable;
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

/// The baseline's outcome table: a 429 spends a retry, and no outcome counts toward in-call
/// demotion (the old library had none).
const BASELINE_OUTCOMES: OutcomeTable = OutcomeTable::SPEC.pushback_spends_retries().without_call_failures();

impl Preset {
    /// Applies the preset's policy values to `policy` and returns the outcome table its calls
    /// run on.
    pub fn apply(self, policy: &mut ScopePolicy) -> OutcomeTable {
        match self {
            Preset::Default => OutcomeTable::SPEC,
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
                BASELINE_OUTCOMES
            }
        }
    }

    /// The AIMD pacer of `policy`'s provider accounts under this preset (`None`: unpaced).
    pub fn pacer(self, policy: &ScopePolicy) -> Option<PacerParams> {
        match self {
            Preset::Default => Some(policy.pacer_params()),
            Preset::Baseline => None,
        }
    }
}
