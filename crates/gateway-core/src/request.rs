//! What a call carries to an upstream and what one attempt brings back: the data of the
//! [`Upstream`](crate::ports::Upstream) port.

use crate::outcome::OutcomeClass;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Who wrote a chat message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// The application's user.
    User,
    /// The model.
    Assistant,
}

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Text.
    pub content: String,
}

/// The kind of call and its payload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Payload {
    /// A chat completion.
    Chat {
        /// The conversation.
        messages: Vec<Message>,
        /// Completion length cap.
        max_tokens: Option<u32>,
        /// Sampling temperature.
        temperature: Option<f32>,
        /// Ask for a streamed answer (the watchdog applies).
        stream: bool,
    },
    /// Embeddings of each input.
    Embedding {
        /// The texts.
        input: Vec<String>,
    },
}

/// The kind of a call: which provider endpoint it goes to. A scope declares the kinds it serves
/// (`kinds`), so a request of another kind is refused before it reaches a provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Chat completions.
    Chat,
    /// Embeddings.
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
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Payload {
    /// The kind of call this payload makes.
    pub const fn kind(&self) -> Kind {
        match self {
            Payload::Chat { .. } => Kind::Chat,
            Payload::Embedding { .. } => Kind::Embeddings,
        }
    }
}

/// A check of structured output: `Err` carries why the content was refused.
pub type ParseCheck = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Structured output a call asks for; content that fails it is `ResultInvalid`.
#[derive(Clone)]
pub enum Structured {
    /// The content must be JSON matching this JSON Schema.
    JsonSchema(serde_json::Value),
    /// The content must pass this function.
    Parse(ParseCheck),
}

impl fmt::Debug for Structured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Structured::JsonSchema(schema) => f.debug_tuple("JsonSchema").field(schema).finish(),
            Structured::Parse(_) => f.write_str("Parse(<fn>)"),
        }
    }
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message { role: Role::User, content: content.into() }
    }
}

/// One call's request, sent unchanged on each attempt.
#[derive(Clone, Debug)]
pub struct Request {
    /// What to ask.
    pub payload: Payload,
    /// Structured output to enforce, if any.
    pub structured: Option<Structured>,
    /// Token estimate for the quota gate (corrected at settle).
    pub estimated_tokens: u32,
}

impl Request {
    /// A plain (non-streamed) chat request of `messages`, its token estimate a quarter of the
    /// characters (the usual rule of thumb; set `estimated_tokens` for a better one).
    pub fn chat(messages: Vec<Message>) -> Self {
        let chars: usize = messages.iter().map(|m| m.content.chars().count()).sum();
        Request {
            payload: Payload::Chat { messages, max_tokens: None, temperature: None, stream: false },
            structured: None,
            estimated_tokens: u32::try_from(chars / 4 + 1).unwrap_or(u32::MAX),
        }
    }
}

/// Token counts reported by a provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Completion tokens.
    pub completion_tokens: u32,
}

impl Usage {
    /// Prompt plus completion tokens.
    pub fn total(&self) -> u32 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// A usable answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Response {
    /// Chat completion content.
    Chat {
        /// The text.
        content: String,
        /// Token counts, when reported.
        usage: Option<Usage>,
    },
    /// One vector per input.
    Embedding {
        /// The vectors.
        vectors: Vec<Vec<f32>>,
        /// Token counts, when reported.
        usage: Option<Usage>,
    },
}

impl Response {
    /// Token counts, when reported.
    pub fn usage(&self) -> Option<Usage> {
        match self {
            Response::Chat { usage, .. } | Response::Embedding { usage, .. } => *usage,
        }
    }
}

/// How one attempt ended: its class, a detail for telemetry (`http_503`, `watchdog`,
/// `connect_refused`…) and the provider's Retry-After, if it gave one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The outcome class.
    pub class: OutcomeClass,
    /// A short, key-free description.
    pub detail: String,
    /// Provider Retry-After (429), as a delay.
    pub retry_after: Option<Duration>,
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
        Attempt { outcome: Outcome { class: OutcomeClass::Success, detail: detail.into(), retry_after: None }, response: Some(response) }
    }

    /// A failed attempt. A `class` of `Success` without a response is reported as
    /// `Transient("success_without_response")` rather than trusted.
    pub fn failure(class: OutcomeClass, detail: impl Into<String>, retry_after: Option<Duration>) -> Self {
        let (class, detail) = match class {
            OutcomeClass::Success => (OutcomeClass::Transient, "success_without_response".to_owned()),
            other => (other, detail.into()),
        };
        Attempt { outcome: Outcome { class, detail, retry_after }, response: None }
    }

    /// How the attempt ended.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// The answer, for a success.
    pub fn response(&self) -> Option<&Response> {
        self.response.as_ref()
    }

    /// Splits into outcome and answer.
    pub fn into_parts(self) -> (Outcome, Option<Response>) {
        (self.outcome, self.response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_always_has_a_response() {
        let a = Attempt::failure(OutcomeClass::Success, "lying adapter", None);
        assert_eq!(a.outcome().class, OutcomeClass::Transient);
        assert_eq!(a.outcome().detail, "success_without_response");
        let ok = Attempt::success(Response::Chat { content: "hi".into(), usage: None }, "http_200");
        assert_eq!(ok.outcome().class, OutcomeClass::Success);
        assert!(ok.response().is_some());
    }

    #[test]
    fn a_chat_request_estimates_a_token_per_four_characters() {
        let r = Request::chat(vec![Message::user("12345678")]);
        assert_eq!(r.estimated_tokens, 3);
        assert!(matches!(r.payload, Payload::Chat { stream: false, .. }));
    }

    #[test]
    fn parse_functions_do_not_break_debug() {
        let s = Structured::Parse(Arc::new(|_| Ok(())));
        assert_eq!(format!("{s:?}"), "Parse(<fn>)");
    }
}
