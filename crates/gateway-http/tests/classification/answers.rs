//! The rows of a whole answer: its status, error code and Retry-After, the transport's failures,
//! the timeouts and the body's size.

use super::*;

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
    assert_eq!(
        class_of(|| Reply::Json { status: 200, headers: vec![], body: "{\"choices\": [".into() }).await,
        (Transient, "malformed_json".into())
    );
}

#[tokio::test]
async fn row_2xx_carrying_an_error_is_transient_or_dead_by_its_code() {
    assert_eq!(class_of(|| ok_json(error_body("server_error"))).await, (Transient, "error_in_2xx".into()));
    assert_eq!(class_of(|| ok_json(error_body("insufficient_quota"))).await, (SourceDead, "insufficient_quota".into()));
}

#[tokio::test]
async fn row_429_is_rate_limited_with_retry_after_in_seconds() {
    let attempt =
        answer(|| Reply::Json { status: 429, headers: vec![("retry-after", "7".into())], body: "{}".into() }, json!({}), chat(false)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().retry_after), (RateLimited, Some(Duration::from_secs(7))));
}

#[tokio::test]
async fn row_429_with_retry_after_ms() {
    let attempt =
        answer(|| Reply::Json { status: 429, headers: vec![("retry-after-ms", "1500".into())], body: "{}".into() }, json!({}), chat(false))
            .await;
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
    let mock = Mock::start(|_| Reply::Json {
        status: 429,
        headers: vec![("retry-after", "Wed, 21 Oct 2015 07:28:30 GMT".into())],
        body: "{}".into(),
    })
    .await;
    // 2015-10-21T07:28:00Z
    let upstream =
        HttpUpstream::new(&[scope(&mock.url, json!({}))]).unwrap().with_wall_clock(Arc::new(Fixed(Duration::from_secs(1_445_412_480))));
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
    let mock = Mock::start(|_| status(404, error_body("model_not_found"))).await;
    let mut chat_only = scope(&mock.url, json!({}));
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
    let upstream = HttpUpstream::new(&[scope(&blackhole().await, json!({"timeout_s": 0.5}))]).unwrap();
    let started = Instant::now();
    let attempt = upstream.send("s1", &chat(false)).await;
    let took = started.elapsed();
    assert_eq!(attempt.outcome().class, Transient);
    assert!(["timeout", "header_timeout"].contains(&attempt.outcome().detail.as_str()), "{attempt:?}");
    assert!(took >= Duration::from_millis(500) && took < Duration::from_millis(900), "{took:?}");
}

#[tokio::test]
async fn row_a_header_timeout_shorter_than_the_total_is_its_own_detail() {
    let upstream = HttpUpstream::new(&[scope(&blackhole().await, json!({"timeout_s": 5}))])
        .unwrap()
        .with_limits(HttpLimits { header_timeout: Some(Duration::from_millis(200)), ..HttpLimits::default() });
    let attempt = upstream.send("s1", &chat(false)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (Transient, "header_timeout"));
}

#[tokio::test]
async fn row_an_oversized_body_is_transient() {
    let big = completion(&"x".repeat(4096));
    let mock = Mock::start(move |_| ok_json(big.clone())).await;
    let upstream = HttpUpstream::new(&[scope(&mock.url, json!({}))])
        .unwrap()
        .with_limits(HttpLimits { max_response_bytes: 1024, ..HttpLimits::default() });
    let attempt = upstream.send("s1", &chat(false)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (Transient, "body_too_large"));
}
