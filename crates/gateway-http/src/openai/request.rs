//! The HTTP request of one attempt in the OpenAI dialect: where it goes (the kind's endpoint
//! below the source's base URL, or a stored object's route with the caller's query), and its
//! body: the caller's JSON with the source's `model` (`stream` and, for chat and legacy
//! completions, `stream_options.include_usage` the gateway's), a multipart form with the
//! source's `model` field (its parts shared, not copied, on every attempt), or none.

use crate::Source;
use gateway_core::request::{Form, Kind, Method, Object, Protocol, Request};
use serde_json::{Value, json};

/// The JSON body of one attempt of `request` at `src`.
pub(super) fn attempt_body(src: &Source, request: &Request, stream: bool) -> Object {
    let mut body = gateway_core::translate::request_body(request, src.protocol, src.max_tokens);
    let kind = wire_kind(src, request);
    if kind.takes_model() {
        body.insert("model".into(), json!(src.model));
    }
    let options = body.remove("stream_options");
    // Only the kinds that stream events are asked for a stream (a binary answer comes as its
    // body either way).
    if !stream || !kind.streams() {
        body.remove("stream");
        return body;
    }
    body.insert("stream".into(), json!(true));
    if matches!(kind, Kind::Responses | Kind::Messages) {
        // The usage comes with the terminal events (`response.completed`, `message_delta`): the
        // caller's options, if any, stay as written.
        if let Some(options) = options {
            body.insert("stream_options".into(), options);
        }
        return body;
    }
    if !src.stream_options {
        // A deployment that refuses `stream_options` gets none; the usage is not asked for.
        return body;
    }
    // The caller's options, with the usage always asked for: it settles the token quota.
    let mut options = match options {
        Some(Value::Object(options)) => options,
        _ => Object::new(),
    };
    options.insert("include_usage".into(), json!(true));
    body.insert("stream_options".into(), Value::Object(options));
    body
}

/// The kind of endpoint an attempt of `request` goes to at `src`: its own, or the one its
/// translation for `src`'s protocol does.
pub(super) fn wire_kind(src: &Source, request: &Request) -> Kind {
    gateway_core::translate::wire_kind(request.kind(), src.protocol)
}

/// The multipart body of one attempt: the caller's parts in order, `model` set to the source's.
fn multipart(src: &Source, request: &Request, form: &Form) -> reqwest::multipart::Form {
    let with_model;
    let form = if request.kind().takes_model() {
        with_model = form.with_value("model", &src.model);
        &with_model
    } else {
        form
    };
    let mut out = reqwest::multipart::Form::new();
    for part in &form.parts {
        let length = part.data.len() as u64;
        let body = reqwest::Body::from(part.data.clone());
        let mut built = reqwest::multipart::Part::stream_with_length(body, length);
        if let Some(name) = &part.filename {
            built = built.file_name(name.clone());
        }
        if let Some(kind) = &part.content_type {
            // A content type the caller sent that is not one is left out, not fatal.
            built = match built.mime_str(kind) {
                Ok(typed) => typed,
                Err(_) => {
                    let body = reqwest::Body::from(part.data.clone());
                    let plain = reqwest::multipart::Part::stream_with_length(body, length);
                    match &part.filename {
                        Some(name) => plain.file_name(name.clone()),
                        None => plain,
                    }
                }
            };
        }
        out = out.part(part.name.clone(), built);
    }
    out
}

/// The request of one attempt of `request` at `src` (`stream`: asked for as a stream).
pub(super) fn build(src: &Source, request: &Request, stream: bool) -> reqwest::RequestBuilder {
    let (method, url) = match request.target() {
        Some(target) => {
            let method = match target.method {
                Method::Get => reqwest::Method::GET,
                Method::Post => reqwest::Method::POST,
                Method::Delete => reqwest::Method::DELETE,
            };
            let query = if target.query.is_empty() { String::new() } else { format!("?{}", target.query) };
            (method, format!("{}/{}{query}", src.base_url, target.path))
        }
        None => (reqwest::Method::POST, format!("{}/{}", src.base_url, wire_kind(src, request).path())),
    };
    // The source's headers carry its key; an Anthropic source gets the version and the
    // caller's headers too.
    let mut builder = src.client.request(method, url).headers(src.headers.clone());
    if src.protocol == Protocol::Anthropic {
        builder = crate::anthropic::pass_on(src, request, builder);
    }
    match (request.form(), request.target()) {
        (Some(form), _) => builder.multipart(multipart(src, request, form)),
        // A stored object's route carries no body (its `cancel` a POST without one).
        (None, Some(_)) => builder,
        (None, None) => builder.json(&attempt_body(src, request, stream)),
    }
}
