//! The request a caller writes: its native body, the builders of chat and embeddings bodies,
//! and the token estimate read from it.

use super::{Form, Kind, Object, Structured, Target};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;

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
    /// This request's own commit point for a stream asking for JSON, over its scope's
    /// `structured_stream` (the proxy's `x-gateway-structured-stream` header).
    pub structured_stream: Option<crate::stream::StructuredStream>,
    /// A stored object's route, when the request goes there rather than to its kind's create
    /// endpoint.
    target: Option<Arc<Target>>,
    /// A multipart form, sent instead of the JSON body.
    form: Option<Arc<Form>>,
    /// The one source the call may use (the one holding the state the request refers to), and
    /// the id of that state.
    pin: Option<(Arc<str>, Arc<str>)>,
    /// Headers of the caller's that the provider reads (`anthropic-version`, `anthropic-beta`,
    /// …), passed on as they came to a source of their protocol.
    passed: Option<Arc<[(String, String)]>>,
}

/// Completion tokens assumed when a chat body sets no limit.
pub(super) const DEFAULT_COMPLETION_TOKENS: u32 = 256;

impl Request {
    /// A request of `kind` with this native body, its token estimate from the body (a quarter
    /// of the text's characters, plus the completion limit for chat).
    pub fn native(kind: Kind, body: Object) -> Self {
        let mut request = Request {
            kind,
            body: Arc::new(body),
            structured: None,
            estimated_tokens: 0,
            structured_stream: None,
            target: None,
            form: None,
            pin: None,
            passed: None,
        };
        request.estimated_tokens = request.estimate();
        request
    }

    /// A request of `kind` sent as this multipart form (an upload); its token estimate from its
    /// `prompt` field.
    pub fn multipart(kind: Kind, form: Form) -> Self {
        let mut request = Request::native(kind, Object::new());
        request.form = Some(Arc::new(form));
        request.estimated_tokens = request.estimate();
        request
    }

    /// A request of `kind` to a stored object's route (`GET responses/{id}`), with no body.
    pub fn to_target(kind: Kind, target: Target) -> Self {
        Request::native(kind, Object::new()).with_target(target)
    }

    /// The same request sent to `target` instead of its kind's create endpoint.
    pub fn with_target(mut self, target: Target) -> Self {
        self.target = Some(Arc::new(target));
        self
    }

    /// The same request, allowed on `source` only: the source that holds the state `id` names
    /// (a stored object's route).
    pub fn pinned_to(mut self, source: &str, id: &str) -> Self {
        self.pin = Some((Arc::from(source), Arc::from(id)));
        self
    }

    /// The same request, passing on `headers` of the caller's (lower-case names) to a source of
    /// the kind's protocol.
    pub fn passing(mut self, headers: Vec<(String, String)>) -> Self {
        self.passed = (!headers.is_empty()).then(|| headers.into());
        self
    }

    /// The caller's headers passed on to the provider.
    pub fn passed_headers(&self) -> &[(String, String)] {
        self.passed.as_deref().unwrap_or(&[])
    }

    /// The route it goes to, when not its kind's create endpoint.
    pub fn target(&self) -> Option<&Target> {
        self.target.as_deref()
    }

    /// The multipart form it is sent as, if it is an upload.
    pub fn form(&self) -> Option<&Form> {
        self.form.as_deref()
    }

    /// The one source the call may use and the id of the state it holds, if it is pinned.
    pub fn pinned(&self) -> Option<(&str, &str)> {
        self.pin.as_ref().map(|(source, id)| (&**source, &**id))
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

    /// The body fields holding the texts a provider reads, by kind.
    fn text_fields(&self) -> &'static [&'static str] {
        match self.kind {
            Kind::Chat => &["messages"],
            Kind::Embeddings | Kind::Moderations | Kind::Speech => &["input"],
            Kind::Responses => &["instructions", "input"],
            Kind::Completions | Kind::Images | Kind::ImageEdits | Kind::Transcriptions | Kind::Translations => &["prompt"],
            Kind::Files | Kind::Batches => &[],
            Kind::Messages | Kind::CountTokens => &["system", "messages"],
        }
    }

    /// Every text the request carries (message contents and text parts; inputs and prompts; a
    /// form's `prompt` field): what providers and estimates read.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        let mut texts = Vec::new();
        for field in self.text_fields() {
            if let Some(value) = self.body.get(*field) {
                collect_texts(value, &mut texts, 0);
            }
            if let Some(text) = self.form.as_deref().and_then(|form| form.value(field)) {
                texts.push(text);
            }
        }
        texts.into_iter()
    }

    /// A quarter of the characters of the texts (token arrays count a token each), plus what
    /// the answer may use: the completion limit for chat (× `n`), responses and legacy
    /// completions (× `n`).
    fn estimate(&self) -> u32 {
        let chars: usize = self.texts().map(str::len).sum();
        let tokens = u32::try_from(chars / 4 + 1).unwrap_or(u32::MAX).saturating_add(self.token_arrays());
        let (limits, default): (&[&str], u32) = match self.kind {
            Kind::Chat => (&["max_completion_tokens", "max_tokens"], DEFAULT_COMPLETION_TOKENS),
            Kind::Responses => (&["max_output_tokens"], DEFAULT_COMPLETION_TOKENS),
            Kind::Messages => (&["max_tokens"], DEFAULT_COMPLETION_TOKENS),
            // The legacy endpoint's own default is 16 tokens.
            Kind::Completions => (&["max_tokens"], 16),
            _ => return tokens,
        };
        let limit =
            limits.iter().find_map(|f| self.body.get(*f).and_then(Value::as_u64)).map_or(default, |n| u32::try_from(n).unwrap_or(u32::MAX));
        // `n` choices each get up to the completion limit (the provider counts it so).
        let choices = self.body.get("n").and_then(Value::as_u64).map_or(1, |n| u32::try_from(n.max(1)).unwrap_or(u32::MAX));
        tokens.saturating_add(limit.saturating_mul(choices))
    }

    /// Tokens given as numbers (an embeddings input or a legacy prompt of token arrays).
    fn token_arrays(&self) -> u32 {
        let field = match self.kind {
            Kind::Embeddings => "input",
            Kind::Completions => "prompt",
            _ => return 0,
        };
        let Some(Value::Array(input)) = self.body.get(field) else { return 0 };
        let count = |v: &Value| v.as_array().map_or(usize::from(v.is_number()), |a| a.iter().filter(|t| t.is_number()).count());
        u32::try_from(input.iter().map(count).sum::<usize>()).unwrap_or(u32::MAX)
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
