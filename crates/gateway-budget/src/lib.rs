//! `gateway-budget`: retry-budget planning for an orchestration (seed 002, SPEC §10). Before
//! deploying, how to spend one shared retry pool across the steps of a chain, what that buys and
//! what a storm can cost at worst; at run time, a [`RetryPool`] that enforces the plan.
//!
//! - [`plan_retry_budget`]: the greedy allocation and what it buys, per node and for the chain;
//! - [`worst_case_retry_cost`]: the tail bound, every usable retry on the most expensive attempts;
//! - [`NodeCircuitBreaker`] and [`trace_breaker`]: the count-based node breaker (no clock: an
//!   open breaker cools down by the calls it rejects);
//! - the JSON form of the reference, what `cargo xtask budget plan|trace` reads and prints:
//!   [`answer_plan`] and [`answer_trace`], from [`plan_input_from_json`] and
//!   [`trace_input_from_json`] (serde-derived raw inputs, validated with the reference's messages)
//!   to [`plan_to_json`] and [`trace_to_json`] (the derived `Serialize` of the answers);
//! - [`RetryPool`]: one orchestration's shared retry budget at run time.
//!
//! The semantics, validation rules and numbers are the reference's, to the last digit: rounding
//! follows JavaScript's `Number(x.toFixed(n))` (half up on the exact binary value) and
//! `Math.round` ([`to_fixed`]), and every power is the reference's `Math.pow` ([`js_math::pow`],
//! V8's fdlibm port, not the C library's `f64::powf`, which differs in the last bit for some
//! inputs and so rounds some results to the other side of a tie). Nothing here reads a clock or
//! draws a random number: the same input gives the same plan.

mod input;
pub mod js_math;
mod output;
mod plan;
mod pool;
mod round;
mod trace;
mod worst_case;

pub use input::{TraceInput, plan_input_from_json, trace_input_from_json};
pub use output::{PlanAnswer, plan_to_json, trace_to_json};
pub use plan::{
    BudgetPlan, BudgetPolicy, NodeAllocation, RetryNode, Threshold, plan_retry_budget, retry_cap, validate_nodes, validate_policy,
};
pub use pool::{RetryPool, RetryRefused};
pub use round::to_fixed;
pub use trace::{BreakerTrace, NodeBreakerState, NodeCircuitBreaker, trace_breaker};
pub use worst_case::{WorstCase, worst_case_retry_cost};

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

/// `cargo xtask budget plan`: the reference's JSON input, `{"nodes": [...], "policy": {...}}`, to
/// its answer `{"plan": ..., "worstCase": ...}`, or the error naming the first field at fault.
pub fn answer_plan(text: &str) -> Result<String, BudgetError> {
    let (nodes, policy) = plan_input_from_json(text)?;
    let plan = plan_retry_budget(&nodes, &policy)?;
    Ok(plan_to_json(&plan, &worst_case_retry_cost(&nodes, &policy)?))
}

/// `cargo xtask budget trace`: `{"breaker": {...}, "calls": [...]}` to the breaker's trace, or
/// the error naming the first field at fault.
pub fn answer_trace(text: &str) -> Result<String, BudgetError> {
    let input = trace_input_from_json(text)?;
    Ok(trace_to_json(&trace_breaker(input.failure_threshold, input.half_open_after_calls, &input.calls)?))
}
