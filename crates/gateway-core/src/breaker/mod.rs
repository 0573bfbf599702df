//! The circuit breaker of one (scope, source) gate (SPEC §3): a pure state machine.
//!
//! Two trip channels (failure rate over a two-bucket window, and consecutive failures with
//! health-evidence suppression), a reopen streak that doubles the open time up to
//! `max_cooldown`, a single probe lease with lazy reissue, epoch fencing, and the retry_after
//! contract on every exit. Every operation takes `now`; the same sequence of operations always
//! gives the same states. The memory gate runs this code; the Redis Lua scripts mirror it field
//! for field and the contract suite holds them to it.

mod gate;
mod op;
mod params;
mod reply;
mod transitions;

use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

pub use gate::Gate;
pub use op::{Fence, GateOp, SuccessKind};
pub use params::GateParams;
pub use reply::{Cause, Reply, Transition, Verdict};

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
/// SPEC §3 operation 6 over several gates: the minimum `retry_after` (0 for no gates).
pub fn min_retry_after<'a>(gates: impl IntoIterator<Item = (&'a Gate, &'a GateParams)>, now: Timestamp) -> Duration {
    gates.into_iter().map(|(gate, p)| gate.retry_after(p, now)).min().unwrap_or(Duration::ZERO)
}
