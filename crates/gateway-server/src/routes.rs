//! The handlers: chat completions (plain and SSE), embeddings, models, sources, metrics and
//! health. Each call runs under the shutdown cut (at the deadline it ends with 503 and releases
//! what it holds); a body is read within `body_timeout_s` and `max_body_bytes`.

use crate::AppState;
use crate::openai::{self, ApiError};
use axum::body::{Body, Bytes};
use axum::extract::{Request as HttpRequest, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use gateway_client::CallError;
use gateway_core::request::{Request, Response as GatewayResponse};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn unix_now() -> u64 {
    // The `created` field of OpenAI responses is wall-clock time.
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn json_response(value: &Value) -> Response {
    ([("content-type", "application/json")], value.to_string()).into_response()
}

/// Reads the body within the time and size limits and parses it as a JSON object. A body too
/// large or too slow is answered and the connection closed (the rest of it is never read).
async fn json_body(state: &AppState, request: HttpRequest) -> Result<(HeaderMap, Value), ApiError> {
    let (parts, body) = request.into_parts();
    let limit = state.config.max_body_bytes;
    let timeout = Duration::from_secs_f64(state.config.body_timeout_s);
    let bytes: Bytes = match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => {
            let too_slow = ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                "body_timeout",
                format!("the body did not arrive within {} seconds (body_timeout_s)", state.config.body_timeout_s),
            );
            return Err(ApiError { param: Some("body".into()), ..too_slow }.closing());
        }
        Ok(Err(_)) => {
            let too_large = ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "body_too_large",
                format!("the body exceeds {limit} bytes"),
            );
            return Err(ApiError { param: Some("body".into()), ..too_large }.closing());
        }
        Ok(Ok(bytes)) => bytes,
    };
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
    let unknown = CallError::UnknownScope { scope: model.to_owned(), known: state.client.scope_names().join(", ") };
    Err(openai::call_error(&unknown))
}

/// Runs one call in `scope` for `tenant`, ended with 503 if the shutdown deadline comes first
/// (dropping the call releases what it holds).
async fn governed(state: &AppState, scope: &str, tenant: Option<&str>, request: &Request) -> Result<GatewayResponse, ApiError> {
    let call = async {
        match tenant {
            Some(tenant) => state.client.call_as(scope, tenant, request).await,
            None => state.client.call(scope, request).await,
        }
    };
    tokio::select! {
        result = call => result.map_err(|e| openai::call_error(&e)),
        () = state.cut.cancelled() => {
            state.cut_calls.fetch_add(1, Ordering::Relaxed);
            Err(ApiError::shutting_down())
        }
    }
}

fn wrong_kind(what: &str) -> ApiError {
    ApiError::new(StatusCode::BAD_GATEWAY, "upstream_error", "wrong_kind", format!("the source answered with {what}"))
}

pub(crate) async fn chat(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    match chat_inner(state, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn chat_inner(state: Arc<AppState>, request: HttpRequest) -> Result<Response, ApiError> {
    let tenant = state.keys.authenticate(request.headers())?.tenant;
    let (_, body) = json_body(&state, request).await?;
    let model = openai::model(&body)?;
    known_model(&state, &model)?;
    let (request, stream, include_usage) = openai::chat_request(&body, &state.schemas)?;
    let id = format!("chatcmpl-{}", state.next_id.fetch_add(1, Ordering::Relaxed));
    let created = unix_now();
    if !stream {
        return match governed(&state, &model, tenant.as_deref(), &request).await? {
            GatewayResponse::Chat { content, usage } => Ok(json_response(&openai::completion(&id, created, &model, &content, usage))),
            GatewayResponse::Embedding { .. } => Err(wrong_kind("embeddings")),
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
    let call = Box::pin(async move { governed(&state, &model_for_call, tenant.as_deref(), &request).await });
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
                        Ok(GatewayResponse::Embedding { .. }) => openai::error_event(&wrong_kind("embeddings")),
                        Err(error) => openai::error_event(&error),
                    };
                    Some((Ok::<_, std::convert::Infallible>(events), (Step::Done, None)))
                }
                () = tokio::time::sleep(keepalive) => Some((Ok(": keep-alive\n\n".to_owned()), (Step::Calling, Some(call)))),
            }
        }
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("text/event-stream"));
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}

pub(crate) async fn embeddings(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    let result: Result<Response, ApiError> = async {
        let tenant = state.keys.authenticate(request.headers())?.tenant;
        let (_, body) = json_body(&state, request).await?;
        let model = openai::model(&body)?;
        known_model(&state, &model)?;
        let (request, base64) = openai::embeddings_request(&body)?;
        match governed(&state, &model, tenant.as_deref(), &request).await? {
            GatewayResponse::Embedding { vectors, usage } => Ok(json_response(&openai::embeddings(&model, &vectors, usage, base64))),
            GatewayResponse::Chat { .. } => Err(wrong_kind("a chat completion")),
        }
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

pub(crate) async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(error) = state.keys.authenticate(&headers) {
        return error.into_response();
    }
    let data: Vec<Value> = state
        .client
        .scope_names()
        .into_iter()
        .map(|scope| json!({"id": scope, "object": "model", "created": 0, "owned_by": "llm-gateway"}))
        .collect();
    json_response(&json!({"object": "list", "data": data}))
}

pub(crate) async fn sources(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    // A key bound to a tenant sees the shared gates and its own, never other tenants'.
    let only = match state.keys.authenticate(&headers) {
        Ok(caller) => caller.tenant.filter(|_| caller.bound),
        Err(error) => return error.into_response(),
    };
    match state.client.status(only.as_deref()).await {
        Ok(all) => json_response(&json!({"sources": all})),
        Err(e) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "gate_backend_unavailable", e.to_string()).into_response()
        }
    }
}

/// The Prometheus exposition, on the main listener (authorized) unless `metrics_listen` serves it.
pub(crate) async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if state.config.metrics_listen.is_some() {
        return not_found().await;
    }
    if let Err(error) = state.keys.authorize_metrics(&headers) {
        return error.into_response();
    }
    exposition(&state)
}

/// The exposition as the `metrics_listen` listener serves it (no authorization there).
pub(crate) async fn metrics_only(State(state): State<Arc<AppState>>) -> Response {
    exposition(&state)
}

fn exposition(state: &AppState) -> Response {
    ([("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.render()).into_response()
}

pub(crate) async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.gates.read(&state.probe_key).await {
        Ok(_) => "ready".into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("gate backend unavailable: {e}")).into_response(),
    }
}

pub(crate) async fn not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", "not_found", "no such route").into_response()
}
