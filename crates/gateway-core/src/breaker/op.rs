//! The operations on a gate, how a success counts, and the fence a record carries.

use serde::{Deserialize, Serialize};

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
