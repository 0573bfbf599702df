//! The OpenAI dialect at the server's edge: request bodies into gateway requests (every error
//! names the field), responses and SSE chunks out, and `CallError`s as OpenAI error bodies
//! with the right status.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use gateway_client::{CallError, Exhausted, TenantRefusal};
use gateway_core::request::{Message, Payload, Request, Role, Structured, Usage};
use gateway_http::structured::Schemas;
use serde_json::{Value, json};

/// An error answered in the OpenAI shape.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// `error.type`.
    pub kind: &'static str,
    /// `error.code`.
    pub code: String,
    /// `error.param`: the request field at fault.
    pub param: Option<String>,
    /// `error.message`.
    pub message: String,
    /// `Retry-After` seconds, when the gateway knows a certain retry moment.
    pub retry_after: Option<u64>,
    /// The server closes the connection after this answer (`connection: close` says so).
    pub close: bool,
}

impl ApiError {
    /// 400 naming `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            code: "invalid_request".into(),
            param: Some(param.to_owned()),
            message: message.into(),
            retry_after: None,
            close: false,
        }
    }

    /// Any status, without a field.
    pub fn new(status: StatusCode, kind: &'static str, code: &str, message: impl Into<String>) -> Self {
        ApiError { status, kind, code: code.to_owned(), param: None, message: message.into(), retry_after: None, close: false }
    }

    /// The same answer, after which the server closes the connection.
    pub fn closing(self) -> Self {
        ApiError { close: true, ..self }
    }

    /// 503 for a call still running at the shutdown deadline.
    pub fn shutting_down() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "shutting_down",
            "the gateway is shutting down: the call was ended at the shutdown deadline; retry on another replica",
        )
        .closing()
    }

    /// The body, as JSON.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, [("content-type", "application/json")], self.body().to_string()).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert("retry-after", HeaderValue::from(seconds));
        }
        if self.close {
            response.headers_mut().insert("connection", HeaderValue::from_static("close"));
        }
        response
    }
}

/// The status a call's terminal error is answered with.
pub fn call_error(error: &CallError) -> ApiError {
    let message = error.to_string();
    match error {
        CallError::CircuitOpen { retry_after, .. } => ApiError {
            retry_after: Some(retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0)),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "circuit_open", message)
        },
        CallError::AllSourcesExhausted { reason: Exhausted::QuotaExhausted, .. } => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "quota_exhausted", message)
        }
        CallError::RateLimited { retry_after, .. } => ApiError {
            retry_after: Some(retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0)),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "rate_limit_exceeded", message)
        },
        CallError::AllSourcesExhausted { reason: Exhausted::Stalled, .. } => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "stalled", message)
        }
        CallError::RequestRejected { detail, .. } => {
            // The provider's own status (`http_413`), else 400; a provider code is passed on.
            let status = detail
                .strip_prefix("http_")
                .and_then(|s| s.parse::<u16>().ok())
                .and_then(|s| StatusCode::from_u16(s).ok())
                .filter(StatusCode::is_client_error)
                .unwrap_or(StatusCode::BAD_REQUEST);
            ApiError::new(status, "invalid_request_error", detail, message)
        }
        CallError::RetryExhausted { .. } => ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", "retry_exhausted", message),
        CallError::StructuredExhausted { .. } => {
            ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", "structured_output_invalid", message)
        }
        CallError::BackendUnavailable { .. } => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "gate_backend_unavailable", message)
        }
        CallError::KindNotServed { .. } => ApiError::invalid("model", message),
        CallError::UnknownScope { .. } => ApiError {
            param: Some("model".into()),
            ..ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", "model_not_found", message)
        },
        CallError::TenantRefused { reason: TenantRefusal::Malformed, .. } => ApiError::invalid("x-tenant-id", message),
        CallError::TenantRefused { reason: TenantRefusal::Full, .. } => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "tenant_capacity", message)
        }
        CallError::TenantRefused { .. } => ApiError::new(StatusCode::FORBIDDEN, "permission_error", "tenant_refused", message),
        CallError::FallbackFailed { fallback, .. } => ApiError { message, ..call_error(fallback) },
    }
}

fn field<'a>(body: &'a Value, name: &str) -> Option<&'a Value> {
    body.get(name).filter(|v| !v.is_null())
}

/// The `model` field: the scope.
pub fn model(body: &Value) -> Result<String, ApiError> {
    match field(body, "model") {
        Some(Value::String(model)) if !model.is_empty() => Ok(model.clone()),
        Some(_) => Err(ApiError::invalid("model", "model must be a non-empty string (a scope of this gateway)")),
        None => Err(ApiError::invalid("model", "model is required (a scope of this gateway)")),
    }
}

fn optional_u32(body: &Value, name: &str) -> Result<Option<u32>, ApiError> {
    match field(body, name) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| ApiError::invalid(name, format!("{name} must be a non-negative integer, got {v}"))),
    }
}

fn text_of(content: &Value, at: &str) -> Result<String, ApiError> {
    match content {
        Value::String(text) => Ok(text.clone()),
        Value::Array(parts) => parts
            .iter()
            .enumerate()
            .map(|(i, part)| match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                (Some("text"), Some(text)) => Ok(text),
                _ => Err(ApiError::invalid(&format!("{at}[{i}]"), "only text content parts are supported")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|texts| texts.join("")),
        _ => Err(ApiError::invalid(at, "content must be a string or an array of text parts")),
    }
}

/// A chat-completions body: the gateway request and whether the client wants SSE (and usage in
/// the stream).
pub fn chat_request(body: &Value, schemas: &Schemas) -> Result<(Request, bool, bool), ApiError> {
    let Some(Value::Array(list)) = field(body, "messages") else {
        return Err(ApiError::invalid("messages", "messages is required: an array of {role, content}"));
    };
    if list.is_empty() {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    let mut messages = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let role = match m.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => Role::System,
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            other => {
                return Err(ApiError::invalid(
                    &format!("messages[{i}].role"),
                    format!("role {other:?} is not supported (system, developer, user, assistant)"),
                ));
            }
        };
        let content = text_of(m.get("content").unwrap_or(&Value::Null), &format!("messages[{i}].content"))?;
        messages.push(Message { role, content });
    }
    let max_tokens = match optional_u32(body, "max_completion_tokens")? {
        Some(n) => Some(n),
        None => optional_u32(body, "max_tokens")?,
    };
    let temperature = match field(body, "temperature") {
        None => None,
        Some(v) => Some(
            v.as_f64()
                .filter(|t| (0.0..=2.0).contains(t))
                .ok_or_else(|| ApiError::invalid("temperature", "temperature must be a number in 0..=2"))? as f32,
        ),
    };
    let stream = match field(body, "stream") {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| ApiError::invalid("stream", "stream must be a boolean"))?,
    };
    let include_usage = match field(body, "stream_options") {
        None => false,
        Some(Value::Object(options)) => match options.get("include_usage").filter(|v| !v.is_null()) {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| ApiError::invalid("stream_options.include_usage", "include_usage must be a boolean"))?,
        },
        Some(_) => return Err(ApiError::invalid("stream_options", "stream_options must be an object")),
    };
    let structured = match field(body, "response_format") {
        None => None,
        Some(format) => match format.get("type").and_then(Value::as_str) {
            Some("text") => None,
            Some("json_object") => Some(Structured::JsonSchema(json!({"type": "object"}))),
            Some("json_schema") => match format.pointer("/json_schema/schema") {
                Some(schema) => {
                    schemas.compile(schema).map_err(|why| ApiError::invalid("response_format.json_schema.schema", why.to_string()))?;
                    Some(Structured::JsonSchema(schema.clone()))
                }
                None => {
                    return Err(ApiError::invalid("response_format.json_schema.schema", "a json_schema response format needs its schema"));
                }
            },
            _ => return Err(ApiError::invalid("response_format.type", "type must be text, json_object or json_schema")),
        },
    };
    let chars: usize = messages.iter().map(|m| m.content.len()).sum();
    let estimated_tokens = u32::try_from(chars / 4).unwrap_or(u32::MAX).saturating_add(max_tokens.unwrap_or(256));
    // Upstream, stream when the client does: the source's watchdog then guards the first token.
    let payload = Payload::Chat { messages, max_tokens, temperature, stream };
    Ok((Request { payload, structured, estimated_tokens }, stream, include_usage))
}

/// An embeddings body: the request and whether vectors go back as base64.
pub fn embeddings_request(body: &Value) -> Result<(Request, bool), ApiError> {
    let input = match field(body, "input") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::invalid(&format!("input[{i}]"), "only text inputs are supported (not token arrays)"))
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(ApiError::invalid("input", "input is required: a string or a non-empty array of strings")),
    };
    let base64 = match field(body, "encoding_format").map(Value::as_str) {
        None | Some(Some("float")) => false,
        Some(Some("base64")) => true,
        Some(_) => return Err(ApiError::invalid("encoding_format", "encoding_format must be float or base64")),
    };
    let chars: usize = input.iter().map(String::len).sum();
    let request = Request {
        payload: Payload::Embedding { input },
        structured: None,
        estimated_tokens: u32::try_from(chars / 4).unwrap_or(u32::MAX).max(1),
    };
    Ok((request, base64))
}

/// `usage` as OpenAI reports it.
pub fn usage(usage: Option<Usage>) -> Value {
    let u = usage.unwrap_or(Usage { prompt_tokens: 0, completion_tokens: 0 });
    json!({"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total()})
}

/// A `chat.completion`.
pub fn completion(id: &str, created: u64, model: &str, content: &str, usage_: Option<Usage>) -> Value {
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": usage(usage_),
    })
}

/// The SSE events of a finished completion: the content, the stop, the usage if asked, `[DONE]`.
pub fn completion_events(id: &str, created: u64, model: &str, content: &str, usage_: Option<Usage>, include_usage: bool) -> String {
    let chunk = |choices: Value, usage: Option<Value>| {
        let mut c = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices});
        if let Some(usage) = usage {
            c["usage"] = usage;
        }
        format!("data: {c}\n\n")
    };
    let mut events = chunk(json!([{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": null}]), None);
    events += &chunk(json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]), None);
    if include_usage {
        events += &chunk(json!([]), Some(usage(usage_)));
    }
    events + "data: [DONE]\n\n"
}

/// An error as an SSE event (after the stream's headers went out).
pub fn error_event(error: &ApiError) -> String {
    format!("data: {}\n\n", error.body())
}

/// The embeddings list.
pub fn embeddings(model: &str, vectors: &[Vec<f32>], usage_: Option<Usage>, base64: bool) -> Value {
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json!({"object": "list", "data": data, "model": model, "usage": usage(usage_)})
}
