//! The Responses API as a stream of named events (`response.created`, `response.output_item.added`,
//! `response.output_text.delta`, …, and a terminal `response.completed`, `response.incomplete` or
//! `response.failed`; no `[DONE]`): the commit point, the `response` the events make, and the
//! events of a whole `response`.
//!
//! The commit point is the first event carrying something to show: a delta of text, a refusal
//! or a tool call's arguments (reasoning does not commit, as in chat), an output item that is a
//! tool call or a message that already says something, or a terminal event whose response is
//! usable. Events before it (`response.created`, `response.in_progress`, reasoning) are held:
//! they belong to the attempt that finally serves the call.

use super::Chunk;
use crate::request::{Kind, Object, Outcome, Response, nonempty_string as says_something};
use crate::responses::{item_is_usable, part_says_something};
use serde_json::{Value, json};

/// The event's `type`.
pub fn event_type(chunk: &Chunk) -> &str {
    chunk.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Whether the event ends the stream: `response.completed`, `response.incomplete` or
/// `response.failed`.
pub fn is_terminal(chunk: &Chunk) -> bool {
    matches!(event_type(chunk), "response.completed" | "response.incomplete" | "response.failed")
}

/// Whether `chunk` is the commit point (see the module's rule).
pub fn commits(chunk: &Chunk) -> bool {
    match event_type(chunk) {
        "response.output_text.delta" | "response.refusal.delta" => says_something(chunk.get("delta")),
        "response.output_text.done" => says_something(chunk.get("text")),
        "response.refusal.done" => says_something(chunk.get("refusal")),
        "response.output_item.added" | "response.output_item.done" => chunk.get("item").is_some_and(item_is_usable),
        "response.content_part.added" | "response.content_part.done" => chunk.get("part").is_some_and(part_says_something),
        "response.completed" | "response.incomplete" => {
            chunk.get("response").and_then(Value::as_object).is_some_and(|r| crate::responses::output(r).iter().any(item_is_usable))
        }
        t if t.ends_with(".delta") && !t.starts_with("response.reasoning") => {
            chunk.get("delta").and_then(Value::as_str).is_some_and(|d| !d.is_empty())
        }
        _ => false,
    }
}

/// What a `response.failed` event is charged with.
pub fn failure_of(chunk: &Chunk) -> Option<Outcome> {
    if event_type(chunk) != "response.failed" {
        return None;
    }
    let empty = Object::new();
    Some(crate::responses::failed(chunk.get("response").and_then(Value::as_object).unwrap_or(&empty)))
}

/// A `response` assembled event by event: the `response` of the latest lifecycle event
/// (`response.created` … the terminal one), and the output items the events built (added,
/// their parts added, text, refusals and arguments appended, replaced when done). When the
/// last `response` carries no output (a stream cut short, or a terminal event that left it out),
/// the built items are its output.
#[derive(Clone, Debug, Default)]
pub struct Assembly {
    response: Option<Object>,
    items: Vec<(u64, Value)>,
}

impl Assembly {
    fn item(&mut self, chunk: &Chunk) -> Option<&mut Value> {
        let index = chunk.get("output_index").and_then(Value::as_u64)?;
        self.items.iter_mut().find(|(i, _)| *i == index).map(|(_, item)| item)
    }

    fn part(&mut self, chunk: &Chunk) -> Option<&mut Value> {
        let index = usize::try_from(chunk.get("content_index").and_then(Value::as_u64)?).ok()?;
        self.item(chunk)?.get_mut("content")?.as_array_mut()?.get_mut(index)
    }

    /// Merges `chunk` into the answer so far.
    pub fn push(&mut self, chunk: &Chunk) {
        let append = |target: Option<&mut Value>, field: &str, piece: Option<&Value>| {
            let (Some(target), Some(piece)) = (target.and_then(Value::as_object_mut), piece.and_then(Value::as_str)) else { return };
            match target.get_mut(field) {
                Some(Value::String(have)) => have.push_str(piece),
                _ => {
                    target.insert(field.to_owned(), json!(piece));
                }
            }
        };
        let set = |target: Option<&mut Value>, field: &str, value: Option<&Value>| {
            if let (Some(target), Some(value)) = (target.and_then(Value::as_object_mut), value) {
                target.insert(field.to_owned(), value.clone());
            }
        };
        match event_type(chunk) {
            "response.output_item.added" | "response.output_item.done" => {
                let (Some(index), Some(item)) = (chunk.get("output_index").and_then(Value::as_u64), chunk.get("item")) else { return };
                match self.items.iter_mut().find(|(i, _)| *i == index) {
                    Some((_, have)) => *have = item.clone(),
                    None => self.items.push((index, item.clone())),
                }
            }
            "response.content_part.added" | "response.content_part.done" => {
                let Some(index) = chunk.get("content_index").and_then(Value::as_u64).and_then(|i| usize::try_from(i).ok()) else { return };
                let part = chunk.get("part").cloned().unwrap_or(Value::Null);
                let Some(item) = self.item(chunk).and_then(Value::as_object_mut) else { return };
                let content = item.entry("content").or_insert_with(|| json!([]));
                if let Some(content) = content.as_array_mut() {
                    match content.get_mut(index) {
                        Some(have) => *have = part,
                        None => content.push(part),
                    }
                }
            }
            "response.output_text.delta" => append(self.part(chunk), "text", chunk.get("delta")),
            "response.output_text.done" => set(self.part(chunk), "text", chunk.get("text")),
            "response.refusal.delta" => append(self.part(chunk), "refusal", chunk.get("delta")),
            "response.refusal.done" => set(self.part(chunk), "refusal", chunk.get("refusal")),
            "response.function_call_arguments.delta" => append(self.item(chunk), "arguments", chunk.get("delta")),
            "response.function_call_arguments.done" => set(self.item(chunk), "arguments", chunk.get("arguments")),
            _ => {
                if let Some(response) = chunk.get("response").and_then(Value::as_object) {
                    self.response = Some(response.clone());
                }
            }
        }
    }

    /// The `response` of the events pushed.
    pub fn finish(self) -> Response {
        let Assembly { response, mut items } = self;
        let mut body = response.unwrap_or_else(|| {
            let mut body = Object::new();
            body.insert("object".into(), json!("response"));
            body
        });
        if crate::responses::output(&body).is_empty() && !items.is_empty() {
            items.sort_by_key(|(i, _)| *i);
            body.insert("output".into(), Value::Array(items.into_iter().map(|(_, item)| item).collect()));
        }
        Response::new(Kind::Responses, body)
    }
}

/// The events of a whole `response`, as a provider streams it (they assemble back into it):
/// `response.created` and `response.in_progress` (the response with no output yet; a background
/// acknowledgement, `queued`, ends there with `response.queued`), then per output item its
/// `added` event, a message's parts each added, its text or refusal as one delta, done, and the
/// part done, a function call's arguments as one delta and done, the item done; then the
/// terminal event of its status. `sequence_number` counts from 0.
pub fn events_of(response: &Response) -> Vec<Chunk> {
    let body = response.body();
    let status = crate::responses::status(body).unwrap_or("completed");
    let mut shell = body.clone();
    shell.insert("output".into(), json!([]));
    shell.insert("usage".into(), Value::Null);
    shell.insert("status".into(), json!(if status == "queued" { "queued" } else { "in_progress" }));
    let mut events = Vec::new();
    let mut emit = |kind: &str, fields: Value| {
        let mut event = Object::new();
        event.insert("type".into(), json!(kind));
        if let Value::Object(fields) = fields {
            event.extend(fields);
        }
        event.insert("sequence_number".into(), json!(events.len()));
        events.push(event);
    };
    emit("response.created", json!({"response": shell}));
    if matches!(status, "queued" | "in_progress") {
        emit(if status == "queued" { "response.queued" } else { "response.in_progress" }, json!({"response": shell}));
        return events;
    }
    emit("response.in_progress", json!({"response": shell}));
    for (index, item) in crate::responses::output(body).iter().enumerate() {
        let item_id = item.get("id").cloned().unwrap_or(json!(""));
        let mut opened = item.clone();
        if let Some(opened) = opened.as_object_mut() {
            opened.insert("status".into(), json!("in_progress"));
            if opened.contains_key("content") {
                opened.insert("content".into(), json!([]));
            }
            if opened.contains_key("arguments") {
                opened.insert("arguments".into(), json!(""));
            }
        }
        emit("response.output_item.added", json!({"output_index": index, "item": opened}));
        let at = |content_index: usize| json!({"item_id": item_id, "output_index": index, "content_index": content_index});
        let with = |mut base: Value, more: Value| {
            if let (Some(base), Value::Object(more)) = (base.as_object_mut(), more) {
                base.extend(more);
            }
            base
        };
        for (j, part) in item.get("content").and_then(Value::as_array).map_or(&[][..], Vec::as_slice).iter().enumerate() {
            let mut empty = part.clone();
            if let Some(empty) = empty.as_object_mut() {
                for field in ["text", "refusal"] {
                    if empty.contains_key(field) {
                        empty.insert(field.into(), json!(""));
                    }
                }
            }
            emit("response.content_part.added", with(at(j), json!({"part": empty})));
            if let Some(text) = part.get("text") {
                let logprobs = part.get("logprobs").cloned().unwrap_or(json!([]));
                emit("response.output_text.delta", with(at(j), json!({"delta": text, "logprobs": logprobs})));
                emit("response.output_text.done", with(at(j), json!({"text": text, "logprobs": logprobs})));
            } else if let Some(refusal) = part.get("refusal") {
                emit("response.refusal.delta", with(at(j), json!({"delta": refusal})));
                emit("response.refusal.done", with(at(j), json!({"refusal": refusal})));
            }
            emit("response.content_part.done", with(at(j), json!({"part": part})));
        }
        if let Some(arguments) = item.get("arguments").filter(|_| item.get("type").and_then(Value::as_str) == Some("function_call")) {
            let name = item.get("name").cloned().unwrap_or(json!(""));
            emit("response.function_call_arguments.delta", json!({"item_id": item_id, "output_index": index, "delta": arguments}));
            emit(
                "response.function_call_arguments.done",
                json!({"item_id": item_id, "output_index": index, "arguments": arguments, "name": name}),
            );
        }
        emit("response.output_item.done", json!({"output_index": index, "item": item}));
    }
    let terminal = match status {
        "incomplete" => "response.incomplete",
        "failed" => "response.failed",
        _ => "response.completed",
    };
    emit(terminal, json!({"response": body}));
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::OutcomeClass;
    use crate::stream::assemble;

    fn chunk(value: Value) -> Chunk {
        value.as_object().cloned().unwrap_or_default()
    }

    fn completed() -> Response {
        let body = json!({
            "id": "resp_1", "object": "response", "status": "completed", "model": "m",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get", "arguments": "{\"a\":1}", "status": "completed"}
            ],
            "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
        });
        Response::new(Kind::Responses, chunk(body))
    }

    #[test]
    fn a_whole_response_streams_as_the_provider_would_and_assembles_back() {
        let whole = completed();
        let events = events_of(&whole);
        let types: Vec<&str> = events.iter().map(event_type).collect();
        assert_eq!(types[..3], ["response.created", "response.in_progress", "response.output_item.added"]);
        assert_eq!(types.last(), Some(&"response.completed"));
        assert!(events.iter().enumerate().all(|(i, e)| e["sequence_number"] == json!(i)), "numbered from 0 without a gap");
        assert_eq!(events[0]["response"]["output"], json!([]), "created carries no output yet");
        assert_eq!(events[0]["response"]["id"], "resp_1");
        let first_commit = events.iter().position(commits);
        assert_eq!(first_commit.map(|i| types[i]), Some("response.output_text.delta"), "reasoning does not commit; the text does");
        let again = assemble(Kind::Responses, &events);
        assert_eq!(again.body(), whole.body());
        // Cut before the terminal event: the items the events built are the output.
        let cut = assemble(Kind::Responses, &events[..events.len() - 1]);
        assert_eq!(crate::responses::output(cut.body()), crate::responses::output(whole.body()));
        assert_eq!(cut.body()["status"], "in_progress");
        assert_eq!(cut.text_answers().collect::<Vec<_>>(), ["Hello"]);
    }

    #[test]
    fn deltas_build_the_answer_when_no_whole_item_comes() {
        let events: Vec<Chunk> = [
            json!({"type": "response.created", "response": {"id": "resp_2", "status": "in_progress", "output": []}}),
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "m", "content": []}}),
            json!({"type": "response.content_part.added", "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": ""}}),
            json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "{\"a\""}),
            json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": ": 1}"}),
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "function_call", "name": "f", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{}"}),
        ]
        .into_iter()
        .map(chunk)
        .collect();
        let built = assemble(Kind::Responses, &events);
        assert_eq!(built.text_answers().collect::<Vec<_>>(), ["{\"a\": 1}"]);
        assert_eq!(crate::responses::output(built.body())[1]["arguments"], "{}");
        assert_eq!(built.body()["id"], "resp_2");
    }

    #[test]
    fn what_commits_and_what_fails() {
        let rows = [
            (json!({"type": "response.created", "response": {"output": []}}), false),
            (json!({"type": "response.in_progress", "response": {}}), false),
            (json!({"type": "response.output_item.added", "item": {"type": "message", "content": []}}), false),
            (json!({"type": "response.output_item.added", "item": {"type": "reasoning"}}), false),
            (json!({"type": "response.reasoning_summary_text.delta", "delta": "thinking"}), false),
            (json!({"type": "response.output_text.delta", "delta": " "}), false),
            (json!({"type": "response.output_text.delta", "delta": "Hi"}), true),
            (json!({"type": "response.refusal.delta", "delta": "No"}), true),
            (json!({"type": "response.output_item.added", "item": {"type": "function_call", "name": "f"}}), true),
            (json!({"type": "response.function_call_arguments.delta", "delta": "{"}), true),
            (json!({"type": "response.completed", "response": {"output": []}}), false),
        ];
        for (event, commit) in rows {
            assert_eq!(commits(&chunk(event.clone())), commit, "{event}");
        }
        let failed = chunk(json!({"type": "response.failed", "response": {"error": {"code": "server_error"}}}));
        assert!(is_terminal(&failed));
        assert_eq!(failure_of(&failed).map(|o| o.class), Some(OutcomeClass::Transient));
        assert_eq!(failure_of(&chunk(json!({"type": "response.completed"}))), None);
    }

    #[test]
    fn a_background_acknowledgement_streams_as_created_then_queued() {
        let queued = Response::new(Kind::Responses, chunk(json!({"id": "resp_3", "status": "queued", "background": true, "output": []})));
        let types: Vec<String> = events_of(&queued).iter().map(|e| event_type(e).to_owned()).collect();
        assert_eq!(types, ["response.created", "response.queued"]);
    }
}
