//! The rows of streamed answers, structured output and requests: how each is classified.

use super::*;

#[tokio::test]
async fn row_a_stream_concatenates_its_deltas_until_done() {
    let reply = || {
        timed(vec![
            (Duration::ZERO, chunk("hel")),
            (Duration::from_millis(10), chunk("lo")),
            (Duration::ZERO, "data: {\"choices\": [], \"usage\": {\"prompt_tokens\": 4, \"completion_tokens\": 2}}\n\n".into()),
            (Duration::ZERO, "data: [DONE]\n\n".into()),
        ])
    };
    // A source with a watchdog is streamed upstream and the answer assembled.
    let attempt = answer(reply, json!({"watchdog_s": 1}), chat(false)).await;
    let response = attempt.response().unwrap_or_else(|| panic!("{attempt:?}"));
    assert_eq!((response.content(), response.usage().unwrap().total()), (Some("hello"), 6));
}

#[tokio::test]
async fn row_a_slow_first_token_trips_the_watchdog() {
    let reply = || timed(vec![(Duration::from_millis(600), chunk("late")), (Duration::ZERO, "data: [DONE]\n\n".into())]);
    let started = Instant::now();
    let attempt = answer(reply, json!({"watchdog_s": 0.2}), chat(true)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (Transient, "watchdog"));
    assert!(started.elapsed() < Duration::from_millis(550));
}

#[tokio::test]
async fn row_a_slow_drip_stream_trips_the_watchdog_between_chunks() {
    let reply =
        || timed(vec![(Duration::ZERO, chunk("a")), (Duration::from_millis(50), chunk("b")), (Duration::from_millis(600), chunk("c"))]);
    let attempt = answer(reply, json!({"watchdog_s": 0.2}), chat(true)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (Transient, "watchdog"));
}

#[tokio::test]
async fn row_a_stream_closed_mid_way_is_truncated() {
    let outcome = through_stream(|| broken(vec![chunk("half")]), json!({})).await.unwrap_err();
    assert_eq!((outcome.class, outcome.detail.as_str()), (Transient, "truncated_stream"));
}

#[tokio::test]
async fn row_a_stream_ending_without_done_is_truncated() {
    let outcome = through_stream(|| timed(vec![(Duration::ZERO, chunk("no end"))]), json!({})).await.unwrap_err();
    assert_eq!((outcome.class, outcome.detail.as_str()), (Transient, "truncated_stream"));
}

#[tokio::test]
async fn row_malformed_sse_is_transient() {
    let outcome = through_stream(|| timed(vec![(Duration::ZERO, "data: {not json\n\n".into())]), json!({})).await.unwrap_err();
    assert_eq!((outcome.class, outcome.detail.as_str()), (Transient, "malformed_sse"));
}

#[tokio::test]
async fn row_structured_output_that_fails_its_schema_is_result_invalid() {
    let mut request = chat(false);
    request.structured = Some(Structured::JsonSchema(json!({"type": "object", "required": ["answer"]})));
    let attempt = answer(|| ok_json(completion("{\"other\": 1}")), json!({}), request.clone()).await;
    assert_eq!(attempt.outcome().class, ResultInvalid);
    assert!(attempt.outcome().detail.starts_with("schema:"), "{attempt:?}");
    let attempt = answer(|| ok_json(completion("```json\n{\"answer\": 42}\n```")), json!({}), request).await;
    assert_eq!(attempt.outcome().class, Success);
    let mut parsed = chat(false);
    parsed.structured = Some(Structured::Parse(Arc::new(|c: &str| c.parse::<i64>().map(drop).map_err(|e| e.to_string()))));
    assert_eq!(answer(|| ok_json(completion("forty-two")), json!({}), parsed).await.outcome().class, ResultInvalid);
}

#[tokio::test]
async fn embeddings_return_one_vector_per_input_and_empty_data_is_transient() {
    let request = Request::embeddings(vec!["a".into(), "b".into()]);
    let body = json!({"data": [{"embedding": [0.1, 0.2]}, {"embedding": [0.3, 0.4]}], "usage": {"prompt_tokens": 2}});
    let attempt = answer(move || ok_json(body.clone()), json!({}), request.clone()).await;
    let response = attempt.response().unwrap_or_else(|| panic!("{attempt:?}"));
    assert_eq!((response.embeddings().len(), response.vector(1)), (2, Some(vec![0.3, 0.4])));
    let attempt = answer(|| ok_json(json!({"data": []})), json!({}), request).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (Transient, "empty"));
}

#[tokio::test]
async fn the_provider_gets_the_model_the_key_and_the_extra_headers() {
    let mock = MockServer::answering(|_| ok_json(completion("ok"))).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({"headers": {"x-tenant": "t1"}}))]).unwrap();
    upstream.send("s1", &chat(false)).await;
    let seen = &mock.received()[0];
    assert_eq!(seen.path, "/v1/chat/completions");
    assert_eq!(seen.headers["authorization"], "Bearer sk-test-secret");
    assert_eq!(seen.headers["x-tenant"], "t1");
    assert_eq!((seen.body["model"].as_str(), seen.body["max_tokens"].as_u64()), (Some("m1"), Some(16)));
    assert_eq!(seen.body["messages"][0]["role"], "user");
}

#[tokio::test]
async fn the_api_key_never_reaches_debug_or_telemetry_details() {
    let mock = MockServer::answering(|_| status(401, error_body("invalid_api_key"))).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))]).unwrap();
    let shown = format!("{upstream:?}");
    assert!(!shown.contains("sk-test-secret") && shown.contains("\"authorization\": Sensitive"), "{shown}");
    let attempt = upstream.send("s1", &chat(false)).await;
    assert!(!format!("{attempt:?}").contains("sk-test-secret"));
}

#[tokio::test]
async fn an_unknown_source_is_dead() {
    let upstream = HttpUpstream::new(&[scope("http://127.0.0.1:9/v1", json!({}))]).unwrap();
    assert_eq!(upstream.send("nope", &chat(false)).await.outcome().class, SourceDead);
}

#[test]
fn sources_the_adapter_cannot_use_are_named() {
    let mut no_url = scope("http://x/v1", json!({}));
    no_url.sources[0].base_url = None;
    assert_eq!(HttpUpstream::new(&[no_url]).unwrap_err().to_string(), "chat.sources.s1.base_url: required key is missing");
    let bad = scope("ftp://x/v1", json!({}));
    assert!(HttpUpstream::new(&[bad]).unwrap_err().to_string().starts_with("chat.sources.s1.base_url: value \"ftp://x/v1\""));
    let mut no_model = scope("http://x/v1", json!({}));
    no_model.sources[0].model = None;
    assert_eq!(HttpUpstream::new(&[no_model]).unwrap_err().key, "chat.sources.s1.model");
    let bad_header = scope("http://x/v1", json!({"headers": {"bad header": "v"}}));
    assert_eq!(HttpUpstream::new(&[bad_header]).unwrap_err().to_string(), "chat.sources.s1.headers.bad header: not a valid header name");
    // The policy refuses it from a file; a policy built in code meets the adapter's check.
    let mut bad_version = scope("http://x/v1", json!({"protocol": "anthropic"}));
    bad_version.sources[0].anthropic_version = "2023\n06".into();
    assert_eq!(
        HttpUpstream::new(&[bad_version]).unwrap_err().to_string(),
        "chat.sources.s1.anthropic_version: value \"2023\\n06\" is not a valid header value"
    );
    // A key that cannot be a header value is named, never shown.
    for protocol in ["openai", "anthropic"] {
        let bad_key = scope("http://x/v1", json!({"api_key": "sk-line\nbreak", "protocol": protocol}));
        let error = HttpUpstream::new(&[bad_key]).unwrap_err().to_string();
        assert_eq!(error, "chat.sources.s1.api_key: not a valid header value (the key is not shown)", "{protocol}");
    }
    let mut other = scope("http://y/v1", json!({}));
    other.name = "embedding".into();
    assert!(HttpUpstream::new(&[scope("http://x/v1", json!({})), other]).unwrap_err().problem.contains("configured differently"));
}

fn sse<S: AsRef<str>>(events: &[(u64, S)]) -> Answer {
    timed(events.iter().map(|(ms, text)| (Duration::from_millis(*ms), text.as_ref().to_owned())).collect())
}

const ROLE_ONLY: &str = "data: {\"choices\": [{\"index\": 0, \"delta\": {\"role\": \"assistant\", \"content\": \"\"}}]}\n\n";
const FINISHED: &str = "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"done\"}, \"finish_reason\": \"stop\"}]}\n\n";

#[tokio::test]
async fn before_the_commit_point_comments_and_empty_chunks_do_not_feed_the_watchdog() {
    // Keep-alive comments and a role-only chunk every 120 ms, content only at 600 ms: the
    // watchdog (0.3 s from the attempt's start) cuts it, the trickle notwithstanding.
    let trickle = [(0, ": keep-alive\n\n"), (120, ROLE_ONLY), (120, ": keep-alive\n\n"), (120, ": keep-alive\n\n"), (240, FINISHED)];
    let started = Instant::now();
    let outcome = through_stream(move || sse(&trickle), json!({"watchdog_s": 0.3})).await.unwrap_err();
    assert_eq!((outcome.class, outcome.detail.as_str()), (Transient, "watchdog"));
    assert!(started.elapsed() < Duration::from_millis(550), "{:?}", started.elapsed());
    // After the commit point a comment is no chunk either: the gap is still a gap.
    let unfinished = FINISHED.replace("\"stop\"", "null");
    let after = [(0, unfinished), (100, ": keep-alive\n\n".into()), (100, ": keep-alive\n\n".into()), (200, FINISHED.into())];
    let outcome = through_stream(move || sse(&after), json!({"watchdog_s": 0.3})).await.unwrap_err();
    assert_eq!((outcome.class, outcome.detail.as_str()), (Transient, "watchdog"));
}

#[tokio::test]
async fn a_streamed_attempt_waits_for_headers_no_longer_than_the_watchdog() {
    let hole = Blackhole::start().await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&hole.base_url(), json!({"timeout_s": 5, "watchdog_s": 0.2}))]).unwrap();
    let started = Instant::now();
    let Streamed::Ended(attempt) = upstream.stream("s1", &chat(true)).await else { panic!("a blackhole sends no headers") };
    assert_eq!((attempt.outcome().class, attempt.outcome().detail.as_str()), (Transient, "watchdog"));
    assert!(started.elapsed() < Duration::from_millis(600), "{:?}", started.elapsed());
    // A whole answer from the same source is streamed upstream: the same bound.
    let attempt = upstream.send("s1", &chat(false)).await;
    assert_eq!(attempt.outcome().detail, "watchdog");
}

#[tokio::test]
async fn a_stream_that_closes_whole_ends_cleanly_without_done_or_a_last_line_end() {
    let chunks = through_stream(|| sse(&[(0, FINISHED), (0, "data: [DONE]")]), json!({})).await.unwrap();
    assert_eq!(chunks.len(), 1, "[DONE] without its line end");
    let chunks = through_stream(|| sse(&[(0, FINISHED)]), json!({})).await.unwrap();
    assert_eq!(chunks.len(), 1, "every choice finished, then the connection closed");
    let chunks = through_stream(|| sse(&[(0, FINISHED.trim_end())]), json!({})).await.unwrap();
    assert_eq!(chunks.len(), 1, "the last event without its line end");
}

#[tokio::test]
async fn an_error_event_in_a_stream_keeps_the_provider_s_error() {
    let event = "data: {\"error\": {\"message\": \"too long\", \"type\": \"invalid_request_error\", \"param\": \"messages\", \"code\": \"context_length_exceeded\"}}\n\n";
    let outcome = through_stream(move || sse(&[(0, ROLE_ONLY), (0, event)]), json!({})).await.unwrap_err();
    assert_eq!((outcome.class, outcome.detail.as_str()), (RequestRejected, "context_length_exceeded"));
    let provider = outcome.provider_error.expect("the provider's error is passed on");
    assert_eq!(
        (provider.body["error"]["param"].as_str(), provider.body["error"]["message"].as_str()),
        (Some("messages"), Some("too long"))
    );
}

#[tokio::test]
async fn the_caller_s_stream_options_reach_the_provider_with_the_usage_asked_for() {
    let mock = MockServer::answering(|_| sse(&[(0, FINISHED), (0, "data: [DONE]\n\n")])).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))]).unwrap();
    let request = chat(true).with("stream_options", json!({"include_obfuscation": false, "include_usage": false}));
    let Streamed::Chunks(mut chunks) = upstream.stream("s1", &request).await else { panic!("chunks") };
    while chunks.next_chunk().await.is_some() {}
    assert_eq!(mock.received()[0].body["stream_options"], json!({"include_obfuscation": false, "include_usage": true}));
}

#[tokio::test]
async fn a_streamed_answer_is_checked_against_its_structure_when_it_ends() {
    let mock = MockServer::answering(|seen| {
        let answer = if seen.body["messages"][0]["content"] == "good" { "{\"answer\": 1}" } else { "{\"other\": 1}" };
        let event = format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {"content": answer}, "finish_reason": "stop"}]}));
        timed(vec![(Duration::ZERO, event), (Duration::ZERO, "data: [DONE]\n\n".into())])
    })
    .await
    .unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))]).unwrap();
    for (prompt, ends) in [("good", None), ("bad", Some(ResultInvalid))] {
        let mut request = Request::chat(vec![Message::user(prompt)]);
        request.structured = Some(Structured::JsonSchema(json!({"type": "object", "required": ["answer"]})));
        let Streamed::Chunks(mut chunks) = upstream.stream("s1", &request).await else { panic!("chunks") };
        assert!(matches!(chunks.next_chunk().await, Some(Ok(_))), "the content streams before the check");
        assert_eq!(chunks.next_chunk().await.map(|end| end.unwrap_err().class), ends, "{prompt}");
    }
}

#[tokio::test]
async fn a_streamed_answer_that_must_be_json_and_opens_with_prose_is_passed_on_and_a_whole_one_fails_not_json() {
    // At a stream's commit point the call loop judges the opening, whatever the transport: the
    // adapter passes the chunks on. A whole answer it judges itself, with the same rule first.
    let mock = MockServer::answering(|seen| {
        let prose = seen.body["messages"][0]["content"] == "prose";
        if seen.body["stream"] == true {
            let pieces: &[&str] = if prose { &["  ", "Sure! Here is the JSON: {"] } else { &["  ", "{\"answer\": 1}"] };
            let mut chunks: Vec<(Duration, String)> = pieces
                .iter()
                .map(|p| (Duration::ZERO, format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {"content": p}}]}))))
                .collect();
            chunks.push((Duration::ZERO, "data: [DONE]\n\n".into()));
            timed(chunks)
        } else {
            let content = if prose { "Sure! Here is the JSON: {" } else { "{\"answer\": 1}" };
            ok_json(json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}))
        }
    })
    .await
    .unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))]).unwrap();
    for prompt in ["prose", "json"] {
        let mut request = Request::chat(vec![Message::user(prompt)]);
        request.structured = Some(Structured::JsonSchema(json!({"type": "object"})));
        let Streamed::Chunks(mut chunks) = upstream.stream("s1", &request).await else { panic!("chunks") };
        assert!(matches!(chunks.next_chunk().await, Some(Ok(_))), "whitespace");
        assert!(matches!(chunks.next_chunk().await, Some(Ok(_))), "{prompt}: the opening is passed on");
        let outcome = upstream.send("s1", &request).await.outcome().clone();
        let expected = if prompt == "prose" { (ResultInvalid, "not_json") } else { (Success, "http_200") };
        assert_eq!((outcome.class, outcome.detail.as_str()), expected, "{prompt}, whole");
    }
}

#[tokio::test]
async fn one_event_over_the_cap_breaks_the_stream_but_a_long_stream_does_not() {
    let limits = HttpLimits { max_event_bytes: 1024, ..HttpLimits::default() };
    let big = chunk(&"x".repeat(2048));
    let mock = MockServer::answering(move |_| sse(&[(0, big.as_str()), (0, "data: [DONE]\n\n")])).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))]).unwrap().with_limits(limits);
    let Streamed::Chunks(mut chunks) = upstream.stream("s1", &chat(true)).await else { panic!("chunks") };
    assert_eq!(chunks.next_chunk().await.unwrap().unwrap_err().detail, "event_too_large");

    let many: Vec<(Duration, String)> =
        (0..100).map(|_| (Duration::ZERO, chunk(&"y".repeat(100)))).chain([(Duration::ZERO, FINISHED.to_owned())]).collect();
    let mock = MockServer::answering(move |_| timed(many.clone())).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))]).unwrap().with_limits(limits);
    let Streamed::Chunks(mut chunks) = upstream.stream("s1", &chat(true)).await else { panic!("chunks") };
    let mut count = 0;
    while let Some(chunk) = chunks.next_chunk().await {
        chunk.unwrap();
        count += 1;
    }
    assert_eq!(count, 101, "10 KB of events under a 1 KB cap per event");
}

#[tokio::test]
async fn the_provider_s_request_id_comes_with_streams_and_assembled_answers() {
    let mock = MockServer::answering(|_| sse(&[(0, FINISHED), (0, "data: [DONE]\n\n")])).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({"watchdog_s": 1}))]).unwrap();
    let Streamed::Chunks(chunks) = upstream.stream("s1", &chat(true)).await else { panic!("chunks") };
    assert_eq!(chunks.request_id(), Some("req-mock"));
    let attempt = upstream.send("s1", &chat(false)).await;
    assert_eq!(attempt.response().and_then(|r| r.request_id()), Some("req-mock"), "{attempt:?}");
}

#[tokio::test]
async fn a_stream_past_its_source_s_max_stream_bytes_ends_with_the_source_spent() {
    // 50 events of ~1 KiB against the source's own cap of 16 KiB.
    let many: Vec<(Duration, String)> = (0..50).map(|_| (Duration::ZERO, chunk(&"z".repeat(1000)))).collect();
    let mock = MockServer::answering(move |_| timed(many.clone())).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({"max_stream_bytes": 16384}))]).unwrap();
    let Streamed::Chunks(mut chunks) = upstream.stream("s1", &chat(true)).await else { panic!("chunks") };
    let mut relayed = 0;
    let outcome = loop {
        match chunks.next_chunk().await.expect("the stream ends with an error, not quietly") {
            Ok(_) => relayed += 1,
            Err(outcome) => break outcome,
        }
    };
    assert_eq!((outcome.class, outcome.detail.as_str(), outcome.source_spent), (Transient, "stream_too_large", true));
    assert!((10..17).contains(&relayed), "cut at 16 KiB: {relayed} events relayed");
    assert_eq!(upstream.budget_passed("s1", "stream_too_large"), Some(("max_stream_bytes", 16384)), "the source's own cap is named");
    assert_eq!(upstream.budget_passed("s1", "event_too_large"), Some(("max_event_bytes", 1 << 20)));
    assert_eq!(upstream.budget_passed("s1", "body_too_large"), Some(("max_response_bytes", 8 << 20)));
    assert_eq!(upstream.budget_passed("s1", "truncated_stream"), None);
    assert_eq!(upstream.budget_passed("nobody", "body_too_large"), None);
    drop(chunks);
    assert_eq!(upstream.held_bytes().get(), 0, "nothing is held once the stream is dropped");
}

#[tokio::test]
async fn an_assembled_stream_past_max_response_bytes_is_too_large_and_holds_nothing_after() {
    let many: Vec<(Duration, String)> = (0..50).map(|_| (Duration::ZERO, chunk(&"z".repeat(1000)))).collect();
    let mock = MockServer::answering(move |_| timed(many.clone())).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({"watchdog_s": 1}))])
        .unwrap()
        .with_limits(HttpLimits { max_response_bytes: 8192, ..HttpLimits::default() });
    let attempt = upstream.send("s1", &chat(false)).await;
    let outcome = attempt.outcome();
    assert_eq!((outcome.class, outcome.detail.as_str(), outcome.source_spent), (Transient, "body_too_large", true));
    assert_eq!(upstream.held_bytes().get(), 0, "released at once");
}

#[tokio::test]
async fn an_unreadable_retry_after_is_absent_and_counted() {
    for value in ["garbage", "1e300", "86401"] {
        let mock = MockServer::answering(move |_| status(429, json!({"error": {"message": "slow down"}})).header("retry-after", value))
            .await
            .unwrap();
        let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))]).unwrap();
        let attempt = upstream.send("s1", &chat(false)).await;
        assert_eq!((attempt.outcome().class, attempt.outcome().retry_after), (RateLimited, None), "{value}");
        assert_eq!(upstream.ignored_headers().retry_after(), 1, "{value} is counted");
    }
}
