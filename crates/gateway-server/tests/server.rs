//! The proxy in process against a mock OpenAI provider on loopback: plain and streamed chat,
//! embeddings (float and base64), models, sources, metrics, health; authentication and tenant
//! binding; errors in the OpenAI shape with the right status (bad JSON, missing fields, unknown
//! model, an open circuit with Retry-After, a provider's 400, an oversized body); and a client
//! that goes away mid-stream leaving no permit, lease or in-flight count behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// Real loopback I/O: waits are bounded by the wall clock.
#![allow(clippy::disallowed_methods)]

mod support;

use gateway_core::ports::SourceKey;
use gateway_server::config::{ServerConfig, load};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::{ACME_KEY, KEY, Running, start};

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post(r: &Running, path: &str, key: &str, body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = http().post(format!("{}{path}", r.url)).bearer_auth(key).json(&body).send().await.unwrap();
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let text = response.text().await.unwrap();
    (status, headers, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn chat(content: &str) -> Value {
    json!({"model": "chat", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": content}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_chat_models_and_embeddings_speak_openai() {
    let r = start().await;
    let (status, headers, body) = post(&r, "/v1/chat/completions", KEY, chat("hi")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["content"], "echo: hi");
    // The provider's body, unchanged: its model and usage; who served it in the headers.
    assert_eq!((body["model"].as_str(), body["usage"]["total_tokens"].as_u64()), (Some("m"), Some(7)));
    assert_eq!((headers["x-gateway-scope"].to_str().unwrap(), headers["x-gateway-source"].to_str().unwrap()), ("chat", "mock"));
    assert_eq!(headers["x-gateway-attempts"], "1");
    assert!(headers["x-request-id"].to_str().unwrap().starts_with("req-mock-"), "the provider's request id is passed on");
    let models: Value = http().get(format!("{}/v1/models", r.url)).bearer_auth(KEY).send().await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["chat", "dead"]);
    let (status, _, body) = post(&r, "/v1/embeddings", KEY, json!({"model": "chat", "input": ["a", "b"]})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"][1]["embedding"], json!([0.5, -1.0, 2.0]));
    let (_, _, body) = post(&r, "/v1/embeddings", KEY, json!({"model": "chat", "input": "a", "encoding_format": "base64"})).await;
    // 0.5, -1.0, 2.0 as little-endian f32
    assert_eq!(body["data"][0]["embedding"], "AAAAPwAAgL8AAABA");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_chat_is_sse_with_the_content_usage_and_done() {
    let r = start().await;
    let body = json!({"model": "chat", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "yo"}]});
    let response = http().post(format!("{}/v1/chat/completions", r.url)).bearer_auth(KEY).json(&body).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let content: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(content, "echo: yo");
    assert_eq!(chunks.last().unwrap()["usage"]["total_tokens"], 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_the_openai_shape_the_right_status_and_name_the_field() {
    let r = start().await;
    let raw = http().post(format!("{}/v1/chat/completions", r.url)).bearer_auth(KEY).body("{not json").send().await.unwrap();
    assert_eq!(raw.status(), 400);
    let body: Value = raw.json().await.unwrap();
    assert_eq!(body["error"]["param"], "body");
    let (status, _, body) = post(&r, "/v1/chat/completions", KEY, json!({"model": "chat"})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("messages")));
    let (status, _, body) =
        post(&r, "/v1/chat/completions", KEY, json!({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]})).await;
    assert_eq!((status, body["error"]["code"].as_str(), body["error"]["param"].as_str()), (404, Some("model_not_found"), Some("model")));
    assert!(body["error"]["message"].as_str().unwrap().contains("(configured: chat, dead)"), "{body}");
    let (status, _, body) = post(&r, "/v1/chat/completions", KEY, chat("POISON")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("context_length_exceeded")));
    let (status, headers, body) =
        post(&r, "/v1/chat/completions", KEY, json!({"model": "dead", "messages": [{"role": "user", "content": "x"}]})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("circuit_open")), "{body}");
    assert_eq!(headers["retry-after"], "60");
    assert!(!body.to_string().contains("sk-upstream"), "upstream keys never leave: {body}");
    let schema = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 12}}});
    let (status, _, body) = post(
        &r,
        "/v1/chat/completions",
        KEY,
        json!({"model": "chat", "messages": [{"role": "user", "content": "x"}], "response_format": schema}),
    )
    .await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("response_format.json_schema.schema")), "{body}");
    let (status, _, body) = post(&r, "/v1/chat/completions", KEY, chat(&"x".repeat(5000))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (413, Some("body_too_large")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_checked_and_a_bound_key_fixes_the_tenant() {
    let r = start().await;
    let (status, _, body) = post(&r, "/v1/chat/completions", "gw-wrong-key-0000000000", chat("hi")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (401, Some("invalid_api_key")));
    let anonymous = http().post(format!("{}/v1/chat/completions", r.url)).json(&chat("hi")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let (status, _, _) = post(&r, "/v1/chat/completions", ACME_KEY, chat("hi")).await;
    assert_eq!(status, 200);
    let mismatch = http()
        .post(format!("{}/v1/chat/completions", r.url))
        .bearer_auth(ACME_KEY)
        .header("x-tenant-id", "globex")
        .json(&chat("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(mismatch.status(), 403);
    let ops = http()
        .post(format!("{}/v1/chat/completions", r.url))
        .bearer_auth(KEY)
        .header("x-tenant-id", "globex")
        .json(&chat("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(ops.status(), 200);
    let sources: Value = http().get(format!("{}/v1/gateway/sources", r.url)).bearer_auth(KEY).send().await.unwrap().json().await.unwrap();
    let tenants: Vec<Option<&str>> =
        sources["sources"].as_array().unwrap().iter().filter(|s| s["scope"] == "chat").map(|s| s["tenant"].as_str()).collect();
    assert!(tenants.contains(&Some("acme")) && tenants.contains(&Some("globex")), "{sources}");
    let acme_view: Value =
        http().get(format!("{}/v1/gateway/sources", r.url)).bearer_auth(ACME_KEY).send().await.unwrap().json().await.unwrap();
    let seen: Vec<Option<&str>> = acme_view["sources"].as_array().unwrap().iter().map(|s| s["tenant"].as_str()).collect();
    assert!(seen.contains(&Some("acme")) && !seen.contains(&Some("globex")), "a bound key sees only its tenant: {acme_view}");
    let bad = http()
        .post(format!("{}/v1/chat/completions", r.url))
        .bearer_auth(KEY)
        .header("x-tenant-id", "a b")
        .json(&chat("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.json::<Value>().await.unwrap()["error"]["param"], "x-tenant-id");
    let one = &sources["sources"][0];
    for field in ["state", "epoch", "streak", "retry_after_s", "health", "aimd_limit", "inflight"] {
        assert!(one.get(field).is_some(), "{field} missing: {one}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_health_and_readiness() {
    let r = start().await;
    post(&r, "/v1/chat/completions", KEY, chat("hi")).await;
    let text = http().get(format!("{}/metrics", r.url)).bearer_auth(KEY).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("llm_attempts_total{scope=\"chat\",tenant_id=\"\",source=\"mock\",outcome=\"success\"} 1"), "{text}");
    assert_eq!(http().get(format!("{}/healthz", r.url)).send().await.unwrap().status(), 200);
    assert_eq!(http().get(format!("{}/readyz", r.url)).send().await.unwrap().status(), 200);
    assert_eq!(http().get(format!("{}/nope", r.url)).send().await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_stream_leaves_no_permit_lease_or_in_flight_count() {
    let r = start().await;
    let body = json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "slow"}]});
    let mut response = http().post(format!("{}/v1/chat/completions", r.url)).bearer_auth(KEY).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().unwrap();
    assert_eq!(&first[..], b": keep-alive\n\n");
    let key = SourceKey::new("chat", "mock");
    assert_eq!(r.quota.in_flight(&key), 1, "the call holds its permit while it runs");
    assert_eq!(r.state.client.inflight("chat"), 1);
    drop(response);
    let began = Instant::now();
    while (r.quota.in_flight(&key) > 0 || r.state.client.inflight("chat") > 0) && began.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(r.quota.in_flight(&key), 0, "permit released");
    assert_eq!(r.state.client.inflight("chat"), 0, "AIMD in-flight released");
    let gate = r.gates.snapshot(&key).unwrap_or_default();
    assert!(gate.probe_until.is_none(), "no probe lease left");
    assert!(began.elapsed() < Duration::from_secs(5), "noticed well before the provider's 10 s answer");
}

#[test]
fn the_server_table_is_validated_and_named() {
    let path = std::env::temp_dir().join(format!("gateway-server-bad-{}.toml", std::process::id()));
    let write = |text: &str| std::fs::write(&path, text).unwrap();
    let scope = "[chat.breaker]\nfail_threshold = 5\ncooldown_s = 60\n[chat.sources.s1]\n";
    write(&format!("[server]\nlisten = \"127.0.0.1:9\"\nkeepalive_s = 0\n{scope}"));
    assert_eq!(load(&path).unwrap_err().to_string(), "server.keepalive_s: value 0 is out of range (expected 0 < seconds <= 86400)");
    write(&format!("[server]\nlisen = \"x\"\n{scope}"));
    let e = load(&path).unwrap_err().to_string();
    assert!(e.starts_with("server.lisen (TOML file ") && e.ends_with("): unknown key \"lisen\""), "{e}");
    write(&format!("[server]\nmax_body_bytes = \"big\"\n{scope}"));
    let e = load(&path).unwrap_err().to_string();
    assert!(e.starts_with("server.max_body_bytes (TOML file ") && e.contains("): invalid type"), "{e}");
    write(&format!("[server.api_keys.ops]\nkey = \"short\"\n{scope}"));
    assert_eq!(load(&path).unwrap_err().to_string(), "server.api_keys.ops.key: a gateway key has at least 16 characters");
    write(&format!("[server.api_keys]\nops = \"gw-secret-value-0123456789\"\n{scope}"));
    let e = load(&path).unwrap_err().to_string();
    assert!(e.starts_with("server.api_keys.ops (TOML file ") && e.contains("): invalid type (the value is not shown)"), "{e}");
    assert!(!e.contains("gw-secret"), "{e}");
    write(&format!("[server.api_keys.ops]\nkey = \"gw-secret-value-0123456789\"\ntenant = \"a b\"\n{scope}"));
    assert!(load(&path).unwrap_err().to_string().starts_with("server.api_keys.ops.tenant: value \"a b\" is invalid"));
    write(scope);
    let (server, scopes) = load(&path).unwrap();
    assert_eq!((server, scopes.len()), (ServerConfig::default(), 1));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_example_server_configuration_loads() {
    let (server, scopes) = load(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/server.toml"))).unwrap();
    assert_eq!((server.listen.as_str(), server.api_keys.len()), ("127.0.0.1:8080", 2));
    let names: Vec<&str> = scopes.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["backup", "chat"]);
    assert_eq!(format!("{:?}", server.api_keys["acme"]), "ApiKey { key: \"<redacted>\", tenant: Some(\"acme\"), max_tenants: None }");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_before_a_plain_answer_cancels_its_call() {
    let r = start().await;
    let url = format!("{}/v1/chat/completions", r.url);
    let request = tokio::spawn(async move { http().post(url).bearer_auth(KEY).json(&chat("slow")).send().await });
    let key = SourceKey::new("chat", "mock");
    let began = Instant::now();
    while r.quota.in_flight(&key) == 0 && began.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(r.quota.in_flight(&key), 1, "the call is running");
    request.abort();
    while (r.quota.in_flight(&key) > 0 || r.state.client.inflight("chat") > 0) && began.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!((r.quota.in_flight(&key), r.state.client.inflight("chat")), (0, 0), "released when the client left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_and_gives_in_flight_calls_the_grace() {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (r, served) = support::start_until(async move {
        let _ = stopped.await;
    })
    .await;
    let url = format!("{}/v1/chat/completions", r.url);
    let in_flight = tokio::spawn(async move { http().post(url).bearer_auth(KEY).json(&chat("slow")).send().await });
    let key = SourceKey::new("chat", "mock");
    let began = Instant::now();
    while r.quota.in_flight(&key) == 0 && began.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(http().get(format!("{}/healthz", r.url)).send().await.is_err(), "no new connections after the signal");
    let shutdown_began = Instant::now();
    let served = served.await.unwrap().unwrap();
    let waited = shutdown_began.elapsed();
    assert!(waited < Duration::from_secs(3), "the 0.5 s grace bounds the wait for a 10 s call: {waited:?}");
    assert_eq!(served.cut, 1, "the 10 s call was cut at the deadline");
    let answer = in_flight.await.unwrap().unwrap();
    assert_eq!(answer.status(), 503, "a cut call gets a status, not a closed connection");
    assert_eq!(answer.headers()["connection"], "close");
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "shutting_down");
    assert_eq!((r.quota.in_flight(&key), r.state.client.inflight("chat")), (0, 0), "the cut call released its permit and count");
}
