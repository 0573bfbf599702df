//! `SourceAdmission` (SPEC §6): the one admission unit every call kind shares. `pick` walks the
//! scope's sources in selector order (after in-call demotion) through memo → AIMD → gate →
//! quota, first passing wins. When none passed, the call machine decides between failing fast
//! and napping; `retry_after` answers its question to the gates.

use crate::call::CallState;
use crate::error::CallError;
use crate::partition::Partition;
use crate::slot::{Carried, Holders, Slot};
use gateway_core::admission::SkipReason;
use gateway_core::breaker::Reply;
use gateway_core::combined::{Admission, Admit, Freed, GateAsk, InLine, PaceAsk, PermitAsk, Recorded, Records};
use gateway_core::ports::{BackendError, PaceLease, Permit, Telemetry};
use gateway_core::select::demote;
use gateway_core::time::{Clock, Timestamp};
use rand_chacha::ChaCha8Rng;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

/// What `pick` found.
// Made once per pick and matched at once: boxing the slot would cost an allocation an attempt.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Pick {
    /// An admitted attempt.
    Slot(Slot),
    /// No candidate was runnable; `gate_rejections` of them were refused by the breaker side;
    /// `pushed_back` (source, time left) were skipped for a 429 that asked every call to keep
    /// away from their account.
    Blocked {
        gate_rejections: usize,
        pushed_back: Vec<(usize, Duration)>,
        /// Some account's learned limit refused a source (not only the tenant's own quota).
        paced: bool,
        /// The soonest that time alone lifts a refusal (a gate's cooldown, a budget's refill or
        /// reset, the spacing below one in flight, a quota's rate window); `None` when only
        /// releases free what refused (they wake the line).
        ready_in: Option<Duration>,
    },
}

/// How one source fared in a pick.
// Made once per candidate and matched at once: boxing the slot would cost an allocation.
#[allow(clippy::large_enum_variant)]
enum Tried {
    /// Admitted: the attempt's slot.
    Admitted(Slot),
    /// Skipped for this reason; time alone lifts it after `ready_in`, when that is known (a
    /// gate's cooldown, a budget's refill, a quota's window).
    Skipped { reason: SkipReason, ready_in: Option<Duration> },
    /// Its account asked, by a 429's Retry-After, to be left alone this long.
    PushedBack(Duration),
}

/// Whether the memo or the account's 429 pushback keeps `source` out at `now`, for a call that
/// may wait `remaining_stall` more: a pushback past that budget first (the call cannot wait it
/// out), then the memo (a gate rejection), then a pushback within it (its end is waited for).
fn away(scope: &Partition, source: usize, now: Timestamp, remaining_stall: Duration) -> Option<Tried> {
    let away = scope.pushed_back(source).saturating_since(now);
    if away > remaining_stall {
        Some(Tried::PushedBack(away))
    } else if let Some(left) = scope.local().memo.remaining(source, now) {
        Some(Tried::Skipped { reason: SkipReason::Cooldown, ready_in: Some(left) })
    } else if !away.is_zero() {
        Some(Tried::PushedBack(away))
    } else {
        None
    }
}

/// What `source`'s attempt in `scope` asks of the backend (sources without local limits ask
/// for no permit); `line`: the call's standing in the line across processes.
fn ask_of(scope: &Partition, source: usize, tokens: u32, line: Option<InLine>) -> Admit<'_> {
    let (key, params) = &scope.gates[source];
    let limits = &scope.policy.sources[source].quota;
    let limited = limits.max_concurrency.is_some() || limits.rpm.is_some() || limits.tpm.is_some();
    Admit {
        pace: scope.pacer.as_ref().map(|params| PaceAsk { key: scope.account(source), params, tokens }),
        gate: GateAsk { key, params },
        permit: limited.then_some(PermitAsk { key, limits, tokens }),
        line: line.filter(|_| limited || scope.pacer.is_some()),
    }
}

/// The standing in its scope's line across processes of the call at `order` of `tenant`, at
/// `now`: how long it and the oldest other waiter here have waited; it lasts three fallback
/// polls unless renewed (a waiter in line asks again at least once a poll).
fn in_line(scope: &Partition, tenant: &crate::turns::Tenant, order: (Timestamp, u64), now: Timestamp) -> InLine {
    let others = scope.turns().oldest_other(tenant, order).map(|start| now.saturating_since(start));
    InLine { waited: now.saturating_since(order.0), others, lasts: scope.policy.poll_interval.saturating_mul(3) }
}

/// Admits `source`'s attempt in `scope`, in the call's own task (an in-process backend answers
/// at once; a remote one in one round trip). A call dropped while its admission is in flight
/// leaves nothing taken: the admission goes on in a task of the client's tracker, which hands
/// back what it admitted and wakes the oldest waiter ([`InFlight`]'s drop).
async fn admit(
    holders: &Arc<Holders>,
    scope: &Arc<Partition>,
    source: usize,
    (tokens, line): (u32, Option<InLine>),
    carried: Option<Carried>,
) -> Result<Admission, BackendError> {
    let (owned, partition) = (holders.clone(), scope.clone());
    let admission = Box::pin(async move {
        let ask = ask_of(&partition, source, tokens, line);
        match carried {
            // The records the call was let go with, made first, in the same operation.
            Some(carried) => carried.then_admit(owned.attempts.as_ref(), &ask).await,
            None => owned.attempts.admit(&ask).await,
        }
    });
    InFlight { admission: Some(admission), holders: holders.clone(), scope: scope.clone(), source }.await
}

/// An admission's question to the backend.
type Admitting = Pin<Box<dyn Future<Output = Result<Admission, BackendError>> + Send>>;

/// An admission in flight; dropped before its answer, it goes on in the background and hands
/// back what it admitted.
struct InFlight {
    admission: Option<Admitting>,
    holders: Arc<Holders>,
    scope: Arc<Partition>,
    source: usize,
}

impl Future for InFlight {
    type Output = Result<Admission, BackendError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Taken out while polled: one that panics is dropped with the panic, not finished again
        // in the background.
        let Some(mut admission) = self.admission.take() else {
            let key = self.scope.gates[self.source].0.to_string();
            return Poll::Ready(Err(BackendError::BackendUnavailable {
                backend: "admission",
                key,
                detail: "polled after its answer".to_owned(),
            }));
        };
        match admission.as_mut().poll(cx) {
            Poll::Ready(answer) => Poll::Ready(answer),
            Poll::Pending => {
                self.admission = Some(admission);
                Poll::Pending
            }
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let Some(admission) = self.admission.take() else { return };
        let (holders, scope, source) = (self.holders.clone(), self.scope.clone(), self.source);
        let finish = async move {
            if let Ok(Admission::Admitted { lease, entry, permit }) = admission.await {
                hand_back(&holders, &scope, source, lease, Some(entry), permit, false).await;
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(self.holders.releases.spawn_on(finish, &runtime)),
            // No runtime to finish it on: what it may have taken expires by itself.
            Err(_) => tracing::warn!(gate = %self.scope.gates[source].0, "admission dropped outside a runtime; its leases will expire"),
        }
    }
}

/// What a release of `scope`'s tells its line across processes: whether a call waits here, and
/// the grace of one fallback poll (the line's resolution: a waiter in line asks again at least
/// once a poll).
pub(crate) fn freed(scope: &Partition) -> Freed {
    Freed { waiting_here: scope.turns().anyone_waits(), grace: scope.policy.poll_interval }
}

/// Hands back what an attempt of `source` holds and never used (its account's place, its
/// probe lease when `entry` granted one, its permit), through the attempt gate (on Redis one
/// script, which hands what it frees to the process whose waiter is oldest), and lets the next
/// waiter here go unless another process's was told, or `next_went`: one went already for
/// this place (the attempt's records were sent, then dropped before their answer).
pub(crate) async fn hand_back(
    holders: &Holders,
    scope: &Partition,
    source: usize,
    lease: Option<PaceLease>,
    entry: Option<Reply>,
    permit: Option<Permit>,
    mut next_went: bool,
) {
    let records =
        Records { freed: Some(freed(scope)), ..ask_of(scope, source, 0, None).hand_back(lease.as_ref(), entry.as_ref(), permit.as_ref()) };
    let recorded = release(holders, scope, &records, &mut next_went).await;
    if !next_went {
        scope.turns().freed(&scope.tenant, !recorded.elsewhere);
    }
}

/// Makes `records`, which free capacity in `scope` (records the backend cannot take are logged
/// and counted by the adapter; the call goes on), and answers what was recorded. A backend that
/// answers later (Redis) runs one scope's operations in the order they were sent, so the next
/// waiter here goes as soon as the records are on their way: its admission, sent after them,
/// finds what they freed, and the two round trips overlap instead of following each other
/// (SPEC §6). Only while the scope's last release stayed in this process: once one went to an
/// older waiter of another process, the next waiter here waits for the answer to say where
/// this one went (the caller then lets it go, or not). An in-process backend answers at once,
/// and the caller lets the waiter go. `next_went` is set the moment a waiter goes (a caller
/// whose future is dropped before the answer must not let another go for the same place);
/// already set, nobody is let go.
pub(crate) async fn release(holders: &Holders, scope: &Partition, records: &Records<'_>, next_went: &mut bool) -> Recorded {
    let mut recording = holders.attempts.record(records);
    let first = crate::slot::poll_once(recording.as_mut()).await;
    if first.is_none() && !*next_went && !scope.turns().released_elsewhere() {
        *next_went = true;
        scope.turns().freed(&scope.tenant, true);
    }
    let answer = match first {
        Some(answer) => answer,
        None => recording.await,
    };
    answered(scope, records, answer)
}

/// What `records` of `scope`'s came to (nothing known when the backend failed: it logged and
/// counted that), told to the scope's line when they freed shared capacity.
pub(crate) fn answered(scope: &Partition, records: &Records<'_>, answer: Result<Recorded, BackendError>) -> Recorded {
    let recorded = answer.unwrap_or_default();
    // Only a release of shared capacity is handed on in the line.
    if records.handed_on().is_some() {
        scope.turns().heard_release(recorded.elsewhere);
    }
    recorded
}

pub(crate) struct SourceAdmission {
    /// The gates, quota and pacers (and where dropped slots release to them).
    pub(crate) holders: Arc<Holders>,
    pub(crate) telemetry: Arc<dyn Telemetry>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rng: Arc<Mutex<ChaCha8Rng>>,
    /// The calls' spans, when asked for.
    pub(crate) traces: Option<crate::trace::Traces>,
}

impl SourceAdmission {
    pub(crate) fn rng(&self) -> std::sync::MutexGuard<'_, ChaCha8Rng> {
        self.rng.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reports a gate transition made by this process.
    pub(crate) fn gate_event(&self, scope: &Partition, source: usize, reply: &Reply) {
        self.holders.gate_event(&scope.gates[source].0, reply);
    }

    /// The first runnable source of the scope, in selector order, or why there is none.
    /// `carried`: records the call was let go with, which the first admission asked makes
    /// (those that reach none are made on their own when dropped).
    pub(crate) async fn pick(
        &self,
        scope: &Arc<Partition>,
        call: &mut CallState,
        estimated_tokens: u32,
        mut carried: Option<Carried>,
    ) -> Result<Pick, CallError> {
        let views = scope.views();
        let mut order = Vec::with_capacity(views.len());
        scope.selector.order(&views, &mut *self.rng(), &mut order);
        // In-call demotion (the outcome table decides which failures count toward it). The
        // health the trusted-alternative rule compares is the selector's view of it.
        let health: Option<Vec<f64>> = scope.selector.uses_health().then(|| views.iter().map(|v| v.health).collect());
        demote(&mut order, call.machine.fails(), health.as_deref());
        // A source whose answer was more than the call can hold is not asked again.
        order.retain(|&source| !call.machine.is_spent(source));
        let (mut gate_rejections, mut pushed_back, mut paced) = (0, Vec::new(), false);
        let mut ready_in: Option<Duration> = None;
        for source in order {
            match self.try_source(scope, call, source, estimated_tokens, &mut carried).await? {
                Tried::Admitted(slot) => return Ok(Pick::Slot(slot)),
                Tried::PushedBack(away) => {
                    pushed_back.push((source, away));
                    call.skipped(scope.source_name(source), SkipReason::RateLimited);
                }
                Tried::Skipped { reason, ready_in: timed } => {
                    gate_rejections += usize::from(reason.is_gate_rejection());
                    paced |= reason == SkipReason::AdaptivePaced;
                    ready_in = ready_in.into_iter().chain(timed).min();
                    call.skipped(scope.source_name(source), reason);
                }
            }
        }
        Ok(Pick::Blocked { gate_rejections, pushed_back, paced, ready_in })
    }

    /// One source through memo → AIMD → gate → quota: the memo here, the rest as one admission
    /// of the backend's (`AttemptGate::admit`: on Redis one script), which hands back what a refusal's
    /// earlier parts took.
    async fn try_source(
        &self,
        scope: &Arc<Partition>,
        call: &CallState,
        source: usize,
        estimated_tokens: u32,
        carried: &mut Option<Carried>,
    ) -> Result<Tried, CallError> {
        let now = self.clock.now();
        // 1. the memo, and the account's 429 pushback, under one short lock
        if let Some(refused) = away(scope, source, now, call.machine.remaining_stall(now)) {
            return Ok(refused);
        }
        // 2.-4. the account's learned limit, the gate, the quota
        let line = self.holders.attempts.stands_in_line().then(|| in_line(scope, &scope.tenant, call.order(), now));
        let (lease, entry, permit) =
            match admit(&self.holders, scope, source, (estimated_tokens, line), carried.take()).await.map_err(|e| call.backend(e))? {
                Admission::Paced(paced) => return Ok(Tried::Skipped { reason: SkipReason::AdaptivePaced, ready_in: paced.ready_in }),
                Admission::Denied(entry) => {
                    self.gate_event(scope, source, &entry);
                    // retry_after is 0 unless OPEN: a HALF_OPEN denial never memoes the source.
                    scope.local().memo.note_denial(source, self.clock.now(), entry.retry_after);
                    let ready_in = Some(entry.retry_after).filter(|wait| !wait.is_zero());
                    return Ok(Tried::Skipped { reason: SkipReason::CircuitOpen, ready_in });
                }
                Admission::Refused { entry, retry_after, .. } => {
                    self.gate_event(scope, source, &entry);
                    // A rate window's wait; a concurrency limit alone says 0: a release frees it.
                    let ready_in = Some(retry_after).filter(|wait| !wait.is_zero());
                    return Ok(Tried::Skipped { reason: SkipReason::RateLimited, ready_in });
                }
                Admission::Admitted { lease, entry, permit } => (lease, entry, permit),
            };
        self.gate_event(scope, source, &entry);
        // From here the slot holds the in-flight count, the account's place, the probe lease
        // and the permit: every exit hands them back.
        scope.local().inflight[source] += 1;
        let mut slot = Slot::counted(scope.clone(), self.holders.clone(), source, lease);
        slot.admitted(entry);
        if let Some(permit) = permit {
            slot.hold_permit(permit);
        }
        Ok(Tried::Admitted(slot))
    }

    /// The gates' earliest certain retry moment over the partition's sources but `except`.
    pub(crate) async fn retry_after(&self, scope: &Partition, except: &[usize]) -> Result<Duration, BackendError> {
        if except.is_empty() {
            return self.holders.gates.retry_after(&scope.gates).await;
        }
        let asked: Vec<_> = scope.gates.iter().enumerate().filter(|(i, _)| !except.contains(i)).map(|(_, gate)| gate.clone()).collect();
        self.holders.gates.retry_after(&asked).await
    }
}
