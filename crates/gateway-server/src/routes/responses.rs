//! The Responses API: `POST /v1/responses` (whole, or streamed from its commit point in named
//! events), governed like chat and sent to the source holding its `previous_response_id` or
//! `conversation` when it names one; and a stored response's routes, each sent to the source
//! that made it (the affinity map): `GET /v1/responses/{id}` (`?stream=true&starting_after=N`
//! replays its events: a background response's stream resumed), `DELETE` (the id is then
//! forgotten), `GET …/input_items` and `POST …/cancel`. Ids pass unchanged.

use super::chat::{respond, streamable};
use super::sse::sse;
use super::{route, stored};
use crate::AppState;
use crate::openai::{self, Framing};
use axum::extract::{Path, Request as HttpRequest, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use gateway_core::request::{Kind, Method, Target};
use std::sync::Arc;

/// `POST /v1/responses`.
pub(crate) async fn create(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    streamable(state, request, openai::responses_request).await
}

/// The caller's query string, passed on as it came.
fn query(uri: &Uri) -> String {
    uri.query().unwrap_or_default().to_owned()
}

/// Whether the query asks for a stream (`stream=true`).
fn streamed(query: &str) -> bool {
    query.split('&').any(|pair| pair == "stream=true")
}

/// `GET /v1/responses/{id}`: the stored response, or with `stream=true` its events replayed (from
/// `starting_after`, as the provider numbered them).
pub(crate) async fn retrieve(State(state): State<Arc<AppState>>, Path(id): Path<String>, uri: Uri, headers: HeaderMap) -> Response {
    let query = query(&uri);
    let target = Target::new(Method::Get, format!("responses/{id}")).with_query(query.as_str());
    if !streamed(&query) {
        return respond(route(&state, &headers, Kind::Responses, &id, target).await);
    }
    respond(
        async {
            let tenant = state.keys.authenticate(&headers)?.tenant;
            let (scope, request) = stored(&state, Kind::Responses, &id, target).await?;
            sse(state.clone(), scope, tenant, request, Framing::Events { next: 0, renumber: false }).await
        }
        .await,
    )
}

/// `DELETE /v1/responses/{id}`.
pub(crate) async fn delete(State(state): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let target = Target::new(Method::Delete, format!("responses/{id}"));
    respond(route(&state, &headers, Kind::Responses, &id, target).await)
}

/// `GET /v1/responses/{id}/input_items` (its paging query passed on).
pub(crate) async fn input_items(State(state): State<Arc<AppState>>, Path(id): Path<String>, uri: Uri, headers: HeaderMap) -> Response {
    let target = Target::new(Method::Get, format!("responses/{id}/input_items")).with_query(query(&uri));
    respond(route(&state, &headers, Kind::Responses, &id, target).await)
}

/// `POST /v1/responses/{id}/cancel` (a background response).
pub(crate) async fn cancel(State(state): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let target = Target::new(Method::Post, format!("responses/{id}/cancel"));
    respond(route(&state, &headers, Kind::Responses, &id, target).await)
}

#[cfg(test)]
mod tests {
    use super::streamed;

    #[test]
    fn only_stream_true_asks_for_a_stream() {
        assert!(streamed("stream=true&starting_after=3"));
        assert!(streamed("include[]=x&stream=true"));
        assert!(!streamed("stream=false"));
        assert!(!streamed("streamer=true"));
        assert!(!streamed(""));
    }
}
