//! The breaker's rules: how each operation moves a gate between CLOSED, OPEN and HALF_OPEN,
//! the window it counts in, the open time it escalates to and the streak's decay.

use super::{Cause, CircuitState, Gate, GateParams, SuccessKind, Transition, Verdict};
use crate::time::Timestamp;
use std::time::Duration;

impl Gate {
    pub(super) fn try_enter(&mut self, p: &GateParams, now: Timestamp) -> (Verdict, Option<Transition>) {
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
    pub(super) fn succeed(&mut self, p: &GateParams, now: Timestamp, kind: SuccessKind) -> Option<Transition> {
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
    pub(super) fn fail(&mut self, p: &GateParams, now: Timestamp) -> Option<Transition> {
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
    /// Opens the gate. Every cause but the consecutive channel escalates: it raises the streak
    /// and opens for `cooldown_eff(streak)`; the consecutive channel, which fires without health
    /// evidence, opens for the plain cooldown and keeps the streak.
    pub(super) fn open(&mut self, p: &GateParams, now: Timestamp, cause: Cause) -> Transition {
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
}
