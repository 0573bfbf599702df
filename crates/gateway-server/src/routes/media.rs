//! Images and audio: generations (JSON) and edits (a multipart upload of the image and its
//! mask), transcriptions and translations (a multipart upload of the audio; the transcript as
//! JSON, or as text and subtitles with the provider's content type), and speech (JSON in, the
//! audio's bytes out as they come, with the provider's content type: governed like a stream up
//! to its first bytes, so a provider that fails before them is asked again unseen; one that
//! breaks after them breaks the connection, never a file that looks whole). Each is governed
//! like chat; the streamed variants of images and transcripts are not served (400 naming
//! `stream`).

use super::chat::{Scoped, respond, scoped_body, whole};
use super::form::{model, read_form, require_file};
use super::{answer, governed, known_model, whole_call};
use crate::AppState;
use crate::openai::{self, ApiError};
use axum::extract::{Request as HttpRequest, State};
use axum::http::HeaderValue;
use axum::response::Response;
use futures_util::StreamExt;
use gateway_core::request::{Kind, Request};
use gateway_core::stream::bytes;
use std::sync::Arc;

/// `POST /v1/images/generations`.
pub(crate) async fn images(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    whole(state, request, |body| openai::whole_request(Kind::Images, body)).await
}

/// `POST /v1/audio/speech`: the audio's bytes, as the provider encoded them, relayed as they
/// come.
pub(crate) async fn speech(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    respond(
        async {
            let Scoped { tenant, body, model: scope, .. } = scoped_body(&state, request).await?;
            let request = openai::whole_request(Kind::Speech, body)?;
            let mut stream = governed(&state, async {
                match tenant.as_deref() {
                    Some(tenant) => state.client.stream_as(&scope, tenant, &request).await,
                    None => state.client.stream(&scope, &request).await,
                }
            })
            .await?;
            // The commit point is the first piece of audio: its content type heads the answer.
            let first = stream.next().await.transpose().map_err(|broken| openai::stream_broken(&broken, state.http().as_deref()))?;
            let kind = first.as_ref().and_then(bytes::content_type).unwrap_or("application/octet-stream").to_owned();
            let mut headers = vec![
                ("x-gateway-scope", scope.clone()),
                ("x-gateway-source", stream.source().to_owned()),
                ("x-gateway-attempts", stream.attempts().to_string()),
            ];
            if let Some(id) = stream.request_id() {
                headers.push(("x-request-id", id.to_owned()));
            }
            let first = first.and_then(|chunk| bytes::data(&chunk)).unwrap_or_default();
            let pieces = futures_util::stream::once(async move { Ok::<_, std::io::Error>(first) }).chain(futures_util::stream::unfold(
                stream,
                |mut stream| async move {
                    match stream.next().await? {
                        Ok(chunk) => Some((Ok(bytes::data(&chunk).unwrap_or_default()), stream)),
                        // A break after the first bytes breaks the connection: no short file
                        // that looks whole.
                        Err(broken) => Some((Err(std::io::Error::other(broken.to_string())), stream)),
                    }
                },
            ));
            let mut answer = Response::new(axum::body::Body::from_stream(pieces));
            if let Ok(kind) = HeaderValue::from_str(&kind) {
                answer.headers_mut().insert("content-type", kind);
            }
            for (name, value) in headers {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    answer.headers_mut().insert(name, value);
                }
            }
            Ok(answer)
        }
        .await,
    )
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
