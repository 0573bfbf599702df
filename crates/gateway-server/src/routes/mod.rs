//! The handlers, a module per API family: [`chat`] (chat completions, embeddings, legacy
//! completions, moderations), [`responses`] (the Responses API and a stored response's routes),
//! [`media`] (images, audio), [`files`] (files and batches), [`messages`] (Anthropic's
//! Messages API); streamed answers in [`sse`],
//! multipart uploads read in [`form`]. Here: what they share (a body read within
//! `body_timeout_s` and `max_body_bytes`, the call under the shutdown cut, an answer with who
//! served it), and models, sources, metrics, health, and the routes the gateway does not serve.
//! Bodies go to the provider as the caller wrote them and answers come back as the provider
//! wrote them. Each call runs under the shutdown cut (at the deadline it ends with 503 and
//! releases what it holds).

pub(crate) mod chat;
pub(crate) mod files;
mod form;
pub(crate) mod media;
pub(crate) mod messages;
pub(crate) mod operator;
pub(crate) mod responses;
mod sse;

use crate::AppState;
use crate::openai::{self, ApiError};
use axum::body::Bytes;
use axum::extract::{Path, Request as HttpRequest, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use gateway_client::CallError;
use gateway_core::request::{Kind, Object, Request, Response as GatewayResponse, Target};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

// Names made once, at compile time: a name given as a string is checked on every answer.
const GATEWAY_SCOPE: HeaderName = HeaderName::from_static("x-gateway-scope");
const GATEWAY_ATTEMPTS: HeaderName = HeaderName::from_static("x-gateway-attempts");
const GATEWAY_SOURCE: HeaderName = HeaderName::from_static("x-gateway-source");
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

fn json_response(value: &Value) -> Response {
    ([("content-type", "application/json")], value.to_string()).into_response()
}

/// A provider's answer, unchanged (JSON, or bytes with the provider's content type), with who
/// served it ([`ServedHeaders`]).
fn answer(scope: &str, response: GatewayResponse) -> Response {
    let served = Served { source: response.source(), attempts: response.attempts(), request_id: response.request_id() };
    let served = ServedHeaders::of(scope, Some(served));
    let mut http = match response.raw_body() {
        Some(raw) => {
            let mut http = Response::new(axum::body::Body::from(raw.bytes.clone()));
            if let Ok(kind) = HeaderValue::from_str(&raw.content_type) {
                http.headers_mut().insert(CONTENT_TYPE, kind);
            }
            http
        }
        None => match response.sent() {
            // The provider's JSON as it wrote it (its numbers' digits, escapes and spacing).
            Some(sent) => ([(CONTENT_TYPE, HeaderValue::from_static("application/json"))], sent.clone()).into_response(),
            None => json_response(&Value::Object(response.into_body())),
        },
    };
    served.insert_into(http.headers_mut());
    http
}

/// Who served a call: the source, the attempts the call made, the provider's request id.
struct Served<'a> {
    source: Option<&'a str>,
    attempts: u32,
    request_id: Option<&'a str>,
}

/// Who served an answer, as its headers: `x-gateway-scope`, and once it is known who serves it
/// `x-gateway-attempts`, `x-gateway-source` and the provider's `x-request-id`. A value that
/// cannot be a header's is left out.
struct ServedHeaders([(HeaderName, Option<HeaderValue>); 4]);

impl ServedHeaders {
    fn of(scope: &str, served: Option<Served<'_>>) -> ServedHeaders {
        let value = |v: Option<&str>| v.and_then(|v| HeaderValue::from_str(v).ok());
        let (source, attempts, request_id) = match served {
            Some(served) => (served.source, Some(HeaderValue::from(served.attempts)), served.request_id),
            None => (None, None, None),
        };
        ServedHeaders([
            (GATEWAY_SCOPE, value(Some(scope))),
            (GATEWAY_ATTEMPTS, attempts),
            (GATEWAY_SOURCE, value(source)),
            (REQUEST_ID, value(request_id)),
        ])
    }

    fn insert_into(self, headers: &mut HeaderMap) {
        for (name, value) in self.0 {
            if let Some(value) = value {
                headers.insert(name, value);
            }
        }
    }
}

/// Reads the body within the time and size limits. A body too large or too slow is answered
/// and the connection closed (the rest of it is never read).
async fn read_body(state: &AppState, request: HttpRequest) -> Result<(HeaderMap, Bytes), ApiError> {
    let (parts, body) = request.into_parts();
    let limit = state.config.max_body_bytes;
    let too_large = || {
        let too_large = ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "body_too_large",
            format!("the body exceeds {limit} bytes"),
        );
        ApiError { param: Some("body".into()), ..too_large }.closing()
    };
    // A body that declares more than the limit is refused before a byte of it is read.
    let declared = parts.headers.get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let timeout = Duration::from_secs_f64(state.config.body_timeout_s);
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => {
            let too_slow = ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                "body_timeout",
                format!("the body did not arrive within {} seconds (body_timeout_s)", state.config.body_timeout_s),
            );
            Err(ApiError { param: Some("body".into()), ..too_slow }.closing())
        }
        Ok(Err(_)) => Err(too_large()),
        Ok(Ok(bytes)) => Ok((parts.headers, bytes)),
    }
}

/// Reads the body within the time and size limits and parses it as a JSON object.
async fn json_body(state: &AppState, request: HttpRequest) -> Result<(HeaderMap, Object), ApiError> {
    let (headers, bytes) = read_body(state, request).await?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(body)) => Ok((headers, body)),
        Ok(_) => Err(ApiError::invalid("body", "the body must be a JSON object")),
        Err(e) => Err(ApiError::invalid("body", format!("the body is not JSON: {e}"))),
    }
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

/// The answer to a call the shutdown deadline ended (counted: the exit code says so).
fn cut(state: &AppState) -> ApiError {
    state.cut_calls.fetch_add(1, Ordering::Relaxed);
    ApiError::shutting_down()
}

/// Runs `call`, ended with 503 if the shutdown deadline comes first (dropping the call releases
/// what it holds).
async fn governed<T>(state: &AppState, call: impl Future<Output = Result<T, CallError>>) -> Result<T, ApiError> {
    tokio::select! {
        // After the deadline no call may start and take leases.
        biased;
        () = state.cut.cancelled() => Err(cut(state)),
        result = call => result.map_err(|e| openai::naming_the_limit(openai::call_error(&e), e.report(), state.http().as_deref())),
    }
}

/// The call of `request` in `scope` (in `tenant`'s partition, if given), answered whole.
async fn whole_call(state: &AppState, scope: &str, tenant: Option<&str>, request: &Request) -> Result<GatewayResponse, ApiError> {
    governed(state, async {
        match tenant {
            Some(tenant) => state.client.call_as(scope, tenant, request).await,
            None => state.client.call(scope, request).await,
        }
    })
    .await
}

/// The noun of a stored object of `kind`, as OpenAI's errors name it.
fn noun(kind: Kind) -> &'static str {
    match kind {
        Kind::Files => "File",
        Kind::Batches => "Batch",
        _ => "Response",
    }
}

/// A call to a stored object's route (`target`): the id checked, its source found in the
/// affinity map, the request pinned there. Answers 400 naming `id` for one that cannot be an
/// id, 404 in OpenAI's shape for one the gateway does not know (never made through it,
/// deleted, expired), 503 when the map cannot answer.
async fn stored(state: &AppState, kind: Kind, id: &str, target: Target) -> Result<(String, Request), ApiError> {
    if let Err(why) = gateway_core::affinity::check_id(id) {
        return Err(ApiError::invalid(
            "id",
            format!("{} id {:?} is not an id: {why}", noun(kind).to_lowercase(), gateway_client::echoed(id)),
        ));
    }
    let found = state.client.affinity_of(id).await.map_err(|e| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "affinity_backend_unavailable", e.to_string())
    })?;
    let Some(at) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "not_found",
            format!("{} with id '{id}' not found.", noun(kind)),
        ));
    };
    Ok((at.scope.to_string(), Request::to_target(kind, target).pinned_to(&at.source, id)))
}

/// A stored object's route, `method` on `path` with the caller's `query`, sent to the source
/// holding `id` of `kind` ([`stored`]), answered whole: the provider's answer (or its error: a
/// 404 there is the caller's own, never the source's fault). Once a `DELETE` went through, the
/// gateway forgets where the id lived.
async fn route(state: &AppState, headers: &HeaderMap, kind: Kind, id: &str, target: Target) -> Result<Response, ApiError> {
    let tenant = state.keys.authenticate(headers)?.tenant;
    let deletes = target.method == gateway_core::request::Method::Delete;
    let (scope, request) = stored(state, kind, id, target).await?;
    let response = whole_call(state, &scope, tenant.as_deref(), &request).await?;
    if deletes && let Err(error) = state.client.forget(id).await {
        tracing::warn!(%error, "the affinity map could not forget a deleted object's id");
    }
    Ok(answer(&scope, response))
}

fn model_object(scope: &str) -> Value {
    json!({"id": scope, "object": "model", "created": 0, "owned_by": "llm-gateway"})
}

/// `GET /v1/models/{id}`: the scope as a model, or 404 naming `model`.
pub(crate) async fn model(State(state): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    if let Err(error) = state.keys.authenticate(&headers) {
        return error.into_response();
    }
    match known_model(&state, &id) {
        Ok(()) => json_response(&model_object(&id)),
        Err(error) => error.into_response(),
    }
}

pub(crate) async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(error) = state.keys.authenticate(&headers) {
        return error.into_response();
    }
    let data: Vec<Value> = state.client.scope_names().iter().map(|scope| model_object(scope)).collect();
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
        Err(e) => backend_unavailable(&e),
    }
}

/// 503: the gate backend did not answer a status read.
fn backend_unavailable(e: &gateway_core::ports::BackendError) -> Response {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "gate_backend_unavailable", e.to_string()).into_response()
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
    let mut counts = gateway_metrics::BackendCounts { background_dropped: state.client.dropped_records(), ..Default::default() };
    if let Some(backstop) = &state.backstop {
        let stats = backstop.stats();
        counts.degraded = backstop.is_degraded();
        counts.outages = stats.outages;
        counts.local_admissions = stats.local_admissions;
        counts.failed_closed = stats.failed_closed;
        counts.dropped_records = stats.dropped_records;
    }
    state.metrics.backend(counts);
    state.metrics.upstream(gateway_metrics::UpstreamCounts {
        held_bytes: state.held.held() as u64,
        max_held_bytes: state.held.max() as u64,
        refused_for_held_bytes: state.held.refused(),
        unreadable_retry_after: state.http().as_ref().map_or(0, |http| http.ignored_headers().retry_after()),
        unreadable_rate_limit: state.http().as_ref().map_or(0, |http| http.ignored_headers().rate_limit()),
    });
    ([("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.render()).into_response()
}

pub(crate) async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.gates.read(&state.probe_key).await {
        // Still ready after a refused reload (the configuration serving goes on), naming the key
        // at fault: the whole reason (which may quote a value) is in the log and on the status
        // page, behind a key.
        Ok(_) => match state.config_log.state().last_refused {
            Some(refused) => {
                let key = refused.reason.split(": ").next().unwrap_or_default();
                format!("ready\nlast configuration reload refused at {key} (the reason: the log, /v1/gateway/status)").into_response()
            }
            None => "ready".into_response(),
        },
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("gate backend unavailable: {e}")).into_response(),
    }
}

pub(crate) async fn not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", "not_found", "no such route").into_response()
}

/// A route of OpenAI's the gateway does not serve: 501 naming it, with `x-should-retry: false`
/// (the SDKs retry a 5xx otherwise).
fn not_served(route: &str, why: &str) -> Response {
    let mut response = ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "invalid_request_error",
        "unsupported_endpoint",
        format!("{route} is not served by this gateway: {why}"),
    )
    .into_response();
    response.headers_mut().insert("x-should-retry", HeaderValue::from_static("false"));
    response
}

/// The Realtime API (`/v1/realtime…`): a WebSocket session (or WebRTC) the gateway cannot
/// govern call by call.
pub(crate) async fn realtime() -> Response {
    not_served(
        "the Realtime API (WebSocket /v1/realtime?model=…, WebRTC /v1/realtime/calls)",
        "a realtime session is one long connection, not calls the gateway can admit, retry and fail over; connect to the provider directly",
    )
}

/// A listing (`GET /v1/files`, `GET /v1/batches`): it spans every account of every source.
pub(crate) async fn listing() -> Response {
    not_served(
        "listing files or batches",
        "each source's account holds its own; retrieve one by its id (GET /v1/files/{id}, GET /v1/batches/{id})",
    )
}
