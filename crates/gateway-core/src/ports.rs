//! The ports: small async traits the adapters implement (the memory gates are the reference,
//! Redis and HTTP live in their own crates). Each method documents what it promises; a
//! compile-time check at the bottom proves every port can be used as `dyn`.

use crate::breaker::{GateOp, GateParams, Reply};
use crate::policy::QuotaLimits;
pub use crate::quota::QuotaLimit;
use crate::request::{Attempt, Outcome, Request};
use crate::stream::Chunk;
use crate::telemetry::{AttemptEvent, CallEvent, GateEvent};
use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Names one gate (and one quota account): a scope, an optional tenant partition (per-tenant
/// isolation, SPEC §11) and a source.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct SourceKey {
    /// The scope.
    pub scope: Arc<str>,
    /// The tenant, when the scope isolates tenants.
    pub tenant: Option<Arc<str>>,
    /// The source.
    pub source: Arc<str>,
}

/// Whether `part` can be one part of a gate key (scope, tenant or source): one or more ASCII
/// letters, digits, '_' and '-', so no part can break a backend's separators or hash tag.
pub fn is_key_part(part: &str) -> bool {
    !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl SourceKey {
    /// A key without tenant partition.
    pub fn new(scope: impl Into<Arc<str>>, source: impl Into<Arc<str>>) -> Self {
        SourceKey { scope: scope.into(), tenant: None, source: source.into() }
    }

    /// The same source in a tenant's partition.
    pub fn with_tenant(mut self, tenant: impl Into<Arc<str>>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }
}

impl fmt::Display for SourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tenant {
            Some(tenant) => write!(f, "{}/{}/{}", self.scope, tenant, self.source),
            None => write!(f, "{}/{}", self.scope, self.source),
        }
    }
}

/// A gate or quota backend that could not answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The backend (e.g. Redis) is unreachable or timed out. Admission fails closed on it; a
    /// record operation logs, counts and carries on.
    #[error("{backend} backend unavailable for {key}: {detail}")]
    BackendUnavailable {
        /// Which backend (`redis`, `memory`).
        backend: &'static str,
        /// The gate or account asked about.
        key: String,
        /// What failed.
        detail: String,
    },
    /// The key cannot be stored by this backend (e.g. a part that would break a Redis key).
    #[error("invalid gate key {key}: {detail}")]
    InvalidKey {
        /// The key as given.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The backend answered something this build cannot read.
    #[error("{backend} backend answered malformed state for {key}: {detail}")]
    Malformed {
        /// Which backend.
        backend: &'static str,
        /// The gate or account asked about.
        key: String,
        /// What was wrong.
        detail: String,
    },
}

/// The breaker gates of SPEC §3, one per [`SourceKey`]. Every operation is atomic per gate and
/// uses the backend's clock; `params` are the gate's resolved policy. A backend runs
/// [`Gate::apply`](crate::breaker::Gate::apply) or a faithful copy of it: the contract suite
/// replays the same operations on both and compares every reply and state.
#[async_trait]
pub trait BreakerGate: Send + Sync {
    /// Applies `op` to the gate of `key` (a never-written gate is a new, CLOSED one).
    async fn apply(&self, key: &SourceKey, params: &GateParams, op: GateOp) -> Result<Reply, BackendError>;
    /// The stored gate (a never-written gate reads as a new, CLOSED one): for status pages.
    async fn read(&self, key: &SourceKey) -> Result<crate::breaker::Gate, BackendError>;
    /// The minimum `retry_after` over the gates (0 for none, for CLOSED or HALF_OPEN gates).
    async fn retry_after(&self, gates: &[(SourceKey, GateParams)]) -> Result<Duration, BackendError>;
    /// Forgets the gate of `key` (a reload removed its source, or changed its base URL or
    /// account): the next operation finds a new, CLOSED gate of a new incarnation, so records
    /// of admissions the old one granted change nothing. (An account is never forgotten: calls
    /// still in flight on it release their leases, and an unused one expires.)
    async fn forget(&self, key: &SourceKey) -> Result<(), BackendError>;
}

/// A granted quota permit. Release it once the attempt ends (a guard in the client does it on
/// every path); backends lease permits so a crashed worker's permits expire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permit {
    /// The source's quota account.
    pub key: SourceKey,
    /// The account's incarnation it was granted in (its settle and release change nothing in
    /// another).
    pub incarnation: u64,
    /// Permit id, unique in the account's incarnation.
    pub id: u64,
    /// Tokens charged at acquire.
    pub estimated_tokens: u32,
}

/// The answer to a permit request. A refusal is a value, not an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuotaDecision {
    /// Go ahead; release the permit when the attempt ends.
    Granted(Permit),
    /// Refused by `limit`; a permit could be had after `retry_after` (0 when unknown, e.g. a
    /// concurrency slot that frees when some attempt ends).
    Refused {
        /// The limit that refused.
        limit: QuotaLimit,
        /// Hint until a permit could be had.
        retry_after: Duration,
    },
}

/// The local quota of each source: in-flight, requests per minute, tokens per minute.
#[async_trait]
pub trait QuotaGate: Send + Sync {
    /// Asks for a permit charging `estimated_tokens` against `limits`.
    async fn acquire(&self, key: &SourceKey, limits: &QuotaLimits, estimated_tokens: u32) -> Result<QuotaDecision, BackendError>;
    /// Corrects the token charge of `permit` to `actual_tokens`.
    async fn settle(&self, permit: &Permit, actual_tokens: u32) -> Result<(), BackendError>;
    /// Frees the permit's concurrency slot. Releasing twice is harmless.
    async fn release(&self, permit: &Permit) -> Result<(), BackendError>;
}

/// A place taken on a provider account's learned concurrency (release it when the attempt ends;
/// a guard in the client does it on every path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaceLease {
    /// The account (`SourceKey::source` is the account's name).
    pub key: SourceKey,
    /// The lease, with the cut generation it was taken in.
    pub lease: crate::aimd::Lease,
}

/// The answer to a place on an account. Full is a value, not an error.
#[derive(Clone, Debug, PartialEq)]
pub enum PaceDecision {
    /// Go ahead; release the lease when the attempt ends.
    Granted(PaceLease),
    /// The account has its learned limit in flight.
    Paced(crate::aimd::Paced),
}

/// The AIMD pacers of provider accounts (SPEC §4): one learned limit and one in-flight count per
/// (scope partition, account), shared by every process when the backend is shared. Every
/// operation is atomic per account and uses the backend's clock.
#[async_trait]
pub trait PacerGate: Send + Sync {
    /// A place on `key`'s account for an attempt estimated at `tokens`, if one more fits under
    /// its limit and the provider's reported budgets.
    async fn try_acquire(&self, key: &SourceKey, params: &crate::aimd::PacerParams, tokens: u32) -> Result<PaceDecision, BackendError>;
    /// Ends the attempt of `lease` and applies `effect` (a cut only when no cut came since the
    /// lease was taken) and the provider's `rate` signal, if it sent one; the limit after.
    async fn release(
        &self,
        lease: &PaceLease,
        effect: crate::outcome::AimdEffect,
        rate: Option<&crate::request::RateSignal>,
        params: &crate::aimd::PacerParams,
    ) -> Result<f64, BackendError>;
    /// The account's limit, the leases in flight now and its refused ceiling, for status pages
    /// (a fresh account's when it was never used).
    async fn read(&self, key: &SourceKey, params: &crate::aimd::PacerParams) -> Result<crate::aimd::AccountReading, BackendError>;
}

/// One upstream transport (HTTP, the simulator, a scripted fake).
#[async_trait]
pub trait Upstream: Send + Sync {
    /// Sends one attempt of `request` to `source`, answered whole, and classifies how it ended.
    /// Never panics and never returns an error: every failure is an [`Attempt`] with its outcome
    /// class. Must stop within the source's `timeout`. A source with a `watchdog` is asked for a
    /// stream and the answer assembled ([`crate::stream::assemble`]), so that the watchdog
    /// bounds its first token and every gap (SPEC §13, one watchdog).
    async fn send(&self, source: &str, request: &Request) -> Attempt;

    /// Sends one attempt of a chat `request` to `source` as a stream: [`Streamed::Ended`] when
    /// it ends without chunks (an error status, a transport failure), else the chunks as they
    /// come. Every chunk wait is bounded by the source's `watchdog`, the whole by its `timeout`.
    /// The default answers whole and replays the answer as chunks (an upstream that cannot
    /// stream).
    async fn stream(&self, source: &str, request: &Request) -> Streamed {
        let (outcome, response) = self.send(source, request).await.into_parts();
        match response {
            Some(response) => Streamed::Chunks(Box::new(Replay { chunks: crate::stream::chunks_of(&response).into() })),
            None => Streamed::Ended(Attempt::ended(outcome)),
        }
    }
}

/// How a streamed attempt began.
// Returned once per attempt and matched at once: its size does not matter, boxing would.
#[allow(clippy::large_enum_variant)]
pub enum Streamed {
    /// It ended without a stream.
    Ended(Attempt),
    /// Chunks follow.
    Chunks(Box<dyn ChunkSource>),
}

/// The chunks of one streamed attempt, read one at a time. Dropping it cancels the upstream
/// request.
#[async_trait]
pub trait ChunkSource: Send {
    /// The next chunk; `None` when the stream ended as it should (`[DONE]`, a Responses
    /// stream's terminal event); `Err` with the outcome when it broke off (a watchdog, a cut
    /// connection, an error event) or said the answer failed (a Responses `response.failed`:
    /// `stream::failure_of`), so that no caller relays a failure as a chunk.
    async fn next_chunk(&mut self) -> Option<Result<Chunk, Outcome>>;

    /// The provider's id of the request (its `x-request-id`), when it gave one.
    fn request_id(&self) -> Option<&str> {
        None
    }

    /// What the provider's rate-limit headers said of the account, when it sent any.
    fn rate(&self) -> Option<crate::request::RateSignal> {
        None
    }

    /// The caller will hold every chunk until the stream ends (a stream asking for JSON that
    /// commits once validated, SPEC §13): a source that bounds what it holds counts them all,
    /// not only those before the commit point. Called before the first chunk is read.
    fn hold_to_end(&mut self) {}
}

/// The chunks of a whole answer, replayed.
struct Replay {
    chunks: std::collections::VecDeque<Chunk>,
}

#[async_trait]
impl ChunkSource for Replay {
    async fn next_chunk(&mut self) -> Option<Result<Chunk, Outcome>> {
        self.chunks.pop_front().map(Ok)
    }
}

/// Where attempt, call and gate events go. Implementations must be cheap and never block: they
/// run on the call path.
pub trait Telemetry: Send + Sync {
    /// One attempt ended.
    fn attempt(&self, event: &AttemptEvent);
    /// One call ended (exactly once per call).
    fn call(&self, event: &CallEvent);
    /// A gate changed state (by this process's operation).
    fn gate(&self, _event: &GateEvent) {}
}

/// Where a provider keeps a piece of state (a stored response, a conversation, an uploaded file,
/// a batch): the scope and the source that made it. A request referring to it can go nowhere
/// else.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Affinity {
    /// The scope.
    pub scope: Arc<str>,
    /// The source.
    pub source: Arc<str>,
}

/// The affinity map: which source holds the state an id names (SPEC §13: conversation state
/// stays where it lives). Shared by every process through the backend; its entries expire
/// after the time they were remembered for, and a bounded map forgets its oldest first.
#[async_trait]
pub trait AffinityMap: Send + Sync {
    /// Remembers that `id` lives at `at`, for `ttl` (refreshed if it was known).
    async fn remember(&self, id: &str, at: &Affinity, ttl: Duration) -> Result<(), BackendError>;

    /// Where `id` lives, if it is known and has not expired.
    async fn find(&self, id: &str) -> Result<Option<Affinity>, BackendError>;

    /// Forgets `id` (its state was deleted).
    async fn forget(&self, id: &str) -> Result<(), BackendError>;
}

/// Proves the ports are object safe.
const _: fn(&dyn BreakerGate, &dyn QuotaGate, &dyn PacerGate, &dyn Telemetry) = |_, _, _, _| {};
const _: fn(&dyn AffinityMap) = |_| {};
const _: fn(&dyn Upstream, &dyn ChunkSource) = |_, _| {};
