//! An attempt's records (SPEC §3, §4, §6): what the end of an attempt hands back to the shared
//! state, in this order: the account's place with the outcome's effect on its learned limit,
//! the gate's record (or the probe's release), the permit's actual tokens and its release. They
//! are one operation of a port of their own, [`RecordGate`], so that a shared backend can make
//! them in one round trip (Redis: one script); [`InOrder`] is the reference every backend is
//! held to, the three ports' own operations one after another.

use crate::aimd::PacerParams;
use crate::breaker::{GateOp, GateParams, Reply};
use crate::outcome::AimdEffect;
use crate::ports::{BackendError, BreakerGate, PaceLease, PacerGate, Permit, QuotaGate, SourceKey};
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
