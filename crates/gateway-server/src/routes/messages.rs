//! Anthropic's Messages API: `POST /v1/messages` (whole, or streamed from its commit point in
//! Anthropic's named events) and `POST /v1/messages/count_tokens`, governed like chat: the
//! gateway key in `x-api-key` or `Authorization: Bearer`, `model` naming the scope, the body
//! passed on as written with the source's `model`, the caller's `anthropic-*` and `x-app`
//! headers passed on, and every error in Anthropic's shape.

use super::chat::{Scoped, deliver, scoped_body};
use crate::AppState;
use crate::anthropic::{self, AnthropicError};
use crate::openai::ApiError;
use axum::extract::{Request as HttpRequest, State};
use axum::response::{IntoResponse, Response};
use gateway_core::request::Kind;
use std::sync::Arc;

/// A call of `kind` (Messages or a token count), answered whole or as a stream in Anthropic's
/// named events.
async fn call(state: Arc<AppState>, request: HttpRequest, kind: Kind) -> Result<Response, ApiError> {
    let Scoped { tenant, commit, headers, body, model } = scoped_body(&state, request).await?;
    let mut ask = anthropic::messages_request(kind, body, &headers)?;
    ask.request.structured_stream = commit;
    deliver(state, model, tenant, ask).await
}

/// The answer, or the error's in Anthropic's shape.
fn in_anthropic_shape(result: Result<Response, ApiError>) -> Response {
    result.unwrap_or_else(|error| AnthropicError(error).into_response())
}

/// `POST /v1/messages`.
pub(crate) async fn create(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    in_anthropic_shape(call(state, request, Kind::Messages).await)
}

/// `POST /v1/messages/count_tokens`.
pub(crate) async fn count_tokens(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    in_anthropic_shape(call(state, request, Kind::CountTokens).await)
}
