//! The HTTP request of one attempt in the OpenAI dialect: where it goes (the kind's endpoint
//! below the source's base URL, or a stored object's route with the caller's query), and its
//! body: the caller's JSON with the source's `model` (`stream` and, for chat and legacy
//! completions, `stream_options.include_usage` the gateway's), a multipart form with the
//! source's `model` field (its parts shared, not copied, on every attempt), or none.

use crate::Source;
use bytes::Bytes;
use gateway_core::request::{Form, Kind, Method, Object, Protocol, Request};
use reqwest::header::HeaderMap;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Value, json};
use std::borrow::Cow;

/// The JSON body of one attempt of `request` at `src`: the caller's body (or its translation
/// for `src`), written with the source's `model` and the gateway's `stream` and
/// `stream_options`, each where the caller put it, else after the caller's fields. Written
/// from the caller's body as it is, never copied.
pub(super) struct AttemptBody<'a> {
    base: Cow<'a, Object>,
    /// The source's model, where the kind takes one (else the caller's stays).
    model: Option<Value>,
    /// `stream` and `stream_options` as sent: `None` leaves the field out.
    stream: Option<Value>,
    stream_options: Option<Value>,
}

impl AttemptBody<'_> {
    /// What the attempt writes for the caller's field `key`: `None` the caller's value,
    /// `Some(None)` nothing, `Some(Some(v))` `v`.
    fn edit(&self, key: &str) -> Option<Option<&Value>> {
        match key {
            "model" => self.model.as_ref().map(Some),
            "stream" => Some(self.stream.as_ref()),
            "stream_options" => Some(self.stream_options.as_ref()),
            _ => None,
        }
    }
}

impl Serialize for AttemptBody<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.base.iter() {
            match self.edit(key) {
                None => map.serialize_entry(key, value)?,
                Some(Some(value)) => map.serialize_entry(key, value)?,
                Some(None) => {}
            }
        }
        for key in ["model", "stream", "stream_options"] {
            if let Some(Some(value)) = self.edit(key).filter(|_| !self.base.contains_key(key)) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

/// The JSON body of one attempt of `request` at `src` ([`AttemptBody`]).
pub(super) fn attempt_body<'a>(src: &Source, request: &'a Request, stream: bool) -> AttemptBody<'a> {
    let base = gateway_core::translate::request_body(request, src.protocol, src.max_tokens);
    let kind = wire_kind(src, request);
    let model = kind.takes_model().then(|| json!(src.model));
    let options = base.get("stream_options");
    // Only the kinds that stream events are asked for a stream (a binary answer comes as its
    // body either way).
    let (stream, stream_options) = if !stream || !kind.streams() {
        (None, None)
    } else if matches!(kind, Kind::Responses | Kind::Messages) {
        // The usage comes with the terminal events (`response.completed`, `message_delta`): the
        // caller's options, if any, stay as written.
        (Some(json!(true)), options.cloned())
    } else if !src.stream_options {
        // A deployment that refuses `stream_options` gets none; the usage is not asked for.
        (Some(json!(true)), None)
    } else {
        // The caller's options, with the usage always asked for: it settles the token quota.
        let mut options = match options {
            Some(Value::Object(options)) => options.clone(),
            _ => Object::new(),
        };
        options.insert("include_usage".into(), json!(true));
        (Some(json!(true)), Some(Value::Object(options)))
    };
    AttemptBody { base, model, stream, stream_options }
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

/// What one attempt sends: a JSON body to its kind's endpoint (sent on the source's pooled
/// client, see [`crate::wire`]), or a request reqwest builds (a form, a stored object's route).
pub(super) enum Sent {
    Json { kind: Kind, headers: HeaderMap, body: Bytes },
    Built(reqwest::RequestBuilder),
}

/// The request of one attempt of `request` at `src` (`stream`: asked for as a stream), or
/// why its body cannot be written as JSON.
pub(super) fn build(src: &Source, request: &Request, stream: bool) -> Result<Sent, serde_json::Error> {
    // The source's headers carry its key; an Anthropic source gets the version and the
    // caller's headers too.
    let mut headers = src.headers.clone();
    if src.protocol == Protocol::Anthropic {
        crate::anthropic::pass_on(src, request, &mut headers);
    }
    let builder = match (request.form(), request.target()) {
        (None, None) => {
            let body = serde_json::to_vec(&attempt_body(src, request, stream))?;
            return Ok(Sent::Json { kind: wire_kind(src, request), headers, body: Bytes::from(body) });
        }
        (_, Some(target)) => {
            let method = match target.method {
                Method::Get => reqwest::Method::GET,
                Method::Post => reqwest::Method::POST,
                Method::Delete => reqwest::Method::DELETE,
            };
            let query = if target.query.is_empty() { String::new() } else { format!("?{}", target.query) };
            src.client.request(method, format!("{}/{}{query}", src.base_url, target.path))
        }
        (Some(_), None) => src.client.request(reqwest::Method::POST, src.endpoint(wire_kind(src, request)).to_string()),
    };
    let builder = builder.headers(headers);
    Ok(Sent::Built(match request.form() {
        Some(form) => builder.multipart(multipart(src, request, form)),
        // A stored object's route carries no body (its `cancel` a POST without one).
        None => builder,
    }))
}
