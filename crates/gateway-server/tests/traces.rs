//! OpenTelemetry traces through the proxy, decoded by an OTLP/HTTP receiver in this process:
//! a call that fails over is one SERVER span `chat {scope}` continuing the caller's
//! `traceparent`, with two CLIENT attempt children (the first `source_dead`, the second
//! `success`) and the GenAI attributes; each attempt reached the provider with its own span's
//! `traceparent`; a refused call's span carries `error.type`; nothing secret is exported, and
//! prompts only when `record_contents` asks. One test: the subscriber is the process's.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// Real loopback I/O: waits are bounded by the wall clock.
#![allow(clippy::disallowed_methods)]

mod support;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as Status;
use prost::Message;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::KEY;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";

async fn receive(State(spans): State<Arc<Mutex<Vec<Span>>>>, body: Bytes) -> StatusCode {
    match ExportTraceServiceRequest::decode(body) {
        Ok(request) => {
            let mut kept = spans.lock().unwrap();
            kept.extend(request.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans));
            StatusCode::OK
        }
        Err(_) => StatusCode::BAD_REQUEST,
    }
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Any> {
    span.attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()
}

fn text(span: &Span, key: &str) -> String {
    match attr(span, key) {
        Some(Any::StringValue(s)) => s.clone(),
        other => panic!("{key} of {}: {other:?}", span.name),
    }
}

/// Every attribute value of `span`, as text.
fn everything(span: &Span) -> String {
    format!("{} {:?} {:?}", span.name, span.attributes, span.events)
}

fn scopes() -> &'static str {
    r#"
[pool]
selector = "round_robin"
[pool.breaker]
fail_threshold = 5
cooldown_s = 60
[pool.sources.gone]
base_url = "{root}/dead/v1"
api_key = "sk-upstream-gone-secret"
model = "m-gone"
[pool.sources.live]
base_url = "{root}/mock/v1"
api_key = "sk-upstream-live-secret"
model = "m-live"

[down]
[down.breaker]
fail_threshold = 5
cooldown_s = 60
[down.sources.only]
base_url = "{root}/dead/v1"
api_key = "sk-upstream-only-secret"
model = "m-only"
"#
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_call_is_one_server_span_with_two_attempts_continuing_the_callers_trace() {
    // The receiver, and the exporter of the server's `[telemetry]` pointed at it.
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let receiver = axum::Router::new().route("/v1/traces", post(receive)).with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, receiver).await });
    let telemetry = format!("traces = true\nendpoint = \"{collector}\"\nservice_name = \"gateway-test\"\nrecord_contents = false");
    let config = gateway_server::config::TelemetryConfig {
        traces: Some(true),
        endpoint: Some(collector.clone()),
        service_name: Some("gateway-test".into()),
        record_contents: false,
    };
    let http = gateway_server::traces::OtlpHttp::new(tokio::runtime::Handle::current(), Duration::from_secs(5)).unwrap();
    let provider = gateway_server::traces::provider(&config, http, |_| None).unwrap();
    let layer = gateway_server::traces::layer(&provider)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| meta.is_span() && meta.target().starts_with("gateway_client")));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).unwrap();

    // The proxy, built from a file with that `[telemetry]` table, as the binary builds it.
    let (provider_mock, _) = support::start_provider().await;
    let root = provider_mock.root();
    let text_config = format!(
        "[server]\nkeepalive_s = 0.05\n[server.api_keys.ops]\nkey = \"{KEY}\"\n[telemetry]\n{telemetry}\n{}",
        scopes().replace("{root}", &root)
    );
    let path = std::env::temp_dir().join(format!("gateway-traces-{}.toml", std::process::id()));
    std::fs::write(&path, &text_config).unwrap();
    let (server, backend, loaded) = gateway_server::config::load_all(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(server.telemetry, config, "the [telemetry] table");
    let state = gateway_server::build_with(server, backend, loaded).await.unwrap();
    assert!(state.traces);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway_server::serve(listener, state, std::future::pending()));

    // The call: round robin starts at `gone` (401: source_dead), then `live` answers.
    let traceparent = format!("00-{TRACE}-{CALLER_SPAN}-01");
    let body = json!({"model": "pool", "messages": [{"role": "user", "content": "a private prompt"}]});
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(KEY)
        .header("traceparent", &traceparent)
        .header("tracestate", "vendor=1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-gateway-attempts"], "2");
    // A call whose one source is dead fails.
    let refused = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&json!({"model": "down", "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    let refused_status = refused.status();

    let flushed = provider.clone();
    tokio::task::spawn_blocking(move || flushed.force_flush()).await.unwrap().unwrap();
    let began = Instant::now();
    let all = loop {
        let all = spans.lock().unwrap().clone();
        if all.iter().filter(|s| s.name.starts_with("chat ")).count() >= 2 {
            break all;
        }
        assert!(began.elapsed() < Duration::from_secs(10), "spans exported: {:?}", all.iter().map(|s| &s.name).collect::<Vec<_>>());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let call = all.iter().find(|s| s.name == "chat pool").expect("the call span `chat pool`");
    assert_eq!(call.kind, SpanKind::Server as i32, "SERVER at the proxy");
    assert_eq!(hex(&call.trace_id), TRACE, "the caller's trace continued");
    assert_eq!(hex(&call.parent_span_id), CALLER_SPAN, "a child of the caller's span");
    assert_eq!(text(call, "gen_ai.operation.name"), "chat");
    assert_eq!(text(call, "gen_ai.request.model"), "pool");
    assert_eq!(text(call, "gen_ai.provider.name"), "openai");
    assert_eq!(text(call, "gen_ai.response.model"), "m-live");
    assert!(text(call, "gen_ai.response.id").starts_with("chatcmpl-"), "{}", text(call, "gen_ai.response.id"));
    assert_eq!(attr(call, "gen_ai.request.stream"), Some(&Any::BoolValue(false)));
    assert_eq!(attr(call, "gen_ai.usage.input_tokens"), Some(&Any::IntValue(5)), "cached tokens are counted in the input");
    assert_eq!(attr(call, "gen_ai.usage.output_tokens"), Some(&Any::IntValue(2)));
    match attr(call, "gen_ai.response.finish_reasons") {
        Some(Any::ArrayValue(reasons)) => {
            assert_eq!(reasons.values.iter().map(|v| v.value.clone()).collect::<Vec<_>>(), [Some(Any::StringValue("stop".into()))]);
        }
        other => panic!("finish_reasons as an array: {other:?}"),
    }
    assert_eq!(text(call, "gateway.result"), "ok");
    assert_eq!(call.status.as_ref().map(|s| s.code), Some(Status::Ok as i32));
    assert!(attr(call, "error.type").is_none());

    let mut attempts: Vec<&Span> = all.iter().filter(|s| s.parent_span_id == call.span_id && s.name.starts_with("attempt ")).collect();
    attempts.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(attempts.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["attempt gone", "attempt live"], "two attempt children");
    for attempt in &attempts {
        assert_eq!(attempt.kind, SpanKind::Client as i32);
        assert_eq!(hex(&attempt.trace_id), TRACE);
        assert_eq!(text(attempt, "gateway.gate.state"), "CLOSED");
        assert_eq!(attr(attempt, "gateway.gate.epoch"), Some(&Any::IntValue(0)), "the gate's epoch it was admitted in");
        assert!(attr(attempt, "gateway.account.limit").is_some(), "the account's limit");
    }
    assert_eq!(
        (text(attempts[0], "gateway.outcome"), text(attempts[0], "error.type")),
        ("source_dead".to_owned(), "source_dead".to_owned())
    );
    assert_eq!(attempts[0].status.as_ref().map(|s| s.code), Some(Status::Error as i32));
    assert_eq!(text(attempts[1], "gateway.outcome"), "success");
    assert_eq!(
        (text(attempts[1], "gen_ai.request.model"), text(attempts[1], "gen_ai.provider.name")),
        ("m-live".to_owned(), "openai".to_owned())
    );

    // Each attempt reached the provider with its own span's traceparent, and the caller's state.
    let sent: Vec<(String, String)> = provider_mock
        .received()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .map(|r| (r.headers["traceparent"].to_str().unwrap().to_owned(), r.headers["tracestate"].to_str().unwrap().to_owned()))
        .filter(|(parent, _)| parent.contains(TRACE))
        .collect();
    let expected: Vec<(String, String)> =
        attempts.iter().map(|a| (format!("00-{TRACE}-{}-01", hex(&a.span_id)), "vendor=1".to_owned())).collect();
    assert_eq!(sent, expected);

    // The refused call: its span says why.
    let failed = all.iter().find(|s| s.name == "chat down").expect("the failed call's span");
    assert_eq!(refused_status, 503, "its one source is open: a dead key");
    assert_eq!(failed.status.as_ref().map(|s| s.code), Some(Status::Error as i32));
    assert_eq!(text(failed, "error.type"), "source_dead", "the outcome class of its last attempt");
    assert_ne!(text(failed, "gateway.result"), "ok");
    assert_ne!(hex(&failed.trace_id), TRACE, "a call without a traceparent starts its own trace");

    // Nothing secret, and no prompt without `record_contents`.
    for span in &all {
        let shown = everything(span);
        for secret in [KEY, "sk-upstream-gone-secret", "sk-upstream-live-secret", "a private prompt", "Bearer"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }
    // A stream's call span ends with the stream, marked as streamed.
    let streamed = json!({"model": "pool", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let response = reqwest::Client::new().post(format!("{url}/v1/chat/completions")).bearer_auth(KEY).json(&streamed).send().await.unwrap();
    assert!(response.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    // With `record_contents`, the prompt and the answer are on the call's span.
    let (server, backend, loaded) = {
        let path = std::env::temp_dir().join(format!("gateway-traces-contents-{}.toml", std::process::id()));
        std::fs::write(&path, text_config.replace("record_contents = false", "record_contents = true")).unwrap();
        let loaded = gateway_server::config::load_all(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        loaded
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let contents_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway_server::serve(
        listener,
        gateway_server::build_with(server, backend, loaded).await.unwrap(),
        std::future::pending(),
    ));
    let body = json!({"model": "pool", "messages": [{"role": "user", "content": "an opted-in prompt"}]});
    let response =
        reqwest::Client::new().post(format!("{contents_url}/v1/chat/completions")).bearer_auth(KEY).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let flushed = provider.clone();
    tokio::task::spawn_blocking(move || flushed.force_flush()).await.unwrap().unwrap();
    let began = Instant::now();
    let (stream_span, contents_span) = loop {
        let all = spans.lock().unwrap().clone();
        let stream_span =
            all.iter().find(|s| s.name == "chat pool" && attr(s, "gen_ai.request.stream") == Some(&Any::BoolValue(true))).cloned();
        let contents_span = all.iter().find(|s| attr(s, "gen_ai.input.messages").is_some()).cloned();
        if let (Some(a), Some(b)) = (stream_span, contents_span) {
            break (a, b);
        }
        assert!(began.elapsed() < Duration::from_secs(10), "the stream's and the opted-in call's spans were exported");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (text(&stream_span, "gateway.result"), stream_span.status.as_ref().map(|s| s.code)),
        ("ok".to_owned(), Some(Status::Ok as i32))
    );
    assert!(text(&contents_span, "gen_ai.input.messages").contains("an opted-in prompt"));
    assert!(text(&contents_span, "gen_ai.output.messages").contains("echo: an opted-in prompt"));
    assert!(!everything(&contents_span).contains("sk-upstream-live-secret"), "keys never, even with contents");
    let flushed = provider.clone();
    tokio::task::spawn_blocking(move || flushed.shutdown()).await.unwrap().unwrap();
}
