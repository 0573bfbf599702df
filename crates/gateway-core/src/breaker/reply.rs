//! What an operation returns: the reply with its verdict, and the transition it made and why.

use super::{CircuitState, Fence};
use serde::{Deserialize, Serialize};
use std::time::Duration;

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
/// What every operation returns: the verdict of a `TryEnter`, the state after the operation,
/// the incarnation and epoch, and `retry_after` under the contract (0 unless OPEN; never above
/// `max_cooldown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The verdict of a [`GateOp::TryEnter`](super::GateOp::TryEnter); `None` for the other operations.
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
