//! The planner of seed 002 (SPEC §10): how to spend one shared retry pool across the steps of a
//! chain and what that buys, with the reference's validation rules and rounding (8 places for
//! probabilities, 6 for expected attempts, 4 for amplification, whole numbers for costs and
//! latency).

use crate::output::{js_number, js_number_or_null};
use crate::round::{js_round, js_round_f64, to_fixed};
use crate::{BudgetError, fail, js_math};
use serde::Serialize;

/// One step of the chain; cost, latency and failure rate are per attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryNode {
    /// Unique, non-empty id.
    pub id: String,
    /// Failure rate of one attempt, in [0, 1).
    pub failure_rate: f64,
    /// Cost of one attempt in micro-units.
    pub attempt_cost_micros: u64,
    /// Latency of one attempt in milliseconds (≥ 0).
    pub latency_ms: f64,
    /// Local retry limit.
    pub max_retries: u32,
    /// A required step's failure fails the chain; an optional one's only degrades the result.
    pub required: bool,
}

/// The consecutive-failure threshold of the breaker: a count, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    /// Opens after this many consecutive failures (≥ 1).
    Finite(u32),
    /// Never opens (`"Infinity"`).
    Infinite,
}

/// The orchestration's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetPolicy {
    /// Retries shared by every node of one orchestration request.
    pub global_retry_budget: u32,
    /// Consecutive failures that open a node's breaker.
    pub consecutive_failure_threshold: Threshold,
    /// Calls an open breaker rejects before letting a probe through (≥ 1).
    pub half_open_after_calls: u32,
}

/// What one node gets and what it buys; serialised as the reference prints it, fields in the
/// declared order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAllocation {
    /// The node.
    pub node_id: String,
    /// Retries allocated.
    pub retries: u32,
    /// Its cap: `min(maxRetries, threshold − 1)`.
    pub retry_cap: u32,
    /// `f^(retries+1)`, 8 places.
    #[serde(serialize_with = "js_number")]
    pub effective_failure_rate: f64,
    /// Expected attempts, 6 places.
    #[serde(serialize_with = "js_number")]
    pub expected_attempts: f64,
    /// `1 − f^(retries+1)`, 8 places.
    #[serde(serialize_with = "js_number")]
    pub success_probability: f64,
    /// Expected cost, whole micro-units.
    pub expected_cost_micros: u64,
}

/// The plan of a chain; serialised as the reference prints it, fields in the declared order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetPlan {
    /// Per node, in input order.
    pub allocations: Vec<NodeAllocation>,
    /// Retries allocated in all.
    pub retries_used: u32,
    /// Probability every required node succeeds, 8 places.
    #[serde(serialize_with = "js_number")]
    pub chain_success: f64,
    /// Expected cost of one chain, whole micro-units.
    pub expected_cost_micros: u64,
    /// Expected cost per successful chain, a whole number (it can exceed any integer type
    /// when success is tiny); `None` (infinite) when the chain cannot succeed.
    #[serde(serialize_with = "js_number_or_null")]
    pub cost_per_success_micros: Option<f64>,
    /// Expected latency, whole milliseconds.
    pub expected_latency_ms: u64,
    /// Expected attempts per node, 4 places.
    #[serde(serialize_with = "js_number")]
    pub retry_amplification: f64,
    /// Probability that some optional node fails, 8 places.
    #[serde(serialize_with = "js_number")]
    pub partial_probability: f64,
    /// Nodes whose breaker cap is below their own retry limit.
    pub breaker_capped: Vec<String>,
}

/// Every rule of the reference's `validateNodes`.
pub fn validate_nodes(nodes: &[RetryNode]) -> Result<(), BudgetError> {
    if nodes.is_empty() {
        return fail("nodes", "must hold at least one node");
    }
    let mut seen = std::collections::HashSet::new();
    for node in nodes {
        if node.id.trim().is_empty() {
            return fail("node.id", "must not be empty");
        }
        if !seen.insert(node.id.as_str()) {
            return fail("node.id", format!("{} is repeated", node.id));
        }
        if !(node.failure_rate >= 0.0 && node.failure_rate < 1.0) {
            return fail(format!("{}.failureRate", node.id), "must lie in [0, 1)");
        }
        if !node.latency_ms.is_finite() || node.latency_ms < 0.0 {
            return fail(format!("{}.latencyMs", node.id), "must be >= 0");
        }
    }
    Ok(())
}

/// Every rule of the reference's `validatePolicy` that the types do not already enforce.
pub fn validate_policy(policy: &BudgetPolicy) -> Result<(), BudgetError> {
    if policy.consecutive_failure_threshold == Threshold::Finite(0) {
        return fail("consecutiveFailureThreshold", "must be an integer >= 1 or Infinity");
    }
    if policy.half_open_after_calls < 1 {
        return fail("halfOpenAfterCalls", "must be an integer >= 1");
    }
    Ok(())
}

/// The node's retry cap: its own limit, or the consecutive attempts its breaker allows.
pub fn retry_cap(node: &RetryNode, policy: &BudgetPolicy) -> u32 {
    let breaker_cap = match policy.consecutive_failure_threshold {
        Threshold::Infinite => node.max_retries,
        Threshold::Finite(t) => t.saturating_sub(1),
    };
    node.max_retries.min(breaker_cap)
}

fn expected_attempts(failure_rate: f64, retries: u32) -> f64 {
    if failure_rate == 0.0 {
        return 1.0;
    }
    (1.0 - js_math::pow(failure_rate, f64::from(retries) + 1.0)) / (1.0 - failure_rate)
}

/// Greedy allocation: each retry goes to the node whose next retry recovers the most success
/// (`f^(r+1)·(1−f)`), ties to the cheaper expected cost (`cost·f^(r+1)`); required nodes before
/// optional ones; stops when the pool is empty or no node can take more.
pub fn plan_retry_budget(nodes: &[RetryNode], policy: &BudgetPolicy) -> Result<BudgetPlan, BudgetError> {
    validate_nodes(nodes)?;
    validate_policy(policy)?;
    let caps: Vec<u32> = nodes.iter().map(|n| retry_cap(n, policy)).collect();
    let retries = allocate(nodes, &caps, policy.global_retry_budget);
    Ok(what_it_buys(nodes, &caps, &retries))
}

/// The retries of each node: the pool handed out one retry at a time to [`next_retry`]'s node.
fn allocate(nodes: &[RetryNode], caps: &[u32], pool: u32) -> Vec<u32> {
    let mut retries = vec![0u32; nodes.len()];
    let mut remaining = pool;
    while remaining > 0 {
        let Some(index) = next_retry(nodes, caps, &retries) else { break };
        retries[index] += 1;
        remaining -= 1;
    }
    retries
}

/// The node whose next retry recovers the most success, ties to the cheaper expected cost;
/// a required node if any can take one; `None` when no node can.
fn next_retry(nodes: &[RetryNode], caps: &[u32], retries: &[u32]) -> Option<usize> {
    let mut pick: Option<usize> = None;
    let (mut best_gain, mut best_cost) = (0.0f64, f64::INFINITY);
    for required_pass in [true, false] {
        for (index, node) in nodes.iter().enumerate() {
            if node.required != required_pass || retries[index] >= caps[index] || node.failure_rate == 0.0 {
                continue;
            }
            let next = js_math::pow(node.failure_rate, f64::from(retries[index]) + 1.0);
            let gain = next * (1.0 - node.failure_rate);
            let cost = node.attempt_cost_micros as f64 * next;
            if gain > best_gain || (gain == best_gain && cost < best_cost) {
                pick = Some(index);
                best_gain = gain;
                best_cost = cost;
            }
        }
        if pick.is_some() {
            break;
        }
    }
    pick
}

/// The plan of `retries`: per node and for the chain, rounded as the reference prints them.
fn what_it_buys(nodes: &[RetryNode], caps: &[u32], retries: &[u32]) -> BudgetPlan {
    let (mut chain_success, mut optional_success) = (1.0f64, 1.0f64);
    let (mut expected_cost, mut attempts_total, mut expected_latency) = (0.0f64, 0.0f64, 0.0f64);
    let allocations = nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            let r = retries[index];
            let attempts = expected_attempts(node.failure_rate, r);
            let failure = js_math::pow(node.failure_rate, f64::from(r) + 1.0);
            let success = 1.0 - failure;
            let cost = node.attempt_cost_micros as f64 * attempts;
            expected_cost += cost;
            attempts_total += attempts;
            expected_latency += node.latency_ms * attempts;
            if node.required {
                chain_success *= success;
            } else {
                optional_success *= success;
            }
            NodeAllocation {
                node_id: node.id.clone(),
                retries: r,
                retry_cap: caps[index],
                effective_failure_rate: to_fixed(failure, 8),
                expected_attempts: to_fixed(attempts, 6),
                success_probability: to_fixed(success, 8),
                expected_cost_micros: js_round(cost),
            }
        })
        .collect();
    let total_cost = js_round(expected_cost);
    BudgetPlan {
        allocations,
        retries_used: retries.iter().sum(),
        chain_success: to_fixed(chain_success, 8),
        expected_cost_micros: total_cost,
        cost_per_success_micros: (chain_success != 0.0).then(|| js_round_f64(total_cost as f64 / chain_success)),
        expected_latency_ms: js_round(expected_latency),
        retry_amplification: to_fixed(attempts_total / nodes.len() as f64, 4),
        partial_probability: to_fixed(1.0 - optional_success, 8),
        breaker_capped: nodes.iter().zip(caps).filter(|(n, cap)| **cap < n.max_retries).map(|(n, _)| n.id.clone()).collect(),
    }
}
