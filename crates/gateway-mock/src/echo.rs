//! [`Echo`]: a responder that answers as OpenAI does, echoing the last message, with markers in
//! that message's text for the answers a test needs:
//!
//! - `slow`: after 10 s; `POISON`: 400 `context_length_exceeded`; `PUSHBACK`: 429 asking for a
//!   day; `BAD400`: OpenAI's own 400 for a bad `temperature` (message, type, param, code);
//! - `TOOLS`: a tool call (`finish_reason: tool_calls`, `content: null`), streamed as deltas;
//!   `REFUSE`: a refusal; `LENGTH`: `finish_reason: length`;
//! - streams only: `CUT`: two chunks, then the stream ends without `[DONE]`; `GATED`: the first
//!   chunk, then the second only once [`Echo::gate`] lets it through; `SLOWONCE`: the first
//!   token after 2 s the first time (a watchdog's cut), at once afterwards;
//! - anything else: an echo (`{"answer": "echo"}` in JSON mode), `n` choices, `logprobs` when
//!   asked, usage with its details.
//!
//! By path: `/dead/…` answers 401; `/chatonly/…/embeddings` 404 `model_not_found`; `/prefail/…`
//! streams break before their first token. Embeddings follow `dimensions` and
//! `encoding_format`. Every answer carries `x-request-id: req-mock-<n>`, n counting requests.

use crate::answer::{Answer, Frame};
use crate::gate::Gate;
use crate::recording::Received;
use crate::responder::Responder;
use base64::Engine;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The marker-driven OpenAI persona (see the module doc).
#[derive(Debug, Default)]
pub struct Echo {
    gate: Gate,
    slow_once: AtomicUsize,
    truncate_once: AtomicUsize,
    ids: AtomicUsize,
}

impl Echo {
    /// A persona whose `GATED` streams wait at a closed gate.
    pub fn new() -> Echo {
        Echo::default()
    }

    /// The gate `GATED` streams wait at before their second chunk.
    pub fn gate(&self) -> Gate {
        self.gate.clone()
    }
}

impl Responder for Echo {
    fn answer(&self, request: &Received) -> Answer {
        let id = format!("req-mock-{}", self.ids.fetch_add(1, Ordering::Relaxed));
        self.decide(request).header("x-request-id", id)
    }
}

fn usage() -> Value {
    json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
           "prompt_tokens_details": {"cached_tokens": 1, "audio_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": 0, "accepted_prediction_tokens": 0}})
}

fn tool_call() -> Value {
    json!({"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})
}

/// The whole answer to `body`.
fn completion(body: &Value, said: &str) -> Value {
    let n = body["n"].as_u64().unwrap_or(1);
    let choice = |i: u64| {
        let (message, finish) = if said.contains("TOOLS") {
            (json!({"role": "assistant", "content": null, "tool_calls": [tool_call()], "refusal": null}), "tool_calls")
        } else if said.contains("REFUSE") {
            (json!({"role": "assistant", "content": null, "refusal": "I can't help with that."}), "stop")
        } else if matches!(body["response_format"]["type"].as_str(), Some("json_object" | "json_schema")) {
            (json!({"role": "assistant", "content": "{\"answer\": \"echo\"}", "refusal": null}), "stop")
        } else {
            let text = if i == 0 { format!("echo: {said}") } else { format!("echo {i}: {said}") };
            (json!({"role": "assistant", "content": text, "refusal": null}), if said.contains("LENGTH") { "length" } else { "stop" })
        };
        let logprobs = if body["logprobs"] == json!(true) {
            json!({"content": [{"token": "echo", "logprob": -0.25, "bytes": [101, 99, 104, 111], "top_logprobs": []}], "refusal": null})
        } else {
            Value::Null
        };
        json!({"index": i, "message": message, "logprobs": logprobs, "finish_reason": finish})
    };
    json!({"id": "chatcmpl-mock", "object": "chat.completion", "created": 1_700_000_000, "model": body["model"],
           "system_fingerprint": "fp_mock", "service_tier": "default",
           "choices": (0..n).map(choice).collect::<Vec<_>>(), "usage": usage()})
}

fn chunk(body: &Value, choices: Value) -> String {
    let c = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": body["model"],
                   "system_fingerprint": "fp_mock", "choices": choices});
    format!("data: {c}\n\n")
}

/// The events of a streamed answer.
fn stream_events(body: &Value, said: &str, truncated: bool) -> Vec<String> {
    let role = chunk(body, json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]));
    let mut events = vec![role];
    if said.contains("TOOLS") {
        let head = json!([{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]);
        events.push(chunk(body, head));
        for piece in ["{\"city\"", ":\"Paris\"}"] {
            events.push(chunk(body, json!([{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}}])));
        }
        events.push(chunk(body, json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])));
    } else {
        // `TRUNCATEONCE`: a JSON answer, cut off the first time (a relay that dropped it), whole
        // after.
        let pieces = match (said.contains("TRUNCATEONCE"), truncated) {
            (true, true) => ["{\"answer\": ", "\"ec"],
            (true, false) => ["{\"answer\": ", "\"echo\"}"],
            (false, _) => ["echo: ", said],
        };
        for piece in pieces {
            events.push(chunk(body, json!([{"index": 0, "delta": {"content": piece}, "finish_reason": null}])));
        }
        if said.contains("CUT") {
            // The body ends cleanly (everything sent is flushed) but without `[DONE]`.
            return events;
        }
        events.push(chunk(body, json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])));
    }
    if body["stream_options"]["include_usage"] == json!(true) {
        let mut last = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "choices": [], "usage": usage()});
        last["model"] = body["model"].clone();
        events.push(format!("data: {last}\n\n"));
    }
    events.push("data: [DONE]\n\n".into());
    events
}

/// `events` as a stream: the first at once, the second after `first_after`, the third only once
/// `gate` (if any) lets it through.
fn sse(events: Vec<String>, first_after: Duration, gate: Option<Gate>) -> Answer {
    let mut frames = Vec::with_capacity(events.len() + 2);
    for (i, event) in events.into_iter().enumerate() {
        if i == 1 {
            frames.push(Frame::Pause(first_after));
        }
        if let Some(gate) = gate.as_ref().filter(|_| i == 2) {
            frames.push(Frame::Hold(gate.clone()));
        }
        frames.push(Frame::Data(event));
    }
    Answer::sse(frames)
}

fn embeddings(body: &Value) -> Value {
    let inputs = match &body["input"] {
        Value::Array(items) if items.iter().all(Value::is_number) => 1,
        Value::Array(items) => items.len(),
        _ => 1,
    };
    let dims = body["dimensions"].as_u64().unwrap_or(3) as usize;
    let vector: Vec<f32> = (0..dims).map(|i| [0.5, -1.0, 2.0][i % 3]).collect();
    let embedding = if body["encoding_format"] == "base64" {
        let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
        json!(base64::engine::general_purpose::STANDARD.encode(bytes))
    } else {
        json!(vector)
    };
    let data: Vec<Value> = (0..inputs).map(|i| json!({"object": "embedding", "index": i, "embedding": embedding})).collect();
    json!({"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 3, "total_tokens": 3}})
}

/// The error a path or a marker asks for, if any.
fn error_for(path: &str, said: &str) -> Option<Answer> {
    let error = |status: u16, error: Value| Some(Answer::json(status, &json!({"error": error})));
    if path.starts_with("/dead/") {
        return error(401, json!({"code": "invalid_api_key", "message": "bad key", "type": "invalid_request_error"}));
    }
    if path.ends_with("/embeddings") {
        return None;
    }
    if said == "POISON" {
        return error(
            400,
            json!({"code": "context_length_exceeded", "message": "too long", "type": "invalid_request_error", "param": "messages"}),
        );
    }
    if said.contains("BAD400") {
        return error(
            400,
            json!({"message": "Invalid 'temperature': decimal above maximum value.", "type": "invalid_request_error", "param": "temperature", "code": "decimal_above_max_value"}),
        );
    }
    if said == "PUSHBACK" {
        let pushback = error(429, json!({"code": "rate_limit_exceeded", "message": "slow down", "type": "requests"}));
        return pushback.map(|a| a.header("retry-after", "86400"));
    }
    None
}

impl Echo {
    fn decide(&self, request: &Received) -> Answer {
        let (path, body) = (request.path.as_str(), &request.body);
        let said = request.last_text();
        if let Some(error) = error_for(path, &said) {
            return error;
        }
        if path.ends_with("/embeddings") {
            if path.starts_with("/chatonly/") {
                let error = json!({"error": {"code": "model_not_found", "message": "this model does not support embeddings", "type": "invalid_request_error"}});
                return Answer::json(404, &error);
            }
            return Answer::json(200, &embeddings(body));
        }
        let after = if said == "slow" { Duration::from_secs(10) } else { Duration::ZERO };
        if !request.wants_stream() {
            return Answer::json(200, &completion(body, &said)).after(after);
        }
        if path.starts_with("/prefail/") {
            let role = chunk(body, json!([{"index": 0, "delta": {"role": "assistant", "content": ""}}]));
            return Answer::sse([Frame::Data(role), Frame::Pause(Duration::ZERO), Frame::Cut]).after(after);
        }
        let first_after = if said.contains("SLOWONCE") && self.slow_once.fetch_add(1, Ordering::Relaxed) == 0 {
            Duration::from_secs(2)
        } else {
            Duration::ZERO
        };
        let gate = said.contains("GATED").then(|| self.gate.clone());
        let truncated = said.contains("TRUNCATEONCE") && self.truncate_once.fetch_add(1, Ordering::Relaxed) == 0;
        sse(stream_events(body, &said, truncated), first_after, gate).after(after)
    }
}
