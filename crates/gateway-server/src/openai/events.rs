//! Streamed answers as SSE events, in each dialect: chat and legacy completions (`data:` lines,
//! then `data: [DONE]`), and the Responses API (named events, `sequence_number` counted by the
//! gateway, no `[DONE]`), and Anthropic's Messages API (named events as they came); an error
//! after the stream's head in the shape each dialect's SDK raises.

use super::ApiError;
use gateway_core::stream::Chunk;
use serde_json::{Value, json};

/// The usage-only chunk at the end of a stream (no choices): relayed only when asked for.
pub fn is_usage_chunk(chunk: &Chunk) -> bool {
    chunk.get("choices").and_then(Value::as_array).is_some_and(Vec::is_empty) && chunk.get("usage").is_some_and(Value::is_object)
}

/// `chunk` as a named event: `event: <its type>` and its data.
fn named(chunk: Chunk) -> String {
    let kind = chunk.get("type").and_then(Value::as_str).unwrap_or("message").to_owned();
    format!("event: {kind}\ndata: {}\n\n", Value::Object(chunk))
}

/// How a stream's events are written for its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Chat and legacy completions: `data: <chunk>` each, the usage-only chunk when asked for,
    /// then `data: [DONE]`; an error is `event: error` with OpenAI's error body.
    Chunks {
        /// The caller asked for the usage chunk.
        include_usage: bool,
    },
    /// The Responses API: `event: <type>` and `data: <event>` each, no `[DONE]`; an error is
    /// the `error` event in both of its shapes (flat, as documented, and `error: {…}`, which
    /// the SDKs raise). A created response's events are numbered by the gateway from 0 (the
    /// events of attempts that did not serve the call were never sent, and a held stream's
    /// were rebuilt); a stored response's replay keeps the provider's numbers (a caller
    /// resumes by them, `starting_after`).
    Events {
        /// The next event's number.
        next: u64,
        /// Whether the gateway numbers the events (else it keeps the provider's).
        renumber: bool,
    },
    /// Anthropic's Messages API: `event: <type>` and `data: <event>` each, as the provider sent
    /// them, no `[DONE]`; an error is Anthropic's `error` event.
    Named,
}

impl Framing {
    /// The framing of a stream of `kind`.
    pub fn of(kind: gateway_core::request::Kind, include_usage: bool) -> Framing {
        match kind {
            gateway_core::request::Kind::Responses => Framing::Events { next: 0, renumber: true },
            gateway_core::request::Kind::Messages => Framing::Named,
            _ => Framing::Chunks { include_usage },
        }
    }

    /// `chunk` as an SSE event, or `None` when the caller did not ask for it.
    pub fn event(&mut self, mut chunk: Chunk) -> Option<String> {
        match self {
            Framing::Chunks { include_usage } if !*include_usage && is_usage_chunk(&chunk) => None,
            Framing::Chunks { .. } => Some(format!("data: {}\n\n", Value::Object(chunk))),
            Framing::Events { next, renumber } => {
                match chunk.get("sequence_number").and_then(Value::as_u64).filter(|_| !*renumber) {
                    Some(theirs) => *next = theirs + 1,
                    None => {
                        chunk.insert("sequence_number".into(), json!(*next));
                        *next += 1;
                    }
                }
                Some(named(chunk))
            }
            Framing::Named => Some(named(chunk)),
        }
    }

    /// What ends a stream that ended as it should.
    pub fn end(&self) -> Option<&'static str> {
        match self {
            Framing::Chunks { .. } => Some("data: [DONE]\n\n"),
            Framing::Events { .. } | Framing::Named => None,
        }
    }

    /// `error` as the stream's last event (after its headers went out); the OpenAI SDKs raise
    /// it as an `APIError`.
    pub fn error(&mut self, error: &ApiError) -> String {
        match self {
            Framing::Chunks { .. } => format!("event: error\ndata: {}\n\n", error.body()),
            Framing::Named => format!("event: error\ndata: {}\n\n", crate::anthropic::error_body(error)),
            Framing::Events { next, .. } => {
                let inner = error.body().get("error").cloned().unwrap_or_else(|| json!({}));
                let event = json!({
                    "type": "error",
                    "sequence_number": *next,
                    "code": inner.get("code").cloned().unwrap_or(Value::Null),
                    "message": inner.get("message").cloned().unwrap_or(Value::Null),
                    "param": inner.get("param").cloned().unwrap_or(Value::Null),
                    "error": inner,
                });
                *next += 1;
                format!("event: error\ndata: {event}\n\n")
            }
        }
    }
}
