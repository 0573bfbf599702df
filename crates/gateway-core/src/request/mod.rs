//! What a call carries to an upstream and what one attempt brings back: the data of the
//! [`Upstream`](crate::ports::Upstream) port, in the provider's own dialect (OpenAI's).
//!
//! A [`Request`] is the native JSON body the caller wrote. On each attempt the adapter sets
//! `model` to the source's model and owns `stream` and `stream_options`; every other field
//! reaches the provider as the caller sent it, including fields this code has never heard of.
//! A [`Response`] keeps the provider's whole body (every choice, tool calls, refusals, logprobs,
//! usage details), with typed accessors for what the gateway itself reads.

mod attempt;
mod body;
mod rate;
mod response;
mod structured;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

pub use attempt::{Attempt, Outcome, ProviderError};
pub use body::{BodyError, Message, Request, Role};
pub use rate::{RateReport, RateSignal};
pub(crate) use response::message_is_usable;
pub use response::{Response, Usage, answers_otherwise};
pub use structured::{ParseCheck, Structured};

/// A JSON object: a request body, a response body, a stream chunk.
pub type Object = Map<String, Value>;

/// The kind of a call: which provider endpoint it goes to. A scope declares the kinds it serves
/// (`kinds`), so a request of another kind is refused before it reaches a provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Chat completions (`/chat/completions`).
    Chat,
    /// Embeddings (`/embeddings`).
    Embeddings,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 2] = [Kind::Chat, Kind::Embeddings];

    /// The config and telemetry name: `chat`, `embeddings`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Chat => "chat",
            Kind::Embeddings => "embeddings",
        }
    }

    /// The endpoint path below a provider's base URL.
    pub const fn path(self) -> &'static str {
        match self {
            Kind::Chat => "chat/completions",
            Kind::Embeddings => "embeddings",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
