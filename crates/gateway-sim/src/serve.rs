//! The simulated providers over loopback HTTP, speaking the OpenAI chat-completions dialect, so
//! that a soak can run through the real HTTP adapter (`--transport http`) and several processes
//! can share one set of providers and accounts (`--workers N`). Source `s` is served under
//! `http://<addr>/s/v1`. A refused connection is answered the way a relay's front proxy answers
//! when its backend refuses: 502 at once. A streamed request gets its headers at once and its
//! content after the provider's latency, so the adapter's watchdog sees the time to first token.

use crate::upstream::{Answer, Prompt, Providers, Reply};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::stream;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

/// A running provider server; stops when dropped.
pub struct ProviderServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl ProviderServer {
    /// Serves `providers` on a free port of 127.0.0.1.
    pub async fn start(providers: Arc<Providers>) -> std::io::Result<ProviderServer> {
        let app = axum::Router::new().route("/{source}/v1/chat/completions", axum::routing::post(chat)).with_state(providers);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the simulated provider server stopped");
            }
        });
        Ok(ProviderServer { addr, task })
    }

    /// The base URL of `source` (`http://127.0.0.1:<port>/<source>/v1`).
    pub fn base_url(&self, source: &str) -> String {
        Self::base_url_at(&format!("http://{}", self.addr), source)
    }

    /// The base URL of `source` on the server at `root` (`http://127.0.0.1:<port>`).
    pub fn base_url_at(root: &str, source: &str) -> String {
        format!("{}/{source}/v1", root.trim_end_matches('/'))
    }

    /// The server's root URL.
    pub fn root(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for ProviderServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert("content-type", axum::http::HeaderValue::from_static("application/json"));
    response
}

fn error(status: u16, code: &str, message: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, &json!({"error": {"message": message, "type": code, "code": code}}))
}

fn usage() -> Value {
    json!({"prompt_tokens": 200, "completion_tokens": 250, "total_tokens": 450})
}

async fn chat(State(providers): State<Arc<Providers>>, Path(source): Path<String>, body: axum::body::Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(400, "invalid_request_error", "the body is not JSON");
    };
    let messages = request["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let prompt = Prompt::of(messages.iter().filter_map(|m| m["content"].as_str()));
    let stream = request["stream"].as_bool().unwrap_or(false);
    let Some(reply) = providers.reply(&source, prompt) else {
        return error(404, "model_not_found", &format!("no provider {source:?}"));
    };
    match reply.answer {
        Answer::Refused => {
            tokio::time::sleep(reply.after).await;
            error(502, "bad_gateway", "connect() failed (111: Connection refused) while connecting to upstream")
        }
        Answer::Hang => std::future::pending().await,
        Answer::Status(status, code) => {
            tokio::time::sleep(reply.after).await;
            error(status, code, "simulated provider error")
        }
        Answer::Content(content) if stream => sse(reply, content),
        Answer::Content(content) => {
            tokio::time::sleep(reply.after).await;
            let message = json!({"role": "assistant", "content": content});
            json_response(
                StatusCode::OK,
                &json!({"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage()}),
            )
        }
    }
}

/// Headers now; the content after the reply's latency; then the usage and `[DONE]`. The reply
/// (and the account slot it holds) lives until the stream ends or the client goes away.
fn sse(reply: Reply, content: &'static str) -> Response {
    let chunk = json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}}]});
    let tail = json!({"object": "chat.completion.chunk", "choices": [], "usage": usage()});
    let (first, rest) = (format!("data: {chunk}\n\n"), format!("data: {tail}\n\ndata: [DONE]\n\n"));
    let body = stream::unfold((reply, 0u8), move |(reply, step)| {
        let event = [&first, &rest].get(usize::from(step)).map(|e| (*e).clone());
        async move {
            if step == 0 {
                tokio::time::sleep(reply.after).await;
            }
            Some((Ok::<_, Infallible>(event?), (reply, step + 1)))
        }
    });
    let mut response = Response::new(Body::from_stream(body));
    response.headers_mut().insert("content-type", axum::http::HeaderValue::from_static("text/event-stream"));
    response
}
