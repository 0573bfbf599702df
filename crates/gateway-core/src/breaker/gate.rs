//! The state of one gate and its entry points: applying an operation, `retry_after`, and what
//! adapters read of it.

use super::{Cause, CircuitState, Fence, GateOp, GateParams, Reply, Transition, Verdict};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::Duration;

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
    fn reply(&self, p: &GateParams, now: Timestamp, verdict: Option<Verdict>, transition: Option<Transition>, fenced: bool) -> Reply {
        let (incarnation, epoch) = (self.incarnation, self.epoch);
        Reply { verdict, state: self.state, incarnation, epoch, retry_after: self.retry_after(p, now), transition, fenced }
    }
}
