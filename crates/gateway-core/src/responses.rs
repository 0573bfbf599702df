//! The Responses API's answers (SPEC §2, extended): when a `response` is usable, the text
//! answers a structured check reads, what a `failed` one is charged with, and the ids of the
//! state a provider keeps for it (a stored response, its conversation).
//!
//! Usable: an `output` with a `message` that says something (text, or a refusal), or a tool
//! call (`function_call`, or any other item that is neither a message nor reasoning); a
//! background response's acknowledgement (`queued`, `in_progress`) is usable too, since the
//! answer comes later by polling. `incomplete` keeps the provider's reason and is judged like
//! any answer; `failed` is the provider's fault (`Transient`), but for the error codes a
//! request causes (`RequestRejected`: nothing a request causes reaches the breaker) and
//! `rate_limit_exceeded` (`RateLimited`). An output with nothing usable is `Empty`.

use crate::outcome::OutcomeClass;
use crate::request::{Object, Outcome, nonempty_string as says_something};
use serde_json::Value;

/// The output items of a `response`.
pub fn output(body: &Object) -> &[Value] {
    body.get("output").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The `status` of a `response`.
pub fn status(body: &Object) -> Option<&str> {
    body.get("status").and_then(Value::as_str)
}

/// The content parts of a message item.
fn parts(item: &Value) -> &[Value] {
    item.get("content").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// Whether a content part says something: an `output_text` with text, or a `refusal`.
pub(crate) fn part_says_something(part: &Value) -> bool {
    says_something(part.get("text")) || says_something(part.get("refusal"))
}

/// Whether a message item refused (a refusal part that says something): its text, if any, is
/// then no text answer.
fn refused(item: &Value) -> bool {
    parts(item).iter().any(|p| p.get("type").and_then(Value::as_str) == Some("refusal") && says_something(p.get("refusal")))
}

/// Whether an output item is usable: a message that says something, or a tool call.
pub(crate) fn item_is_usable(item: &Value) -> bool {
    match item.get("type").and_then(Value::as_str) {
        Some("message") => parts(item).iter().any(part_says_something),
        Some("reasoning") | None => false,
        Some(_) => true,
    }
}

/// Whether a `response` is a background response's acknowledgement: `queued` or
/// `in_progress`, with no output yet.
pub fn is_acknowledgement(body: &Object) -> bool {
    matches!(status(body), Some("queued" | "in_progress")) && output(body).is_empty()
}

/// Whether a `response` is usable (see the module's rule).
pub fn is_usable(body: &Object) -> bool {
    is_acknowledgement(body) || output(body).iter().any(item_is_usable)
}

/// The text answers of a `response`: each message's `output_text` parts (`""` for a message
/// with none: a blank message is an answer that is not JSON), unless it refused.
pub fn text_answers(body: &Object) -> impl Iterator<Item = &str> {
    output(body).iter().filter(|item| item.get("type").and_then(Value::as_str) == Some("message") && !refused(item)).flat_map(|item| {
        let texts: Vec<&str> = parts(item)
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("output_text"))
            .map(|p| p.get("text").and_then(Value::as_str).unwrap_or(""))
            .collect();
        if texts.is_empty() { vec![""] } else { texts }
    })
}

/// `error.code`s of a failed response that the request caused: its prompt or its images.
fn caused_by_the_request(code: &str) -> bool {
    matches!(code, "invalid_prompt" | "bio_policy" | "empty_image_file" | "unsupported_image_media_type" | "failed_to_download_image")
        || code.starts_with("invalid_image")
        || code.starts_with("invalid_base64")
        || code.starts_with("image_")
}

/// What a `failed` response is charged with (`None` for any other status): `RequestRejected`
/// for an error its request caused, `RateLimited` for `rate_limit_exceeded`, else `Transient`;
/// the detail is `response_failed:<code>`.
pub fn failure(body: &Object) -> Option<Outcome> {
    (status(body) == Some("failed")).then(|| failed(body))
}

/// What a response that failed (whatever its `status` says: a `response.failed` event's) is
/// charged with, by its `error.code`.
pub(crate) fn failed(body: &Object) -> Outcome {
    let code = body.get("error").and_then(|e| e.get("code")).and_then(Value::as_str).unwrap_or("unknown");
    let class = match code {
        "rate_limit_exceeded" => OutcomeClass::RateLimited,
        code if caused_by_the_request(code) => OutcomeClass::RequestRejected,
        _ => OutcomeClass::Transient,
    };
    Outcome::new(class, format!("response_failed:{code}"))
}

/// The ids of the state the provider keeps for a `response`: its own id (unless the request
/// asked not to store it: `store: false`) and its conversation's.
pub fn kept_ids(body: &Object, stored: bool) -> Vec<&str> {
    let mut ids = Vec::new();
    if stored && let Some(id) = body.get("id").and_then(Value::as_str) {
        ids.push(id);
    }
    if let Some(conversation) = body.get("conversation").and_then(conversation_id) {
        ids.push(conversation);
    }
    ids
}

/// A `conversation` as a request or a response names it: an id, or `{"id": …}`.
pub fn conversation_id(value: &Value) -> Option<&str> {
    value.as_str().or_else(|| value.get("id").and_then(Value::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(value: Value) -> Object {
        value.as_object().cloned().unwrap_or_default()
    }

    fn message(parts: Value) -> Value {
        json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": parts})
    }

    #[test]
    fn what_a_response_answers_with() {
        let rows: &[(Value, bool, &[&str])] = &[
            (json!({"status": "completed", "output": [message(json!([{"type": "output_text", "text": "hi"}]))]}), true, &["hi"]),
            (json!({"status": "completed", "output": [message(json!([{"type": "output_text", "text": " "}]))]}), false, &[" "]),
            (json!({"status": "completed", "output": [message(json!([{"type": "refusal", "refusal": "no"}]))]}), true, &[]),
            (json!({"status": "completed", "output": [message(json!([]))]}), false, &[""]),
            (json!({"status": "completed", "output": [{"type": "reasoning", "summary": []}]}), false, &[]),
            (
                json!({"status": "completed", "output": [{"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"}]}),
                true,
                &[],
            ),
            (json!({"status": "completed", "output": [{"type": "web_search_call", "status": "completed"}]}), true, &[]),
            (json!({"status": "completed", "output": []}), false, &[]),
            (json!({"status": "queued", "output": []}), true, &[]),
            (json!({"status": "in_progress", "background": true, "output": []}), true, &[]),
            (
                json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": [message(json!([{"type": "output_text", "text": "{\"a\""}]))]}),
                true,
                &["{\"a\""],
            ),
        ];
        for (value, usable, texts) in rows {
            let b = body(value.clone());
            assert_eq!(is_usable(&b), *usable, "{value}");
            assert_eq!(text_answers(&b).collect::<Vec<_>>(), *texts, "{value}");
        }
    }

    #[test]
    fn a_failed_response_is_charged_by_its_code() {
        let failed = |code: &str| failure(&body(json!({"status": "failed", "error": {"code": code, "message": "m"}})));
        assert_eq!(
            failed("server_error").map(|o| (o.class, o.detail)),
            Some((OutcomeClass::Transient, "response_failed:server_error".into()))
        );
        assert_eq!(failed("rate_limit_exceeded").map(|o| o.class), Some(OutcomeClass::RateLimited));
        for code in ["invalid_prompt", "invalid_image_url", "image_too_large", "bio_policy", "invalid_base64_image"] {
            assert_eq!(failed(code).map(|o| o.class), Some(OutcomeClass::RequestRejected), "{code}");
        }
        assert_eq!(failure(&body(json!({"status": "failed"}))).map(|o| o.detail), Some("response_failed:unknown".into()));
        assert_eq!(failure(&body(json!({"status": "completed"}))), None);
    }

    #[test]
    fn the_state_a_response_keeps() {
        let b = body(json!({"id": "resp_1", "conversation": {"id": "conv_1"}}));
        assert_eq!(kept_ids(&b, true), ["resp_1", "conv_1"]);
        assert_eq!(kept_ids(&b, false), ["conv_1"], "store: false keeps no response");
        assert_eq!(conversation_id(&json!("conv_2")), Some("conv_2"));
        assert_eq!(conversation_id(&json!(7)), None);
    }
}
