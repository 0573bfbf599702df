//! Streams through the proxy, with no timing in them: a held chunk proves each chunk is relayed
//! as it arrives, with keep-alive comments while the provider pauses; a source that fails before its first token gives way to another in one clean
//! stream; a cut after the commit point ends the stream with an `error` event (no `[DONE]`) and
//! is recorded on the gate; a client gone mid-stream leaves nothing held; and a source with a
//! watchdog gets every call as a stream, its slow first token cut, the caller answered whole.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// Real loopback I/O: waits are bounded by the wall clock (as failures, never as measurements).
#![allow(clippy::disallowed_methods)]

mod support;

use gateway_core::ports::SourceKey;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::KEY;

fn streamed(scope: &str, text: &str) -> Value {
    json!({"model": scope, "stream": true, "messages": [{"role": "user", "content": text}]})
}

async fn open(url: &str, body: &Value) -> reqwest::Response {
    let response = reqwest::Client::new().post(format!("{url}/v1/chat/completions")).bearer_auth(KEY).json(body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    response
}

/// Reads SSE lines until `until` says stop (or the stream ends); what was read.
async fn read_until(response: &mut reqwest::Response, seen: &mut String, until: impl Fn(&str) -> bool) {
    while !until(seen) {
        match tokio::time::timeout(Duration::from_secs(10), response.chunk()).await.expect("the next chunk within 10 s") {
            Ok(Some(bytes)) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            _ => return,
        }
    }
}

fn contents(sse: &str) -> String {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_chunk_is_relayed_as_it_arrives() {
    let r = support::start().await;
    let mut response = open(&r.url, &streamed("chat", "GATED")).await;
    let served: Vec<_> =
        ["x-gateway-source", "x-gateway-attempts"].iter().map(|h| response.headers()[*h].to_str().unwrap().to_owned()).collect();
    assert_eq!(served, ["mock", "1"], "a stream that committed at once says who serves it");
    assert!(response.headers()["x-request-id"].to_str().unwrap().starts_with("req-mock-"), "the provider's request id");
    let mut seen = String::new();
    // The provider holds its second chunk until the test has seen the first at the client.
    read_until(&mut response, &mut seen, |s| contents(s).contains("echo: ")).await;
    assert_eq!(contents(&seen), "echo: ", "the first chunk came alone: {seen}");
    // Held for many keep-alive periods (keepalive_s = 0.05): the idle connection gets keep-alive
    // comments after the commit point too, between the chunks, which they leave as they are.
    read_until(&mut response, &mut seen, |s| s.matches(": keep-alive").count() >= 2).await;
    r.gate.release_one();
    read_until(&mut response, &mut seen, |s| s.contains("[DONE]")).await;
    assert_eq!(contents(&seen), "echo: GATED");
    let first_chunk = seen.find("data: ").unwrap();
    assert!(seen[first_chunk..].matches(": keep-alive").count() >= 2, "keep-alives after the commit point: {seen}");
    let chunks: Vec<Value> = seen.lines().filter_map(|l| l.strip_prefix("data: ")).filter_map(|d| serde_json::from_str(d).ok()).collect();
    assert!(chunks.iter().all(|c| c["choices"].as_array().is_some_and(|a| !a.is_empty())), "no usage chunk unless asked: {seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_cannot_start_is_answered_with_its_status_as_openai_does() {
    let r = support::start().await;
    let post = |body: Value| reqwest::Client::new().post(format!("{}/v1/chat/completions", r.url)).bearer_auth(KEY).json(&body).send();
    // The provider refuses the request: its own status and error, not a 200 and an event.
    let refused = post(streamed("chat", "POISON")).await.unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
    // The provider asks for longer than a call may wait: 429 with its Retry-After.
    let pushed = post(streamed("chat", "PUSHBACK")).await.unwrap();
    assert_eq!(pushed.status(), 429);
    assert!(pushed.headers().get("retry-after").is_some(), "{:?}", pushed.headers());
    // The only source's key is dead: an error status, never text/event-stream.
    let dead = post(streamed("dead", "hi")).await.unwrap();
    assert!(dead.status().is_server_error() || dead.status().is_client_error(), "{}", dead.status());
    assert_eq!(dead.headers()["content-type"], "application/json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_before_the_first_token_gives_one_clean_stream_from_another_source() {
    let scopes = r#"
[pair]
selector = "round_robin"
[pair.breaker]
fail_threshold = 100
cooldown_s = 60
[pair.sources.early]
base_url = "{root}/prefail/v1"
model = "m"
timeout_s = 30
[pair.sources.fine]
base_url = "{root}/mock/v1"
model = "m"
timeout_s = 30
"#;
    let (r, _) = support::start_custom("", scopes, std::future::pending()).await;
    for i in 0..4 {
        let mut response = open(&r.url, &streamed("pair", &format!("call {i}"))).await;
        let mut seen = String::new();
        read_until(&mut response, &mut seen, |s| s.contains("[DONE]")).await;
        assert_eq!(contents(&seen), format!("echo: call {i}"), "one clean stream: {seen}");
        assert!(!seen.contains("event: error"), "{seen}");
    }
    assert!(r.provider.received().iter().any(|s| s.path.starts_with("/prefail/")), "the failing source was tried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_after_the_commit_point_is_an_error_event_without_done_and_counts_on_the_gate() {
    let r = support::start().await;
    let mut response = open(&r.url, &streamed("chat", "CUT")).await;
    let mut seen = String::new();
    read_until(&mut response, &mut seen, |_| false).await;
    assert_eq!(contents(&seen), "echo: CUT", "what came before the cut was relayed: {seen}");
    assert!(seen.contains("event: error\ndata: {\"error\""), "{seen}");
    assert!(seen.contains("stream_broken") && !seen.contains("[DONE]"), "{seen}");
    let gate = r.gates.snapshot(&SourceKey::new("chat", "mock")).unwrap();
    assert_eq!((gate.failures, gate.f0 + gate.f1), (1, 1), "recorded like any transient failure: {gate:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_stream_leaves_no_permit_lease_or_in_flight_count() {
    let r = support::start().await;
    let mut response = open(&r.url, &streamed("chat", "GATED")).await;
    let mut seen = String::new();
    read_until(&mut response, &mut seen, |s| contents(s).contains("echo: ")).await;
    let key = SourceKey::new("chat", "mock");
    assert_eq!((r.quota.in_flight(&key), r.state.client.inflight("chat")), (1, 1), "the stream holds its slot");
    drop(response);
    let began = Instant::now();
    while (r.quota.in_flight(&key) > 0 || r.state.client.inflight("chat") > 0) && began.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!((r.quota.in_flight(&key), r.state.client.inflight("chat")), (0, 0), "released when the client left");
    assert!(r.gates.snapshot(&key).unwrap_or_default().probe_until.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_with_a_watchdog_streams_every_call_and_the_caller_gets_a_whole_completion() {
    let scopes = r#"
[guarded]
[guarded.breaker]
fail_threshold = 100
cooldown_s = 60
[guarded.sources.wd]
base_url = "{root}/mock/v1"
model = "m"
timeout_s = 30
watchdog_s = 0.5
"#;
    let (r, _) = support::start_custom("", scopes, std::future::pending()).await;
    let body = json!({"model": "guarded", "messages": [{"role": "user", "content": "SLOWONCE"}]});
    let answer = reqwest::Client::new().post(format!("{}/v1/chat/completions", r.url)).bearer_auth(KEY).json(&body).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-gateway-attempts"], "2", "the slow first token was cut, the second attempt served");
    let completion: Value = answer.json().await.unwrap();
    assert_eq!(completion["object"], "chat.completion");
    assert_eq!(completion["choices"][0]["message"]["content"], "echo: SLOWONCE");
    assert_eq!(completion["choices"][0]["finish_reason"], "stop");
    assert_eq!(completion["usage"]["total_tokens"], 7);
    let upstream = r.provider.saying("SLOWONCE");
    assert!(upstream.len() == 2 && upstream.iter().all(|s| s.body["stream"] == true), "asked as a stream both times");
    let gate = r.gates.snapshot(&SourceKey::new("guarded", "wd")).unwrap();
    assert_eq!(gate.f0 + gate.f1, 1, "the watchdog's cut counted on the gate: {gate:?}");
}

fn json_stream() -> Value {
    json!({"model": "chat", "stream": true, "response_format": {"type": "json_object"}, "messages": [{"role": "user", "content": "TRUNCATEONCE"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_stream_cut_short_is_reasked_unseen_and_goes_out_once_it_passed_the_check() {
    let r = support::start().await;
    let mut response = open(&r.url, &json_stream()).await;
    assert_eq!(response.headers()["x-gateway-attempts"], "2", "the truncated answer was re-asked");
    let mut seen = String::new();
    read_until(&mut response, &mut seen, |s| s.contains("[DONE]")).await;
    assert_eq!(contents(&seen), "{\"answer\": \"echo\"}", "only the answer that passed: {seen}");
    assert!(!seen.contains("event: error"), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_token_by_header_commits_at_once_and_a_truncated_answer_breaks_the_stream() {
    let r = support::start().await;
    let client = reqwest::Client::new();
    let post = |value: &'static str| {
        client
            .post(format!("{}/v1/chat/completions", r.url))
            .bearer_auth(KEY)
            .header("x-gateway-structured-stream", value)
            .json(&json_stream())
            .send()
    };
    let mut response = post("first_token").await.unwrap();
    assert_eq!(response.status(), 200);
    let mut seen = String::new();
    read_until(&mut response, &mut seen, |_| false).await;
    assert_eq!(contents(&seen), "{\"answer\": \"ec", "relayed as it came: {seen}");
    assert!(seen.contains("event: error") && !seen.contains("[DONE]"), "{seen}");
    let refused = post("sometimes").await.unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["param"], "x-gateway-structured-stream", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("\"sometimes\""), "{body}");
}
