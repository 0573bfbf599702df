//! Each source's series, found once: an attempt's record then counts on them directly, without
//! building its labels (five strings) or looking each family up again.

use crate::{AttemptLabels, FloatGauge, Metrics, SourceLabels, TokenLabels};
use gateway_core::outcome::OutcomeClass;
use gateway_core::ports::SourceKey;
use prometheus_client::metrics::counter::Counter;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

/// The sources whose series are kept found (past it, an attempt's record finds them again).
const KEPT: usize = 10_000;

/// The `direction` label of the token counters: the prompt's tokens, the completion's.
pub(crate) const DIRECTIONS: [&str; 2] = ["input", "output"];

/// One source's series, each made when first counted (so `/metrics` shows what happened, as
/// before: no outcome a source never had).
pub(crate) struct SourceSeries {
    labels: SourceLabels,
    attempts: [OnceLock<Counter>; OutcomeClass::ALL.len()],
    /// By [`DIRECTIONS`].
    tokens: [OnceLock<Counter>; 2],
    failures: OnceLock<Counter>,
    health: OnceLock<FloatGauge>,
    aimd_limit: OnceLock<FloatGauge>,
}

#[derive(Default)]
pub(crate) struct Found(RwLock<HashMap<SourceKey, Arc<SourceSeries>>>);

impl Found {
    /// `key`'s series, and whether they were first made now.
    pub(crate) fn of(&self, key: &SourceKey, labels: impl FnOnce() -> SourceLabels) -> (Arc<SourceSeries>, bool) {
        if let Some(found) = self.0.read().unwrap_or_else(PoisonError::into_inner).get(key) {
            return (found.clone(), false);
        }
        let made = Arc::new(SourceSeries {
            labels: labels(),
            attempts: Default::default(),
            tokens: Default::default(),
            failures: OnceLock::new(),
            health: OnceLock::new(),
            aimd_limit: OnceLock::new(),
        });
        let mut found = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(first) = found.get(key) {
            return (first.clone(), false);
        }
        if found.len() < KEPT {
            found.insert(key.clone(), made.clone());
        }
        (made, true)
    }
}

impl SourceSeries {
    pub(crate) fn labels(&self) -> &SourceLabels {
        &self.labels
    }

    pub(crate) fn attempt(&self, metrics: &Metrics, outcome: OutcomeClass) -> &Counter {
        // `OutcomeClass::ALL` is in the classes' order.
        self.attempts[outcome as usize].get_or_init(|| {
            let l = &self.labels;
            let series = AttemptLabels {
                scope: l.scope.clone(),
                tenant_id: l.tenant_id.clone(),
                source: l.source.clone(),
                outcome: outcome.as_str(),
            };
            metrics.attempts.get_or_create(&series).clone()
        })
    }

    /// The token counter of `DIRECTIONS[i]`.
    pub(crate) fn tokens(&self, metrics: &Metrics, i: usize) -> &Counter {
        let direction = DIRECTIONS[i];
        self.tokens[i].get_or_init(|| {
            let l = &self.labels;
            let series = TokenLabels { scope: l.scope.clone(), tenant_id: l.tenant_id.clone(), source: l.source.clone(), direction };
            metrics.tokens.get_or_create(&series).clone()
        })
    }

    pub(crate) fn failures(&self, metrics: &Metrics) -> &Counter {
        self.failures.get_or_init(|| metrics.circuit_failures.get_or_create(&self.labels).clone())
    }

    pub(crate) fn health(&self, metrics: &Metrics) -> &FloatGauge {
        self.health.get_or_init(|| metrics.health.get_or_create(&self.labels).clone())
    }

    pub(crate) fn aimd_limit(&self, metrics: &Metrics) -> &FloatGauge {
        self.aimd_limit.get_or_init(|| metrics.aimd_limit.get_or_create(&self.labels).clone())
    }
}
