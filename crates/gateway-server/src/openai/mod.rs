//! The OpenAI dialect at the server's edge (its request bodies in [`bodies`], its streamed
//! events in [`events`]). A request body is passed on as the caller wrote it:
//! the proxy reads only what the gateway itself needs (`model`, the scope; `stream` and
//! `stream_options`, which the gateway owns; `response_format`, checked locally too; enough of
//! `messages` or `input` to estimate tokens), and every error names the field. Answers are the
//! provider's bodies, unchanged; `CallError`s become OpenAI error bodies with the right status,
//! and a provider's own refusal is passed on as it came.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
mod bodies;
mod events;

pub use bodies::*;
pub use events::*;

use gateway_client::{CallError, CallReport, Exhausted, StreamError, TenantRefusal, Unroutable};
use gateway_http::HttpUpstream;
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

impl ApiError {
    /// This error's answer with `body` (its own shape's, or another dialect's): its status,
    /// `retry-after` and `connection: close`.
    pub fn respond(self, body: &Value) -> Response {
        let mut response = (self.status, [("content-type", "application/json")], body.to_string()).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert("retry-after", HeaderValue::from(seconds));
        }
        if self.close {
            response.headers_mut().insert("connection", HeaderValue::from_static("close"));
        }
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body();
        self.respond(&body)
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
        CallError::KindNotServed { .. } | CallError::NoSourceCarries { .. } => ApiError::invalid("model", message),
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
        CallError::Unroutable { reason: Unroutable::Backend(_), .. } => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "affinity_backend_unavailable", message)
        }
        // What OpenAI answers a request continuing a response (or a conversation) it lacks.
        CallError::Unroutable { reason: Unroutable::Unknown, field, id, .. } => {
            let code = match field.as_str() {
                "previous_response_id" => "previous_response_not_found",
                "conversation" => "conversation_not_found",
                _ => "not_found",
            };
            let message = format!(
                "{} with id '{id}' not found: {message}",
                if field == "conversation" { "Conversation" } else { "Previous response" }
            );
            ApiError { param: Some(field.clone()), ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", code, message) }
        }
        CallError::Unroutable { field, .. } => ApiError {
            param: Some(field.clone()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", "unroutable", message)
        },
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
