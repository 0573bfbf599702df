//! The JSON families whose `model` names the scope: chat completions and legacy completions
//! (whole, or streamed from the commit point), embeddings and moderations (whole).

use super::sse::sse;
use super::{answer, json_body, known_model, whole_call};
use crate::AppState;
use crate::openai::{self, ApiError, ChatAsk, Framing};
use axum::extract::{Request as HttpRequest, State};
use axum::response::{IntoResponse, Response};
use gateway_core::request::{Kind, Object, Request};
use std::sync::Arc;

/// The answer, or the error's.
pub(super) fn respond(result: Result<Response, ApiError>) -> Response {
    result.unwrap_or_else(IntoResponse::into_response)
}

/// A JSON call's request as the gateway reads it before it is made a gateway request.
pub(super) struct Scoped {
    /// The authenticated caller's tenant.
    pub(super) tenant: Option<String>,
    /// This request's own `structured_stream` (its header).
    pub(super) commit: Option<gateway_core::stream::StructuredStream>,
    /// The request's headers (what a provider reads of them is passed on).
    pub(super) headers: axum::http::HeaderMap,
    /// The body.
    pub(super) body: Object,
    /// Its scope (`model`), known to the gateway.
    pub(super) model: String,
}

/// The caller authenticated, the body read and its scope known (see [`Scoped`]).
pub(super) async fn scoped_body(state: &AppState, request: HttpRequest) -> Result<Scoped, ApiError> {
    let tenant = state.keys.authenticate(request.headers())?.tenant;
    let commit = openai::structured_stream(request.headers())?;
    state.held.admit()?;
    let (headers, body) = json_body(state, request).await?;
    let model = openai::model(&body)?;
    known_model(state, &model)?;
    Ok(Scoped { tenant, commit, headers, body, model })
}

/// A call the caller takes whole, or as a stream in its kind's framing.
pub(super) async fn deliver(state: Arc<AppState>, scope: String, tenant: Option<String>, ask: ChatAsk) -> Result<Response, ApiError> {
    if !ask.stream {
        let response = whole_call(&state, &scope, tenant.as_deref(), &ask.request).await?;
        return Ok(answer(&scope, response));
    }
    let framing = Framing::of(ask.request.kind(), ask.include_usage);
    sse(state, scope, tenant, ask.request, framing).await
}

/// A call answered whole: the body read and made a request by `parse`.
pub(super) async fn whole(state: Arc<AppState>, request: HttpRequest, parse: fn(Object) -> Result<Request, ApiError>) -> Response {
    respond(
        async {
            let Scoped { tenant, body, model, .. } = scoped_body(&state, request).await?;
            let request = parse(body)?;
            let response = whole_call(&state, &model, tenant.as_deref(), &request).await?;
            Ok(answer(&model, response))
        }
        .await,
    )
}

/// A call of a kind that streams (chat, legacy completions, responses): the body read and made
/// a request by `parse` (with the server's schemas), this request's own `structured_stream`
/// applied, answered whole or as a stream.
pub(super) async fn streamable(
    state: Arc<AppState>,
    request: HttpRequest,
    parse: fn(Object, &gateway_http::structured::Schemas) -> Result<ChatAsk, ApiError>,
) -> Response {
    respond(
        async {
            let Scoped { tenant, commit, body, model, .. } = scoped_body(&state, request).await?;
            let mut ask = parse(body, &state.schemas)?;
            ask.request.structured_stream = commit;
            deliver(state.clone(), model, tenant, ask).await
        }
        .await,
    )
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    streamable(state, request, openai::chat_request).await
}

/// `POST /v1/completions` (legacy).
pub(crate) async fn completions(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    streamable(state, request, |body, _| openai::completions_request(body)).await
}

/// `POST /v1/embeddings`.
pub(crate) async fn embeddings(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    whole(state, request, openai::embeddings_request).await
}

/// `POST /v1/moderations`.
pub(crate) async fn moderations(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    whole(state, request, |body| openai::whole_request(Kind::Moderations, body)).await
}
