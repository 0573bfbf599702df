//! The call loop (SPEC §7, §8, §13): the glue that performs what the call's `CallMachine`
//! asks — a pick in turn, the gates' retry moment, a sleep, the attempt (a stream read to the
//! commit point the machine judges) — and tells it how each ended, until it returns a response,
//! a stream past its commit point, or a typed terminal error. One loop serves every call kind,
//! whole or streamed.

use crate::admission::{Pick, SourceAdmission};
use crate::delivery::{Asked, Delivered, Delivery, Reached};
use crate::error::{AttemptRecord, CallError, CallReport, Exhausted};
use crate::partition::Partition;
use crate::slot::Slot;
use crate::turns::Turn;
use gateway_core::admission::SkipReason;
use gateway_core::breaker::CircuitState;
use gateway_core::call::{CallMachine, CallRules, Failure, Next, Picked};
use gateway_core::ports::{BackendError, Telemetry, Upstream};
use gateway_core::request::{Outcome, RateSignal, Request, Response};
use gateway_core::telemetry::{AttemptEvent, CallEvent, CallResult, SourceReason};
use gateway_core::time::{Clock, Timestamp};
use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Instrument;

/// Everything one call keeps: never shared with other calls.
pub(crate) struct CallState {
    pub(crate) id: u64,
    /// The tenant the call was made for.
    pub(crate) tenant: Option<String>,
    clock: Arc<dyn Clock>,
    started: Timestamp,
    /// The call's rules at work: budget, re-asks, back-off, stall, the waits.
    pub(crate) machine: CallMachine,
    reasons: BTreeMap<String, SourceReason>,
    attempts: Vec<AttemptRecord>,
    /// Why the call may use one source only, if it is pinned (for its errors).
    pub(crate) pinned: Option<String>,
    /// The call's span (none unless traces are on).
    pub(crate) span: tracing::Span,
}

impl CallState {
    pub(crate) fn new(id: u64, clock: Arc<dyn Clock>, rules: CallRules) -> Self {
        let started = clock.now();
        CallState {
            id,
            tenant: None,
            clock,
            started,
            machine: CallMachine::new(rules, started),
            reasons: BTreeMap::new(),
            attempts: Vec::new(),
            pinned: None,
            span: tracing::Span::none(),
        }
    }

    /// The call's place among the partition's waiters: by its start, then its id.
    pub(crate) fn order(&self) -> (Timestamp, u64) {
        (self.started, self.id)
    }

    /// Attempts settled so far.
    pub(crate) fn attempts_made(&self) -> usize {
        self.attempts.len()
    }

    pub(crate) fn skipped(&mut self, source: &str, reason: SkipReason) {
        self.reasons.insert(source.to_owned(), SourceReason::Skipped(reason));
    }

    pub(crate) fn report(&self) -> CallReport {
        CallReport {
            reasons: self.reasons.clone(),
            attempts: self.attempts.clone(),
            waited: self.machine.idle(self.clock.now()),
            pinned: self.pinned.clone(),
        }
    }

    pub(crate) fn backend(&self, error: BackendError) -> CallError {
        CallError::BackendUnavailable { error, report: self.report() }
    }

    /// The typed error of a call the machine ended with `failure`.
    fn failed(&self, scope: &Partition, failure: Failure) -> CallError {
        let report = self.report();
        match failure {
            Failure::Stalled => CallError::AllSourcesExhausted { reason: Exhausted::Stalled, report },
            Failure::QuotaExhausted => CallError::AllSourcesExhausted { reason: Exhausted::QuotaExhausted, report },
            Failure::RetryExhausted => CallError::RetryExhausted { report },
            Failure::StructuredExhausted => CallError::StructuredExhausted { report },
            Failure::CircuitOpen { retry_after } => CallError::CircuitOpen { retry_after, report },
            Failure::RateLimited { retry_after } => CallError::RateLimited { retry_after, report },
            Failure::RequestRejected { source, detail, provider_error } => {
                CallError::RequestRejected { source_name: scope.source_name(source).to_owned(), detail, provider_error, report }
            }
        }
    }

    /// The answer of the call's last attempt, marked with its source and the attempts made.
    fn served(&self, response: Response) -> Response {
        let source = self.attempts.last().map_or("", |a| a.source.as_str());
        response.served_by(source, u32::try_from(self.attempts.len()).unwrap_or(u32::MAX))
    }

    fn event(&self, scope: &str, result: CallResult) -> CallEvent {
        let now = self.clock.now();
        CallEvent {
            scope: scope.to_owned(),
            tenant: self.tenant.clone(),
            call_id: self.id,
            started: self.started,
            result,
            attempts: u32::try_from(self.attempts.len()).unwrap_or(u32::MAX),
            budget_attempts: self.machine.budget_spent(),
            reasks: self.machine.reasks(),
            reasons: self.reasons.iter().map(|(s, r)| (s.clone(), r.clone())).collect(),
            waited: self.machine.idle(now),
            elapsed: now.saturating_since(self.started),
        }
    }
}

/// Ends a call exactly once in telemetry: with its result, or as `Cancelled` when the
/// application drops the call (or its stream) first. A call that falls back to another scope is
/// still one call: the primary scope's part is handed over ([`CallGuard::hand_over`]) and sent
/// as one event with the fallback's ([`CallGuard::new`]'s `prior`).
pub(crate) struct CallGuard {
    pub(crate) state: CallState,
    scope: Arc<str>,
    telemetry: Arc<dyn Telemetry>,
    /// The primary scope's part of a call that fell back to this one.
    prior: Option<CallEvent>,
    ended: bool,
}

impl CallGuard {
    pub(crate) fn new(state: CallState, scope: Arc<str>, telemetry: Arc<dyn Telemetry>, prior: Option<CallEvent>) -> Self {
        CallGuard { state, scope, telemetry, prior, ended: false }
    }

    /// Ends the call with `result`: its one event.
    pub(crate) fn end(&mut self, result: CallResult) {
        let event = self.event(result);
        if !self.state.span.is_none() {
            let last = self.state.attempts.last().map(|a| a.class);
            crate::trace::call_ended(&self.state.span, result.as_str(), event.attempts, last);
        }
        self.telemetry.call(&event);
        self.ended = true;
    }

    /// Ends this scope's part of a call that goes on in its fallback scope, without an event:
    /// the part to carry into the fallback's guard.
    pub(crate) fn hand_over(mut self, result: CallResult) -> CallEvent {
        self.ended = true;
        self.event(result)
    }

    fn event(&mut self, result: CallResult) -> CallEvent {
        let own = self.state.event(&self.scope, result);
        match self.prior.take() {
            None => own,
            Some(prior) => CallEvent {
                result: own.result,
                attempts: prior.attempts.saturating_add(own.attempts),
                budget_attempts: prior.budget_attempts.saturating_add(own.budget_attempts),
                reasks: prior.reasks.saturating_add(own.reasks),
                reasons: prior.reasons.into_iter().chain(own.reasons).collect(),
                waited: prior.waited.saturating_add(own.waited),
                elapsed: own.started.saturating_add(own.elapsed).saturating_since(prior.started),
                ..prior
            },
        }
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if !self.ended {
            self.end(CallResult::Cancelled);
        }
    }
}

/// What is known of an attempt apart from its outcome.
pub(crate) struct Facts {
    pub(crate) source: usize,
    pub(crate) name: String,
    pub(crate) started: Timestamp,
    pub(crate) probe: bool,
    pub(crate) admitted_in: CircuitState,
    /// The incarnation of the gate that admitted it.
    pub(crate) incarnation: u64,
    /// When a stream reached its commit point (its time to first token is what the slow-call
    /// channel judges: a long generation is no slow source).
    pub(crate) committed: Option<Timestamp>,
    /// What the provider's rate-limit headers said, for a stream (known at its head).
    pub(crate) rate: Option<RateSignal>,
    /// The attempt's span (none unless traces are on).
    pub(crate) span: tracing::Span,
}

/// How an attempt ended: its outcome, the tokens it used (the provider's usage), and when.
pub(crate) struct Ending<'a> {
    pub(crate) outcome: &'a Outcome,
    pub(crate) usage: Option<gateway_core::request::Usage>,
    pub(crate) at: Timestamp,
}

/// Settles an attempt that ended as `ending` says, `consumed_budget` or not: its slot (health,
/// AIMD, the gate's record, the permit with the actual tokens), the gate event, the attempt
/// event, and the call's reasons and attempt chain. One place for the call loop and for a
/// committed stream's end.
pub(crate) async fn settle(
    admission: &SourceAdmission,
    scope: &Arc<Partition>,
    call: &mut CallState,
    slot: Slot,
    facts: &Facts,
    ending: Ending<'_>,
    consumed_budget: bool,
) {
    let Ending { outcome, usage, at: ended } = ending;
    let class = outcome.class;
    let latency = ended.saturating_since(facts.started);
    let responsiveness = facts.committed.unwrap_or(ended).saturating_since(facts.started);
    let rate = outcome.rate.as_deref().or(facts.rate.as_ref());
    let finished = slot.finish(class, responsiveness, usage.map(|u| u.total()), rate, ended).await;
    let event = AttemptEvent {
        key: scope.gates[facts.source].0.clone(),
        call_id: call.id,
        started: facts.started,
        class,
        detail: outcome.detail.clone(),
        latency,
        retry_after: outcome.retry_after,
        consumed_budget,
        probe: facts.probe,
        admitted_in: facts.admitted_in,
        incarnation: facts.incarnation,
        health: finished.health,
        aimd_limit: finished.aimd_limit,
        usage,
    };
    if !facts.span.is_none() {
        crate::trace::attempt_ended(&facts.span, &call.span, &event, scope.policy.sources[facts.source].protocol.as_str());
    }
    admission.telemetry.attempt(&event);
    call.reasons.insert(facts.name.clone(), SourceReason::Attempted { class, detail: outcome.detail.clone() });
    call.attempts.push(AttemptRecord { source: facts.name.clone(), class, detail: outcome.detail.clone(), latency, probe: facts.probe });
}

pub(crate) struct CallLoop<'a> {
    pub(crate) admission: &'a SourceAdmission,
    pub(crate) upstream: &'a dyn Upstream,
}

impl CallLoop<'_> {
    /// Performs what the call's machine asks until it returns an answer or ends the call; a
    /// stream past its commit point is delivered as it stands.
    pub(crate) async fn run<D: Delivery>(
        &self,
        scope: &Arc<Partition>,
        request: &Request,
        call: &mut CallState,
    ) -> Result<Delivered<D::Committed>, CallError> {
        // A call's lane in the line is its partition's: a tenant's own with `per_tenant`, else the
        // shared one (in a shared scope a tenant's name changes nothing).
        let (clock, mut turn) = (&self.admission.clock, Turn::new(scope.tenant.clone(), scope.weight));
        // What a wait is for, as the last pick found (traces only).
        let mut waiting_for = "backoff";
        let traced = self.admission.traces.is_some();
        let wait = |what: &'static str| if traced { crate::trace::wait_span(what) } else { tracing::Span::none() };
        loop {
            let progress = scope.local().progress;
            match call.machine.poll(clock.now(), progress) {
                Next::Pick { patience } => {
                    if !turn.may_pick(scope.turns(), call.order(), patience, || wait("turn")).await {
                        continue;
                    }
                    match self.admission.pick(scope, call, request.estimated_tokens, turn.carried()).await? {
                        Pick::Slot(slot) => {
                            turn.leave(scope.turns(), slot.left_room());
                            waiting_for = "backoff";
                            if let Some(stream) = self.attempt::<D>(scope, request, call, slot).await {
                                return Ok(Delivered::Stream(stream));
                            }
                        }
                        Pick::Blocked { gate_rejections, pushed_back, paced, ready_in } => {
                            turn.blocked(paced);
                            waiting_for = if paced || !pushed_back.is_empty() {
                                "account"
                            } else if gate_rejections > 0 {
                                "gate"
                            } else {
                                "quota"
                            };
                            let (blocked, progress) = (Picked::Blocked { gate_rejections, pushed_back, ready_in }, scope.local().progress);
                            call.machine.on_pick(blocked, clock.now(), progress, &mut *self.admission.rng());
                        }
                    }
                }
                Next::AskRetryAfter { except } => {
                    let retry_after = self.admission.retry_after(scope, &except).await.map_err(|e| call.backend(e))?;
                    call.machine.on_retry_after(retry_after, clock.now(), &mut *self.admission.rng());
                }
                Next::Sleep { duration, in_line } => {
                    turn.sleep(scope.turns(), call.order(), duration, in_line).instrument(wait(waiting_for)).await;
                }
                Next::Return(response) => return Ok(Delivered::Whole(call.served(response))),
                Next::Fail(failure) => return Err(call.failed(scope, failure)),
            }
        }
    }

    /// The attempt `slot` admits: made, settled, and told to the machine. A stream that reached
    /// its commit point is delivered instead.
    async fn attempt<D: Delivery>(
        &self,
        scope: &Arc<Partition>,
        request: &Request,
        call: &mut CallState,
        slot: Slot,
    ) -> Option<D::Committed> {
        let clock = &self.admission.clock;
        let source = slot.source;
        let facts = Facts {
            source,
            name: scope.source_name(source).to_owned(),
            started: clock.now(),
            probe: slot.is_probe(),
            admitted_in: slot.admitted_in(),
            incarnation: slot.incarnation(),
            committed: None,
            rate: None,
            span: match self.admission.traces {
                Some(_) => {
                    let policy = &scope.policy.sources[source];
                    let state = slot.admitted_in().as_str();
                    let gate = (state, slot.epoch(), slot.incarnation());
                    crate::trace::attempt_span(&policy.name, policy.protocol.as_str(), policy.model.as_deref(), gate, slot.is_probe())
                }
                None => tracing::Span::none(),
            },
        };
        call.machine.on_attempt_started(facts.started);
        let mode = request.structured_stream.unwrap_or(scope.policy.structured_stream);
        let asked = Asked { upstream: self.upstream, request, machine: &mut call.machine, clock: &**clock, mode };
        let span = facts.span.clone();
        let (attempt, slot, facts) = match D::attempt(asked, slot, facts).instrument(span).await {
            Reached::Ended(attempt, slot, facts) => (attempt, slot, facts),
            Reached::Committed(committed) => return Some(committed),
        };
        let (outcome, response) = attempt.into_parts();
        let usage = response.as_ref().and_then(Response::usage);
        let at = clock.now();
        let settled = call.machine.on_outcome(source, &outcome, response, at, &mut *self.admission.rng());
        settle(self.admission, scope, call, slot, &facts, Ending { outcome: &outcome, usage, at }, settled.consumed_budget).await;
        if let Some(until) = settled.push_back_until {
            // The account's Retry-After holds for every call of the scope, every tenant's.
            scope.note_pushback(source, until);
        }
        None
    }
}
