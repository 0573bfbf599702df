//! A multipart upload (audio, images, files), read once within the body limits and parsed into
//! a form whose parts share the body's bytes: each attempt sends the same parts again without a
//! copy. Its `model` field names the scope, as a JSON body's does.

use super::read_body;
use crate::AppState;
use crate::openai::ApiError;
use axum::extract::Request as HttpRequest;
use axum::http::HeaderMap;
use gateway_core::request::{Form, Part};

/// The most parts a form may have.
pub(crate) const MAX_PARTS: usize = 256;

/// Reads the request's body within the limits and parses it as `multipart/form-data`; every
/// error names what is at fault (the content type, the form, a part).
pub(super) async fn read_form(state: &AppState, request: HttpRequest) -> Result<(HeaderMap, Form), ApiError> {
    let content_type = request.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let boundary = multer::parse_boundary(&content_type).map_err(|_| {
        let shown: String = content_type.chars().take(60).collect();
        ApiError::invalid("content-type", format!("the body must be multipart/form-data with a boundary, not {shown:?}"))
    })?;
    let (headers, bytes) = read_body(state, request).await?;
    let mut multipart =
        multer::Multipart::new(futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(bytes) }), boundary);
    let mut form = Form::default();
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return Err(ApiError::invalid("body", format!("the multipart form cannot be read: {e}"))),
        };
        if form.parts.len() == MAX_PARTS {
            return Err(ApiError::invalid("body", format!("the multipart form has more than {MAX_PARTS} parts")));
        }
        let Some(name) = field.name().map(str::to_owned) else {
            return Err(ApiError::invalid("body", format!("part {} of the multipart form has no name", form.parts.len() + 1)));
        };
        let filename = field.file_name().map(str::to_owned);
        let content_type = field.content_type().map(ToString::to_string);
        let data = field.bytes().await.map_err(|e| ApiError::invalid(&name, format!("the part {name:?} cannot be read: {e}")))?;
        form.parts.push(Part { name, filename, content_type, data });
    }
    Ok((headers, form))
}

/// The form's `model`: the scope.
pub(super) fn model(form: &Form) -> Result<String, ApiError> {
    match form.value("model") {
        Some(model) if !model.is_empty() => Ok(model.to_owned()),
        Some(_) => Err(ApiError::invalid("model", "model must be a non-empty text field (a scope of this gateway)")),
        None => Err(ApiError::invalid("model", "model is required: a text field naming a scope of this gateway")),
    }
}

/// That the form has a file part named one of `names`, else 400 naming the first.
pub(super) fn require_file(form: &Form, names: &[&str]) -> Result<(), ApiError> {
    if form.parts.iter().any(|p| names.contains(&p.name.as_str()) && p.filename.is_some()) {
        return Ok(());
    }
    let name = names.first().copied().unwrap_or("file");
    Err(ApiError::invalid(name, format!("{name} is required: a file part of the multipart form")))
}
