//! What the mock server sends for one request: an [`Answer`] (status, headers, a delay before
//! the head, an optional gate, and a body that is whole, a stream of [`Frame`]s, or never
//! comes).

use crate::gate::Gate;
use futures_util::stream::{self, BoxStream, Stream, StreamExt};
use serde_json::Value;
use std::time::Duration;

/// One piece of a streamed body, played in order.
#[derive(Debug)]
pub enum Frame {
    /// This text, sent as one body frame (one or more whole SSE events, or any text).
    Data(String),
    /// These bytes, sent as one body frame (a piece of audio).
    Bytes(bytes::Bytes),
    /// A wait before whatever comes next (the body's end, if nothing does).
    Pause(Duration),
    /// A wait until the gate lets this stream through.
    Hold(Gate),
    /// The connection breaks here: what was sent stays sent, nothing ends the body cleanly.
    Cut,
}

impl Frame {
    /// A `Data` frame.
    pub fn data(text: impl Into<String>) -> Frame {
        Frame::Data(text.into())
    }
}

/// The body of an answer.
pub(crate) enum Body {
    Whole(bytes::Bytes),
    Frames(BoxStream<'static, Frame>),
    /// The request is accepted and never answered.
    Never,
}

/// What one request gets. Built from one of the constructors, then adjusted: the server waits
/// [`after`](Answer::after), then for its [`gate`](Answer::gated), then sends the head and the
/// body. A value given to [`holding`](Answer::holding) lives as long as the answer is being
/// served: until the head is handed to the connection for a whole answer, until the stream ends
/// or the client goes away for a streamed one, until the client goes away for a hang.
pub struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) after: Duration,
    pub(crate) gate: Option<Gate>,
    pub(crate) body: Body,
    pub(crate) held: Option<Box<dyn Send>>,
}

impl Answer {
    /// `status` with an empty body and no headers.
    pub fn new(status: u16) -> Answer {
        Answer { status, headers: Vec::new(), after: Duration::ZERO, gate: None, body: Body::Whole(bytes::Bytes::new()), held: None }
    }

    /// `status` with `body` as `application/json`.
    pub fn json(status: u16, body: &Value) -> Answer {
        Answer::json_text(status, body.to_string())
    }

    /// `status` with `text` as an `application/json` body, as given (it need not be valid JSON).
    pub fn json_text(status: u16, text: impl Into<String>) -> Answer {
        Answer::new(status).header("content-type", "application/json").body(text)
    }

    /// 200 `text/event-stream` whose body is `frames`, played in order.
    pub fn sse(frames: impl IntoIterator<Item = Frame, IntoIter: Send + 'static>) -> Answer {
        Answer::sse_stream(stream::iter(frames))
    }

    /// 200 `text/event-stream` whose body is the frames `frames` yields as it yields them.
    pub fn sse_stream(frames: impl Stream<Item = Frame> + Send + 'static) -> Answer {
        let mut answer = Answer::new(200).header("content-type", "text/event-stream");
        answer.body = Body::Frames(frames.boxed());
        answer
    }

    /// 200 of `content_type` whose body is `frames`, played in order (audio sent in pieces).
    pub fn streamed(content_type: &str, frames: impl IntoIterator<Item = Frame, IntoIter: Send + 'static>) -> Answer {
        let mut answer = Answer::new(200).header("content-type", content_type);
        answer.body = Body::Frames(stream::iter(frames).boxed());
        answer
    }

    /// The request is read, then never answered: the connection stays open until the client
    /// gives up.
    pub fn hang() -> Answer {
        let mut answer = Answer::new(200);
        answer.body = Body::Never;
        answer
    }

    /// The same answer with `text` as its whole body.
    pub fn body(mut self, text: impl Into<String>) -> Answer {
        self.body = Body::Whole(text.into().into());
        self
    }

    /// `status` with `bytes` as its whole body, of `content_type` (audio, a file's bytes).
    pub fn bytes(status: u16, content_type: &str, bytes: impl Into<bytes::Bytes>) -> Answer {
        let mut answer = Answer::new(status).header("content-type", content_type);
        answer.body = Body::Whole(bytes.into());
        answer
    }

    /// The same answer with header `name` set to `value` (replacing one of the same name).
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Answer {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// The same answer, its head sent only `delay` after the request arrived.
    pub fn after(mut self, delay: Duration) -> Answer {
        self.after = delay;
        self
    }

    /// The same answer, held (after its delay) until `gate` lets it through.
    pub fn gated(mut self, gate: &Gate) -> Answer {
        self.gate = Some(gate.clone());
        self
    }

    /// The same answer, keeping `value` alive while it is served (an account's in-flight slot, a
    /// guard a test watches).
    pub fn holding(mut self, value: impl Send + 'static) -> Answer {
        self.held = Some(Box::new(value));
        self
    }

    /// The answer's status.
    pub fn status(&self) -> u16 {
        self.status
    }
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body = match &self.body {
            Body::Whole(text) => format!("{} bytes", text.len()),
            Body::Frames(_) => "a stream".to_owned(),
            Body::Never => "never".to_owned(),
        };
        f.debug_struct("Answer")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("after", &self.after)
            .field("gated", &self.gate.is_some())
            .field("body", &body)
            .finish()
    }
}
