//! Images and audio: generations (JSON) and edits (a multipart upload of the image and its
//! mask), transcriptions and translations (a multipart upload of the audio; the transcript as
//! JSON, or as text and subtitles with the provider's content type), and speech (JSON in, the
//! audio's bytes out, held whole within `max_response_bytes`: a synthesis that fails or is cut
//! short is asked again unseen, never delivered as half a file). Each is governed like chat;
//! their streamed variants are not served (400 naming `stream`).

use super::chat::{respond, whole};
use super::form::{model, read_form, require_file};
use super::{answer, known_model, whole_call};
use crate::AppState;
use crate::openai::{self, ApiError};
use axum::extract::{Request as HttpRequest, State};
use axum::response::Response;
use gateway_core::request::{Kind, Request};
use std::sync::Arc;

/// `POST /v1/images/generations`.
pub(crate) async fn images(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    whole(state, request, |body| openai::whole_request(Kind::Images, body)).await
}

/// `POST /v1/audio/speech`: the audio's bytes, as the provider encoded them.
pub(crate) async fn speech(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    whole(state, request, |body| openai::whole_request(Kind::Speech, body)).await
}

/// `POST /v1/images/edits`: the image (`image`, or several as `image[]`), its `prompt`.
pub(crate) async fn image_edits(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    upload(state, request, Kind::ImageEdits, &["image", "image[]"]).await
}

/// `POST /v1/audio/transcriptions`.
pub(crate) async fn transcriptions(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    upload(state, request, Kind::Transcriptions, &["file"]).await
}

/// `POST /v1/audio/translations`.
pub(crate) async fn translations(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    upload(state, request, Kind::Translations, &["file"]).await
}

/// A multipart call of `kind` with a file part named one of `files`, answered whole.
async fn upload(state: Arc<AppState>, request: HttpRequest, kind: Kind, files: &[&str]) -> Response {
    respond(
        async {
            let tenant = state.keys.authenticate(request.headers())?.tenant;
            state.held.admit()?;
            let (_, form) = read_form(&state, request).await?;
            let scope = model(&form)?;
            known_model(&state, &scope)?;
            require_file(&form, files)?;
            if kind == Kind::ImageEdits && form.value("prompt").is_none_or(str::is_empty) {
                return Err(ApiError::invalid("prompt", "prompt is required: a text field describing the edit"));
            }
            if form.value("stream") == Some("true") {
                return Err(ApiError::invalid("stream", format!("streamed {kind} are not served by this gateway: send stream = false")));
            }
            let request = Request::multipart(kind, form);
            let response = whole_call(&state, &scope, tenant.as_deref(), &request).await?;
            Ok(answer(&scope, response))
        }
        .await,
    )
}
