//! What the adapter reads of an answer's head besides its status: the providers' rate-limit
//! headers, whole, refused and streamed, and a source that must not be sent `stream_options`.

use super::*;
use gateway_core::request::{RateReport, RateSignal};

/// One finished chunk, then the end.
fn finished_stream() -> Answer {
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": "stop"}]});
    Answer::sse([Frame::data(format!("data: {chunk}\n\ndata: [DONE]\n\n"))])
}

fn requests(limit: Option<u64>, remaining: u64, reset_ms: u64) -> Option<RateSignal> {
    Some(RateSignal { requests: Some(RateReport { limit, remaining, reset: Duration::from_millis(reset_ms) }), tokens: None })
}

#[tokio::test]
async fn rate_limit_headers_reach_the_outcome_whole_refused_and_streamed() {
    let limited = |answer: Answer| {
        answer
            .header("x-ratelimit-limit-requests", "60")
            .header("x-ratelimit-remaining-requests", "0")
            .header("x-ratelimit-reset-requests", "1.5s")
    };
    let mock = MockServer::answering(move |seen| match seen.body["messages"][0]["content"].as_str() {
        Some("refused") => limited(status(429, json!({"error": {"message": "slow down"}}))),
        _ if seen.wants_stream() => limited(finished_stream()),
        _ => limited(Answer::json(200, &completion("hi"))),
    })
    .await
    .unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))]).unwrap();
    let whole = upstream.send("s1", &chat(false)).await;
    assert_eq!(whole.outcome().rate.as_deref().copied(), requests(Some(60), 0, 1500), "a whole answer's");
    let refused = upstream.send("s1", &Request::chat(vec![Message::user("refused")])).await;
    assert_eq!(refused.outcome().class, RateLimited);
    assert_eq!(refused.outcome().rate.as_deref().copied(), requests(Some(60), 0, 1500), "a 429's");
    let Streamed::Chunks(chunks) = upstream.stream("s1", &chat(true)).await else { panic!("chunks") };
    assert_eq!(chunks.rate(), requests(Some(60), 0, 1500), "a stream's, at its head");
    assert_eq!(upstream.ignored_headers().rate_limit(), 0);
}

#[tokio::test]
async fn an_unbelievable_rate_limit_header_is_ignored_and_counted() {
    let mock =
        MockServer::answering(|_| Answer::json(200, &completion("hi")).header("x-ratelimit-remaining-requests", "-1")).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({}))]).unwrap();
    let attempt = upstream.send("s1", &chat(false)).await;
    assert_eq!((attempt.outcome().class, attempt.outcome().rate.is_none()), (Success, true));
    assert_eq!(upstream.ignored_headers().rate_limit(), 1);
}

#[tokio::test]
async fn a_source_that_refuses_stream_options_gets_none() {
    let mock = MockServer::answering(|_| finished_stream()).await.unwrap();
    let upstream = HttpUpstream::new(&[scope(&mock.base_url(), json!({"stream_options": false}))]).unwrap();
    let request = chat(true).with("stream_options", json!({"include_usage": true}));
    let Streamed::Chunks(mut chunks) = upstream.stream("s1", &request).await else { panic!("chunks") };
    while chunks.next_chunk().await.is_some() {}
    let body = &mock.received()[0].body;
    assert_eq!((body.get("stream_options"), &body["stream"]), (None, &json!(true)), "not the caller's either");
}

#[tokio::test]
async fn a_source_sent_through_reqwest_gets_what_the_pooled_client_sends() {
    // A user and password in its URL send a source's calls through reqwest (`wire.rs`), as
    // the environment's proxy settings would; the rest go on the source's pooled client.
    let mock = MockServer::answering(|_| Answer::json(200, &completion("hi"))).await.unwrap();
    let with_password = mock.base_url().replacen("http://", "http://user:pw@", 1);
    for url in [mock.base_url(), with_password] {
        let upstream = HttpUpstream::new(&[scope(&url, json!({}))]).unwrap();
        assert_eq!(upstream.send("s1", &chat(false)).await.outcome().class, Success, "{url}");
    }
    let received = mock.received();
    let (pooled, reqwest) = (&received[0], &received[1]);
    assert_eq!((&pooled.method, &pooled.path, &pooled.body), (&reqwest.method, &reqwest.path, &reqwest.body));
    for name in ["host", "content-type", "accept", "user-agent", "authorization"] {
        assert!(pooled.headers.get(name).is_some(), "{name}");
        assert_eq!(pooled.headers.get(name), reqwest.headers.get(name), "{name}");
    }
}

#[tokio::test]
async fn a_redirect_is_followed_with_the_same_request() {
    let mock = MockServer::answering(|seen| match seen.path.as_str() {
        "/v1/chat/completions" => Answer::json(307, &json!({})).header("location", "/moved/chat/completions"),
        _ => Answer::json(200, &completion("hi")),
    })
    .await
    .unwrap();
    let upstream = HttpUpstream::new(&[scope(&format!("{}/v1", mock.root()), json!({}))]).unwrap();
    assert_eq!(upstream.send("s1", &chat(false)).await.outcome().class, Success);
    let received = mock.received();
    let paths: Vec<&str> = received.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/v1/chat/completions", "/v1/chat/completions", "/moved/chat/completions"], "reqwest sends it again, then follows");
    assert_eq!(received[0].body, received[2].body);
    assert_eq!(received[2].headers.get("authorization"), received[0].headers.get("authorization"), "the same host keeps the key");
}
