//! The outcome classes of one attempt and, in [`OUTCOME_TABLE`], what each one does (SPEC §2).
//!
//! Every loop (chat, embeddings, the soak, the server) consults this one table through
//! [`OutcomeClass::effects`] instead of matching on classes itself, so the rules cannot drift
//! apart between call kinds or backends.

use crate::breaker::{GateOp, Reply, SuccessKind};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// What an upstream adapter reports for one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeClass {
    /// A usable answer (HTTP 200 with content).
    Success,
    /// HTTP 429: the provider's scheduling signal, not a fault of the source.
    RateLimited,
    /// Timeout, connect/reset, 5xx, empty completion, watchdog cut-off.
    Transient,
    /// 401, 403, insufficient balance or quota, unknown model: the source cannot serve anyone.
    SourceDead,
    /// 400/413/422 from a provider that did respond: the payload itself is bad.
    RequestRejected,
    /// Structured output that did not parse or match its schema.
    ResultInvalid,
}

impl OutcomeClass {
    /// Every class, in table order.
    pub const ALL: [OutcomeClass; 6] = [
        OutcomeClass::Success,
        OutcomeClass::RateLimited,
        OutcomeClass::Transient,
        OutcomeClass::SourceDead,
        OutcomeClass::RequestRejected,
        OutcomeClass::ResultInvalid,
    ];

    /// The row of [`OUTCOME_TABLE`] for this class.
    pub const fn effects(self) -> &'static Effects {
        &OUTCOME_TABLE[self as usize]
    }

    /// The snake_case name used in telemetry and configuration.
    pub const fn as_str(self) -> &'static str {
        match self {
            OutcomeClass::Success => "success",
            OutcomeClass::RateLimited => "rate_limited",
            OutcomeClass::Transient => "transient",
            OutcomeClass::SourceDead => "source_dead",
            OutcomeClass::RequestRejected => "request_rejected",
            OutcomeClass::ResultInvalid => "result_invalid",
        }
    }
}

impl fmt::Display for OutcomeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an outcome does to the shared breaker gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerEffect {
    /// A success of this kind (a `Real` one slower than the scope's `slow_call_s` is `Slow`).
    Success(SuccessKind),
    /// A failure.
    Failure,
    /// `ForceOpen`: the source is dead.
    ForceOpen,
    /// The gate is not told (and a probe lease is released).
    Nothing,
}

/// What an outcome feeds the health EWMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthEffect {
    /// Counts as a success.
    Ok,
    /// Counts as a failure.
    Fail,
    /// Not fed: a bad payload says nothing about the service.
    Nothing,
}

/// What an outcome tells the account's learned limit (SPEC §4, `aimd::AccountPacer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AimdEffect {
    /// A real success: the limit grows (and a ceiling it passed is forgotten).
    Increase,
    /// A 429: a cut, a refused ceiling or noise, as the account's rules decide.
    Decrease,
    /// An answer that says nothing of capacity but times a round trip (`srtt`).
    RoundTrip,
    /// Nothing: no answer, or one whose timing is not a round trip's.
    Nothing,
}

/// Which per-call budget an outcome spends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetEffect {
    /// One of the `max_retries` budget-consuming attempts.
    Retry,
    /// One of the `structured_max_retries` re-asks of the structured ladder (§8).
    StructuredReask,
    /// No budget: a 429 is the provider's pushback (the `baseline` preset's table, like the
    /// old library, spends a retry on it: [`OutcomeTable::pushback_spends_retries`]).
    Pushback,
    /// No budget at all (success ends the call, a rejected payload ends it too).
    Nothing,
}

/// What the call loop does after the attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextStep {
    /// Return the response to the application.
    Return,
    /// Sleep `backoff(k)` (at least the Retry-After when `honour_retry_after`), then pick again.
    BackOffAndRepick {
        /// Whether the provider's Retry-After is a floor of the sleep.
        honour_retry_after: bool,
    },
    /// Pick again at once, no sleep.
    RepickNow,
    /// End the call with `RequestRejected`.
    EndCall,
    /// Ask again (through the normal pick) for a result that parses.
    Reask,
}

/// One row of the outcome table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effects {
    /// The class this row describes.
    pub class: OutcomeClass,
    /// What the breaker is told.
    pub breaker: BreakerEffect,
    /// What the health EWMA is fed.
    pub health: HealthEffect,
    /// What the AIMD limit does.
    pub aimd: AimdEffect,
    /// Which budget the attempt spends.
    pub budget: BudgetEffect,
    /// Whether the attempt counts toward the call's `attempt_fails` (in-call demotion).
    pub counts_as_call_failure: bool,
    /// What the call loop does next.
    pub next: NextStep,
}

impl Effects {
    /// Whether the attempt enters the rate window: real successes as an attempt, failures as an
    /// attempt and a failure. Derived from [`Effects::breaker`] so the two cannot disagree.
    pub const fn window(&self) -> WindowEffect {
        match self.breaker {
            BreakerEffect::Success(SuccessKind::Real | SuccessKind::Slow) => WindowEffect::Attempt,
            BreakerEffect::Failure => WindowEffect::AttemptAndFailure,
            BreakerEffect::Success(SuccessKind::Unusable) | BreakerEffect::ForceOpen | BreakerEffect::Nothing => WindowEffect::Nothing,
        }
    }

    /// The operation that tells the gate how an attempt admitted with `admitted` ended: the
    /// row's breaker effect, a real success slower than `slow_call` (the whole attempt, or a
    /// stream's time to its commit point: `responsiveness`) as slow, and for a probe whose
    /// outcome tells the gate nothing (429, a rejected payload: it proves nothing about the
    /// source) the lease's release; every other class settles a probe through its effect
    /// (ResultInvalid counts as a probe success: the provider is up). `None`: the gate is not
    /// told, or `admitted` is a denial (no attempt was made). The one place a class becomes a
    /// gate operation.
    pub fn gate_op(&self, admitted: &Reply, responsiveness: Duration, slow_call: Option<Duration>) -> Option<GateOp> {
        if !admitted.is_admitted() {
            return None;
        }
        let fence = admitted.fence();
        match self.breaker {
            BreakerEffect::Success(SuccessKind::Real) if slow_call.is_some_and(|slow| responsiveness > slow) => {
                Some(GateOp::Success { fence, kind: SuccessKind::Slow })
            }
            BreakerEffect::Success(kind) => Some(GateOp::Success { fence, kind }),
            BreakerEffect::Failure => Some(GateOp::Failure { fence }),
            BreakerEffect::ForceOpen => Some(GateOp::ForceOpen),
            BreakerEffect::Nothing if admitted.is_probe() => Some(GateOp::Release { fence }),
            BreakerEffect::Nothing => None,
        }
    }
}

/// What an attempt adds to the breaker's rate window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowEffect {
    /// One attempt.
    Attempt,
    /// One attempt and one failure.
    AttemptAndFailure,
    /// Nothing.
    Nothing,
}

/// SPEC §2, one row per [`OutcomeClass`] in declaration order.
pub(crate) const OUTCOME_TABLE: [Effects; 6] = [
    Effects {
        class: OutcomeClass::Success,
        breaker: BreakerEffect::Success(SuccessKind::Real),
        health: HealthEffect::Ok,
        aimd: AimdEffect::Increase,
        budget: BudgetEffect::Nothing,
        counts_as_call_failure: false,
        next: NextStep::Return,
    },
    Effects {
        class: OutcomeClass::RateLimited,
        breaker: BreakerEffect::Nothing,
        health: HealthEffect::Fail,
        aimd: AimdEffect::Decrease,
        budget: BudgetEffect::Pushback,
        counts_as_call_failure: true,
        next: NextStep::BackOffAndRepick { honour_retry_after: true },
    },
    Effects {
        class: OutcomeClass::Transient,
        breaker: BreakerEffect::Failure,
        health: HealthEffect::Fail,
        aimd: AimdEffect::Nothing,
        budget: BudgetEffect::Retry,
        counts_as_call_failure: true,
        next: NextStep::BackOffAndRepick { honour_retry_after: false },
    },
    Effects {
        class: OutcomeClass::SourceDead,
        breaker: BreakerEffect::ForceOpen,
        health: HealthEffect::Fail,
        aimd: AimdEffect::Nothing,
        budget: BudgetEffect::Retry,
        counts_as_call_failure: true,
        next: NextStep::RepickNow,
    },
    Effects {
        class: OutcomeClass::RequestRejected,
        breaker: BreakerEffect::Nothing,
        health: HealthEffect::Nothing,
        aimd: AimdEffect::Nothing,
        budget: BudgetEffect::Nothing,
        counts_as_call_failure: false,
        next: NextStep::EndCall,
    },
    Effects {
        class: OutcomeClass::ResultInvalid,
        breaker: BreakerEffect::Success(SuccessKind::Unusable),
        // A source whose answers fail the caller's structure is a worse pick for the next
        // structured call (the breaker and the window never hear of it: the provider is up).
        health: HealthEffect::Fail,
        aimd: AimdEffect::RoundTrip,
        budget: BudgetEffect::StructuredReask,
        counts_as_call_failure: false,
        next: NextStep::Reask,
    },
];

/// A whole outcome table: [`OutcomeTable::SPEC`], or a preset's variation of it (the call
/// machine reads which budget an outcome spends and whether it counts toward in-call demotion
/// from it; a preset changes those rows instead of flagging the loop).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutcomeTable([Effects; 6]);

impl OutcomeTable {
    /// The SPEC's table.
    pub const SPEC: OutcomeTable = OutcomeTable(OUTCOME_TABLE);

    /// The row of `class`.
    pub const fn effects(&self, class: OutcomeClass) -> &Effects {
        &self.0[class as usize]
    }

    /// The table in which the provider's pushback (a 429) spends a retry, as the old library's
    /// loop did, instead of being free.
    #[must_use]
    pub const fn pushback_spends_retries(mut self) -> Self {
        let mut i = 0;
        while i < self.0.len() {
            if matches!(self.0[i].budget, BudgetEffect::Pushback) {
                self.0[i].budget = BudgetEffect::Retry;
            }
            i += 1;
        }
        self
    }

    /// The table in which no outcome counts toward a call's failures of a source: no in-call
    /// demotion.
    #[must_use]
    pub const fn without_call_failures(mut self) -> Self {
        let mut i = 0;
        while i < self.0.len() {
            self.0[i].counts_as_call_failure = false;
            i += 1;
        }
        self
    }

    /// Whether an attempt of `class` spends one of the call's `max_retries`.
    pub const fn spends_retry(&self, class: OutcomeClass) -> bool {
        matches!(self.effects(class).budget, BudgetEffect::Retry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::Fence;

    #[test]
    fn table_rows_are_in_class_order() {
        for class in OutcomeClass::ALL {
            assert_eq!(class.effects().class, class);
        }
    }

    #[test]
    fn only_real_outcomes_enter_the_window() {
        let window: Vec<_> = OutcomeClass::ALL.iter().map(|c| (c.as_str(), c.effects().window())).collect();
        assert_eq!(
            window,
            [
                ("success", WindowEffect::Attempt),
                ("rate_limited", WindowEffect::Nothing),
                ("transient", WindowEffect::AttemptAndFailure),
                ("source_dead", WindowEffect::Nothing),
                ("request_rejected", WindowEffect::Nothing),
                ("result_invalid", WindowEffect::Nothing),
            ]
        );
    }

    #[test]
    fn pushback_and_bad_payloads_release_a_probe_everything_else_settles_it() {
        let admission = |verdict| Reply {
            verdict: Some(verdict),
            state: crate::breaker::CircuitState::HalfOpen,
            incarnation: 9,
            epoch: 3,
            retry_after: Duration::ZERO,
            transition: None,
            fenced: false,
        };
        let probe = admission(crate::breaker::Verdict::Probe);
        let releasing: Vec<_> = OutcomeClass::ALL
            .into_iter()
            .filter(|c| {
                c.effects().gate_op(&probe, Duration::ZERO, None) == Some(GateOp::Release { fence: Fence { incarnation: 9, epoch: 3 } })
            })
            .collect();
        assert_eq!(releasing, [OutcomeClass::RateLimited, OutcomeClass::RequestRejected]);
        let allowed = Reply { state: crate::breaker::CircuitState::Closed, ..admission(crate::breaker::Verdict::Allowed) };
        for class in [OutcomeClass::RateLimited, OutcomeClass::RequestRejected] {
            assert_eq!(class.effects().gate_op(&allowed, Duration::ZERO, None), None, "{class}: an allowed attempt releases nothing");
        }
        let denied = admission(crate::breaker::Verdict::Denied);
        for class in OutcomeClass::ALL {
            assert_eq!(class.effects().gate_op(&denied, Duration::ZERO, None), None, "{class}: a denial made no attempt");
        }
        let slow = OutcomeClass::Success.effects().gate_op(&allowed, Duration::from_secs(9), Some(Duration::from_secs(5)));
        assert_eq!(slow, Some(GateOp::Success { fence: Fence { incarnation: 9, epoch: 3 }, kind: SuccessKind::Slow }));
    }

    #[test]
    fn rate_limited_is_pushback_and_spends_no_retry_of_its_own() {
        assert_eq!(OutcomeClass::RateLimited.effects().budget, BudgetEffect::Pushback);
        assert_eq!(OutcomeClass::Transient.effects().budget, BudgetEffect::Retry);
    }

    #[test]
    fn names_round_trip_through_serde() {
        for class in OutcomeClass::ALL {
            let json = serde_json::to_string(&class).unwrap();
            assert_eq!(json, format!("\"{}\"", class.as_str()));
            assert_eq!(serde_json::from_str::<OutcomeClass>(&json).unwrap(), class);
        }
    }
}
