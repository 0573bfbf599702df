//! What the mock server received: one [`Received`] per request, kept in arrival order by a
//! [`Recording`] the test reads.

use axum::http::HeaderMap;
use serde_json::Value;
use std::sync::{Arc, Mutex, PoisonError};

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Received {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query string, without `?` (empty: none).
    pub query: String,
    /// Every header, as sent.
    pub headers: HeaderMap,
    /// The body exactly as it arrived (lossily decoded as UTF-8).
    pub raw: String,
    /// The body as JSON; `Value::Null` when it is not JSON.
    pub body: Value,
    /// The body's bytes, exactly as they arrived.
    pub bytes: bytes::Bytes,
}

/// One part of a multipart form as it arrived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormPart {
    /// Its field name.
    pub name: String,
    /// Its file name, for a file part.
    pub filename: Option<String>,
    /// Its content type, if it had one.
    pub content_type: Option<String>,
    /// Its bytes.
    pub data: bytes::Bytes,
}

impl Received {
    /// The text of the last chat message: its `content` string, or its text parts joined by a
    /// space; empty when the body has no messages.
    pub fn last_text(&self) -> String {
        let Some(last) = self.body["messages"].as_array().and_then(|m| m.last()) else { return String::new() };
        match &last["content"] {
            Value::String(text) => text.clone(),
            Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(" "),
            _ => String::new(),
        }
    }

    /// Whether the body asks for a stream (`"stream": true`).
    pub fn wants_stream(&self) -> bool {
        self.body["stream"] == Value::Bool(true)
    }

    /// The parts of a `multipart/form-data` body, in order (`None` for another body, or one
    /// that cannot be read as a form).
    pub fn form(&self) -> Option<Vec<FormPart>> {
        let kind = self.headers.get("content-type")?.to_str().ok()?;
        let boundary = kind.split(';').find_map(|p| p.trim().strip_prefix("boundary="))?.trim_matches('"');
        let delimiter = format!("--{boundary}").into_bytes();
        let body = &self.bytes[..];
        let mut starts = Vec::new();
        let mut at = 0;
        while let Some(found) = find(&body[at..], &delimiter) {
            starts.push(at + found);
            at += found + delimiter.len();
        }
        let mut parts = Vec::new();
        for pair in starts.windows(2) {
            let segment = &body[pair[0] + delimiter.len()..pair[1]];
            let segment = segment.strip_prefix(b"\r\n")?.strip_suffix(b"\r\n")?;
            let split = find(segment, b"\r\n\r\n")?;
            let head = std::str::from_utf8(&segment[..split]).ok()?;
            let data = self.bytes.slice_ref(&segment[split + 4..]);
            let (mut name, mut filename, mut content_type) = (None, None, None);
            for line in head.split("\r\n") {
                let (header, value) = line.split_once(':')?;
                match header.trim().to_ascii_lowercase().as_str() {
                    "content-disposition" => {
                        for field in value.split(';').map(str::trim) {
                            if let Some(v) = field.strip_prefix("name=") {
                                name = Some(v.trim_matches('"').to_owned());
                            } else if let Some(v) = field.strip_prefix("filename=") {
                                filename = Some(v.trim_matches('"').to_owned());
                            }
                        }
                    }
                    "content-type" => content_type = Some(value.trim().to_owned()),
                    _ => {}
                }
            }
            parts.push(FormPart { name: name?, filename, content_type, data });
        }
        Some(parts)
    }

    /// The text of the form field `name`, if the body is a form that has it.
    pub fn form_value(&self, name: &str) -> Option<String> {
        let parts = self.form()?;
        let part = parts.into_iter().find(|p| p.name == name && p.filename.is_none())?;
        String::from_utf8(part.data.to_vec()).ok()
    }
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The requests a server received, in arrival order. Clones share one record.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    requests: Arc<Mutex<Vec<Received>>>,
}

impl Recording {
    pub(crate) fn push(&self, request: Received) {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).push(request);
    }

    /// Every request so far.
    pub fn all(&self) -> Vec<Received> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The requests whose last message's text contains `marker`.
    pub fn saying(&self, marker: &str) -> Vec<Received> {
        self.all().into_iter().filter(|r| r.last_text().contains(marker)).collect()
    }

    /// How many requests so far.
    pub fn len(&self) -> usize {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether none arrived yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
