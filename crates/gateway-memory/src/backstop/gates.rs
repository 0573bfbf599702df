//! `BreakerGate` on the shared backend with local gates behind it, each started from the last
//! state this process read of it.

use super::ask::{Fresh, Shared, ask, look, record};
use super::{Backstop, OnUnavailable};
use crate::MemoryGates;
use async_trait::async_trait;
use gateway_core::breaker::{CircuitState, Gate, GateOp, GateParams, Reply};
use gateway_core::ports::{BackendError, BreakerGate, SourceKey};
use gateway_core::time::Timestamp;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Gates whose last state read is kept (those not plainly CLOSED); past it the map starts afresh.
const SEEDS_KEPT: usize = 16_384;
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
    seeds: Mutex<HashMap<SourceKey, Seed>>,
}

impl BackstopGates {
    /// The gates of `shared`, with local ones behind them as `backstop` says.
    pub fn new(shared: Arc<dyn BreakerGate>, backstop: Arc<Backstop>) -> Self {
        let local = MemoryGates::new(backstop.clock.clone());
        BackstopGates { shared, local, backstop, fresh: Fresh::new(), seeds: Mutex::default() }
    }

    /// Keeps the state read of a gate that is not plainly CLOSED (and forgets it once it is).
    pub(super) fn remember(&self, key: &SourceKey, reply: &Reply) {
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
    pub(super) fn is_local_record(&self, key: &SourceKey, op: GateOp) -> bool {
        op.fence().is_some_and(|fence| {
            self.backstop.used_local.load(Ordering::Acquire)
                && self.local.snapshot(key).is_some_and(|gate| gate.incarnation == fence.incarnation)
        })
    }

    /// The local gate of `key`, created from the last state read of it on first use in a
    /// period.
    fn local_gate(&self, key: &SourceKey, params: &GateParams) {
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
    async fn apply(&self, key: &SourceKey, params: &GateParams, op: GateOp) -> Result<Reply, BackendError> {
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

    async fn read(&self, key: &SourceKey) -> Result<Gate, BackendError> {
        look(&self.backstop, key, self.shared.read(key), self.local.read(key)).await
    }

    async fn retry_after(&self, gates: &[(SourceKey, GateParams)]) -> Result<Duration, BackendError> {
        let Some((key, _)) = gates.first() else { return Ok(Duration::ZERO) };
        look(&self.backstop, key, self.shared.retry_after(gates), self.local.retry_after(gates)).await
    }

    async fn forget(&self, key: &SourceKey) -> Result<(), BackendError> {
        self.seeds.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
        self.local.forget(key).await?;
        self.shared.forget(key).await
    }
}
