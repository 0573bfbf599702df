//! An attempt's admission and its records, each one operation of one port, [`AttemptGate`], so
//! that a shared backend can make each in one round trip (Redis: one script). `admit` asks the
//! account, the gate and the quota in turn (SPEC §6); `record` makes what the end of an attempt
//! hands back to the shared state, in this order: the account's place with the outcome's effect
//! on its learned limit, the gate's record (or the probe's release), the permit's actual tokens
//! and its release. A refused admission hands back what its earlier parts took as records too
//! ([`Admit::hand_back`]). [`InOrder`] is the reference every backend is held to, and what the
//! in-process backend uses: the three ports' own operations one after another.

use crate::aimd::Paced;
use crate::aimd::PacerParams;
use crate::breaker::{GateOp, GateParams, Reply};
use crate::outcome::AimdEffect;
use crate::policy::QuotaLimits;
use crate::ports::{
    BackendError, BreakerGate, PaceDecision, PaceLease, PacerGate, Permit, QuotaDecision, QuotaGate, QuotaLimit, SourceKey,
};
use crate::request::RateSignal;
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

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
    /// What the place and the permit free, told to the line across processes (`None`: the
    /// line is not told).
    pub freed: Option<Freed>,
}

/// A release told to its scope's line across processes (SPEC §6). A shared backend hands what
/// it frees to the process whose oldest call waiting for shared capacity started first,
/// telling it (Redis: a message on the scope's channel); with nobody standing in that line it
/// tells nobody (every process with a call waiting in line for shared capacity stands in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freed {
    /// A call waits in this process's line.
    pub waiting_here: bool,
    /// How much earlier than this process's own a waiter elsewhere must have started to be
    /// handed the capacity: handing it over costs a message and an admission's round trip, so
    /// waiters that started within this of each other are as good as tied.
    pub grace: Duration,
}

impl Records<'_> {
    /// The key an error of the records names: the gate's, else the account's, else the permit's.
    pub fn key(&self) -> Option<&SourceKey> {
        self.gate.map(|g| g.key).or(self.pace.map(|p| &p.lease.key)).or(self.permit.map(|p| &p.permit.key))
    }

    /// What the records tell their scope's line across processes: `freed`, when they free
    /// shared capacity (an account's place or a permit; a gate's record alone frees none).
    pub fn handed_on(&self) -> Option<Freed> {
        self.freed.filter(|_| self.pace.is_some() || self.permit.is_some())
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
    /// What the place and the permit freed went to an older waiter of another process (it was
    /// told): nobody here is woken for it.
    pub elsewhere: bool,
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
    /// The call's standing in its scope's line across processes, for a shared backend (`None`:
    /// it stands in no line).
    pub line: Option<InLine>,
}

/// A call's standing in its scope's line across processes (SPEC §6: first come, first served by
/// the calls' start). A shared backend keeps, per process, the start of its oldest call waiting
/// in line for shared capacity, and hands capacity freed anywhere to the process whose waiter
/// started first: a refusal of shared capacity renews the process's standing, an admission
/// moves it to the oldest other waiter's start, or ends it when none waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InLine {
    /// How long the call has waited: since it started.
    pub waited: Duration,
    /// How long the oldest other call waiting in this process's line for shared capacity has
    /// waited (`None`: no other waits).
    pub others: Option<Duration>,
    /// How long the process's standing lasts unless renewed (a process that died stops being
    /// told).
    pub lasts: Duration,
}

/// What an admission came to. A refusal has handed back what the parts before it took: the
/// place with no effect on the limit, a probe lease released.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// Every part let the attempt go: what it holds.
    Admitted {
        /// The account's place (when the scope paces).
        lease: Option<PaceLease>,
        /// The gate's admission (a probe's lease, when it is one).
        entry: Reply,
        /// The permit (when the source has local limits).
        permit: Option<Permit>,
    },
    /// The account's learned limit or a reported budget refused.
    Paced(Paced),
    /// The gate denied (its reply says until when, if OPEN).
    Denied(Reply),
    /// The quota refused, after the gate let the attempt in.
    Refused {
        /// The gate's admission (handed back).
        entry: Reply,
        /// The limit that refused.
        limit: QuotaLimit,
        /// Hint until a permit could be had.
        retry_after: Duration,
    },
}

impl<'a> Admit<'a> {
    /// The records that hand back what an admission of this took: `lease` with no effect on
    /// the limit, the probe lease of `entry` if it granted one, `permit`.
    pub fn hand_back(&self, lease: Option<&'a PaceLease>, entry: Option<&Reply>, permit: Option<&'a Permit>) -> Records<'a> {
        Records {
            pace: lease.zip(self.pace).map(|(lease, pace)| PaceRecord {
                lease,
                effect: AimdEffect::Nothing,
                rate: None,
                params: pace.params,
            }),
            gate: entry.filter(|e| e.is_probe()).map(|e| GateRecord {
                key: self.gate.key,
                params: self.gate.params,
                op: GateOp::Release { fence: e.fence() },
            }),
            permit: permit.map(|permit| PermitRecord { permit, actual_tokens: None }),
            freed: None,
        }
    }
}

/// Where an attempt's admission and records go: one operation for each.
#[async_trait]
pub trait AttemptGate: Send + Sync {
    /// Admits the attempt `ask` describes, part by part, the first refusal ending it and handing
    /// back what was taken before. An error says nothing was taken (a backend that asks part by
    /// part hands back what it took before it returns one).
    async fn admit(&self, ask: &Admit<'_>) -> Result<Admission, BackendError>;

    /// Makes `records` in order. An error says none of them may have been made (a backend that
    /// makes them one by one goes on past a part that failed, and answers for those made).
    /// A backend that answers later runs one scope's operations in the order they were sent: an
    /// admission asked after this future was first polled finds what these records freed (the
    /// next waiter goes as soon as they are on their way, SPEC §6; one run out of order, as on a
    /// script's reload, costs that waiter its fallback poll, as a lost wake-up does).
    async fn record(&self, records: &Records<'_>) -> Result<Recorded, BackendError>;

    /// Makes `records` (an attempt that ended), then admits `ask` (the next waiter's attempt in
    /// the same scope): the release carried by the admission it frees room for (SPEC §6). A
    /// backend where each operation is a round trip makes both in one (Redis: one script, one
    /// reply); the answers are the same as `record` then `admit` one after the other. The
    /// records' error says as `record`'s does; an admission not made for it (the whole exchange
    /// failed) answers the same error.
    async fn record_then_admit(
        &self,
        records: &Records<'_>,
        ask: &Admit<'_>,
    ) -> (Result<Recorded, BackendError>, Result<Admission, BackendError>) {
        let recorded = self.record(records).await;
        (recorded, self.admit(ask).await)
    }

    /// Whether an attempt's records are better carried by the next waiter's admission than made
    /// on their own (`record_then_admit` saves a round trip and its reply). In-process backends:
    /// never (they record at once).
    fn carries_records(&self) -> bool {
        false
    }

    /// Whether this process stands in its scopes' lines across processes (a shared backend that
    /// hands capacity on, and hears what is handed to it): only then is an admission's
    /// [`InLine`] worth working out. In-process backends: never.
    fn stands_in_line(&self) -> bool {
        false
    }
}

#[async_trait]
impl AttemptGate for InOrder {
    async fn admit(&self, ask: &Admit<'_>) -> Result<Admission, BackendError> {
        let lease = match ask.pace {
            None => None,
            Some(pace) => match self.pacer.try_acquire(pace.key, pace.params, pace.tokens).await? {
                PaceDecision::Granted(lease) => Some(lease),
                PaceDecision::Paced(paced) => return Ok(Admission::Paced(paced)),
            },
        };
        let entry = match self.gates.apply(ask.gate.key, ask.gate.params, GateOp::TryEnter).await {
            Ok(entry) => entry,
            Err(error) => {
                let _ = self.record(&ask.hand_back(lease.as_ref(), None, None)).await;
                return Err(error);
            }
        };
        if !entry.is_admitted() {
            let _ = self.record(&ask.hand_back(lease.as_ref(), None, None)).await;
            return Ok(Admission::Denied(entry));
        }
        let permit = match ask.permit {
            None => None,
            Some(permit) => match self.quota.acquire(permit.key, permit.limits, permit.tokens).await {
                Ok(QuotaDecision::Granted(permit)) => Some(permit),
                Ok(QuotaDecision::Refused { limit, retry_after }) => {
                    let _ = self.record(&ask.hand_back(lease.as_ref(), Some(&entry), None)).await;
                    return Ok(Admission::Refused { entry, limit, retry_after });
                }
                Err(error) => {
                    let _ = self.record(&ask.hand_back(lease.as_ref(), Some(&entry), None)).await;
                    return Err(error);
                }
            },
        };
        Ok(Admission::Admitted { lease, entry, permit })
    }

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
