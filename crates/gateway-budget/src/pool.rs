//! `RetryPool`: one orchestration's shared retry budget at run time (SPEC §10). Each step's
//! retry takes one retry from the pool, within the step's own cap; an empty pool or a reached
//! cap refuses the retry with a typed error. Built from a plan (`plan_retry_budget`) or a number.
//! Safe under concurrent steps.

use crate::BudgetPlan;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Why a step's retry was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RetryRefused {
    /// The orchestration's pool is spent.
    #[error("retry of {step} refused: the orchestration's retry pool of {total} is spent")]
    PoolEmpty {
        /// The step that asked.
        step: String,
        /// The pool's size.
        total: u32,
    },
    /// The step has taken all the retries its plan gave it.
    #[error("retry of {step} refused: the step has used its {cap} planned retries")]
    StepCapReached {
        /// The step that asked.
        step: String,
        /// Its cap.
        cap: u32,
    },
}

#[derive(Debug)]
struct Ledger {
    remaining: u32,
    taken: HashMap<String, u32>,
}

/// A shared retry budget for the steps of one orchestration request.
#[derive(Debug)]
pub struct RetryPool {
    total: u32,
    caps: HashMap<String, u32>,
    ledger: Mutex<Ledger>,
}

impl RetryPool {
    /// A pool of `total` retries with no per-step caps.
    pub fn new(total: u32) -> Self {
        RetryPool { total, caps: HashMap::new(), ledger: Mutex::new(Ledger { remaining: total, taken: HashMap::new() }) }
    }

    /// The pool a plan allocated: its `retriesUsed`, each step capped at its allocation (a step
    /// the plan does not name gets no retry).
    pub fn from_plan(plan: &BudgetPlan) -> Self {
        let mut pool = RetryPool::new(plan.retries_used);
        pool.caps = plan.allocations.iter().map(|a| (a.node_id.clone(), a.retries)).collect();
        pool
    }

    /// Caps `step` at `cap` retries.
    pub fn with_cap(mut self, step: impl Into<String>, cap: u32) -> Self {
        self.caps.insert(step.into(), cap);
        self
    }

    /// Takes one retry for `step`, or says why not.
    pub fn take(&self, step: &str) -> Result<(), RetryRefused> {
        let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = ledger.taken.get(step).copied().unwrap_or(0);
        let cap = if self.caps.is_empty() { None } else { Some(self.caps.get(step).copied().unwrap_or(0)) };
        if let Some(cap) = cap.filter(|&cap| taken >= cap) {
            return Err(RetryRefused::StepCapReached { step: step.to_owned(), cap });
        }
        if ledger.remaining == 0 {
            return Err(RetryRefused::PoolEmpty { step: step.to_owned(), total: self.total });
        }
        ledger.remaining -= 1;
        *ledger.taken.entry(step.to_owned()).or_insert(0) += 1;
        Ok(())
    }

    /// Retries left in the pool.
    pub fn remaining(&self) -> u32 {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner).remaining
    }

    /// Retries `step` has taken.
    pub fn taken(&self, step: &str) -> u32 {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner).taken.get(step).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BudgetPolicy, RetryNode, Threshold, plan_retry_budget};
    use std::sync::Arc;

    #[test]
    fn a_plan_caps_each_step_and_the_pool() {
        let nodes = vec![
            RetryNode {
                id: "search".into(),
                failure_rate: 0.01,
                attempt_cost_micros: 1055,
                latency_ms: 160.0,
                max_retries: 2,
                required: true,
            },
            RetryNode {
                id: "reply".into(),
                failure_rate: 0.02,
                attempt_cost_micros: 1088,
                latency_ms: 420.0,
                max_retries: 2,
                required: true,
            },
        ];
        let policy = BudgetPolicy { global_retry_budget: 3, consecutive_failure_threshold: Threshold::Infinite, half_open_after_calls: 3 };
        let plan = plan_retry_budget(&nodes, &policy).unwrap();
        let pool = RetryPool::from_plan(&plan);
        assert_eq!(pool.remaining(), 3);
        let reply_cap = plan.allocations[1].retries;
        for _ in 0..reply_cap {
            pool.take("reply").unwrap();
        }
        assert_eq!(pool.take("reply"), Err(RetryRefused::StepCapReached { step: "reply".into(), cap: reply_cap }));
        assert!(matches!(pool.take("unplanned"), Err(RetryRefused::StepCapReached { cap: 0, .. })));
        while pool.take("search").is_ok() {}
        assert_eq!(pool.remaining(), 0);
        assert!(pool.take("search").unwrap_err().to_string().starts_with("retry of search refused"));
    }

    #[test]
    fn concurrent_steps_never_overdraw_the_pool() {
        let pool = Arc::new(RetryPool::new(10));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let pool = pool.clone();
                std::thread::spawn(move || (0..50).filter(|_| pool.take(&format!("step{t}")).is_ok()).count())
            })
            .collect();
        let granted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(granted, 10);
        assert_eq!(pool.take("late"), Err(RetryRefused::PoolEmpty { step: "late".into(), total: 10 }));
    }
}
