//! A streamed call past its commit point (SPEC §13): [`ChatStream`] yields the provider's
//! chunks as they arrive. A relay task owns the attempt's slot (permit, the account's AIMD
//! place, probe lease) and reads the provider a few chunks ahead of the caller, so the attempt
//! ends on time whatever the caller does:
//! - `[DONE]` settles it as a success (its usage settles the token quota); a break after the
//!   commit point is recorded on the gate and health as its class says and ends the stream
//!   with a [`StreamError`], never with a clean-looking end;
//! - a caller that drops the stream cancels the upstream request; if every choice had already
//!   finished, the attempt still counts as the success it was, else the call ends cancelled
//!   and nothing is recorded;
//! - a caller that stops reading holds the attempt no longer than the source's timeout from
//!   the attempt's start: then the slot is released (nothing recorded: the provider was not at
//!   fault) and the stream ends with a `timeout` [`StreamError`].
//!
//! The settling runs on the relay task, tracked with the client's releases, so a dropped
//! stream cannot cut it short.

use crate::admission::SourceAdmission;
use crate::call::{CallGuard, Ending, Facts, settle};
use crate::delivery::Committed;
use crate::partition::Partition;
use crate::slot::Slot;
use futures_util::Stream;
use gateway_core::outcome::OutcomeClass;
use gateway_core::ports::ChunkSource;
use gateway_core::request::{Kind, Outcome, Response, Usage};
use gateway_core::stream::{Assembly, Chunk, finishes};
use gateway_core::telemetry::CallResult;
use gateway_core::time::Timestamp;
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Chunks the relay reads ahead of the caller.
const READ_AHEAD: usize = 32;

/// A stream that broke off after its commit point: what reached the caller cannot be taken
/// back, so the call ends here (it was recorded on the source's gate and health).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the stream from {source_name} broke off after it began: {class}({detail})")]
pub struct StreamError {
    /// The source that was streaming.
    pub source_name: String,
    /// How it broke off.
    pub class: OutcomeClass,
    /// The adapter's detail (`watchdog`, `truncated_stream`, `error_in_stream`…).
    pub detail: String,
}

/// The chunks of a streamed call (chat, Responses events, legacy completions), from its commit
/// point on.
pub struct ChatStream {
    kind: Kind,
    chunks: Pin<Box<dyn Stream<Item = Result<Chunk, StreamError>> + Send>>,
    source: String,
    attempts: u32,
    request_id: Option<String>,
}

impl std::fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStream").field("source", &self.source).field("attempts", &self.attempts).finish_non_exhaustive()
    }
}

/// How the relay ended the stream, when not cleanly (read once the chunks before it are).
type StreamEnding = Arc<Mutex<Option<StreamError>>>;

impl ChatStream {
    /// The stream of `committed`, relayed and settled through `admission` in `scope` on a task
    /// of its own; `guard` ends the call.
    pub(crate) fn new(admission: Arc<SourceAdmission>, scope: Arc<Partition>, committed: Committed, guard: CallGuard) -> Self {
        let (source, kind) = (committed.facts.name.clone(), committed.kind);
        let attempts = u32::try_from(guard.state.attempts_made() + 1).unwrap_or(u32::MAX);
        let request_id = committed.rest.request_id().map(str::to_owned);
        let timeout = scope.policy.sources.get(committed.facts.source).map(|s| s.timeout).unwrap_or_default();
        let deadline = committed.facts.started.saturating_add(timeout);
        let (sender, receiver) = mpsc::channel(READ_AHEAD);
        let ending: StreamEnding = Arc::default();
        let relay = Relay {
            kind,
            admission: admission.clone(),
            scope,
            guard,
            open: Some(Open { rest: committed.rest, slot: committed.slot, facts: committed.facts }),
            usage: None,
            finished: BTreeMap::new(),
            deadline,
            ending: ending.clone(),
        };
        admission.holders.releases.spawn(relay.run(committed.preamble, sender));
        let chunks = futures_util::stream::unfold((receiver, ending), |(mut receiver, ending)| async move {
            match receiver.recv().await {
                Some(chunk) => Some((Ok(chunk), (receiver, ending))),
                None => {
                    let error = ending.lock().unwrap_or_else(PoisonError::into_inner).take()?;
                    Some((Err(error), (receiver, ending)))
                }
            }
        });
        ChatStream { kind, chunks: Box::pin(chunks), source, attempts, request_id }
    }

    /// A whole answer, already settled, as the chunks of a stream.
    pub(crate) fn replay(response: Response) -> Self {
        let source = response.source().unwrap_or_default().to_owned();
        let attempts = response.attempts();
        let request_id = response.request_id().map(str::to_owned);
        let chunks = gateway_core::stream::chunks_of(&response).into_iter().map(Ok);
        ChatStream { kind: response.kind(), chunks: Box::pin(futures_util::stream::iter(chunks)), source, attempts, request_id }
    }

    /// The kind of call streamed: the dialect of its chunks.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The source streaming.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The attempts the call made, this one included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The provider's id of the request (its `x-request-id`), when it gave one.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// The next chunk; `None` once the stream ended as it should.
    pub async fn next(&mut self) -> Option<Result<Chunk, StreamError>> {
        futures_util::StreamExt::next(self).await
    }

    /// Reads the stream to its end and assembles the whole answer it streamed (a
    /// `chat.completion`, a `response`, a `text_completion`), chunk by chunk.
    pub async fn completion(mut self) -> Result<Response, StreamError> {
        let mut assembly = Assembly::of(self.kind);
        while let Some(chunk) = self.next().await {
            assembly.push(&chunk?);
        }
        Ok(assembly.finish().served_by(&self.source, self.attempts).with_request_id(self.request_id.clone()))
    }
}

impl Stream for ChatStream {
    type Item = Result<Chunk, StreamError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.chunks.as_mut().poll_next(cx)
    }
}

/// The open attempt of a stream.
struct Open {
    rest: Box<dyn ChunkSource>,
    slot: Slot,
    facts: Facts,
}

/// The relay task of one stream.
struct Relay {
    kind: Kind,
    admission: Arc<SourceAdmission>,
    scope: Arc<Partition>,
    guard: CallGuard,
    /// `None` once the attempt was settled or let go.
    open: Option<Open>,
    usage: Option<Usage>,
    /// Per choice index, whether it has its finish reason.
    finished: BTreeMap<u64, bool>,
    /// The attempt's start plus the source's timeout.
    deadline: Timestamp,
    ending: StreamEnding,
}

/// What the caller did with a chunk handed on.
enum Handed {
    Taken,
    /// The caller dropped the stream.
    Gone,
    /// The caller did not read it before the deadline.
    Stalled,
}

impl Relay {
    async fn run(mut self, preamble: Vec<Chunk>, sender: mpsc::Sender<Chunk>) {
        for chunk in preamble {
            if !self.hand_on(chunk, &sender).await {
                return;
            }
        }
        loop {
            let Some(open) = self.open.as_mut() else { return };
            let next = tokio::select! {
                biased;
                () = sender.closed() => return self.caller_gone().await,
                next = open.rest.next_chunk() => next,
            };
            match next {
                Some(Ok(chunk)) => {
                    if !self.hand_on(chunk, &sender).await {
                        return;
                    }
                }
                None => return self.end(Outcome::new(OutcomeClass::Success, "http_200"), CallResult::Ok).await,
                Some(Err(outcome)) => {
                    let error = StreamError { source_name: open.facts.name.clone(), class: outcome.class, detail: outcome.detail.clone() };
                    self.end(outcome, CallResult::StreamBroken).await;
                    *self.ending.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
                    return;
                }
            }
        }
    }

    /// Hands `chunk` on to the caller; whether the stream goes on.
    async fn hand_on(&mut self, chunk: Chunk, sender: &mpsc::Sender<Chunk>) -> bool {
        self.note(&chunk);
        let left = self.deadline.saturating_since(self.admission.clock.now());
        let handed = match tokio::time::timeout(left, sender.send(chunk)).await {
            Ok(Ok(())) => Handed::Taken,
            Ok(Err(_)) => Handed::Gone,
            Err(_) => Handed::Stalled,
        };
        match handed {
            Handed::Taken => true,
            Handed::Gone => {
                self.caller_gone().await;
                false
            }
            Handed::Stalled => {
                // Not the provider's fault: nothing is recorded; the slot goes back.
                let name = self.open.take().map(|open| open.facts.name).unwrap_or_default();
                self.guard.end(CallResult::Cancelled);
                let error = StreamError { source_name: name, class: OutcomeClass::Transient, detail: "timeout".to_owned() };
                *self.ending.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
                false
            }
        }
    }

    fn note(&mut self, chunk: &Chunk) {
        if let Some(usage) = Usage::of(chunk) {
            self.usage = Some(self.usage.map_or(usage, |before| before.then(usage)));
        }
        finishes(self.kind, chunk, &mut self.finished);
    }

    /// The caller dropped the stream: the answer it had is the success it was if every choice
    /// had finished; else the call ends cancelled (the guard says so) and the slot goes back.
    async fn caller_gone(&mut self) {
        if !self.finished.is_empty() && self.finished.values().all(|f| *f) {
            self.end(Outcome::new(OutcomeClass::Success, "http_200"), CallResult::Ok).await;
        } else {
            self.open = None;
        }
    }

    /// Settles the attempt with `outcome` and ends the call with `result`.
    async fn end(&mut self, outcome: Outcome, result: CallResult) {
        let Some(open) = self.open.take() else { return };
        // The provider's own outcome ends the stream: dropping the chunk source closes it.
        drop(open.rest);
        let usage = self.usage;
        let now = self.admission.clock.now();
        let ending = Ending { outcome: &outcome, usage, at: now };
        let consumed_budget = self.guard.state.machine.on_attempt_ended(open.facts.source, outcome.class, now);
        settle(&self.admission, &self.scope, &mut self.guard.state, open.slot, &open.facts, ending, consumed_budget).await;
        self.guard.end(result);
    }
}
