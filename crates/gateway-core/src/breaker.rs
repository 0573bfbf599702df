//! The circuit breaker of one (scope, source) gate (SPEC §3): a pure state machine.
//!
//! Two trip channels (failure rate over a two-bucket window, and consecutive failures with
//! health-evidence suppression), a reopen streak that doubles the open time up to
//! `max_cooldown`, a single probe lease with lazy reissue, epoch fencing, and the retry_after
//! contract on every exit. Every operation takes `now`; the same sequence of operations always
//! gives the same states. The memory gate runs this code; the Redis Lua scripts mirror it field
//! for field and the contract suite holds them to it.

use crate::policy::BreakerPolicy;
use crate::time::{Timestamp, millis};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// The three states of a gate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CircuitState {
    /// Traffic flows.
    #[default]
    Closed,
    /// Traffic is refused until `open_until`.
    Open,
    /// One probe at a time decides between CLOSED and OPEN.
    HalfOpen,
}

impl CircuitState {
    /// The name stored in the Redis HASH and shown in telemetry.
    pub const fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "CLOSED",
            CircuitState::Open => "OPEN",
            CircuitState::HalfOpen => "HALF_OPEN",
        }
    }
}

impl fmt::Display for CircuitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Breaker parameters resolved for one gate: the scope's [`BreakerPolicy`] with the effective
/// consecutive threshold and probe lease of this source. Built only from a validated policy, so
/// every value is in range (the window has at least two milliseconds, cooldowns are capped…).
#[derive(Clone, Debug, PartialEq)]
pub struct GateParams {
    threshold: u32,
    cooldown_ms: u64,
    max_cooldown_ms: u64,
    min_calls: u32,
    fail_rate: f64,
    bucket_ms: u64,
    half_open_successes: u32,
    probe_ttl_ms: u64,
    slow_rate: Option<f64>,
    sla_cooldown_ms: Option<(u64, u64)>,
}

impl GateParams {
    /// Resolves `policy` for one source: the consecutive threshold is
    /// `max(fail_threshold, raise_by × 2)` and the probe lease, unless configured, is
    /// `max(2 × slowest_timeout, cooldown, own_timeout + 5 s)`.
    pub fn new(policy: &BreakerPolicy, raise_by: u32, slowest_timeout: Duration, own_timeout: Duration) -> Self {
        let derived_ttl = (2 * millis(slowest_timeout)).max(millis(policy.cooldown)).max(millis(own_timeout) + 5000);
        GateParams {
            threshold: policy.raised_threshold(raise_by),
            cooldown_ms: millis(policy.cooldown).max(1),
            max_cooldown_ms: millis(policy.max_cooldown).max(millis(policy.cooldown)).max(1),
            min_calls: policy.min_calls.max(1),
            fail_rate: policy.fail_rate,
            bucket_ms: (millis(policy.window) / 2).max(1),
            half_open_successes: policy.half_open_successes.max(1),
            probe_ttl_ms: policy.probe_ttl.map_or(derived_ttl, millis).max(1),
            slow_rate: policy.slow_call.map(|_| policy.slow_rate),
            sla_cooldown_ms: policy.sla_cooldown.map(|(floor, cap)| (millis(floor).max(1), millis(cap).max(1))),
        }
    }

    /// How long an untouched gate is worth keeping: it outlives every open period, the window
    /// and the probe lease, then some (an idle gate is dropped only long after its streak would
    /// have decayed anyway). The Redis key TTL; the memory gates' idle bound.
    pub fn key_ttl_ms(&self) -> u64 {
        2 * (self.max_cooldown_ms + 2 * self.bucket_ms + self.probe_ttl_ms) + 3_600_000
    }

    /// Slow-call rate that opens the gate (`None`: no slow-call channel).
    pub fn slow_rate(&self) -> Option<f64> {
        self.slow_rate
    }
    /// Floor and cap of SLA-adaptive open times, in milliseconds (`None`: off).
    pub fn sla_cooldown_ms(&self) -> Option<(u64, u64)> {
        self.sla_cooldown_ms
    }

    /// The effective consecutive threshold.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }
    /// First open duration, in milliseconds.
    pub fn cooldown_ms(&self) -> u64 {
        self.cooldown_ms
    }
    /// Cap of every open duration, in milliseconds.
    pub fn max_cooldown_ms(&self) -> u64 {
        self.max_cooldown_ms
    }
    /// Samples before the rate channel (and health evidence) counts.
    pub fn min_calls(&self) -> u32 {
        self.min_calls
    }
    /// Failure rate that opens the gate.
    pub fn fail_rate(&self) -> f64 {
        self.fail_rate
    }
    /// Width of one window bucket (half the window), in milliseconds.
    pub fn bucket_ms(&self) -> u64 {
        self.bucket_ms
    }
    /// Probe successes that close the gate.
    pub fn half_open_successes(&self) -> u32 {
        self.half_open_successes
    }
    /// Probe lease length, in milliseconds.
    pub fn probe_ttl_ms(&self) -> u64 {
        self.probe_ttl_ms
    }

    /// `min(cooldown × 2^(streak−1), max_cooldown)` for `streak ≥ 1` (the plain cooldown for
    /// streak 0), in milliseconds. With `max_cooldown = cooldown` nothing escalates.
    pub fn cooldown_eff_ms(&self, streak: u32) -> u64 {
        if streak <= 1 {
            return self.cooldown_ms.min(self.max_cooldown_ms);
        }
        let factor = 1u64.checked_shl(streak - 1).unwrap_or(u64::MAX);
        self.cooldown_ms.saturating_mul(factor).min(self.max_cooldown_ms)
    }
}

/// Why a gate changed state; carried in replies for telemetry and traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The window's failure rate reached `fail_rate` with `min_calls` samples.
    RateChannel,
    /// `failures` reached the threshold without health evidence against it.
    ConsecutiveChannel,
    /// The probe attempt failed.
    ProbeFailed,
    /// `force_open` (the source is dead: bad key, no balance, unknown model).
    ForcedOpen,
    /// The open time elapsed and a caller took the probe.
    CooldownElapsed,
    /// Enough probes succeeded.
    ProbeSucceeded,
    /// The window's slow-call rate reached `slow_rate` with `min_calls` samples.
    SlowChannel,
}

/// A state change made by an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// State before.
    pub from: CircuitState,
    /// State after.
    pub to: CircuitState,
    /// Why.
    pub cause: Cause,
}

impl Transition {
    /// Whether `from → to` is an edge of the breaker's graph: CLOSED→OPEN, OPEN→HALF_OPEN,
    /// HALF_OPEN→OPEN, HALF_OPEN→CLOSED. (OPEN never closes without a probe, CLOSED never
    /// half-opens.)
    pub fn is_legal(from: CircuitState, to: CircuitState) -> bool {
        use CircuitState::*;
        matches!((from, to), (Closed, Open) | (Open, HalfOpen) | (HalfOpen, Open) | (HalfOpen, Closed))
    }
}

/// What fences a record: the gate's incarnation and its epoch when the attempt was admitted.
/// A record whose fence is not the gate's current one changes nothing: an epoch fences out
/// attempts admitted before the gate last opened, an incarnation those admitted by a gate the
/// backend has since lost (a Redis restart without persistence, a flush, a failover to a replica
/// that missed writes, an eviction), whose replacement counts epochs from 0 again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fence {
    /// The incarnation of the gate that admitted the attempt.
    pub incarnation: u64,
    /// Its epoch then.
    pub epoch: u64,
}

/// What every operation returns: the verdict of a `TryEnter`, the state after the operation,
/// the incarnation and epoch, and `retry_after` under the contract (0 unless OPEN; never above
/// `max_cooldown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The verdict of a [`GateOp::TryEnter`]; `None` for the other operations.
    pub verdict: Option<Verdict>,
    /// State after the operation.
    pub state: CircuitState,
    /// The gate's incarnation (0: no gate is stored, e.g. a record on a lost gate).
    pub incarnation: u64,
    /// Epoch after the operation.
    pub epoch: u64,
    /// Time until a certain retry moment: non-zero only when OPEN.
    pub retry_after: Duration,
    /// The state change this operation made, if any.
    pub transition: Option<Transition>,
    /// The record carried a stale fence (epoch or incarnation) and changed nothing.
    pub fenced: bool,
}

impl Reply {
    /// The fence of an attempt this reply admitted: what its record must carry.
    pub fn fence(&self) -> Fence {
        Fence { incarnation: self.incarnation, epoch: self.epoch }
    }

    /// Whether a `TryEnter` admitted the caller (allowed, or holding the probe lease).
    pub fn is_admitted(&self) -> bool {
        matches!(self.verdict, Some(Verdict::Allowed | Verdict::Probe))
    }

    /// Whether a `TryEnter` granted the single probe lease.
    pub fn is_probe(&self) -> bool {
        self.verdict == Some(Verdict::Probe)
    }
}

/// The verdict of `TryEnter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// CLOSED: go ahead.
    Allowed,
    /// This caller holds the single probe lease of a HALF_OPEN gate.
    Probe,
    /// Refused; see `retry_after`.
    Denied,
}

/// How a success is counted (SPEC §2, §11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SuccessKind {
    /// A usable answer: resets the consecutive count and enters the rate window.
    Real,
    /// A usable answer slower than `slow_call_s`: a real success that the slow-call channel also
    /// counts (without the channel, the same as `Real`).
    Slow,
    /// The provider answered but the result was unusable (ResultInvalid): resets the consecutive
    /// count only; in HALF_OPEN a probe success (the provider is up).
    Unusable,
}

/// One operation on a gate (SPEC §3 operations 1–5). Records carry the fence (incarnation and
/// epoch) the attempt was admitted under; a stale one changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateOp {
    /// Admits (CLOSED), grants the single probe lease (OPEN past `open_until`, or HALF_OPEN with
    /// an expired lease), or denies with `retry_after`.
    TryEnter,
    /// The attempt succeeded.
    Success {
        /// The admission's fence.
        fence: Fence,
        /// How it counts.
        kind: SuccessKind,
    },
    /// The attempt failed (never a 429). In CLOSED the rate channel is checked before the
    /// consecutive one.
    Failure {
        /// The admission's fence.
        fence: Fence,
    },
    /// The source is dead (bad key, no balance, unknown model). An already OPEN gate is left as
    /// it is: calls admitted before the open that all come back 401 must not push the streak up
    /// once each.
    ForceOpen,
    /// Hands back a probe lease that proved nothing (429, bad payload, cancellation), so the next
    /// `TryEnter` probes at once.
    Release {
        /// The admission's fence.
        fence: Fence,
    },
}

impl GateOp {
    /// Whether the operation records an outcome (everything but `TryEnter`). A record the
    /// backend cannot take is logged and counted; the call goes on.
    pub const fn is_record(self) -> bool {
        !matches!(self, GateOp::TryEnter)
    }

    /// The admission fence a record is fenced by (`None`: not fenced).
    pub const fn fence(self) -> Option<Fence> {
        match self {
            GateOp::Success { fence, .. } | GateOp::Failure { fence } | GateOp::Release { fence } => Some(fence),
            GateOp::TryEnter | GateOp::ForceOpen => None,
        }
    }
}

/// The state of one gate, with the field names of the Redis HASH (SPEC §3).
///
/// Change it only through the operations; the fields are public so adapters can store and load
/// it and the contract suite can compare backends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gate {
    /// CLOSED, OPEN or HALF_OPEN.
    pub state: CircuitState,
    /// This life of the gate, chosen at random by the backend when it creates the gate (see
    /// [`Gate::apply_stored`]); 0 for a gate no backend stores (never written, expired or lost).
    pub incarnation: u64,
    /// Incremented by every transition to OPEN, and by nothing else.
    pub epoch: u64,
    /// When an OPEN gate may be probed.
    pub open_until: Timestamp,
    /// End of the live probe lease; `None` when no lease is out.
    pub probe_until: Option<Timestamp>,
    /// Consecutive failures.
    pub failures: u32,
    /// Window bucket id of `a0`/`f0`: `floor(now / (window / 2))`.
    pub win_id: u64,
    /// Attempts in the current bucket.
    pub a0: u32,
    /// Failures in the current bucket.
    pub f0: u32,
    /// Attempts in the previous bucket.
    pub a1: u32,
    /// Failures in the previous bucket.
    pub f1: u32,
    /// Slow successes in the current bucket (slow-call channel).
    pub s0: u32,
    /// Slow successes in the previous bucket.
    pub s1: u32,
    /// Reopen streak: escalating opens since the last stable CLOSED period.
    pub streak: u32,
    /// When a probe last closed the gate; cleared on open.
    pub closed_since: Option<Timestamp>,
    /// Probe successes in the current HALF_OPEN period.
    pub probe_ok: u32,
}

impl Gate {
    /// A new gate: CLOSED, epoch 0, empty window.
    pub fn new() -> Self {
        Gate::default()
    }

    /// Applies `op` at `now` to the gate a backend stores (`Gate::default()`, incarnation 0, when
    /// it stores none) and returns the reply: the one entry point of the breaker, that every
    /// backend runs (the memory gates directly, the Redis script rule for rule). `TryEnter` and
    /// `ForceOpen` (a dead source is dead whatever the backend lost) create a gate that is not
    /// stored, with `fresh` (non-zero, drawn at random by the backend) as its incarnation; a
    /// fenced record on it is refused and stores nothing, since the gate that admitted its
    /// attempt is gone.
    pub fn apply_stored(&mut self, p: &GateParams, op: GateOp, now: Timestamp, fresh: impl FnOnce() -> u64) -> Reply {
        if self.incarnation == 0 {
            if op.fence().is_some() {
                return self.reply(p, now, None, None, true);
            }
            self.incarnation = fresh();
        }
        self.apply(p, op, now)
    }

    /// Applies `op` at `now` to this gate, which exists: [`Gate::apply_stored`] without the
    /// creation rule (for a gate held in a test or a benchmark).
    pub fn apply(&mut self, p: &GateParams, op: GateOp, now: Timestamp) -> Reply {
        if op.fence().is_some_and(|fence| fence != self.fence()) {
            return self.reply(p, now, None, None, true);
        }
        let (verdict, transition) = match op {
            GateOp::TryEnter => {
                let (verdict, transition) = self.try_enter(p, now);
                (Some(verdict), transition)
            }
            GateOp::Success { kind, .. } => (None, self.succeed(p, now, kind)),
            GateOp::Failure { .. } => (None, self.fail(p, now)),
            GateOp::ForceOpen => (None, (self.state != CircuitState::Open).then(|| self.open(p, now, Cause::ForcedOpen))),
            GateOp::Release { .. } => {
                if self.state == CircuitState::HalfOpen {
                    self.probe_until = None;
                }
                (None, None)
            }
        };
        self.reply(p, now, verdict, transition, false)
    }

    fn try_enter(&mut self, p: &GateParams, now: Timestamp) -> (Verdict, Option<Transition>) {
        let before = self.state;
        let verdict = match self.state {
            CircuitState::Closed => Verdict::Allowed,
            CircuitState::Open if now < self.open_until => Verdict::Denied,
            CircuitState::Open => {
                self.state = CircuitState::HalfOpen;
                self.probe_ok = 0;
                self.probe_until = Some(now.saturating_add(Duration::from_millis(p.probe_ttl_ms)));
                Verdict::Probe
            }
            CircuitState::HalfOpen if self.probe_until.is_some_and(|until| now < until) => Verdict::Denied,
            CircuitState::HalfOpen => {
                // Lazy reissue: the holder of the expired lease is presumed lost.
                self.probe_until = Some(now.saturating_add(Duration::from_millis(p.probe_ttl_ms)));
                Verdict::Probe
            }
        };
        let transition = (before != self.state).then_some(Transition { from: before, to: self.state, cause: Cause::CooldownElapsed });
        (verdict, transition)
    }

    /// In CLOSED a success resets the consecutive count; a real one also enters the window, and
    /// a slow one (with the slow-call channel, SPEC §11) opens the gate when the window's slow
    /// rate reaches `slow_rate` with `min_calls` samples. In HALF_OPEN every kind is a probe
    /// success.
    fn succeed(&mut self, p: &GateParams, now: Timestamp, kind: SuccessKind) -> Option<Transition> {
        match self.state {
            CircuitState::Closed => {
                self.failures = 0;
                if kind == SuccessKind::Unusable {
                    return None;
                }
                let slow = kind == SuccessKind::Slow && p.slow_rate.is_some();
                self.count(p, now, false, slow);
                let samples = self.a0.saturating_add(self.a1);
                let slow_calls = self.s0.saturating_add(self.s1);
                match p.slow_rate {
                    Some(rate) if slow && samples >= p.min_calls && f64::from(slow_calls) / f64::from(samples) >= rate => {
                        Some(self.open(p, now, Cause::SlowChannel))
                    }
                    _ => {
                        self.decay_streak(p, now);
                        None
                    }
                }
            }
            CircuitState::HalfOpen => {
                self.probe_ok = self.probe_ok.saturating_add(1);
                self.probe_until = None;
                if self.probe_ok < p.half_open_successes {
                    return None;
                }
                self.state = CircuitState::Closed;
                self.failures = 0;
                self.closed_since = Some(now);
                // The window starts afresh: the failures (or slow calls) that opened the gate
                // must not reopen a recovered source at its first failure when the cooldown is
                // shorter than the window.
                (self.a0, self.f0, self.s0, self.a1, self.f1, self.s1) = (0, 0, 0, 0, 0, 0);
                Some(Transition { from: CircuitState::HalfOpen, to: CircuitState::Closed, cause: Cause::ProbeSucceeded })
            }
            CircuitState::Open => None,
        }
    }

    /// In CLOSED the rate channel is checked first; the consecutive channel opens only without
    /// health evidence (`min_calls` samples in the window, which then read below `fail_rate`).
    fn fail(&mut self, p: &GateParams, now: Timestamp) -> Option<Transition> {
        match self.state {
            CircuitState::Closed => {
                self.failures = self.failures.saturating_add(1);
                self.count(p, now, true, false);
                let samples = self.a0.saturating_add(self.a1);
                let failed = self.f0.saturating_add(self.f1);
                let evidence = samples >= p.min_calls;
                if evidence && f64::from(failed) / f64::from(samples) >= p.fail_rate {
                    let t = self.open(p, now, Cause::RateChannel);
                    self.failures = p.threshold;
                    Some(t)
                } else if self.failures >= p.threshold && !evidence {
                    Some(self.open(p, now, Cause::ConsecutiveChannel))
                } else {
                    None
                }
            }
            CircuitState::HalfOpen => Some(self.open(p, now, Cause::ProbeFailed)),
            CircuitState::Open => None,
        }
    }

    /// This gate's part of SPEC §3 operation 6: OPEN → time left until `open_until`, else 0;
    /// never above `max_cooldown` (a clock that stepped back cannot inflate it).
    pub fn retry_after(&self, p: &GateParams, now: Timestamp) -> Duration {
        match self.state {
            CircuitState::Open => self.open_until.saturating_since(now).min(Duration::from_millis(p.max_cooldown_ms)),
            CircuitState::Closed | CircuitState::HalfOpen => Duration::ZERO,
        }
    }

    /// Whether going from `before` to this state keeps the gate its key TTL
    /// ([`GateParams::key_ttl_ms`]) longer: any change but counting within the current bucket
    /// (`a0`, `f0`, `s0`, `failures`), and any change at all while the window has never rotated
    /// (`win_id` 0: a clock before the first bucket's end, so the counts are the gate's first
    /// write). An active gate is kept: its first count in each bucket moves `win_id`. A gate that
    /// is only asked (TryEnter on CLOSED) is not: its TTL runs from its last change, as a Redis
    /// key's runs from its last refresh.
    pub fn keeps_longer_than(&self, before: &Gate) -> bool {
        let uncounted = |g: &Gate| Gate { a0: 0, f0: 0, s0: 0, failures: 0, ..*g };
        uncounted(self) != uncounted(before) || (self.win_id == 0 && self != before)
    }

    /// The fence of an attempt this gate admits now.
    pub fn fence(&self) -> Fence {
        Fence { incarnation: self.incarnation, epoch: self.epoch }
    }

    /// Window samples (attempts) in the current and previous bucket as of the last write (the
    /// window rotates on writes only).
    pub fn samples(&self) -> u32 {
        self.a0.saturating_add(self.a1)
    }

    /// Whether a probe lease is live at `now`.
    pub fn lease_live(&self, now: Timestamp) -> bool {
        self.state == CircuitState::HalfOpen && self.probe_until.is_some_and(|until| now < until)
    }

    /// Opens the gate. Every cause but the consecutive channel escalates: it raises the streak
    /// and opens for `cooldown_eff(streak)`; the consecutive channel, which fires without health
    /// evidence, opens for the plain cooldown and keeps the streak.
    fn open(&mut self, p: &GateParams, now: Timestamp, cause: Cause) -> Transition {
        let from = self.state;
        let base_ms = if cause == Cause::ConsecutiveChannel {
            p.cooldown_ms
        } else {
            self.streak = self.streak.saturating_add(1);
            p.cooldown_eff_ms(self.streak)
        };
        // SLA-adaptive (SPEC §11): base × (2 − R) with R the window's success rate, that is
        // base + base × failed / samples, in integers so that the Lua script computes the same.
        let open_ms = match p.sla_cooldown_ms {
            Some((floor, cap)) => {
                // The window as it reads now: a bucket that has rotated out no longer counts.
                let id = now.as_millis() / p.bucket_ms;
                let (a, f) = if id <= self.win_id {
                    (self.a0.saturating_add(self.a1), self.f0.saturating_add(self.f1))
                } else if id == self.win_id.saturating_add(1) {
                    (self.a0, self.f0)
                } else {
                    (0, 0)
                };
                let samples = u64::from(a);
                let failed = u64::from(f).min(samples);
                let adapted = base_ms.saturating_add(base_ms.saturating_mul(failed).checked_div(samples).unwrap_or(0));
                adapted.clamp(floor, cap.max(floor))
            }
            None => base_ms,
        };
        self.state = CircuitState::Open;
        self.epoch = self.epoch.saturating_add(1);
        self.open_until = now.saturating_add(Duration::from_millis(open_ms));
        self.probe_until = None;
        self.closed_since = None;
        self.probe_ok = 0;
        Transition { from, to: CircuitState::Open, cause }
    }

    /// Rotates the two buckets to `now`'s window id, then counts one attempt (and a failure, or
    /// a slow success).
    fn count(&mut self, p: &GateParams, now: Timestamp, failed: bool, slow: bool) {
        let id = now.as_millis() / p.bucket_ms;
        if id == self.win_id.saturating_add(1) {
            (self.a1, self.f1, self.s1, self.a0, self.f0, self.s0) = (self.a0, self.f0, self.s0, 0, 0, 0);
        } else if id > self.win_id {
            (self.a1, self.f1, self.s1, self.a0, self.f0, self.s0) = (0, 0, 0, 0, 0, 0);
        }
        // A clock that stepped back (id < win_id) keeps writing the newest bucket.
        self.win_id = self.win_id.max(id);
        self.a0 = self.a0.saturating_add(1);
        if failed {
            self.f0 = self.f0.saturating_add(1);
        }
        if slow {
            self.s0 = self.s0.saturating_add(1);
        }
    }

    fn decay_streak(&mut self, p: &GateParams, now: Timestamp) {
        let stable_for = Duration::from_millis(p.cooldown_eff_ms(self.streak).saturating_mul(2));
        if self.streak > 0 && self.closed_since.is_some_and(|since| now.saturating_since(since) >= stable_for) {
            self.streak = 0;
        }
    }

    fn reply(&self, p: &GateParams, now: Timestamp, verdict: Option<Verdict>, transition: Option<Transition>, fenced: bool) -> Reply {
        let (incarnation, epoch) = (self.incarnation, self.epoch);
        Reply { verdict, state: self.state, incarnation, epoch, retry_after: self.retry_after(p, now), transition, fenced }
    }
}

/// SPEC §3 operation 6 over several gates: the minimum `retry_after` (0 for no gates).
pub fn min_retry_after<'a>(gates: impl IntoIterator<Item = (&'a Gate, &'a GateParams)>, now: Timestamp) -> Duration {
    gates.into_iter().map(|(gate, p)| gate.retry_after(p, now)).min().unwrap_or(Duration::ZERO)
}
