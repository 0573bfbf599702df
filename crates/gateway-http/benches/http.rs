//! One non-streaming chat call over loopback through `HttpUpstream` against a local mock
//! provider, beside the same request made with a bare `reqwest::Client`: the difference is the
//! adapter's own cost (body building, classification, parsing).

#![allow(missing_docs, clippy::unwrap_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use gateway_core::policy::ScopeConfig;
use gateway_core::ports::Upstream;
use gateway_core::request::{Message, Request};
use gateway_http::HttpUpstream;
use gateway_mock::{Answer, MockServer};
use std::hint::black_box;

const ANSWER: &str = r#"{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":3}}"#;

fn http(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // Unrecorded: both calls pay for no record.
    let mock = rt.block_on(MockServer::builder().unrecorded().answering(|_| Answer::json_text(200, ANSWER))).unwrap();
    let url = mock.base_url();
    let scope: ScopeConfig = serde_json::from_value(serde_json::json!({
        "breaker": {"fail_threshold": 5, "cooldown_s": 60},
        "sources": {"s1": {"base_url": url, "api_key": "sk-bench", "model": "m1", "timeout_s": 10}}
    }))
    .unwrap();
    let upstream = HttpUpstream::new(&[scope.resolve("chat").unwrap()]).unwrap();
    let request = Request::chat(vec![Message::user("hi")]);
    let bare = reqwest::Client::new();
    let body = serde_json::json!({"model": "m1", "messages": [{"role": "user", "content": "hi"}], "stream": false});
    let endpoint = format!("{url}/chat/completions");
    let mut group = c.benchmark_group("http");
    group.bench_function("bare_reqwest_call", |b| {
        b.iter(|| {
            rt.block_on(async {
                let response = bare.post(&endpoint).bearer_auth("sk-bench").json(&body).send().await.unwrap();
                black_box(response.bytes().await.unwrap())
            })
        })
    });
    group.bench_function("http_upstream_send", |b| b.iter(|| rt.block_on(async { black_box(upstream.send("s1", &request).await) })));
    group.finish();
}

criterion_group!(benches, http);
criterion_main!(benches);
