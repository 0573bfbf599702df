//! The Responses API: `POST /v1/responses` (whole, or streamed from its commit point in named
//! events), governed like chat and sent to the source holding its `previous_response_id` or
//! `conversation` when it names one; and a stored response's routes, each sent to the source
//! that made it (the affinity map): `GET /v1/responses/{id}` (`?stream=true&starting_after=N`
//! replays its events: a background response's stream resumed), `DELETE` (the id is then
//! forgotten), `GET …/input_items` and `POST …/cancel`. Ids pass unchanged.

use super::chat::{deliver, respond, scoped_body};
use super::sse::sse;
use super::{stored, stored_call};
use crate::AppState;
use crate::openai::{self, Framing};
use axum::extract::{Path, Request as HttpRequest, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use gateway_core::request::{Kind, Method, Target};
use std::sync::Arc;

/// `POST /v1/responses`.
pub(crate) async fn create(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    respond(
        async {
            let (tenant, commit, body, model) = scoped_body(&state, request).await?;
            let mut ask = openai::responses_request(body, &state.schemas)?;
            ask.request.structured_stream = commit;
            deliver(state.clone(), model, tenant, ask).await
        }
        .await,
    )
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
    respond(
        async {
            let tenant = state.keys.authenticate(&headers)?.tenant;
            let query = query(&uri);
            let stream = streamed(&query);
            let target = Target::new(Method::Get, format!("responses/{id}")).with_query(query);
            let (scope, request) = stored(&state, Kind::Responses, &id, target).await?;
            if stream {
                return sse(state.clone(), scope, tenant, request, Framing::Events { next: 0, renumber: false }).await;
            }
            stored_call(&state, &scope, tenant.as_deref(), &request).await
        }
        .await,
    )
}

/// `DELETE /v1/responses/{id}`; once the provider deleted it, the gateway forgets where it
/// lived.
pub(crate) async fn delete(State(state): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    respond(
        async {
            let tenant = state.keys.authenticate(&headers)?.tenant;
            let (scope, request) = stored(&state, Kind::Responses, &id, Target::new(Method::Delete, format!("responses/{id}"))).await?;
            let answer = stored_call(&state, &scope, tenant.as_deref(), &request).await?;
            if let Err(error) = state.client.forget(&id).await {
                tracing::warn!(%error, "the affinity map could not forget a deleted response");
            }
            Ok(answer)
        }
        .await,
    )
}

/// `GET /v1/responses/{id}/input_items` (its paging query passed on).
pub(crate) async fn input_items(State(state): State<Arc<AppState>>, Path(id): Path<String>, uri: Uri, headers: HeaderMap) -> Response {
    respond(
        async {
            let tenant = state.keys.authenticate(&headers)?.tenant;
            let target = Target::new(Method::Get, format!("responses/{id}/input_items")).with_query(query(&uri));
            let (scope, request) = stored(&state, Kind::Responses, &id, target).await?;
            stored_call(&state, &scope, tenant.as_deref(), &request).await
        }
        .await,
    )
}

/// `POST /v1/responses/{id}/cancel` (a background response).
pub(crate) async fn cancel(State(state): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    respond(
        async {
            let tenant = state.keys.authenticate(&headers)?.tenant;
            let (scope, request) =
                stored(&state, Kind::Responses, &id, Target::new(Method::Post, format!("responses/{id}/cancel"))).await?;
            stored_call(&state, &scope, tenant.as_deref(), &request).await
        }
        .await,
    )
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
