//! How a call ends when it cannot return a response: typed terminal errors, each with the
//! per-source reasons and the attempt chain. They mean the library's call-level budget is spent;
//! what the application does next is a task-level decision.

use gateway_core::outcome::OutcomeClass;
use gateway_core::ports::BackendError;
use gateway_core::telemetry::{CallResult, SourceReason};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// One attempt of a call.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptRecord {
    /// The source tried.
    pub source: String,
    /// How it ended.
    pub class: OutcomeClass,
    /// The adapter's detail.
    pub detail: String,
    /// Send to outcome.
    pub latency: Duration,
    /// Whether it held the probe lease.
    pub probe: bool,
}

/// What a failed call tried and why each source did not serve it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallReport {
    /// The last reason per source.
    pub reasons: BTreeMap<String, SourceReason>,
    /// Every attempt, in order.
    pub attempts: Vec<AttemptRecord>,
    /// Time the call spent not attempting.
    pub waited: Duration,
    /// Why only one source could serve the call, if it was pinned (`source s1 holds
    /// previous_response_id resp_1`): no other source was tried.
    pub pinned: Option<String>,
}

impl fmt::Display for CallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(pinned) = &self.pinned {
            write!(f, "only {pinned}, so no other source may serve the call; ")?;
        }
        write!(f, "{} attempts, waited {:.3}s; reasons:", self.attempts.len(), self.waited.as_secs_f64())?;
        if self.reasons.is_empty() {
            f.write_str(" none")?;
        }
        for (source, reason) in &self.reasons {
            match reason {
                SourceReason::Skipped(skip) => write!(f, " {source}={skip}")?,
                SourceReason::Attempted { class, detail } => write!(f, " {source}={class}({detail})")?,
            }
        }
        Ok(())
    }
}

/// Why all sources were exhausted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exhausted {
    /// Some source was only quota- or AIMD-blocked and `quota_full = fail_fast`.
    QuotaExhausted,
    /// Waited past the stall bound with no progress in the scope.
    Stalled,
}

impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Exhausted::QuotaExhausted => "quota_exhausted",
            Exhausted::Stalled => "stalled",
        })
    }
}

/// A call that ended without a response.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The retry budget (1 + `max_retries` budget-consuming attempts) is spent.
    #[error("retry budget exhausted: {report}")]
    RetryExhausted {
        /// What was tried.
        report: CallReport,
    },
    /// Every source was refused by the breaker side and `circuit_open = fail_fast`.
    #[error("every source's circuit is open (retry after {:.3}s): {report}", retry_after.as_secs_f64())]
    CircuitOpen {
        /// Time until a certain retry moment (0 when a probe may answer any moment).
        retry_after: Duration,
        /// What was tried.
        report: CallReport,
    },
    /// No source could serve the call (quota with `quota_full = fail_fast`, or stalled).
    #[error("all sources exhausted ({reason}): {report}")]
    AllSourcesExhausted {
        /// Which exhaustion.
        reason: Exhausted,
        /// What was tried.
        report: CallReport,
    },
    /// Every source the breaker did not refuse answered 429 with a Retry-After longer than the
    /// call's remaining stall budget: the call ends at once instead of waiting in vain.
    #[error("rate limited: the sources ask to retry after {:.3}s, past the call's stall budget: {report}", retry_after.as_secs_f64())]
    RateLimited {
        /// The soonest moment a source said it would take the call again.
        retry_after: Duration,
        /// What was tried.
        report: CallReport,
    },
    /// A provider rejected the payload itself (400/413/422, an overlong context, a 404 for the
    /// endpoint the request chose): no source will take it.
    #[error("request rejected by {source_name}: {detail}")]
    RequestRejected {
        /// The source that answered.
        source_name: String,
        /// Its detail.
        detail: String,
        /// The provider's own error answer, as it came.
        provider_error: Option<Box<gateway_core::request::ProviderError>>,
        /// What was tried.
        report: CallReport,
    },
    /// The structured-output ladder ran out of re-asks.
    #[error("structured output still invalid after the allowed re-asks: {report}")]
    StructuredExhausted {
        /// What was tried.
        report: CallReport,
    },
    /// The gate or quota backend could not answer an admission question (fail closed).
    #[error("gate backend unavailable: {error}")]
    BackendUnavailable {
        /// The backend's error.
        error: BackendError,
        /// What was tried.
        report: CallReport,
    },
    /// The call named a scope the client does not have.
    #[error("unknown scope {scope:?} (configured: {known})")]
    UnknownScope {
        /// The scope asked for.
        scope: String,
        /// The configured scopes.
        known: String,
    },
    /// A stream was asked of a request of a kind that does not stream (only chat, responses and
    /// legacy completions do).
    #[error("{kind} requests cannot be streamed")]
    NotStreamable {
        /// The request's kind.
        kind: gateway_core::request::Kind,
    },
    /// A call taken whole was answered by a stream that broke off after its commit point.
    #[error("the answer from {source_name} broke off: {detail}")]
    StreamBroken {
        /// The source that was streaming.
        source_name: String,
        /// How it broke off.
        detail: String,
    },
    /// The scope does not serve the request's kind (its `kinds`): refused before any attempt,
    /// so a request a provider would answer 404 never reaches one.
    #[error("scope {scope:?} does not serve {kind} requests (kinds: {served})")]
    KindNotServed {
        /// The scope.
        scope: String,
        /// The request's kind.
        kind: gateway_core::request::Kind,
        /// The kinds the scope serves.
        served: String,
    },
    /// No source of the scope can carry the request: each speaks another protocol than the
    /// request's kind, and the request uses something that protocol cannot express (or its kind
    /// has no form there). Refused before any attempt.
    #[error("no source of scope {scope:?} can carry this {kind} request: {reasons}")]
    NoSourceCarries {
        /// The scope.
        scope: String,
        /// The request's kind.
        kind: gateway_core::request::Kind,
        /// Each source, its protocol, and why it cannot.
        reasons: String,
    },
    /// The call ended `CircuitOpen`, `AllSourcesExhausted` or `RateLimited` in its scope and
    /// failed again in the scope's fallback: both chains. (A fallback that refuses the call
    /// before it starts leaves the primary's error.)
    #[error("{primary}; then in fallback scope {fallback_scope:?}: {fallback}")]
    FallbackFailed {
        /// The scope called.
        scope: String,
        /// How the call ended there.
        primary: Box<CallError>,
        /// The fallback scope.
        fallback_scope: String,
        /// How it ended there.
        fallback: Box<CallError>,
    },
    /// The request refers to state a provider keeps (a previous response, a conversation, a
    /// file) that the gateway cannot route it to: refused before any attempt, since no other
    /// source holds it.
    #[error("scope {scope:?} cannot route the request's {field} {id:?}: {reason}")]
    Unroutable {
        /// The scope.
        scope: String,
        /// The id, as given.
        id: String,
        /// The request field naming it (`previous_response_id`, `conversation`, `file_id`…; a
        /// route's own id is `id`).
        field: String,
        /// Why.
        reason: Unroutable,
    },
    /// The scope would not take the call's tenant.
    #[error("scope {scope:?} refuses tenant {tenant:?}: {reason}")]
    TenantRefused {
        /// The scope.
        scope: String,
        /// The tenant asked for, as given.
        tenant: String,
        /// Why.
        reason: TenantRefusal,
    },
}

/// Why a request's state cannot be reached.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unroutable {
    /// No source is known to hold it: it was not made through this gateway, it was deleted,
    /// or its affinity expired.
    #[error("no source is known to hold it (it was not made through this gateway, was deleted, or has expired)")]
    Unknown,
    /// Another scope's source holds it.
    #[error("it is held by source {source_name:?} of scope {scope:?}: call that scope")]
    OtherScope {
        /// That scope.
        scope: String,
        /// Its source.
        source_name: String,
    },
    /// The request also names state that another source holds: no one source can serve it.
    #[error("it is held by source {source_name:?}, but {other} is held by source {other_source:?}")]
    Split {
        /// The source holding this id.
        source_name: String,
        /// The other id.
        other: String,
        /// The source holding the other id.
        other_source: String,
    },
    /// The source that holds it is no longer one of the scope's.
    #[error("it is held by source {source_name:?}, which the scope no longer has")]
    SourceGone {
        /// The source.
        source_name: String,
    },
    /// The affinity map could not answer.
    #[error("the affinity map could not answer: {0}")]
    Backend(BackendError),
}

/// Why a scope refused a call's tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TenantRefusal {
    /// The name cannot be a key.
    #[error("a tenant name is 1 to 64 characters of A-Z, a-z, 0-9, '_' and '-' (it becomes part of the gate keys)")]
    Malformed,
    /// No tier names it and the scope rejects unknown tenants.
    #[error("the tenant has no tier and the scope rejects unknown tenants (unknown_tenant = \"reject\")")]
    Unknown,
    /// The call names no tenant and the scope rejects unknown tenants.
    #[error("the scope rejects unknown tenants (unknown_tenant = \"reject\"), so a call must name its tenant")]
    Missing,
    /// The scope keeps `max_tenants` tenants and every one has a call in flight.
    #[error("the scope keeps max_tenants tenants and every one has a call in flight (raise max_tenants)")]
    Full,
}

impl CallError {
    /// The telemetry result of this error (`None` for a call that never started; the
    /// fallback's for a failed fallback).
    pub fn result(&self) -> Option<CallResult> {
        Some(match self {
            CallError::RetryExhausted { .. } => CallResult::RetryExhausted,
            CallError::CircuitOpen { .. } => CallResult::CircuitOpen,
            CallError::AllSourcesExhausted { reason: Exhausted::QuotaExhausted, .. } => CallResult::QuotaExhausted,
            CallError::AllSourcesExhausted { reason: Exhausted::Stalled, .. } => CallResult::Stalled,
            CallError::RateLimited { .. } => CallResult::RateLimited,
            CallError::RequestRejected { .. } => CallResult::RequestRejected,
            CallError::StructuredExhausted { .. } => CallResult::StructuredExhausted,
            CallError::BackendUnavailable { .. } => CallResult::BackendUnavailable,
            CallError::FallbackFailed { fallback, .. } => return fallback.result(),
            CallError::StreamBroken { .. } => CallResult::StreamBroken,
            CallError::UnknownScope { .. }
            | CallError::KindNotServed { .. }
            | CallError::NoSourceCarries { .. }
            | CallError::NotStreamable { .. }
            | CallError::Unroutable { .. }
            | CallError::TenantRefused { .. } => {
                return None;
            }
        })
    }

    /// The telemetry result of an error of a call that started (the call loop's errors): the
    /// refusals that come before a call starts never reach its end, and read as
    /// `RequestRejected` (the call as asked cannot be served) should one ever do.
    pub(crate) fn result_of_started(&self) -> CallResult {
        self.result().unwrap_or(CallResult::RequestRejected)
    }

    /// The report of what was tried (none for a call that never started; the fallback's for a
    /// failed fallback, whose primary error keeps its own).
    pub fn report(&self) -> Option<&CallReport> {
        match self {
            CallError::RetryExhausted { report }
            | CallError::CircuitOpen { report, .. }
            | CallError::AllSourcesExhausted { report, .. }
            | CallError::RateLimited { report, .. }
            | CallError::RequestRejected { report, .. }
            | CallError::StructuredExhausted { report }
            | CallError::BackendUnavailable { report, .. } => Some(report),
            CallError::FallbackFailed { fallback, .. } => fallback.report(),
            CallError::UnknownScope { .. }
            | CallError::KindNotServed { .. }
            | CallError::NoSourceCarries { .. }
            | CallError::NotStreamable { .. }
            | CallError::StreamBroken { .. }
            | CallError::Unroutable { .. }
            | CallError::TenantRefused { .. } => None,
        }
    }
}
