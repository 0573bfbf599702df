//! Every row of the classification table (`classify.rs`), one test each, against a mock
//! provider on 127.0.0.1; plus streaming, the watchdog, limits, structured output, embeddings,
//! the request the provider receives, and key redaction.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// Real loopback I/O: the timeout and watchdog bounds are checked against the wall clock.
#![allow(clippy::disallowed_methods)]

mod support;

use gateway_core::outcome::OutcomeClass::{self, *};
use gateway_core::ports::Streamed;
use gateway_core::ports::Upstream;
use gateway_core::request::{Attempt, Message, Outcome, Request, Structured};
use gateway_core::stream::Chunk;
use gateway_core::time::WallClock;
use gateway_http::{HttpLimits, HttpUpstream};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{Mock, Reply, blackhole, chunk, completion, ok_json, scope, status};

/// A chat request (`_streamed` says what the test reads it as; a source with a watchdog is
/// streamed upstream either way).
fn chat(_streamed: bool) -> Request {
    Request::chat(vec![Message::user("hi")]).with("max_tokens", 16)
}

/// The attempt read as a stream to its end: every chunk, or how it ended.
async fn through_stream(reply: impl Fn() -> Reply + Send + Sync + 'static, extra: serde_json::Value) -> Result<Vec<Chunk>, Outcome> {
    let mock = Mock::start(move |_| reply()).await;
    let upstream = HttpUpstream::new(&[scope(&mock.url, extra)]).unwrap();
    let mut chunks = match upstream.stream("s1", &chat(true)).await {
        Streamed::Ended(attempt) => return Err(attempt.into_parts().0),
        Streamed::Chunks(chunks) => chunks,
    };
    let mut all = Vec::new();
    while let Some(chunk) = chunks.next_chunk().await {
        all.push(chunk?);
    }
    Ok(all)
}

async fn answer(reply: impl Fn() -> Reply + Send + Sync + 'static, extra: serde_json::Value, request: Request) -> Attempt {
    let mock = Mock::start(move |_| reply()).await;
    let upstream = HttpUpstream::new(&[scope(&mock.url, extra)]).unwrap();
    upstream.send("s1", &request).await
}

async fn class_of(reply: impl Fn() -> Reply + Send + Sync + 'static) -> (OutcomeClass, String) {
    let attempt = answer(reply, json!({}), chat(false)).await;
    (attempt.outcome().class, attempt.outcome().detail.clone())
}

fn error_body(code: &str) -> serde_json::Value {
    json!({"error": {"message": "nope", "type": "invalid_request_error", "code": code}})
}

#[path = "classification/answers.rs"]
mod answers;
#[path = "classification/requests.rs"]
mod requests;
#[path = "classification/streams.rs"]
mod streams;
