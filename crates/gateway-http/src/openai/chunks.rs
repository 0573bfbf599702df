//! The chunk sources of a streamed attempt: a whole answer replayed as chunks, the SSE reader
//! under the watchdog, the deadline and the size caps, and the structured check at a stream's
//! end.

use super::Head;
use super::bytes::{next_piece, read_bound};
use super::{error_in_answer, transient};
use crate::classify::NotFound;
use crate::held::Held;
use crate::pace::Pace;
use crate::structured::Schemas;
use crate::{HttpLimits, Source};
use async_trait::async_trait;
use gateway_core::outcome::OutcomeClass;
use gateway_core::ports::ChunkSource;
use gateway_core::request::{Kind, Outcome, Structured};
use gateway_core::request::{RateSignal, answers_otherwise};
use gateway_core::stream::{Assembly, Chunk, commits, ends_with_done, failure_of, finishes};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A whole answer's chunks.
pub(super) struct Replayed {
    chunks: std::collections::VecDeque<Chunk>,
    head: Head,
}

impl Replayed {
    /// Replays `chunks`, the chunks of a whole answer whose head said `head`.
    pub(super) fn new(chunks: std::collections::VecDeque<Chunk>, head: Head) -> Self {
        Replayed { chunks, head }
    }
}

#[async_trait]
impl ChunkSource for Replayed {
    async fn next_chunk(&mut self) -> Option<Result<Chunk, Outcome>> {
        self.chunks.pop_front().map(Ok)
    }

    fn request_id(&self) -> Option<&str> {
        self.head.request_id.as_deref()
    }

    fn rate(&self) -> Option<RateSignal> {
        self.head.rate
    }
}

/// A stream in the source's dialect, reaching the call in the caller's
/// ([`gateway_core::translate::Stream`]): each event becomes the events it makes, and a clean
/// end the events that end the caller's.
pub(super) struct Translated {
    inner: Box<dyn ChunkSource>,
    translation: gateway_core::translate::Stream,
    pending: std::collections::VecDeque<Chunk>,
    ended: bool,
}

impl Translated {
    /// Translates `inner`'s events with `translation`.
    pub(super) fn new(inner: Box<dyn ChunkSource>, translation: gateway_core::translate::Stream) -> Self {
        Translated { inner, translation, pending: std::collections::VecDeque::new(), ended: false }
    }
}

#[async_trait]
impl ChunkSource for Translated {
    async fn next_chunk(&mut self) -> Option<Result<Chunk, Outcome>> {
        loop {
            if let Some(chunk) = self.pending.pop_front() {
                return Some(Ok(chunk));
            }
            if self.ended {
                return None;
            }
            match self.inner.next_chunk().await {
                Some(Ok(event)) => self.pending.extend(self.translation.push(event)),
                Some(Err(outcome)) => return Some(Err(outcome)),
                None => {
                    self.ended = true;
                    self.pending.extend(self.translation.finish());
                }
            }
        }
    }

    fn request_id(&self) -> Option<&str> {
        self.inner.request_id()
    }

    fn rate(&self) -> Option<RateSignal> {
        self.inner.rate()
    }

    fn hold_to_end(&mut self) {
        self.inner.hold_to_end();
    }
}

/// What of a stream its reader holds under the attempt's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holding {
    /// The events up to the commit point (the call holds them until it commits); after it each
    /// event is relayed, and only the stream's cap applies.
    UntilCommit,
    /// Every event (the stream is assembled into a whole answer, or held by the call to its
    /// validated end).
    Everything,
}

/// `data:` events of an SSE response, one chunk at a time. A chat or legacy completions stream
/// ends with `[DONE]` (or closes once every choice has its finish reason); a Responses stream
/// closes after its terminal event, a `response.failed` one ending it with the failure's
/// outcome; an `error` event, in either shape (`{"error": {…}}`, or a Responses `{"type":
/// "error", "code", "message"}`), ends it with the error's class.
pub(super) struct Sse {
    response: reqwest::Response,
    kind: Kind,
    buffer: Vec<u8>,
    /// Bytes of `buffer` known to hold no line end.
    scanned: usize,
    /// Longest event (a line).
    max_event: usize,
    /// The attempt's share of what is held, and what of the stream it holds.
    held: Held,
    holding: Holding,
    /// Bytes held for the events before the commit point, handed back once they went on.
    preamble_bytes: usize,
    /// Bytes read of the stream, the most it may carry, and the pace it is read at.
    streamed: u64,
    max_stream: u64,
    pace: Pace,
    watchdog: Option<Duration>,
    deadline: Instant,
    /// Where the watchdog's wait began: the attempt's start until the commit point, then the
    /// last chunk.
    watch_from: Instant,
    committed: bool,
    /// Per choice index, whether it has its finish reason.
    choices: BTreeMap<u64, bool>,
    not_found: NotFound,
    protocol: gateway_core::request::Protocol,
    head: Head,
    /// The connection has closed (what is left in the buffer is the last of it).
    eof: bool,
    done: bool,
}

impl Sse {
    /// Reads the events of `response`, an attempt at `src` that started at `started` and must
    /// end by `deadline`, holding what `holding` says under `held`.
    pub(super) fn new(
        response: reqwest::Response,
        src: &Source,
        kind: Kind,
        limits: &HttpLimits,
        (held, holding): (Held, Holding),
        (started, deadline): (Instant, Instant),
        head: Head,
    ) -> Self {
        Sse {
            response,
            kind,
            buffer: Vec::new(),
            scanned: 0,
            max_event: limits.max_event_bytes,
            held,
            holding,
            preamble_bytes: 0,
            streamed: 0,
            max_stream: src.max_stream_bytes.unwrap_or(limits.max_stream_bytes),
            pace: Pace::new(limits.max_stream_bytes_per_s, started),
            watchdog: src.watchdog,
            deadline,
            watch_from: started,
            committed: false,
            choices: BTreeMap::new(),
            not_found: src.not_found,
            protocol: src.protocol,
            head,
            eof: false,
            done: false,
        }
    }

    /// The next complete `data:` payload in the buffer, if one is there.
    fn buffered_event(&mut self) -> Option<Result<String, Outcome>> {
        while let Some(end) = self.buffer[self.scanned..].iter().position(|&b| b == b'\n').map(|at| self.scanned + at) {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            self.scanned = 0;
            let Ok(line) = std::str::from_utf8(&line) else { return Some(Err(transient("malformed_sse"))) };
            if let Some(data) = line.trim_end_matches(['\r', '\n']).strip_prefix("data:") {
                return Some(Ok(data.trim().to_owned()));
            }
            // Comments, `event:` and `id:` lines, blank separators: nothing to relay.
        }
        self.scanned = self.buffer.len();
        None
    }

    /// Whether every choice seen has its finish reason (a stream that closes then is whole,
    /// even without `[DONE]`).
    fn finished(&self) -> bool {
        !self.choices.is_empty() && self.choices.values().all(|finished| *finished)
    }

    /// Reads more bytes within the watchdog and the deadline.
    async fn fill(&mut self) -> Result<(), Outcome> {
        let bound = read_bound(self.watchdog, self.watch_from, self.deadline);
        match next_piece(&mut self.response, &mut self.pace, bound).await? {
            Some(bytes) => {
                self.streamed += bytes.len() as u64;
                if self.streamed > self.max_stream {
                    return Err(Outcome::too_large("stream_too_large"));
                }
                self.buffer.extend_from_slice(&bytes);
                if self.buffer.len() > self.max_event {
                    return Err(Outcome::too_large("event_too_large"));
                }
                Ok(())
            }
            None if !self.eof => {
                self.eof = true;
                if !self.buffer.is_empty() {
                    // The last line may lack its line end.
                    self.buffer.push(b'\n');
                }
                Ok(())
            }
            None => Err(transient("truncated_stream")),
        }
    }

    /// Holds an event of `bytes` if the call holds it: every event of an assembled stream, and
    /// those up to the commit point of a relayed one (handed back at the first event after it,
    /// when the call has passed them on).
    fn hold(&mut self, bytes: usize) -> Result<(), Outcome> {
        match self.holding {
            Holding::Everything => self.held.take(bytes),
            Holding::UntilCommit if !self.committed => {
                self.held.take(bytes)?;
                self.preamble_bytes += bytes;
                Ok(())
            }
            Holding::UntilCommit => {
                if self.preamble_bytes > 0 {
                    self.held.give_back(std::mem::take(&mut self.preamble_bytes));
                }
                Ok(())
            }
        }
    }

    /// Notes what `event` says of the stream: the commit point, the watchdog's restart, the
    /// choices and their finish (a Responses stream's terminal event).
    fn note(&mut self, event: &Chunk) {
        if self.committed || commits(self.kind, event) {
            self.committed = true;
            self.watch_from = Instant::now();
        }
        finishes(self.kind, event, &mut self.choices);
    }

    /// The outcome an event ends the stream with: an error event, or a failed response.
    fn failure(&self, event: &Chunk) -> Option<Outcome> {
        if let Some(error) = event.get("error").filter(|e| e.is_object()) {
            return Some(error_in_answer((self.not_found, self.protocol), error, "error_in_stream"));
        }
        if event.get("type").and_then(Value::as_str) == Some("error") {
            return Some(error_in_answer((self.not_found, self.protocol), &Value::Object(event.clone()), "error_in_stream"));
        }
        failure_of(self.kind, event)
    }
}

#[async_trait]
impl ChunkSource for Sse {
    async fn next_chunk(&mut self) -> Option<Result<Chunk, Outcome>> {
        if self.done {
            return None;
        }
        loop {
            let data = match self.buffered_event() {
                Some(Ok(data)) => data,
                Some(Err(outcome)) => return Some(Err(outcome)),
                None if self.finished() && (self.eof || !ends_with_done(self.kind)) => {
                    self.done = true;
                    return None;
                }
                None => match self.fill().await {
                    Ok(()) => continue,
                    Err(outcome) => return Some(Err(outcome)),
                },
            };
            if data == "[DONE]" {
                self.done = true;
                return None;
            }
            if let Err(outcome) = self.hold(data.len()) {
                return Some(Err(outcome));
            }
            return Some(match serde_json::from_str::<Value>(&data) {
                Ok(Value::Object(event)) => match self.failure(&event) {
                    Some(outcome) => Err(outcome),
                    None => {
                        self.note(&event);
                        Ok(event)
                    }
                },
                _ => Err(transient("malformed_sse")),
            });
        }
    }

    fn request_id(&self) -> Option<&str> {
        self.head.request_id.as_deref()
    }

    fn rate(&self) -> Option<RateSignal> {
        self.head.rate
    }

    /// The caller holds the whole stream: every event counts, as for an assembled one.
    fn hold_to_end(&mut self) {
        self.holding = Holding::Everything;
    }
}

/// A stream whose text answers are checked against the request's structure when it ends: one
/// that fails ends it `ResultInvalid` instead of cleanly. (One that must be JSON and opens unlike
/// it is ended at its commit point by the call loop, before the caller sees it.)
pub(super) struct Checked {
    inner: Box<dyn ChunkSource>,
    kind: Kind,
    schemas: Arc<Schemas>,
    structured: Structured,
    texts: Texts,
    /// Whether some choice carried something (the commit point): a stream that never did is
    /// empty, not invalid, as a whole answer without a usable choice is.
    usable: bool,
    /// The attempt's share of what is held: the text kept is held under it.
    held: Held,
}

/// What a checked stream keeps of its text answers.
enum Texts {
    /// Chat: per choice index, its text so far, or `None` once it answers otherwise (a tool
    /// call, a refusal that says something, audio: not a text answer, not checked, as in a whole
    /// answer).
    Choices(BTreeMap<u64, Option<String>>),
    /// A Responses stream: its `response` so far (its text held as it comes).
    Assembled(Box<Assembly>),
}

impl Checked {
    /// Checks the text answers of `inner`, a stream of `kind`, against `structured` when it
    /// ends, holding the text it keeps under `held`.
    pub(super) fn new(inner: Box<dyn ChunkSource>, kind: Kind, schemas: Arc<Schemas>, structured: Structured, held: Held) -> Self {
        let texts = match kind {
            Kind::Responses => Texts::Assembled(Box::new(Assembly::of(kind))),
            _ => Texts::Choices(BTreeMap::new()),
        };
        Checked { inner, kind, schemas, structured, texts, usable: false, held }
    }

    fn note(&mut self, chunk: &Chunk) -> Result<(), Outcome> {
        self.usable = self.usable || commits(self.kind, chunk);
        let answers = match &mut self.texts {
            Texts::Assembled(assembly) => {
                if let Some(piece) = chunk.get("delta").and_then(Value::as_str) {
                    self.held.take(piece.len())?;
                }
                assembly.push(chunk);
                return Ok(());
            }
            Texts::Choices(answers) => answers,
        };
        for choice in chunk.get("choices").and_then(Value::as_array).into_iter().flatten() {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            let Some(delta) = choice.get("delta").and_then(Value::as_object) else { continue };
            let answer = answers.entry(index).or_insert_with(|| Some(String::new()));
            match (answers_otherwise(delta), answer.as_mut(), delta.get("content").and_then(Value::as_str)) {
                (true, text, _) => {
                    // Not a text answer: what was kept of it goes.
                    self.held.give_back(text.map_or(0, |t| t.len()));
                    *answer = None;
                }
                (false, Some(text), Some(piece)) => {
                    self.held.take(piece.len())?;
                    text.push_str(piece);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The first text answer that fails the check, and why.
    fn failing(&mut self) -> Option<Outcome> {
        let texts: Vec<String> = match std::mem::replace(&mut self.texts, Texts::Choices(BTreeMap::new())) {
            Texts::Choices(answers) => answers.into_values().flatten().collect(),
            Texts::Assembled(assembly) => assembly.finish().text_answers().map(str::to_owned).collect(),
        };
        // A usable answer's every text answer, blank ones too: as in a whole answer, a blank
        // choice is not JSON. (One with nothing usable is the call loop's `empty`.)
        let why = texts.iter().filter(|_| self.usable).find_map(|text| self.schemas.check(&self.structured, text).err())?;
        Some(Outcome::new(OutcomeClass::ResultInvalid, why.to_string()))
    }
}

#[async_trait]
impl ChunkSource for Checked {
    async fn next_chunk(&mut self) -> Option<Result<Chunk, Outcome>> {
        match self.inner.next_chunk().await {
            Some(Ok(chunk)) => Some(self.note(&chunk).map(|()| chunk)),
            None => self.failing().map(Err),
            broken => broken,
        }
    }

    fn request_id(&self) -> Option<&str> {
        self.inner.request_id()
    }

    fn rate(&self) -> Option<RateSignal> {
        self.inner.rate()
    }

    fn hold_to_end(&mut self) {
        self.inner.hold_to_end();
    }
}
