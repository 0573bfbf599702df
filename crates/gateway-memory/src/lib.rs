//! `gateway-memory`: the in-process gates. [`MemoryGates`] implements `BreakerGate`,
//! [`MemoryQuota`] implements `QuotaGate` and [`MemoryPacer`] implements `PacerGate` by running
//! gateway-core's state machines under sharded locks (no global lock on the hot path). They are
//! the reference implementation the contract suite holds the Redis gates to. [`MemoryAffinity`]
//! is the process's affinity map (`AffinityMap`).

pub mod affinity;
pub mod backstop;
mod sharded;

pub use affinity::MemoryAffinity;
use async_trait::async_trait;
use gateway_core::aimd::{AccountPacer, AccountReading, PacerParams};
use gateway_core::breaker::{Gate, GateOp, GateParams, Reply};
use gateway_core::outcome::AimdEffect;
use gateway_core::policy::QuotaLimits;
use gateway_core::ports::{BackendError, BreakerGate, PaceDecision, PaceLease, PacerGate, Permit, QuotaDecision, QuotaGate, SourceKey};
use gateway_core::quota::QuotaAccount;
use gateway_core::random::Incarnations;
use gateway_core::request::RateSignal;
use gateway_core::time::Clock;
use sharded::Sharded;
use std::sync::Arc;
use std::time::Duration;

/// Incarnation ids seeded from the process's hash keys (random per process), so that two
/// processes, or one before and after a restart, never draw the same ones.
fn incarnations() -> Incarnations {
    use std::hash::BuildHasher;
    Incarnations::seeded(std::collections::hash_map::RandomState::new().hash_one(std::process::id()))
}

/// Every `BreakerGate` of one process, keyed by (scope, tenant, source).
pub struct MemoryGates {
    gates: Sharded<Gate>,
    clock: Arc<dyn Clock>,
    incarnations: Incarnations,
}

impl MemoryGates {
    /// Gates on `clock` (a `ManualClock` in tests, the process's monotonic clock otherwise).
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryGates { gates: Sharded::new(), clock, incarnations: incarnations() }
    }

    /// Forgets every gate, as a process restart (or a Redis flush) would: the next operation on
    /// a gate meets a new incarnation.
    pub fn clear(&self) {
        self.gates.clear();
    }

    /// Stores `gate` for `key` under a new incarnation of its own (a gate started from a state
    /// read elsewhere: the backstop's, from the shared backend's last answer).
    pub fn seed(&self, key: &SourceKey, params: &GateParams, gate: Gate) {
        let now = self.clock.now();
        let incarnation = self.incarnations.draw();
        // Kept as a changed gate is: its key TTL from now.
        let keep_until = now.saturating_add(Duration::from_millis(params.key_ttl_ms()));
        self.gates.update(
            key,
            now,
            keep_until,
            |_| true,
            |stored| {
                *stored = Gate { incarnation, ..gate };
                ((), true)
            },
        );
    }

    /// A copy of one gate's state (`None` if it was never touched).
    pub fn snapshot(&self, key: &SourceKey) -> Option<Gate> {
        self.gates.get(key)
    }

    /// Gates held in memory now (including idle ones not yet swept).
    pub fn len(&self) -> usize {
        self.gates.len()
    }

    /// Whether no gate is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl BreakerGate for MemoryGates {
    async fn apply(&self, key: &SourceKey, params: &GateParams, op: GateOp) -> Result<Reply, BackendError> {
        let now = self.clock.now();
        let keep_until = now.saturating_add(Duration::from_millis(params.key_ttl_ms()));
        // A gate is kept its TTL past its last change beyond the current bucket's counts, and
        // one idle past it is dropped, as Redis drops the key (only in large maps).
        Ok(self.gates.update(
            key,
            now,
            keep_until,
            |_| true,
            |gate| {
                let before = *gate;
                let reply = gate.apply_stored(params, op, now, || self.incarnations.draw());
                (reply, gate.keeps_longer_than(&before))
            },
        ))
    }

    async fn read(&self, key: &SourceKey) -> Result<Gate, BackendError> {
        Ok(self.snapshot(key).unwrap_or_default())
    }

    async fn forget(&self, key: &SourceKey) -> Result<(), BackendError> {
        self.gates.remove(key);
        Ok(())
    }

    async fn retry_after(&self, gates: &[(SourceKey, GateParams)]) -> Result<Duration, BackendError> {
        let now = self.clock.now();
        let each = gates.iter().map(|(key, params)| self.gates.get(key).map_or(Duration::ZERO, |gate| gate.retry_after(params, now)));
        Ok(each.min().unwrap_or(Duration::ZERO))
    }
}

/// Every source account's quota in one process.
pub struct MemoryQuota {
    accounts: Sharded<QuotaAccount>,
    clock: Arc<dyn Clock>,
    incarnations: Incarnations,
}

impl MemoryQuota {
    /// Quota accounts on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryQuota { accounts: Sharded::new(), clock, incarnations: incarnations() }
    }

    /// Forgets every account, as a process restart (or a Redis flush) would.
    pub fn clear(&self) {
        self.accounts.clear();
    }

    /// The incarnation of `key`'s account (`None` before its first grant).
    pub fn incarnation(&self, key: &SourceKey) -> Option<u64> {
        self.accounts.get(key).map(|account| account.incarnation()).filter(|&i| i != 0)
    }

    /// Permits of `key` holding a concurrency slot now.
    pub fn in_flight(&self, key: &SourceKey) -> usize {
        let now = self.clock.now();
        self.accounts.get(key).map_or(0, |account| account.in_flight(now))
    }
}

#[async_trait]
impl QuotaGate for MemoryQuota {
    async fn acquire(&self, key: &SourceKey, limits: &QuotaLimits, estimated_tokens: u32) -> Result<QuotaDecision, BackendError> {
        let now = self.clock.now();
        // Kept as long as the Redis keys are (`QuotaLimits::keep_for`), and never dropped while
        // it holds a permit.
        let keep_until = now.saturating_add(limits.keep_for());
        let granted = self.accounts.with(
            key,
            now,
            keep_until,
            |account| account.in_flight(now) == 0,
            |account| {
                let fresh = if account.incarnation() == 0 { self.incarnations.draw() } else { 0 };
                account.acquire(limits, estimated_tokens, now, fresh)
            },
        );
        Ok(match granted {
            Ok((incarnation, id)) => QuotaDecision::Granted(Permit { key: key.clone(), incarnation, id, estimated_tokens }),
            Err(refusal) => QuotaDecision::Refused { limit: refusal.limit, retry_after: refusal.retry_after },
        })
    }

    async fn settle(&self, permit: &Permit, actual_tokens: u32) -> Result<(), BackendError> {
        let now = self.clock.now();
        self.accounts.with(
            &permit.key,
            now,
            now,
            |account| account.in_flight(now) == 0,
            |account| account.settle(permit.incarnation, permit.id, actual_tokens),
        );
        Ok(())
    }

    async fn release(&self, permit: &Permit) -> Result<(), BackendError> {
        let now = self.clock.now();
        self.accounts.with(
            &permit.key,
            now,
            now,
            |account| account.in_flight(now) == 0,
            |account| account.release(permit.incarnation, permit.id),
        );
        Ok(())
    }
}

/// Every provider account's AIMD pacer in one process.
pub struct MemoryPacer {
    accounts: Sharded<Option<AccountPacer>>,
    clock: Arc<dyn Clock>,
}

impl MemoryPacer {
    /// Pacers on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryPacer { accounts: Sharded::new(), clock }
    }

    /// Forgets every account, as a process restart would.
    pub fn clear(&self) {
        self.accounts.clear();
    }

    /// Leases of `key`'s account in flight now.
    pub fn in_flight(&self, key: &SourceKey) -> u32 {
        let now = self.clock.now();
        self.accounts.get(key).flatten().map_or(0, |pacer| pacer.inflight(now))
    }

    fn with<R>(&self, key: &SourceKey, params: &PacerParams, op: impl FnOnce(&mut AccountPacer, gateway_core::Timestamp) -> R) -> R {
        let now = self.clock.now();
        // Kept an hour past its last lease's life, as the Redis key is; never dropped with a
        // lease in flight.
        let keep_until = now.saturating_add(params.keep_for());
        self.accounts.with(
            key,
            now,
            keep_until,
            |pacer| pacer.as_ref().is_none_or(|p| p.inflight(now) == 0),
            |pacer| op(pacer.get_or_insert_with(|| AccountPacer::new(params)), now),
        )
    }
}

#[async_trait]
impl PacerGate for MemoryPacer {
    async fn try_acquire(&self, key: &SourceKey, params: &PacerParams, tokens: u32) -> Result<PaceDecision, BackendError> {
        Ok(match self.with(key, params, |pacer, now| pacer.try_acquire(params, tokens, now)) {
            Ok(lease) => PaceDecision::Granted(PaceLease { key: key.clone(), lease }),
            Err(paced) => PaceDecision::Paced(paced),
        })
    }

    async fn release(
        &self,
        lease: &PaceLease,
        effect: AimdEffect,
        rate: Option<&RateSignal>,
        params: &PacerParams,
    ) -> Result<f64, BackendError> {
        Ok(self.with(&lease.key, params, |pacer, now| pacer.release(lease.lease, effect, rate, params, now)))
    }

    async fn read(&self, key: &SourceKey, params: &PacerParams) -> Result<AccountReading, BackendError> {
        let now = self.clock.now();
        let pacer = self.accounts.get(key).flatten().unwrap_or_else(|| AccountPacer::new(params));
        Ok(pacer.reading(now))
    }
}
