//! [`MockServer`]: a [`Responder`] served over HTTP/1 (axum) on a free port of 127.0.0.1, every
//! request recorded (unless built [`unrecorded`](Builder::unrecorded)) and its answer played:
//! the delay, the gate, then the head and a whole or streamed body.

use crate::answer::{Answer, Body, Frame};
use crate::recording::{Received, Recording};
use crate::responder::{Responder, answering};
use crate::timer::Timer;
use axum::response::Response;
use axum::serve::ListenerExt;
use futures_util::stream::{self, BoxStream, Stream, StreamExt};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

/// The base URL of `source` on the server whose root URL is `root`: `{root}/{source}/v1`.
pub fn source_url(root: &str, source: &str) -> String {
    format!("{}/{source}/v1", root.trim_end_matches('/'))
}

/// A running mock provider; stops accepting connections when dropped.
pub struct MockServer {
    addr: SocketAddr,
    recording: Recording,
    task: tokio::task::JoinHandle<()>,
}

/// How a [`MockServer`] is started.
#[derive(Clone, Copy, Debug)]
pub struct Builder {
    record: bool,
    max_body_bytes: usize,
    timer: Timer,
}

impl Default for Builder {
    fn default() -> Self {
        Builder { record: true, max_body_bytes: 16 << 20, timer: Timer::Tokio }
    }
}

struct Shared {
    responder: Box<dyn Responder>,
    recording: Option<Recording>,
    max_body_bytes: usize,
    timer: Timer,
}

impl Builder {
    /// Keeps no record of the requests (a long soak or a benchmark would only pay for one).
    pub fn unrecorded(mut self) -> Builder {
        self.record = false;
        self
    }

    /// Answers 413 to a request body over `bytes` (default 16 MiB).
    pub fn max_body_bytes(mut self, bytes: usize) -> Builder {
        self.max_body_bytes = bytes;
        self
    }

    /// Waits out the answers' delays and pauses with `timer` (default [`Timer::Tokio`]).
    pub fn timer(mut self, timer: Timer) -> Builder {
        self.timer = timer;
        self
    }

    /// Serves `answer` (what each request gets) on a free port of 127.0.0.1.
    pub async fn answering(self, answer: impl Fn(&Received) -> Answer + Send + Sync + 'static) -> std::io::Result<MockServer> {
        self.start(answering(answer)).await
    }

    /// Serves `responder` on a free port of 127.0.0.1.
    pub async fn start(self, responder: impl Responder) -> std::io::Result<MockServer> {
        let recording = Recording::default();
        let shared = Arc::new(Shared {
            responder: Box::new(responder),
            recording: self.record.then(|| recording.clone()),
            max_body_bytes: self.max_body_bytes,
            timer: self.timer,
        });
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let shared = shared.clone();
            async move { handle(&shared, request).await }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        // A small answer goes out when written, as a provider's does (no Nagle delay).
        let listener = listener.tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the mock server stopped");
            }
        });
        Ok(MockServer { addr, recording, task })
    }
}

impl MockServer {
    /// Serves `responder` on a free port of 127.0.0.1, recording every request.
    pub async fn start(responder: impl Responder) -> std::io::Result<MockServer> {
        Builder::default().start(responder).await
    }

    /// Serves `answer` (what each request gets) on a free port of 127.0.0.1, recording every
    /// request.
    pub async fn answering(answer: impl Fn(&Received) -> Answer + Send + Sync + 'static) -> std::io::Result<MockServer> {
        Builder::default().answering(answer).await
    }

    /// A server started otherwise than by default.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its root URL: `http://127.0.0.1:<port>`.
    pub fn root(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL of a provider served at the root: `http://127.0.0.1:<port>/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.root())
    }

    /// The base URL of `source` served under its own path: `http://127.0.0.1:<port>/<source>/v1`.
    pub fn source_url(&self, source: &str) -> String {
        source_url(&self.root(), source)
    }

    /// The record of its requests (empty if unrecorded); clones share it.
    pub fn recording(&self) -> Recording {
        self.recording.clone()
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.recording.all()
    }

    /// The requests so far whose last message's text contains `marker`.
    pub fn saying(&self, marker: &str) -> Vec<Received> {
        self.recording.saying(marker)
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(shared: &Shared, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, shared.max_body_bytes).await else {
        let error = serde_json::json!({"error": {"message": "the request body is over the mock's limit", "type": "invalid_request_error"}});
        return play(Answer::json(413, &error), shared.timer).await;
    };
    let received = Received {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        headers: parts.headers,
        raw: String::from_utf8_lossy(&bytes).into_owned(),
        body: serde_json::from_slice(&bytes).unwrap_or_default(),
        bytes,
    };
    let answer = shared.responder.answer(&received);
    if let Some(recording) = &shared.recording {
        recording.push(received);
    }
    play(answer, shared.timer).await
}

/// Waits as the answer says, then makes its response. What it holds is dropped on return, but
/// for a stream (it goes with the body) and a hang (it never returns).
async fn play(mut answer: Answer, timer: Timer) -> Response {
    timer.wait(answer.after).await;
    if let Some(gate) = answer.gate.take() {
        gate.pass().await;
    }
    let body = match std::mem::replace(&mut answer.body, Body::Whole(bytes::Bytes::new())) {
        Body::Whole(text) => axum::body::Body::from(text),
        Body::Frames(frames) => axum::body::Body::from_stream(played(frames, answer.held.take(), timer)),
        Body::Never => {
            let never: Infallible = std::future::pending().await;
            match never {}
        }
    };
    head(&answer, body)
}

/// The response of `answer` with `body`: its status and headers, or a 500 naming the one that
/// is not valid HTTP.
fn head(answer: &Answer, body: axum::body::Body) -> Response {
    let invalid = |what: String| {
        let mut response = Response::new(axum::body::Body::from(format!("gateway-mock: the answer's {what} is not valid HTTP")));
        *response.status_mut() = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
        response
    };
    let Ok(status) = axum::http::StatusCode::from_u16(answer.status) else { return invalid(format!("status {}", answer.status)) };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    for (name, value) in &answer.headers {
        let (Ok(n), Ok(v)) = (axum::http::HeaderName::from_bytes(name.as_bytes()), axum::http::HeaderValue::from_str(value)) else {
            return invalid(format!("header {name}: {value}"));
        };
        response.headers_mut().insert(n, v);
    }
    response
}

/// The body of a streamed answer: each `Data` frame sent as it comes, pauses and gates waited
/// out, a `Cut` breaking the connection. `held` lives until the stream ends or is dropped.
fn played(
    frames: BoxStream<'static, Frame>,
    held: Option<Box<dyn Send>>,
    timer: Timer,
) -> impl Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send {
    stream::unfold(Some((frames, held)), move |state| async move {
        let (mut frames, held) = state?;
        loop {
            match frames.next().await? {
                Frame::Data(text) => return Some((Ok(text.into()), Some((frames, held)))),
                Frame::Bytes(bytes) => return Some((Ok(bytes), Some((frames, held)))),
                Frame::Pause(delay) => timer.wait(delay).await,
                Frame::Hold(gate) => gate.pass().await,
                Frame::Cut => return Some((Err(std::io::Error::other("gateway-mock cuts the stream here")), None)),
            }
        }
    })
}
