//! A shared backend (Redis) with an in-process backstop: what the gates, quota and pacers do
//! while the shared backend cannot answer (`[backend] on_unavailable`).
//!
//! - `fail_closed` (the default): an admission question the backend cannot answer fails the
//!   call with `BackendUnavailable`; records are dropped and counted.
//! - `local`: the process admits on its own in-memory gates, quota and pacers. Each gate starts
//!   from the last state this process read of it from the shared backend (an OPEN gate stays
//!   OPEN until the `open_until` it was read with; a HALF_OPEN one is OPEN until now: one probe),
//!   under an incarnation of its own, so records of attempts the shared gate admitted are
//!   refused by the local one, and the other way round. The quota starts empty (each process
//!   enforces the whole limit alone) and the pacer at its initial limit.
//!
//! Both modes share one outage detector for the three ports: the first `BackendUnavailable`
//! starts a degraded period (logged, counted); while it lasts, one operation per `retry_every`
//! asks the shared backend again (the rest do not wait out its timeout), and the first answer
//! ends it (logged with its length): the process is back on the shared backend. A new period
//! starts the local state afresh. A record or a release goes where its admission was made: a
//! local gate's (its fence names a local incarnation), a local permit's (likewise) or a local
//! lease's (its id carries [`LOCAL_LEASE`]) to the local state, every other to the shared
//! backend; while that cannot answer, it waits for it (records run off the answer's path, in
//! the client's background), asking with the rest once per `retry_every`, for at most
//! [`RECORD_WAIT`], then it is dropped and counted (a lease it held expires there by itself).

use crate::{MemoryGates, MemoryPacer, MemoryQuota};
use async_trait::async_trait;
use gateway_core::aimd::{Paced, PacerParams};
use gateway_core::breaker::{CircuitState, Gate, GateOp, GateParams, Reply};
use gateway_core::outcome::AimdEffect;
use gateway_core::policy::QuotaLimits;
use gateway_core::ports::{BreakerGate, GateError, GateKey, PaceDecision, PaceLease, PacerGate, Permit, QuotaDecision, QuotaGate};
use gateway_core::time::{Clock, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// What the gates, quota and pacers do while the shared backend cannot answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUnavailable {
    /// Admission fails with `BackendUnavailable` (calls end 503 through the proxy).
    #[default]
    FailClosed,
    /// Each process admits on its own in-memory state until the backend answers again.
    Local,
}

impl OnUnavailable {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnUnavailable::FailClosed => "fail_closed",
            OnUnavailable::Local => "local",
        }
    }
}

/// Set on the id of a lease the local pacer granted, so its release finds its way back.
pub const LOCAL_LEASE: u64 = 1 << 63;

/// How often a degraded process asks the shared backend again, by default.
pub const RETRY_EVERY: Duration = Duration::from_millis(200);

/// How long a record of the shared backend's admission waits for it to answer again.
pub const RECORD_WAIT: Duration = Duration::from_secs(5);

/// Degraded periods kept for [`BackstopStats::periods`].
const PERIODS_KEPT: usize = 64;

/// Gates whose last state read is kept (those not plainly CLOSED); past it the map starts afresh.
const SEEDS_KEPT: usize = 16_384;

/// What the backstop counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackstopStats {
    /// Degraded periods: start and (once the backend answered again) end, on the backstop's
    /// clock; the last 64.
    pub periods: Vec<(Timestamp, Option<Timestamp>)>,
    /// Degraded periods in all.
    pub outages: u64,
    /// Admissions granted by the local state (gates: TryEnter admitted).
    pub local_admissions: u64,
    /// Admission questions refused because the backend could not answer (`fail_closed`).
    pub failed_closed: u64,
    /// Records and releases of the shared backend's admissions dropped while it could not
    /// answer.
    pub dropped_records: u64,
}

#[derive(Default)]
struct Outage {
    /// The current degraded period's start.
    since: Option<Timestamp>,
    /// When a degraded process asks the backend again.
    next_try: Timestamp,
    /// Increments at the start of each degraded period.
    period: u64,
    periods: Vec<(Timestamp, Option<Timestamp>)>,
}

/// The outage detector and counters the three ports share.
pub struct Backstop {
    mode: OnUnavailable,
    clock: Arc<dyn Clock>,
    retry_every: Duration,
    /// A degraded period is on (read without the lock on every operation).
    degraded: AtomicBool,
    /// The local state was used (until then, no record can be a local one's).
    used_local: AtomicBool,
    outage: Mutex<Outage>,
    outages: AtomicU64,
    local_admissions: AtomicU64,
    failed_closed: AtomicU64,
    dropped_records: AtomicU64,
}

impl Backstop {
    /// A backstop in `mode` on `clock`, asking a degraded backend again every `retry_every`.
    pub fn new(mode: OnUnavailable, clock: Arc<dyn Clock>, retry_every: Duration) -> Arc<Self> {
        Arc::new(Backstop {
            mode,
            clock,
            retry_every,
            degraded: AtomicBool::new(false),
            used_local: AtomicBool::new(false),
            outage: Mutex::default(),
            outages: AtomicU64::new(0),
            local_admissions: AtomicU64::new(0),
            failed_closed: AtomicU64::new(0),
            dropped_records: AtomicU64::new(0),
        })
    }

    /// The mode.
    pub fn mode(&self) -> OnUnavailable {
        self.mode
    }

    /// What it counted so far.
    pub fn stats(&self) -> BackstopStats {
        BackstopStats {
            periods: self.lock().periods.clone(),
            outages: self.outages.load(Ordering::Relaxed),
            local_admissions: self.local_admissions.load(Ordering::Relaxed),
            failed_closed: self.failed_closed.load(Ordering::Relaxed),
            dropped_records: self.dropped_records.load(Ordering::Relaxed),
        }
    }

    /// Whether a degraded period is on.
    pub fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Outage> {
        self.outage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this operation asks the shared backend: always unless degraded, then once per
    /// `retry_every`.
    fn asks_shared(&self) -> bool {
        if !self.is_degraded() {
            return true;
        }
        let mut outage = self.lock();
        if outage.since.is_none() {
            return true;
        }
        let now = self.clock.now();
        if now < outage.next_try {
            return false;
        }
        outage.next_try = now.saturating_add(self.retry_every);
        true
    }

    /// The shared backend answered: ends a degraded period.
    fn answered(&self) {
        if !self.is_degraded() {
            return;
        }
        let mut outage = self.lock();
        self.degraded.store(false, Ordering::Release);
        if let Some(since) = outage.since.take() {
            let now = self.clock.now();
            if let Some(last) = outage.periods.last_mut() {
                last.1 = Some(now);
            }
            tracing::info!(
                after_ms = now.saturating_since(since).as_millis() as u64,
                "gate backend answers again; back on the shared state"
            );
        }
    }

    /// The shared backend could not answer: starts a degraded period. The period, for the ports
    /// to start their local state afresh.
    fn failed(&self, error: &GateError) -> u64 {
        let mut outage = self.lock();
        if outage.since.is_none() {
            let now = self.clock.now();
            self.degraded.store(true, Ordering::Release);
            outage.since = Some(now);
            outage.next_try = now.saturating_add(self.retry_every);
            outage.period += 1;
            if outage.periods.len() == PERIODS_KEPT {
                outage.periods.remove(0);
            }
            outage.periods.push((now, None));
            self.outages.fetch_add(1, Ordering::Relaxed);
            match self.mode {
                OnUnavailable::Local => {
                    tracing::warn!(%error, "gate backend unavailable; admitting on this process's own state until it answers")
                }
                OnUnavailable::FailClosed => tracing::warn!(%error, "gate backend unavailable; admission fails closed until it answers"),
            }
        }
        outage.period
    }

    fn period(&self) -> u64 {
        self.lock().period
    }

    /// The error of a question not put to the degraded backend.
    fn unavailable(&self, key: &GateKey) -> GateError {
        let since = self.lock().since.map_or(0, |since| self.clock.now().saturating_since(since).as_millis() as u64);
        GateError::BackendUnavailable {
            backend: "shared",
            key: key.to_string(),
            detail: format!("unavailable for {since} ms; asked again shortly"),
        }
    }

    fn refused_admission(&self, key: &GateKey) -> GateError {
        self.failed_closed.fetch_add(1, Ordering::Relaxed);
        self.unavailable(key)
    }

    fn dropped(&self, key: &GateKey) -> GateError {
        self.dropped_records.fetch_add(1, Ordering::Relaxed);
        self.unavailable(key)
    }
}

/// What a shared operation came to: its answer, or the local state's turn.
enum Shared<T> {
    Answer(Result<T, GateError>),
    Local,
}

/// Asks the shared backend (unless a degraded period says not now) and sorts the answer.
async fn ask<T>(backstop: &Backstop, asks: impl Future<Output = Result<T, GateError>>) -> Shared<T> {
    if !backstop.asks_shared() {
        return Shared::Local;
    }
    match asks.await {
        Err(error @ GateError::BackendUnavailable { .. }) => {
            backstop.failed(&error);
            Shared::Local
        }
        answer => {
            // An answer (a refusal that the key is malformed included) says the backend is up.
            backstop.answered();
            Shared::Answer(answer)
        }
    }
}

/// A question for a status page (a gate's state, `retry_after`, an account's limit): the shared
/// backend's answer, or while it cannot answer the local state's (`local`) or the error.
async fn look<T>(
    backstop: &Backstop,
    key: &GateKey,
    shared: impl Future<Output = Result<T, GateError>>,
    local: impl Future<Output = Result<T, GateError>>,
) -> Result<T, GateError> {
    match ask(backstop, shared).await {
        Shared::Answer(answer) => answer,
        Shared::Local if backstop.mode == OnUnavailable::Local => local.await,
        Shared::Local => Err(backstop.unavailable(key)),
    }
}

/// A record or release of the shared backend's admission: asked now, or, while the backend
/// cannot answer, again at each `retry_every` until it answers or [`RECORD_WAIT`] has passed
/// (then dropped and counted).
async fn record<T, F: Future<Output = Result<T, GateError>>>(
    backstop: &Backstop,
    key: &GateKey,
    op: impl Fn() -> F,
) -> Result<T, GateError> {
    let give_up = tokio::time::Instant::now() + RECORD_WAIT;
    loop {
        if let Shared::Answer(answer) = ask(backstop, op()).await {
            return answer;
        }
        let now = tokio::time::Instant::now();
        if now >= give_up {
            return Err(backstop.dropped(key));
        }
        tokio::time::sleep(backstop.retry_every.min(give_up - now)).await;
    }
}

/// The local state of one port, started afresh at each degraded period.
struct Fresh {
    period: Mutex<u64>,
}

impl Fresh {
    fn new() -> Self {
        Fresh { period: Mutex::new(0) }
    }

    /// Runs `clear` once per degraded period, before the period's first local operation.
    fn for_period(&self, backstop: &Backstop, clear: impl FnOnce()) {
        backstop.used_local.store(true, Ordering::Release);
        let period = backstop.period();
        let mut seen = self.period.lock().unwrap_or_else(PoisonError::into_inner);
        if *seen != period {
            clear();
            *seen = period;
        }
    }
}

/// The last state read of a gate that was not plainly CLOSED: what its local gate starts from.
#[derive(Clone, Copy)]
struct Seed {
    state: CircuitState,
    epoch: u64,
    open_until: Timestamp,
}

/// `BreakerGate` on a shared backend, with local gates behind it.
pub struct BackstopGates {
    shared: Arc<dyn BreakerGate>,
    local: MemoryGates,
    backstop: Arc<Backstop>,
    fresh: Fresh,
    seeds: Mutex<HashMap<GateKey, Seed>>,
}

impl BackstopGates {
    /// The gates of `shared`, with local ones behind them as `backstop` says.
    pub fn new(shared: Arc<dyn BreakerGate>, backstop: Arc<Backstop>) -> Self {
        let local = MemoryGates::new(backstop.clock.clone());
        BackstopGates { shared, local, backstop, fresh: Fresh::new(), seeds: Mutex::default() }
    }

    /// Keeps the state read of a gate that is not plainly CLOSED (and forgets it once it is).
    fn remember(&self, key: &GateKey, reply: &Reply) {
        if self.backstop.mode != OnUnavailable::Local || (reply.state == CircuitState::Closed && reply.transition.is_none()) {
            return;
        }
        let mut seeds = self.seeds.lock().unwrap_or_else(PoisonError::into_inner);
        if reply.state == CircuitState::Closed {
            seeds.remove(key);
        } else {
            let open_until = self.backstop.clock.now().saturating_add(reply.retry_after);
            // Bounded as the memory gates are: churning tenants' gates that opened and were
            // never seen closing (expired, gone) cannot grow the map for ever.
            if seeds.len() >= SEEDS_KEPT && !seeds.contains_key(key) {
                seeds.clear();
            }
            seeds.insert(key.clone(), Seed { state: reply.state, epoch: reply.epoch, open_until });
        }
    }

    /// Whether `op` records an attempt a local gate admitted.
    fn is_local_record(&self, key: &GateKey, op: GateOp) -> bool {
        op.fence().is_some_and(|fence| {
            self.backstop.used_local.load(Ordering::Acquire)
                && self.local.snapshot(key).is_some_and(|gate| gate.incarnation == fence.incarnation)
        })
    }

    /// The local gate of `key`, created from the last state read of it on first use in a
    /// period.
    fn local_gate(&self, key: &GateKey, params: &GateParams) {
        self.fresh.for_period(&self.backstop, || self.local.clear());
        if self.local.snapshot(key).is_some() {
            return;
        }
        let seed = self.seeds.lock().unwrap_or_else(PoisonError::into_inner).get(key).copied();
        if let Some(seed) = seed {
            let now = self.backstop.clock.now();
            let open_until = if seed.state == CircuitState::Open { seed.open_until } else { now };
            self.local.seed(key, params, Gate { state: CircuitState::Open, epoch: seed.epoch, open_until, ..Gate::default() });
        }
    }
}

#[async_trait]
impl BreakerGate for BackstopGates {
    async fn apply(&self, key: &GateKey, params: &GateParams, op: GateOp) -> Result<Reply, GateError> {
        if self.is_local_record(key, op) {
            return self.local.apply(key, params, op).await;
        }
        if op.fence().is_some() {
            let reply = record(&self.backstop, key, || self.shared.apply(key, params, op)).await?;
            self.remember(key, &reply);
            return Ok(reply);
        }
        match ask(&self.backstop, self.shared.apply(key, params, op)).await {
            Shared::Answer(answer) => {
                if let Ok(reply) = &answer {
                    self.remember(key, reply);
                }
                answer
            }
            Shared::Local if self.backstop.mode == OnUnavailable::FailClosed => {
                Err(if op == GateOp::TryEnter { self.backstop.refused_admission(key) } else { self.backstop.dropped(key) })
            }
            Shared::Local => {
                self.local_gate(key, params);
                let reply = self.local.apply(key, params, op).await?;
                if reply.is_admitted() {
                    self.backstop.local_admissions.fetch_add(1, Ordering::Relaxed);
                }
                Ok(reply)
            }
        }
    }

    async fn read(&self, key: &GateKey) -> Result<Gate, GateError> {
        look(&self.backstop, key, self.shared.read(key), self.local.read(key)).await
    }

    async fn retry_after(&self, gates: &[(GateKey, GateParams)]) -> Result<Duration, GateError> {
        let Some((key, _)) = gates.first() else { return Ok(Duration::ZERO) };
        look(&self.backstop, key, self.shared.retry_after(gates), self.local.retry_after(gates)).await
    }
}

/// `QuotaGate` on a shared backend, with a local quota behind it.
pub struct BackstopQuota {
    shared: Arc<dyn QuotaGate>,
    local: MemoryQuota,
    backstop: Arc<Backstop>,
    fresh: Fresh,
}

impl BackstopQuota {
    /// The quota of `shared`, with a local one behind it as `backstop` says.
    pub fn new(shared: Arc<dyn QuotaGate>, backstop: Arc<Backstop>) -> Self {
        let local = MemoryQuota::new(backstop.clock.clone());
        BackstopQuota { shared, local, backstop, fresh: Fresh::new() }
    }

    fn is_local(&self, permit: &Permit) -> bool {
        self.backstop.used_local.load(Ordering::Acquire) && self.local.incarnation(&permit.key) == Some(permit.incarnation)
    }
}

#[async_trait]
impl QuotaGate for BackstopQuota {
    async fn acquire(&self, key: &GateKey, limits: &QuotaLimits, estimated_tokens: u32) -> Result<QuotaDecision, GateError> {
        match ask(&self.backstop, self.shared.acquire(key, limits, estimated_tokens)).await {
            Shared::Answer(answer) => answer,
            Shared::Local if self.backstop.mode == OnUnavailable::FailClosed => Err(self.backstop.refused_admission(key)),
            Shared::Local => {
                self.fresh.for_period(&self.backstop, || self.local.clear());
                self.local.acquire(key, limits, estimated_tokens).await
            }
        }
    }

    async fn settle(&self, permit: &Permit, actual_tokens: u32) -> Result<(), GateError> {
        if self.is_local(permit) {
            return self.local.settle(permit, actual_tokens).await;
        }
        record(&self.backstop, &permit.key, || self.shared.settle(permit, actual_tokens)).await
    }

    async fn release(&self, permit: &Permit) -> Result<(), GateError> {
        if self.is_local(permit) {
            return self.local.release(permit).await;
        }
        record(&self.backstop, &permit.key, || self.shared.release(permit)).await
    }
}

/// `PacerGate` on a shared backend, with local pacers behind it.
pub struct BackstopPacer {
    shared: Arc<dyn PacerGate>,
    local: MemoryPacer,
    backstop: Arc<Backstop>,
    fresh: Fresh,
}

impl BackstopPacer {
    /// The pacers of `shared`, with local ones behind them as `backstop` says.
    pub fn new(shared: Arc<dyn PacerGate>, backstop: Arc<Backstop>) -> Self {
        let local = MemoryPacer::new(backstop.clock.clone());
        BackstopPacer { shared, local, backstop, fresh: Fresh::new() }
    }
}

#[async_trait]
impl PacerGate for BackstopPacer {
    async fn try_acquire(&self, key: &GateKey, params: &PacerParams) -> Result<PaceDecision, GateError> {
        match ask(&self.backstop, self.shared.try_acquire(key, params)).await {
            Shared::Answer(answer) => answer,
            Shared::Local if self.backstop.mode == OnUnavailable::FailClosed => Err(self.backstop.refused_admission(key)),
            Shared::Local => {
                self.fresh.for_period(&self.backstop, || self.local.clear());
                Ok(match self.local.try_acquire(key, params).await? {
                    PaceDecision::Granted(mut lease) => {
                        lease.lease.id |= LOCAL_LEASE;
                        PaceDecision::Granted(lease)
                    }
                    paced => paced,
                })
            }
        }
    }

    async fn release(&self, lease: &PaceLease, effect: AimdEffect, params: &PacerParams) -> Result<f64, GateError> {
        if lease.lease.id & LOCAL_LEASE != 0 {
            let mut local = lease.clone();
            local.lease.id &= !LOCAL_LEASE;
            return self.local.release(&local, effect, params).await;
        }
        record(&self.backstop, &lease.key, || self.shared.release(lease, effect, params)).await
    }

    async fn read(&self, key: &GateKey, params: &PacerParams) -> Result<Paced, GateError> {
        look(&self.backstop, key, self.shared.read(key, params), self.local.read(key, params)).await
    }
}
