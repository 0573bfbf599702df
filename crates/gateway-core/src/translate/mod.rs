//! Translation between the protocols, so one scope can mix OpenAI and Anthropic sources: a chat
//! completion served by an Anthropic source ([`to_anthropic`]) and a Messages call served by an
//! OpenAI source ([`to_openai`]), one module per direction, each with the request, the whole
//! answer and the stream. A request the other side cannot express makes that source ineligible
//! for the call ([`carries`]): it is passed by, not failed, and named if no source remains.
//!
//! The adapter asks [`wire_kind`] which endpoint an attempt goes to, sends [`request_body`],
//! and gives the caller [`answer`] of a whole body or each event through a [`Stream`]: what the
//! caller gets is always in its own kind's dialect, so the commit point, the structured check,
//! usage and every rule after the adapter see one dialect.

pub mod to_anthropic;
pub mod to_openai;

use crate::request::{Kind, Object, Protocol, Request, Response};
use crate::stream::Chunk;
use std::borrow::Cow;

/// The tool a chat request's `json_schema` format becomes at an Anthropic source: the model
/// must call it, and its input is the answer's text.
pub const JSON_TOOL: &str = "json_answer";

/// The endpoint's kind at a source of `protocol` for a request of `kind` (its own, or the
/// translated one's).
pub fn wire_kind(kind: Kind, protocol: Protocol) -> Kind {
    match (kind, protocol) {
        (Kind::Chat, Protocol::Anthropic) => Kind::Messages,
        (Kind::Messages, Protocol::OpenAi) => Kind::Chat,
        _ => kind,
    }
}

/// Whether a source of `protocol` can carry `request`: its own protocol always; the other only
/// for chat ↔ Messages, and only what the other side can express. The reason, if not.
pub fn carries(request: &Request, protocol: Protocol) -> Result<(), String> {
    let kind = request.kind();
    if kind.protocol() == protocol {
        return Ok(());
    }
    if request.target().is_some() || request.form().is_some() {
        return Err(format!("{kind} requests have no {protocol} form"));
    }
    let why = match (kind, protocol) {
        (Kind::Chat, Protocol::Anthropic) => to_anthropic::refusal(request.body()),
        (Kind::Messages, Protocol::OpenAi) => to_openai::refusal(request.body()),
        _ => Some(format!("{kind} requests have no {protocol} form")),
    };
    why.map_or(Ok(()), Err)
}

/// The body an attempt of `request` sends to a source of `protocol` (before the adapter sets
/// `model` and `stream`): the caller's own, or its translation (`max_tokens`: an Anthropic
/// source's default when a chat request sets no limit).
pub fn request_body(request: &Request, protocol: Protocol, max_tokens: u32) -> Cow<'_, Object> {
    match (request.kind(), protocol) {
        (Kind::Chat, Protocol::Anthropic) => Cow::Owned(to_anthropic::request_body(request, max_tokens)),
        (Kind::Messages, Protocol::OpenAi) => Cow::Owned(to_openai::request_body(request)),
        _ => Cow::Borrowed(request.body()),
    }
}

/// A whole answer in the dialect of `kind` (the caller's), from `body` in the source's
/// (`protocol`'s).
pub fn answer(kind: Kind, protocol: Protocol, body: Object) -> Response {
    translated_answer(kind, protocol, &body).unwrap_or_else(|| Response::new(kind, body))
}

/// [`answer`], from `body` parsed from the JSON text `sent`: an answer in the caller's own
/// dialect keeps that text, for the caller to get as the provider wrote it.
pub fn answer_as_sent(kind: Kind, protocol: Protocol, body: Object, sent: bytes::Bytes) -> Response {
    translated_answer(kind, protocol, &body).unwrap_or_else(|| Response::new(kind, body).as_sent(sent))
}

/// The answer in the caller's dialect when the source speaks another; `None` when it speaks
/// the caller's.
fn translated_answer(kind: Kind, protocol: Protocol, body: &Object) -> Option<Response> {
    match (kind, protocol) {
        (Kind::Chat, Protocol::Anthropic) => Some(to_anthropic::answer(body)),
        (Kind::Messages, Protocol::OpenAi) => Some(to_openai::answer(body)),
        _ => None,
    }
}

/// A stream's events in the caller's dialect, from those of the source's.
#[derive(Clone, Debug)]
pub enum Stream {
    /// The source speaks the caller's dialect: each event as it came.
    Same,
    /// Anthropic events as chat chunks.
    ToChat(to_anthropic::ChunksOfEvents),
    /// Chat chunks as Anthropic events.
    ToMessages(to_openai::EventsOfChunks),
}

impl Stream {
    /// The translation of a stream of `kind` (the caller's) from a source of `protocol`.
    pub fn of(kind: Kind, protocol: Protocol) -> Stream {
        match (kind, protocol) {
            (Kind::Chat, Protocol::Anthropic) => Stream::ToChat(to_anthropic::ChunksOfEvents::default()),
            (Kind::Messages, Protocol::OpenAi) => Stream::ToMessages(to_openai::EventsOfChunks::default()),
            _ => Stream::Same,
        }
    }

    /// Whether events pass as they came.
    pub fn is_same(&self) -> bool {
        matches!(self, Stream::Same)
    }

    /// The caller's events that the source's `event` makes.
    pub fn push(&mut self, event: Chunk) -> Vec<Chunk> {
        match self {
            Stream::Same => vec![event],
            Stream::ToChat(t) => t.push(&event),
            Stream::ToMessages(t) => t.push(&event),
        }
    }

    /// The caller's events once the source's have ended cleanly.
    pub fn finish(&mut self) -> Vec<Chunk> {
        match self {
            Stream::ToMessages(t) => t.finish(),
            Stream::Same | Stream::ToChat(_) => Vec::new(),
        }
    }
}

/// Anthropic's `stop_reason` as chat's `finish_reason`.
pub(crate) fn stop_reason_to_finish(stop: Option<&str>) -> &'static str {
    match stop {
        Some("max_tokens" | "model_context_window_exceeded") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        _ => "stop",
    }
}

/// Chat's `finish_reason` as Anthropic's `stop_reason`.
pub(crate) fn finish_to_stop_reason(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

#[cfg(test)]
mod tests;
