//! Tests of the request, response and attempt types.

use super::body::DEFAULT_COMPLETION_TOKENS;
use super::*;
use crate::outcome::OutcomeClass;
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::Arc;

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
    let body = |n: Value| json!({"messages": [{"role": "user", "content": "12345678"}], "max_tokens": 10, "n": n});
    let choices = |n: Value| Request::native(Kind::Chat, body(n).as_object().cloned().unwrap_or_default()).estimated_tokens;
    assert_eq!(choices(json!(3)), 3 + 3 * 10, "each of n choices may use max_tokens");
    assert_eq!((choices(json!(0)), choices(json!("x"))), (3 + 10, 3 + 10), "n = 0 or not a number counts one");
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
    // A whitespace-only refusal says nothing: not usable, and beside text the text is the answer.
    assert!(!chat_answer(json!({"content": null, "refusal": "  "})).is_usable());
    assert_eq!(chat_answer(json!({"content": "x", "refusal": " "})).text_answers().collect::<Vec<_>>(), ["x"]);
    assert_eq!(chat_answer(json!({"content": null})).text_answers().collect::<Vec<_>>(), [""], "a blank choice is a blank answer");
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
