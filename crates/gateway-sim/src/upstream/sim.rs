//! [`SimUpstream`]: the scenario's providers played in (virtual) time as an in-process
//! `Upstream`, applying the source's watchdog and timeout the way the HTTP adapter does.

use super::{Answer, Prompt, Providers, Reply, fails_the_check};
use crate::scenario::Scenario;
use async_trait::async_trait;
use gateway_core::outcome::OutcomeClass;
use gateway_core::policy::ScopePolicy;
use gateway_core::ports::{ChunkSource, Streamed, Upstream};
use gateway_core::request::{Attempt, Kind, Outcome, Protocol, RateSignal, Request, Response, Usage};
use gateway_core::stream::{Chunk, opening_failure};
use gateway_core::time::Clock;
use gateway_mock::Timer;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What a provider sees of `request`.
pub fn prompt_of(request: &Request) -> Prompt {
    Prompt::of(request.texts())
}

#[derive(Clone, Copy)]
struct SimSource {
    timeout: Duration,
    watchdog: Option<Duration>,
    /// How the provider's latencies and the adapter's bounds are waited out.
    timer: Timer,
    /// The dialect it answers in (its answers reach the call translated, as over HTTP).
    protocol: Protocol,
}

impl SimSource {
    /// The source as one attempt sees it: its watchdog applies only to a streamed attempt.
    fn streamed(self, streamed: bool) -> SimSource {
        SimSource { watchdog: self.watchdog.filter(|_| streamed), ..self }
    }
}

/// The scenario's providers as one in-process `Upstream`.
pub struct SimUpstream {
    providers: Arc<Providers>,
    sources: BTreeMap<String, SimSource>,
    /// Whom a 404 blames, as the HTTP adapter decides it from the scope's kinds.
    not_found: gateway_http::classify::NotFound,
}

impl SimUpstream {
    /// The providers of `scenario` behind the sources of `scope`, on `clock`, seeded, waiting
    /// with `timer` ([`Timer::Precise`] in real time, where tokio's late tick would be latency
    /// the scenario does not have; [`Timer::Tokio`] in virtual time).
    pub fn new(scenario: &Scenario, scope: &ScopePolicy, clock: Arc<dyn Clock>, seed: u64, timer: Timer) -> Self {
        let sources = scope
            .sources
            .iter()
            .map(|s| (s.name.clone(), SimSource { timeout: s.timeout, watchdog: s.watchdog, timer, protocol: s.protocol }))
            .collect();
        SimUpstream {
            providers: Arc::new(Providers::new(scenario, clock, seed)),
            sources,
            not_found: gateway_http::classify::NotFound::for_kinds(&scope.kinds),
        }
    }

    /// The providers it plays (for the accounts' figures at the end of a run).
    pub fn providers(&self) -> Arc<Providers> {
        self.providers.clone()
    }
}

fn fail(class: OutcomeClass, detail: &str) -> Attempt {
    Attempt::failure(class, detail, None)
}

/// The usage every simulated completion reports.
const USAGE: Usage = Usage { prompt_tokens: 200, completion_tokens: 250 };

/// How a reply begins, the way the HTTP adapter would see it: ended (after its delay), or the
/// content whose first token comes `after` the request.
enum Begun {
    Ended(Attempt),
    Content { src: SimSource, after: Duration, content: &'static str, reply: Reply },
}

impl SimUpstream {
    /// Plays the reply up to where its content would start (`Content` has not slept yet).
    /// `streamed`: the HTTP adapter would stream the attempt upstream (a stream, or a chat
    /// answer from a source with a watchdog), so the watchdog bounds the wait for headers too.
    async fn begin(&self, source: &str, request: &Request, streamed: bool) -> Begun {
        let (Some(src), Some(reply)) = (self.sources.get(source), self.providers.reply(source, prompt_of(request))) else {
            return Begun::Ended(fail(OutcomeClass::SourceDead, "unknown_source"));
        };
        let src = src.streamed(streamed);
        // The HTTP adapter's own bound on the wait for headers.
        let (header_wait, cut) = gateway_http::header_wait(src.timeout, src.watchdog, None);
        match reply.answer {
            Answer::Refused => {
                src.timer.wait(reply.after).await;
                Begun::Ended(fail(OutcomeClass::Transient, "connect"))
            }
            Answer::Hang => {
                src.timer.wait(header_wait).await;
                Begun::Ended(fail(OutcomeClass::Transient, cut))
            }
            Answer::Status(..) if reply.after >= header_wait => {
                src.timer.wait(header_wait).await;
                Begun::Ended(fail(OutcomeClass::Transient, cut))
            }
            Answer::Status(status, code) => {
                src.timer.wait(reply.after).await;
                // The HTTP adapter's own table, so both transports classify a reply alike.
                let status = axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
                let code = if src.protocol == Protocol::Anthropic { gateway_core::messages::error_type_of(status.as_u16()) } else { code };
                let (class, detail) = gateway_http::classify::classify_status(status, Some(code), self.not_found, src.protocol);
                Begun::Ended(fail(class, &detail).with_rate(reply.rate()))
            }
            Answer::Content(content) => Begun::Content { src, after: reply.after, content, reply },
        }
    }
}

/// Waits for the first token `after`, bounded as the HTTP adapter bounds it: the watchdog (when
/// the attempt is streamed from a source with one), else the timeout. `Err` is the cut-off.
async fn first_token(src: &SimSource, after: Duration) -> Result<(), Outcome> {
    if let Some(watchdog) = src.watchdog.filter(|w| after > *w && *w < src.timeout) {
        src.timer.wait(watchdog).await;
        return Err(Outcome::new(OutcomeClass::Transient, "watchdog"));
    }
    if after >= src.timeout {
        src.timer.wait(src.timeout).await;
        return Err(Outcome::new(OutcomeClass::Transient, "timeout"));
    }
    src.timer.wait(after).await;
    Ok(())
}

#[async_trait]
impl Upstream for SimUpstream {
    /// A whole answer. A source with a watchdog is streamed upstream over HTTP, so its first
    /// token is bounded by the watchdog here too (SPEC §13, one watchdog); without one, the
    /// whole answer by the timeout.
    async fn send(&self, source: &str, request: &Request) -> Attempt {
        let embeddings = request.kind() == Kind::Embeddings;
        let streamed = self.sources.get(source).is_some_and(|s| gateway_core::stream::streamed_upstream(request.kind(), s.watchdog));
        let (src, after, content, reply) = match self.begin(source, request, streamed).await {
            Begun::Content { src, after, content, reply } => (src, after, content, reply),
            Begun::Ended(attempt) => return attempt,
        };
        let rate = reply.rate();
        if let Err(outcome) = first_token(&src, after).await {
            // A streamed answer's head (and its headers) came at once; a whole one's never came.
            return Attempt::ended(outcome).with_rate(rate.filter(|_| streamed));
        }
        drop(reply);
        let (fail, success) = (|class, detail| fail(class, detail).with_rate(rate), |a: Attempt| a.with_rate(rate));
        if embeddings {
            return success(Attempt::success(Response::embedding_vectors(&[vec![0.5; 4]], Some(USAGE)), "http_200"));
        }
        if content.is_empty() {
            return fail(OutcomeClass::Transient, "empty");
        }
        // The adapters' rule for a whole answer (the invalid answer opens with prose).
        if let Some(outcome) = opening_failure(request.structured.as_ref(), std::iter::once(content)) {
            return success(Attempt::ended(outcome));
        }
        if fails_the_check(request, content) {
            return fail(OutcomeClass::ResultInvalid, "schema");
        }
        success(Attempt::success(self.providers.answer_for(request.kind(), src.protocol, content), "http_200"))
    }

    /// The chunks of the reply as the HTTP adapter reads them from the provider server: the
    /// content when its first token comes (under the watchdog), then the usage, then the end.
    async fn stream(&self, source: &str, request: &Request) -> Streamed {
        match self.begin(source, request, true).await {
            Begun::Content { src, after, content, reply } => {
                let invalid = fails_the_check(request, content);
                let rate = reply.rate();
                // The provider's chunks or named events in its own dialect (its latency comes
                // before the first), reaching the call in the request's.
                let wire = gateway_core::translate::wire_kind(request.kind(), src.protocol);
                let own = match wire {
                    Kind::Responses | Kind::Messages => gateway_core::stream::chunks_of(&self.providers.answer(wire, content)).into(),
                    _ => chat_chunks(content),
                };
                let mut translation = gateway_core::translate::Stream::of(request.kind(), src.protocol);
                let mut chunks: std::collections::VecDeque<Chunk> = own.into_iter().flat_map(|chunk| translation.push(chunk)).collect();
                chunks.extend(translation.finish());
                Streamed::Chunks(Box::new(SimChunks { wait: Some((src, after)), chunks, invalid, rate, _reply: reply }))
            }
            Begun::Ended(attempt) => Streamed::Ended(attempt),
        }
    }
}

/// The chunks of a simulated chat stream: the content, then the usage.
fn chat_chunks(content: &str) -> std::collections::VecDeque<Chunk> {
    [
        json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}),
        json!({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": USAGE.prompt_tokens, "completion_tokens": USAGE.completion_tokens}}),
    ]
    .into_iter()
    .filter_map(|chunk| chunk.as_object().cloned())
    .collect()
}

/// A simulated stream: after the first-token wait, its chunks (chat: the content, then the
/// usage; Responses: the provider's events of the whole answer), then the end. (A structured
/// request's invalid answer opens with prose: the call loop ends it at its commit point, as over
/// HTTP.) It holds the reply (and the account slot) until it is dropped.
struct SimChunks {
    wait: Option<(SimSource, Duration)>,
    chunks: std::collections::VecDeque<Chunk>,
    /// It fails the structured check at its end (as the HTTP adapter's check ends it).
    invalid: bool,
    /// What the reply's headers said (they come with the stream's head).
    rate: Option<RateSignal>,
    _reply: Reply,
}

#[async_trait]
impl ChunkSource for SimChunks {
    async fn next_chunk(&mut self) -> Option<Result<Chunk, Outcome>> {
        if let Some((src, after)) = self.wait.take()
            && let Err(outcome) = first_token(&src, after).await
        {
            return Some(Err(outcome));
        }
        match self.chunks.pop_front() {
            Some(chunk) => Some(Ok(chunk)),
            None if std::mem::take(&mut self.invalid) => Some(Err(Outcome::new(OutcomeClass::ResultInvalid, "schema"))),
            None => None,
        }
    }

    fn rate(&self) -> Option<RateSignal> {
        self.rate
    }
}
