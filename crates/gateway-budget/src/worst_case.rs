//! The tail bound of a retry storm: every usable retry given to the most expensive attempts.

use crate::BudgetError;
use crate::output::js_number;
use crate::plan::{BudgetPolicy, RetryNode, retry_cap, validate_nodes, validate_policy};
use crate::round::to_fixed;
use serde::Serialize;

/// The tail bound: every available retry given to the most expensive attempts; serialised as the
/// reference prints it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorstCase {
    /// Nodes plus usable retries.
    pub max_attempts: u64,
    /// Whole micro-units.
    pub max_cost_micros: u64,
    /// `max_cost / base_cost`, 4 places (0 when the base cost is 0).
    #[serde(serialize_with = "js_number")]
    pub amplification: f64,
}

/// The tail bound of a retry storm: the pool (capped by the nodes' caps) spent on the most
/// expensive attempts.
pub fn worst_case_retry_cost(nodes: &[RetryNode], policy: &BudgetPolicy) -> Result<WorstCase, BudgetError> {
    validate_nodes(nodes)?;
    validate_policy(policy)?;
    let caps: Vec<u32> = nodes.iter().map(|n| retry_cap(n, policy)).collect();
    let base: u64 = nodes.iter().map(|n| n.attempt_cost_micros).sum();
    let pool = u64::from(policy.global_retry_budget).min(caps.iter().map(|&c| u64::from(c)).sum());
    // The `pool` most expensive retries: each node's cost `cap` times, dearest first. Counted
    // per node, never listed one by one: a cap may be billions (the reference's array of them
    // was its own limit).
    let mut dearest: Vec<(u64, u64)> = nodes.iter().zip(&caps).map(|(n, &cap)| (n.attempt_cost_micros, u64::from(cap))).collect();
    dearest.sort_unstable_by_key(|&(cost, _)| std::cmp::Reverse(cost));
    let (mut left, mut retries) = (pool, 0u64);
    for (cost, cap) in dearest {
        let taken = cap.min(left);
        retries = retries.wrapping_add(cost.wrapping_mul(taken));
        left -= taken;
    }
    let max_cost = base.wrapping_add(retries);
    Ok(WorstCase {
        max_attempts: nodes.len() as u64 + pool,
        max_cost_micros: max_cost,
        amplification: if base == 0 { 0.0 } else { to_fixed(max_cost as f64 / base as f64, 4) },
    })
}
