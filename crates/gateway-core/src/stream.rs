//! Streamed chat answers (SPEC §13): the commit point, and a `chat.completion` assembled from
//! `chat.completion.chunk`s (for a caller that did not ask for a stream, when the source is
//! streamed so that its watchdog applies), and the reverse, chunks of a whole answer (for an
//! upstream that cannot stream).
//!
//! The commit point is the first chunk carrying content, a tool-call delta or a refusal. Before
//! it, nothing has reached the caller and a failure may be retried; after it, chunks are relayed
//! as they come and a failure ends the stream.

use crate::request::{Kind, Object, Response, message_is_usable};
use serde_json::{Value, json};

/// One `chat.completion.chunk`.
pub type Chunk = Object;

/// Whether `chunk` is the commit point: some choice's delta carries content, a tool call, a
/// refusal or audio.
pub fn commits(chunk: &Chunk) -> bool {
    chunk
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(|choices| choices.iter().any(|c| c.get("delta").and_then(Value::as_object).is_some_and(message_is_usable)))
}

/// The `chat.completion` the chunks of one stream make: per choice index, the role, the
/// content, the refusal and the logprobs concatenated, tool calls merged by their index (id,
/// type and name from the first delta that has them, arguments concatenated), the last finish
/// reason; the usage of the chunk that carries it; `id`, `created`, `model`,
/// `system_fingerprint` and `service_tier` from the first chunk that has them.
pub fn assemble(chunks: &[Chunk]) -> Response {
    let mut body = Object::new();
    body.insert("object".into(), json!("chat.completion"));
    let mut choices: Vec<(u64, Object)> = Vec::new();
    for chunk in chunks {
        for field in ["id", "created", "model", "system_fingerprint", "service_tier"] {
            if let Some(value) = chunk.get(field).filter(|v| !v.is_null()) {
                body.entry(field).or_insert_with(|| value.clone());
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            body.insert("usage".into(), usage.clone());
        }
        for choice in chunk.get("choices").and_then(Value::as_array).into_iter().flatten() {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            let at = match choices.iter().position(|(i, _)| *i == index) {
                Some(at) => at,
                None => {
                    let fresh = json!({"index": index, "message": {"role": "assistant", "content": null}, "finish_reason": null});
                    choices.push((index, fresh.as_object().cloned().unwrap_or_default()));
                    choices.len() - 1
                }
            };
            merge_choice(&mut choices[at].1, choice);
        }
    }
    choices.sort_by_key(|(i, _)| *i);
    // The assembled message has no stream indices on its tool calls.
    for (_, choice) in &mut choices {
        let calls = choice.get_mut("message").and_then(|m| m.get_mut("tool_calls")).and_then(Value::as_array_mut);
        for call in calls.into_iter().flatten().filter_map(Value::as_object_mut) {
            call.remove("index");
        }
    }
    body.insert("choices".into(), Value::Array(choices.into_iter().map(|(_, c)| Value::Object(c)).collect()));
    Response::new(Kind::Chat, body)
}

fn append_text(target: &mut Object, field: &str, piece: &str) {
    match target.get_mut(field) {
        Some(Value::String(text)) => text.push_str(piece),
        _ => {
            target.insert(field.to_owned(), Value::String(piece.to_owned()));
        }
    }
}

fn merge_choice(choice: &mut Object, chunk_choice: &Value) {
    if let Some(reason) = chunk_choice.get("finish_reason").filter(|r| !r.is_null()) {
        choice.insert("finish_reason".into(), reason.clone());
    }
    if let Some(logprobs) = chunk_choice.get("logprobs").and_then(Value::as_object) {
        let merged = choice.entry("logprobs").or_insert_with(|| json!({}));
        if let Some(merged) = merged.as_object_mut() {
            for (field, items) in logprobs {
                match (merged.get_mut(field), items) {
                    (Some(Value::Array(have)), Value::Array(more)) => have.extend(more.iter().cloned()),
                    _ => {
                        merged.insert(field.clone(), items.clone());
                    }
                }
            }
        }
    }
    let Some(delta) = chunk_choice.get("delta").and_then(Value::as_object) else { return };
    let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else { return };
    for (field, value) in delta {
        match (field.as_str(), value) {
            ("content" | "refusal", Value::String(piece)) => append_text(message, field, piece),
            ("tool_calls", Value::Array(calls)) => merge_tool_calls(message, calls),
            (_, Value::Null) => {}
            _ => {
                message.insert(field.clone(), value.clone());
            }
        }
    }
}

fn merge_tool_calls(message: &mut Object, deltas: &[Value]) {
    let calls = message.entry("tool_calls").or_insert_with(|| json!([]));
    let Some(calls) = calls.as_array_mut() else { return };
    for delta in deltas {
        let index = delta.get("index").and_then(Value::as_u64).unwrap_or(0);
        let at = calls.iter().position(|c| c.get("index").and_then(Value::as_u64) == Some(index));
        let call = match at {
            Some(at) => &mut calls[at],
            None => {
                calls.push(json!({"index": index, "function": {"name": "", "arguments": ""}}));
                let last = calls.len() - 1;
                &mut calls[last]
            }
        };
        let Some(call) = call.as_object_mut() else { continue };
        for field in ["id", "type"] {
            if let Some(value) = delta.get(field).filter(|v| !v.is_null()) {
                call.entry(field).or_insert_with(|| value.clone());
            }
        }
        if let (Some(function), Some(Value::Object(into))) = (delta.get("function").and_then(Value::as_object), call.get_mut("function")) {
            if let Some(name) = function.get("name").and_then(Value::as_str)
                && into.get("name").and_then(Value::as_str).is_none_or(str::is_empty)
            {
                into.insert("name".into(), json!(name));
            }
            if let Some(arguments) = function.get("arguments").and_then(Value::as_str) {
                append_text(into, "arguments", arguments);
            }
        }
    }
}

/// The chunks of a whole chat answer (for an upstream that answers whole where a stream was
/// asked for): one chunk per choice with its whole message as the delta, then one with the
/// usage, if any.
pub fn chunks_of(response: &Response) -> Vec<Chunk> {
    let body = response.body();
    let head = |choices: Value| {
        let mut chunk = Object::new();
        for field in ["id", "created", "model", "system_fingerprint", "service_tier"] {
            if let Some(value) = body.get(field) {
                chunk.insert(field.to_owned(), value.clone());
            }
        }
        chunk.insert("object".into(), json!("chat.completion.chunk"));
        chunk.insert("choices".into(), choices);
        chunk
    };
    let mut chunks: Vec<Chunk> = response
        .choices()
        .iter()
        .map(|choice| {
            let mut delta = choice.get("message").cloned().unwrap_or_else(|| json!({}));
            if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for (i, call) in calls.iter_mut().enumerate() {
                    if let Some(call) = call.as_object_mut() {
                        call.insert("index".into(), json!(i));
                    }
                }
            }
            let index = choice.get("index").cloned().unwrap_or(json!(0));
            let finish = choice.get("finish_reason").cloned().unwrap_or(Value::Null);
            head(json!([{"index": index, "delta": delta, "finish_reason": finish}]))
        })
        .collect();
    if let Some(usage) = body.get("usage") {
        let mut last = head(json!([]));
        last.insert("usage".into(), usage.clone());
        chunks.push(last);
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(value: Value) -> Chunk {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn the_commit_point_is_the_first_chunk_with_something_to_show() {
        assert!(!commits(&chunk(json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))));
        assert!(!commits(&chunk(json!({"choices": [], "usage": {"prompt_tokens": 1}}))));
        assert!(commits(&chunk(json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]}))));
        assert!(commits(&chunk(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1"}]}}]}))));
        assert!(commits(&chunk(json!({"choices": [{"index": 0, "delta": {"refusal": "I can't"}}]}))));
    }

    #[test]
    fn chunks_assemble_into_the_completion_they_stream() {
        let chunks: Vec<Chunk> = [
            json!({"id": "c1", "created": 5, "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hel"}, "logprobs": {"content": [{"token": "Hel"}]}}, {"index": 1, "delta": {"content": "Hi"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "lo"}, "logprobs": {"content": [{"token": "lo"}]}, "finish_reason": "length"}]}),
            json!({"choices": [{"index": 1, "delta": {"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": "get", "arguments": "{\"a\""}}]}}]}),
            json!({"choices": [{"index": 1, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "completion_tokens_details": {"reasoning_tokens": 1}}}),
        ]
        .into_iter()
        .map(chunk)
        .collect();
        let whole = assemble(&chunks);
        assert_eq!(whole.body()["id"], "c1");
        assert_eq!(whole.body()["object"], "chat.completion");
        assert_eq!(whole.content(), Some("Hello"));
        assert_eq!(whole.finish_reason(), Some("length"));
        assert_eq!(whole.choices()[0]["logprobs"]["content"], json!([{"token": "Hel"}, {"token": "lo"}]));
        let second = &whole.choices()[1]["message"];
        assert_eq!(second["content"], "Hi");
        assert_eq!(second["tool_calls"], json!([{"id": "t1", "type": "function", "function": {"name": "get", "arguments": "{\"a\": 1}"}}]));
        assert_eq!(whole.choices()[1]["finish_reason"], "tool_calls");
        assert_eq!(whole.usage().map(|u| u.total()), Some(7));
        assert_eq!(whole.body()["usage"]["completion_tokens_details"]["reasoning_tokens"], 1, "usage details kept");
    }

    #[test]
    fn a_whole_answer_replays_as_chunks_that_assemble_back() {
        let body = json!({"id": "x", "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 1, "completion_tokens": 2}});
        let whole = Response::new(Kind::Chat, chunk(body));
        let chunks = chunks_of(&whole);
        assert!(commits(&chunks[0]));
        let again = assemble(&chunks);
        assert_eq!(again.tool_calls(), whole.tool_calls());
        assert_eq!((again.finish_reason(), again.usage()), (whole.finish_reason(), whole.usage()));
    }
}
