//! How one attempt ended: its outcome (class, detail, Retry-After, the provider's error) and,
//! for a success, its response.

use super::Response;
use crate::outcome::OutcomeClass;
use serde_json::Value;
use std::time::Duration;

/// A provider's own error answer to a request it refused, passed on to the caller as it came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderError {
    /// The provider's status.
    pub status: u16,
    /// The provider's body (OpenAI's `{"error": {"message", "type", "param", "code"}}`).
    pub body: Value,
}

/// How one attempt ended: its class, a detail for telemetry (`http_503`, `watchdog`,
/// `connect_refused`…), the provider's Retry-After, if it gave one, and, for a refused request,
/// the provider's own error answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The outcome class.
    pub class: OutcomeClass,
    /// A short, key-free description.
    pub detail: String,
    /// Provider Retry-After (429), as a delay.
    pub retry_after: Option<Duration>,
    /// The provider's error answer, for a `RequestRejected`.
    pub provider_error: Option<Box<ProviderError>>,
    /// The source's answer to this call is more than the call can hold (`body_too_large`,
    /// `stream_too_large`): asking it again would bring the same, so the call tries it no more
    /// (SPEC §2). The class still says what the source is charged with.
    pub source_spent: bool,
    /// What the provider's rate-limit headers said of the account, if it sent any (boxed: an
    /// outcome travels in `Result`s, and most carry none).
    pub rate: Option<Box<super::RateSignal>>,
}

impl Outcome {
    /// An outcome of `class` with `detail`, without Retry-After or provider error.
    pub fn new(class: OutcomeClass, detail: impl Into<String>) -> Self {
        Outcome { class, detail: detail.into(), retry_after: None, provider_error: None, source_spent: false, rate: None }
    }

    /// The same outcome with the provider's rate signal.
    pub fn with_rate(self, rate: Option<super::RateSignal>) -> Self {
        Outcome { rate: rate.map(Box::new), ..self }
    }

    /// The source's answer passed a size budget of the call (`detail` names which, e.g.
    /// `body_too_large`): `Transient` for the source, and not tried again in this call.
    pub fn too_large(detail: impl Into<String>) -> Self {
        Outcome { source_spent: true, ..Outcome::new(OutcomeClass::Transient, detail) }
    }
}

/// The result of one attempt. A success always carries its response; nothing else does.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    outcome: Outcome,
    response: Option<Response>,
}

impl Attempt {
    /// A usable answer.
    pub fn success(response: Response, detail: impl Into<String>) -> Self {
        Attempt { outcome: Outcome::new(OutcomeClass::Success, detail), response: Some(response) }
    }

    /// A failed attempt. A `class` of `Success` without a response is reported as
    /// `Transient("success_without_response")` rather than trusted.
    pub fn failure(class: OutcomeClass, detail: impl Into<String>, retry_after: Option<Duration>) -> Self {
        Attempt::ended(Outcome { retry_after, ..Outcome::new(class, detail) })
    }

    /// A failed attempt with this outcome (see [`Attempt::failure`]).
    pub fn ended(outcome: Outcome) -> Self {
        let outcome = match outcome.class {
            OutcomeClass::Success => Outcome::new(OutcomeClass::Transient, "success_without_response"),
            _ => outcome,
        };
        Attempt { outcome, response: None }
    }

    /// How the attempt ended.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// The answer, for a success.
    pub fn response(&self) -> Option<&Response> {
        self.response.as_ref()
    }

    /// The same attempt with the provider's rate signal.
    pub fn with_rate(mut self, rate: Option<super::RateSignal>) -> Self {
        self.outcome.rate = rate.map(Box::new);
        self
    }

    /// Splits into outcome and answer.
    pub fn into_parts(self) -> (Outcome, Option<Response>) {
        (self.outcome, self.response)
    }
}
