//! The `gateway-server` binary under a memory cap (`RLIMIT_AS` 4 GiB, as `prlimit --as=4GiB`) and
//! a time cap, in front of a provider that streams as fast as loopback allows and never ends:
//! every hostile path ends its call with an error naming the limit it passed, the proxy's peak
//! resident set stays within the budget plus a fixed overhead, and the process keeps serving.
//! - a whole answer assembled from a stream (a source with `watchdog_s`): `max_response_bytes`;
//! - a stream asking for JSON whose answer is an endless JSON string: the text kept for the
//!   check is held under `max_response_bytes`;
//! - a plain relayed stream: `max_stream_bytes`;
//! - eight at once holding more than `max_held_bytes`: new calls get 503 with `Retry-After`
//!   while a healthy stream in flight goes on, and healthy calls are served afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]
// Real processes and sockets: waits are bounded by the wall clock.
#![allow(clippy::disallowed_methods)]

use gateway_mock::{Answer, Frame, MockServer, Received, openai};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;

#[path = "support/capped.rs"]
mod capped;

use capped::{Capped, Caps};

/// Address space the proxy may map.
const MEMORY_CAP_KIB: u64 = 4 << 20;
/// No test here may take longer.
const TIME_CAP: Duration = Duration::from_secs(90);
/// What the proxy's resident set may grow by over its idle one on any one hostile path, with
/// the default budgets (8 MiB held, 64 MiB streamed).
const MAX_GROWTH_KIB: u64 = 64 << 10;

/// The content of one fast event: 16 KiB.
fn piece() -> String {
    "x".repeat(16 << 10)
}

/// A provider: `ENDLESS` streams content forever, `JSONSTRING` an endless JSON string, `HOLD`
/// 6 MiB fast, then a pause of 3 s, then forever; anything else a short healthy stream of 20
/// chunks 100 ms apart (or a whole answer when not asked to stream).
async fn provider() -> MockServer {
    MockServer::answering(|received: &Received| {
        let endless = |opening: Option<String>| {
            let event = openai::chunk(&piece());
            let head = opening.map(|text| Frame::data(openai::chunk(&text)));
            Answer::sse(head.into_iter().chain(std::iter::repeat_with(move || Frame::data(event.clone()))))
        };
        if received.raw.contains("JSONSTRING") {
            endless(Some("{\"a\": \"".to_owned()))
        } else if received.raw.contains("ENDLESS") {
            endless(None)
        } else if received.raw.contains("HOLD") {
            let (event, again) = (openai::chunk(&piece()), openai::chunk(&piece()));
            let fast = std::iter::repeat_with(move || Frame::data(event.clone())).take((6 << 20) / (16 << 10));
            let rest = std::iter::repeat_with(move || Frame::data(again.clone()));
            Answer::sse(fast.chain([Frame::Pause(Duration::from_secs(3))]).chain(rest))
        } else if received.body.get("stream").and_then(Value::as_bool) == Some(true) {
            let chunks = (0..20).flat_map(|i| [Frame::Pause(Duration::from_millis(100)), Frame::data(openai::chunk(&format!("{i} ")))]);
            let end =
                openai::event(&json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
            Answer::sse(chunks.chain([Frame::data(end), Frame::data(openai::DONE)]))
        } else {
            Answer::json(200, &openai::completion("{\"ok\": true}"))
        }
    })
    .await
    .unwrap()
}

/// The proxy with `server` lines in its `[server]` table, in front of `provider`: scope `chat`
/// streams as the caller asks, scope `watched` (a source with a watchdog) always streams
/// upstream.
async fn start(provider: &MockServer, server: &str) -> Capped {
    let url = provider.base_url();
    let config = |port| {
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nshutdown_grace_s = 1\n{server}\n\
             [chat.breaker]\nfail_threshold = 1000\ncooldown_s = 1\n\
             [chat.sources.relay]\nbase_url = \"{url}\"\nmodel = \"m\"\ntimeout_s = 30\n\
             [watched.breaker]\nfail_threshold = 1000\ncooldown_s = 1\n\
             [watched.sources.watchful]\nbase_url = \"{url}\"\nmodel = \"m\"\ntimeout_s = 30\nwatchdog_s = 10\n"
        )
    };
    Capped::start(config, &Caps { memory_kib: MEMORY_CAP_KIB, fds: None }, Stdio::null()).await
}

/// A chat call of `scope` saying `marker`, streamed or not, asking for JSON or not.
async fn post(proxy: &Capped, scope: &str, marker: &str, stream: bool, structured: bool) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", proxy.base))
        .json(&chat_body(scope, marker, stream, structured))
        .send()
        .await
        .unwrap()
}

fn chat_body(scope: &str, marker: &str, stream: bool, structured: bool) -> Value {
    let mut body = json!({"model": scope, "stream": stream, "messages": [{"role": "user", "content": marker}]});
    if structured {
        body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}});
    }
    body
}

/// A healthy call is served: the proxy lives and answers.
async fn serves(proxy: &mut Capped) {
    assert!(proxy.alive(), "the proxy is alive");
    let answer = post(proxy, "chat", "hello", false, false).await;
    assert_eq!(answer.status(), 200, "a healthy call is served");
}

/// The SSE body of `answer`, read to its end: its size, and its last event.
async fn read_stream(answer: reqwest::Response) -> (usize, String) {
    let mut answer = answer;
    let (mut size, mut tail) = (0, String::new());
    while let Some(bytes) = answer.chunk().await.unwrap() {
        size += bytes.len();
        tail.push_str(&String::from_utf8_lossy(&bytes));
        if tail.len() > 64 << 10 {
            tail.drain(..tail.len() - (32 << 10));
        }
    }
    let last = tail.trim_end().rsplit("\n\n").next().unwrap_or_default().to_owned();
    (size, last)
}

/// The error of the last event of a stream: its `error` object.
fn error_event(last: &str) -> Value {
    assert!(last.starts_with("event: error\ndata: "), "the stream ends with an error event: {last:.300}");
    let error: Value = serde_json::from_str(last.trim_start_matches("event: error\ndata: ")).unwrap();
    error["error"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_endless_path_ends_naming_its_limit_within_the_memory_budget() {
    tokio::time::timeout(TIME_CAP, async {
        let provider = provider().await;
        let mut proxy = start(&provider, "").await;
        serves(&mut proxy).await;
        let (idle, _) = proxy.memory();

        // A whole answer assembled from an endless stream.
        let answer = post(&proxy, "watched", "ENDLESS", false, false).await;
        assert_eq!(answer.status(), 502);
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["error"]["code"], "response_too_large", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("exceeded max_response_bytes (8388608 bytes)"), "{message}");
        assert_eq!(provider.saying("ENDLESS").len(), 1, "the source is not asked again in the call");
        let (_, assembled_peak) = proxy.memory();
        serves(&mut proxy).await;

        // A structured stream whose answer is an endless JSON string.
        // It is held to its validated end (structured_stream = "validated"), so it never commits:
        // it ends at the budget like a whole answer.
        let answer = post(&proxy, "chat", "JSONSTRING", true, true).await;
        assert_eq!(answer.status(), 502, "held, never committed");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["error"]["code"], "response_too_large", "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("max_response_bytes (8388608 bytes)"), "{body}");
        let (_, held_peak) = proxy.memory();
        serves(&mut proxy).await;
        // The same, committing at its first token (by header): relayed, its text kept for the
        // check under the budget.
        let answer = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", proxy.base))
            .header("x-gateway-structured-stream", "first_token")
            .json(&chat_body("chat", "JSONSTRING", true, true))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "it commits at its first token");
        let (size, last) = read_stream(answer).await;
        let error = error_event(&last);
        assert_eq!(error["code"], "response_too_large", "{error}");
        assert!(error["message"].as_str().unwrap().contains("max_response_bytes (8388608 bytes)"), "{error}");
        assert!(size < 10 << 20, "ended at the budget: {size} bytes relayed");
        let (_, structured_peak) = proxy.memory();
        serves(&mut proxy).await;

        // A plain relayed stream.
        let answer = post(&proxy, "chat", "ENDLESS", true, false).await;
        let (size, last) = read_stream(answer).await;
        let error = error_event(&last);
        assert_eq!(error["code"], "response_too_large", "{error}");
        assert!(error["message"].as_str().unwrap().contains("exceeded max_stream_bytes (67108864 bytes)"), "{error}");
        assert!((60 << 20..80 << 20).contains(&size), "ended at the stream cap: {size} bytes relayed");
        let (_, relayed_peak) = proxy.memory();
        serves(&mut proxy).await;

        eprintln!(
            "idle RSS {idle} KiB; peak after the assembled path {assembled_peak} KiB (+{}), the held structured stream {held_peak} KiB (+{}), the relayed structured stream {structured_peak} KiB (+{}), the relayed stream {relayed_peak} KiB (+{})",
            assembled_peak - idle,
            held_peak - idle,
            structured_peak - idle,
            relayed_peak - idle
        );
        for (path, peak) in [("assembled", assembled_peak), ("held", held_peak), ("structured", structured_peak), ("relayed", relayed_peak)] {
            assert!(peak - idle <= MAX_GROWTH_KIB, "{path}: the peak RSS grew by {} KiB (limit {MAX_GROWTH_KIB} KiB)", peak - idle);
        }
    })
    .await
    .expect("within the time cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_at_once_past_max_held_bytes_refuse_new_calls_while_a_healthy_stream_goes_on() {
    tokio::time::timeout(TIME_CAP, async {
        let provider = provider().await;
        let mut proxy = start(&provider, &format!("max_held_bytes = {}", 24 << 20)).await;
        serves(&mut proxy).await;
        let (idle, _) = proxy.memory();
        let healthy = post(&proxy, "chat", "a healthy stream", true, false).await;
        assert_eq!(healthy.status(), 200);
        let healthy = tokio::spawn(read_stream(healthy));
        let hostile: Vec<_> = (0..8)
            .map(|_| {
                let body = json!({"model": "watched", "messages": [{"role": "user", "content": "HOLD"}]});
                let url = format!("{}/v1/chat/completions", proxy.base);
                tokio::spawn(async move { reqwest::Client::new().post(url).json(&body).send().await.unwrap().status().as_u16() })
            })
            .collect();
        // Each holds 6 MiB for 3 s: together more than the budget.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let refused = post(&proxy, "chat", "hello", false, false).await;
        assert_eq!(refused.status(), 503, "a new call is refused while the budget is held");
        assert_eq!(refused.headers()["retry-after"], "1");
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["code"], "max_held_bytes", "{body}");
        let (_, last) = healthy.await.unwrap();
        assert_eq!(last, "data: [DONE]", "the healthy stream in flight went on to its end");
        for call in hostile {
            assert_eq!(call.await.unwrap(), 502, "each hostile call ends at max_response_bytes");
        }
        let (_, peak) = proxy.memory();
        eprintln!("eight at once: idle RSS {idle} KiB, peak {peak} KiB (+{})", peak - idle);
        assert!(peak - idle <= 8 * 8 * 1024 + MAX_GROWTH_KIB, "the peak RSS grew by {} KiB", peak - idle);
        serves(&mut proxy).await;
    })
    .await
    .expect("within the time cap");
}
