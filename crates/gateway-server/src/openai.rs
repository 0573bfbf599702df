//! The OpenAI dialect at the server's edge. A request body is passed on as the caller wrote it:
//! the proxy reads only what the gateway itself needs (`model`, the scope; `stream` and
//! `stream_options`, which the gateway owns; `response_format`, checked locally too; enough of
//! `messages` or `input` to estimate tokens), and every error names the field. Answers are the
//! provider's bodies, unchanged; `CallError`s become OpenAI error bodies with the right status,
//! and a provider's own refusal is passed on as it came.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use gateway_client::{CallError, CallReport, Exhausted, StreamError, TenantRefusal};
use gateway_core::request::{Kind, Object, Request, Structured};
use gateway_core::stream::{Chunk, StructuredStream};
use gateway_http::HttpUpstream;
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
    /// A provider's own error body, answered as it came instead of the fields above.
    pub provider_body: Option<Box<Value>>,
}

impl ApiError {
    /// 400 naming `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param.to_owned()),
            code: "invalid_request".into(),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", "", message)
        }
    }

    /// Any status, without a field.
    pub fn new(status: StatusCode, kind: &'static str, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            code: code.to_owned(),
            param: None,
            message: message.into(),
            retry_after: None,
            close: false,
            provider_body: None,
        }
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
        match &self.provider_body {
            Some(body) => Value::clone(body),
            None => json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}),
        }
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

fn seconds_up(d: std::time::Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The status a call's terminal error is answered with.
pub fn call_error(error: &CallError) -> ApiError {
    let message = error.to_string();
    match error {
        CallError::CircuitOpen { retry_after, .. } => ApiError {
            retry_after: Some(seconds_up(*retry_after)),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "circuit_open", message)
        },
        CallError::AllSourcesExhausted { reason: Exhausted::QuotaExhausted, .. } => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "quota_exhausted", message)
        }
        CallError::RateLimited { retry_after, .. } => ApiError {
            retry_after: Some(seconds_up(*retry_after)),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "rate_limit_exceeded", message)
        },
        CallError::AllSourcesExhausted { reason: Exhausted::Stalled, .. } => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "stalled", message)
        }
        // The provider's own answer: its status, message, code and param.
        CallError::RequestRejected { provider_error: Some(provider), .. } => ApiError {
            provider_body: Some(Box::new(provider.body.clone())),
            ..ApiError::new(StatusCode::from_u16(provider.status).unwrap_or(StatusCode::BAD_REQUEST), "invalid_request_error", "", message)
        },
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
        CallError::StreamBroken { .. } => ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", "stream_broken", message),
        CallError::BackendUnavailable { .. } => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "gate_backend_unavailable", message)
        }
        CallError::KindNotServed { .. } => ApiError::invalid("model", message),
        CallError::NotStreamable { .. } => ApiError::invalid("stream", message),
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

/// `error` of a call whose attempts ended past a size budget (the last such attempt in
/// `report`), with the budget named: code `response_too_large`, the limit and its value.
pub fn naming_the_limit(error: ApiError, report: Option<&CallReport>, http: Option<&HttpUpstream>) -> ApiError {
    let attempts = report.map(|r| r.attempts.as_slice()).unwrap_or_default();
    let passed = attempts.iter().rev().find_map(|a| Some((a.source.as_str(), http?.budget_passed(&a.source, &a.detail)?)));
    let Some((source, (key, bytes))) = passed else { return error };
    let message = format!("the answer of source {source} exceeded {key} ({bytes} bytes); {}", error.message);
    ApiError { code: "response_too_large".into(), message, ..error }
}

/// The `error` event of a stream that broke off after its commit point (`stream_broken`, or
/// `response_too_large` naming the budget it passed).
pub fn stream_broken(broken: &StreamError, http: Option<&HttpUpstream>) -> ApiError {
    let error = ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", "stream_broken", broken.to_string());
    let Some((key, bytes)) = http.and_then(|h| h.budget_passed(&broken.source_name, &broken.detail)) else { return error };
    let message = format!("the stream from {} exceeded {key} ({bytes} bytes) and was ended", broken.source_name);
    ApiError { code: "response_too_large".into(), message, ..error }
}

fn field<'a>(body: &'a Object, name: &str) -> Option<&'a Value> {
    body.get(name).filter(|v| !v.is_null())
}

/// The `model` field: the scope.
pub fn model(body: &Object) -> Result<String, ApiError> {
    match field(body, "model") {
        Some(Value::String(model)) if !model.is_empty() => Ok(model.clone()),
        Some(_) => Err(ApiError::invalid("model", "model must be a non-empty string (a scope of this gateway)")),
        None => Err(ApiError::invalid("model", "model is required (a scope of this gateway)")),
    }
}

/// What a chat body asks of the gateway itself, beyond the request passed on.
#[derive(Debug)]
pub struct ChatAsk {
    /// The gateway request (the caller's body).
    pub request: Request,
    /// The caller wants SSE.
    pub stream: bool,
    /// The caller wants the usage chunk at the end of the stream.
    pub include_usage: bool,
}

/// The header by which one request overrides its scope's `structured_stream`.
pub const STRUCTURED_STREAM_HEADER: &str = "x-gateway-structured-stream";

/// This request's own `structured_stream`, from its header: `validated` or `first_token`.
pub fn structured_stream(headers: &axum::http::HeaderMap) -> Result<Option<StructuredStream>, ApiError> {
    let Some(value) = headers.get(STRUCTURED_STREAM_HEADER) else { return Ok(None) };
    let parsed = value.to_str().ok().and_then(StructuredStream::parse);
    parsed.map(Some).ok_or_else(|| {
        let shown = String::from_utf8_lossy(value.as_bytes()).chars().take(40).collect::<String>();
        ApiError::invalid(
            STRUCTURED_STREAM_HEADER,
            format!("{STRUCTURED_STREAM_HEADER} must be \"validated\" or \"first_token\", not {shown:?}"),
        )
    })
}

/// A chat-completions body: the request, and how the caller takes the answer.
pub fn chat_request(body: Object, schemas: &Schemas) -> Result<ChatAsk, ApiError> {
    match field(&body, "messages") {
        Some(Value::Array(list)) if !list.is_empty() => {}
        Some(Value::Array(_)) => return Err(ApiError::invalid("messages", "messages must not be empty")),
        _ => return Err(ApiError::invalid("messages", "messages is required: an array of messages")),
    }
    let stream = match field(&body, "stream") {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| ApiError::invalid("stream", "stream must be a boolean"))?,
    };
    let include_usage = match field(&body, "stream_options") {
        None => false,
        Some(Value::Object(options)) => match options.get("include_usage").filter(|v| !v.is_null()) {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| ApiError::invalid("stream_options.include_usage", "include_usage must be a boolean"))?,
        },
        Some(_) => return Err(ApiError::invalid("stream_options", "stream_options must be an object")),
    };
    let structured = structured_check(&body, schemas)?;
    let mut request = Request::native(Kind::Chat, body);
    request.structured = structured;
    Ok(ChatAsk { request, stream, include_usage })
}

/// The local check of a `response_format` (it is passed on as well): JSON mode wants a JSON
/// object; a JSON schema is bounded and compiled once. Other formats are the provider's alone.
fn structured_check(body: &Object, schemas: &Schemas) -> Result<Option<Structured>, ApiError> {
    let Some(format) = field(body, "response_format") else { return Ok(None) };
    let Some(format) = format.as_object() else { return Err(ApiError::invalid("response_format", "response_format must be an object")) };
    match format.get("type").and_then(Value::as_str) {
        Some("json_object") => Ok(Some(Structured::JsonSchema(json!({"type": "object"})))),
        Some("json_schema") => match format.get("json_schema").and_then(|s| s.get("schema")) {
            Some(schema) => {
                schemas.compile(schema).map_err(|why| ApiError::invalid("response_format.json_schema.schema", why.to_string()))?;
                Ok(Some(Structured::JsonSchema(schema.clone())))
            }
            None => Err(ApiError::invalid("response_format.json_schema.schema", "a json_schema response format needs its schema")),
        },
        Some(_) => Ok(None),
        None => Err(ApiError::invalid("response_format.type", "response_format needs a type (text, json_object, json_schema)")),
    }
}

/// An embeddings body: the request, passed on as written (`dimensions`, `encoding_format`,
/// token arrays), its vectors answered as the provider encoded them.
pub fn embeddings_request(body: Object) -> Result<Request, ApiError> {
    match field(&body, "input") {
        Some(Value::String(_)) => {}
        Some(Value::Array(items)) if !items.is_empty() => {}
        _ => return Err(ApiError::invalid("input", "input is required: a string, an array of strings or an array of token arrays")),
    }
    Ok(Request::native(Kind::Embeddings, body))
}

/// A chunk as an SSE event.
pub fn chunk_event(chunk: &Chunk) -> String {
    format!("data: {}\n\n", Value::Object(chunk.clone()))
}

/// The usage-only chunk at the end of a stream (no choices): relayed only when asked for.
pub fn is_usage_chunk(chunk: &Chunk) -> bool {
    chunk.get("choices").and_then(Value::as_array).is_some_and(Vec::is_empty) && chunk.get("usage").is_some_and(Value::is_object)
}

/// An error as an SSE `error` event (after the stream's headers went out); the OpenAI SDKs
/// raise it as an `APIError`.
pub fn error_event(error: &ApiError) -> String {
    format!("event: error\ndata: {}\n\n", error.body())
}
