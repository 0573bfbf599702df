//! Telemetry events: one per attempt, one per call, one per gate transition. Carried through the
//! [`Telemetry`](crate::ports::Telemetry) port; the soak checks its invariants from them.

use crate::admission::SkipReason;
use crate::breaker::{CircuitState, Transition};
use crate::outcome::OutcomeClass;
use crate::ports::SourceKey;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One attempt ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptEvent {
    /// The gate (scope, tenant, source) the attempt went through.
    pub key: SourceKey,
    /// Call id, unique in the process.
    pub call_id: u64,
    /// When the attempt started.
    pub started: Timestamp,
    /// Outcome class.
    pub class: OutcomeClass,
    /// Adapter detail (`http_503`, `watchdog`…).
    pub detail: String,
    /// Time from send to outcome.
    pub latency: Duration,
    /// Provider Retry-After, if any.
    pub retry_after: Option<Duration>,
    /// Whether it spent retry budget.
    pub consumed_budget: bool,
    /// Whether it held the probe lease.
    pub probe: bool,
    /// The gate state the attempt was admitted in.
    pub admitted_in: CircuitState,
    /// The incarnation of the gate that admitted it (0: none did).
    #[serde(default)]
    pub incarnation: u64,
    /// The source's health EWMA after this attempt (in its partition).
    pub health: f64,
    /// The source's AIMD limit after this attempt (in its partition; none when unpaced).
    pub aimd_limit: Option<f64>,
    /// The tokens the provider said the attempt used (its `usage`: a whole answer's, or a
    /// stream's last; input and output), when it said.
    #[serde(default)]
    pub usage: Option<crate::request::Usage>,
}

/// Why a source did not serve a call, as reported in terminal errors and call events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceReason {
    /// Skipped at admission.
    Skipped(SkipReason),
    /// Attempted and ended with this class and detail.
    Attempted {
        /// Outcome class.
        class: OutcomeClass,
        /// Adapter detail.
        detail: String,
    },
}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallResult {
    /// A response was returned.
    Ok,
    /// The retry budget ran out.
    RetryExhausted,
    /// Every source was refused by the breaker side, with `circuit_open = fail_fast`.
    CircuitOpen,
    /// Quota-blocked with `quota_full = fail_fast`.
    QuotaExhausted,
    /// Every source that could serve the call asked, by a 429's Retry-After, to wait past its
    /// stall budget.
    RateLimited,
    /// Waited past the stall bound.
    Stalled,
    /// The payload was rejected by a provider.
    RequestRejected,
    /// The structured-output ladder ran out.
    StructuredExhausted,
    /// The gate or quota backend could not answer an admission question.
    BackendUnavailable,
    /// The application dropped the call.
    Cancelled,
    /// A stream broke off after its commit point (what reached the caller cannot be retried).
    StreamBroken,
}

impl CallResult {
    /// The telemetry name: `ok`, `retry_exhausted`, `circuit_open`, …
    pub const fn as_str(self) -> &'static str {
        match self {
            CallResult::Ok => "ok",
            CallResult::RetryExhausted => "retry_exhausted",
            CallResult::CircuitOpen => "circuit_open",
            CallResult::QuotaExhausted => "quota_exhausted",
            CallResult::RateLimited => "rate_limited",
            CallResult::Stalled => "stalled",
            CallResult::RequestRejected => "request_rejected",
            CallResult::StructuredExhausted => "structured_exhausted",
            CallResult::BackendUnavailable => "backend_unavailable",
            CallResult::Cancelled => "cancelled",
            CallResult::StreamBroken => "stream_broken",
        }
    }
}

/// One call ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallEvent {
    /// Scope of the call.
    pub scope: String,
    /// The tenant the call was made for, if any (whatever the scope's isolation).
    pub tenant: Option<String>,
    /// Call id, unique in the process.
    pub call_id: u64,
    /// When the call started.
    pub started: Timestamp,
    /// How it ended.
    pub result: CallResult,
    /// Attempts sent.
    pub attempts: u32,
    /// Attempts that spent retry budget.
    pub budget_attempts: u32,
    /// Structured re-asks.
    pub reasks: u32,
    /// Per-source reasons, in the order they arose.
    pub reasons: Vec<(String, SourceReason)>,
    /// Time spent not attempting.
    pub waited: Duration,
    /// Whole call time.
    pub elapsed: Duration,
}

/// A gate changed state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateEvent {
    /// The gate.
    pub key: SourceKey,
    /// When (by the gate backend's clock).
    pub at: Timestamp,
    /// What changed.
    pub transition: Transition,
    /// The gate's incarnation: epochs compare within one (a backend that lost the gate starts a
    /// new one, at epoch 0).
    #[serde(default)]
    pub incarnation: u64,
    /// Epoch after the change.
    pub epoch: u64,
    /// `retry_after` right after the change.
    pub retry_after: Duration,
}
