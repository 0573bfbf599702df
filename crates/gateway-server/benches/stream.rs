//! What the proxy adds to a stream: an upstream sends 20 chunks 100 ms apart; the client reads
//! them through gateway-server, and each chunk's arrival is compared with the moment the
//! upstream sent it. The first chunk (the commit point) and the last are reported, median and
//! worst over the runs, for a chat completion (`chat.completion.chunk`s) and a Responses call
//! (named events: `response.created` and the output's opening at once, then 20
//! `response.output_text.delta`s, then the closing events and `response.completed`) and an
//! Anthropic Messages call (`message_start` and the block's start at once, 20
//! `content_block_delta`s, then the block's stop, `message_delta` and `message_stop`). `cargo bench -p gateway-server --bench stream`; the row goes to
//! docs/PERFORMANCE.md. (Not criterion: the question is when bytes arrive, not how long a
//! function takes.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]
// A benchmark measures wall-clock time.
#![allow(clippy::disallowed_methods)]

mod support;

use gateway_mock::{Answer, Frame, MockServer};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CHUNKS: usize = 20;
const GAP: Duration = Duration::from_millis(100);

/// The mock's send instants of the stream it is serving.
type Sent = Arc<Mutex<Vec<Instant>>>;

/// A Responses event of `kind` with `fields`, as the provider frames it.
fn named(kind: &str, mut fields: serde_json::Value, seq: usize) -> String {
    fields["type"] = json!(kind);
    fields["sequence_number"] = json!(seq);
    format!("event: {kind}\ndata: {fields}\n\n")
}

/// The `i`-th of the stream's content chunks, in the dialect of a request to `path`.
fn content(path: &str, i: usize) -> String {
    if path.ends_with("/messages") {
        let delta = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": format!("t{i} ")}});
        return format!("event: content_block_delta\ndata: {delta}\n\n");
    }
    if path.ends_with("/responses") {
        let at = json!({"item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": format!("t{i} "), "logprobs": []});
        return named("response.output_text.delta", at, 4 + i);
    }
    let chunk = json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": format!("t{i} ")}}]});
    format!("data: {chunk}\n\n")
}

/// What opens and closes a stream to `path`: a Responses call's events before its first delta
/// and after its last; chat's `[DONE]`.
fn framing(path: &str) -> (String, String) {
    if path.ends_with("/messages") {
        let event = |value: serde_json::Value| format!("event: {}\ndata: {value}\n\n", value["type"].as_str().unwrap());
        let message = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
                             "stop_reason": null, "usage": {"input_tokens": 3, "output_tokens": 1}});
        let opening = [
            event(json!({"type": "message_start", "message": message})),
            event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        ];
        let closing = [
            event(json!({"type": "content_block_stop", "index": 0})),
            event(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": CHUNKS}})),
            event(json!({"type": "message_stop"})),
        ];
        return (opening.concat(), closing.concat());
    }
    if !path.ends_with("/responses") {
        return (String::new(), "data: [DONE]\n\n".to_owned());
    }
    let response = |status: &str, output: serde_json::Value| json!({"response": {"id": "resp_1", "object": "response", "status": status, "output": output}});
    let text: String = (0..CHUNKS).map(|i| format!("t{i} ")).collect();
    let part = json!({"type": "output_text", "text": text, "annotations": []});
    let item = json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [part]});
    let at = |more: serde_json::Value| {
        let mut base = json!({"item_id": "msg_1", "output_index": 0, "content_index": 0});
        base.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
        base
    };
    let opening = [
        named("response.created", response("in_progress", json!([])), 0),
        named("response.in_progress", response("in_progress", json!([])), 1),
        named(
            "response.output_item.added",
            json!({"output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
            2,
        ),
        named("response.content_part.added", at(json!({"part": {"type": "output_text", "text": ""}})), 3),
    ];
    let closing = [
        named("response.output_text.done", at(json!({"text": text, "logprobs": []})), 4 + CHUNKS),
        named("response.content_part.done", at(json!({"part": part})), 5 + CHUNKS),
        named("response.output_item.done", json!({"output_index": 0, "item": item}), 6 + CHUNKS),
        named("response.completed", response("completed", json!([item])), 7 + CHUNKS),
    ];
    (opening.concat(), closing.concat())
}

async fn mock_provider(sent: Sent) -> MockServer {
    let answer = move |request: &gateway_mock::Received| {
        sent.lock().unwrap().clear();
        let (sent, path) = (sent.clone(), request.path.clone());
        let (opening, closing) = framing(&path);
        let frames = futures_util::stream::unfold(0usize, move |i| {
            let (sent, path, opening, closing) = (sent.clone(), path.clone(), opening.clone(), closing.clone());
            async move {
                if i > CHUNKS {
                    return None;
                }
                if i > 0 {
                    tokio::time::sleep(GAP).await;
                }
                let event = if i == CHUNKS {
                    closing
                } else {
                    sent.lock().unwrap().push(Instant::now());
                    let event = content(&path, i);
                    if i == 0 { format!("{opening}{event}") } else { event }
                };
                Some((Frame::Data(event), i + 1))
            }
        });
        Answer::sse_stream(frames)
    };
    MockServer::builder().unrecorded().answering(answer).await.unwrap()
}

/// One streamed call through `url` to `path` (`chat/completions` or `responses`): when each
/// content chunk arrived.
async fn arrivals(http: &reqwest::Client, url: &str, path: &str) -> Vec<Instant> {
    let body = if path == "responses" {
        json!({"model": "chat", "stream": true, "input": "hi"})
    } else if path == "messages" {
        json!({"model": "claude", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
    } else {
        json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "hi"}]})
    };
    let mut response = http.post(format!("{url}/v1/{path}")).json(&body).send().await.unwrap();
    let (mut arrived, mut buffer) = (Vec::new(), String::new());
    while let Some(bytes) = response.chunk().await.unwrap() {
        let now = Instant::now();
        buffer.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let content = match path {
                "responses" => event.starts_with("event: response.output_text.delta"),
                "messages" => event.starts_with("event: content_block_delta"),
                _ => event.contains("\"content\""),
            };
            if content {
                arrived.push(now);
            }
        }
    }
    arrived
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let runs = if std::env::args().any(|a| a == "--test") { 1 } else { 10 };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let sent: Sent = Arc::default();
        let mock = mock_provider(sent.clone()).await;
        let claude = format!(
            "watchdog_s = 1\n[claude.breaker]\nfail_threshold = 5\ncooldown_s = 60\n[claude.sources.anthropic]\nprotocol = \"anthropic\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\ntimeout_s = 30\nwatchdog_s = 1\n",
            mock.root()
        );
        let gateway = support::proxy(&mock.root(), &claude).await;
        let http = reqwest::Client::new();
        println!("| stream of {CHUNKS} chunks {} ms apart, {runs} runs | median | worst |", GAP.as_millis());
        println!("|---|---|---|");
        for (name, path) in [("chat", "chat/completions"), ("Responses", "responses"), ("Messages", "messages")] {
            let (mut first, mut last) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let arrived = arrivals(&http, &gateway, path).await;
                let sent = sent.lock().unwrap().clone();
                assert_eq!((arrived.len(), sent.len()), (CHUNKS, CHUNKS), "every chunk came through ({name})");
                first.push(arrived[0].saturating_duration_since(sent[0]));
                last.push(arrived[CHUNKS - 1].saturating_duration_since(sent[CHUNKS - 1]));
            }
            first.sort();
            last.sort();
            let (f, l) = ((first[first.len() / 2], first[first.len() - 1]), (last[last.len() / 2], last[last.len() - 1]));
            println!("| {name}: first chunk (the commit point), client after upstream | {:.2} ms | {:.2} ms |", ms(f.0), ms(f.1));
            println!("| {name}: last chunk, client after upstream | {:.2} ms | {:.2} ms |", ms(l.0), ms(l.1));
        }
    });
}
