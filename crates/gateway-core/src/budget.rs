//! Retry-budget planning for an orchestration (seed 002, SPEC §10): how to spend one shared
//! retry pool across the steps of a chain, what that buys, what a storm can cost at worst, and
//! the count-based node breaker (no clock: it cools down by rejected calls), with the
//! reference's semantics, validation rules and rounding (8 places for probabilities, 6 for
//! expected attempts, 4 for amplification, whole numbers for costs and latency).
//!
//! Rounding follows JavaScript's `Number(x.toFixed(n))` (half up on the exact binary value) and
//! `Math.round`, and every power is the reference's `Math.pow` ([`crate::js_math::pow`], V8's
//! fdlibm port, not the C library's `f64::powf`, which differs in the last bit for some inputs
//! and so rounds some results to the other side of a tie), so the planner prints the
//! reference's numbers to the last digit.

use crate::js_math;
use serde_json::Value;

/// An invalid planner input, naming the field; displayed as the reference's
/// `retry-budget: …` line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("retry-budget: {field} {rule}")]
pub struct BudgetError {
    /// The field at fault (`search.rerank.failureRate`, `globalRetryBudget`, `nodes`…).
    pub field: String,
    /// The rule it breaks.
    pub rule: String,
}

fn fail<T>(field: impl Into<String>, rule: impl Into<String>) -> Result<T, BudgetError> {
    Err(BudgetError { field: field.into(), rule: rule.into() })
}

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

/// What one node gets and what it buys.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeAllocation {
    /// The node.
    pub node_id: String,
    /// Retries allocated.
    pub retries: u32,
    /// Its cap: `min(maxRetries, threshold − 1)`.
    pub retry_cap: u32,
    /// `f^(retries+1)`, 8 places.
    pub effective_failure_rate: f64,
    /// Expected attempts, 6 places.
    pub expected_attempts: f64,
    /// `1 − f^(retries+1)`, 8 places.
    pub success_probability: f64,
    /// Expected cost, whole micro-units.
    pub expected_cost_micros: u64,
}

/// The plan of a chain.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetPlan {
    /// Per node, in input order.
    pub allocations: Vec<NodeAllocation>,
    /// Retries allocated in all.
    pub retries_used: u32,
    /// Probability every required node succeeds, 8 places.
    pub chain_success: f64,
    /// Expected cost of one chain, whole micro-units.
    pub expected_cost_micros: u64,
    /// Expected cost per successful chain, a whole number (it can exceed any integer type
    /// when success is tiny); `None` (infinite) when the chain cannot succeed.
    pub cost_per_success_micros: Option<f64>,
    /// Expected latency, whole milliseconds.
    pub expected_latency_ms: u64,
    /// Expected attempts per node, 4 places.
    pub retry_amplification: f64,
    /// Probability that some optional node fails, 8 places.
    pub partial_probability: f64,
    /// Nodes whose breaker cap is below their own retry limit.
    pub breaker_capped: Vec<String>,
}

/// The tail bound: every available retry given to the most expensive attempts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorstCase {
    /// Nodes plus usable retries.
    pub max_attempts: u64,
    /// Whole micro-units.
    pub max_cost_micros: u64,
    /// `max_cost / base_cost`, 4 places (0 when the base cost is 0).
    pub amplification: f64,
}

/// JavaScript's `Number(x.toFixed(places))`: half up on the exact binary value.
pub fn to_fixed(x: f64, places: usize) -> f64 {
    if !x.is_finite() {
        return x;
    }
    // 40 more digits than asked: a tie in the exact expansion shows as 5 then zeros.
    let wide = format!("{:.*}", places + 40, x.abs());
    let (int_part, frac) = wide.split_once('.').unwrap_or((&wide, ""));
    let (kept, rest) = frac.split_at(places.min(frac.len()));
    let mut digits: Vec<u8> = int_part.bytes().chain(kept.bytes()).map(|b| b - b'0').collect();
    if rest.as_bytes().first().is_some_and(|&d| d >= b'5') {
        let mut i = digits.len();
        loop {
            if i == 0 {
                digits.insert(0, 1);
                break;
            }
            i -= 1;
            if digits[i] == 9 {
                digits[i] = 0;
            } else {
                digits[i] += 1;
                break;
            }
        }
    }
    let split = digits.len() - places;
    let text: String = digits[..split].iter().map(|d| char::from(b'0' + d)).collect::<String>()
        + "."
        + &digits[split..].iter().map(|d| char::from(b'0' + d)).collect::<String>();
    let value: f64 = text.parse().unwrap_or(x.abs());
    if x < 0.0 { -value } else { value }
}

/// JavaScript's `Math.round` for the non-negative values the planner produces.
fn js_round_f64(x: f64) -> f64 {
    let r = (x + 0.5).floor();
    if r - x > 0.5 { r - 1.0 } else { r }
}

fn js_round(x: f64) -> u64 {
    js_round_f64(x) as u64
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
    let mut retries = vec![0u32; nodes.len()];
    let mut remaining = policy.global_retry_budget;
    while remaining > 0 {
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
        let Some(index) = pick else { break };
        retries[index] += 1;
        remaining -= 1;
    }

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
    Ok(BudgetPlan {
        allocations,
        retries_used: retries.iter().sum(),
        chain_success: to_fixed(chain_success, 8),
        expected_cost_micros: total_cost,
        cost_per_success_micros: (chain_success != 0.0).then(|| js_round_f64(total_cost as f64 / chain_success)),
        expected_latency_ms: js_round(expected_latency),
        retry_amplification: to_fixed(attempts_total / nodes.len() as f64, 4),
        partial_probability: to_fixed(1.0 - optional_success, 8),
        breaker_capped: nodes.iter().zip(&caps).filter(|(n, cap)| **cap < n.max_retries).map(|(n, _)| n.id.clone()).collect(),
    })
}

/// The tail bound of a retry storm: the pool (capped by the nodes' caps) spent on the most
/// expensive attempts.
pub fn worst_case_retry_cost(nodes: &[RetryNode], policy: &BudgetPolicy) -> Result<WorstCase, BudgetError> {
    validate_nodes(nodes)?;
    validate_policy(policy)?;
    let caps: Vec<u32> = nodes.iter().map(|n| retry_cap(n, policy)).collect();
    let base: u64 = nodes.iter().map(|n| n.attempt_cost_micros).sum();
    let pool = u64::from(policy.global_retry_budget).min(caps.iter().map(|&c| u64::from(c)).sum());
    let mut retry_costs: Vec<u64> =
        nodes.iter().zip(&caps).flat_map(|(n, &cap)| std::iter::repeat_n(n.attempt_cost_micros, cap as usize)).collect();
    retry_costs.sort_unstable_by(|a, b| b.cmp(a));
    let max_cost = base + retry_costs.iter().take(usize::try_from(pool).unwrap_or(usize::MAX)).sum::<u64>();
    Ok(WorstCase {
        max_attempts: nodes.len() as u64 + pool,
        max_cost_micros: max_cost,
        amplification: if base == 0 { 0.0 } else { to_fixed(max_cost as f64 / base as f64, 4) },
    })
}

/// The state of a [`NodeCircuitBreaker`].
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

/// The replay of a call script through a [`NodeCircuitBreaker`].
#[derive(Clone, Debug, PartialEq, Eq)]
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

// ---- the JSON form of the reference (used by `cargo xtask budget`) ----

fn number(value: &Value, field: &str) -> Result<f64, BudgetError> {
    value.as_f64().map_or_else(|| fail(field, "must be a number"), Ok)
}

/// An integer ≥ `min`, as the reference's `integer()` checks it.
fn integer(value: &Value, field: &str, min: u64) -> Result<u64, BudgetError> {
    let n = number(value, field)?;
    if n.fract() != 0.0 || n < min as f64 || n > 9.0e15 {
        return fail(field, format!("must be an integer >= {min}"));
    }
    Ok(n as u64)
}

fn small(value: &Value, field: &str, min: u64) -> Result<u32, BudgetError> {
    u32::try_from(integer(value, field, min)?).or_else(|_| fail(field, "is too large"))
}

fn threshold(value: &Value, field: &str, rule: &str) -> Result<Threshold, BudgetError> {
    match value {
        Value::String(s) if s == "Infinity" => Ok(Threshold::Infinite),
        Value::Number(_) => small(value, field, 1).map(Threshold::Finite).or_else(|_| fail(field, rule)),
        _ => fail(field, rule),
    }
}

fn field<'a>(object: &'a Value, name: &str, path: &str) -> Result<&'a Value, BudgetError> {
    object.get(name).map_or_else(|| fail(path, "is missing"), Ok)
}

/// `{"nodes": [...], "policy": {...}}` with the reference's field names.
pub fn plan_input_from_json(input: &Value) -> Result<(Vec<RetryNode>, BudgetPolicy), BudgetError> {
    let nodes = field(input, "nodes", "nodes")?.as_array().map_or_else(|| fail("nodes", "must be an array"), Ok)?;
    let mut parsed = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        let id = field(node, "id", &format!("nodes[{i}].id"))?
            .as_str()
            .map_or_else(|| fail(format!("nodes[{i}].id"), "must be a string"), Ok)?;
        let at = |name: &str| format!("{id}.{name}");
        parsed.push(RetryNode {
            id: id.to_owned(),
            failure_rate: number(field(node, "failureRate", &at("failureRate"))?, &at("failureRate"))?,
            attempt_cost_micros: integer(field(node, "attemptCostMicros", &at("attemptCostMicros"))?, &at("attemptCostMicros"), 0)?,
            latency_ms: number(field(node, "latencyMs", &at("latencyMs"))?, &at("latencyMs"))?,
            max_retries: small(field(node, "maxRetries", &at("maxRetries"))?, &at("maxRetries"), 0)?,
            required: field(node, "required", &at("required"))?
                .as_bool()
                .map_or_else(|| fail(at("required"), "must be true or false"), Ok)?,
        });
    }
    validate_nodes(&parsed)?;
    let policy = field(input, "policy", "policy")?;
    let policy = BudgetPolicy {
        global_retry_budget: small(field(policy, "globalRetryBudget", "globalRetryBudget")?, "globalRetryBudget", 0)?,
        consecutive_failure_threshold: threshold(
            field(policy, "consecutiveFailureThreshold", "consecutiveFailureThreshold")?,
            "consecutiveFailureThreshold",
            "must be an integer >= 1 or Infinity",
        )?,
        half_open_after_calls: small(field(policy, "halfOpenAfterCalls", "halfOpenAfterCalls")?, "halfOpenAfterCalls", 1)?,
    };
    validate_policy(&policy)?;
    Ok((parsed, policy))
}

/// `{"breaker": {"failureThreshold", "halfOpenAfterCalls"}, "calls": [bool…]}`.
pub fn trace_input_from_json(input: &Value) -> Result<(Threshold, u32, Vec<bool>), BudgetError> {
    let breaker = field(input, "breaker", "breaker")?;
    let threshold = threshold(field(breaker, "failureThreshold", "failureThreshold")?, "failureThreshold", "must be an integer >= 1")?;
    let half_open = small(field(breaker, "halfOpenAfterCalls", "halfOpenAfterCalls")?, "halfOpenAfterCalls", 1)?;
    let calls = field(input, "calls", "calls")?.as_array().map_or_else(|| fail("calls", "must be an array"), Ok)?;
    let calls = calls
        .iter()
        .enumerate()
        .map(|(i, c)| c.as_bool().map_or_else(|| fail(format!("calls[{i}]"), "must be true or false"), Ok))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((threshold, half_open, calls))
}

/// A number as JavaScript prints it: whole values without a fraction.
fn js_number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 { Value::from(x as i64) } else { Value::from(x) }
}

/// The plan and worst case in the reference's JSON shape (an infinite cost is `null`).
pub fn plan_to_json(plan: &BudgetPlan, worst: &WorstCase) -> Value {
    let allocations: Vec<Value> = plan
        .allocations
        .iter()
        .map(|a| {
            serde_json::json!({
                "nodeId": a.node_id,
                "retries": a.retries,
                "retryCap": a.retry_cap,
                "effectiveFailureRate": js_number(a.effective_failure_rate),
                "expectedAttempts": js_number(a.expected_attempts),
                "successProbability": js_number(a.success_probability),
                "expectedCostMicros": a.expected_cost_micros,
            })
        })
        .collect();
    serde_json::json!({
        "plan": {
            "allocations": allocations,
            "retriesUsed": plan.retries_used,
            "chainSuccess": js_number(plan.chain_success),
            "expectedCostMicros": plan.expected_cost_micros,
            "costPerSuccessMicros": plan.cost_per_success_micros.map(js_number),
            "expectedLatencyMs": plan.expected_latency_ms,
            "retryAmplification": js_number(plan.retry_amplification),
            "partialProbability": js_number(plan.partial_probability),
            "breakerCapped": plan.breaker_capped,
        },
        "worstCase": {
            "maxAttempts": worst.max_attempts,
            "maxCostMicros": worst.max_cost_micros,
            "amplification": js_number(worst.amplification),
        }
    })
}

/// A trace in the reference's JSON shape.
pub fn trace_to_json(trace: &BreakerTrace) -> Value {
    serde_json::json!({
        "allowed": trace.allowed,
        "rejected": trace.rejected,
        "attempts": trace.attempts,
        "finalState": trace.final_state.as_str(),
        "states": trace.states.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
    })
}
