//! An attempt's admission and its records, each one operation of a port of its own, so that a
//! shared backend can make each in one round trip (Redis: one script): [`AdmitGate`] asks the
//! account, the gate and the quota in turn (SPEC §6), [`RecordGate`] makes what the end of an
//! attempt hands back to the shared state, in this order: the account's place with the outcome's effect on its learned limit,
//! the gate's record (or the probe's release), the permit's actual tokens and its release.
//! [`InOrder`] is the reference every backend is held to, and what the in-process backend uses:
//! the three ports' own operations one after another.

use crate::aimd::PacerParams;
use crate::breaker::{GateOp, GateParams, Reply};
use crate::outcome::AimdEffect;
use crate::policy::QuotaLimits;
use crate::ports::{BackendError, BreakerGate, PaceDecision, PaceLease, PacerGate, Permit, QuotaDecision, QuotaGate, SourceKey};
use crate::request::RateSignal;
use async_trait::async_trait;
use std::sync::Arc;

/// The account's place to give back, with the outcome's effect and the provider's rate signal.
#[derive(Clone, Copy, Debug)]
pub struct PaceRecord<'a> {
    /// The place.
    pub lease: &'a PaceLease,
    /// The outcome's effect on the learned limit.
    pub effect: AimdEffect,
    /// What the provider's rate-limit headers said, if anything.
    pub rate: Option<&'a RateSignal>,
    /// The account's pacer parameters.
    pub params: &'a PacerParams,
}

/// The gate's record of the attempt (or the release of its probe lease).
#[derive(Clone, Copy, Debug)]
pub struct GateRecord<'a> {
    /// The gate.
    pub key: &'a SourceKey,
    /// Its parameters.
    pub params: &'a GateParams,
    /// The record (`Success`, `Failure`) or the probe's `Release`.
    pub op: GateOp,
}

/// The quota permit to settle with the attempt's actual tokens (when known), then release.
#[derive(Clone, Copy, Debug)]
pub struct PermitRecord<'a> {
    /// The permit.
    pub permit: &'a Permit,
    /// The tokens the attempt used, as the provider reported them.
    pub actual_tokens: Option<u32>,
}

/// One attempt's records; each part is there when the attempt holds it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Records<'a> {
    /// The account's place.
    pub pace: Option<PaceRecord<'a>>,
    /// The gate's record.
    pub gate: Option<GateRecord<'a>>,
    /// The permit.
    pub permit: Option<PermitRecord<'a>>,
    /// Nobody in this process waits for what the place and the permit free: a shared backend
    /// tells the other processes (Redis: a message on the scope's channel), whose waiters may.
    pub tell_others: bool,
}

impl Records<'_> {
    /// The key an error of the records names: the gate's, else the account's, else the permit's.
    pub fn key(&self) -> Option<&SourceKey> {
        self.gate.map(|g| g.key).or(self.pace.map(|p| &p.lease.key)).or(self.permit.map(|p| &p.permit.key))
    }
}

/// What the records answered: the account's limit after its release and the gate's reply, each
/// when that part was made and answered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recorded {
    /// The account's learned limit after the release.
    pub limit: Option<f64>,
    /// The gate's reply to its record.
    pub gate: Option<Reply>,
}

/// Where an attempt's records go: one operation for all of them.
#[async_trait]
pub trait RecordGate: Send + Sync {
    /// Makes `records` in order. An error says none of them may have been made (a backend that
    /// makes them one by one goes on past a part that failed, and answers for those made).
    async fn record(&self, records: &Records<'_>) -> Result<Recorded, BackendError>;
}

/// The records as the three ports' own operations, one after another: the reference, and what
/// an in-process backend uses. A part that fails is left out of the answer (its adapter has
/// counted it); the next is still made.
pub struct InOrder {
    /// The breaker gates.
    pub gates: Arc<dyn BreakerGate>,
    /// The quota.
    pub quota: Arc<dyn QuotaGate>,
    /// The accounts' pacers.
    pub pacer: Arc<dyn PacerGate>,
}

#[async_trait]
impl RecordGate for InOrder {
    async fn record(&self, records: &Records<'_>) -> Result<Recorded, BackendError> {
        let mut recorded = Recorded::default();
        if let Some(pace) = records.pace {
            recorded.limit = self.pacer.release(pace.lease, pace.effect, pace.rate, pace.params).await.ok();
        }
        if let Some(gate) = records.gate {
            recorded.gate = self.gates.apply(gate.key, gate.params, gate.op).await.ok();
        }
        if let Some(permit) = records.permit {
            if let Some(tokens) = permit.actual_tokens {
                let _ = self.quota.settle(permit.permit, tokens).await;
            }
            let _ = self.quota.release(permit.permit).await;
        }
        Ok(recorded)
    }
}

/// The account's place an attempt asks for.
#[derive(Clone, Copy, Debug)]
pub struct PaceAsk<'a> {
    /// The account.
    pub key: &'a SourceKey,
    /// Its pacer parameters.
    pub params: &'a PacerParams,
    /// The call's token estimate.
    pub tokens: u32,
}

/// The gate an attempt asks to enter.
#[derive(Clone, Copy, Debug)]
pub struct GateAsk<'a> {
    /// The gate.
    pub key: &'a SourceKey,
    /// Its parameters.
    pub params: &'a GateParams,
}

/// The quota permit an attempt asks for.
#[derive(Clone, Copy, Debug)]
pub struct PermitAsk<'a> {
    /// The source's quota account.
    pub key: &'a SourceKey,
    /// Its limits.
    pub limits: &'a QuotaLimits,
    /// The call's token estimate.
    pub tokens: u32,
}

/// One attempt's admission (SPEC §6, after the memo): the account's place (when the scope
/// paces), the gate, a permit (when the source has local limits), in that order.
#[derive(Clone, Copy, Debug)]
pub struct Admit<'a> {
    /// The account's place.
    pub pace: Option<PaceAsk<'a>>,
    /// The gate.
    pub gate: GateAsk<'a>,
    /// The permit.
    pub permit: Option<PermitAsk<'a>>,
}

/// How far an admission got: each part's answer up to the first that refused (the parts after
/// it were not asked). What the parts before a refusal took has been handed back: the place
/// with no effect on the limit, a probe lease released.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Admission {
    /// The account's answer.
    pub pace: Option<PaceDecision>,
    /// The gate's answer.
    pub gate: Option<Reply>,
    /// The quota's answer.
    pub permit: Option<QuotaDecision>,
}

/// Where an attempt's admission goes: one operation for all of its parts.
#[async_trait]
pub trait AdmitGate: Send + Sync {
    /// Admits the attempt `ask` describes, part by part, the first refusal ending it and handing
    /// back what was taken before. An error says nothing was taken (a backend that asks part by
    /// part hands back what it took before it returns one).
    async fn admit(&self, ask: &Admit<'_>) -> Result<Admission, BackendError>;
}

impl InOrder {
    /// Hands back what an admission took before a refusal or an error: the probe lease (when
    /// `entry` granted one), then the account's place, with no effect on the limit. A
    /// hand-back the backend does not take is counted by its adapter; its lease expires.
    async fn hand_back(&self, ask: &Admit<'_>, lease: Option<&PaceLease>, entry: Option<&Reply>) {
        if let Some(entry) = entry.filter(|e| e.is_probe()) {
            let _ = self.gates.apply(ask.gate.key, ask.gate.params, GateOp::Release { fence: entry.fence() }).await;
        }
        if let (Some(lease), Some(pace)) = (lease, ask.pace) {
            let _ = self.pacer.release(lease, AimdEffect::Nothing, None, pace.params).await;
        }
    }
}

#[async_trait]
impl AdmitGate for InOrder {
    async fn admit(&self, ask: &Admit<'_>) -> Result<Admission, BackendError> {
        let mut admission = Admission::default();
        let lease = match ask.pace {
            None => None,
            Some(pace) => match self.pacer.try_acquire(pace.key, pace.params, pace.tokens).await? {
                PaceDecision::Granted(lease) => {
                    admission.pace = Some(PaceDecision::Granted(lease.clone()));
                    Some(lease)
                }
                paced => {
                    admission.pace = Some(paced);
                    return Ok(admission);
                }
            },
        };
        let entry = match self.gates.apply(ask.gate.key, ask.gate.params, GateOp::TryEnter).await {
            Ok(entry) => entry,
            Err(error) => {
                self.hand_back(ask, lease.as_ref(), None).await;
                return Err(error);
            }
        };
        admission.gate = Some(entry);
        if !entry.is_admitted() {
            self.hand_back(ask, lease.as_ref(), None).await;
            return Ok(admission);
        }
        if let Some(permit) = ask.permit {
            match self.quota.acquire(permit.key, permit.limits, permit.tokens).await {
                Ok(decision) => {
                    if !matches!(decision, QuotaDecision::Granted(_)) {
                        self.hand_back(ask, lease.as_ref(), Some(&entry)).await;
                    }
                    admission.permit = Some(decision);
                }
                Err(error) => {
                    self.hand_back(ask, lease.as_ref(), Some(&entry)).await;
                    return Err(error);
                }
            }
        }
        Ok(admission)
    }
}
