//! An admitted attempt and everything it holds: the AIMD in-flight count, the probe lease and
//! the quota permit. `Slot` is a guard: `finish` settles them in order; if the call is dropped
//! at any await point first, `Drop` releases what is still held (the in-flight count at once,
//! the lease and the permit on a spawned task), so no path can leak them.

use crate::scope::Scope;
use gateway_core::breaker::{Entry, Reply, Verdict};
use gateway_core::outcome::{BreakerEffect, OutcomeClass};
use gateway_core::ports::{BreakerGate, Permit, QuotaGate};
use gateway_core::time::Timestamp;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::task::TaskTracker;

pub(crate) struct Slot {
    pub(crate) scope: Arc<Scope>,
    pub(crate) gates: Arc<dyn BreakerGate>,
    pub(crate) quota: Arc<dyn QuotaGate>,
    /// Where a dropped slot's releases run, so a shutdown can wait for them.
    releases: TaskTracker,
    pub(crate) source: usize,
    entry: Option<Entry>,
    /// The AIMD in-flight count is held.
    inflight: bool,
    /// The probe lease is held and not yet settled or released.
    probe: bool,
    permit: Option<Permit>,
}

impl Slot {
    /// A slot holding the in-flight count of `source` (already counted by the caller), before
    /// the gate is asked.
    pub(crate) fn counted(
        scope: Arc<Scope>,
        gates: Arc<dyn BreakerGate>,
        quota: Arc<dyn QuotaGate>,
        releases: TaskTracker,
        source: usize,
    ) -> Self {
        Slot { scope, gates, quota, releases, source, entry: None, inflight: true, probe: false, permit: None }
    }

    /// The gate admitted the attempt with `entry`.
    pub(crate) fn admitted(&mut self, entry: Entry) {
        self.probe = entry.verdict == Verdict::Probe;
        self.entry = Some(entry);
    }

    /// The epoch the attempt was admitted at.
    fn epoch(&self) -> u64 {
        self.entry.map_or(0, |e| e.reply.epoch)
    }

    /// The gate state the attempt was admitted in.
    pub(crate) fn admitted_in(&self) -> gateway_core::CircuitState {
        self.entry.map_or(gateway_core::CircuitState::Closed, |e| e.reply.state)
    }

    pub(crate) fn hold_permit(&mut self, permit: Permit) {
        self.permit = Some(permit);
    }

    pub(crate) fn is_probe(&self) -> bool {
        self.entry.is_some_and(|e| e.verdict == Verdict::Probe)
    }

    /// Hands back a probe lease that proved nothing (the quota refused the attempt).
    pub(crate) async fn release_probe(&mut self) {
        if self.probe {
            // Cleared before the await: a call dropped while the release is in flight must not
            // send a second release, which could clear the next prober's lease.
            self.probe = false;
            let (key, params) = &self.scope.gates[self.source];
            let _ = self.gates.release_probe(key, params, self.epoch()).await;
        }
    }

    /// Settles the attempt that ended with `class` at `now`: local health, AIMD and progress,
    /// then the breaker effect of the outcome table (or the probe release), then the quota
    /// permit with the actual token count. `latency` decides, for a real success, whether the slow-call channel hears of it.
    pub(crate) async fn finish(mut self, class: OutcomeClass, latency: Duration, actual_tokens: Option<u32>, now: Timestamp) -> Finished {
        let (health, aimd_limit) = {
            let mut local = self.scope.local();
            local.health[self.source].observe_class(class);
            local.aimd[self.source].observe_class(class);
            local.aimd[self.source].release();
            if class == OutcomeClass::Success {
                local.progress.record(now);
            }
            (local.health[self.source].value(), Some(local.aimd[self.source].limit()).filter(|l| l.is_finite()))
        };
        self.inflight = false;
        let (key, params) = &self.scope.gates[self.source];
        let epoch = self.epoch();
        // The outcome settles the probe: cleared before the await, so a call dropped while the
        // record is in flight does not also release the lease (the next prober's, by then).
        let probe = std::mem::take(&mut self.probe);
        // A record the backend cannot take is logged and counted by the adapter; the call goes on.
        let reply = match class.effects().breaker {
            BreakerEffect::RecordSuccess { real: true } if self.scope.policy.breaker.slow_call.is_some_and(|slow| latency > slow) => {
                self.gates.record_slow_success(key, params, epoch).await.ok()
            }
            BreakerEffect::RecordSuccess { real } => self.gates.record_success(key, params, epoch, real).await.ok(),
            BreakerEffect::RecordFailure => self.gates.record_failure(key, params, epoch).await.ok(),
            BreakerEffect::ForceOpen => self.gates.force_open(key, params).await.ok(),
            BreakerEffect::Nothing if probe => self.gates.release_probe(key, params, epoch).await.ok(),
            BreakerEffect::Nothing => None,
        };
        if let Some(permit) = &self.permit {
            if let Some(tokens) = actual_tokens {
                let _ = self.quota.settle(permit, tokens).await;
            }
            let _ = self.quota.release(permit).await;
        }
        self.permit = None;
        Finished { reply, health, aimd_limit }
    }
}

/// What settling an attempt left: the gate's reply (if the gate was told) and the source's
/// health and AIMD limit after the outcome (none when unpaced), read under the same lock.
pub(crate) struct Finished {
    pub(crate) reply: Option<Reply>,
    pub(crate) health: f64,
    pub(crate) aimd_limit: Option<f64>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.inflight {
            self.scope.local().aimd[self.source].release();
        }
        let probe = self.probe.then_some(self.epoch());
        let permit = self.permit.take();
        if probe.is_none() && permit.is_none() {
            return;
        }
        let (gates, quota, scope, source) = (self.gates.clone(), self.quota.clone(), self.scope.clone(), self.source);
        let release = async move {
            let (key, params) = &scope.gates[source];
            if let Some(epoch) = probe {
                let _ = gates.release_probe(key, params, epoch).await;
            }
            if let Some(permit) = permit {
                let _ = quota.release(&permit).await;
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(self.releases.spawn_on(release, &runtime)),
            // No runtime to release on: the probe lease and the permit lease expire by themselves.
            Err(_) => tracing::warn!(source = scope_name(&self.scope, source), "attempt dropped outside a runtime; its leases will expire"),
        }
    }
}

fn scope_name(scope: &Scope, source: usize) -> String {
    format!("{}/{}", scope.policy.name, scope.source_name(source))
}
