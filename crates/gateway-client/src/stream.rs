//! A streamed call past its commit point (SPEC §13): [`ChatStream`] yields the provider's
//! chunks as they arrive. It owns the attempt's slot (permit, AIMD in-flight count, probe lease)
//! until the stream ends or is dropped; dropping it cancels the upstream request. The end
//! settles the attempt like any other: `[DONE]` is a success (its usage settles the token
//! quota), a break after the commit point is recorded on the gate and health as its class says
//! and ends the stream with a [`StreamError`], never with a clean-looking end.

use crate::admission::SourceAdmission;
use crate::call::{CallGuard, Committed, Ending, settle};
use crate::scope::Scope;
use futures_util::Stream;
use gateway_core::outcome::OutcomeClass;
use gateway_core::request::{Outcome, Response, Usage};
use gateway_core::stream::{Chunk, assemble};
use gateway_core::telemetry::CallResult;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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

/// The chunks of a streamed chat call, from its commit point on.
pub struct ChatStream {
    chunks: Pin<Box<dyn Stream<Item = Result<Chunk, StreamError>> + Send>>,
    source: String,
    attempts: u32,
}

impl std::fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStream").field("source", &self.source).field("attempts", &self.attempts).finish_non_exhaustive()
    }
}

impl ChatStream {
    /// The stream of `committed`, settled through `admission` in `scope`; `guard` ends the call.
    pub(crate) fn new(admission: Arc<SourceAdmission>, scope: Arc<Scope>, committed: Committed, guard: CallGuard) -> Self {
        let source = committed.facts.name.clone();
        let attempts = u32::try_from(guard.state.attempts_made() + 1).unwrap_or(u32::MAX);
        let open = Open { rest: committed.rest, slot: committed.slot, facts: committed.facts };
        let relay = Relay { admission, scope, guard, preamble: committed.preamble.into(), open: Some(open), usage: None };
        let chunks = futures_util::stream::unfold(relay, |mut relay| async move { relay.next().await.map(|item| (item, relay)) });
        ChatStream { chunks: Box::pin(chunks), source, attempts }
    }

    /// A whole answer, already settled, as the chunks of a stream.
    pub(crate) fn replay(response: Response) -> Self {
        let source = response.source().unwrap_or_default().to_owned();
        let attempts = response.attempts();
        let chunks = gateway_core::stream::chunks_of(&response).into_iter().map(Ok);
        ChatStream { chunks: Box::pin(futures_util::stream::iter(chunks)), source, attempts }
    }

    /// The source streaming.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The attempts the call made, this one included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The next chunk; `None` once the stream ended as it should.
    pub async fn next(&mut self) -> Option<Result<Chunk, StreamError>> {
        futures_util::StreamExt::next(self).await
    }

    /// Reads the stream to its end and assembles the `chat.completion` it streamed.
    pub async fn completion(mut self) -> Result<Response, StreamError> {
        let mut chunks = Vec::new();
        while let Some(chunk) = self.next().await {
            chunks.push(chunk?);
        }
        Ok(assemble(&chunks).served_by(&self.source, self.attempts))
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
    rest: Box<dyn gateway_core::ports::ChunkSource>,
    slot: crate::slot::Slot,
    facts: crate::call::Facts,
}

struct Relay {
    admission: Arc<SourceAdmission>,
    scope: Arc<Scope>,
    guard: CallGuard,
    preamble: VecDeque<Chunk>,
    /// `None` once the attempt was settled.
    open: Option<Open>,
    usage: Option<Usage>,
}

impl Relay {
    async fn next(&mut self) -> Option<Result<Chunk, StreamError>> {
        if let Some(chunk) = self.preamble.pop_front() {
            self.note(&chunk);
            return Some(Ok(chunk));
        }
        let open = self.open.as_mut()?;
        match open.rest.next_chunk().await {
            Some(Ok(chunk)) => {
                self.note(&chunk);
                Some(Ok(chunk))
            }
            None => {
                self.end(Outcome::new(OutcomeClass::Success, "http_200"), CallResult::Ok).await;
                None
            }
            Some(Err(outcome)) => {
                let error = StreamError { source_name: open.facts.name.clone(), class: outcome.class, detail: outcome.detail.clone() };
                self.end(outcome, CallResult::StreamBroken).await;
                Some(Err(error))
            }
        }
    }

    fn note(&mut self, chunk: &Chunk) {
        if let Some(usage) = Usage::of(chunk) {
            self.usage = Some(usage);
        }
    }

    /// Settles the attempt with `outcome` and ends the call with `result`.
    async fn end(&mut self, outcome: Outcome, result: CallResult) {
        let Some(open) = self.open.take() else { return };
        let tokens = self.usage.map(|u| u.total());
        let now = self.admission.clock.now();
        let ending = Ending { outcome: &outcome, tokens, at: now };
        settle(&self.admission, &self.scope, &mut self.guard.state, open.slot, &open.facts, ending).await;
        self.guard.end(Some(result));
    }
}
