//! A mock OpenAI-compatible provider on 127.0.0.1 (axum), answering each request with what the
//! test's handler says: a JSON body with any status and headers, an SSE stream with delays
//! between chunks, a stream that breaks off, or a big body; and a blackhole that accepts
//! connections and never answers.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use futures_util::stream;
use gateway_core::policy::{ScopeConfig, ScopePolicy};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the mock answers.
pub enum Reply {
    Json {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    Sse {
        chunks: Vec<(Duration, String)>,
    },
    /// Sends these chunks, then breaks the connection.
    Broken {
        chunks: Vec<String>,
    },
}

pub fn ok_json(body: serde_json::Value) -> Reply {
    Reply::Json { status: 200, headers: vec![], body: body.to_string() }
}

pub fn status(status: u16, body: serde_json::Value) -> Reply {
    Reply::Json { status, headers: vec![], body: body.to_string() }
}

pub fn completion(content: &str) -> serde_json::Value {
    serde_json::json!({
        "id": "c1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3}
    })
}

pub fn chunk(content: &str) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}}]})
    )
}

/// What the mock saw of one request.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub headers: HeaderMap,
    pub body: serde_json::Value,
}

pub struct Mock {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

impl Mock {
    pub async fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Mock {
        let handler: Handler = Arc::new(handler);
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let (handler, log) = (handler.clone(), log.clone());
            async move {
                let (parts, body) = request.into_parts();
                let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
                let seen = Seen {
                    path: parts.uri.path().to_owned(),
                    headers: parts.headers,
                    body: serde_json::from_slice(&bytes).unwrap_or_default(),
                };
                log.lock().unwrap().push(seen.clone());
                respond(handler(&seen))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Mock { url, seen }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn respond(reply: Reply) -> axum::response::Response {
    match reply {
        Reply::Json { status, headers, body } => {
            let mut response = axum::response::Response::new(Body::from(body));
            *response.status_mut() = StatusCode::from_u16(status).unwrap();
            response.headers_mut().insert("content-type", "application/json".parse().unwrap());
            for (name, value) in headers {
                response.headers_mut().insert(name, value.parse().unwrap());
            }
            response
        }
        Reply::Sse { chunks } => {
            let body = stream::unfold(chunks.into_iter(), |mut chunks| async move {
                let (delay, text) = chunks.next()?;
                tokio::time::sleep(delay).await;
                Some((Ok::<_, Infallible>(text), chunks))
            });
            let mut response = axum::response::Response::new(Body::from_stream(body));
            response.headers_mut().insert("content-type", "text/event-stream".parse().unwrap());
            response.headers_mut().insert("x-request-id", "req-mock".parse().unwrap());
            response
        }
        Reply::Broken { chunks } => {
            let items: Vec<Result<String, std::io::Error>> =
                chunks.into_iter().map(Ok).chain([Err(std::io::Error::other("mock breaks the connection"))]).collect();
            // A pause before the break lets the headers and the first chunks reach the client.
            let body = stream::unfold(items.into_iter(), |mut items| async move {
                let item = items.next()?;
                if item.is_err() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Some((item, items))
            });
            let mut response = axum::response::Response::new(Body::from_stream(body));
            response.headers_mut().insert("content-type", "text/event-stream".parse().unwrap());
            response
        }
    }
}

/// A listener that accepts connections and never answers.
pub async fn blackhole() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    url
}

/// A scope `chat` with one source `s1` at `url`, plus `extra` source keys.
pub fn scope(url: &str, extra: serde_json::Value) -> ScopePolicy {
    let mut source = serde_json::json!({"base_url": url, "api_key": "sk-test-secret", "model": "m1", "timeout_s": 5});
    if let Some(extra) = extra.as_object() {
        for (k, v) in extra {
            source[k] = v.clone();
        }
    }
    let config: ScopeConfig = serde_json::from_value(serde_json::json!({
        "breaker": {"fail_threshold": 5, "cooldown_s": 60},
        "sources": {"s1": source}
    }))
    .unwrap();
    config.resolve("chat").unwrap()
}
