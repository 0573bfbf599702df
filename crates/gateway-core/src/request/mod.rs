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
mod target;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

pub use attempt::{Attempt, Outcome, ProviderError};
pub use body::{BodyError, Message, Request, Role};
pub use rate::{RateReport, RateSignal};
pub use response::{Response, Usage, answers_otherwise};
pub(crate) use response::{message_is_usable, nonempty_string};
pub use structured::{ParseCheck, Structured};
pub use target::{Form, Method, Part, Raw, Target};

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
    /// The Responses API (`/responses`, and the routes of a stored response).
    Responses,
    /// Legacy text completions (`/completions`).
    Completions,
    /// Moderations (`/moderations`).
    Moderations,
    /// Image generation (`/images/generations`).
    Images,
    /// Image edits (`/images/edits`, multipart).
    ImageEdits,
    /// Speech to text (`/audio/transcriptions`, multipart).
    Transcriptions,
    /// Speech to English text (`/audio/translations`, multipart).
    Translations,
    /// Text to speech (`/audio/speech`, a binary answer).
    Speech,
    /// Files (`/files`: an upload, and a stored file's routes).
    Files,
    /// Batches (`/batches`, and a stored batch's routes).
    Batches,
    /// Anthropic's Messages API (`/messages`).
    Messages,
    /// Anthropic's token count of a Messages request (`/messages/count_tokens`).
    CountTokens,
}

/// The dialect a source speaks on the wire (`protocol`): OpenAI's API, or Anthropic's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// OpenAI's API and the OpenAI-compatible relays: every kind but Anthropic's.
    #[default]
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic's Messages API (`x-api-key`, `anthropic-version`).
    Anthropic,
}

impl Protocol {
    /// The config name: `openai`, `anthropic`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Protocol::OpenAi => "openai",
            Protocol::Anthropic => "anthropic",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 14] = [
        Kind::Chat,
        Kind::Embeddings,
        Kind::Responses,
        Kind::Completions,
        Kind::Moderations,
        Kind::Images,
        Kind::ImageEdits,
        Kind::Transcriptions,
        Kind::Translations,
        Kind::Speech,
        Kind::Files,
        Kind::Batches,
        Kind::Messages,
        Kind::CountTokens,
    ];

    /// The config and telemetry name: `chat`, `embeddings`, `responses`, …
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Chat => "chat",
            Kind::Embeddings => "embeddings",
            Kind::Responses => "responses",
            Kind::Completions => "completions",
            Kind::Moderations => "moderations",
            Kind::Images => "images",
            Kind::ImageEdits => "image_edits",
            Kind::Transcriptions => "transcriptions",
            Kind::Translations => "translations",
            Kind::Speech => "speech",
            Kind::Files => "files",
            Kind::Batches => "batches",
            Kind::Messages => "messages",
            Kind::CountTokens => "count_tokens",
        }
    }

    /// The endpoint path below a provider's base URL of a call that creates (a request with a
    /// [`Target`] goes where it says instead).
    pub const fn path(self) -> &'static str {
        match self {
            Kind::Chat => "chat/completions",
            Kind::Embeddings => "embeddings",
            Kind::Responses => "responses",
            Kind::Completions => "completions",
            Kind::Moderations => "moderations",
            Kind::Images => "images/generations",
            Kind::ImageEdits => "images/edits",
            Kind::Transcriptions => "audio/transcriptions",
            Kind::Translations => "audio/translations",
            Kind::Speech => "audio/speech",
            Kind::Files => "files",
            Kind::Batches => "batches",
            Kind::Messages => "messages",
            Kind::CountTokens => "messages/count_tokens",
        }
    }

    /// The protocol whose API the kind belongs to: Anthropic's Messages and token counts, or
    /// OpenAI's every other kind.
    pub const fn protocol(self) -> Protocol {
        match self {
            Kind::Messages | Kind::CountTokens => Protocol::Anthropic,
            _ => Protocol::OpenAi,
        }
    }

    /// Whether a call of this kind can be answered as a stream of events the gateway governs
    /// to a commit point (SPEC §13).
    pub const fn streams(self) -> bool {
        matches!(self, Kind::Chat | Kind::Responses | Kind::Completions | Kind::Messages)
    }

    /// Whether a call of this kind is answered with bytes a caller may take as they come
    /// (speech audio): a stream of pieces governed to its first (`stream::bytes`).
    pub const fn relays_bytes(self) -> bool {
        matches!(self, Kind::Speech)
    }

    /// Whether its body names a model, which the gateway sets per source (files and batches
    /// name none: a batch's requests name theirs).
    pub const fn takes_model(self) -> bool {
        !matches!(self, Kind::Files | Kind::Batches)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
