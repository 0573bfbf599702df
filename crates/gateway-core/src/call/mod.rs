//! One call as a sans-io state machine (SPEC §5–§8, §13), in quinn-proto's style: the glue
//! asks [`CallMachine::poll`] what to do ([`Next`]), does it (picks a source, makes the
//! attempt, asks the gates, sleeps) and tells the machine what happened
//! ([`CallMachine::on_pick`], [`CallMachine::on_outcome`], [`CallMachine::on_retry_after`],
//! [`CallMachine::on_chunk`]). The machine owns every rule of the loop: the retry budget, the
//! structured re-ask ladder, the back-off and its jitter (from the RNG it is handed), the
//! stall bound, what to do when no source is runnable, and a stream's commit point. It reads
//! no clock and does no I/O, so its rules are tested as scripts of events without a runtime.

use crate::admission::{Blocked, nap, when_blocked};
use crate::backoff::Backoff;
use crate::outcome::{NextStep, OutcomeClass, OutcomeTable};
use crate::policy::{ScopePolicy, WaitMode};
use crate::request::{Outcome, ProviderError, Response};
use crate::select::AttemptFails;
use crate::stall::{CallStall, ScopeProgress};
use crate::stream::{Assembly, Chunk};
use crate::time::Timestamp;
use rand_core::Rng;
use std::time::Duration;

mod streaming;
pub use streaming::Streaming;

/// The rules a call runs on: a scope's loop policy and its preset's outcome table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CallRules {
    /// Budget-spending attempts after the first (SPEC §7).
    pub max_retries: u32,
    /// Re-asks of the structured ladder (SPEC §8).
    pub structured_max_retries: u32,
    /// How long a call may go without an attempt in flight while its scope makes no progress.
    pub stall_window: Duration,
    /// The fallback poll of a call waiting in line for capacity.
    pub poll_interval: Duration,
    /// The spread added to a hinted nap; also how far past its stall bound a call may sleep.
    pub nap_jitter: Duration,
    /// The back-off between attempts.
    pub backoff: Backoff,
    /// What a call does when the breaker refused every source.
    pub circuit_open: WaitMode,
    /// What a call does when a quota or an account's limit refused a source.
    pub quota_full: WaitMode,
    /// The scope's sources.
    pub sources: usize,
    /// What each outcome does to the call.
    pub outcomes: OutcomeTable,
}

impl CallRules {
    /// The rules of `policy` with `outcomes`.
    pub fn new(policy: &ScopePolicy, outcomes: OutcomeTable) -> Self {
        CallRules {
            max_retries: policy.max_retries,
            structured_max_retries: policy.structured_max_retries,
            stall_window: policy.stall_window,
            poll_interval: policy.poll_interval,
            nap_jitter: policy.nap_jitter,
            backoff: policy.backoff,
            circuit_open: policy.circuit_open,
            quota_full: policy.quota_full,
            sources: policy.sources.len(),
            outcomes,
        }
    }
}

/// What the glue found when it picked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Picked {
    /// `source` was admitted: the attempt starts now.
    Source(usize),
    /// No source was runnable: `gate_rejections` of them were refused by the breaker side;
    /// `pushed_back` (source, time left) were skipped for a 429 whose Retry-After asked every
    /// call to keep away from its account (the machine tells those past its stall budget, which
    /// end the call, from those within it, whose end it waits for).
    Blocked {
        /// Sources the breaker side refused.
        gate_rejections: usize,
        /// Sources a 429 asked to be left alone, with the time left.
        pushed_back: Vec<(usize, Duration)>,
        /// The soonest that time alone lifts a source's refusal (a gate's cooldown, a reported
        /// budget, a quota's window, the spacing below one in flight); `None` when only
        /// releases can, which wake the line.
        ready_in: Option<Duration>,
    },
}

/// What the glue does next.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// Pick a source, in turn: a call behind older waiters waits at most `patience` for its turn
    /// and polls again.
    Pick {
        /// The longest wait for the turn before the machine is asked again.
        patience: Duration,
    },
    /// Tell the machine ([`CallMachine::on_retry_after`]) the gates' earliest certain retry
    /// moment, over every source except `except`.
    AskRetryAfter {
        /// The sources left out of the question.
        except: Vec<usize>,
    },
    /// Sleep, then poll again. `in_line`: the call waits for capacity and keeps its place among
    /// the partition's waiters (first come, first served), woken early when capacity frees.
    Sleep {
        /// How long.
        duration: Duration,
        /// Whether the call waits in line for capacity.
        in_line: bool,
    },
    /// Return this answer: the call is over.
    Return(Response),
    /// End the call with this failure: the call is over.
    Fail(Failure),
}

/// Why a call ends without an answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// The call went a stall window without an attempt in flight while its scope made no
    /// progress.
    Stalled,
    /// A quota or an account's limit refused every source the breaker did not (`quota_full =
    /// fail_fast`).
    QuotaExhausted,
    /// The retry budget is spent.
    RetryExhausted,
    /// The structured ladder is spent.
    StructuredExhausted,
    /// The breaker side refused every source (`circuit_open = fail_fast`).
    CircuitOpen {
        /// The earliest certain retry moment over the scope's sources.
        retry_after: Duration,
    },
    /// Every source the breaker did not refuse asked, by a 429, for longer than the call may
    /// wait.
    RateLimited {
        /// The shortest of those waits.
        retry_after: Duration,
    },
    /// A source rejected the request itself: no other source would take it.
    RequestRejected {
        /// The source.
        source: usize,
        /// The outcome's detail.
        detail: String,
        /// The provider's error answer.
        provider_error: Option<Box<ProviderError>>,
    },
}

/// What a settled attempt asks of the glue besides the next step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Whether the attempt spent one of the call's retries.
    pub consumed_budget: bool,
    /// The provider account asked (Retry-After) that every call of the partition keep away
    /// until then.
    pub push_back_until: Option<Timestamp>,
}

/// What the machine waits for after a pick found no runnable source.
#[derive(Clone, Debug, PartialEq)]
enum Asking {
    /// The retry moment ends the call with `CircuitOpen`.
    ToFail,
    /// The retry moment is the hint of a nap, at most `at_most` (a pushback's end).
    ToNap {
        /// The end of the shortest pushback within the stall budget, if the wait is for it too.
        at_most: Option<Duration>,
    },
}

#[derive(Clone, Debug, PartialEq)]
enum Phase {
    /// Pick next (after the stall check).
    Ready,
    /// Waiting for the gates' retry moment.
    Asking { except: Vec<usize>, then: Asking },
    /// The next step is decided.
    Decided(Next),
}

/// One call's loop state: never shared with other calls.
#[derive(Clone, Debug)]
pub struct CallMachine {
    rules: CallRules,
    phase: Phase,
    stall: CallStall,
    fails: AttemptFails,
    /// Attempts that spent retry budget.
    budget_spent: u32,
    /// Structured re-asks made.
    reasks: u32,
    /// Back-off sleeps so far (the k of `backoff(k)`).
    backoffs: u32,
    /// The chunks of a streamed attempt before its commit point.
    preamble: Vec<Chunk>,
    /// A stream held to its validated end: the answer so far, and whether it reached its
    /// first content (the commit point it would have had).
    held: Option<Assembly>,
    opened: bool,
    /// Per source, whether its answer was more than this call can hold (tried no more).
    spent: Vec<bool>,
}

impl CallMachine {
    /// A call that starts at `now`.
    pub fn new(rules: CallRules, now: Timestamp) -> Self {
        CallMachine {
            fails: AttemptFails::new(rules.sources),
            rules,
            phase: Phase::Ready,
            stall: CallStall::start(now),
            budget_spent: 0,
            reasks: 0,
            backoffs: 0,
            preamble: Vec::new(),
            held: None,
            opened: false,
            spent: vec![false; rules.sources],
        }
    }

    /// What to do now. `progress` is the partition's: a call only stalls while its scope
    /// makes no progress either. After [`Next::Return`] or [`Next::Fail`] the call is over.
    pub fn poll(&mut self, now: Timestamp, progress: ScopeProgress) -> Next {
        match std::mem::replace(&mut self.phase, Phase::Ready) {
            Phase::Decided(next) => next,
            Phase::Asking { except, then } => {
                self.phase = Phase::Asking { except: except.clone(), then };
                Next::AskRetryAfter { except }
            }
            Phase::Ready if self.stall.stalled(&progress, self.rules.stall_window, now) => Next::Fail(Failure::Stalled),
            Phase::Ready => Next::Pick { patience: self.remaining_stall(now) + self.rules.nap_jitter },
        }
    }

    /// The pick's result. A source starts an attempt now; a pick that found none decides, by
    /// the reason the sources were refused, between failing fast and napping (SPEC §6).
    pub fn on_pick<R: Rng + ?Sized>(&mut self, picked: Picked, now: Timestamp, progress: ScopeProgress, rng: &mut R) {
        let (gate_rejections, pushed_back, ready_in) = match picked {
            Picked::Source(_) => return self.on_attempt_started(now),
            Picked::Blocked { gate_rejections, pushed_back, ready_in } => (gate_rejections, pushed_back, ready_in),
        };
        let rules = &self.rules;
        let stalled = self.stall.stalled(&progress, rules.stall_window, now);
        // The call's pool is the sources it may still use: the spent ones are out of it.
        let pool = rules.sources - self.spent_sources().count();
        let remaining = self.remaining_stall(now);
        let (past, within): (Vec<_>, Vec<_>) = pushed_back.iter().partition(|(_, away)| *away > remaining);
        let shortest = |of: &[&(usize, Duration)]| of.iter().map(|(_, away)| *away).min().unwrap_or_default();
        let pushed = (past.len(), within.len());
        self.phase = match when_blocked(gate_rejections, pushed, pool, rules.circuit_open, rules.quota_full, stalled) {
            Blocked::FailCircuitOpen => Phase::Asking { except: self.spent_sources().collect(), then: Asking::ToFail },
            Blocked::FailRateLimited => Phase::Decided(Next::Fail(Failure::RateLimited { retry_after: shortest(&past) })),
            Blocked::FailQuotaExhausted => Phase::Decided(Next::Fail(Failure::QuotaExhausted)),
            Blocked::FailStalled => Phase::Decided(Next::Fail(Failure::Stalled)),
            // Some source is only quota- or AIMD-blocked: wait in line for capacity, until a
            // release wakes the line, time gives some back (a pushback's end among it), or the
            // fallback poll.
            Blocked::Wait { gate_hint: false, pushback: false } => {
                let ready_in = ready_in.into_iter().chain(within.iter().map(|(_, away)| *away)).min();
                Phase::Decided(self.wait_in_line(ready_in, now))
            }
            // Only 429 pushbacks within the stall budget: wait out the shortest, out of line.
            Blocked::Wait { gate_hint: false, pushback: true } => Phase::Decided(self.nap(shortest(&within), now, false, rng)),
            // The pushed-back sources' gates are closed (a 0 hint): the wait is for the others,
            // or for the shortest pushback if it ends first.
            Blocked::Wait { gate_hint: true, pushback } => {
                let except = pushed_back.iter().map(|(source, _)| *source).chain(self.spent_sources()).collect();
                Phase::Asking { except, then: Asking::ToNap { at_most: pushback.then(|| shortest(&within)) } }
            }
        };
    }

    /// An admitted attempt starts at `now` (what [`Picked::Source`] tells; the glue, which
    /// knows it picked a source, says it without the partition's progress or the RNG).
    pub fn on_attempt_started(&mut self, now: Timestamp) {
        self.stall.attempt_started(now);
        self.preamble.clear();
        (self.held, self.opened) = (None, false);
    }

    /// The gates' earliest certain retry moment, as [`Next::AskRetryAfter`] asked.
    pub fn on_retry_after<R: Rng + ?Sized>(&mut self, retry_after: Duration, now: Timestamp, rng: &mut R) {
        self.phase = match std::mem::replace(&mut self.phase, Phase::Ready) {
            Phase::Asking { then: Asking::ToFail, .. } => Phase::Decided(Next::Fail(Failure::CircuitOpen { retry_after })),
            Phase::Asking { then: Asking::ToNap { at_most }, .. } => {
                Phase::Decided(self.nap(at_most.map_or(retry_after, |end| end.min(retry_after)), now, false, rng))
            }
            other => other,
        };
    }

    fn nap<R: Rng + ?Sized>(&self, hint: Duration, now: Timestamp, in_line: bool, rng: &mut R) -> Next {
        let duration = nap(hint, self.rules.nap_jitter, self.remaining_stall(now), rng);
        Next::Sleep { duration, in_line }
    }

    /// A wait in line for capacity: until `ready_in` (when time gives some back), else the
    /// fallback poll; never more than a nap's spread past the stall bound. A release wakes the
    /// line sooner (SPEC §6).
    fn wait_in_line(&self, ready_in: Option<Duration>, now: Timestamp) -> Next {
        let poll = self.rules.poll_interval;
        let until = ready_in.map_or(poll, |ready| ready.min(poll));
        Next::Sleep { duration: until.min(self.remaining_stall(now) + self.rules.nap_jitter), in_line: true }
    }

    /// Whether an attempt of `class` spends one of the call's retries.
    pub fn spends_retry(&self, class: OutcomeClass) -> bool {
        self.rules.outcomes.spends_retry(class)
    }

    /// How the attempt of `source` ended at `at` (with its answer, for a success), and what
    /// the call does next: return, end, re-ask, back off or pick again at once.
    pub fn on_outcome<R: Rng + ?Sized>(
        &mut self,
        source: usize,
        outcome: &Outcome,
        response: Option<Response>,
        at: Timestamp,
        rng: &mut R,
    ) -> Settled {
        let mut settled = Settled { consumed_budget: self.on_attempt_ended(source, outcome.class, at), push_back_until: None };
        let rules = self.rules;
        if outcome.source_spent
            && let Some(spent) = self.spent.get_mut(source)
        {
            *spent = true;
        }
        let decided = match rules.outcomes.effects(outcome.class).next {
            // No source is left that could hold the answer.
            _ if outcome.source_spent && self.spent.iter().all(|spent| *spent) => Some(Next::Fail(Failure::RetryExhausted)),
            // `Attempt` gives every success a response; without one, pick again.
            NextStep::Return => response.map(Next::Return),
            NextStep::EndCall => Some(Next::Fail(Failure::RequestRejected {
                source,
                detail: outcome.detail.clone(),
                provider_error: outcome.provider_error.clone(),
            })),
            NextStep::Reask if self.reasks >= rules.structured_max_retries => Some(Next::Fail(Failure::StructuredExhausted)),
            NextStep::Reask => {
                self.reasks += 1;
                None
            }
            NextStep::RepickNow | NextStep::BackOffAndRepick { .. } if self.budget_spent > rules.max_retries => {
                Some(Next::Fail(Failure::RetryExhausted))
            }
            NextStep::RepickNow => None,
            NextStep::BackOffAndRepick { honour_retry_after } => {
                let retry_after = outcome.retry_after.filter(|_| honour_retry_after);
                // The account's Retry-After holds for every call of the partition.
                settled.push_back_until = retry_after.map(|wait| at.saturating_add(wait));
                // A provider asking for longer than this call may wait: try the others now.
                let too_long = retry_after.is_some_and(|wait| wait > self.remaining_stall(at));
                (!too_long).then(|| self.back_off(honour_retry_after, retry_after, at, rng))
            }
        };
        self.phase = decided.map_or(Phase::Ready, Phase::Decided);
        settled
    }

    /// A back-off sleep: `backoff(k)`, at least the provider's Retry-After when it is honoured.
    /// A Retry-After is a floor; one past the stall budget was handled before, so the bound
    /// only caps the back-off itself.
    fn back_off<R: Rng + ?Sized>(&mut self, honour_retry_after: bool, retry_after: Option<Duration>, at: Timestamp, rng: &mut R) -> Next {
        let backoff = self.rules.backoff;
        let delay = if honour_retry_after { backoff.pushback(self.backoffs, retry_after, rng) } else { backoff.delay(self.backoffs, rng) };
        self.backoffs += 1;
        let bound = (self.remaining_stall(at) + self.rules.nap_jitter).max(backoff.cap);
        Next::Sleep { duration: delay.min(bound), in_line: false }
    }

    /// How an attempt of `source` ended at `at`, for the call's books (its idle time, retry
    /// budget and failures per source), without deciding anything: also the end of a stream
    /// past its commit point. Whether it spent a retry.
    pub fn on_attempt_ended(&mut self, source: usize, class: OutcomeClass, at: Timestamp) -> bool {
        self.stall.attempt_ended(at);
        let effects = self.rules.outcomes.effects(class);
        let consumed = self.spends_retry(class);
        self.budget_spent += u32::from(consumed);
        if effects.counts_as_call_failure {
            self.fails.record(source);
        }
        consumed
    }

    /// How long the call may still go without an attempt in flight.
    pub fn remaining_stall(&self, now: Timestamp) -> Duration {
        self.stall.remaining(self.rules.stall_window, now)
    }

    /// How long the call has gone without an attempt in flight.
    pub fn idle(&self, now: Timestamp) -> Duration {
        self.stall.idle(now)
    }

    /// Whether `source` gave this call an answer larger than it can hold: the call does not try
    /// it again (the glue leaves it out of its picks).
    pub fn is_spent(&self, source: usize) -> bool {
        self.spent.get(source).copied().unwrap_or(false)
    }

    /// Restricts the call to `source`, the one holding the state its request refers to (SPEC
    /// §13): every other is out of its pool from the start, as a spent source is, so the call
    /// waits for that source, or fails as its scope's `circuit_open` and `quota_full` say, and
    /// never goes elsewhere.
    pub fn restrict_to(&mut self, source: usize) {
        for (i, spent) in self.spent.iter_mut().enumerate() {
            *spent = i != source;
        }
    }

    /// Leaves `source` out of the call from the start, as a spent source is: it cannot carry
    /// the request (it speaks another protocol than the request's kind).
    pub fn leave_out(&mut self, source: usize) {
        if let Some(spent) = self.spent.get_mut(source) {
            *spent = true;
        }
    }

    fn spent_sources(&self) -> impl Iterator<Item = usize> + '_ {
        self.spent.iter().enumerate().filter(|(_, spent)| **spent).map(|(source, _)| source)
    }

    /// The call's failures per source (what in-call demotion reads).
    pub fn fails(&self) -> &AttemptFails {
        &self.fails
    }

    /// Attempts that spent retry budget.
    pub fn budget_spent(&self) -> u32 {
        self.budget_spent
    }

    /// Structured re-asks made.
    pub fn reasks(&self) -> u32 {
        self.reasks
    }
}
