//! Anthropic's Messages API answers (SPEC §2, extended to the protocol): when a `message` is
//! usable, the text answers a structured check reads, and what an `error` (a body's, or a
//! stream's `error` event) is charged with.
//!
//! Usable: a `content` block of text that says something, a `tool_use` (or a server tool's
//! use), or a `stop_reason` of `refusal` (the model's word, as a chat refusal is). A message of
//! thinking alone says nothing: `Empty`. `max_tokens` is chat's `length`: the answer is cut,
//! judged like any other (a structured check fails on a cut JSON text). A token count is usable
//! when it has its `input_tokens`.
//!
//! Errors by `error.type`: `overloaded_error` (529) and `api_error` are `Transient`;
//! `rate_limit_error` is `RateLimited`; `authentication_error`, `permission_error` and
//! `billing_error` are a dead key (`SourceDead`); `invalid_request_error` and
//! `request_too_large` are the request's (`RequestRejected`, never the breaker); `not_found_error`
//! is as a 404 is at the source (`classify`'s `NotFound`).

use crate::outcome::OutcomeClass;
use crate::request::{Object, nonempty_string as says_something};
use serde_json::Value;

/// The content blocks of a `message`.
pub fn content(body: &Object) -> &[Value] {
    body.get("content").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The block's `type`.
fn block_type(block: &Value) -> &str {
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Whether a content block is usable: text that says something, or a tool's use.
pub(crate) fn block_is_usable(block: &Value) -> bool {
    match block_type(block) {
        "text" => says_something(block.get("text")),
        "tool_use" | "server_tool_use" | "mcp_tool_use" => true,
        _ => false,
    }
}

/// Whether the message refused (`stop_reason: refusal`).
pub fn refused(body: &Object) -> bool {
    body.get("stop_reason").and_then(Value::as_str) == Some("refusal")
}

/// Whether a `message` is usable (see the module's rule).
pub fn is_usable(body: &Object) -> bool {
    refused(body) || content(body).iter().any(block_is_usable)
}

/// Whether the message answers otherwise than with text: a tool's use, or a refusal. Its text,
/// if any, is then no text answer.
fn answers_otherwise(body: &Object) -> bool {
    refused(body) || content(body).iter().any(|b| block_is_usable(b) && block_type(b) != "text")
}

/// The text answers of a `message`: each text block's text (`""` for a message with none: a
/// blank answer is not JSON), unless it answers otherwise.
pub fn text_answers(body: &Object) -> impl Iterator<Item = &str> {
    let texts: Vec<&str> = if answers_otherwise(body) {
        Vec::new()
    } else {
        let texts: Vec<&str> =
            content(body).iter().filter(|b| block_type(b) == "text").map(|b| b.get("text").and_then(Value::as_str).unwrap_or("")).collect();
        if texts.is_empty() { vec![""] } else { texts }
    };
    texts.into_iter()
}

/// The class an Anthropic `error.type` decides, if it is one of Anthropic's; `None` for
/// `not_found_error` (the source's 404 rule decides) and types it does not know.
pub fn error_class(error_type: &str) -> Option<OutcomeClass> {
    Some(match error_type {
        "overloaded_error" | "api_error" | "timeout_error" => OutcomeClass::Transient,
        "rate_limit_error" => OutcomeClass::RateLimited,
        "authentication_error" | "permission_error" | "billing_error" => OutcomeClass::SourceDead,
        "invalid_request_error" | "request_too_large" => OutcomeClass::RequestRejected,
        _ => return None,
    })
}

/// The `error.type` Anthropic answers an HTTP status with (the inverse of [`error_class`]): for
/// an error answered in Anthropic's shape, by the proxy or a simulated provider.
pub fn error_type_of(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}

/// Whether a token count is usable: its `input_tokens` is a number.
pub fn count_is_usable(body: &Object) -> bool {
    body.get("input_tokens").is_some_and(Value::is_u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Object {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn usable_answers_say_something_call_a_tool_or_refuse() {
        let cases = [
            (json!({"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}), true, Some("hi")),
            (json!({"content": [{"type": "text", "text": "  "}], "stop_reason": "end_turn"}), false, Some("  ")),
            (json!({"content": [], "stop_reason": "end_turn"}), false, Some("")),
            (json!({"content": [{"type": "thinking", "thinking": "hmm"}]}), false, Some("")),
            (json!({"content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}), true, None),
            (json!({"content": [], "stop_reason": "refusal"}), true, None),
            (json!({"content": [{"type": "text", "text": "{\"a\":"}], "stop_reason": "max_tokens"}), true, Some("{\"a\":")),
        ];
        for (body, usable, text) in cases {
            let body = object(body);
            assert_eq!(is_usable(&body), usable, "{body:?}");
            assert_eq!(text_answers(&body).next(), text, "{body:?}");
        }
    }

    #[test]
    fn error_types_map_to_classes() {
        assert_eq!(error_class("overloaded_error"), Some(OutcomeClass::Transient));
        assert_eq!(error_class("rate_limit_error"), Some(OutcomeClass::RateLimited));
        assert_eq!(error_class("authentication_error"), Some(OutcomeClass::SourceDead));
        assert_eq!(error_class("permission_error"), Some(OutcomeClass::SourceDead));
        assert_eq!(error_class("invalid_request_error"), Some(OutcomeClass::RequestRejected));
        assert_eq!(error_class("not_found_error"), None);
        for status in [400, 401, 402, 403, 413, 429, 500, 503, 504, 529] {
            let kind = error_type_of(status);
            assert!(error_class(kind).is_some(), "{status}: {kind} is a type Anthropic's errors are classified by");
        }
        assert_eq!((error_type_of(422), error_type_of(404), error_type_of(502)), ("invalid_request_error", "not_found_error", "api_error"));
        assert!(count_is_usable(&object(json!({"input_tokens": 3}))));
        assert!(!count_is_usable(&object(json!({"input_tokens": "3"}))));
    }
}
