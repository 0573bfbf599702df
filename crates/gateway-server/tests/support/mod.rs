//! Test support: a mock OpenAI provider on loopback and the proxy started in process in front
//! of it (in-process gates and quota the test can inspect).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use gateway_client::GatewayClient;
use gateway_memory::{MemoryGates, MemoryQuota};
use gateway_metrics::Metrics;
use gateway_server::config::load;
use gateway_server::{AppState, ServerTelemetry};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

pub const KEY: &str = "gw-test-key-0123456789";
pub const ACME_KEY: &str = "gw-acme-key-0123456789";

/// A mock provider: `slow` answers after 10 s, `POISON` gets 400, the rest an echo; SSE when
/// asked; embeddings of three numbers per input; `/dead/v1` answers 401.
pub async fn provider() -> String {
    async fn chat(request: axum::extract::Request) -> axum::response::Response {
        let path = request.uri().path().to_owned();
        let bytes = axum::body::to_bytes(request.into_body(), 1 << 20).await.unwrap();
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        if path.starts_with("/dead/") {
            return axum::response::Response::builder()
                .status(401)
                .body(Body::from(json!({"error": {"code": "invalid_api_key", "message": "bad key"}}).to_string()))
                .unwrap();
        }
        if path.ends_with("/embeddings") {
            let n = body["input"].as_array().map_or(1, Vec::len);
            let data: Vec<Value> = (0..n).map(|i| json!({"index": i, "embedding": [0.5, -1.0, 2.0]})).collect();
            return axum::response::Response::new(Body::from(
                json!({"data": data, "usage": {"prompt_tokens": 3, "total_tokens": 3}}).to_string(),
            ));
        }
        let last = body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_owned();
        if last == "POISON" {
            return axum::response::Response::builder()
                .status(400)
                .body(Body::from(json!({"error": {"code": "context_length_exceeded", "message": "too long"}}).to_string()))
                .unwrap();
        }
        if last == "slow" {
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        let content = format!("echo: {last}");
        if body["stream"].as_bool() == Some(true) {
            let chunk = json!({"choices": [{"index": 0, "delta": {"content": content}}]});
            let usage = json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}});
            let events = format!("data: {chunk}\n\ndata: {usage}\n\ndata: [DONE]\n\n");
            let mut response = axum::response::Response::new(Body::from(events));
            response.headers_mut().insert("content-type", "text/event-stream".parse().unwrap());
            return response;
        }
        let answer = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}});
        axum::response::Response::new(Body::from(answer.to_string()))
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let root = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().fallback(chat)).await.unwrap() });
    root
}

pub fn config_text(root: &str) -> String {
    format!(
        r#"
[server]
keepalive_s = 0.05
shutdown_grace_s = 0.5
max_body_bytes = 4096

[server.api_keys.ops]
key = "{KEY}"

[server.api_keys.acme]
key = "{ACME_KEY}"
tenant = "acme"

[chat]
isolation = "per_tenant"
[chat.breaker]
fail_threshold = 5
cooldown_s = 60
[chat.sources.mock]
base_url = "{root}/mock/v1"
api_key = "sk-upstream-secret"
model = "m"
timeout_s = 30
max_concurrency = 8

[dead]
[dead.breaker]
fail_threshold = 5
cooldown_s = 60
[dead.sources.gone]
base_url = "{root}/dead/v1"
api_key = "sk-upstream-dead"
model = "m"
timeout_s = 30
"#
    )
}

pub struct Running {
    pub url: String,
    pub state: Arc<AppState>,
    pub quota: Arc<MemoryQuota>,
    pub gates: Arc<MemoryGates>,
}

pub async fn start() -> Running {
    start_until(std::future::pending()).await.0
}

/// The proxy until `shutdown` resolves; the handle ends when `serve` returns.
pub async fn start_until(shutdown: impl Future<Output = ()> + Send + 'static) -> (Running, tokio::task::JoinHandle<std::io::Result<()>>) {
    let root = provider().await;
    let path = std::env::temp_dir().join(format!("gateway-server-{}-{}.toml", std::process::id(), root.rsplit(':').next().unwrap()));
    std::fs::write(&path, config_text(&root)).unwrap();
    let (server, scopes) = load(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let clock = Arc::new(gateway_client::TokioClock::new());
    let gates = Arc::new(MemoryGates::new(clock.clone()));
    let quota = Arc::new(MemoryQuota::new(clock.clone()));
    let metrics = Arc::new(Metrics::new(100));
    let schemas = Arc::new(gateway_http::structured::Schemas::default());
    let client = GatewayClient::builder()
        .scopes(scopes.clone())
        .gates(gates.clone())
        .quota(quota.clone())
        .upstream(Arc::new(gateway_http::HttpUpstream::new(&scopes).unwrap().with_schemas(schemas.clone())))
        .telemetry(Arc::new(ServerTelemetry { metrics: metrics.clone() }))
        .clock(clock)
        .build()
        .unwrap();
    let state = Arc::new(AppState::new(Arc::new(client), gates.clone(), metrics, server, schemas));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served = tokio::spawn(gateway_server::serve(listener, state.clone(), shutdown));
    (Running { url, state, quota, gates }, served)
}
