//! How a call delivers its answer, as a type: [`Whole`] (the answer when the call ends) or
//! [`Chunks`] (a stream from its commit point on, SPEC §13). The call loop is generic over it,
//! so a whole call cannot deliver a stream: its `Committed` and `Stream` are
//! [`Infallible`], and no caller has a stream arm to get wrong.

use crate::admission::SourceAdmission;
use crate::call::{CallGuard, Facts};
use crate::partition::Partition;
use crate::slot::Slot;
use crate::stream::ChatStream;
use gateway_core::call::{CallMachine, Streaming};
use gateway_core::ports::{ChunkSource, Streamed, Upstream};
use gateway_core::request::{Attempt, Kind, Outcome, Request, Response, Structured};
use gateway_core::stream::{Chunk, StructuredStream};
use gateway_core::time::Clock;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

/// What a call delivered: a whole answer, or a stream past its commit point (`S`).
// Made once per call and matched at once: boxing the stream would cost an allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Delivered<S> {
    /// A whole answer.
    Whole(Response),
    /// A stream past its commit point.
    Stream(S),
}

/// An attempt past its commit point: it holds its slot until the stream ends.
pub(crate) struct Committed {
    /// The kind of call streamed (its dialect).
    pub(crate) kind: Kind,
    pub(crate) slot: Slot,
    pub(crate) facts: Facts,
    /// The chunks up to and including the commit point.
    pub(crate) preamble: Vec<Chunk>,
    /// The rest of the stream.
    pub(crate) rest: Box<dyn ChunkSource>,
}

/// How one attempt went: it ended (with its slot and facts, to be settled), or it reached its
/// commit point and is delivered as it stands.
// Made once per attempt and matched at once: boxing the ended attempt would cost an allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Reached<C> {
    Ended(Attempt, Slot, Facts),
    Committed(C),
}

/// What an attempt is given.
pub(crate) struct Asked<'a> {
    pub(crate) upstream: &'a dyn Upstream,
    pub(crate) request: &'a Request,
    pub(crate) machine: &'a mut CallMachine,
    pub(crate) clock: &'a dyn Clock,
    /// How a stream asking for JSON commits (the request's, else the scope's).
    pub(crate) mode: StructuredStream,
}

/// How a call delivers its answer.
pub(crate) trait Delivery: Send + Sync + 'static {
    /// An attempt past its commit point (none for a whole answer).
    type Committed: Send;
    /// What the caller reads it as (none for a whole answer).
    type Stream: Send;
    /// Whether attempts are asked for a stream.
    const STREAMS: bool;

    /// The attempt of `slot`: sent, or streamed to its commit point.
    fn attempt(asked: Asked<'_>, slot: Slot, facts: Facts) -> impl Future<Output = Reached<Self::Committed>> + Send;

    /// The stream the caller reads, relayed and settled through `admission`; `guard` ends the
    /// call.
    fn open(committed: Self::Committed, admission: Arc<SourceAdmission>, scope: Arc<Partition>, guard: CallGuard) -> Self::Stream;

    /// The source streaming a committed attempt, and its chunks up to the commit point.
    fn preamble(committed: &Self::Committed) -> (&str, &[Chunk]);
}

/// The whole answer, when the call ends.
pub(crate) struct Whole;

/// Chunk by chunk, from the commit point on.
pub(crate) struct Chunks;

impl Delivery for Whole {
    type Committed = Infallible;
    type Stream = Infallible;
    const STREAMS: bool = false;

    async fn attempt(asked: Asked<'_>, slot: Slot, facts: Facts) -> Reached<Infallible> {
        Reached::Ended(asked.upstream.send(&facts.name, asked.request).await, slot, facts)
    }

    fn open(committed: Infallible, _: Arc<SourceAdmission>, _: Arc<Partition>, _: CallGuard) -> Infallible {
        committed
    }

    fn preamble(committed: &Infallible) -> (&str, &[Chunk]) {
        match *committed {}
    }
}

impl Delivery for Chunks {
    type Committed = Committed;
    type Stream = ChatStream;
    const STREAMS: bool = true;

    async fn attempt(asked: Asked<'_>, slot: Slot, mut facts: Facts) -> Reached<Committed> {
        let Asked { upstream, request, machine, clock, mode } = asked;
        let mut rest = match upstream.stream(&facts.name, request).await {
            Streamed::Ended(attempt) => return Reached::Ended(attempt, slot, facts),
            Streamed::Chunks(rest) => rest,
        };
        facts.rate = rest.rate();
        let held = mode.holds(request.structured.as_ref());
        if held {
            // The machine holds the answer to its end: the upstream counts it all.
            rest.hold_to_end();
        }
        match to_commit_point(machine, &mut *rest, request, mode).await {
            Ok(preamble) => {
                let facts = Facts { committed: Some(clock.now()), ..facts };
                // A stream held to its end has nothing more to give.
                let rest = if held { Box::new(Ended) } else { rest };
                Reached::Committed(Committed { kind: request.kind(), slot, facts, preamble, rest })
            }
            Err(outcome) => Reached::Ended(Attempt::ended(outcome), slot, facts),
        }
    }

    fn open(committed: Committed, admission: Arc<SourceAdmission>, scope: Arc<Partition>, guard: CallGuard) -> ChatStream {
        ChatStream::new(admission, scope, committed, guard)
    }

    fn preamble(committed: &Committed) -> (&str, &[Chunk]) {
        (&committed.facts.name, &committed.preamble)
    }
}

/// Reads a stream up to its commit point, as the machine judges it: the chunks so far (the
/// whole answer, for a stream held to its validated end), or how the attempt ended before
/// anything could reach the caller.
async fn to_commit_point(
    machine: &mut CallMachine,
    rest: &mut dyn ChunkSource,
    request: &Request,
    mode: StructuredStream,
) -> Result<Vec<Chunk>, Outcome> {
    let structured: Option<&Structured> = request.structured.as_ref();
    loop {
        match machine.on_chunk(rest.next_chunk().await, request.kind(), structured, mode) {
            Streaming::ReadOn => {}
            Streaming::Committed(chunks) | Streaming::Validated(chunks) => return Ok(chunks),
            Streaming::Ended(outcome) => return Err(outcome),
        }
    }
}

/// What follows a stream that was held to its end: nothing.
struct Ended;

#[async_trait::async_trait]
impl ChunkSource for Ended {
    async fn next_chunk(&mut self) -> Option<Result<Chunk, Outcome>> {
        None
    }
}
