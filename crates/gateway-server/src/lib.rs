//! `gateway-server`: an OpenAI-compatible governing proxy. Point an OpenAI SDK's base URL at it
//! and every request is admitted, routed, retried and measured by `gateway-client`, with gate
//! state shared across replicas through Redis when `[backend] redis_url` is set, and what
//! happens while Redis cannot answer by `[backend] on_unavailable`.
//!
//! Routes: `POST /v1/chat/completions` (plain and `stream: true`), `POST /v1/embeddings`,
//! `POST /v1/completions`, `POST /v1/moderations`, `POST /v1/responses` (plain and streamed) and
//! a stored response's routes (`GET`/`DELETE /v1/responses/{id}`, `…/input_items`, `…/cancel`),
//! `POST /v1/images/generations` and `…/edits`, `POST /v1/audio/transcriptions`,
//! `…/translations` and `…/speech`, `POST /v1/files` and a file's routes, `POST /v1/batches`
//! and a batch's routes (a stored object's route goes to the source that made it: the
//! affinity map), 501 for the Realtime API and listings, `GET /v1/models` (the scopes), `GET /v1/gateway/sources` (every source's gate and local
//! view), `GET /metrics` (Prometheus; behind the metrics key or a gateway key, or on
//! `metrics_listen`), `GET /healthz`, `GET /readyz`. The request's `model` names a scope; the
//! tenant comes from the API key's binding or `x-tenant-id`.
//!
//! The edge is hardened (`docs/SECURITY.md`): bounded bodies, schemas, headers, idle time and
//! connections; tenants a key binds are always admitted; at the shutdown deadline the calls
//! still running end with 503 and hand back what they hold.
//!
//! Bodies pass through: the provider gets the caller's body (with the source's `model`) and the
//! caller gets the provider's, with `x-gateway-source`, `x-gateway-attempts`, `x-gateway-scope`
//! and the provider's `x-request-id`. A streamed call is governed like any call up to its commit
//! point (the first chunk with content, a tool-call delta or a refusal): the headers go out at
//! once, SSE comments keep the connection alive while retries, source switches and waits happen
//! unseen; from the commit point each chunk is relayed as it arrives. A client that went away
//! drops its call, which releases everything it held (the client's cancellation guarantee).

pub mod anthropic;
mod auth;
pub mod config;
pub mod memory;
pub mod openai;
pub mod reload;
mod routes;
mod serve;
pub mod status;
pub mod traces;

pub use serve::{ConnectionCapError, Served, connection_cap, fd_limit, serve};

use axum::Router;
use axum::routing::{get, post};
use config::{BackendConfig, ServerConfig};
use gateway_client::{GatewayClient, TracingTelemetry};
use gateway_core::ports::{AffinityMap, BreakerGate, SourceKey, Telemetry};
use gateway_core::telemetry::{AttemptEvent, CallEvent, GateEvent};
use gateway_http::structured::{SchemaLimits, Schemas};
use gateway_memory::backstop::{Backstop, BackstopAttempts, BackstopGates, BackstopPacer, BackstopQuota, OnUnavailable};
use gateway_metrics::Metrics;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Everything the handlers share.
pub struct AppState {
    /// The gateway.
    pub client: Arc<GatewayClient>,
    /// The gates (for readiness).
    pub gates: Arc<dyn BreakerGate>,
    /// The metrics the client reports to.
    pub metrics: Arc<Metrics>,
    /// The last minute's outcomes per scope, for the status page (fed by the telemetry).
    pub recent: Arc<status::recent::Recent>,
    /// The configuration's history: loaded when, reloads taken and refused.
    pub config_log: status::ConfigLog,
    /// The server settings.
    pub config: ServerConfig,
    /// A gate key to probe the backend with for readiness.
    pub probe_key: SourceKey,
    /// The shared backend's outage detector, when the gates are shared.
    pub backstop: Option<Arc<Backstop>>,
    /// Callers' structured-output schemas, bounded and compiled once (shared with the upstream).
    pub schemas: Arc<Schemas>,
    /// What the calls in flight hold of upstream answers, against `max_held_bytes`.
    pub held: memory::HeldBudget,
    /// The HTTP upstream, when the state is built around one ([`AppState::with_http`]): what
    /// its attempts hold, the provider headers it did not believe, the budgets answers passed.
    /// A reload swaps in the new sources' ([`AppState::http`]).
    http: arc_swap::ArcSwapOption<gateway_http::HttpUpstream>,
    /// The file the configuration was loaded from: what a reload loads again.
    pub config_path: Option<std::path::PathBuf>,
    /// The `[backend]` it started with (a reload that changes it needs a restart).
    pub backend: BackendConfig,
    /// Whether the calls' spans are made (`[telemetry]`): they then continue a caller's trace.
    pub traces: bool,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
    keys: auth::Keys,
    /// Cancelled at the shutdown deadline: every call still running ends with 503.
    cut: CancellationToken,
    /// Calls ended by the cut.
    cut_calls: AtomicUsize,
}

impl AppState {
    /// State around a client built with `telemetry`; `schemas` should be the upstream's (see
    /// [`schemas_for`]).
    pub fn new(
        client: Arc<GatewayClient>,
        gates: Arc<dyn BreakerGate>,
        telemetry: &ServerTelemetry,
        config: ServerConfig,
        schemas: Arc<Schemas>,
    ) -> Self {
        let scope = client.scope_names().into_iter().next().unwrap_or_default();
        let keys = auth::Keys::new(&config, client.longest_tenant_idle());
        let max_held = config.max_held_bytes.unwrap_or_else(memory::default_max_held_bytes);
        AppState {
            client,
            gates,
            metrics: telemetry.metrics.clone(),
            recent: telemetry.recent.clone(),
            config_log: status::ConfigLog::default(),
            probe_key: SourceKey::new(scope.as_str(), "readyz"),
            backstop: None,
            schemas,
            held: memory::HeldBudget::new(Arc::default(), max_held),
            http: arc_swap::ArcSwapOption::empty(),
            config_path: None,
            backend: BackendConfig::default(),
            traces: false,
            reloading: tokio::sync::Mutex::new(()),
            keys,
            config,
            cut: CancellationToken::new(),
            cut_calls: AtomicUsize::new(0),
        }
    }

    /// The state around the client's HTTP upstream: `max_held_bytes` counts what its attempts
    /// hold.
    pub fn with_http(mut self, upstream: Arc<gateway_http::HttpUpstream>) -> Self {
        self.held = memory::HeldBudget::new(upstream.held_bytes(), self.held.max());
        self.http = arc_swap::ArcSwapOption::from(Some(upstream));
        self
    }

    /// The state as loaded from `path`: what a reload loads again.
    pub fn from_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.config_path = Some(path.into());
        self
    }

    /// The HTTP upstream calls start on now, if the state has one.
    pub fn http(&self) -> Option<Arc<gateway_http::HttpUpstream>> {
        self.http.load_full()
    }

    /// A reload's upstream (it shares the old one's counters).
    pub(crate) fn set_http(&self, upstream: Arc<gateway_http::HttpUpstream>) {
        self.http.store(Some(upstream));
    }
}

/// The schema store the server's limits ask for: share it with the `HttpUpstream`.
pub fn schemas_for(config: &ServerConfig) -> Arc<Schemas> {
    Arc::new(Schemas::new(SchemaLimits { max_bytes: config.max_schema_bytes, ..SchemaLimits::default() }))
}

/// The client's telemetry: Prometheus metrics, the status page's last minute, and `tracing`
/// logs.
pub struct ServerTelemetry {
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The last minute's outcomes per scope.
    pub recent: Arc<status::recent::Recent>,
}

impl ServerTelemetry {
    /// Telemetry into `metrics`, with a last minute of its own.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        ServerTelemetry { metrics, recent: Arc::default() }
    }
}

impl Telemetry for ServerTelemetry {
    fn attempt(&self, event: &AttemptEvent) {
        self.metrics.attempt(event);
        self.recent.record(&event.key.scope, event.class, status::unix_ms() / 1000);
        TracingTelemetry.attempt(event);
    }
    fn call(&self, event: &CallEvent) {
        self.metrics.call(event);
        TracingTelemetry.call(event);
    }
    fn gate(&self, event: &GateEvent) {
        self.metrics.gate(event);
        TracingTelemetry.gate(event);
    }
}

/// The routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(routes::chat::chat))
        .route("/v1/embeddings", post(routes::chat::embeddings))
        .route("/v1/completions", post(routes::chat::completions))
        .route("/v1/moderations", post(routes::chat::moderations))
        .route("/v1/messages", post(routes::messages::create))
        .route("/v1/messages/count_tokens", post(routes::messages::count_tokens))
        .route("/v1/responses", post(routes::responses::create))
        .route("/v1/responses/{id}", get(routes::responses::retrieve).delete(routes::responses::delete))
        .route("/v1/responses/{id}/input_items", get(routes::responses::input_items))
        .route("/v1/responses/{id}/cancel", post(routes::responses::cancel))
        .route("/v1/images/generations", post(routes::media::images))
        .route("/v1/images/edits", post(routes::media::image_edits))
        .route("/v1/audio/transcriptions", post(routes::media::transcriptions))
        .route("/v1/audio/translations", post(routes::media::translations))
        .route("/v1/audio/speech", post(routes::media::speech))
        .route("/v1/files", post(routes::files::upload).get(routes::listing))
        .route("/v1/files/{id}", get(routes::files::retrieve).delete(routes::files::delete))
        .route("/v1/files/{id}/content", get(routes::files::content))
        .route("/v1/batches", post(routes::files::create_batch).get(routes::listing))
        .route("/v1/batches/{id}", get(routes::files::retrieve_batch))
        .route("/v1/batches/{id}/cancel", post(routes::files::cancel_batch))
        .route("/v1/realtime", get(routes::realtime).post(routes::realtime))
        .route("/v1/realtime/{*rest}", get(routes::realtime).post(routes::realtime))
        .route("/v1/models", get(routes::models))
        .route("/v1/models/{id}", get(routes::model))
        .route("/v1/gateway/sources", get(routes::sources))
        .route("/v1/gateway/status", get(routes::operator::status))
        .route("/ui", get(routes::operator::page))
        .route("/ui/status.css", get(routes::operator::stylesheet))
        .route("/ui/status.js", get(routes::operator::script))
        .route("/v1/gateway/reload", post(routes::operator::reload))
        .route("/metrics", get(routes::metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(routes::readyz))
        .fallback(routes::not_found)
        .layer(axum::middleware::from_fn_with_state(state.traces, traces::continue_trace))
        .with_state(state)
}

/// The routes of `metrics_listen`: `/metrics` alone.
pub fn metrics_router(state: Arc<AppState>) -> Router {
    Router::new().route("/metrics", get(routes::metrics_only)).fallback(routes::not_found).with_state(state)
}

/// Why the state cannot be built from a loaded configuration, naming the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A source the HTTP upstream cannot call (`{scope}.sources.{source}.{field}`).
    #[error(transparent)]
    Upstream(#[from] gateway_http::HttpConfigError),
    /// The Redis of `backend.redis_url` does not answer (with `on_unavailable = "fail_closed"`),
    /// or its URL is not one.
    #[error("backend.redis_url: {0}")]
    Redis(gateway_core::ports::BackendError),
    /// The client refuses the scopes (a `fallback` naming no scope, no scope at all).
    #[error(transparent)]
    Client(#[from] gateway_client::BuildError),
}

/// [`build_with`] the `[backend]` of `server.redis_url` (the older place of the Redis URL).
pub async fn build(config: ServerConfig, scopes: Vec<gateway_core::policy::ScopePolicy>) -> Result<Arc<AppState>, BuildError> {
    let backend = BackendConfig { redis_url: config.redis_url.clone(), ..BackendConfig::default() };
    build_with(config, backend, scopes).await
}

/// The shared gates, quota and pacers of `[backend]`: on Redis with a backstop that does what
/// `on_unavailable` says while Redis cannot answer (`local`: the process's own state, and a
/// replica then starts even when Redis does not answer yet); and the connection they share.
async fn shared_backend(
    backend: &BackendConfig,
    url: &str,
    clock: Arc<dyn gateway_core::time::Clock>,
) -> Result<(Shared, Arc<Backstop>, Arc<dyn AffinityMap>, Arc<gateway_redis::RedisConnection>), BuildError> {
    let redis = gateway_redis::RedisConfig {
        url: url.to_owned(),
        command_timeout: Duration::from_millis(backend.command_timeout_ms),
        connect_lazily: backend.on_unavailable == OnUnavailable::Local,
        ..Default::default()
    };
    let conn = gateway_redis::RedisConnection::connect(redis).await.map_err(BuildError::Redis)?;
    let backstop = Backstop::new(backend.on_unavailable, clock, gateway_memory::backstop::RETRY_EVERY);
    let redis = (
        gateway_redis::RedisGates::new(conn.clone()),
        gateway_redis::RedisQuota::new(conn.clone()),
        gateway_redis::RedisPacer::new(conn.clone()),
    );
    // An attempt's admission in one script, its records in another.
    let attempts = Arc::new(gateway_redis::RedisAttempts::new(redis.0.clone(), redis.1.clone(), redis.2.clone()));
    let gates = Arc::new(BackstopGates::new(Arc::new(redis.0), backstop.clone()));
    let quota = Arc::new(BackstopQuota::new(Arc::new(redis.1), backstop.clone()));
    let pacer = Arc::new(BackstopPacer::new(Arc::new(redis.2), backstop.clone()));
    let attempts = Arc::new(BackstopAttempts::new(attempts, gates.clone(), quota.clone(), pacer.clone(), backstop.clone()));
    let shared: Shared = (gates, quota, pacer, Some(attempts));
    // Where stored state lives must be one answer for every replica: no local stand-in.
    let affinity: Arc<dyn AffinityMap> = Arc::new(gateway_redis::RedisAffinity::new(conn.clone()));
    Ok((shared, backstop, affinity, conn))
}

/// The gates, quota and pacers, and where an attempt's admission and records go as one
/// operation each (when not the three one by one).
type Shared = (
    Arc<dyn BreakerGate>,
    Arc<dyn gateway_core::ports::QuotaGate>,
    Arc<dyn gateway_core::ports::PacerGate>,
    Option<Arc<dyn gateway_core::combined::AttemptGate>>,
);

/// Builds the state from a loaded configuration: the Redis gates, quota and pacers when
/// `backend.redis_url` is set (every replica then respects one learned limit per account), else
/// in-process ones; the HTTP upstream of the scopes' sources; metrics with at most
/// `metrics_max_tenants` tenants of their own; the key-bound tenants pinned.
pub async fn build_with(
    config: ServerConfig,
    backend: BackendConfig,
    scopes: Vec<gateway_core::policy::ScopePolicy>,
) -> Result<Arc<AppState>, BuildError> {
    build_state(config, backend, scopes).await.map(Arc::new)
}

/// [`build_with`], before it is shared (e.g. to say which file it came from:
/// [`AppState::from_file`]).
pub async fn build_state(
    config: ServerConfig,
    backend: BackendConfig,
    scopes: Vec<gateway_core::policy::ScopePolicy>,
) -> Result<AppState, BuildError> {
    let schemas = schemas_for(&config);
    let limits = gateway_http::HttpLimits {
        max_response_bytes: config.max_response_bytes,
        max_stream_bytes: config.max_stream_bytes,
        max_stream_bytes_per_s: config.max_stream_bytes_per_s,
        ..gateway_http::HttpLimits::default()
    };
    let traces = config.telemetry.traces_on(|name| std::env::var(name).ok());
    let upstream = gateway_http::HttpUpstream::new(&scopes)?
        .with_schemas(schemas.clone())
        .with_limits(limits)
        .with_propagation(traces::propagation(traces));
    let upstream = Arc::new(upstream);
    let telemetry = Arc::new(ServerTelemetry::new(Arc::new(Metrics::new(config.metrics_max_tenants))));
    let clock: Arc<dyn gateway_core::time::Clock> = Arc::new(gateway_client::TokioClock::new());
    let ((gates, quota, pacer, combined), backstop, affinity, redis): (Shared, _, Arc<dyn AffinityMap>, _) = match &backend.redis_url {
        Some(url) => {
            let (shared, backstop, affinity, conn) = shared_backend(&backend, url, clock.clone()).await?;
            (shared, Some(backstop), affinity, Some(conn))
        }
        None => (
            (
                Arc::new(gateway_memory::MemoryGates::new(clock.clone())),
                Arc::new(gateway_memory::MemoryQuota::new(clock.clone())),
                Arc::new(gateway_memory::MemoryPacer::new(clock.clone())),
                None,
            ),
            None,
            Arc::new(gateway_memory::MemoryAffinity::new(clock.clone(), config.affinity_max_ids)),
            None,
        ),
    };
    let mut client = GatewayClient::builder();
    if let Some(attempts) = combined {
        client = client.attempts(attempts);
    }
    if traces {
        let contents = config.telemetry.record_contents;
        client = client.traces(gateway_client::Traces { kind: gateway_client::SpanKind::Server, contents });
    }
    let client = client
        .scopes(scopes)
        .pinned_tenants(config.bound_tenants())
        .gates(gates.clone())
        .quota(quota)
        .pacer(pacer)
        .upstream(upstream.clone())
        .affinity(affinity)
        .affinity_ttl(Duration::from_secs_f64(config.affinity_ttl_s))
        .telemetry(telemetry.clone())
        .clock(clock)
        .build()?;
    let client = Arc::new(client);
    if let Some(conn) = &redis {
        // Capacity freed by another replica wakes this one's waiters (the poll stays the bound of
        // a message lost).
        let weak = Arc::downgrade(&client);
        drop(gateway_redis::watch_freed(conn, move |scope| weak.upgrade().is_some_and(|client| client.capacity_freed(scope))));
    }
    let mut state = AppState::new(client, gates, &telemetry, config, schemas).with_http(upstream);
    state.backstop = backstop;
    state.backend = backend;
    state.traces = traces;
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::{BuildError, build, build_with};
    use crate::config::{BackendConfig, ServerConfig, load};

    /// The scopes of `scope`, loaded as the server loads them.
    fn scopes(scope: &str) -> Vec<gateway_core::policy::ScopePolicy> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("gateway-server-build-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, scope).unwrap();
        let loaded = load(&path);
        let _ = std::fs::remove_file(&path);
        loaded.unwrap().1
    }

    const BREAKER: &str = "[chat.breaker]\nfail_threshold = 5\ncooldown_s = 60\n";

    #[tokio::test]
    async fn a_source_the_upstream_cannot_call_is_named() {
        let e = build(ServerConfig::default(), scopes(&format!("{BREAKER}[chat.sources.s1]\nmodel = \"m\"\n"))).await.err().unwrap();
        assert!(matches!(e, BuildError::Upstream(_)), "{e:?}");
        assert_eq!(e.to_string(), "chat.sources.s1.base_url: required key is missing");
    }

    #[tokio::test]
    async fn a_client_without_scopes_is_refused() {
        let e = build(ServerConfig::default(), Vec::new()).await.err().unwrap();
        assert!(matches!(e, BuildError::Client(gateway_client::BuildError::NoScope)), "{e:?}");
        assert_eq!(e.to_string(), gateway_client::BuildError::NoScope.to_string());
    }

    #[tokio::test]
    async fn a_redis_that_does_not_answer_fails_the_start_naming_backend_redis_url() {
        let scope = format!("{BREAKER}[chat.sources.s1]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n");
        let backend = BackendConfig { redis_url: Some("redis://127.0.0.1:1".to_owned()), ..BackendConfig::default() };
        let e = build_with(ServerConfig::default(), backend, scopes(&scope)).await.err().unwrap();
        assert!(matches!(e, BuildError::Redis(_)), "{e:?}");
        assert!(e.to_string().starts_with("backend.redis_url: "), "{e}");
    }
}
