//! An admitted attempt and everything it holds: the local in-flight count, the place on its
//! account's learned limit (a pacer lease), the probe lease and the quota permit. A slot is made
//! only for an attempt admitted whole (a refused admission hands back what it took itself:
//! `AttemptGate::admit`). `Slot` is a guard: `finish` settles what it holds (one
//! `AttemptGate::record`); if
//! the call is dropped at any await point first, `Drop` releases what is still held (the
//! in-flight count at once, the leases and the permit on a spawned task), so no path can leak
//! them. The end of every attempt made wakes the partition's oldest waiter.
//!
//! Records are off the answer's path: `finish` settles the local state at once, then runs the
//! records (the pacer release, the gate's record, the permit's settle and release) as far as
//! they go without waiting. An in-process backend completes them there; what waits on a remote
//! backend (Redis) goes on in the background, at most `Holders::records` at once and each
//! within `record_timeout`, and the call returns. A record that finds no room, or runs out of
//! time, is dropped and counted (its leases then expire by themselves).

use crate::partition::Partition;
use gateway_core::breaker::{Fence, Reply};
use gateway_core::combined::{AttemptGate, GateRecord, PaceRecord, PermitRecord, Recorded, Records};
use gateway_core::outcome::{AimdEffect, NextStep, OutcomeClass};
use gateway_core::ports::Telemetry;
use gateway_core::ports::{BreakerGate, PaceLease, PacerGate, Permit};
use gateway_core::request::RateSignal;
use gateway_core::telemetry::GateEvent;
use gateway_core::time::Clock;
use gateway_core::time::Timestamp;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;

/// The adapters a slot releases to.
pub(crate) struct Holders {
    pub(crate) gates: Arc<dyn BreakerGate>,
    pub(crate) pacer: Arc<dyn PacerGate>,
    /// Where an attempt's admission and its records go, one operation each.
    pub(crate) attempts: Arc<dyn AttemptGate>,
    /// Where a dropped slot's releases and the background records run, so a shutdown can wait
    /// for them.
    pub(crate) releases: TaskTracker,
    /// Room for records in the background.
    pub(crate) records: Arc<Semaphore>,
    /// How long a record in the background may take.
    pub(crate) record_timeout: Duration,
    /// Records dropped: no room, or out of time.
    pub(crate) dropped_records: AtomicU64,
    pub(crate) telemetry: Arc<dyn Telemetry>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl Holders {
    /// Reports a gate transition made by this process.
    pub(crate) fn gate_event(&self, key: &gateway_core::ports::SourceKey, reply: &Reply) {
        if let Some(transition) = reply.transition {
            self.telemetry.gate(&GateEvent {
                key: key.clone(),
                at: self.clock.now(),
                transition,
                incarnation: reply.incarnation,
                epoch: reply.epoch,
                retry_after: reply.retry_after,
            });
        }
    }

    /// Room for one attempt's records in the background; none: they are dropped and counted.
    fn room(&self, scope: &Partition, source: usize) -> Option<OwnedSemaphorePermit> {
        let room = self.records.clone().try_acquire_owned().ok();
        if room.is_none() {
            self.drop_record(scope, source, "too many records in the background");
        }
        room
    }

    /// Runs `records` (which own their slot) as far as they go without waiting, and the rest in
    /// the background, in `room`, within `record_timeout`.
    async fn off_the_path(
        self: &Arc<Self>,
        room: OwnedSemaphorePermit,
        scope: &Arc<Partition>,
        source: usize,
        mut records: Pin<Box<dyn Future<Output = ()> + Send>>,
    ) {
        // All the way on an in-process backend.
        if poll_once(records.as_mut()).await.is_none() {
            let (holders, scope) = (self.clone(), scope.clone());
            let background = async move {
                if tokio::time::timeout(holders.record_timeout, records).await.is_err() {
                    holders.drop_record(&scope, source, "out of time");
                }
                drop(room);
            };
            drop(self.releases.spawn(background));
        }
    }

    fn drop_record(&self, scope: &Partition, source: usize, why: &'static str) {
        self.dropped_records.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(source = scope_name(scope, source), why, "attempt's records dropped; its leases expire by themselves");
    }
}

/// Polls `future` once: its answer if it had one then (it is not to be polled again), else
/// `None` (what it sends on its first poll is on its way).
pub(crate) async fn poll_once<T>(mut future: Pin<&mut (dyn Future<Output = T> + Send + '_)>) -> Option<T> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match future.as_mut().poll(cx) {
            Poll::Ready(answer) => Some(answer),
            Poll::Pending => None,
        })
    })
    .await
}

pub(crate) struct Slot {
    pub(crate) scope: Arc<Partition>,
    holders: Arc<Holders>,
    pub(crate) source: usize,
    /// The gate's admission (`TryEnter` reply), once the gate admitted the attempt.
    entry: Option<Reply>,
    /// The local in-flight count is held.
    inflight: bool,
    /// The place on the account's learned limit.
    pace: Option<PaceLease>,
    /// The probe lease is held and not yet settled or released.
    probe: bool,
    permit: Option<Permit>,
    /// Its records handed what it freed to an older waiter of another process.
    freed_elsewhere: bool,
    /// The next waiter went when its records were sent (`admission::release`).
    next_went: bool,
}

impl Slot {
    /// A slot holding the local in-flight count of `source` (already counted by the caller) and,
    /// when the scope paces, its account's lease, before the gate is asked.
    pub(crate) fn counted(scope: Arc<Partition>, holders: Arc<Holders>, source: usize, pace: Option<PaceLease>) -> Self {
        Slot {
            scope,
            holders,
            source,
            entry: None,
            inflight: true,
            pace,
            probe: false,
            permit: None,
            freed_elsewhere: false,
            next_went: false,
        }
    }

    /// Whether its admission may have left room for the next waiter in line, who then tries at
    /// once: room on its account (always, when the scope does not pace), or another account in
    /// the scope (the next waiter may go there: a waiter goes whatever it waits for).
    pub(crate) fn left_room(&self) -> bool {
        self.pace.as_ref().is_none_or(|pace| pace.lease.room) || self.scope.accounts.keys.len() > 1
    }

    /// The gate admitted the attempt with `entry`.
    pub(crate) fn admitted(&mut self, entry: Reply) {
        self.probe = entry.is_probe();
        self.entry = Some(entry);
    }

    /// The fence the attempt was admitted under.
    fn fence(&self) -> Fence {
        self.entry.map_or(Fence { incarnation: 0, epoch: 0 }, |e| e.fence())
    }

    /// The gate's epoch the attempt was admitted in (0 before the gate was asked).
    pub(crate) fn epoch(&self) -> u64 {
        self.fence().epoch
    }

    /// The incarnation of the gate that admitted the attempt (0 before the gate was asked).
    pub(crate) fn incarnation(&self) -> u64 {
        self.entry.map_or(0, |e| e.incarnation)
    }

    /// The gate state the attempt was admitted in.
    pub(crate) fn admitted_in(&self) -> gateway_core::CircuitState {
        self.entry.map_or(gateway_core::CircuitState::Closed, |e| e.state)
    }

    pub(crate) fn hold_permit(&mut self, permit: Permit) {
        self.permit = Some(permit);
    }

    pub(crate) fn is_probe(&self) -> bool {
        self.entry.is_some_and(|e| e.is_probe())
    }

    /// Lets go of the leases, the permit and the probe lease without releasing them: they
    /// expire by themselves (records that found no room).
    fn forsake(&mut self) {
        (self.pace, self.permit, self.probe) = (None, None, false);
    }

    fn end_inflight(&mut self) {
        if std::mem::take(&mut self.inflight) {
            let mut local = self.scope.local();
            local.inflight[self.source] = local.inflight[self.source].saturating_sub(1);
        }
    }

    /// Settles the attempt that ended with `class` at `now`: local health and progress at once,
    /// then the records (see the module): the account's place with the outcome's AIMD effect,
    /// the breaker effect of the outcome table (or the probe release), the quota permit with the
    /// actual token count. `responsiveness` (the whole attempt, or a stream's time to its commit
    /// point) decides, for a real success, whether the slow-call channel hears of it.
    pub(crate) async fn finish(
        mut self,
        class: OutcomeClass,
        responsiveness: Duration,
        actual_tokens: Option<u32>,
        rate: Option<&RateSignal>,
        now: Timestamp,
    ) -> Finished {
        let health = {
            let mut local = self.scope.local();
            local.health[self.source].observe_class(class);
            if class.effects().next == NextStep::Return {
                local.progress.record(now);
            }
            local.health[self.source].value()
        };
        self.end_inflight();
        let (scope, holders, source) = (self.scope.clone(), self.holders.clone(), self.source);
        let paced = self.pace.is_some();
        let ended = Ended { class, responsiveness, actual_tokens, rate: rate.copied() };
        // On a backend where each operation is a round trip, the next waiter here carries the
        // records with its admission (one script, one reply); else, or with nobody to let go,
        // they are made now.
        let carry = holders.attempts.carries_records() && self.entry.is_some() && !scope.turns().released_elsewhere();
        let alone = if carry { scope.turns().hand_over(&scope.tenant, Carried::new(self, ended)) } else { Some(Carried::new(self, ended)) };
        if let Some(carried) = alone {
            carried.make().await;
        }
        // The account's learned limit as this process last heard it (this attempt's release, on
        // an in-process backend).
        let aimd_limit = if paced { scope.aimd_limit(source) } else { None };
        Finished { health, aimd_limit }
    }

    /// The records of the attempt that `ended`, as one `AttemptGate::record` (in order: the
    /// account's place, the gate's record, the permit); the slot goes at their end.
    async fn records(mut self, ended: Ended) {
        // The outcome settles the probe: cleared before the await, so a records future dropped
        // while the records are in flight does not also release the lease (the next prober's,
        // by then). The account's place and the permit are cleared only after it: a call
        // dropped meanwhile releases them again from `Drop` (a second release of one lease or
        // permit changes nothing).
        let op = self.settles_probe(&ended);
        let recorded = {
            let records = records_of(&self.scope, self.source, (self.pace.as_ref(), self.permit.as_ref()), op, &ended);
            crate::admission::release(&self.holders, &self.scope, &records, &mut self.next_went).await
        };
        self.heard(recorded, ended.class);
    }

    /// The gate's record of the attempt that `ended` (its probe, if any, settled by it: the
    /// slot no longer releases it).
    fn settles_probe(&mut self, ended: &Ended) -> Option<gateway_core::breaker::GateOp> {
        self.probe = false;
        let effects = ended.class.effects();
        self.entry.and_then(|entry| effects.gate_op(&entry, ended.responsiveness, self.scope.policy.breaker.slow_call))
    }

    /// What the records of an attempt that ended with `class` answered: the account's limit and
    /// the gate's transition heard; the place and the permit are released.
    fn heard(&mut self, recorded: Recorded, class: OutcomeClass) {
        if let Some(limit) = recorded.limit {
            // A 429 is what the pacer reads as noise or as our own load.
            self.scope.heard_aimd_limit(self.source, limit, class.effects().aimd == AimdEffect::Decrease);
        }
        if let Some(reply) = &recorded.gate {
            self.holders.gate_event(&self.scope.gates[self.source].0, reply);
        }
        self.freed_elsewhere = recorded.elsewhere;
        (self.pace, self.permit) = (None, None);
    }
}

/// The records of `source`'s attempt in `scope` that `ended`, holding `pace` and `permit`, with
/// the gate's record `op`.
fn records_of<'a>(
    scope: &'a Partition,
    source: usize,
    (pace, permit): (Option<&'a PaceLease>, Option<&'a Permit>),
    op: Option<gateway_core::breaker::GateOp>,
    ended: &'a Ended,
) -> Records<'a> {
    let (key, params) = &scope.gates[source];
    let effects = ended.class.effects();
    Records {
        pace: pace.zip(scope.pacer.as_ref()).map(|(lease, params)| PaceRecord {
            lease,
            effect: effects.aimd,
            rate: ended.rate.as_ref(),
            params,
        }),
        gate: op.map(|op| GateRecord { key, params, op }),
        permit: permit.map(|permit| PermitRecord { permit, actual_tokens: ended.actual_tokens }),
        freed: Some(crate::admission::freed(scope)),
    }
}

/// How an attempt ended, as its records tell it.
#[derive(Clone, Copy)]
pub(crate) struct Ended {
    class: OutcomeClass,
    /// The whole attempt, or a stream's time to its commit point.
    responsiveness: Duration,
    actual_tokens: Option<u32>,
    rate: Option<RateSignal>,
}

/// What settling an attempt left at once: the source's health after the outcome and its
/// account's AIMD limit as last heard (none when unpaced).
pub(crate) struct Finished {
    pub(crate) health: f64,
    pub(crate) aimd_limit: Option<f64>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.end_inflight();
        let probe = self.probe.then_some(self.fence());
        let (permit, pace) = (self.permit.take(), self.pace.take());
        // An attempt was admitted (settled by `finish` or cut short by the call's drop): its
        // capacity is free once what it still holds is released, and the oldest waiter's turn.
        let made = self.entry.is_some();
        if probe.is_none() && permit.is_none() && pace.is_none() {
            if made && !self.next_went {
                self.scope.turns().freed(&self.scope.tenant, !self.freed_elsewhere);
            }
            return;
        }
        let (holders, scope, source) = (self.holders.clone(), self.scope.clone(), self.source);
        let releases = self.holders.releases.clone();
        // The probe lease is still held only while `probe` is (the records clear it).
        let entry = self.entry.filter(|_| self.probe);
        let next_went = self.next_went;
        let release = async move { crate::admission::hand_back(&holders, &scope, source, pace, entry, permit, next_went).await };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(releases.spawn_on(release, &runtime)),
            // No runtime to release on: the probe lease and the permit lease expire by themselves.
            Err(_) => tracing::warn!(source = scope_name(&self.scope, source), "attempt dropped outside a runtime; its leases will expire"),
        }
    }
}

fn scope_name(scope: &Partition, source: usize) -> String {
    format!("{}/{}", scope.policy.name, scope.source_name(source))
}

mod carried;
pub(crate) use carried::Carried;
