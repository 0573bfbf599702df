//! The line on tenants sharing one account (SPEC §6): a scenario whose tenants wait for one
//! provider account is run with one tenant's load alone, then with every tenant's, and that
//! tenant's p95 wait is compared. With weighted fair queuing a gold tenant's wait barely moves
//! under a bronze flood; first come, first served would queue it behind the flood.

use super::{Scenario, ScenarioError};
use serde::Deserialize;

/// A `[flood]` table: which scenario, which tenant, and how much worse its wait may get.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flood {
    /// The scenario (a built-in name or a file) whose tenants share one account.
    pub scenario: String,
    /// The tenant whose wait is compared: alone, then beside the other tenants' load.
    pub tenant: String,
    /// The most its p95 wait beside the others may be, as a multiple of its p95 alone.
    pub max_ratio: f64,
}

impl Flood {
    /// The flood's scenario, loaded and checked: it names the tenant, and the ratio is a
    /// number of at least 1.
    pub fn load(&self) -> Result<Scenario, ScenarioError> {
        let invalid = |detail: String| ScenarioError::Invalid { name: self.scenario.clone(), detail };
        if !(self.max_ratio.is_finite() && self.max_ratio >= 1.0) {
            return Err(invalid(format!("flood.max_ratio: {} is not a number of at least 1", self.max_ratio)));
        }
        let scenario = Scenario::load(&self.scenario)?;
        if !scenario.tenants.contains_key(&self.tenant) || scenario.tenants.len() < 2 {
            let known = scenario.tenants.keys().cloned().collect::<Vec<_>>().join(", ");
            return Err(invalid(format!("flood.tenant: {:?} is not one of two or more tenants (tenants: {known})", self.tenant)));
        }
        Ok(scenario)
    }
}

impl Scenario {
    /// This scenario with `tenant`'s load alone: its share of the calls and of the workers, as
    /// it has beside the others, and no other tenant (`None`: no such tenant).
    pub fn alone(&self, tenant: &str) -> Option<Scenario> {
        let mut own = self.tenants.get(tenant)?.clone();
        let part = |n: u32| ((f64::from(n) * own.share).round() as u32).max(1);
        let mut alone = self.clone();
        (alone.calls, alone.workers) = (part(self.calls), part(self.workers));
        own.share = 1.0;
        alone.tenants = [(tenant.to_owned(), own)].into();
        alone.flood = None;
        Some(alone)
    }
}
