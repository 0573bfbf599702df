//! The handlers: chat completions (whole, or SSE relayed chunk by chunk from the commit point;
//! a stream that fails before it within `keepalive_s` is answered with its status),
//! embeddings, models, sources, metrics and health. Bodies go to the provider as the caller
//! wrote them and answers come back as the provider wrote them. Each call runs under the
//! shutdown cut (at the deadline it ends with 503 and releases what it holds); a body is read
//! within `body_timeout_s` and `max_body_bytes`.

use crate::AppState;
use crate::openai::{self, ApiError};
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request as HttpRequest, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use gateway_client::{CallError, ChatStream};
use gateway_core::request::{Object, Request, Response as GatewayResponse};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn json_response(value: &Value) -> Response {
    ([("content-type", "application/json")], value.to_string()).into_response()
}

/// A provider's answer, unchanged, with who served it: `x-gateway-source`,
/// `x-gateway-attempts`, `x-gateway-scope`, and the provider's `x-request-id`.
fn answer(scope: &str, response: GatewayResponse) -> Response {
    let mut headers = vec![("x-gateway-scope", scope.to_owned()), ("x-gateway-attempts", response.attempts().to_string())];
    if let Some(source) = response.source() {
        headers.push(("x-gateway-source", source.to_owned()));
    }
    if let Some(id) = response.request_id() {
        headers.push(("x-request-id", id.to_owned()));
    }
    let mut http = json_response(&Value::Object(response.into_body()));
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            http.headers_mut().insert(name, value);
        }
    }
    http
}

/// Reads the body within the time and size limits and parses it as a JSON object. A body too
/// large or too slow is answered and the connection closed (the rest of it is never read).
async fn json_body(state: &AppState, request: HttpRequest) -> Result<(HeaderMap, Object), ApiError> {
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
        Ok(Err(_)) => return Err(too_large()),
        Ok(Ok(bytes)) => bytes,
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(body)) => Ok((parts.headers, body)),
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
        result = call => result.map_err(|e| openai::naming_the_limit(openai::call_error(&e), e.report(), state.http.as_deref())),
    }
}

async fn whole_call(state: &AppState, scope: &str, tenant: Option<&str>, request: &Request) -> Result<GatewayResponse, ApiError> {
    governed(state, async {
        match tenant {
            Some(tenant) => state.client.call_as(scope, tenant, request).await,
            None => state.client.call(scope, request).await,
        }
    })
    .await
}

pub(crate) async fn chat(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    match chat_inner(state, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn chat_inner(state: Arc<AppState>, request: HttpRequest) -> Result<Response, ApiError> {
    let tenant = state.keys.authenticate(request.headers())?.tenant;
    let commit = openai::structured_stream(request.headers())?;
    state.held.admit()?;
    let (_, body) = json_body(&state, request).await?;
    let model = openai::model(&body)?;
    known_model(&state, &model)?;
    let mut ask = openai::chat_request(body, &state.schemas)?;
    ask.request.structured_stream = commit;
    if !ask.stream {
        let response = whole_call(&state, &model, tenant.as_deref(), &ask.request).await?;
        return Ok(answer(&model, response));
    }
    sse(state, model, tenant, ask.request, ask.include_usage).await
}

/// Where a streamed answer is.
enum Relay {
    /// The call runs (up to its commit point): keep-alive comments meanwhile.
    Calling(Pin<Box<dyn Future<Output = Result<ChatStream, ApiError>> + Send>>),
    /// Past the commit point: each chunk as it comes.
    Streaming(ChatStream),
    Done,
}

/// A streamed answer. The call runs first: one that fails before its commit point within
/// `keepalive_s` is answered with its status, as OpenAI answers a stream it cannot start (so an
/// SDK raises `RateLimitError`, `BadRequestError`… and its retries see the status). One that
/// commits is answered `text/event-stream` with who serves it (`x-gateway-source`,
/// `x-gateway-attempts`, the provider's `x-request-id`). One that needs longer (a quota or
/// breaker wait) is answered at `keepalive_s` with keep-alive comments until its commit point;
/// its failure then can only be an SSE `error` event. After the commit point, each chunk as an
/// SSE event as it arrives (and a keep-alive comment whenever `keepalive_s` passes without one),
/// then `[DONE]`; a failure is an `error` event and the stream closes without `[DONE]`. The call runs inside the body, so a dropped connection drops the call.
async fn sse(
    state: Arc<AppState>,
    scope: String,
    tenant: Option<String>,
    request: Request,
    include_usage: bool,
) -> Result<Response, ApiError> {
    let keepalive = Duration::from_secs_f64(state.config.keepalive_s);
    let mut calling = start_stream(state.clone(), scope.clone(), tenant, request);
    let (relay, served) = match tokio::time::timeout(keepalive, &mut calling).await {
        Ok(Ok(stream)) => {
            let served = served_by(&stream);
            (Relay::Streaming(stream), served)
        }
        Ok(Err(error)) => return Err(error),
        Err(_) => (Relay::Calling(calling), Vec::new()),
    };
    let body = futures_util::stream::unfold(relay, move |relay| {
        let state = state.clone();
        async move { next_event(relay, &state, keepalive, include_usage).await }
    });
    Ok(event_stream(Body::from_stream(body), scope, served))
}

/// Starts the streamed call of `request` on `scope` (in `tenant`'s partition, if given), under
/// the shutdown cut.
fn start_stream(
    state: Arc<AppState>,
    scope: String,
    tenant: Option<String>,
    request: Request,
) -> Pin<Box<dyn Future<Output = Result<ChatStream, ApiError>> + Send>> {
    Box::pin(async move {
        governed(&state, async {
            match tenant.as_deref() {
                Some(tenant) => state.client.stream_as(&scope, tenant, &request).await,
                None => state.client.stream(&scope, &request).await,
            }
        })
        .await
    })
}

/// Who serves a committed stream: `x-gateway-source`, `x-gateway-attempts` and, when the
/// provider sent one, its `x-request-id`.
fn served_by(stream: &ChatStream) -> Vec<(&'static str, String)> {
    let served = [
        ("x-gateway-source", Some(stream.source().to_owned())),
        ("x-gateway-attempts", Some(stream.attempts().to_string())),
        ("x-request-id", stream.request_id().map(str::to_owned)),
    ];
    served.into_iter().filter_map(|(name, value)| Some((name, value?))).collect()
}

/// The next SSE event of a streamed answer and where the relay is after it (`None`: the body
/// ends): keep-alive comments until the commit point, then each chunk, `[DONE]` or an `error`
/// event, with a keep-alive comment whenever `keepalive` passes without one.
async fn next_event(
    mut relay: Relay,
    state: &AppState,
    keepalive: Duration,
    include_usage: bool,
) -> Option<(Result<String, Infallible>, Relay)> {
    loop {
        relay = match relay {
            Relay::Done => return None,
            Relay::Calling(mut call) => tokio::select! {
                result = &mut call => match result {
                    Ok(stream) => Relay::Streaming(stream),
                    Err(error) => return Some((Ok::<_, Infallible>(openai::error_event(&error)), Relay::Done)),
                },
                () = tokio::time::sleep(keepalive) => return Some((Ok(": keep-alive\n\n".to_owned()), Relay::Calling(call))),
            },
            Relay::Streaming(mut stream) => tokio::select! {
                next = stream.next() => match next {
                    Some(Ok(chunk)) if openai::is_usage_chunk(&chunk) && !include_usage => Relay::Streaming(stream),
                    Some(Ok(chunk)) => return Some((Ok(openai::chunk_event(&chunk)), Relay::Streaming(stream))),
                    Some(Err(broken)) => {
                        let error = openai::stream_broken(&broken, state.http.as_deref());
                        return Some((Ok(openai::error_event(&error)), Relay::Done));
                    }
                    None => return Some((Ok("data: [DONE]\n\n".to_owned()), Relay::Done)),
                },
                () = state.cut.cancelled() => return Some((Ok(openai::error_event(&cut(state))), Relay::Done)),
                // A provider that pauses mid-answer (a long tool call, a reasoning model) leaves
                // the connection idle: a comment keeps every proxy on the path from timing it out.
                // (The stream's next chunk is read from a channel: dropping the read loses none.)
                () = tokio::time::sleep(keepalive) => return Some((Ok(": keep-alive\n\n".to_owned()), Relay::Streaming(stream))),
            },
        };
    }
}

/// The `text/event-stream` answer of `body`, with who serves it: `x-gateway-scope` and what
/// `served` names.
fn event_stream(body: Body, scope: String, served: Vec<(&'static str, String)>) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("text/event-stream"));
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    for (name, value) in std::iter::once(("x-gateway-scope", scope)).chain(served) {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    response
}

pub(crate) async fn embeddings(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    let result: Result<Response, ApiError> = async {
        let tenant = state.keys.authenticate(request.headers())?.tenant;
        state.held.admit()?;
        let (_, body) = json_body(&state, request).await?;
        let model = openai::model(&body)?;
        known_model(&state, &model)?;
        let request = openai::embeddings_request(body)?;
        let response = whole_call(&state, &model, tenant.as_deref(), &request).await?;
        Ok(answer(&model, response))
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
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
        unreadable_retry_after: state.http.as_ref().map_or(0, |http| http.ignored_headers().retry_after()),
        unreadable_rate_limit: state.http.as_ref().map_or(0, |http| http.ignored_headers().rate_limit()),
    });
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
