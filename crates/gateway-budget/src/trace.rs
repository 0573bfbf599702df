//! The count-based node breaker of seed 002: no clock, an open breaker cools down by the calls
//! it rejects; and the replay of a call script through it.

use crate::plan::Threshold;
use crate::{BudgetError, fail};
use serde::{Serialize, Serializer};

/// The state of a [`NodeCircuitBreaker`]; serialised as its [`as_str`](NodeBreakerState::as_str) name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeBreakerState {
    /// Calls flow.
    Closed,
    /// Calls are rejected until `half_open_after_calls` have been.
    Open,
    /// One probe call decides.
    HalfOpen,
}

impl NodeBreakerState {
    /// The reference's name: `closed`, `open`, `half-open`.
    pub const fn as_str(self) -> &'static str {
        match self {
            NodeBreakerState::Closed => "closed",
            NodeBreakerState::Open => "open",
            NodeBreakerState::HalfOpen => "half-open",
        }
    }
}

impl Serialize for NodeBreakerState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A count-based breaker: no clock; an open breaker cools down by the calls it rejects, so the
/// same call sequence always gives the same states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCircuitBreaker {
    node_id: String,
    failure_threshold: u32,
    half_open_after_calls: u32,
    state: NodeBreakerState,
    consecutive_failures: u64,
    rejected_since_open: u32,
}

impl NodeCircuitBreaker {
    /// A closed breaker. `failure_threshold` ≥ 1 and `half_open_after_calls` ≥ 1; an infinite
    /// threshold is refused, as the reference's breaker refuses one (only the planner's policy
    /// takes `Infinity`).
    pub fn new(node_id: &str, failure_threshold: Threshold, half_open_after_calls: u32) -> Result<Self, BudgetError> {
        if node_id.trim().is_empty() {
            return fail("nodeId", "must not be empty");
        }
        let failure_threshold = match failure_threshold {
            Threshold::Finite(t) if t >= 1 => t,
            _ => return fail("failureThreshold", "must be an integer >= 1"),
        };
        if half_open_after_calls < 1 {
            return fail("halfOpenAfterCalls", "must be an integer >= 1");
        }
        Ok(NodeCircuitBreaker {
            node_id: node_id.to_owned(),
            failure_threshold,
            half_open_after_calls,
            state: NodeBreakerState::Closed,
            consecutive_failures: 0,
            rejected_since_open: 0,
        })
    }

    /// The node.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The current state.
    pub fn state(&self) -> NodeBreakerState {
        self.state
    }

    /// Asked before a call; `false` short-circuits it (no model cost).
    pub fn allow(&mut self) -> bool {
        match self.state {
            NodeBreakerState::Closed | NodeBreakerState::HalfOpen => true,
            NodeBreakerState::Open if self.rejected_since_open < self.half_open_after_calls => {
                self.rejected_since_open += 1;
                false
            }
            NodeBreakerState::Open => {
                self.state = NodeBreakerState::HalfOpen;
                true
            }
        }
    }

    /// Records an allowed call's result.
    pub fn record(&mut self, success: bool) -> NodeBreakerState {
        if success {
            self.consecutive_failures = 0;
            self.rejected_since_open = 0;
            self.state = NodeBreakerState::Closed;
            return self.state;
        }
        self.consecutive_failures += 1;
        if self.state == NodeBreakerState::HalfOpen || self.consecutive_failures >= u64::from(self.failure_threshold) {
            self.state = NodeBreakerState::Open;
            self.rejected_since_open = 0;
        }
        self.state
    }
}

/// The replay of a call script through a [`NodeCircuitBreaker`]; serialised as the reference
/// prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakerTrace {
    /// Calls let through.
    pub allowed: u32,
    /// Calls short-circuited.
    pub rejected: u32,
    /// Attempts made (= allowed).
    pub attempts: u32,
    /// The state at the end.
    pub final_state: NodeBreakerState,
    /// The state after each call.
    pub states: Vec<NodeBreakerState>,
}

/// Replays `calls` ("would succeed if called"); a rejected call consumes no script result.
pub fn trace_breaker(failure_threshold: Threshold, half_open_after_calls: u32, calls: &[bool]) -> Result<BreakerTrace, BudgetError> {
    let mut breaker = NodeCircuitBreaker::new("trace", failure_threshold, half_open_after_calls)?;
    let (mut allowed, mut rejected) = (0, 0);
    let mut states = Vec::with_capacity(calls.len());
    for &would_succeed in calls {
        if breaker.allow() {
            allowed += 1;
            breaker.record(would_succeed);
        } else {
            rejected += 1;
        }
        states.push(breaker.state());
    }
    Ok(BreakerTrace { allowed, rejected, attempts: allowed, final_state: breaker.state(), states })
}
