//! The proxy's edge against hostile and careless clients: schema bombs, a request of a kind the
//! scope does not serve (and a provider's 404 for the request's own endpoint), slow and idle
//! connections (on a paused clock), the connection cap, `/metrics` access and size, a churn of
//! made-up tenants, the per-key tenant cap and a day-long Retry-After. A shutdown that cuts a
//! call holding leases in Redis needs a live Redis: it is in the target `redis`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// The real-socket tests bound their waits by the wall clock; the paused ones use tokio's.
#![allow(clippy::disallowed_methods)]

mod support;

use axum::body::Body;
use gateway_core::ports::SourceKey;
use serde_json::{Value, json};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use support::{ACME_KEY, KEY};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;

/// One request through the router, no sockets: status, headers and JSON body.
async fn oneshot(state: &Arc<gateway_server::AppState>, request: axum::http::Request<Body>) -> (u16, axum::http::HeaderMap, Value) {
    let response = gateway_server::router(state.clone()).oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 64 << 20).await.unwrap();
    (parts.status.as_u16(), parts.headers, serde_json::from_slice(&bytes).unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into())))
}

fn post(path: &str, key: &str, tenant: Option<&str>, body: &Value) -> axum::http::Request<Body> {
    let mut request =
        axum::http::Request::post(path).header("authorization", format!("Bearer {key}")).header("content-type", "application/json");
    if let Some(tenant) = tenant {
        request = request.header("x-tenant-id", tenant);
    }
    request.body(Body::from(body.to_string())).unwrap()
}

fn get(path: &str, key: Option<&str>) -> axum::http::Request<Body> {
    let mut request = axum::http::Request::get(path);
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    request.body(Body::empty()).unwrap()
}

fn chat(content: &str) -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": content}]})
}

fn with_schema(schema: Value) -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}})
}

/// `$defs` d0..dn, each referring to the next twice.
fn doubling_chain(n: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        let next = json!({"$ref": format!("#/$defs/d{}", i + 1)});
        defs.insert(format!("d{i}"), json!({"allOf": [next, next]}));
    }
    defs.insert(format!("d{n}"), json!({"type": "string"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

#[tokio::test]
async fn schema_bombs_are_refused_naming_the_field_and_a_deep_plain_schema_is_served() {
    let state = support::answering_state("max_body_bytes = 1048576", "");
    let bombs = [
        json!({"allOf": [{"$ref": "#"}]}),
        json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
        doubling_chain(20),
        json!({"description": "x".repeat(70_000)}),
    ];
    for bomb in bombs {
        let (status, _, body) = oneshot(&state, post("/v1/chat/completions", KEY, None, &with_schema(bomb.clone()))).await;
        assert_eq!((status, body["error"]["param"].as_str()), (400, Some("response_format.json_schema.schema")), "{body}");
    }
    assert_eq!(state.schemas.cached(), 3, "refusals are cached too (the size refusal is decided before the cache)");
    let mut nested = json!({"type": "string"});
    for _ in 0..60 {
        nested = json!({"type": "object", "properties": {"a": nested}});
    }
    let (status, _, body) = oneshot(&state, post("/v1/chat/completions", KEY, None, &with_schema(nested.clone()))).await;
    assert_eq!(status, 200, "a deep plain schema is accepted: {body}");
    assert!(state.schemas.compile(&nested).is_ok() && state.schemas.cached() == 4, "and compiled once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_scope_does_not_serve_is_refused_and_a_404_for_the_request_opens_nothing() {
    let scopes = r#"
[chatonly]
kinds = ["chat"]
[chatonly.breaker]
fail_threshold = 1
cooldown_s = 60
[chatonly.sources.m]
base_url = "{root}/chatonly/v1"
model = "m"
timeout_s = 30

[both]
[both.breaker]
fail_threshold = 1
cooldown_s = 60
[both.sources.b]
base_url = "{root}/chatonly/v1"
model = "m"
timeout_s = 30
"#;
    let (r, _) = support::start_custom("", scopes, std::future::pending()).await;
    let http = reqwest::Client::new();
    let embed = |model: &str| json!({"model": model, "input": "hello"});
    let answer = http.post(format!("{}/v1/embeddings", r.url)).bearer_auth(KEY).json(&embed("chatonly")).send().await.unwrap();
    assert_eq!(answer.status(), 400);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["param"], "model", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("does not serve embeddings"), "{body}");
    // A scope of both kinds sends it; the provider's 404 is the request's, not the source's.
    for _ in 0..3 {
        let answer = http.post(format!("{}/v1/embeddings", r.url)).bearer_auth(KEY).json(&embed("both")).send().await.unwrap();
        assert!(answer.status().is_client_error(), "{}", answer.status());
    }
    let gate = r.gates.snapshot(&SourceKey::new("both", "b")).unwrap_or_default();
    assert_eq!((gate.state, gate.streak), (gateway_core::breaker::CircuitState::Closed, 0), "{gate:?}");
    for scope in ["both", "chatonly"] {
        let body = json!({"model": scope, "messages": [{"role": "user", "content": "hi"}]});
        let answer = http.post(format!("{}/v1/chat/completions", r.url)).bearer_auth(KEY).json(&body).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{scope}: chat is served afterwards");
    }
}

/// The proxy with short timeouts on a paused clock, on `Answers`: its address.
async fn paused_proxy(server: &str) -> std::net::SocketAddr {
    let state = support::answering_state(server, "");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(gateway_server::serve(listener, state, std::future::pending()));
    address
}

/// Reads until the server closes the connection: what it sent.
async fn until_closed(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(start_paused = true)]
async fn a_slowloris_head_is_cut_at_the_header_timeout_however_steadily_it_trickles() {
    let address = paused_proxy("header_timeout_s = 10\nidle_timeout_s = 60").await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let began = tokio::time::Instant::now();
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let (mut reader, mut writer) = stream.split();
    let trickle = async {
        for byte in head {
            if writer.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let mut seen = Vec::new();
    tokio::select! {
        () = trickle => panic!("the whole head trickled in without the connection being closed"),
        _ = reader.read_to_end(&mut seen) => {}
    }
    let held = began.elapsed();
    assert!(held >= Duration::from_secs(10) && held < Duration::from_secs(12), "closed {held:?} after the first byte");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_body_gets_408_and_a_closed_connection_at_the_body_timeout() {
    let address = paused_proxy("body_timeout_s = 2").await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let began = tokio::time::Instant::now();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    let held = began.elapsed();
    assert!(held >= Duration::from_secs(2) && held < Duration::from_secs(3), "{held:?}");
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout_and_not_before() {
    let address = paused_proxy("idle_timeout_s = 30\nheader_timeout_s = 5").await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut first = [0u8; 256];
    let n = stream.read(&mut first).await.unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    let idle_from = tokio::time::Instant::now();
    // A second request after 20 s (past the header timeout, within the idle one) is served.
    tokio::time::sleep(Duration::from_secs(20)).await;
    stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let n = stream.read(&mut first).await.unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"), "still open after 20 s idle");
    let idle_from_second = tokio::time::Instant::now();
    let rest = until_closed(&mut stream).await;
    assert!(rest.is_empty(), "{rest}");
    let idle = idle_from_second.elapsed();
    assert!(idle >= Duration::from_secs(30) && idle < Duration::from_secs(31), "{idle:?}");
    assert!(idle_from.elapsed() >= Duration::from_secs(50));
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_sends_nothing_is_closed_at_the_header_timeout() {
    let address = paused_proxy("header_timeout_s = 5\nidle_timeout_s = 60").await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let began = tokio::time::Instant::now();
    assert!(until_closed(&mut stream).await.is_empty());
    let held = began.elapsed();
    assert!(held >= Duration::from_secs(5) && held < Duration::from_secs(6), "a first request is owed within the header timeout: {held:?}");
}

/// A connection whose request is in flight: its head is in, its body still owed.
async fn busy_connection(address: std::net::SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let head = format!("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\ncontent-length: 100\r\n\r\n{{");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_an_idle_connection_makes_room_and_busy_ones_are_kept() {
    let state = support::answering_state("max_connections = 2", "");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(gateway_server::serve(listener, state, std::future::pending()));
    let health = b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    // Two idle connections: a newcomer takes the place of the one idle the longest.
    let mut idle = TcpStream::connect(address).await.unwrap();
    let _other = TcpStream::connect(address).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut newcomer = TcpStream::connect(address).await.unwrap();
    newcomer.write_all(health).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), until_closed(&mut newcomer)).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(tokio::time::timeout(Duration::from_secs(5), until_closed(&mut idle)).await.unwrap().is_empty(), "the idlest was closed");
    drop(_other);
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Two connections with requests in flight: a newcomer is answered 503 and closed.
    let _busy = [busy_connection(address).await, busy_connection(address).await];
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut third = TcpStream::connect(address).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), until_closed(&mut third)).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("connection: close") && answer.contains("too_many_connections"), "{answer}");
}

#[tokio::test(start_paused = true)]
async fn an_answer_the_client_stops_reading_is_given_up_at_the_body_timeout() {
    let address = paused_proxy("max_body_bytes = 16777216\nbody_timeout_s = 2").await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let body = chat(&"z".repeat(8 << 20)).to_string();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    // The echo is as long as the request; the client does not read it for a minute.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    assert!(answer.len() < body.len(), "the server gave up the answer: {} of about {} bytes came", answer.len(), body.len());
}

#[tokio::test]
async fn metrics_need_the_metrics_key_or_an_unbound_key() {
    let state = support::answering_state("", "");
    assert_eq!(oneshot(&state, get("/metrics", None)).await.0, 401);
    assert_eq!(oneshot(&state, get("/metrics", Some("gw-wrong-key-000000000"))).await.0, 401);
    assert_eq!(oneshot(&state, get("/metrics", Some(ACME_KEY))).await.0, 403, "a tenant's key sees no other tenant");
    assert_eq!(oneshot(&state, get("/metrics", Some(KEY))).await.0, 200);
    let keyed = support::answering_state("metrics_key = \"scraper-secret-0123456789\"", "");
    assert_eq!(oneshot(&keyed, get("/metrics", Some(KEY))).await.0, 401, "with a metrics key, only it opens /metrics");
    assert_eq!(oneshot(&keyed, get("/metrics", Some("scraper-secret-0123456789"))).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_listener_serves_metrics_apart_and_unauthenticated() {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics_address = probe.local_addr().unwrap();
    drop(probe);
    let (r, _) = support::start_custom(&format!("metrics_listen = \"{metrics_address}\""), "", std::future::pending()).await;
    let http = reqwest::Client::new();
    let mut scrape = None;
    for _ in 0..50 {
        match http.get(format!("http://{metrics_address}/metrics")).send().await {
            Ok(response) => {
                scrape = Some(response);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let scrape = scrape.expect("the metrics listener answers");
    assert_eq!(scrape.status(), 200);
    assert!(scrape.text().await.unwrap().contains("# EOF"));
    let main = http.get(format!("{}/metrics", r.url)).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(main.status(), 404, "not on the main listener");
}

#[tokio::test]
async fn a_churn_of_made_up_tenants_leaves_a_bound_and_a_new_tenant_served_and_a_small_scrape() {
    let state = support::answering_state("", "");
    for i in 0..10_000 {
        let (status, _, body) = oneshot(&state, post("/v1/chat/completions", KEY, Some(&format!("made-up-{i}")), &chat("hi"))).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _, _) = oneshot(&state, post("/v1/chat/completions", ACME_KEY, None, &chat("hi"))).await;
    assert_eq!(status, 200, "the key-bound tenant is always admitted");
    let (status, _, _) = oneshot(&state, post("/v1/chat/completions", KEY, Some("brand-new"), &chat("hi"))).await;
    assert_eq!(status, 200, "a new tenant after the churn");
    let response = gateway_server::router(state.clone()).oneshot(get("/metrics", Some(KEY))).await.unwrap();
    let scrape = axum::body::to_bytes(response.into_body(), 64 << 20).await.unwrap();
    assert!(scrape.len() < 1 << 20, "a scrape at the tenant cap is {} bytes", scrape.len());
    let text = String::from_utf8_lossy(&scrape);
    assert!(text.contains("tenant_id=\"_other\""), "tenants past the cap share one label");
    let _ = writeln!(std::io::stderr(), "scrape after a 10 000-tenant churn: {} bytes", scrape.len());
}

#[tokio::test]
async fn no_other_key_may_name_a_key_bound_tenant() {
    let state = support::answering_state("", "");
    let (status, _, body) = oneshot(&state, post("/v1/chat/completions", KEY, Some("ACME"), &chat("hi"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("tenant_bound_to_another_key")), "{body}");
    let (status, _, _) = oneshot(&state, post("/v1/chat/completions", ACME_KEY, None, &chat("hi"))).await;
    assert_eq!(status, 200, "its own key may");
}

#[tokio::test]
async fn an_unbound_key_may_name_at_most_its_max_tenants() {
    let state = support::answering_state("[server.api_keys.capped]\nkey = \"gw-capped-key-0123456789\"\nmax_tenants = 2", "");
    for tenant in ["t1", "t2", "T1"] {
        let (status, _, _) = oneshot(&state, post("/v1/chat/completions", "gw-capped-key-0123456789", Some(tenant), &chat("hi"))).await;
        assert_eq!(status, 200, "{tenant}");
    }
    let (status, _, body) = oneshot(&state, post("/v1/chat/completions", "gw-capped-key-0123456789", Some("t3"), &chat("hi"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (429, Some("tenant_limit")), "{body}");
    let (status, _, _) = oneshot(&state, post("/v1/chat/completions", KEY, Some("t3"), &chat("hi"))).await;
    assert_eq!(status, 200, "another key is not held to it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_long_retry_after_ends_the_call_at_once_with_429_and_the_retry_after() {
    let r = support::start().await;
    let began = std::time::Instant::now();
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", r.url))
        .bearer_auth(KEY)
        .json(&chat("PUSHBACK"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 429);
    let retry_after: u64 = answer.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((86_399..=86_400).contains(&retry_after), "{retry_after}");
    assert!(began.elapsed() < Duration::from_secs(5), "not held for the stall window");
}

#[tokio::test]
async fn small_edges_stream_options_tenant_echo_and_413() {
    let state = support::answering_state("", "");
    let bad = json!({"model": "chat", "stream": true, "stream_options": "yes", "messages": [{"role": "user", "content": "x"}]});
    let (status, _, body) = oneshot(&state, post("/v1/chat/completions", KEY, None, &bad)).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("stream_options")), "{body}");
    let bad =
        json!({"model": "chat", "stream": true, "stream_options": {"include_usage": 1}, "messages": [{"role": "user", "content": "x"}]});
    let (status, _, body) = oneshot(&state, post("/v1/chat/completions", KEY, None, &bad)).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("stream_options.include_usage")), "{body}");
    let long = format!("bad:{}", "z".repeat(5000));
    let (status, _, body) = oneshot(&state, post("/v1/chat/completions", KEY, Some(&long), &chat("x"))).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("x-tenant-id")), "{body}");
    assert!(body.to_string().len() < 600, "the header is not echoed in full: {} bytes", body.to_string().len());
    let big = json!({"model": "chat", "messages": [{"role": "user", "content": "x".repeat(5000)}]});
    let (status, headers, _) = oneshot(&state, post("/v1/chat/completions", KEY, None, &big)).await;
    assert_eq!(status, 413);
    assert_eq!(headers["connection"], "close");
}
