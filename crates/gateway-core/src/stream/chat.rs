//! Chat completions as a stream: the commit point of a `chat.completion.chunk`, a
//! `chat.completion` assembled from the chunks (for a caller that did not ask for a stream, when
//! the source is streamed so that its watchdog applies), and the reverse, chunks of a whole
//! answer (for an upstream that cannot stream).

use super::{Choices, Chunk, keep_head, merge_finish_and_logprobs, replayed};
use crate::request::{Kind, Object, Response, message_is_usable};
use serde_json::{Value, json};

/// Whether `chunk` is the commit point: some choice's delta carries content, a tool call, a
/// refusal, audio or a legacy `function_call`.
pub fn commits(chunk: &Chunk) -> bool {
    chunk
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(|choices| choices.iter().any(|c| c.get("delta").and_then(Value::as_object).is_some_and(message_is_usable)))
}

/// A `chat.completion` assembled chunk by chunk: each chunk is merged when it comes and need not
/// be kept, so what it holds is the answer so far, not the stream. Per choice index: the deltas
/// merged into one message — text that streams in pieces (`content`, `refusal`,
/// `reasoning_content`, `reasoning`, and inside objects `arguments`, `data` and `transcript`, as
/// in `audio` and a legacy `function_call`) concatenated, nested objects merged the same way,
/// arrays extended, any other value kept from the first delta that has it; tool calls merged by
/// their index (a delta without one continues the last call unless it brings a new `id`);
/// logprobs concatenated (nulls skipped); the last finish reason. The usage of the chunk that
/// carries it; `id`, `created`, `model`, `system_fingerprint` and `service_tier` from the first
/// chunk that has them.
#[derive(Clone, Debug, Default)]
pub struct Assembly {
    body: Object,
    choices: Choices,
}

impl Assembly {
    /// Merges `chunk` into the answer so far.
    pub fn push(&mut self, chunk: &Chunk) {
        keep_head(&mut self.body, chunk, &["id", "created", "model", "system_fingerprint", "service_tier"]);
        for choice in chunk.get("choices").and_then(Value::as_array).into_iter().flatten() {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            let fresh = || json!({"index": index, "message": {"role": "assistant", "content": null}, "finish_reason": null});
            merge_choice(self.choices.at(index, fresh), choice);
        }
    }

    /// The `chat.completion` of the chunks pushed.
    pub fn finish(self) -> Response {
        let Assembly { body: fields, choices } = self;
        let mut body = Object::new();
        body.insert("object".into(), json!("chat.completion"));
        body.extend(fields);
        let mut choices = choices.into_sorted();
        // The assembled message has no stream indices on its tool calls.
        for choice in &mut choices {
            let calls = choice.get_mut("message").and_then(|m| m.get_mut("tool_calls")).and_then(Value::as_array_mut);
            for call in calls.into_iter().flatten().filter_map(Value::as_object_mut) {
                call.shift_remove("index");
            }
        }
        body.insert("choices".into(), Value::Array(choices.into_iter().map(Value::Object).collect()));
        Response::new(Kind::Chat, body)
    }
}

/// Fields whose string values stream in pieces.
fn streams_in_pieces(field: &str) -> bool {
    matches!(field, "content" | "refusal" | "reasoning_content" | "reasoning" | "arguments" | "data" | "transcript")
}

/// Merges one delta object into what the earlier deltas made (see [`Assembly`]).
fn merge_object(into: &mut Object, delta: &Object) {
    for (field, value) in delta {
        match (into.get_mut(field.as_str()), value) {
            (_, Value::Null) => {}
            (Some(Value::String(have)), Value::String(piece)) if streams_in_pieces(field) => have.push_str(piece),
            (Some(Value::Object(have)), Value::Object(more)) => merge_object(have, more),
            (Some(Value::Array(have)), Value::Array(more)) => have.extend(more.iter().cloned()),
            // A placeholder (null, or an empty name) gives way to the first real value.
            (Some(have), _) if have.is_null() || have.as_str() == Some("") => *have = value.clone(),
            (Some(_), _) => {}
            (None, _) => {
                into.insert(field.clone(), value.clone());
            }
        }
    }
}

fn merge_choice(choice: &mut Object, chunk_choice: &Value) {
    merge_finish_and_logprobs(choice, chunk_choice);
    let Some(delta) = chunk_choice.get("delta").and_then(Value::as_object) else { return };
    let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else { return };
    if let Some(Value::Array(calls)) = delta.get("tool_calls") {
        merge_tool_calls(message, calls);
    }
    let rest: Object = delta.iter().filter(|(field, _)| *field != "tool_calls").map(|(f, v)| (f.clone(), v.clone())).collect();
    merge_object(message, &rest);
}

fn merge_tool_calls(message: &mut Object, deltas: &[Value]) {
    let calls = message.entry("tool_calls").or_insert_with(|| json!([]));
    let Some(calls) = calls.as_array_mut() else { return };
    for delta in deltas.iter().filter_map(Value::as_object) {
        let id = delta.get("id").and_then(Value::as_str).filter(|id| !id.is_empty());
        let index = match delta.get("index").and_then(Value::as_u64) {
            Some(index) => index,
            // Without an index: the last call goes on, unless the delta brings another id.
            None => match calls.last() {
                None => 0,
                Some(last) => {
                    let last_index = last.get("index").and_then(Value::as_u64).unwrap_or(0);
                    let last_id = last.get("id").and_then(Value::as_str);
                    let another = matches!((id, last_id), (Some(new), Some(have)) if new != have);
                    last_index + u64::from(another)
                }
            },
        };
        let at = match calls.iter().position(|c| c.get("index").and_then(Value::as_u64) == Some(index)) {
            Some(at) => at,
            None => {
                calls.push(json!({"index": index, "function": {"name": "", "arguments": ""}}));
                calls.len() - 1
            }
        };
        if let Some(call) = calls[at].as_object_mut() {
            let fields: Object = delta.iter().filter(|(field, _)| *field != "index").map(|(f, v)| (f.clone(), v.clone())).collect();
            merge_object(call, &fields);
        }
    }
}

/// The chunks of a whole chat answer (for an upstream that answers whole where a stream was
/// asked for): one chunk per choice with its whole message as the delta (and its logprobs),
/// then one with the usage, if any.
pub fn chunks_of(response: &Response) -> Vec<Chunk> {
    let choices = response.choices().iter().map(|choice| {
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
        let mut streamed = json!({"index": index, "delta": delta, "finish_reason": finish});
        if let Some(logprobs) = choice.get("logprobs").filter(|l| !l.is_null()) {
            streamed["logprobs"] = logprobs.clone();
        }
        streamed
    });
    replayed(response.body(), "chat.completion.chunk", &["id", "created", "model", "system_fingerprint", "service_tier"], choices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::opens_unlike_json;

    fn assemble(chunks: &[Chunk]) -> Response {
        crate::stream::assemble(Kind::Chat, chunks)
    }

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
        assert!(
            commits(&chunk(json!({"choices": [{"index": 0, "delta": {"function_call": {"name": "get"}}}]}))),
            "the legacy functions API"
        );
        assert!(!commits(&chunk(json!({"choices": [{"index": 0, "delta": {"function_call": {"arguments": ""}}}]}))));
    }

    fn assembled(deltas: &[Value]) -> Response {
        let chunks: Vec<Chunk> = deltas.iter().map(|delta| chunk(json!({"choices": [{"index": 0, "delta": delta}]}))).collect();
        assemble(&chunks)
    }

    #[test]
    fn every_field_that_streams_in_pieces_is_concatenated() {
        let whole = assembled(&[
            json!({"role": "assistant", "audio": {"id": "au1", "data": "AAA", "transcript": "he", "expires_at": 7}}),
            json!({"audio": {"data": "BBB", "transcript": "llo"}}),
            json!({"reasoning_content": "think "}),
            json!({"reasoning_content": "more", "reasoning": "r"}),
            json!({"function_call": {"name": "get", "arguments": "{\"a\""}}),
            json!({"function_call": {"name": "get", "arguments": ": 1}"}}),
            json!({"annotations": [{"type": "url_citation"}]}),
            json!({"annotations": [{"type": "file_citation"}]}),
        ]);
        let message = &whole.choices()[0]["message"];
        assert_eq!(message["audio"], json!({"id": "au1", "data": "AAABBB", "transcript": "hello", "expires_at": 7}));
        assert_eq!((message["reasoning_content"].as_str(), message["reasoning"].as_str()), (Some("think more"), Some("r")));
        assert_eq!(message["function_call"], json!({"name": "get", "arguments": "{\"a\": 1}"}));
        assert_eq!(message["annotations"], json!([{"type": "url_citation"}, {"type": "file_citation"}]));
        assert_eq!(message["role"], "assistant");
    }

    #[test]
    fn tool_calls_without_an_index_are_told_apart_by_their_id() {
        let whole = assembled(&[
            json!({"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{\"a\":"}}]}),
            json!({"tool_calls": [{"function": {"arguments": "1}"}}]}),
            json!({"tool_calls": [{"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{\"b\":2}"}}]}),
        ]);
        assert_eq!(
            Value::Array(whole.tool_calls().to_vec()),
            json!([
                {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{\"a\":1}"}},
                {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{\"b\":2}"}}
            ])
        );
    }

    #[test]
    fn a_null_in_the_logprobs_keeps_what_was_collected() {
        let chunks: Vec<Chunk> = [
            json!({"choices": [{"index": 0, "delta": {"content": "a"}, "logprobs": {"content": [{"token": "a"}], "refusal": null}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "b"}, "logprobs": {"content": null, "refusal": null}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "c"}, "logprobs": {"content": [{"token": "c"}]}}]}),
        ]
        .into_iter()
        .map(chunk)
        .collect();
        assert_eq!(assemble(&chunks).choices()[0]["logprobs"], json!({"content": [{"token": "a"}, {"token": "c"}]}));
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

        let with_logprobs = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "logprobs": {"content": [{"token": "hi", "logprob": -0.1}]}, "finish_reason": "stop"}]});
        let whole = Response::new(Kind::Chat, chunk(with_logprobs));
        assert_eq!(assemble(&chunks_of(&whole)).choices()[0]["logprobs"], whole.choices()[0]["logprobs"], "logprobs replayed");
    }

    #[test]
    fn a_text_that_opens_with_prose_cannot_be_json() {
        assert!(opens_unlike_json("Sure! Here is the JSON: {"));
        assert!(opens_unlike_json("  \n Here"), "whitespace first, then prose");
        for opening in ["{\"a\"", " [1", "\"s\"", "-1", "7", "true", "false", "null", "\n\t{", "\u{a0}{", "```json\n{}", "", "  "] {
            assert!(!opens_unlike_json(opening), "{opening:?} may still be JSON");
        }
    }
}
