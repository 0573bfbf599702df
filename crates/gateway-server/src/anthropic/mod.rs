//! Anthropic's dialect at the server's edge: a Messages body read for what the gateway itself
//! needs (`model`, the scope; `stream`; `messages` present), the caller's `anthropic-*` and
//! `x-app` headers kept to pass on, and errors in Anthropic's shape
//! (`{"type": "error", "error": {"type": …, "message": …}}`) with the statuses and
//! `retry-after` of the OpenAI routes. A provider's own error body is passed on as it came.

use crate::openai::{ApiError, ChatAsk};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use gateway_core::request::{Kind, Object, Request};
use serde_json::{Value, json};

/// The Messages call of `body` (`kind`: Messages or CountTokens), passing on the caller's
/// `headers` the provider reads, and whether the caller streams it (its framing is Anthropic's
/// named events, `Framing::of`). Errors name the field or header.
pub fn messages_request(kind: Kind, mut body: Object, headers: &HeaderMap) -> Result<ChatAsk, ApiError> {
    match body.get("messages") {
        Some(Value::Array(_)) => {}
        Some(_) => return Err(ApiError::invalid("messages", "messages must be an array of messages")),
        None => return Err(ApiError::invalid("messages", "messages: Field required")),
    }
    let stream = match body.shift_remove("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(stream)) => stream,
        Some(_) => return Err(ApiError::invalid("stream", "stream must be a boolean")),
    };
    if stream && kind != Kind::Messages {
        return Err(ApiError::invalid("stream", "a token count is not streamed"));
    }
    let mut passed = Vec::new();
    for (name, value) in headers {
        if !gateway_http::anthropic::is_passed_on(name.as_str()) {
            continue;
        }
        let value = value.to_str().map_err(|_| ApiError::invalid(name.as_str(), format!("header {name} is not visible ASCII")))?;
        passed.push((name.as_str().to_owned(), value.to_owned()));
    }
    Ok(ChatAsk { request: Request::native(kind, body).passing(passed), stream, include_usage: false })
}

/// `error`'s body in Anthropic's shape: a provider's own Anthropic error as it came, else the
/// gateway's message under the type its status has, led by the field at fault as Anthropic's
/// own messages are (`messages: Field required`).
pub fn error_body(error: &ApiError) -> Value {
    if let Some(body) = error.provider_body.as_deref().filter(|b| b.get("type").and_then(Value::as_str) == Some("error")) {
        return body.clone();
    }
    let message = match &error.param {
        Some(param) if !error.message.starts_with(&format!("{param}:")) => format!("{param}: {}", error.message),
        _ => error.message.clone(),
    };
    json!({"type": "error", "error": {"type": gateway_core::messages::error_type_of(error.status.as_u16()), "message": message}})
}

/// An error answered in Anthropic's shape (see [`error_body`]).
#[derive(Debug)]
pub struct AnthropicError(pub ApiError);

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let body = error_body(&self.0);
        self.0.respond(&body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, StatusCode};

    fn object(value: Value) -> Object {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_body_is_read_for_stream_and_messages_and_the_providers_headers_are_kept() {
        let mut headers = HeaderMap::new();
        headers.insert("anthropic-beta", HeaderValue::from_static("a,b"));
        headers.insert("x-app", HeaderValue::from_static("cli"));
        headers.insert("x-api-key", HeaderValue::from_static("gateway-key"));
        let ask = messages_request(Kind::Messages, object(json!({"model": "m", "messages": [], "stream": true})), &headers);
        let ask = ask.unwrap_or_else(|e| panic!("{e:?}"));
        assert!(ask.stream);
        assert!(!ask.request.body().contains_key("stream"));
        let mut passed = ask.request.passed_headers().to_vec();
        passed.sort();
        assert_eq!(passed, vec![("anthropic-beta".to_owned(), "a,b".to_owned()), ("x-app".to_owned(), "cli".to_owned())]);
    }

    #[test]
    fn bad_bodies_and_headers_name_what_is_wrong() {
        let none = HeaderMap::new();
        let param =
            |body: Value, kind: Kind, headers: &HeaderMap| messages_request(kind, object(body), headers).err().and_then(|e| e.param);
        assert_eq!(param(json!({"model": "m"}), Kind::Messages, &none).as_deref(), Some("messages"));
        assert_eq!(param(json!({"model": "m", "messages": {}}), Kind::Messages, &none).as_deref(), Some("messages"));
        assert_eq!(param(json!({"model": "m", "messages": [], "stream": "yes"}), Kind::Messages, &none).as_deref(), Some("stream"));
        assert_eq!(param(json!({"model": "m", "messages": [], "stream": true}), Kind::CountTokens, &none).as_deref(), Some("stream"));
        let mut bad = HeaderMap::new();
        bad.insert("anthropic-beta", HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap_or(HeaderValue::from_static("x")));
        assert_eq!(param(json!({"model": "m", "messages": []}), Kind::Messages, &bad).as_deref(), Some("anthropic-beta"));
    }

    #[test]
    fn errors_take_anthropics_shape_and_a_providers_own_passes_unchanged() {
        let invalid = ApiError::invalid("messages", "messages: Field required");
        assert_eq!(
            error_body(&invalid),
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "messages: Field required"}})
        );
        let unknown = ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", "model_not_found", "unknown scope");
        assert_eq!(error_body(&unknown)["error"]["type"], json!("not_found_error"));
        let own = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}});
        let passed = ApiError { provider_body: Some(Box::new(own.clone())), ..ApiError::invalid("x", "y") };
        assert_eq!(error_body(&passed), own);
        for (status, kind) in [(429, "rate_limit_error"), (503, "overloaded_error"), (502, "api_error"), (401, "authentication_error")] {
            let error = ApiError::new(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), "x", "y", "z");
            assert_eq!(error_body(&error)["error"]["type"], json!(kind), "{status}");
        }
    }
}
