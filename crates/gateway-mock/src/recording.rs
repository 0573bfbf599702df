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
    /// Every header, as sent.
    pub headers: HeaderMap,
    /// The body exactly as it arrived (lossily decoded as UTF-8).
    pub raw: String,
    /// The body as JSON; `Value::Null` when it is not JSON.
    pub body: Value,
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
