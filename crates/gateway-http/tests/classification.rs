//! Every row of the classification table (`classify.rs`), one test each, against a mock
//! provider on 127.0.0.1; plus streaming, the watchdog, limits, structured output, embeddings,
//! the request the provider receives, and key redaction.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// Real loopback I/O: the timeout and watchdog bounds are checked against the wall clock.
#![allow(clippy::disallowed_methods)]

use gateway_core::outcome::OutcomeClass::{self, *};
use gateway_core::policy::{ScopeConfig, ScopePolicy};
use gateway_core::ports::Streamed;
use gateway_core::ports::Upstream;
use gateway_core::request::{Attempt, Message, Outcome, Request, Structured};
use gateway_core::stream::Chunk;
use gateway_core::time::WallClock;
use gateway_http::{HttpLimits, HttpUpstream};
use gateway_mock::openai::{chunk, completion};
use gateway_mock::{Answer, Blackhole, Frame, MockServer};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A scope `chat` with one source `s1` at `url`, plus `extra` source keys.
fn scope(url: &str, extra: serde_json::Value) -> ScopePolicy {
    let mut source = json!({"base_url": url, "api_key": "sk-test-secret", "model": "m1", "timeout_s": 5});
    if let Some(extra) = extra.as_object() {
        for (k, v) in extra {
            source[k] = v.clone();
        }
    }
    let config: ScopeConfig = serde_json::from_value(json!({
        "breaker": {"fail_threshold": 5, "cooldown_s": 60},
        "sources": {"s1": source}
    }))
    .unwrap();
    config.resolve("chat").unwrap()
}

fn ok_json(body: serde_json::Value) -> Answer {
    Answer::json(200, &body)
}

fn status(status: u16, body: serde_json::Value) -> Answer {
    Answer::json(status, &body)
}

/// A stream of `chunks`, each sent after its delay, with the request id `req-mock`.
fn timed(chunks: Vec<(Duration, String)>) -> Answer {
    let frames: Vec<Frame> = chunks.into_iter().flat_map(|(delay, text)| [Frame::Pause(delay), Frame::Data(text)]).collect();
    Answer::sse(frames).header("x-request-id", "req-mock")
}

/// A stream of `chunks`, then (a pause letting the head and the chunks reach the client) a
/// broken connection.
fn broken(chunks: Vec<String>) -> Answer {
    let frames: Vec<Frame> = chunks.into_iter().map(Frame::Data).chain([Frame::Pause(Duration::from_millis(50)), Frame::Cut]).collect();
    Answer::sse(frames)
}

/// A chat request (`_streamed` says what the test reads it as; a source with a watchdog is
/// streamed upstream either way).
fn chat(_streamed: bool) -> Request {
    Request::chat(vec![Message::user("hi")]).with("max_tokens", 16)
}

/// The attempt read as a stream to its end: every chunk, or how it ended.
async fn through_stream(reply: impl Fn() -> Answer + Send + Sync + 'static, extra: serde_json::Value) -> Result<Vec<Chunk>, Outcome> {
    let mock = MockServer::answering(move |_| reply()).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), extra)]).unwrap();
    let mut chunks = match upstream.stream("s1", &chat(true)).await {
        Streamed::Ended(attempt) => return Err(attempt.into_parts().0),
        Streamed::Chunks(chunks) => chunks,
    };
    let mut all = Vec::new();
    while let Some(chunk) = chunks.next_chunk().await {
        all.push(chunk?);
    }
    Ok(all)
}

async fn answer(reply: impl Fn() -> Answer + Send + Sync + 'static, extra: serde_json::Value, request: Request) -> Attempt {
    let mock = MockServer::answering(move |_| reply()).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), extra)]).unwrap();
    upstream.send("s1", &request).await
}

async fn class_of(reply: impl Fn() -> Answer + Send + Sync + 'static) -> (OutcomeClass, String) {
    let attempt = answer(reply, json!({}), chat(false)).await;
    (attempt.outcome().class, attempt.outcome().detail.clone())
}

fn error_body(code: &str) -> serde_json::Value {
    json!({"error": {"message": "nope", "type": "invalid_request_error", "code": code}})
}

#[tokio::test]
async fn row_2xx_with_content_is_success() {
    let attempt = answer(|| ok_json(completion("hello")), json!({}), chat(false)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (Success, "http_200"));
    let response = attempt.response().unwrap();
    assert_eq!((response.content(), response.usage().unwrap().total()), (Some("hello"), 10));
}

#[tokio::test]
async fn row_2xx_with_empty_content_is_transient_empty() {
    assert_eq!(class_of(|| ok_json(completion("  "))).await, (Transient, "empty".into()));
}

#[tokio::test]
async fn row_2xx_without_choices_is_transient_empty() {
    assert_eq!(class_of(|| ok_json(json!({"choices": []}))).await, (Transient, "empty".into()));
}

#[tokio::test]
async fn row_2xx_with_malformed_json_is_transient() {
    assert_eq!(class_of(|| Answer::json_text(200, "{\"choices\": [")).await, (Transient, "malformed_json".into()));
}

#[tokio::test]
async fn row_2xx_carrying_an_error_is_transient_or_dead_by_its_code() {
    assert_eq!(class_of(|| ok_json(error_body("server_error"))).await, (Transient, "error_in_2xx".into()));
    assert_eq!(class_of(|| ok_json(error_body("insufficient_quota"))).await, (SourceDead, "insufficient_quota".into()));
}

#[tokio::test]
async fn row_429_is_rate_limited_with_retry_after_in_seconds() {
    let attempt = answer(|| Answer::json_text(429, "{}").header("retry-after", "7"), json!({}), chat(false)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().retry_after), (RateLimited, Some(Duration::from_secs(7))));
}

#[tokio::test]
async fn row_429_with_retry_after_ms() {
    let attempt = answer(|| Answer::json_text(429, "{}").header("retry-after-ms", "1500"), json!({}), chat(false)).await;
    assert_eq!(attempt.outcome().retry_after, Some(Duration::from_millis(1500)));
}

/// A wall clock standing at a fixed time.
struct Fixed(Duration);

impl WallClock for Fixed {
    fn unix_now(&self) -> Duration {
        self.0
    }
}

#[tokio::test]
async fn row_429_with_retry_after_as_an_http_date() {
    let mock =
        MockServer::answering(|_| Answer::json_text(429, "{}").header("retry-after", "Wed, 21 Oct 2015 07:28:30 GMT")).await.unwrap();
    // 2015-10-21T07:28:00Z
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))])
        .unwrap()
        .with_wall_clock(Arc::new(Fixed(Duration::from_secs(1_445_412_480))));
    let attempt = upstream.send("s1", &chat(false)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().retry_after), (RateLimited, Some(Duration::from_secs(30))));
}

#[tokio::test]
async fn row_429_with_insufficient_quota_is_source_dead() {
    assert_eq!(class_of(|| status(429, error_body("insufficient_quota"))).await, (SourceDead, "insufficient_quota".into()));
}

#[tokio::test]
async fn row_401_and_403_are_source_dead() {
    assert_eq!(class_of(|| status(401, error_body("invalid_api_key"))).await, (SourceDead, "invalid_api_key".into()));
    assert_eq!(class_of(|| status(403, json!({}))).await, (SourceDead, "http_403".into()));
}

#[tokio::test]
async fn row_404_at_a_source_of_several_kinds_is_the_request_s() {
    // The default scope serves chat and embeddings: a 404 may be the endpoint the request chose.
    assert_eq!(class_of(|| status(404, error_body("model_not_found"))).await, (RequestRejected, "model_not_found".into()));
    assert_eq!(class_of(|| status(404, json!({}))).await, (RequestRejected, "http_404".into()));
    let in_2xx = || ok_json(json!({"error": {"code": "model_not_found"}}));
    assert_eq!(class_of(in_2xx).await, (RequestRejected, "model_not_found".into()));
}

#[tokio::test]
async fn row_404_at_a_source_of_one_kind_is_its_model_gone() {
    let mock = MockServer::answering(|_| status(404, error_body("model_not_found"))).await.unwrap();
    let mut chat_only = scope(&mock.base_url(), json!({}));
    chat_only.kinds = vec![gateway_core::request::Kind::Chat];
    let upstream = HttpUpstream::new(&[chat_only]).unwrap();
    let attempt = upstream.send("s1", &chat(false)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (SourceDead, "model_not_found"));
}

#[tokio::test]
async fn row_context_length_in_a_2xx_or_a_stream_is_the_request_s() {
    let in_2xx = || ok_json(error_body("context_length_exceeded"));
    assert_eq!(class_of(in_2xx).await, (RequestRejected, "context_length_exceeded".into()));
}

#[tokio::test]
async fn row_400_413_422_are_request_rejected() {
    for code in [400, 413, 422] {
        assert_eq!(class_of(move || status(code, json!({}))).await, (RequestRejected, format!("http_{code}")));
    }
}

#[tokio::test]
async fn row_context_length_exceeded_is_request_rejected() {
    assert_eq!(class_of(|| status(400, error_body("context_length_exceeded"))).await, (RequestRejected, "context_length_exceeded".into()));
}

#[tokio::test]
async fn row_408_and_5xx_are_transient() {
    for code in [408, 500, 502, 503, 504] {
        assert_eq!(class_of(move || status(code, json!({}))).await, (Transient, format!("http_{code}")));
    }
}

#[tokio::test]
async fn row_connection_refused_is_transient_connect() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let upstream = HttpUpstream::new(&[scope(&format!("http://127.0.0.1:{port}/v1"), json!({}))]).unwrap();
    let attempt = upstream.send("s1", &chat(false)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (Transient, "connect"));
}

#[tokio::test]
async fn row_a_blackhole_times_out_within_the_timeout() {
    let hole = Blackhole::start().await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&hole.base_url(), json!({"timeout_s": 0.5}))]).unwrap();
    let started = Instant::now();
    let attempt = upstream.send("s1", &chat(false)).await;
    let took = started.elapsed();
    assert_eq!(attempt.outcome().class, Transient);
    assert!(["timeout", "header_timeout"].contains(&attempt.outcome().detail.as_str()), "{attempt:?}");
    assert!(took >= Duration::from_millis(500) && took < Duration::from_millis(900), "{took:?}");
}

#[tokio::test]
async fn row_a_header_timeout_shorter_than_the_total_is_its_own_detail() {
    let hole = Blackhole::start().await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&hole.base_url(), json!({"timeout_s": 5}))])
        .unwrap()
        .with_limits(HttpLimits { header_timeout: Some(Duration::from_millis(200)), ..HttpLimits::default() });
    let attempt = upstream.send("s1", &chat(false)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (Transient, "header_timeout"));
}

#[tokio::test]
async fn row_an_oversized_body_is_transient() {
    let big = completion(&"x".repeat(4096));
    let mock = MockServer::answering(move |_| ok_json(big.clone())).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))])
        .unwrap()
        .with_limits(HttpLimits { max_response_bytes: 1024, ..HttpLimits::default() });
    let attempt = upstream.send("s1", &chat(false)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (Transient, "body_too_large"));
}

#[path = "classification/bodies.rs"]
mod bodies;
#[path = "classification/choices.rs"]
mod choices;
#[path = "classification/headers.rs"]
mod headers;
#[path = "classification/streams.rs"]
mod streams;
