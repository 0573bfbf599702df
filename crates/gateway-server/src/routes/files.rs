//! Files and batches. An upload names no model: its scope is the `x-gateway-scope` header's, or
//! the one scope that serves files. The file then lives on the source that took it, and every
//! later use follows it there: its routes (`GET /v1/files/{id}`, `…/content`, `DELETE`), and a
//! batch of it (`POST /v1/batches` goes to the source holding its `input_file_id`; the batch, and
//! the output and error files it writes, are remembered there too: `GET /v1/batches/{id}`,
//! `POST …/cancel`). Listings span every source's account and are not served (501).

use super::chat::respond;
use super::form::{read_form, require_file};
use super::{answer, json_body, known_model, route, whole_call};
use crate::AppState;
use crate::openai::{self, ApiError};
use axum::extract::{Path, Request as HttpRequest, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use gateway_core::request::{Kind, Method, Request, Target};
use std::sync::Arc;

/// The header naming the scope of a call whose body names none (an upload).
pub const SCOPE_HEADER: &str = "x-gateway-scope";

/// The scope of a call of `kind` whose body names none: the `x-gateway-scope` header's, or the
/// one scope serving `kind`.
fn scope_of(state: &AppState, headers: &HeaderMap, kind: Kind) -> Result<String, ApiError> {
    if let Some(value) = headers.get(SCOPE_HEADER) {
        let scope = value.to_str().map_err(|_| ApiError::invalid(SCOPE_HEADER, format!("{SCOPE_HEADER} must be text")))?;
        known_model(state, scope)?;
        return Ok(scope.to_owned());
    }
    let serving = state.client.scopes_serving(kind);
    match serving.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(ApiError::invalid(SCOPE_HEADER, format!("no scope of this gateway serves {kind}"))),
        several => Err(ApiError::invalid(
            SCOPE_HEADER,
            format!("several scopes serve {kind} ({}): name one in the {SCOPE_HEADER} header", several.join(", ")),
        )),
    }
}

/// `POST /v1/files`: the upload (its `file` part and `purpose`).
pub(crate) async fn upload(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    respond(
        async {
            let tenant = state.keys.authenticate(request.headers())?.tenant;
            let scope = scope_of(&state, request.headers(), Kind::Files)?;
            state.held.admit()?;
            let (_, form) = read_form(&state, request).await?;
            require_file(&form, &["file"])?;
            if form.value("purpose").is_none_or(str::is_empty) {
                return Err(ApiError::invalid("purpose", "purpose is required: batch, assistants, fine-tune, vision, user_data or evals"));
            }
            let request = Request::multipart(Kind::Files, form);
            let response = whole_call(&state, &scope, tenant.as_deref(), &request).await?;
            Ok(answer(&scope, response))
        }
        .await,
    )
}

/// `GET /v1/files/{id}`.
pub(crate) async fn retrieve(State(state): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    respond(route(&state, &headers, Kind::Files, &id, Target::new(Method::Get, format!("files/{id}"))).await)
}

/// `GET /v1/files/{id}/content`: its bytes, as the provider sent them.
pub(crate) async fn content(State(state): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    respond(route(&state, &headers, Kind::Files, &id, Target::new(Method::Get, format!("files/{id}/content"))).await)
}

/// `DELETE /v1/files/{id}`.
pub(crate) async fn delete(State(state): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    respond(route(&state, &headers, Kind::Files, &id, Target::new(Method::Delete, format!("files/{id}"))).await)
}

/// `POST /v1/batches`: to the source holding its input file, in that file's scope (else the
/// `x-gateway-scope` header's, or the one scope serving batches).
pub(crate) async fn create_batch(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    respond(
        async {
            let tenant = state.keys.authenticate(request.headers())?.tenant;
            let headers = request.headers().clone();
            state.held.admit()?;
            let (_, body) = json_body(&state, request).await?;
            let request = openai::batch_request(body)?;
            let file = request.body().get("input_file_id").and_then(|v| v.as_str()).unwrap_or_default();
            let held_in = state.client.affinity_of(file).await.ok().flatten().map(|at| at.scope.to_string());
            let scope = match held_in {
                Some(scope) => scope,
                None => scope_of(&state, &headers, Kind::Batches)?,
            };
            let response = whole_call(&state, &scope, tenant.as_deref(), &request).await?;
            Ok(answer(&scope, response))
        }
        .await,
    )
}

/// `GET /v1/batches/{id}`.
pub(crate) async fn retrieve_batch(State(state): State<Arc<AppState>>, Path(id): Path<String>, uri: Uri, headers: HeaderMap) -> Response {
    let target = Target::new(Method::Get, format!("batches/{id}")).with_query(uri.query().unwrap_or_default());
    respond(route(&state, &headers, Kind::Batches, &id, target).await)
}

/// `POST /v1/batches/{id}/cancel`.
pub(crate) async fn cancel_batch(State(state): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    respond(route(&state, &headers, Kind::Batches, &id, Target::new(Method::Post, format!("batches/{id}/cancel"))).await)
}
