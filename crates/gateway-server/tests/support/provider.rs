//! A mock OpenAI provider on loopback that records every request (path, headers, raw body) and
//! answers as OpenAI does, by a marker in the last message's text:
//!
//! - `slow`: after 10 s; `POISON`: 400 `context_length_exceeded`; `PUSHBACK`: 429 asking for a
//!   day; `BAD400`: OpenAI's own 400 for a bad `temperature` (message, type, param, code);
//! - `TOOLS`: a tool call (`finish_reason: tool_calls`, `content: null`), streamed as deltas;
//!   `REFUSE`: a refusal; `LENGTH`: `finish_reason: length`;
//! - streams only: `CUT`: two chunks, then the stream ends without `[DONE]`; `GATED`: the first chunk, then
//!   the second only once the test opens the gate; `SLOWONCE`: the first token after 2 s the
//!   first time (a watchdog's cut), at once afterwards;
//! - anything else: an echo (`{"answer": "echo"}` in JSON mode), `n` choices, `logprobs` when
//!   asked, usage with its details.
//!
//! `/dead/…` answers 401; `/chatonly/…/embeddings` 404 `model_not_found`; `/prefail/…` streams
//! break before their first token. Embeddings follow `dimensions` and `encoding_format`.

use axum::body::Body;
use axum::response::Response;
use base64::Engine;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the provider received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub headers: axum::http::HeaderMap,
    /// The body exactly as it arrived.
    pub raw: String,
    pub body: Value,
}

/// What the provider received, and the gate of `GATED` streams.
#[derive(Clone)]
pub struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    gate: Arc<tokio::sync::Semaphore>,
    slow_once: Arc<AtomicUsize>,
    ids: Arc<AtomicUsize>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder { seen: Arc::default(), gate: Arc::new(tokio::sync::Semaphore::new(0)), slow_once: Arc::default(), ids: Arc::default() }
    }
}

impl Recorder {
    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests whose last message says `marker`.
    pub fn saying(&self, marker: &str) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| last_text(&s.body).contains(marker)).collect()
    }

    /// Lets one held `GATED` stream send its second chunk.
    pub fn open_gate(&self) {
        self.gate.add_permits(1);
    }
}

fn last_text(body: &Value) -> String {
    let Some(last) = body["messages"].as_array().and_then(|m| m.last()) else { return String::new() };
    match &last["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(" "),
        _ => String::new(),
    }
}

fn json_response(status: u16, body: &Value, request_id: Option<String>) -> Response {
    let mut builder = axum::http::Response::builder().status(status).header("content-type", "application/json");
    if let Some(id) = request_id {
        builder = builder.header("x-request-id", id);
    }
    builder.body(Body::from(body.to_string())).unwrap()
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

/// The events of a streamed answer; `Err` breaks the connection there.
fn stream_events(body: &Value, said: &str) -> Vec<Result<String, ()>> {
    let role = chunk(body, json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]));
    let mut events = vec![Ok(role)];
    if said.contains("TOOLS") {
        let head = json!([{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]);
        events.push(Ok(chunk(body, head)));
        for piece in ["{\"city\"", ":\"Paris\"}"] {
            events.push(Ok(chunk(body, json!([{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}}]))));
        }
        events.push(Ok(chunk(body, json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]))));
    } else {
        for piece in ["echo: ", said] {
            events.push(Ok(chunk(body, json!([{"index": 0, "delta": {"content": piece}, "finish_reason": null}]))));
        }
        if said.contains("CUT") {
            // The body ends cleanly (everything sent is flushed) but without `[DONE]`.
            return events;
        }
        events.push(Ok(chunk(body, json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]))));
    }
    if body["stream_options"]["include_usage"] == json!(true) {
        let mut last = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "choices": [], "usage": usage()});
        last["model"] = body["model"].clone();
        events.push(Ok(format!("data: {last}\n\n")));
    }
    events.push(Ok("data: [DONE]\n\n".into()));
    events
}

fn sse(events: Vec<Result<String, ()>>, first_after: Duration, gate: Option<Arc<tokio::sync::Semaphore>>, id: Option<String>) -> Response {
    let body = futures_util::stream::unfold((events.into_iter(), 0usize), move |(mut events, i)| {
        let gate = gate.clone();
        async move {
            if i == 1 {
                tokio::time::sleep(first_after).await;
            }
            if let Some(gate) = gate.filter(|_| i == 2) {
                gate.acquire().await.unwrap().forget();
            }
            match events.next()? {
                Ok(event) => Some((Ok::<_, std::io::Error>(event), (events, i + 1))),
                Err(()) => Some((Err(std::io::Error::other("cut")), (events, i + 1))),
            }
        }
    });
    let response = axum::http::Response::builder().header("content-type", "text/event-stream");
    let response = match id {
        Some(id) => response.header("x-request-id", id),
        None => response,
    };
    response.body(Body::from_stream(body)).unwrap()
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

/// Starts the provider: its root URL and what it records.
pub async fn start() -> (String, Recorder) {
    let recorder = Recorder::default();
    let answering = recorder.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let recorder = answering.clone();
        async move { answer(&recorder, request).await }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let root = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (root, recorder)
}

async fn answer(recorder: &Recorder, request: axum::extract::Request) -> Response {
    let path = request.uri().path().to_owned();
    let headers = request.headers().clone();
    let bytes = axum::body::to_bytes(request.into_body(), 1 << 20).await.unwrap();
    let raw = String::from_utf8_lossy(&bytes).into_owned();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    recorder.seen.lock().unwrap().push(Seen { path: path.clone(), headers, raw, body: body.clone() });
    let id = Some(format!("req-mock-{}", recorder.ids.fetch_add(1, Ordering::Relaxed)));
    if path.starts_with("/dead/") {
        return json_response(
            401,
            &json!({"error": {"code": "invalid_api_key", "message": "bad key", "type": "invalid_request_error"}}),
            id,
        );
    }
    if path.ends_with("/embeddings") {
        if path.starts_with("/chatonly/") {
            let error = json!({"error": {"code": "model_not_found", "message": "this model does not support embeddings", "type": "invalid_request_error"}});
            return json_response(404, &error, id);
        }
        return json_response(200, &embeddings(&body), id);
    }
    let said = last_text(&body);
    if said == "POISON" {
        return json_response(
            400,
            &json!({"error": {"code": "context_length_exceeded", "message": "too long", "type": "invalid_request_error", "param": "messages"}}),
            id,
        );
    }
    if said.contains("BAD400") {
        let error = json!({"error": {"message": "Invalid 'temperature': decimal above maximum value.", "type": "invalid_request_error", "param": "temperature", "code": "decimal_above_max_value"}});
        return json_response(400, &error, id);
    }
    if said == "PUSHBACK" {
        let error = json!({"error": {"code": "rate_limit_exceeded", "message": "slow down", "type": "requests"}});
        let mut response = json_response(429, &error, id);
        response.headers_mut().insert("retry-after", "86400".parse().unwrap());
        return response;
    }
    if said == "slow" {
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    if body["stream"] != json!(true) {
        return json_response(200, &completion(&body, &said), id);
    }
    if path.starts_with("/prefail/") {
        let role = chunk(&body, json!([{"index": 0, "delta": {"role": "assistant", "content": ""}}]));
        return sse(vec![Ok(role), Err(())], Duration::ZERO, None, id);
    }
    let first_after = if said.contains("SLOWONCE") && recorder.slow_once.fetch_add(1, Ordering::Relaxed) == 0 {
        Duration::from_secs(2)
    } else {
        Duration::ZERO
    };
    let gate = said.contains("GATED").then(|| recorder.gate.clone());
    sse(stream_events(&body, &said), first_after, gate, id)
}
