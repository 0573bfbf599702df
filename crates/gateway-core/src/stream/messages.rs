//! Anthropic's Messages API as a stream of named events (`message_start`,
//! `content_block_start` / `_delta` / `_stop`, `message_delta`, `message_stop`, `ping`, and
//! `error`): the commit point, the `message` the events make, and the events of a whole
//! `message`.
//!
//! The commit point is the first content delta: text that is not empty, a tool's input
//! (`input_json_delta`), or thinking (`thinking_delta`: Claude's thinking is shown to the caller,
//! who asked for it); a tool's use at its block's start (as chat commits at a tool call's first
//! delta: a tool without parameters may send no input piece at all); or a `message_delta` whose
//! `stop_reason` is `refusal`. Events before it (`message_start`, `ping`, a text block's start)
//! are held: they belong to the attempt that finally serves the call. The stream ends at `message_stop`; an `error` event ends it with its class.

use super::Chunk;
use crate::request::{Kind, Object, Response};
use serde_json::{Value, json};

/// The event's `type`.
pub fn event_type(chunk: &Chunk) -> &str {
    chunk.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Whether the event ends the stream: `message_stop`.
pub fn is_terminal(chunk: &Chunk) -> bool {
    event_type(chunk) == "message_stop"
}

/// Whether `chunk` is the commit point (see the module's rule).
pub fn commits(chunk: &Chunk) -> bool {
    match event_type(chunk) {
        "content_block_delta" => {
            let delta = chunk.get("delta");
            let piece = |field: &str| delta.and_then(|d| d.get(field)).and_then(Value::as_str).is_some_and(|s| !s.is_empty());
            match delta.and_then(|d| d.get("type")).and_then(Value::as_str) {
                Some("text_delta") => piece("text"),
                Some("input_json_delta") => piece("partial_json"),
                Some("thinking_delta") => piece("thinking"),
                _ => false,
            }
        }
        // A tool's use (its name is known: a tool without parameters may send no input piece
        // at all), a server tool's, or a block that arrives whole.
        "content_block_start" => chunk.get("content_block").is_some_and(crate::messages::block_is_usable),
        "message_delta" => chunk.get("delta").and_then(|d| d.get("stop_reason")).and_then(Value::as_str) == Some("refusal"),
        _ => false,
    }
}

/// A `message` assembled event by event: `message_start`'s message, its blocks started,
/// their text, thinking, signature and tool input appended (a tool's input parsed at its
/// block's stop), and `message_delta`'s stop reason and usage.
#[derive(Clone, Debug, Default)]
pub struct Assembly {
    message: Option<Object>,
    blocks: Vec<(u64, Value)>,
    /// A tool block's input JSON so far, by index.
    inputs: Vec<(u64, String)>,
}

impl Assembly {
    fn block(&mut self, index: u64) -> Option<&mut Object> {
        self.blocks.iter_mut().find(|(i, _)| *i == index).and_then(|(_, b)| b.as_object_mut())
    }

    /// Merges `chunk` into the answer so far.
    pub fn push(&mut self, chunk: &Chunk) {
        let index = chunk.get("index").and_then(Value::as_u64).unwrap_or(0);
        match event_type(chunk) {
            "message_start" => self.message = chunk.get("message").and_then(Value::as_object).cloned(),
            "content_block_start" => {
                let block = chunk.get("content_block").cloned().unwrap_or(json!({}));
                match self.blocks.iter_mut().find(|(i, _)| *i == index) {
                    Some((_, have)) => *have = block,
                    None => self.blocks.push((index, block)),
                }
            }
            "content_block_delta" => {
                let Some(delta) = chunk.get("delta") else { return };
                let piece = |field: &str| delta.get(field).and_then(Value::as_str).unwrap_or("").to_owned();
                let (field, text) = match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => ("text", piece("text")),
                    Some("thinking_delta") => ("thinking", piece("thinking")),
                    Some("signature_delta") => ("signature", piece("signature")),
                    Some("citations_delta") => {
                        if let Some(block) = self.block(index) {
                            let citations = block.entry("citations").or_insert_with(|| json!([]));
                            if let (Some(list), Some(citation)) = (citations.as_array_mut(), delta.get("citation")) {
                                list.push(citation.clone());
                            }
                        }
                        return;
                    }
                    Some("input_json_delta") => {
                        match self.inputs.iter_mut().find(|(i, _)| *i == index) {
                            Some((_, have)) => have.push_str(&piece("partial_json")),
                            None => self.inputs.push((index, piece("partial_json"))),
                        }
                        return;
                    }
                    _ => return,
                };
                if let Some(block) = self.block(index) {
                    match block.get_mut(field) {
                        Some(Value::String(have)) => have.push_str(&text),
                        _ => {
                            block.insert(field.to_owned(), json!(text));
                        }
                    }
                }
            }
            "content_block_stop" => self.close_input(index),
            "message_delta" => {
                let message = self.message.get_or_insert_with(Object::new);
                if let Some(delta) = chunk.get("delta").and_then(Value::as_object) {
                    for (field, value) in delta {
                        message.insert(field.clone(), value.clone());
                    }
                }
                if let Some(usage) = chunk.get("usage").and_then(Value::as_object) {
                    let merged = message.entry("usage").or_insert_with(|| json!({}));
                    if let Some(merged) = merged.as_object_mut() {
                        for (field, value) in usage.iter().filter(|(_, v)| !v.is_null()) {
                            merged.insert(field.clone(), value.clone());
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// A tool block's input, parsed from its pieces (kept as the text it is when it does not
    /// parse: a cut stream's).
    fn close_input(&mut self, index: u64) {
        let Some(at) = self.inputs.iter().position(|(i, _)| *i == index) else { return };
        let (_, text) = self.inputs.remove(at);
        let input = if text.trim().is_empty() { json!({}) } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        if let Some(block) = self.block(index) {
            block.insert("input".into(), input);
        }
    }

    /// The `message` of the events pushed.
    pub fn finish(mut self) -> Response {
        let open: Vec<u64> = self.inputs.iter().map(|(i, _)| *i).collect();
        for index in open {
            self.close_input(index);
        }
        let Assembly { message, mut blocks, .. } = self;
        let mut body = message.unwrap_or_else(|| {
            let mut body = Object::new();
            body.insert("type".into(), json!("message"));
            body.insert("role".into(), json!("assistant"));
            body
        });
        blocks.sort_by_key(|(i, _)| *i);
        body.insert("content".into(), Value::Array(blocks.into_iter().map(|(_, b)| b).collect()));
        Response::new(Kind::Messages, body)
    }
}

/// The events of a whole `message`, as Anthropic streams it (they assemble back into it):
/// `message_start` (the message with no content, `stop_reason` null), per block its start (a
/// text block empty, a tool's input `{}`), one delta of its text, thinking and signature or
/// its input's JSON, and its stop; then `message_delta` (the stop reason and usage) and
/// `message_stop`.
pub fn events_of(response: &Response) -> Vec<Chunk> {
    let body = response.body();
    let mut shell = body.clone();
    shell.insert("content".into(), json!([]));
    shell.insert("stop_reason".into(), Value::Null);
    shell.insert("stop_sequence".into(), Value::Null);
    let mut events = Vec::new();
    let mut emit = |value: Value| {
        if let Value::Object(event) = value {
            events.push(event);
        }
    };
    emit(json!({"type": "message_start", "message": shell}));
    for (index, block) in crate::messages::content(body).iter().enumerate() {
        let mut start = block.clone();
        if let Some(start) = start.as_object_mut() {
            for (field, empty) in [("text", json!("")), ("thinking", json!("")), ("signature", json!(""))] {
                if start.contains_key(field) {
                    start.insert(field.into(), empty);
                }
            }
            if start.get("type") == Some(&json!("tool_use")) {
                start.insert("input".into(), json!({}));
            }
        }
        emit(json!({"type": "content_block_start", "index": index, "content_block": start}));
        let delta = |kind: &str, field: &str, piece: &Value| json!({"type": "content_block_delta", "index": index, "delta": {"type": kind, field: piece}});
        if let Some(text) = block.get("text").filter(|t| t.as_str().is_some_and(|t| !t.is_empty())) {
            emit(delta("text_delta", "text", text));
        }
        if let Some(thinking) = block.get("thinking").filter(|t| t.as_str().is_some_and(|t| !t.is_empty())) {
            emit(delta("thinking_delta", "thinking", thinking));
        }
        if let Some(signature) = block.get("signature").filter(|t| t.as_str().is_some_and(|t| !t.is_empty())) {
            emit(delta("signature_delta", "signature", signature));
        }
        if block.get("type") == Some(&json!("tool_use")) {
            let input = block.get("input").map_or_else(|| "{}".to_owned(), Value::to_string);
            emit(delta("input_json_delta", "partial_json", &json!(input)));
        }
        emit(json!({"type": "content_block_stop", "index": index}));
    }
    let stop = json!({"stop_reason": body.get("stop_reason").cloned().unwrap_or(Value::Null),
                      "stop_sequence": body.get("stop_sequence").cloned().unwrap_or(Value::Null)});
    let mut delta = json!({"type": "message_delta", "delta": stop});
    if let Some(usage) = body.get("usage") {
        delta["usage"] = usage.clone();
    }
    emit(delta);
    emit(json!({"type": "message_stop"}));
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> Object {
        value.as_object().cloned().unwrap_or_default()
    }

    fn whole(content: Value, stop: &str) -> Response {
        Response::new(
            Kind::Messages,
            object(json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": content,
                          "stop_reason": stop, "stop_sequence": null, "usage": {"input_tokens": 12, "output_tokens": 3}})),
        )
    }

    #[test]
    fn a_whole_message_replays_as_events_that_assemble_back_into_it() {
        for (content, stop) in [
            (json!([{"type": "text", "text": "hello"}]), "end_turn"),
            (json!([{"type": "thinking", "thinking": "hmm", "signature": "sig"}, {"type": "text", "text": "hi"}]), "end_turn"),
            (
                json!([{"type": "text", "text": "Let me check."}, {"type": "tool_use", "id": "t1", "name": "f", "input": {"city": "Paris"}}]),
                "tool_use",
            ),
            (json!([]), "refusal"),
        ] {
            let message = whole(content, stop);
            let events = events_of(&message);
            assert_eq!(event_type(&events[0]), "message_start");
            assert!(is_terminal(events.last().unwrap_or(&Object::new())));
            assert_eq!(crate::stream::assemble(Kind::Messages, &events), message);
        }
    }

    #[test]
    fn the_commit_point_is_the_first_content_delta_or_a_refusal() {
        let delta = |d: Value| object(json!({"type": "content_block_delta", "index": 0, "delta": d}));
        assert!(!commits(&object(json!({"type": "message_start", "message": {}}))));
        assert!(!commits(&object(json!({"type": "ping"}))));
        assert!(!commits(&object(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))));
        assert!(commits(&object(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "input": {}}}))));
        assert!(!commits(&delta(json!({"type": "text_delta", "text": ""}))));
        assert!(commits(&delta(json!({"type": "text_delta", "text": "a"}))));
        assert!(commits(&delta(json!({"type": "input_json_delta", "partial_json": "{"}))));
        assert!(commits(&delta(json!({"type": "thinking_delta", "thinking": "h"}))));
        assert!(!commits(&delta(json!({"type": "signature_delta", "signature": "s"}))));
        assert!(commits(&object(json!({"type": "message_delta", "delta": {"stop_reason": "refusal"}}))));
        assert!(!commits(&object(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}))));
    }

    #[test]
    fn pieces_of_a_tool_input_assemble_and_a_cut_one_stays_text() {
        let mut assembly = Assembly::default();
        for event in [
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"city\":"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": " \"Paris\"}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "u", "name": "g", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"never"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        ] {
            assembly.push(&object(event));
        }
        let message = assembly.finish();
        let content = crate::messages::content(message.body());
        assert_eq!(content[0]["input"], json!({"city": "Paris"}));
        assert_eq!(content[1]["input"], json!("{\"never"));
        assert_eq!(message.body()["usage"], json!({"input_tokens": 5, "output_tokens": 9}));
        assert_eq!(message.body()["stop_reason"], json!("tool_use"));
    }
}
