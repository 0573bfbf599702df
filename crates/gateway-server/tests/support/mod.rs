//! Test support: the proxy started in process in front of gateway-mock's `Echo` provider on
//! loopback (in-process gates and quota the test can inspect), with the default test config or
//! extra `[server]` keys and scopes; and a proxy state on gateway-mock's `EchoUpstream`, which
//! answers everything, for tests that drive the router without sockets.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use gateway_client::GatewayClient;
use gateway_memory::{MemoryGates, MemoryQuota};
use gateway_metrics::Metrics;
use gateway_mock::{Echo, EchoUpstream, Gate, MockServer};
use gateway_server::config::load;
use gateway_server::{AppState, ServerTelemetry};
use std::sync::Arc;

pub const KEY: &str = "gw-test-key-0123456789";
pub const ACME_KEY: &str = "gw-acme-key-0123456789";

pub fn config_text(root: &str) -> String {
    custom_config(root, "", "")
}

/// The test config with `server` lines added to its `[server]` table (replacing a default of
/// the same key) and `scopes` appended.
pub fn custom_config(root: &str, server: &str, scopes: &str) -> String {
    let defaults: String = ["keepalive_s = 0.05", "shutdown_grace_s = 0.5", "max_body_bytes = 4096"]
        .into_iter()
        .filter(|line| !server.lines().any(|set| set.split('=').next().map(str::trim) == line.split('=').next().map(str::trim)))
        .map(|line| format!("{line}\n"))
        .collect();
    format!(
        r#"
[server]
{defaults}{server}

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
{scopes}
"#
    )
}

pub struct Running {
    pub url: String,
    /// The mock provider: what it received.
    pub provider: MockServer,
    /// The gate its `GATED` streams wait at.
    pub gate: Gate,
    pub state: Arc<AppState>,
    pub quota: Arc<MemoryQuota>,
    pub gates: Arc<MemoryGates>,
}

pub async fn start() -> Running {
    start_until(std::future::pending()).await.0
}

/// The proxy until `shutdown` resolves; the handle ends when `serve` returns.
pub async fn start_until(
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (Running, tokio::task::JoinHandle<std::io::Result<gateway_server::Served>>) {
    start_custom("", "", shutdown).await
}

/// Loads a config text (through a file, as the binary does).
pub fn load_text(text: &str) -> (gateway_server::config::ServerConfig, Vec<gateway_core::policy::ScopePolicy>) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("gateway-server-{}-{n}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let loaded = load(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    loaded
}

/// The proxy on the test config with `server` lines and `scopes` added (`{root}` in them names
/// the mock provider), until `shutdown`.
pub async fn start_custom(
    server: &str,
    scopes: &str,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (Running, tokio::task::JoinHandle<std::io::Result<gateway_server::Served>>) {
    let (provider, gate) = start_provider().await;
    let root = provider.root();
    start_serving(&custom_config(&root, server, &scopes.replace("{root}", &root)), provider, gate, shutdown).await
}

/// The proxy on a whole config `text` of the test's own (`{root}` in it names the mock
/// provider), until `shutdown`.
pub async fn start_text(
    text: &str,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (Running, tokio::task::JoinHandle<std::io::Result<gateway_server::Served>>) {
    let (provider, gate) = start_provider().await;
    let root = provider.root();
    start_serving(&text.replace("{root}", &root), provider, gate, shutdown).await
}

/// The proxy on the test config in front of a provider that answers every request with
/// `answer`.
pub async fn start_answering(answer: impl Fn(&gateway_mock::Received) -> gateway_mock::Answer + Send + Sync + 'static) -> Running {
    let provider = MockServer::answering(answer).await.unwrap();
    let text = custom_config(&provider.root(), "", "");
    start_serving(&text, provider, Gate::default(), std::future::pending()).await.0
}

/// The `Echo` provider on loopback, and the gate of its `GATED` streams.
pub async fn start_provider() -> (MockServer, Gate) {
    let echo = Echo::new();
    let gate = echo.gate();
    (MockServer::start(echo).await.unwrap(), gate)
}

async fn start_serving(
    text: &str,
    provider: MockServer,
    gate: Gate,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> (Running, tokio::task::JoinHandle<std::io::Result<gateway_server::Served>>) {
    let (server, scopes) = load_text(text);
    let clock = Arc::new(gateway_client::TokioClock::new());
    let gates = Arc::new(MemoryGates::new(clock.clone()));
    let quota = Arc::new(MemoryQuota::new(clock.clone()));
    let upstream = Arc::new(gateway_http::HttpUpstream::new(&scopes).unwrap());
    let state = state_on(server, scopes, gates.clone(), quota.clone(), upstream, clock);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served = tokio::spawn(gateway_server::serve(listener, state.clone(), shutdown));
    (Running { url, provider, gate, state, quota, gates }, served)
}

/// The proxy's state as `gateway_server::build` makes it, on the given adapters.
pub fn state_on(
    server: gateway_server::config::ServerConfig,
    scopes: Vec<gateway_core::policy::ScopePolicy>,
    gates: Arc<dyn gateway_core::ports::BreakerGate>,
    quota: Arc<dyn gateway_core::ports::QuotaGate>,
    upstream: Arc<dyn gateway_core::ports::Upstream>,
    clock: Arc<dyn gateway_core::time::Clock>,
) -> Arc<AppState> {
    let telemetry = Arc::new(ServerTelemetry::new(Arc::new(Metrics::new(server.metrics_max_tenants))));
    let schemas = gateway_server::schemas_for(&server);
    let client = GatewayClient::builder()
        .scopes(scopes)
        .pinned_tenants(server.bound_tenants())
        .gates(gates.clone())
        .quota(quota)
        .upstream(upstream)
        .telemetry(telemetry.clone())
        .clock(clock)
        .build()
        .unwrap();
    Arc::new(AppState::new(Arc::new(client), gates, &telemetry, server, schemas))
}

/// The proxy's router state for the test config (plus `server` lines and `scopes`) on
/// [`EchoUpstream`] and in-process gates: for driving the router without sockets.
pub fn answering_state(server: &str, scopes: &str) -> Arc<AppState> {
    let (server, scopes) = load_text(&custom_config("http://127.0.0.1:9", server, scopes));
    let clock = Arc::new(gateway_client::TokioClock::new());
    let gates = Arc::new(MemoryGates::new(clock.clone()));
    let quota = Arc::new(MemoryQuota::new(clock.clone()));
    state_on(server, scopes, gates, quota, Arc::new(EchoUpstream), clock)
}

/// The proxy in front of gateway-mock's [`gateway_mock::Surface`] (one account per path
/// prefix: `{root}/a/v1`, `{root}/b/v1`, …) with the test keys and `scopes` (`{root}` in them
/// names the provider), and the persona, to take an account down.
pub async fn start_surface(scopes: &str) -> (Running, Arc<gateway_mock::Surface>) {
    start_surface_with("", scopes).await
}

/// [`start_surface`] with `server` lines added to the `[server]` table.
pub async fn start_surface_with(server: &str, scopes: &str) -> (Running, Arc<gateway_mock::Surface>) {
    let surface = Arc::new(gateway_mock::Surface::new());
    let provider = MockServer::start(surface.clone()).await.unwrap();
    let root = provider.root();
    let text = format!(
        "[server]\nkeepalive_s = 0.05\nshutdown_grace_s = 0.5\n{server}\n[server.api_keys.ops]\nkey = \"{KEY}\"\n{}",
        scopes.replace("{root}", &root)
    );
    let (running, _) = start_serving(&text, provider, Gate::default(), std::future::pending()).await;
    (running, surface)
}

/// A scope `name` of sources (`source = account` pairs, each on that account of the Surface
/// provider at `{root}`), with `extra` scope lines.
pub fn surface_scope(name: &str, extra: &str, sources: &[(&str, &str)]) -> String {
    let mut text = format!("[{name}]\n{extra}\n[{name}.breaker]\nfail_threshold = 5\ncooldown_s = 60\n");
    for (source, account) in sources {
        text.push_str(&format!(
            "[{name}.sources.{source}]\nbase_url = \"{{root}}/{account}/v1\"\napi_key = \"sk-{source}\"\nmodel = \"m-{source}\"\ntimeout_s = 10\n"
        ));
    }
    text
}

/// The proxy in front of gateway-mock's [`gateway_mock::Claude`] (Anthropic's Messages API, one
/// account per path prefix as sources name them: `{root}/a/v1`, `{root}/overloaded/v1`, …) with
/// the test keys, the Echo-backed test scopes and `scopes` (`{root}` in them names the Claude
/// provider, `{openai}` the Echo one), and the Echo provider (which lives as long as it is held).
pub async fn start_claude(scopes: &str) -> (Running, MockServer) {
    let claude = gateway_mock::Claude::new();
    let gate = claude.gate();
    let provider = MockServer::start(claude).await.unwrap();
    let (echo, _) = start_provider().await;
    let scopes = scopes.replace("{root}", &provider.root()).replace("{openai}", &echo.root());
    let text = custom_config(&echo.root(), "", &scopes);
    let (running, _) = start_serving(&text, provider, gate, std::future::pending()).await;
    (running, echo)
}

/// A scope `name` of Anthropic sources (`source = account` pairs, each at `{root}/{account}/v1`
/// of the Claude provider), with `extra` lines for each source.
pub fn claude_scope(name: &str, extra: &str, sources: &[(&str, &str)]) -> String {
    let mut text = format!("[{name}]\n[{name}.breaker]\nfail_threshold = 5\ncooldown_s = 60\n");
    for (source, account) in sources {
        text.push_str(&format!(
            "[{name}.sources.{source}]\nprotocol = \"anthropic\"\nbase_url = \"{{root}}/{account}/v1\"\napi_key = \"sk-ant-{source}\"\nmodel = \"claude-{source}\"\ntimeout_s = 10\n{extra}\n"
        ));
    }
    text
}

/// A header of `response` as text (empty when it has none).
pub fn header(response: &reqwest::Response, name: &str) -> String {
    response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

/// The events of an SSE body of named events: (the `event:` name, the data as JSON).
pub fn events(text: &str) -> Vec<(String, serde_json::Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let name = block.lines().find_map(|l| l.strip_prefix("event: "))?.to_owned();
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((name, serde_json::from_str(data).unwrap()))
        })
        .collect()
}
