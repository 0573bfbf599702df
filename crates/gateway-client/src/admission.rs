//! `SourceAdmission` (SPEC §6): the one admission unit every call kind shares. `pick` walks the
//! scope's sources in selector order (after in-call demotion) through memo → AIMD → gate →
//! quota, first passing wins; `on_no_runnable` decides, when none passed, between failing fast
//! and napping, by the reason the sources were refused.

use crate::call::CallState;
use crate::error::{CallError, Exhausted};
use crate::scope::Scope;
use crate::slot::Slot;
use gateway_core::admission::{Blocked, SkipReason, nap, when_blocked};
use gateway_core::breaker::{Reply, Verdict};
use gateway_core::ports::{BreakerGate, QuotaDecision, QuotaGate, Telemetry};
use gateway_core::select::demote;
use gateway_core::telemetry::GateEvent;
use gateway_core::time::Clock;
use rand_chacha::ChaCha8Rng;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::task::TaskTracker;

/// What `pick` found.
pub(crate) enum Pick {
    /// An admitted attempt.
    Slot(Slot),
    /// No candidate was runnable; `gate_rejections` of them were refused by the breaker side,
    /// `pushed_back` skipped for a 429 that asked this call to wait past its stall budget.
    Blocked { gate_rejections: usize, pushed_back: usize },
}

pub(crate) struct SourceAdmission {
    pub(crate) gates: Arc<dyn BreakerGate>,
    pub(crate) quota: Arc<dyn QuotaGate>,
    pub(crate) telemetry: Arc<dyn Telemetry>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rng: Arc<Mutex<ChaCha8Rng>>,
    /// The releases dropped slots spawned.
    pub(crate) releases: TaskTracker,
}

impl SourceAdmission {
    pub(crate) fn rng(&self) -> std::sync::MutexGuard<'_, ChaCha8Rng> {
        self.rng.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reports a gate transition made by this process.
    pub(crate) fn gate_event(&self, scope: &Scope, source: usize, reply: &Reply) {
        if let Some(transition) = reply.transition {
            let key = scope.gates[source].0.clone();
            self.telemetry.gate(&GateEvent { key, at: self.clock.now(), transition, epoch: reply.epoch, retry_after: reply.retry_after });
        }
    }

    /// The first runnable source of the scope, in selector order, or why there is none.
    pub(crate) async fn pick(&self, scope: &Arc<Scope>, call: &mut CallState, estimated_tokens: u32) -> Result<Pick, CallError> {
        let views = scope.views();
        let mut order = Vec::with_capacity(views.len());
        scope.selector.order(&views, &mut *self.rng(), &mut order);
        if scope.behaviour.demotion {
            // The health the trusted-alternative rule compares is the selector's view of it.
            let health: Option<Vec<f64>> = scope.selector.uses_health().then(|| views.iter().map(|v| v.health).collect());
            demote(&mut order, &call.fails, health.as_deref());
        }
        let (mut gate_rejections, mut pushed_back) = (0, 0);
        for source in order {
            let now = self.clock.now();
            if call.is_pushed_back(source, now) {
                pushed_back += 1;
                call.skipped(scope.source_name(source), SkipReason::RateLimited);
                continue;
            }
            // 1. memo, then 2. AIMD, under one short lock
            let refused = {
                let mut local = scope.local();
                if local.memo.active(source, now) {
                    Some(SkipReason::Cooldown)
                } else if !local.aimd[source].try_acquire() {
                    Some(SkipReason::AdaptivePaced)
                } else {
                    None
                }
            };
            if let Some(reason) = refused {
                gate_rejections += usize::from(reason.is_gate_rejection());
                call.skipped(scope.source_name(source), reason);
                continue;
            }
            // From here the slot holds the in-flight count: every exit below releases it.
            let mut slot = Slot::counted(scope.clone(), self.gates.clone(), self.quota.clone(), self.releases.clone(), source);
            // 3. the gate
            let (key, params) = &scope.gates[source];
            let entry = self.gates.try_enter(key, params).await.map_err(|e| call.backend(e))?;
            self.gate_event(scope, source, &entry.reply);
            if entry.verdict == Verdict::Denied {
                // retry_after is 0 unless OPEN: a HALF_OPEN denial never memoes the source.
                scope.local().memo.note_denial(source, self.clock.now(), entry.reply.retry_after);
                gate_rejections += 1;
                call.skipped(scope.source_name(source), SkipReason::CircuitOpen);
                continue;
            }
            slot.admitted(entry);
            // 4. the quota (sources without local limits need no permit)
            let limits = &scope.policy.sources[source].quota;
            if limits.max_concurrency.is_some() || limits.rpm.is_some() || limits.tpm.is_some() {
                match self.quota.acquire(key, limits, estimated_tokens).await {
                    Ok(QuotaDecision::Granted(permit)) => slot.hold_permit(permit),
                    Ok(QuotaDecision::Refused { .. }) => {
                        slot.release_probe().await;
                        call.skipped(scope.source_name(source), SkipReason::RateLimited);
                        continue;
                    }
                    Err(e) => {
                        slot.release_probe().await;
                        return Err(call.backend(e));
                    }
                }
            }
            return Ok(Pick::Slot(slot));
        }
        Ok(Pick::Blocked { gate_rejections, pushed_back })
    }

    /// SPEC §6 "No candidate runnable": fail fast by the reason the sources were refused, or
    /// nap (to the earliest certain retry moment when the breaker side refused them all).
    pub(crate) async fn on_no_runnable(
        &self,
        scope: &Scope,
        call: &mut CallState,
        gate_rejections: usize,
        pushed_back: usize,
    ) -> Result<(), CallError> {
        let policy = &scope.policy;
        let now = self.clock.now();
        let stalled = call.stall.stalled(&scope.local().progress, policy.stall_window, now);
        match when_blocked(gate_rejections, pushed_back, policy.sources.len(), policy.circuit_open, policy.quota_full, stalled) {
            Blocked::FailCircuitOpen => {
                let retry_after = self.gates.retry_after(&scope.gates).await.map_err(|e| call.backend(e))?;
                Err(CallError::CircuitOpen { retry_after, report: call.report() })
            }
            Blocked::FailRateLimited => Err(CallError::RateLimited { retry_after: call.pushback_remaining(now), report: call.report() }),
            Blocked::FailQuotaExhausted => Err(CallError::AllSourcesExhausted { reason: Exhausted::QuotaExhausted, report: call.report() }),
            Blocked::FailStalled => Err(CallError::AllSourcesExhausted { reason: Exhausted::Stalled, report: call.report() }),
            Blocked::Wait { gate_hint } => {
                let hint = if !gate_hint {
                    Duration::ZERO
                } else if pushed_back == 0 {
                    self.gates.retry_after(&scope.gates).await.map_err(|e| call.backend(e))?
                } else {
                    // The pushed-back sources' gates are closed (a 0 hint): the wait is for the others.
                    let refused: Vec<_> =
                        scope.gates.iter().enumerate().filter(|(i, _)| !call.is_pushed_back(*i, now)).map(|(_, g)| g.clone()).collect();
                    self.gates.retry_after(&refused).await.map_err(|e| call.backend(e))?
                };
                let remaining = call.stall.remaining(policy.stall_window, self.clock.now());
                let sleep = nap(hint, policy.poll_interval, remaining, &mut *self.rng());
                tokio::time::sleep(sleep).await;
                Ok(())
            }
        }
    }
}
