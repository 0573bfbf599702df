//! [`Claude`]: a responder that answers as Anthropic's Messages API does (`POST …/v1/messages`,
//! whole or streamed as named SSE events), echoing the last user message, with markers in that
//! message's text for the answers a test needs:
//!
//! - `OVERLOADED`: 529 `overloaded_error`; `PUSHBACK`: 429 `rate_limit_error` asking for a day;
//!   `BAD400`: 400 `invalid_request_error` (`max_tokens: Field required`);
//! - `TOOLS`: a text block, then a `tool_use` block (`stop_reason: tool_use`), streamed with
//!   `input_json_delta` pieces; `REFUSE`: no content, `stop_reason: refusal`; `LENGTH`:
//!   `stop_reason: max_tokens`; `THINK`: a `thinking` block before the text; `JSON`: the text is
//!   `{"answer": "echo"}`; `slow` (the whole text): after 10 s;
//! - streams only: `CUT`: the connection breaks after the first text delta; `STREAMERR`:
//!   `message_start`, then an `error` event, then the end; `GATED`: the first text delta, then
//!   the rest only once [`Claude::gate`] lets it through; `NEVERCLOSE`: a `tool_use` block whose
//!   JSON pieces never complete, never stopped, then the message's end;
//! - anything else: `echo: <text>`, with usage and its cache counts.
//!
//! `POST …/v1/messages/count_tokens` answers `{"input_tokens": N}`, a token per 4 characters of
//! text. Every request needs `x-api-key` (else 401) and `anthropic-version` (else 400), checked
//! first; a body without `messages` (or, for messages, `max_tokens`) is a 400. By path:
//! `/dead/…` answers 401; `/overloaded/…` 529 to everything; `/prefail/…` streams end as
//! `STREAMERR`'s do. Errors are `{"type": "error", "error": {"type", "message"}}`. Every answer
//! carries `request-id: req_mock_<n>`, n counting requests, and a believable request budget.

use crate::answer::{Answer, Frame};
use crate::gate::Gate;
use crate::recording::Received;
use crate::responder::Responder;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The marker-driven Anthropic persona (see the module doc).
#[derive(Debug, Default)]
pub struct Claude {
    gate: Gate,
    ids: AtomicUsize,
}

impl Claude {
    /// A persona whose `GATED` streams wait at a closed gate.
    pub fn new() -> Claude {
        Claude::default()
    }

    /// The gate `GATED` streams wait at after their first text delta.
    pub fn gate(&self) -> Gate {
        self.gate.clone()
    }
}

impl Responder for Claude {
    fn answer(&self, request: &Received) -> Answer {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        // A reset already past reads as "now" (gateway-http's ratelimit): the budget is believed.
        self.decide(request, n)
            .header("request-id", format!("req_mock_{n}"))
            .header("anthropic-ratelimit-requests-limit", "1000")
            .header("anthropic-ratelimit-requests-remaining", "999")
            .header("anthropic-ratelimit-requests-reset", "2026-01-01T00:00:00Z")
    }
}

/// Anthropic's error body with `status`.
fn error(status: u16, kind: &str, message: &str) -> Answer {
    Answer::json(status, &json!({"type": "error", "error": {"type": kind, "message": message}}))
}

fn overloaded() -> Value {
    json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
}

/// The text of the last `user` message: its `content` string, or its `text` blocks' texts
/// joined by a space; empty when there is none.
fn said(body: &Value) -> String {
    let last = body["messages"].as_array().and_then(|m| m.iter().rev().find(|m| m["role"] == "user"));
    match last.map(|m| &m["content"]) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => {
            blocks.iter().filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join(" ")
        }
        _ => String::new(),
    }
}

/// How many characters of text `value` (`system`, `messages`) holds: its strings, its `text`
/// blocks' texts, and what objects with `content` (messages, tool results) hold.
fn text_chars(value: &Value) -> usize {
    match value {
        Value::String(text) => text.chars().count(),
        Value::Array(items) => items.iter().map(text_chars).sum(),
        Value::Object(block) if block.get("type") == Some(&json!("text")) => block.get("text").map_or(0, text_chars),
        Value::Object(block) => block.get("content").map_or(0, text_chars),
        _ => 0,
    }
}

/// Why a body cannot be answered (the message of its 400), if it cannot.
fn invalid(body: &Value, needs_max_tokens: bool) -> Option<&'static str> {
    match (&body["messages"], &body["max_tokens"]) {
        _ if !body.is_object() => Some("messages: Field required (the body is not a JSON object)"),
        (Value::Null, _) => Some("messages: Field required"),
        (messages, _) if !messages.is_array() => Some("messages: Input should be a valid list"),
        (_, Value::Null) if needs_max_tokens => Some("max_tokens: Field required"),
        (_, Value::Null | Value::Number(_)) => None,
        _ => Some("max_tokens: Input should be a valid integer"),
    }
}

/// The error a marker asks for, if any.
fn marked_error(said: &str) -> Option<Answer> {
    Some(if said.contains("OVERLOADED") {
        Answer::json(529, &overloaded())
    } else if said.contains("PUSHBACK") {
        error(429, "rate_limit_error", "Number of requests has exceeded your rate limit.").header("retry-after", "86400")
    } else if said.contains("BAD400") {
        error(400, "invalid_request_error", "max_tokens: Field required")
    } else {
        return None;
    })
}

fn tool_use() -> Value {
    json!({"type": "tool_use", "id": "toolu_mock_1", "name": "get_weather", "input": {"city": "Paris"}})
}

/// The content blocks and the stop reason `said` asks for.
fn content(said: &str) -> (Vec<Value>, &'static str) {
    if said.contains("REFUSE") {
        return (Vec::new(), "refusal");
    }
    let mut blocks = Vec::new();
    if said.contains("THINK") {
        blocks.push(json!({"type": "thinking", "thinking": "hmm", "signature": "sig"}));
    }
    if said.contains("TOOLS") {
        blocks.extend([json!({"type": "text", "text": "Let me check."}), tool_use()]);
        return (blocks, "tool_use");
    }
    let text = if said.contains("JSON") { "{\"answer\": \"echo\"}".to_owned() } else { format!("echo: {said}") };
    blocks.push(json!({"type": "text", "text": text}));
    (blocks, if said.contains("LENGTH") { "max_tokens" } else { "end_turn" })
}

/// A `message` object of `content`, stopped for `stop` (null while streaming), with `usage`.
fn message(n: usize, body: &Value, content: Vec<Value>, stop: Value, output_tokens: u64) -> Value {
    json!({"id": format!("msg_mock_{n}"), "type": "message", "role": "assistant", "model": body["model"],
           "content": content, "stop_reason": stop, "stop_sequence": null,
           "usage": {"input_tokens": 12, "output_tokens": output_tokens, "cache_creation_input_tokens": 1, "cache_read_input_tokens": 2}})
}

/// `text` in two pieces: through its first space, and the rest (every text here has a space).
fn halves(text: &str) -> (&str, &str) {
    text.split_at(text.find(' ').map_or(0, |space| space + 1))
}

/// The tool input's JSON in pieces: whole (`{"city": "Paris"}`), or never completed.
const TOOL_PIECES: [&str; 2] = ["{\"city\":", " \"Paris\"}"];
const UNCLOSED_PIECES: [&str; 2] = ["{\"city\":", " \"Par"];

/// The events of content block `index`: its start, its deltas, its stop (none for a tool block
/// left open).
fn block_events(index: usize, block: &Value, left_open: bool) -> Vec<Value> {
    let start = |block: Value| json!({"type": "content_block_start", "index": index, "content_block": block});
    let delta = |delta: Value| json!({"type": "content_block_delta", "index": index, "delta": delta});
    let mut events = match block["type"].as_str() {
        Some("thinking") => vec![
            start(json!({"type": "thinking", "thinking": ""})),
            delta(json!({"type": "thinking_delta", "thinking": block["thinking"]})),
            delta(json!({"type": "signature_delta", "signature": block["signature"]})),
        ],
        Some("tool_use") => {
            let head = start(json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}));
            let pieces = if left_open { UNCLOSED_PIECES } else { TOOL_PIECES };
            let deltas = pieces.map(|piece| delta(json!({"type": "input_json_delta", "partial_json": piece})));
            std::iter::once(head).chain(deltas).collect()
        }
        _ => {
            let (first, rest) = halves(block["text"].as_str().unwrap_or_default());
            let text = |piece: &str| delta(json!({"type": "text_delta", "text": piece}));
            vec![start(json!({"type": "text", "text": ""})), text(first), text(rest)]
        }
    };
    if !left_open {
        events.push(json!({"type": "content_block_stop", "index": index}));
    }
    events
}

/// The events of a streamed answer (each one's `type` is its event name).
fn stream_events(n: usize, body: &Value, said: &str, prefail: bool) -> Vec<Value> {
    let start = json!({"type": "message_start", "message": message(n, body, Vec::new(), Value::Null, 1)});
    if prefail || said.contains("STREAMERR") {
        return vec![start, overloaded()];
    }
    let left_open = said.contains("NEVERCLOSE");
    let (blocks, stop) = if left_open { (vec![tool_use()], "tool_use") } else { content(said) };
    // A ping after the start, when content follows.
    let mut events = if blocks.is_empty() { vec![start] } else { vec![start, json!({"type": "ping"})] };
    for (index, block) in blocks.iter().enumerate() {
        events.extend(block_events(index, block, left_open));
    }
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 3}}));
    events.push(json!({"type": "message_stop"}));
    events
}

/// `events` as a stream of SSE events named by their `type`: after the first text delta, a cut
/// (`cut`) or a wait at `gate`.
fn sse(events: &[Value], cut: bool, gate: Option<&Gate>) -> Answer {
    let first_text = events.iter().position(|e| e["delta"]["type"] == "text_delta");
    let mut frames = Vec::with_capacity(events.len() + 2);
    for (i, event) in events.iter().enumerate() {
        frames.push(Frame::Data(format!("event: {}\ndata: {event}\n\n", event["type"].as_str().unwrap_or("message"))));
        if Some(i) == first_text && cut {
            // The pause lets what was sent reach the client before the break.
            frames.extend([Frame::Pause(Duration::from_millis(5)), Frame::Cut]);
            break;
        }
        if let Some(gate) = gate.filter(|_| Some(i) == first_text) {
            frames.push(Frame::Hold(gate.clone()));
        }
    }
    Answer::sse(frames)
}

impl Claude {
    fn decide(&self, request: &Received, n: usize) -> Answer {
        let (path, body) = (request.path.as_str(), &request.body);
        let has = |name: &str| request.headers.get(name).is_some_and(|v| !v.is_empty());
        if !has("x-api-key") {
            return error(401, "authentication_error", "x-api-key header is required");
        }
        if !has("anthropic-version") {
            return error(400, "invalid_request_error", "anthropic-version header is required");
        }
        if path.starts_with("/dead/") {
            return error(401, "authentication_error", "invalid x-api-key");
        }
        if path.starts_with("/overloaded/") {
            return Answer::json(529, &overloaded());
        }
        let counting = path.ends_with("/v1/messages/count_tokens");
        if request.method != "POST" || !(counting || path.ends_with("/v1/messages")) {
            return error(404, "not_found_error", &format!("{} {path} is not a Messages API route", request.method));
        }
        if let Some(message) = invalid(body, !counting) {
            return error(400, "invalid_request_error", message);
        }
        if counting {
            let chars = text_chars(&body["system"]) + text_chars(&body["messages"]);
            return Answer::json(200, &json!({"input_tokens": (chars / 4).max(1)}));
        }
        let said = said(body);
        if let Some(error) = marked_error(&said) {
            return error;
        }
        let after = if said == "slow" { Duration::from_secs(10) } else { Duration::ZERO };
        if !request.wants_stream() {
            let (content, stop) = content(&said);
            return Answer::json(200, &message(n, body, content, json!(stop), 3)).after(after);
        }
        let events = stream_events(n, body, &said, path.starts_with("/prefail/"));
        let gate = said.contains("GATED").then_some(&self.gate);
        sse(&events, said.contains("CUT"), gate).after(after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::Body;
    use futures_util::{FutureExt, StreamExt};

    const KEYED: [(&str, &str); 2] = [("x-api-key", "sk-ant-mock"), ("anthropic-version", "2023-06-01")];

    fn request(path: &str, body: Value, headers: &[(&'static str, &'static str)]) -> Received {
        use axum::http::{HeaderName, HeaderValue};
        let headers = headers.iter().map(|(n, v)| (HeaderName::from_static(n), HeaderValue::from_static(v))).collect();
        let raw = body.to_string();
        Received { method: "POST".into(), path: path.into(), query: String::new(), headers, bytes: raw.clone().into(), raw, body }
    }

    fn post(claude: &Claude, path: &str, body: Value) -> Answer {
        claude.answer(&request(path, body, &KEYED))
    }

    fn asking(said: &str, stream: bool) -> Value {
        json!({"model": "claude-mock", "max_tokens": 64, "stream": stream, "messages": [{"role": "user", "content": said}]})
    }

    fn header<'a>(answer: &'a Answer, name: &str) -> Option<&'a str> {
        answer.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The status and JSON body of a whole answer.
    fn whole(answer: &Answer) -> (u16, Value) {
        let Body::Whole(bytes) = &answer.body else { panic!("not a whole answer: {answer:?}") };
        (answer.status, serde_json::from_slice(bytes).unwrap())
    }

    /// The status, error type and message of an error answer.
    fn error_of(answer: &Answer) -> (u16, String, String) {
        let (status, body) = whole(answer);
        assert_eq!((body["type"].as_str(), body.as_object().map(|o| o.len())), (Some("error"), Some(2)), "{body}");
        (status, body["error"]["type"].as_str().unwrap().into(), body["error"]["message"].as_str().unwrap().into())
    }

    /// The frames of a streamed answer (made in advance: ready at once).
    fn frames(answer: Answer) -> Vec<Frame> {
        assert_eq!(header(&answer, "content-type"), Some("text/event-stream"));
        let Body::Frames(frames) = answer.body else { panic!("not a stream") };
        frames.collect::<Vec<_>>().now_or_never().unwrap()
    }

    /// The data of each SSE event of `frames`, checking its name is its type.
    fn events_of(frames: &[Frame]) -> Vec<Value> {
        let data = frames.iter().filter_map(|f| if let Frame::Data(text) = f { Some(text) } else { None });
        data.map(|text| {
            let (name, data) = text.strip_suffix("\n\n").unwrap().split_once('\n').unwrap();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(name.strip_prefix("event: "), data["type"].as_str(), "{text}");
            data
        })
        .collect()
    }

    /// The events of the stream answering `said`.
    fn streamed(claude: &Claude, said: &str) -> Vec<Value> {
        events_of(&frames(post(claude, "/v1/messages", asking(said, true))))
    }

    fn kinds(events: &[Value]) -> Vec<&str> {
        events.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    /// The concatenated `field` of the deltas of type `kind`.
    fn joined(events: &[Value], kind: &str, field: &str) -> String {
        events.iter().filter(|e| e["delta"]["type"] == kind).map(|e| e["delta"][field].as_str().unwrap()).collect()
    }

    #[test]
    fn a_whole_answer_echoes_the_last_user_text_blocks() {
        let claude = Claude::new();
        let body = json!({"model": "claude-mock", "max_tokens": 64, "messages": [
            {"role": "user", "content": "first"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "source": {}}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "ignored"}]});
        post(&claude, "/v1/messages", json!({}));
        let answer = post(&claude, "/v1/messages", body);
        assert_eq!(header(&answer, "request-id"), Some("req_mock_1"), "n counts requests, answered or not");
        assert_eq!(header(&answer, "anthropic-ratelimit-requests-remaining"), Some("999"));
        let expected = json!({"id": "msg_mock_1", "type": "message", "role": "assistant", "model": "claude-mock",
            "content": [{"type": "text", "text": "echo: a b"}], "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 3, "cache_creation_input_tokens": 1, "cache_read_input_tokens": 2}});
        assert_eq!(whole(&answer), (200, expected));
        let (_, tools) = whole(&post(&claude, "/v1/messages", asking("THINK TOOLS", false)));
        assert_eq!(kinds(tools["content"].as_array().unwrap()), ["thinking", "text", "tool_use"]);
        assert_eq!(tools["stop_reason"], "tool_use");
        assert_eq!(tools["content"][2], tool_use());
        let (_, refused) = whole(&post(&claude, "/v1/messages", asking("REFUSE", false)));
        assert_eq!((&refused["stop_reason"], &refused["content"]), (&json!("refusal"), &json!([])));
        let (_, json_mode) = whole(&post(&claude, "/v1/messages", asking("JSON LENGTH", false)));
        assert_eq!((&json_mode["content"][0]["text"], &json_mode["stop_reason"]), (&json!("{\"answer\": \"echo\"}"), &json!("max_tokens")));
        assert_eq!(post(&claude, "/v1/messages", asking("slow", false)).after, Duration::from_secs(10));
    }

    #[test]
    fn a_stream_plays_the_event_sequence_and_its_deltas_make_the_text() {
        let claude = Claude::new();
        let events = streamed(&claude, "hi there");
        let expected = ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta"];
        assert_eq!(kinds(&events), [&expected[..], &["content_block_stop", "message_delta", "message_stop"]].concat());
        assert_eq!((&events[0]["message"]["content"], &events[0]["message"]["usage"]["output_tokens"]), (&json!([]), &json!(1)));
        assert_eq!(events[2]["content_block"], json!({"type": "text", "text": ""}));
        assert_eq!(joined(&events, "text_delta", "text"), "echo: hi there");
        let end =
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 3}});
        assert_eq!(events[6], end);
        let think = streamed(&claude, "THINK");
        let thought = (joined(&think, "thinking_delta", "thinking"), joined(&think, "signature_delta", "signature"));
        assert_eq!(thought, ("hmm".into(), "sig".into()));
        let refused = streamed(&claude, "REFUSE");
        assert_eq!(kinds(&refused), ["message_start", "message_delta", "message_stop"]);
        assert_eq!(refused[1]["delta"]["stop_reason"], "refusal");
    }

    #[test]
    fn tools_stream_partial_json_that_makes_the_input() {
        let events = streamed(&Claude::new(), "TOOLS");
        let starts: Vec<&Value> = events.iter().filter(|e| e["type"] == "content_block_start").map(|e| &e["content_block"]).collect();
        let tool_start = json!({"type": "tool_use", "id": "toolu_mock_1", "name": "get_weather", "input": {}});
        assert_eq!(starts, [&json!({"type": "text", "text": ""}), &tool_start]);
        assert_eq!(joined(&events, "text_delta", "text"), "Let me check.");
        let input: Value = serde_json::from_str(&joined(&events, "input_json_delta", "partial_json")).unwrap();
        assert_eq!((input, &events[events.len() - 2]["delta"]["stop_reason"]), (json!({"city": "Paris"}), &json!("tool_use")));
        let open = streamed(&Claude::new(), "NEVERCLOSE");
        assert!(serde_json::from_str::<Value>(&joined(&open, "input_json_delta", "partial_json")).is_err());
        assert!(!kinds(&open).contains(&"content_block_stop"));
        assert_eq!(kinds(&open)[open.len() - 2..], ["message_delta", "message_stop"]);
    }

    #[test]
    fn streams_cut_fail_and_wait_at_the_gate_after_the_first_delta() {
        let claude = Claude::new();
        let cut = frames(post(&claude, "/v1/messages", asking("CUT", true)));
        assert!(matches!(cut.last(), Some(Frame::Cut)));
        assert_eq!(kinds(&events_of(&cut)), ["message_start", "ping", "content_block_start", "content_block_delta"]);
        let failed = streamed(&claude, "STREAMERR");
        assert_eq!((kinds(&failed), &failed[1]), (vec!["message_start", "error"], &overloaded()));
        let prefail = events_of(&frames(post(&claude, "/prefail/v1/messages", asking("hi", true))));
        assert_eq!(kinds(&prefail), ["message_start", "error"]);
        let gated = frames(post(&claude, "/v1/messages", asking("GATED", true)));
        let hold = gated.iter().position(|f| matches!(f, Frame::Hold(_))).unwrap();
        assert_eq!(events_of(&gated[..hold]).last().unwrap()["delta"]["text"], "echo: ", "the first text delta before the gate");
        assert_eq!(events_of(&gated[hold..])[0]["delta"]["text"], "GATED", "the rest after it");
    }

    #[test]
    fn errors_have_anthropics_shape() {
        let claude = Claude::new();
        let (status, body) = whole(&post(&claude, "/v1/messages", asking("OVERLOADED", true)));
        assert_eq!((status, body), (529, json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})));
        let pushback = post(&claude, "/v1/messages", asking("PUSHBACK", false));
        assert_eq!((error_of(&pushback).1.as_str(), header(&pushback, "retry-after")), ("rate_limit_error", Some("86400")));
        let keyless = claude.answer(&request("/v1/messages", asking("OVERLOADED", false), &KEYED[1..]));
        assert_eq!(error_of(&keyless), (401, "authentication_error".into(), "x-api-key header is required".into()));
        assert!(header(&keyless, "request-id").is_some(), "every answer carries a request id");
        let versionless = claude.answer(&request("/v1/messages", asking("hi", false), &KEYED[..1]));
        assert_eq!(error_of(&versionless), (400, "invalid_request_error".into(), "anthropic-version header is required".into()));
        let no_max = post(&claude, "/v1/messages", json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(error_of(&no_max), (400, "invalid_request_error".into(), "max_tokens: Field required".into()));
        assert_eq!(error_of(&post(&claude, "/v1/messages", asking("BAD400", false))), error_of(&no_max));
        let (status, _, message) = error_of(&post(&claude, "/v1/messages", Value::Null));
        assert!(status == 400 && message.contains("messages"), "{message}");
        assert_eq!(error_of(&post(&claude, "/dead/v1/messages", asking("hi", false))).0, 401);
        assert_eq!(error_of(&post(&claude, "/overloaded/v1/messages/count_tokens", asking("hi", false))).0, 529);
        assert_eq!(error_of(&post(&claude, "/v1/complete", asking("hi", false))).1, "not_found_error");
    }

    #[test]
    fn count_tokens_counts_a_token_per_four_characters() {
        let claude = Claude::new();
        let body = json!({"model": "m", "system": [{"type": "text", "text": "12345678"}], "messages": [
            {"role": "user", "content": "abcd"},
            {"role": "user", "content": [{"type": "text", "text": "efgh"}, {"type": "image", "source": {"data": "zzzzzzzz"}},
                                         {"type": "tool_result", "tool_use_id": "t", "content": "ijkl"}]}]});
        assert_eq!(whole(&post(&claude, "/v1/messages/count_tokens", body)), (200, json!({"input_tokens": 5})));
        let tiny = json!({"messages": [{"role": "user", "content": "a"}]});
        assert_eq!(whole(&post(&claude, "/v1/messages/count_tokens", tiny)), (200, json!({"input_tokens": 1})));
    }
}
