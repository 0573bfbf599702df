//! Streamed answers (SPEC §13), in each dialect that streams: chat completions
//! (`chat.completion.chunk`s, [`chat`]), the Responses API (named events, [`responses`]),
//! Anthropic's Messages API (named events, [`messages`]), legacy completions
//! (`text_completion` chunks, [`completions`]), and a binary answer's bytes as they come
//! (speech, [`bytes`]). For each: the commit point, a
//! whole answer assembled from the chunks (for a caller that did not ask for a stream, when the
//! source is streamed so that its watchdog applies), and the reverse, chunks of a whole answer
//! (for an upstream that cannot stream, and for a stream held to its validated end).
//!
//! The commit point is the first chunk carrying something to show: content, a tool call or a
//! refusal. Before it, nothing has reached the caller and a failure may be retried; after it,
//! chunks are relayed as they come and a failure ends the stream. A stream asked for JSON
//! commits, by default, only once its answer has passed the check ([`StructuredStream`]).

pub mod bytes;
pub mod chat;
pub mod completions;
pub mod messages;
pub mod responses;

use crate::outcome::OutcomeClass;
use crate::request::{Kind, Object, Outcome, Response, Structured};

/// One event of a stream: a `chat.completion.chunk`, a Responses event, a `text_completion`
/// chunk.
pub type Chunk = Object;

/// Where a stream whose request asks for JSON (a structured check applies) commits (SPEC §13).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredStream {
    /// When its answer has passed the check: its chunks are held (merged, so what is held is
    /// the answer so far), then released at once; a truncated or invalid answer is re-asked
    /// unseen, like a whole one.
    #[default]
    Validated,
    /// At its first token, as any stream (for callers that render partial JSON): an answer
    /// that fails the check at its end breaks the stream.
    FirstToken,
}

impl StructuredStream {
    /// Whether a stream of a request asking for `structured` is held to its validated end.
    pub fn holds(self, structured: Option<&Structured>) -> bool {
        structured.is_some() && self == StructuredStream::Validated
    }

    /// The value of the `structured_stream` key or the per-request header.
    pub fn parse(text: &str) -> Option<StructuredStream> {
        match text.trim() {
            "validated" => Some(StructuredStream::Validated),
            "first_token" => Some(StructuredStream::FirstToken),
            _ => None,
        }
    }
}

/// The choices of a chat or legacy completion assembled chunk by chunk: per index, the choice
/// so far, in the order they first came.
#[derive(Clone, Debug, Default)]
pub(crate) struct Choices(Vec<(u64, Object)>);

impl Choices {
    /// The choice of `index`, made by `fresh` at its first chunk.
    pub(crate) fn at(&mut self, index: u64, fresh: impl FnOnce() -> serde_json::Value) -> &mut Object {
        let at = match self.0.iter().position(|(i, _)| *i == index) {
            Some(at) => at,
            None => {
                self.0.push((index, fresh().as_object().cloned().unwrap_or_default()));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    /// The choices by index.
    pub(crate) fn into_sorted(mut self) -> Vec<Object> {
        self.0.sort_by_key(|(i, _)| *i);
        self.0.into_iter().map(|(_, c)| c).collect()
    }
}

/// Keeps in `body` the first non-null value each of `fields` takes in `chunk` (an assembled
/// answer's head: its id, model …), and the usage of the chunk that carries it.
pub(crate) fn keep_head(body: &mut Object, chunk: &Chunk, fields: &[&str]) {
    for field in fields {
        if let Some(value) = chunk.get(*field).filter(|v| !v.is_null()) {
            body.entry(*field).or_insert_with(|| value.clone());
        }
    }
    if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
        body.insert("usage".into(), usage.clone());
    }
}

/// Merges a chunk's choice into the choice so far: its finish reason (the last), its logprobs
/// (each list extended, nulls skipped; a null or absent object so far made one).
pub(crate) fn merge_finish_and_logprobs(choice: &mut Object, piece: &serde_json::Value) {
    use serde_json::Value;
    if let Some(reason) = piece.get("finish_reason").filter(|r| !r.is_null()) {
        choice.insert("finish_reason".into(), reason.clone());
    }
    let Some(logprobs) = piece.get("logprobs").and_then(Value::as_object) else { return };
    let merged = choice.entry("logprobs").or_insert(Value::Null);
    if merged.is_null() {
        *merged = Value::Object(Object::new());
    }
    let Some(merged) = merged.as_object_mut() else { return };
    for (field, items) in logprobs.iter().filter(|(_, items)| !items.is_null()) {
        match (merged.get_mut(field), items) {
            (Some(Value::Array(have)), Value::Array(more)) => have.extend(more.iter().cloned()),
            _ => {
                merged.insert(field.clone(), items.clone());
            }
        }
    }
}

/// The chunks a whole chat or legacy completion (`body`) replays as: one per choice (its
/// `choices` entry as `choices` makes it), each headed by `body`'s `fields` and `object`, then
/// one with the usage, if any.
pub(crate) fn replayed(body: &Object, object: &str, fields: &[&str], choices: impl Iterator<Item = serde_json::Value>) -> Vec<Chunk> {
    let head = |choices: serde_json::Value| {
        let mut chunk = Object::new();
        for field in fields {
            if let Some(value) = body.get(*field) {
                chunk.insert((*field).to_owned(), value.clone());
            }
        }
        chunk.insert("object".into(), serde_json::json!(object));
        chunk.insert("choices".into(), choices);
        chunk
    };
    let mut chunks: Vec<Chunk> = choices.map(|choice| head(serde_json::json!([choice]))).collect();
    if let Some(usage) = body.get("usage") {
        let mut last = head(serde_json::json!([]));
        last.insert("usage".into(), usage.clone());
        chunks.push(last);
    }
    chunks
}

/// Whether `chunk` of a stream of `kind` is its commit point.
pub fn commits(kind: Kind, chunk: &Chunk) -> bool {
    match kind {
        Kind::Responses => responses::commits(chunk),
        Kind::Messages => messages::commits(chunk),
        Kind::Completions => completions::commits(chunk),
        Kind::Speech => bytes::commits(chunk),
        _ => chat::commits(chunk),
    }
}

/// Whether, once `chunk` of a stream of `kind` has come, the answer is whole: every chat or
/// completion choice has its finish reason, or a Responses stream has its terminal event (a
/// caller that leaves then leaves a success).
pub fn finishes(kind: Kind, chunk: &Chunk, finished: &mut std::collections::BTreeMap<u64, bool>) {
    match kind {
        Kind::Responses => {
            if responses::is_terminal(chunk) {
                finished.insert(0, true);
            }
        }
        Kind::Messages => {
            if messages::is_terminal(chunk) {
                finished.insert(0, true);
            }
        }
        // Bytes say nothing of their end: only the stream's end does.
        Kind::Speech => {}
        _ => {
            for choice in chunk.get("choices").and_then(serde_json::Value::as_array).into_iter().flatten() {
                let index = choice.get("index").and_then(serde_json::Value::as_u64).unwrap_or(0);
                *finished.entry(index).or_default() |= choice.get("finish_reason").is_some_and(|r| !r.is_null());
            }
        }
    }
}

/// Whether a text answer, from as much of it as has come, can no longer be JSON: past
/// whitespace it begins with a character that neither starts a JSON value nor a Markdown fence
/// (which the structured check strips, as it trims any whitespace). A stream asked for JSON
/// that opens with prose (`Sure! Here is the JSON: …`) is known to fail its structure at its
/// commit point, before anything reaches the caller, so the upstream adapters end it there
/// `ResultInvalid` and it is re-asked like a whole answer (SPEC §8, §13); one that opens like
/// JSON is checked whole at its end.
pub(crate) fn opens_unlike_json(text: &str) -> bool {
    text.chars().find(|c| !c.is_whitespace()).is_some_and(|c| !matches!(c, '{' | '[' | '"' | '-' | '0'..='9' | 't' | 'f' | 'n' | '`'))
}

/// Whether an attempt for a whole answer to `kind` from a source with `watchdog` is asked for as
/// a stream upstream and assembled (SPEC §13, one watchdog): the watchdog then bounds its first
/// token and every gap, as it bounds a streamed call's. Only the kinds that stream do.
pub fn streamed_upstream(kind: Kind, watchdog: Option<std::time::Duration>) -> bool {
    kind.streams() && watchdog.is_some()
}

/// Whether a text answer to a request asking for `structured` is known to fail it from its
/// opening alone: a JSON Schema check and a text that [`opens_unlike_json`]. (A parse function
/// can only judge the whole text.)
pub(crate) fn fails_from_its_opening(structured: Option<&Structured>, text: &str) -> bool {
    matches!(structured, Some(Structured::JsonSchema(_))) && opens_unlike_json(text)
}

/// How an answer whose text `texts` (its text answers) fails the request's `structured` from
/// the opening alone ends: `ResultInvalid` "not_json", or `None`. The one statement of it, asked
/// at a stream's commit point (by the call loop, whatever the transport) and of a whole answer
/// (by each upstream adapter, before any fuller check).
pub fn opening_failure<'a>(structured: Option<&Structured>, mut texts: impl Iterator<Item = &'a str>) -> Option<Outcome> {
    // Without a JSON Schema check no opening fails: the texts are not worked out.
    if !matches!(structured, Some(Structured::JsonSchema(_))) {
        return None;
    }
    texts.any(|text| fails_from_its_opening(structured, text)).then(|| Outcome::new(OutcomeClass::ResultInvalid, "not_json"))
}

/// A whole answer assembled chunk by chunk, in the stream's dialect: each chunk is merged when
/// it comes and need not be kept, so what it holds is the answer so far, not the stream.
#[derive(Clone, Debug)]
pub enum Assembly {
    /// A `chat.completion` ([`chat::Assembly`]).
    Chat(chat::Assembly),
    /// A Responses `response` ([`responses::Assembly`]).
    Responses(responses::Assembly),
    /// A `text_completion` ([`completions::Assembly`]).
    Completions(completions::Assembly),
    /// An Anthropic `message` ([`messages::Assembly`]).
    Messages(messages::Assembly),
    /// A binary answer's bytes ([`bytes::Assembly`]).
    Bytes(bytes::Assembly),
}

impl Assembly {
    /// An empty assembly of a stream of `kind`.
    pub fn of(kind: Kind) -> Self {
        match kind {
            Kind::Responses => Assembly::Responses(responses::Assembly::default()),
            Kind::Completions => Assembly::Completions(completions::Assembly::default()),
            Kind::Messages => Assembly::Messages(messages::Assembly::default()),
            Kind::Speech => Assembly::Bytes(bytes::Assembly::default()),
            _ => Assembly::Chat(chat::Assembly::default()),
        }
    }

    /// Merges `chunk` into the answer so far.
    pub fn push(&mut self, chunk: &Chunk) {
        match self {
            Assembly::Chat(a) => a.push(chunk),
            Assembly::Responses(a) => a.push(chunk),
            Assembly::Completions(a) => a.push(chunk),
            Assembly::Messages(a) => a.push(chunk),
            Assembly::Bytes(a) => a.push(chunk),
        }
    }

    /// The whole answer of the chunks pushed.
    pub fn finish(self) -> Response {
        match self {
            Assembly::Chat(a) => a.finish(),
            Assembly::Responses(a) => a.finish(),
            Assembly::Completions(a) => a.finish(),
            Assembly::Messages(a) => a.finish(),
            Assembly::Bytes(a) => a.finish(),
        }
    }
}

/// The whole answer the chunks of one stream of `kind` make.
pub fn assemble(kind: Kind, chunks: &[Chunk]) -> Response {
    let mut assembly = Assembly::of(kind);
    for chunk in chunks {
        assembly.push(chunk);
    }
    assembly.finish()
}

/// The chunks of a whole answer, in its kind's dialect (they [`assemble`] back into it).
pub fn chunks_of(response: &Response) -> Vec<Chunk> {
    match response.kind() {
        Kind::Responses => responses::events_of(response),
        Kind::Completions => completions::chunks_of(response),
        Kind::Messages => messages::events_of(response),
        Kind::Speech => bytes::chunks_of(response),
        _ => chat::chunks_of(response),
    }
}

/// Whether an SSE stream of `kind` ends with `[DONE]`: a Responses or Messages stream ends with
/// its terminal event and then closes.
pub fn ends_with_done(kind: Kind) -> bool {
    !matches!(kind, Kind::Responses | Kind::Messages)
}

/// A chunk that says the answer failed (a Responses `response.failed`): its outcome. A chunk
/// source ends its stream with it (`ChunkSource::next_chunk`): before the commit point the call
/// tries again unseen; after it, the stream ends with an error.
pub fn failure_of(kind: Kind, chunk: &Chunk) -> Option<Outcome> {
    match kind {
        Kind::Responses => responses::failure_of(chunk),
        _ => None,
    }
}
