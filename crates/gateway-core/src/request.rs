//! What a call carries to an upstream and what one attempt brings back: the data of the
//! [`Upstream`](crate::ports::Upstream) port, in the provider's own dialect (OpenAI's).
//!
//! A [`Request`] is the native JSON body the caller wrote. On each attempt the adapter sets
//! `model` to the source's model and owns `stream` and `stream_options`; every other field
//! reaches the provider as the caller sent it, including fields this code has never heard of.
//! A [`Response`] keeps the provider's whole body (every choice, tool calls, refusals, logprobs,
//! usage details), with typed accessors for what the gateway itself reads.

use crate::outcome::OutcomeClass;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

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

/// Who wrote a chat message (for the [`Request::chat`] builder; a native body may use any role).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// Instructions for reasoning models (they take `developer` where others take `system`).
    Developer,
    /// The application's user.
    User,
    /// The model.
    Assistant,
    /// A tool's result (the message then needs a `tool_call_id`: build it natively).
    Tool,
}

/// One chat message of text, for the [`Request::chat`] builder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Text.
    pub content: String,
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message { role: Role::User, content: content.into() }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message { role: Role::System, content: content.into() }
    }
}

/// A check of structured output: `Err` carries why the content was refused.
pub type ParseCheck = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Structured output a call asks for; a text answer that fails it is `ResultInvalid`.
#[derive(Clone)]
pub enum Structured {
    /// The content must be JSON matching this JSON Schema.
    JsonSchema(Value),
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

/// A body that is not a JSON object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a {kind} request body must be a JSON object: {problem}")]
pub struct BodyError {
    /// The kind of request.
    pub kind: Kind,
    /// What was wrong.
    pub problem: String,
}

/// One call's request, sent on each attempt with the source's `model`.
#[derive(Clone, Debug)]
pub struct Request {
    kind: Kind,
    body: Arc<Object>,
    /// Structured output to enforce on text answers, if any.
    pub structured: Option<Structured>,
    /// Token estimate for the quota gate (corrected at settle).
    pub estimated_tokens: u32,
}

/// Completion tokens assumed when a chat body sets no limit.
const DEFAULT_COMPLETION_TOKENS: u32 = 256;

impl Request {
    /// A request of `kind` with this native body, its token estimate from the body (a quarter
    /// of the text's characters, plus the completion limit for chat).
    pub fn native(kind: Kind, body: Object) -> Self {
        let mut request = Request { kind, body: Arc::new(body), structured: None, estimated_tokens: 0 };
        request.estimated_tokens = request.estimate();
        request
    }

    /// A request of `kind` from any body that serializes to a JSON object (for example an
    /// `async-openai` request type).
    pub fn from_body(kind: Kind, body: &impl Serialize) -> Result<Self, BodyError> {
        match serde_json::to_value(body) {
            Ok(Value::Object(object)) => Ok(Request::native(kind, object)),
            Ok(other) => Err(BodyError { kind, problem: format!("it serializes to {}", type_name(&other)) }),
            Err(e) => Err(BodyError { kind, problem: e.to_string() }),
        }
    }

    /// A chat request of text messages.
    pub fn chat(messages: Vec<Message>) -> Self {
        let mut body = Object::new();
        body.insert("messages".into(), json!(messages));
        Request::native(Kind::Chat, body)
    }

    /// An embeddings request of these texts.
    pub fn embeddings(input: Vec<String>) -> Self {
        let mut body = Object::new();
        body.insert("input".into(), json!(input));
        Request::native(Kind::Embeddings, body)
    }

    /// The same request with `field` set to `value` (any field of the provider's API).
    pub fn with(mut self, field: &str, value: impl Serialize) -> Self {
        let value = serde_json::to_value(value).unwrap_or(Value::Null);
        Arc::make_mut(&mut self.body).insert(field.to_owned(), value);
        self.estimated_tokens = self.estimate();
        self
    }

    /// Sampling temperature.
    pub fn temperature(self, temperature: f64) -> Self {
        self.with("temperature", temperature)
    }

    /// The completion length cap (`max_completion_tokens`, which every current model takes).
    pub fn max_completion_tokens(self, tokens: u32) -> Self {
        self.with("max_completion_tokens", tokens)
    }

    /// Tools the model may call (OpenAI's `tools` array) and, optionally, `tool_choice`.
    pub fn tools(self, tools: Value, tool_choice: Option<Value>) -> Self {
        let with_tools = self.with("tools", tools);
        match tool_choice {
            Some(choice) => with_tools.with("tool_choice", choice),
            None => with_tools,
        }
    }

    /// JSON mode (`response_format: {"type": "json_object"}`), checked locally too: a text
    /// answer that is not a JSON object is `ResultInvalid`.
    pub fn json_object(mut self) -> Self {
        self.structured = Some(Structured::JsonSchema(json!({"type": "object"})));
        self.with("response_format", json!({"type": "json_object"}))
    }

    /// Structured outputs (`response_format: {"type": "json_schema", …}`), checked locally too.
    pub fn json_schema(mut self, name: &str, schema: Value, strict: bool) -> Self {
        self.structured = Some(Structured::JsonSchema(schema.clone()));
        self.with("response_format", json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}))
    }

    /// The kind of call.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The native body as the caller wrote it.
    pub fn body(&self) -> &Object {
        &self.body
    }

    /// Every text the request carries (message contents and text parts; embeddings inputs):
    /// what providers and estimates read.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        let field = match self.kind {
            Kind::Chat => "messages",
            Kind::Embeddings => "input",
        };
        let mut texts = Vec::new();
        if let Some(value) = self.body.get(field) {
            collect_texts(value, &mut texts, 0);
        }
        texts.into_iter()
    }

    /// A quarter of the characters of the texts (token arrays count a token each), plus the
    /// completion limit for chat.
    fn estimate(&self) -> u32 {
        let chars: usize = self.texts().map(str::len).sum();
        let tokens = u32::try_from(chars / 4 + 1).unwrap_or(u32::MAX).saturating_add(self.token_arrays());
        match self.kind {
            Kind::Chat => {
                let limit = ["max_completion_tokens", "max_tokens"]
                    .iter()
                    .find_map(|f| self.body.get(*f).and_then(Value::as_u64))
                    .map_or(DEFAULT_COMPLETION_TOKENS, |n| u32::try_from(n).unwrap_or(u32::MAX));
                tokens.saturating_add(limit)
            }
            Kind::Embeddings => tokens,
        }
    }

    /// Tokens given as numbers (an embeddings input of token arrays).
    fn token_arrays(&self) -> u32 {
        let Some(Value::Array(input)) = self.body.get("input").filter(|_| self.kind == Kind::Embeddings) else { return 0 };
        let count = |v: &Value| v.as_array().map_or(usize::from(v.is_number()), |a| a.iter().filter(|t| t.is_number()).count());
        u32::try_from(input.iter().map(count).sum::<usize>()).unwrap_or(u32::MAX)
    }
}

/// The object a `json!({…})` literal built, without copying it.
fn into_object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Texts of a messages array or an input: strings, `content` strings, `text` of parts.
fn collect_texts<'a>(value: &'a Value, out: &mut Vec<&'a str>, depth: u32) {
    if depth > 4 {
        return;
    }
    match value {
        Value::String(text) => out.push(text),
        Value::Array(items) => items.iter().for_each(|item| collect_texts(item, out, depth + 1)),
        Value::Object(object) => {
            for field in ["content", "text"] {
                if let Some(inner) = object.get(field) {
                    collect_texts(inner, out, depth + 1);
                }
            }
        }
        _ => {}
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

    /// The `usage` object of a response or a chunk, if it has one.
    pub fn of(body: &Object) -> Option<Usage> {
        let usage = body.get("usage")?.as_object()?;
        let count = |field: &str| usage.get(field).and_then(Value::as_u64).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
        Some(Usage { prompt_tokens: count("prompt_tokens"), completion_tokens: count("completion_tokens") })
    }
}

/// A usable answer: the provider's whole body, and who served it.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    kind: Kind,
    body: Object,
    request_id: Option<String>,
    source: Option<String>,
    attempts: u32,
}

impl Response {
    /// A provider's answer of `kind`, as it sent it.
    pub fn new(kind: Kind, body: Object) -> Self {
        Response { kind, body, request_id: None, source: None, attempts: 0 }
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

    /// The embeddings' `data` entries.
    pub fn embeddings(&self) -> &[Value] {
        self.body.get("data").and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// The `i`-th embedding as numbers (`None` for base64 or a missing entry).
    pub fn vector(&self, i: usize) -> Option<Vec<f64>> {
        self.embeddings().get(i)?.get("embedding")?.as_array()?.iter().map(Value::as_f64).collect()
    }

    /// Whether the answer can be used (SPEC §2): a chat choice with text, tool calls, a refusal
    /// or audio; embeddings, each with a vector. Anything else is `Transient("empty")`.
    pub fn is_usable(&self) -> bool {
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
        }
    }

    /// The text answers a structured check applies to: every choice's text, unless that choice
    /// answered with tool calls or a refusal instead.
    pub fn text_answers(&self) -> impl Iterator<Item = &str> {
        self.choices().iter().filter_map(|c| {
            let message = c.get("message")?.as_object()?;
            let other = nonempty_array(message.get("tool_calls")) || nonempty_string(message.get("refusal"));
            if other { None } else { message.get("content")?.as_str() }
        })
    }
}

fn nonempty_string(value: Option<&Value>) -> bool {
    value.and_then(Value::as_str).is_some_and(|s| !s.trim().is_empty())
}

fn nonempty_array(value: Option<&Value>) -> bool {
    value.and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

/// A message (or a stream delta) that carries something: text, tool calls, a refusal, audio,
/// or a call of the legacy `functions` API (`function_call`).
pub fn message_is_usable(message: &Object) -> bool {
    nonempty_string(message.get("content"))
        || nonempty_array(message.get("tool_calls"))
        || nonempty_string(message.get("refusal"))
        || message.get("audio").is_some_and(|a| a.is_object())
        || message
            .get("function_call")
            .and_then(Value::as_object)
            .is_some_and(|call| nonempty_string(call.get("name")) || nonempty_string(call.get("arguments")))
}

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
}

impl Outcome {
    /// An outcome of `class` with `detail`, without Retry-After or provider error.
    pub fn new(class: OutcomeClass, detail: impl Into<String>) -> Self {
        Outcome { class, detail: detail.into(), retry_after: None, provider_error: None }
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

    /// Splits into outcome and answer.
    pub fn into_parts(self) -> (Outcome, Option<Response>) {
        (self.outcome, self.response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat_answer(message: Value) -> Response {
        let body = json!({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]});
        Response::new(Kind::Chat, body.as_object().cloned().unwrap_or_default())
    }

    #[test]
    fn a_success_always_has_a_response() {
        let a = Attempt::failure(OutcomeClass::Success, "lying adapter", None);
        assert_eq!(a.outcome().class, OutcomeClass::Transient);
        assert_eq!(a.outcome().detail, "success_without_response");
        let ok = Attempt::success(chat_answer(json!({"content": "hi"})), "http_200");
        assert_eq!(ok.outcome().class, OutcomeClass::Success);
        assert!(ok.response().is_some());
    }

    #[test]
    fn the_builders_write_the_native_body_and_estimate_tokens() {
        let r = Request::chat(vec![Message::user("12345678")]);
        assert_eq!(r.kind(), Kind::Chat);
        assert_eq!(r.body()["messages"], json!([{"role": "user", "content": "12345678"}]));
        assert_eq!(r.estimated_tokens, 3 + DEFAULT_COMPLETION_TOKENS);
        let r = r.temperature(0.2).max_completion_tokens(10).json_object();
        assert_eq!(r.body()["temperature"].to_string(), "0.2", "a temperature is carried exactly");
        assert_eq!(r.estimated_tokens, 3 + 10);
        assert!(matches!(r.structured, Some(Structured::JsonSchema(_))));
        let e = Request::embeddings(vec!["abcdefgh".into()]);
        assert_eq!((e.kind(), e.estimated_tokens), (Kind::Embeddings, 3));
        let tokens = Request::native(Kind::Embeddings, json!({"input": [[1, 2, 3], [4]]}).as_object().cloned().unwrap_or_default());
        assert_eq!(tokens.estimated_tokens, 1 + 4);
    }

    #[test]
    fn any_serializable_object_is_a_body_and_anything_else_is_refused() {
        #[derive(Serialize)]
        struct Mine {
            model: &'static str,
            messages: Vec<Message>,
            seed: u64,
        }
        let r = Request::from_body(Kind::Chat, &Mine { model: "x", messages: vec![Message::user("hi")], seed: 7 }).unwrap();
        assert_eq!(r.body()["seed"], 7);
        assert_eq!(r.texts().collect::<Vec<_>>(), ["hi"]);
        let e = Request::from_body(Kind::Chat, &vec![1, 2]).unwrap_err();
        assert_eq!(e.to_string(), "a chat request body must be a JSON object: it serializes to an array");
    }

    #[test]
    fn texts_are_read_from_strings_and_parts() {
        let body = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}, {"role": "assistant", "content": "b"}]});
        let r = Request::native(Kind::Chat, body.as_object().cloned().unwrap_or_default());
        assert_eq!(r.texts().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn text_tool_calls_refusals_and_audio_are_usable_answers() {
        assert!(chat_answer(json!({"content": "hi"})).is_usable());
        assert!(chat_answer(json!({"content": null, "tool_calls": [{"id": "t"}]})).is_usable());
        assert!(chat_answer(json!({"content": null, "refusal": "no"})).is_usable());
        assert!(chat_answer(json!({"content": null, "audio": {"id": "a"}})).is_usable());
        assert!(
            chat_answer(json!({"content": null, "function_call": {"name": "get", "arguments": "{}"}})).is_usable(),
            "the legacy functions API"
        );
        assert!(!chat_answer(json!({"content": "  "})).is_usable());
        assert!(!chat_answer(json!({"content": null, "tool_calls": []})).is_usable());
        assert_eq!(chat_answer(json!({"content": null, "tool_calls": [{"id": "t"}]})).text_answers().count(), 0);
        assert_eq!(chat_answer(json!({"content": "{}"})).text_answers().collect::<Vec<_>>(), ["{}"]);
        let empty = Response::new(Kind::Embeddings, json!({"data": []}).as_object().cloned().unwrap_or_default());
        assert!(!empty.is_usable());
        let b64 = Response::new(Kind::Embeddings, json!({"data": [{"embedding": "AAAA"}]}).as_object().cloned().unwrap_or_default());
        assert!(b64.is_usable() && b64.vector(0).is_none());
    }

    #[test]
    fn parse_functions_do_not_break_debug() {
        let s = Structured::Parse(Arc::new(|_| Ok(())));
        assert_eq!(format!("{s:?}"), "Parse(<fn>)");
    }
}
