//! What a provider answers: its whole body with typed accessors, the token counts it reports,
//! and when an answer is usable.

use super::{Kind, Object, Raw};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

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

    /// The `usage` object of a response or a chunk, if it has one: chat's and the legacy
    /// endpoints' `prompt_tokens` / `completion_tokens`, or the Responses API's (and images',
    /// and transcriptions') `input_tokens` / `output_tokens`. A Responses event carries it in
    /// its `response`.
    ///
    /// Anthropic's usage has the same names, and counts the prompt's cached tokens apart
    /// (`cache_read_input_tokens`, `cache_creation_input_tokens`): they are prompt tokens too.
    /// Its stream carries it in `message_start`'s `message`, then `message_delta`'s (see
    /// [`Usage::then`]).
    pub fn of(body: &Object) -> Option<Usage> {
        let nested = |field: &str| body.get(field)?.as_object()?.get("usage")?.as_object();
        let usage = body.get("usage").and_then(Value::as_object).or_else(|| nested("response")).or_else(|| nested("message"))?;
        let count = |fields: &[&str]| {
            fields.iter().find_map(|f| usage.get(*f).and_then(Value::as_u64)).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
        };
        Some(Usage {
            prompt_tokens: count(&["prompt_tokens", "input_tokens"])
                .saturating_add(count(&["cache_read_input_tokens"]))
                .saturating_add(count(&["cache_creation_input_tokens"])),
            completion_tokens: count(&["completion_tokens", "output_tokens"]),
        })
    }

    /// The usage a stream has reported once `later` came after this: `later`'s counts, but for a
    /// prompt count it leaves out (Anthropic's `message_delta` may carry only the output).
    pub fn then(self, later: Usage) -> Usage {
        Usage {
            prompt_tokens: if later.prompt_tokens == 0 { self.prompt_tokens } else { later.prompt_tokens },
            completion_tokens: later.completion_tokens,
        }
    }
}
/// A usable answer: the provider's whole body, and who served it.
#[derive(Clone, Debug)]
pub struct Response {
    kind: Kind,
    body: Object,
    /// The answer, when it is not JSON (then `body` is empty).
    raw: Option<Raw>,
    /// The JSON `body` was parsed from, as the provider sent it (its own dialect, untranslated):
    /// what the caller gets, byte for byte.
    sent: Option<Bytes>,
    request_id: Option<String>,
    source: Option<String>,
    attempts: u32,
}

/// The same answer whether or not it keeps the text it was parsed from.
impl PartialEq for Response {
    fn eq(&self, other: &Self) -> bool {
        (self.kind, &self.body, &self.raw, &self.request_id, &self.source, self.attempts)
            == (other.kind, &other.body, &other.raw, &other.request_id, &other.source, other.attempts)
    }
}

impl Response {
    /// A provider's answer of `kind`, as it sent it.
    pub fn new(kind: Kind, body: Object) -> Self {
        Response { kind, body, raw: None, sent: None, request_id: None, source: None, attempts: 0 }
    }

    /// A provider's answer of `kind` that is not JSON (audio, a file's bytes, a transcript as
    /// text), as it sent it.
    pub fn raw(kind: Kind, raw: Raw) -> Self {
        Response { raw: Some(raw), ..Response::new(kind, Object::new()) }
    }

    /// The answer's bytes and content type, when it is not JSON.
    pub fn raw_body(&self) -> Option<&Raw> {
        self.raw.as_ref()
    }

    /// The same answer, with the JSON text its body was parsed from (`sent`, as the provider
    /// sent it): the caller gets that text, not the body written again (which could change its
    /// numbers' digits, its escapes and its spacing).
    pub fn as_sent(mut self, sent: Bytes) -> Self {
        self.sent = Some(sent);
        self
    }

    /// The JSON text the body was parsed from, when the answer is the provider's as it sent it.
    pub fn sent(&self) -> Option<&Bytes> {
        self.sent.as_ref()
    }

    /// A chat completion of one text choice (for simulated and scripted upstreams).
    pub fn chat_text(content: &str, usage: Option<Usage>) -> Self {
        let mut body = json!({
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        });
        if let Some(u) = usage {
            body["usage"] = json!({"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total()});
        }
        Response::new(Kind::Chat, into_object(body))
    }

    /// A Responses `response` of one message of text (for simulated and scripted upstreams),
    /// with the id `id`.
    pub fn responses_text(id: &str, content: &str, usage: Option<Usage>) -> Self {
        let mut body = json!({
            "id": id,
            "object": "response",
            "status": "completed",
            "output": [{"type": "message", "id": format!("msg_{id}"), "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": content, "annotations": []}]}],
        });
        if let Some(u) = usage {
            body["usage"] = json!({"input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens, "total_tokens": u.total()});
        }
        Response::new(Kind::Responses, into_object(body))
    }

    /// An Anthropic `message` of one text block (for simulated and scripted upstreams), with the
    /// id `id`.
    pub fn message_text(id: &str, content: &str, usage: Option<Usage>) -> Self {
        let mut body = json!({
            "id": id,
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": content}],
            "stop_reason": "end_turn",
            "stop_sequence": null,
        });
        if let Some(u) = usage {
            body["usage"] = json!({"input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens});
        }
        Response::new(Kind::Messages, into_object(body))
    }

    /// An embeddings answer of these vectors (for simulated and scripted upstreams).
    pub fn embedding_vectors(vectors: &[Vec<f32>], usage: Option<Usage>) -> Self {
        let data: Vec<Value> =
            vectors.iter().enumerate().map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v})).collect();
        let mut body = json!({"object": "list", "data": data});
        if let Some(u) = usage {
            body["usage"] = json!({"prompt_tokens": u.prompt_tokens, "total_tokens": u.total()});
        }
        Response::new(Kind::Embeddings, into_object(body))
    }

    /// The same answer, with the provider's request id (its `x-request-id` header).
    pub fn with_request_id(mut self, id: Option<String>) -> Self {
        self.request_id = id;
        self
    }

    /// The same answer, noting the source that served it and the attempts the call made.
    pub fn served_by(mut self, source: &str, attempts: u32) -> Self {
        self.source = Some(source.to_owned());
        self.attempts = attempts;
        self
    }

    /// The kind of call answered.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The provider's body.
    pub fn body(&self) -> &Object {
        &self.body
    }

    /// The provider's body, owned.
    pub fn into_body(self) -> Object {
        self.body
    }

    /// The provider's request id, when it sent one.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// The source that served the call (set by the gateway when the call returns).
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref()
    }

    /// The attempts the call made (set by the gateway when the call returns).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The choices of a chat answer.
    pub fn choices(&self) -> &[Value] {
        self.body.get("choices").and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    fn message(&self) -> Option<&Object> {
        self.choices().first()?.get("message")?.as_object()
    }

    /// The first choice's text, if it has text.
    pub fn content(&self) -> Option<&str> {
        self.message()?.get("content")?.as_str()
    }

    /// The first choice's tool calls (empty when it has none).
    pub fn tool_calls(&self) -> &[Value] {
        self.message().and_then(|m| m.get("tool_calls")).and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// The first choice's refusal, if the model refused.
    pub fn refusal(&self) -> Option<&str> {
        self.message()?.get("refusal")?.as_str()
    }

    /// The first choice's finish reason.
    pub fn finish_reason(&self) -> Option<&str> {
        self.choices().first()?.get("finish_reason")?.as_str()
    }

    /// Token counts, when reported.
    pub fn usage(&self) -> Option<Usage> {
        Usage::of(&self.body)
    }

    /// The `data` entries (embeddings, images).
    pub fn data(&self) -> &[Value] {
        self.body.get("data").and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// The embeddings' `data` entries.
    pub fn embeddings(&self) -> &[Value] {
        self.data()
    }

    /// The `i`-th embedding as numbers (`None` for base64 or a missing entry).
    pub fn vector(&self, i: usize) -> Option<Vec<f64>> {
        self.embeddings().get(i)?.get("embedding")?.as_array()?.iter().map(Value::as_f64).collect()
    }

    /// Whether the answer can be used (SPEC §2): a chat choice with text, tool calls, a refusal
    /// or audio; embeddings, each with a vector; a Responses output with a message that says
    /// something (text or a refusal) or a tool call, or a background response's
    /// acknowledgement; a legacy completion choice with text; moderation results; images, each
    /// with a URL or its bytes; a transcript (an empty one is silence, not a fault); speech
    /// audio; a stored file's or batch's id. Anything else is `Transient("empty")`. (An answer
    /// of a stored object's route is the provider's word on it, and not judged here.)
    pub fn is_usable(&self) -> bool {
        let nonempty = |field: &str| self.body.get(field).and_then(Value::as_array).is_some_and(|a| !a.is_empty());
        match self.kind {
            Kind::Chat => self.choices().iter().any(|c| c.get("message").and_then(Value::as_object).is_some_and(message_is_usable)),
            Kind::Embeddings => {
                let data = self.embeddings();
                !data.is_empty()
                    && data.iter().all(|d| match d.get("embedding") {
                        Some(Value::Array(v)) => !v.is_empty(),
                        Some(Value::String(b64)) => !b64.is_empty(),
                        _ => false,
                    })
            }
            Kind::Responses => crate::responses::is_usable(&self.body),
            Kind::Completions => self.choices().iter().any(|c| nonempty_string(c.get("text"))),
            Kind::Moderations => nonempty("results"),
            Kind::Images | Kind::ImageEdits => {
                nonempty("data")
                    && self.data().iter().all(|image| nonempty_string(image.get("url")) || nonempty_string(image.get("b64_json")))
            }
            Kind::Transcriptions | Kind::Translations => self.raw.is_some() || self.body.get("text").is_some_and(Value::is_string),
            Kind::Speech => self.raw.as_ref().is_some_and(|raw| !raw.bytes.is_empty()),
            Kind::Files | Kind::Batches => nonempty_string(self.body.get("id")),
            Kind::Messages => crate::messages::is_usable(&self.body),
            Kind::CountTokens => crate::messages::count_is_usable(&self.body),
        }
    }

    /// The text answers a structured check applies to: every chat choice's text (`""` for a
    /// choice that has none: a blank choice of `n` is an answer that is not JSON), unless that
    /// choice [`answers_otherwise`]; every Responses message's text, unless it refused. Other
    /// kinds have none.
    pub fn text_answers(&self) -> Box<dyn Iterator<Item = &str> + '_> {
        match self.kind {
            Kind::Chat => Box::new(self.choices().iter().filter_map(|c| {
                let message = c.get("message")?.as_object()?;
                if answers_otherwise(message) { None } else { Some(message.get("content").and_then(Value::as_str).unwrap_or("")) }
            })),
            Kind::Responses => Box::new(crate::responses::text_answers(&self.body)),
            Kind::Messages => Box::new(crate::messages::text_answers(&self.body)),
            _ => Box::new(std::iter::empty()),
        }
    }
}
/// The object a `json!({…})` literal built, without copying it.
fn into_object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}
/// Whether `value` is a string that says something (not blank).
pub(crate) fn nonempty_string(value: Option<&Value>) -> bool {
    value.and_then(Value::as_str).is_some_and(|s| !s.trim().is_empty())
}

fn nonempty_array(value: Option<&Value>) -> bool {
    value.and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

/// A message (or a stream delta) that carries something: text, or it [`answers_otherwise`].
pub(crate) fn message_is_usable(message: &Object) -> bool {
    nonempty_string(message.get("content")) || answers_otherwise(message)
}

/// Whether a message (or a stream delta) answers otherwise than with text: tool calls, a refusal
/// that says something (a whitespace-only one says nothing), audio, or a call of the legacy
/// `functions` API (`function_call`). Its text, if any, is then no text answer, and no
/// structured check applies to it (SPEC §8). The one judgement of a choice, whole or streamed:
/// a stream's pieces answer otherwise as soon as one of them does, as their concatenation would.
pub fn answers_otherwise(message: &Object) -> bool {
    nonempty_array(message.get("tool_calls"))
        || nonempty_string(message.get("refusal"))
        || message.get("audio").is_some_and(|a| a.is_object())
        || message
            .get("function_call")
            .and_then(Value::as_object)
            .is_some_and(|call| nonempty_string(call.get("name")) || nonempty_string(call.get("arguments")))
}
