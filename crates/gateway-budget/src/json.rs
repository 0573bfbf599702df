//! The JSON form of the reference (`cargo xtask budget`): its inputs read with its field names
//! and validation messages, its answers written as it prints them.

use crate::plan::{BudgetPlan, BudgetPolicy, RetryNode, Threshold, validate_nodes, validate_policy};
use crate::trace::BreakerTrace;
use crate::worst_case::WorstCase;
use crate::{BudgetError, fail};
use serde_json::Value;

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
