//! `gateway-server`: an OpenAI-compatible governing proxy. Point an OpenAI SDK's base URL at it
//! and every request is admitted, routed, retried and measured by `gateway-client`, with gate
//! state shared across replicas through Redis when `[backend] redis_url` is set, and what
//! happens while Redis cannot answer by `[backend] on_unavailable`.
//!
//! Routes: `POST /v1/chat/completions` (plain and `stream: true`), `POST /v1/embeddings`,
//! `GET /v1/models` (the scopes), `GET /v1/gateway/sources` (every source's gate and local
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

mod auth;
pub mod config;
pub mod openai;
mod routes;
mod serve;

pub use serve::{Served, connection_cap, fd_limit, serve};

use axum::Router;
use axum::routing::{get, post};
use config::{BackendConfig, ServerConfig};
use gateway_client::{GatewayClient, TracingTelemetry};
use gateway_core::ports::{BreakerGate, GateKey, Telemetry};
use gateway_core::telemetry::{AttemptEvent, CallEvent, GateEvent};
use gateway_http::structured::{SchemaLimits, Schemas};
use gateway_memory::backstop::{Backstop, BackstopGates, BackstopPacer, BackstopQuota, OnUnavailable};
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
    /// The server settings.
    pub config: ServerConfig,
    /// A gate key to probe the backend with for readiness.
    pub probe_key: GateKey,
    /// The shared backend's outage detector, when the gates are shared.
    pub backstop: Option<Arc<Backstop>>,
    /// Callers' structured-output schemas, bounded and compiled once (shared with the upstream).
    pub schemas: Arc<Schemas>,
    keys: auth::Keys,
    /// Cancelled at the shutdown deadline: every call still running ends with 503.
    cut: CancellationToken,
    /// Calls ended by the cut.
    cut_calls: AtomicUsize,
}

impl AppState {
    /// State around a built client; `schemas` should be the upstream's (see [`schemas_for`]).
    pub fn new(
        client: Arc<GatewayClient>,
        gates: Arc<dyn BreakerGate>,
        metrics: Arc<Metrics>,
        config: ServerConfig,
        schemas: Arc<Schemas>,
    ) -> Self {
        let scope = client.scope_names().into_iter().next().unwrap_or_default();
        let keys = auth::Keys::new(&config, client.longest_tenant_idle());
        AppState {
            client,
            gates,
            metrics,
            probe_key: GateKey::new(scope.as_str(), "readyz"),
            backstop: None,
            schemas,
            keys,
            config,
            cut: CancellationToken::new(),
            cut_calls: AtomicUsize::new(0),
        }
    }
}

/// The schema store the server's limits ask for: share it with the `HttpUpstream`.
pub fn schemas_for(config: &ServerConfig) -> Arc<Schemas> {
    Arc::new(Schemas::new(SchemaLimits { max_bytes: config.max_schema_bytes, ..SchemaLimits::default() }))
}

/// The client's telemetry: Prometheus metrics and `tracing` logs.
pub struct ServerTelemetry {
    /// The metrics.
    pub metrics: Arc<Metrics>,
}

impl Telemetry for ServerTelemetry {
    fn attempt(&self, event: &AttemptEvent) {
        self.metrics.attempt(event);
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
        .route("/v1/chat/completions", post(routes::chat))
        .route("/v1/embeddings", post(routes::embeddings))
        .route("/v1/models", get(routes::models))
        .route("/v1/models/{id}", get(routes::model))
        .route("/v1/gateway/sources", get(routes::sources))
        .route("/metrics", get(routes::metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(routes::readyz))
        .fallback(routes::not_found)
        .with_state(state)
}

/// The routes of `metrics_listen`: `/metrics` alone.
pub fn metrics_router(state: Arc<AppState>) -> Router {
    Router::new().route("/metrics", get(routes::metrics_only)).fallback(routes::not_found).with_state(state)
}

/// [`build_with`] the `[backend]` of `server.redis_url` (the older place of the Redis URL).
pub async fn build(config: ServerConfig, scopes: Vec<gateway_core::policy::ScopePolicy>) -> Result<Arc<AppState>, String> {
    let backend = BackendConfig { redis_url: config.redis_url.clone(), ..BackendConfig::default() };
    build_with(config, backend, scopes).await
}

/// The shared gates, quota and pacers of `[backend]`: on Redis with a backstop that does what
/// `on_unavailable` says while Redis cannot answer (`local`: the process's own state, and a
/// replica then starts even when Redis does not answer yet).
async fn shared_backend(
    backend: &BackendConfig,
    url: &str,
    clock: Arc<dyn gateway_core::time::Clock>,
) -> Result<(Shared, Arc<Backstop>), String> {
    let redis = gateway_redis::RedisConfig {
        url: url.to_owned(),
        command_timeout: Duration::from_millis(backend.command_timeout_ms),
        connect_lazily: backend.on_unavailable == OnUnavailable::Local,
        ..Default::default()
    };
    let conn = gateway_redis::RedisConnection::connect(redis).await.map_err(|e| format!("backend.redis_url: {e}"))?;
    let backstop = Backstop::new(backend.on_unavailable, clock, gateway_memory::backstop::RETRY_EVERY);
    let shared: Shared = (
        Arc::new(BackstopGates::new(Arc::new(gateway_redis::RedisGates::new(conn.clone())), backstop.clone())),
        Arc::new(BackstopQuota::new(Arc::new(gateway_redis::RedisQuota::new(conn.clone())), backstop.clone())),
        Arc::new(BackstopPacer::new(Arc::new(gateway_redis::RedisPacer::new(conn)), backstop.clone())),
    );
    Ok((shared, backstop))
}

type Shared = (Arc<dyn BreakerGate>, Arc<dyn gateway_core::ports::QuotaGate>, Arc<dyn gateway_core::ports::PacerGate>);

/// Builds the state from a loaded configuration: the Redis gates, quota and pacers when
/// `backend.redis_url` is set (every replica then respects one learned limit per account), else
/// in-process ones; the HTTP upstream of the scopes' sources; metrics with at most
/// `metrics_max_tenants` tenants of their own; the key-bound tenants pinned.
pub async fn build_with(
    config: ServerConfig,
    backend: BackendConfig,
    scopes: Vec<gateway_core::policy::ScopePolicy>,
) -> Result<Arc<AppState>, String> {
    let schemas = schemas_for(&config);
    let upstream = Arc::new(gateway_http::HttpUpstream::new(&scopes).map_err(|e| e.to_string())?.with_schemas(schemas.clone()));
    let metrics = Arc::new(Metrics::new(config.metrics_max_tenants));
    let clock: Arc<dyn gateway_core::time::Clock> = Arc::new(gateway_client::TokioClock::new());
    let ((gates, quota, pacer), backstop): (Shared, _) = match &backend.redis_url {
        Some(url) => {
            let (shared, backstop) = shared_backend(&backend, url, clock.clone()).await?;
            (shared, Some(backstop))
        }
        None => (
            (
                Arc::new(gateway_memory::MemoryGates::new(clock.clone())),
                Arc::new(gateway_memory::MemoryQuota::new(clock.clone())),
                Arc::new(gateway_memory::MemoryPacer::new(clock.clone())),
            ),
            None,
        ),
    };
    let client = GatewayClient::builder()
        .scopes(scopes)
        .pinned_tenants(config.bound_tenants())
        .gates(gates.clone())
        .quota(quota)
        .pacer(pacer)
        .upstream(upstream)
        .telemetry(Arc::new(ServerTelemetry { metrics: metrics.clone() }))
        .clock(clock)
        .build()
        .map_err(|e| e.to_string())?;
    let mut state = AppState::new(Arc::new(client), gates, metrics, config, schemas);
    state.backstop = backstop;
    Ok(Arc::new(state))
}
