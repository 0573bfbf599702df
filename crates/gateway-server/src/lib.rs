//! `gateway-server`: an OpenAI-compatible governing proxy. Point an OpenAI SDK's base URL at it
//! and every request is admitted, routed, retried and measured by `gateway-client`, with gate
//! state shared across replicas through Redis when `[server] redis_url` is set.
//!
//! Routes: `POST /v1/chat/completions` (plain and `stream: true`), `POST /v1/embeddings`,
//! `GET /v1/models` (the scopes), `GET /v1/gateway/sources` (every source's gate and local
//! view), `GET /metrics` (Prometheus), `GET /healthz`, `GET /readyz`. The request's `model`
//! names a scope; the tenant comes from the API key's mapping or `x-tenant-id`.
//!
//! A streamed call is answered from the finished call: the gateway owns every retry, source
//! switch and fallback, which cannot be undone once tokens reached the client. The headers go
//! out at once and SSE comments keep the connection alive while the call runs; a client that
//! went away is noticed at the next one and its call is dropped, which releases everything it
//! held (the client's cancellation guarantee).

pub mod config;
pub mod openai;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request as HttpRequest, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use config::ServerConfig;
use gateway_client::{GatewayClient, TracingTelemetry};
use gateway_core::ports::{BreakerGate, GateKey, Telemetry};
use gateway_core::request::{Request, Response as GatewayResponse};
use gateway_core::telemetry::{AttemptEvent, CallEvent, GateEvent};
use gateway_metrics::Metrics;
use openai::ApiError;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use subtle::ConstantTimeEq;

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
    /// Callers' structured-output schemas, bounded and compiled once (shared with the upstream).
    pub schemas: Arc<gateway_http::structured::Schemas>,
    /// SHA-256 of each gateway key, with the tenant it binds: hashed once, compared per request.
    key_digests: Vec<([u8; 32], Option<String>)>,
    next_id: AtomicU64,
}

impl AppState {
    /// State around a built client.
    pub fn new(
        client: Arc<GatewayClient>,
        gates: Arc<dyn BreakerGate>,
        metrics: Arc<Metrics>,
        config: ServerConfig,
        schemas: Arc<gateway_http::structured::Schemas>,
    ) -> Self {
        let scope = client.scope_names().into_iter().next().unwrap_or_default();
        let key_digests = config.api_keys.values().map(|k| (Sha256::digest(k.key.as_bytes()).into(), k.tenant.clone())).collect();
        AppState {
            client,
            gates,
            metrics,
            config,
            probe_key: GateKey::new(scope.as_str(), "readyz"),
            schemas,
            key_digests,
            next_id: AtomicU64::new(1),
        }
    }
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
        .route("/v1/chat/completions", post(chat))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(models))
        .route("/v1/gateway/sources", get(sources))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", "not_found", "no such route") })
        .with_state(state)
}

fn unix_now() -> u64 {
    // The `created` field of OpenAI responses is wall-clock time.
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Who is calling, after authentication.
struct Caller {
    /// The tenant its calls are made for.
    tenant: Option<String>,
    /// Whether its key is bound to that tenant (it then sees only its own tenant's state).
    bound: bool,
}

/// The caller, after authentication: `Err` answers the request.
fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let header_tenant = headers.get("x-tenant-id").map(|v| v.to_str().map(str::to_owned));
    let header_tenant = match header_tenant {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(_)) => return Err(ApiError::invalid("x-tenant-id", "the tenant header is not visible ASCII")),
    };
    if state.config.api_keys.is_empty() {
        return Ok(Caller { tenant: header_tenant, bound: false });
    }
    let unauthorized = |why: &str| ApiError::new(StatusCode::UNAUTHORIZED, "authentication_error", "invalid_api_key", why);
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| unauthorized("missing gateway API key (Authorization: Bearer <key>)"))?;
    // Compare digests (equal length whatever the key's) with every key, in constant time each,
    // without stopping at a match: neither a key's bytes nor its length show in the timing.
    let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
    let mut found = None;
    for (digest, tenant) in &state.key_digests {
        if bool::from(digest.ct_eq(&given)) {
            found = Some(tenant);
        }
    }
    let bound_tenant = found.ok_or_else(|| unauthorized("invalid gateway API key"))?;
    match (bound_tenant, header_tenant) {
        (Some(bound), Some(asked)) if !bound.eq_ignore_ascii_case(&asked) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "tenant_mismatch",
            format!("this key is bound to tenant {bound:?}; x-tenant-id may not name another"),
        )),
        (Some(bound), _) => Ok(Caller { tenant: Some(bound.clone()), bound: true }),
        (None, asked) => Ok(Caller { tenant: asked, bound: false }),
    }
}

/// Reads the body up to the limit and parses it as JSON.
async fn json_body(state: &AppState, request: HttpRequest) -> Result<(HeaderMap, Value), ApiError> {
    let (parts, body) = request.into_parts();
    let limit = state.config.max_body_bytes;
    let bytes: Bytes = axum::body::to_bytes(body, limit).await.map_err(|_| ApiError {
        param: Some("body".into()),
        ..ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", "body_too_large", format!("the body exceeds {limit} bytes"))
    })?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| ApiError::invalid("body", format!("the body is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::invalid("body", "the body must be a JSON object"));
    }
    Ok((parts.headers, value))
}

/// Checked before the call so that a streamed request fails with a status, not after its
/// headers; the error is the client's own `UnknownScope`, answered like any other.
fn known_model(state: &AppState, model: &str) -> Result<(), ApiError> {
    if state.client.has_scope(model) {
        return Ok(());
    }
    let unknown = gateway_client::CallError::UnknownScope { scope: model.to_owned(), known: state.client.scope_names().join(", ") };
    Err(openai::call_error(&unknown))
}

async fn call(
    state: &AppState,
    scope: &str,
    tenant: Option<&str>,
    request: &Request,
) -> Result<GatewayResponse, gateway_client::CallError> {
    match tenant {
        Some(tenant) => state.client.call_as(scope, tenant, request).await,
        None => state.client.call(scope, request).await,
    }
}

async fn chat(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    match chat_inner(state, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn chat_inner(state: Arc<AppState>, request: HttpRequest) -> Result<Response, ApiError> {
    let tenant = authenticate(&state, request.headers())?.tenant;
    let (_, body) = json_body(&state, request).await?;
    let model = openai::model(&body)?;
    known_model(&state, &model)?;
    let (request, stream, include_usage) = openai::chat_request(&body, &state.schemas)?;
    let id = format!("chatcmpl-{}", state.next_id.fetch_add(1, Ordering::Relaxed));
    let created = unix_now();
    if !stream {
        return match call(&state, &model, tenant.as_deref(), &request).await {
            Ok(GatewayResponse::Chat { content, usage }) => {
                Ok(([("content-type", "application/json")], openai::completion(&id, created, &model, &content, usage).to_string())
                    .into_response())
            }
            Ok(GatewayResponse::Embedding { .. }) => {
                Err(ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", "wrong_kind", "the source answered with embeddings"))
            }
            Err(error) => Err(openai::call_error(&error)),
        };
    }
    Ok(sse(state, model, tenant, request, id, created, include_usage))
}

enum Step {
    Calling,
    Done,
}

/// A streamed answer: headers now, keep-alive comments while the call runs, then the events.
/// The call runs inside the body, so a dropped connection drops the call.
fn sse(
    state: Arc<AppState>,
    model: String,
    tenant: Option<String>,
    request: Request,
    id: String,
    created: u64,
    include_usage: bool,
) -> Response {
    let keepalive = Duration::from_secs_f64(state.config.keepalive_s);
    let model_for_call = model.clone();
    let call = Box::pin(async move { call(&state, &model_for_call, tenant.as_deref(), &request).await });
    let body = futures_util::stream::unfold((Step::Calling, Some(call)), move |(step, call)| {
        let (id, model) = (id.clone(), model.clone());
        async move {
            let mut call = match (step, call) {
                (Step::Calling, Some(call)) => call,
                _ => return None,
            };
            tokio::select! {
                result = &mut call => {
                    let events = match result {
                        Ok(GatewayResponse::Chat { content, usage }) => openai::completion_events(&id, created, &model, &content, usage, include_usage),
                        Ok(GatewayResponse::Embedding { .. }) => openai::error_event(&ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", "wrong_kind", "the source answered with embeddings")),
                        Err(error) => openai::error_event(&openai::call_error(&error)),
                    };
                    Some((Ok::<_, std::convert::Infallible>(events), (Step::Done, None)))
                }
                () = tokio::time::sleep(keepalive) => Some((Ok(": keep-alive\n\n".to_owned()), (Step::Calling, Some(call)))),
            }
        }
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert("content-type", axum::http::HeaderValue::from_static("text/event-stream"));
    headers.insert("cache-control", axum::http::HeaderValue::from_static("no-cache"));
    response
}

async fn embeddings(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    let result: Result<Response, ApiError> = async {
        let tenant = authenticate(&state, request.headers())?.tenant;
        let (_, body) = json_body(&state, request).await?;
        let model = openai::model(&body)?;
        known_model(&state, &model)?;
        let (request, base64) = openai::embeddings_request(&body)?;
        match call(&state, &model, tenant.as_deref(), &request).await {
            Ok(GatewayResponse::Embedding { vectors, usage }) => {
                Ok(([("content-type", "application/json")], openai::embeddings(&model, &vectors, usage, base64).to_string())
                    .into_response())
            }
            Ok(GatewayResponse::Chat { .. }) => {
                Err(ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", "wrong_kind", "the source answered with a chat completion"))
            }
            Err(error) => Err(openai::call_error(&error)),
        }
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(error) = authenticate(&state, &headers) {
        return error.into_response();
    }
    let data: Vec<Value> = state
        .client
        .scope_names()
        .into_iter()
        .map(|scope| json!({"id": scope, "object": "model", "created": 0, "owned_by": "llm-gateway"}))
        .collect();
    ([("content-type", "application/json")], json!({"object": "list", "data": data}).to_string()).into_response()
}

async fn sources(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    // A key bound to a tenant sees the shared gates and its own, never other tenants'.
    let only = match authenticate(&state, &headers) {
        Ok(caller) => caller.tenant.filter(|_| caller.bound),
        Err(error) => return error.into_response(),
    };
    match state.client.status(only.as_deref()).await {
        Ok(all) => ([("content-type", "application/json")], json!({"sources": all}).to_string()).into_response(),
        Err(e) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "gate_backend_unavailable", e.to_string()).into_response()
        }
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    ([("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.render()).into_response()
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.gates.read(&state.probe_key).await {
        Ok(_) => "ready".into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("gate backend unavailable: {e}")).into_response(),
    }
}

/// Builds the state from a loaded configuration: the Redis gates when `redis_url` is set, else
/// in-process ones; the HTTP upstream of the scopes' sources; metrics sized to the scopes'
/// tenant caps.
pub async fn build(config: ServerConfig, scopes: Vec<gateway_core::policy::ScopePolicy>) -> Result<Arc<AppState>, String> {
    let schemas = Arc::new(gateway_http::structured::Schemas::default());
    let upstream = Arc::new(gateway_http::HttpUpstream::new(&scopes).map_err(|e| e.to_string())?.with_schemas(schemas.clone()));
    let max_tenants = scopes.iter().map(|s| s.max_tenants as usize).sum::<usize>().max(1);
    let metrics = Arc::new(Metrics::new(max_tenants));
    let clock: Arc<dyn gateway_core::time::Clock> = Arc::new(gateway_client::TokioClock::new());
    let (gates, quota): (Arc<dyn BreakerGate>, Arc<dyn gateway_core::ports::QuotaGate>) = match &config.redis_url {
        Some(url) => {
            let conn = gateway_redis::RedisConnection::connect(gateway_redis::RedisConfig { url: url.clone(), ..Default::default() })
                .await
                .map_err(|e| format!("server.redis_url: {e}"))?;
            (Arc::new(gateway_redis::RedisGates::new(conn.clone())), Arc::new(gateway_redis::RedisQuota::new(conn)))
        }
        None => (Arc::new(gateway_memory::MemoryGates::new(clock.clone())), Arc::new(gateway_memory::MemoryQuota::new(clock.clone()))),
    };
    let client = GatewayClient::builder()
        .scopes(scopes)
        .gates(gates.clone())
        .quota(quota)
        .upstream(upstream)
        .telemetry(Arc::new(ServerTelemetry { metrics: metrics.clone() }))
        .clock(clock)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(AppState::new(Arc::new(client), gates, metrics, config, schemas)))
}

/// Serves `state` on `listener` until `shutdown` resolves, then gives in-flight requests up to
/// `shutdown_grace_s` to finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let grace = Duration::from_secs_f64(state.config.shutdown_grace_s);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, router(state)).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = tx.send(());
    });
    let deadline = async move {
        if rx.await.is_ok() {
            tokio::time::sleep(grace).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = server => result,
        () = deadline => {
            tracing::warn!(grace_s = grace.as_secs_f64(), "shutdown deadline passed with requests in flight; exiting");
            Ok(())
        }
    }
}
