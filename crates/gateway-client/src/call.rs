//! The call loop (SPEC §7, §8, §13): pick, attempt, apply the outcome table, and back off,
//! re-ask, wait or end, until a response, a stream past its commit point, or a typed terminal
//! error. One loop serves every call kind, whole or streamed.

use crate::admission::{Pick, SourceAdmission};
use crate::error::{AttemptRecord, CallError, CallReport, Exhausted};
use crate::scope::Scope;
use crate::slot::Slot;
use crate::turns::Place;
use gateway_core::admission::SkipReason;
use gateway_core::breaker::CircuitState;
use gateway_core::outcome::{BudgetEffect, Effects, NextStep, OutcomeClass};
use gateway_core::ports::{ChunkSource, GateError, Streamed, Telemetry, Upstream};
use gateway_core::request::{Attempt, Outcome, Request, Response, Structured};
use gateway_core::select::AttemptFails;
use gateway_core::stall::CallStall;
use gateway_core::stream::{Chunk, assemble, commits, opening_failure};
use gateway_core::telemetry::{AttemptEvent, CallEvent, CallResult, SourceReason};
use gateway_core::time::{Clock, Timestamp};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Everything one call keeps: never shared with other calls.
pub(crate) struct CallState {
    pub(crate) id: u64,
    /// The tenant the call was made for.
    pub(crate) tenant: Option<String>,
    clock: Arc<dyn Clock>,
    started: Timestamp,
    pub(crate) stall: CallStall,
    pub(crate) fails: AttemptFails,
    /// Attempts that spent retry budget.
    budget_spent: u32,
    /// Structured re-asks made.
    reasks: u32,
    /// Back-off sleeps so far (the k of `backoff(k)`).
    backoffs: u32,
    reasons: BTreeMap<String, SourceReason>,
    attempts: Vec<AttemptRecord>,
}

impl CallState {
    pub(crate) fn new(id: u64, clock: Arc<dyn Clock>, sources: usize) -> Self {
        let started = clock.now();
        CallState {
            id,
            tenant: None,
            clock,
            started,
            stall: CallStall::start(started),
            fails: AttemptFails::new(sources),
            budget_spent: 0,
            reasks: 0,
            backoffs: 0,
            reasons: BTreeMap::new(),
            attempts: Vec::new(),
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
        CallReport { reasons: self.reasons.clone(), attempts: self.attempts.clone(), waited: self.stall.idle(self.clock.now()) }
    }

    pub(crate) fn backend(&self, error: GateError) -> CallError {
        CallError::BackendUnavailable { error, report: self.report() }
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
            budget_attempts: self.budget_spent,
            reasks: self.reasks,
            reasons: self.reasons.iter().map(|(s, r)| (s.clone(), r.clone())).collect(),
            waited: self.stall.idle(now),
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

/// How the caller takes the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Whole, when the call ends.
    Whole,
    /// Chunk by chunk, from the commit point on.
    Stream,
}

/// What a call delivered.
pub(crate) enum Delivered {
    /// A whole answer.
    Whole(Response),
    /// A stream past its commit point.
    Stream(Committed),
}

/// An attempt past its commit point: it holds its slot until the stream ends.
pub(crate) struct Committed {
    pub(crate) slot: Slot,
    pub(crate) facts: Facts,
    /// The chunks up to and including the commit point.
    pub(crate) preamble: Vec<Chunk>,
    /// The rest of the stream.
    pub(crate) rest: Box<dyn ChunkSource>,
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
}

/// How an attempt ended: its outcome, the tokens it used (the provider's usage), and when.
pub(crate) struct Ending<'a> {
    pub(crate) outcome: &'a Outcome,
    pub(crate) tokens: Option<u32>,
    pub(crate) at: Timestamp,
}

/// Settles an attempt that ended as `ending` says: its slot (health, AIMD, the gate's record,
/// the permit with the actual tokens), the gate event, the call's budget and in-call failures,
/// the attempt event, and the call's reasons and attempt chain. One place for the call loop and
/// for a committed stream's end.
pub(crate) async fn settle(
    admission: &SourceAdmission,
    scope: &Arc<Scope>,
    call: &mut CallState,
    slot: Slot,
    facts: &Facts,
    ending: Ending<'_>,
) -> &'static Effects {
    let Ending { outcome, tokens, at: ended } = ending;
    let class = outcome.class;
    let latency = ended.saturating_since(facts.started);
    let responsiveness = facts.committed.unwrap_or(ended).saturating_since(facts.started);
    call.stall.attempt_ended(ended);
    let finished = slot.finish(class, responsiveness, tokens, ended).await;
    let effects = class.effects();
    let consumed = match effects.budget {
        BudgetEffect::Retry => true,
        BudgetEffect::Pushback => scope.behaviour.rate_limited_consumes_budget,
        BudgetEffect::StructuredReask | BudgetEffect::Nothing => false,
    };
    call.budget_spent += u32::from(consumed);
    if effects.counts_as_call_failure {
        call.fails.record(facts.source);
    }
    admission.telemetry.attempt(&AttemptEvent {
        key: scope.gates[facts.source].0.clone(),
        call_id: call.id,
        started: facts.started,
        class,
        detail: outcome.detail.clone(),
        latency,
        retry_after: outcome.retry_after,
        consumed_budget: consumed,
        probe: facts.probe,
        admitted_in: facts.admitted_in,
        incarnation: facts.incarnation,
        health: finished.health,
        aimd_limit: finished.aimd_limit,
    });
    call.reasons.insert(facts.name.clone(), SourceReason::Attempted { class, detail: outcome.detail.clone() });
    call.attempts.push(AttemptRecord { source: facts.name.clone(), class, detail: outcome.detail.clone(), latency, probe: facts.probe });
    effects
}

/// Reads a stream up to its commit point: the chunks so far, or how the attempt ended before
/// anything could reach the caller (a stream that ends without content is `Transient(empty)`;
/// one that must be JSON and opens unlike it, `ResultInvalid(not_json)`).
async fn to_commit_point(rest: &mut dyn ChunkSource, structured: Option<&Structured>) -> Result<Vec<Chunk>, Outcome> {
    let mut preamble = Vec::new();
    loop {
        match rest.next_chunk().await {
            Some(Ok(chunk)) => {
                let commits = commits(&chunk);
                preamble.push(chunk);
                if commits {
                    // An answer that must be JSON and opens with prose ends here, unseen, and is
                    // re-asked like a whole one.
                    if structured.is_some()
                        && let Some(outcome) = opening_failure(structured, assemble(&preamble).text_answers())
                    {
                        return Err(outcome);
                    }
                    return Ok(preamble);
                }
            }
            Some(Err(outcome)) => return Err(outcome),
            None => return Err(Outcome::new(OutcomeClass::Transient, "empty")),
        }
    }
}

pub(crate) struct CallLoop<'a> {
    pub(crate) admission: &'a SourceAdmission,
    pub(crate) upstream: &'a dyn Upstream,
}

impl CallLoop<'_> {
    pub(crate) async fn run(
        &self,
        scope: &Arc<Scope>,
        request: &Request,
        call: &mut CallState,
        delivery: Delivery,
    ) -> Result<Delivered, CallError> {
        let clock = &self.admission.clock;
        let policy = &scope.policy;
        // The call's place among the waiters for capacity, while it has one.
        let mut place: Option<Place> = None;
        loop {
            // the stall check, before each pick
            if call.stall.stalled(&scope.local().progress, policy.stall_window, clock.now()) {
                return Err(CallError::AllSourcesExhausted { reason: Exhausted::Stalled, report: call.report() });
            }
            // First come, first served: a call younger than a waiter queues behind it, and only
            // the oldest waiter picks.
            if place.is_none() && !scope.turns.may_pick(call.order()) {
                place = Some(scope.turns.join(call.order(), None));
            }
            if let Some(waiting) = place.as_ref().filter(|p| !p.is_first()) {
                let bound = call.stall.remaining(policy.stall_window, clock.now()) + policy.poll_interval;
                tokio::select! {
                    biased;
                    () = waiting.woken() => {}
                    () = tokio::time::sleep(bound) => {}
                }
                continue;
            }
            let slot = match self.admission.pick(scope, call, request.estimated_tokens).await? {
                Pick::Slot(slot) => slot,
                Pick::Blocked { gate_rejections, pushed_back } => {
                    let wait = self.admission.on_no_runnable(scope, call, gate_rejections, &pushed_back).await?;
                    if !wait.for_capacity {
                        // Waiting for the breaker side is no turn for capacity.
                        place = None;
                        tokio::time::sleep(wait.nap).await;
                        continue;
                    }
                    let waiting = scope.turns.join(call.order(), place.take());
                    tokio::select! {
                        biased;
                        () = waiting.woken() => {}
                        () = tokio::time::sleep(wait.nap) => {}
                    }
                    place = Some(waiting);
                    continue;
                }
            };
            // The turn passes on to the next waiter, which may find room too.
            place = None;
            let source = slot.source;
            let facts = Facts {
                source,
                name: scope.source_name(source).to_owned(),
                started: clock.now(),
                probe: slot.is_probe(),
                admitted_in: slot.admitted_in(),
                incarnation: slot.incarnation(),
                committed: None,
            };
            call.stall.attempt_started(facts.started);
            let attempt = match delivery {
                Delivery::Whole => self.upstream.send(&facts.name, request).await,
                Delivery::Stream => match self.upstream.stream(&facts.name, request).await {
                    Streamed::Ended(attempt) => attempt,
                    Streamed::Chunks(mut rest) => match to_commit_point(&mut *rest, request.structured.as_ref()).await {
                        Ok(preamble) => {
                            let facts = Facts { committed: Some(clock.now()), ..facts };
                            return Ok(Delivered::Stream(Committed { slot, facts, preamble, rest }));
                        }
                        Err(outcome) => Attempt::ended(outcome),
                    },
                },
            };
            let (outcome, response) = attempt.into_parts();
            let tokens = response.as_ref().and_then(Response::usage).map(|u| u.total());
            let ending = Ending { outcome: &outcome, tokens, at: clock.now() };
            let effects = settle(self.admission, scope, call, slot, &facts, ending).await;

            match effects.next {
                NextStep::Return => {
                    if let Some(response) = response {
                        let attempts = u32::try_from(call.attempts.len()).unwrap_or(u32::MAX);
                        return Ok(Delivered::Whole(response.served_by(&facts.name, attempts)));
                    }
                    // Unreachable: `Attempt` gives every success a response. Try again.
                }
                NextStep::EndCall => {
                    return Err(CallError::RequestRejected {
                        source_name: facts.name,
                        detail: outcome.detail,
                        provider_error: outcome.provider_error,
                        report: call.report(),
                    });
                }
                NextStep::Reask => {
                    if call.reasks >= policy.structured_max_retries {
                        return Err(CallError::StructuredExhausted { report: call.report() });
                    }
                    call.reasks += 1;
                }
                NextStep::RepickNow | NextStep::BackOffAndRepick { .. } if call.budget_spent > policy.max_retries => {
                    return Err(CallError::RetryExhausted { report: call.report() });
                }
                NextStep::RepickNow => {}
                NextStep::BackOffAndRepick { honour_retry_after: true }
                    if outcome.retry_after.is_some_and(|wait| wait > call.stall.remaining(policy.stall_window, clock.now())) =>
                {
                    // The provider asks for longer than this call may wait: try the others now
                    // (every call of the partition keeps away from the account meanwhile).
                    scope.note_pushback(source, clock.now().saturating_add(outcome.retry_after.unwrap_or_default()));
                }
                NextStep::BackOffAndRepick { honour_retry_after } => {
                    if let Some(wait) = outcome.retry_after.filter(|_| honour_retry_after) {
                        // The account's Retry-After holds for every call of the partition.
                        scope.note_pushback(source, clock.now().saturating_add(wait));
                    }
                    let delay = {
                        let mut rng = self.admission.rng();
                        if honour_retry_after {
                            policy.backoff.pushback(call.backoffs, outcome.retry_after, &mut *rng)
                        } else {
                            policy.backoff.delay(call.backoffs, &mut *rng)
                        }
                    };
                    call.backoffs += 1;
                    // A provider's Retry-After is a floor; one past the stall budget was handled
                    // above, so this bound only caps the back-off itself.
                    let bound = (call.stall.remaining(policy.stall_window, clock.now()) + policy.poll_interval).max(policy.backoff.cap);
                    tokio::time::sleep(delay.min(bound)).await;
                }
            }
        }
    }
}
