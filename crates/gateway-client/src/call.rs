//! The call loop (SPEC §7, §8): pick, attempt, apply the outcome table, and back off, re-ask,
//! wait or end, until a response or a typed terminal error. One loop serves every call kind.

use crate::admission::{Pick, SourceAdmission};
use crate::error::{AttemptRecord, CallError, CallReport, Exhausted};
use crate::scope::Scope;
use gateway_core::admission::SkipReason;
use gateway_core::outcome::{BudgetEffect, NextStep, OutcomeClass};
use gateway_core::ports::{GateError, Telemetry, Upstream};
use gateway_core::request::{Request, Response};
use gateway_core::select::AttemptFails;
use gateway_core::stall::CallStall;
use gateway_core::telemetry::{AttemptEvent, CallEvent, CallResult, SourceReason};
use gateway_core::time::{Clock, Timestamp};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Everything one call keeps: never shared with other calls.
pub(crate) struct CallState {
    pub(crate) id: u64,
    /// The tenant the call was made for.
    pub(crate) tenant: Option<String>,
    clock: Arc<dyn Clock>,
    started: Timestamp,
    pub(crate) stall: CallStall,
    pub(crate) fails: AttemptFails,
    /// Per source, until when a 429 asked this call to stay away, when that is past the call's
    /// stall budget (such a source is skipped instead of slept for).
    pushed_back: Vec<Option<Timestamp>>,
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
            pushed_back: vec![None; sources],
            budget_spent: 0,
            reasks: 0,
            backoffs: 0,
            reasons: BTreeMap::new(),
            attempts: Vec::new(),
        }
    }

    /// Whether a 429 asked this call to stay away from `source` past `now`.
    pub(crate) fn is_pushed_back(&self, source: usize, now: Timestamp) -> bool {
        self.pushed_back.get(source).copied().flatten().is_some_and(|until| now < until)
    }

    /// The soonest moment a source that pushed this call back will take it again.
    pub(crate) fn pushback_remaining(&self, now: Timestamp) -> Duration {
        self.pushed_back.iter().flatten().filter(|until| now < **until).map(|until| until.saturating_since(now)).min().unwrap_or_default()
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
/// application drops the call future first.
pub(crate) struct CallGuard<'a> {
    pub(crate) state: CallState,
    scope: &'a str,
    telemetry: &'a dyn Telemetry,
    ended: bool,
}

impl<'a> CallGuard<'a> {
    pub(crate) fn new(state: CallState, scope: &'a str, telemetry: &'a dyn Telemetry) -> Self {
        CallGuard { state, scope, telemetry, ended: false }
    }

    pub(crate) fn end(&mut self, result: Option<CallResult>) {
        if let Some(result) = result {
            self.telemetry.call(&self.state.event(self.scope, result));
        }
        self.ended = true;
    }
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.telemetry.call(&self.state.event(self.scope, CallResult::Cancelled));
        }
    }
}

pub(crate) struct CallLoop<'a> {
    pub(crate) admission: &'a SourceAdmission,
    pub(crate) upstream: &'a dyn Upstream,
    pub(crate) telemetry: &'a dyn Telemetry,
}

impl CallLoop<'_> {
    pub(crate) async fn run(&self, scope: &Arc<Scope>, request: &Request, call: &mut CallState) -> Result<Response, CallError> {
        let clock = &self.admission.clock;
        let policy = &scope.policy;
        loop {
            // the stall check, before each pick
            if call.stall.stalled(&scope.local().progress, policy.stall_window, clock.now()) {
                return Err(CallError::AllSourcesExhausted { reason: Exhausted::Stalled, report: call.report() });
            }
            let slot = match self.admission.pick(scope, call, request.estimated_tokens).await? {
                Pick::Slot(slot) => slot,
                Pick::Blocked { gate_rejections, pushed_back } => {
                    self.admission.on_no_runnable(scope, call, gate_rejections, pushed_back).await?;
                    continue;
                }
            };
            let (source, probe, admitted_in) = (slot.source, slot.is_probe(), slot.admitted_in());
            let name = scope.source_name(source).to_owned();
            let started = clock.now();
            call.stall.attempt_started(started);
            let attempt = self.upstream.send(&name, request).await;
            let ended = clock.now();
            call.stall.attempt_ended(ended);
            let (outcome, response) = attempt.into_parts();
            let class = outcome.class;
            let tokens = response.as_ref().and_then(Response::usage).map(|u| u.total());
            let latency = ended.saturating_since(started);
            let finished = slot.finish(class, latency, tokens, ended).await;
            if let Some(reply) = &finished.reply {
                self.admission.gate_event(scope, source, reply);
            }

            let effects = class.effects();
            let consumed = match effects.budget {
                BudgetEffect::Retry => true,
                BudgetEffect::Nothing => class == OutcomeClass::RateLimited && scope.behaviour.rate_limited_consumes_budget,
                BudgetEffect::StructuredReask => false,
            };
            call.budget_spent += u32::from(consumed);
            if effects.counts_as_call_failure {
                call.fails.record(source);
            }
            self.telemetry.attempt(&AttemptEvent {
                key: scope.gates[source].0.clone(),
                call_id: call.id,
                started,
                class,
                detail: outcome.detail.clone(),
                latency,
                retry_after: outcome.retry_after,
                consumed_budget: consumed,
                probe,
                admitted_in,
                health: finished.health,
                aimd_limit: finished.aimd_limit,
            });
            call.reasons.insert(name.clone(), SourceReason::Attempted { class, detail: outcome.detail.clone() });
            call.attempts.push(AttemptRecord { source: name.clone(), class, detail: outcome.detail.clone(), latency, probe });

            match effects.next {
                NextStep::Return => {
                    if let Some(response) = response {
                        return Ok(response);
                    }
                    // Unreachable: `Attempt` gives every success a response. Try again.
                }
                NextStep::EndCall => {
                    return Err(CallError::RequestRejected { source_name: name, detail: outcome.detail, report: call.report() });
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
                    // The provider asks for longer than this call may wait: try the others now.
                    let until = clock.now().saturating_add(outcome.retry_after.unwrap_or_default());
                    call.pushed_back[source] = Some(until);
                }
                NextStep::BackOffAndRepick { honour_retry_after } => {
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
