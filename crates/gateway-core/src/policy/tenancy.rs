//! Multi-tenancy (SPEC §11): whether tenants share a scope's gates, tiers, and what a scope
//! does with a tenant it does not know.

use super::breaker::BreakerConfig;
use serde::{Deserialize, Serialize};

/// A tier: an overlay on the scope's policy for the tenants assigned to it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    /// Breaker keys that differ from the scope's.
    #[serde(default)]
    pub breaker: BreakerConfig,
    /// The tier's share when tenants wait for one provider account (SPEC §6: weighted fair
    /// queuing between tenants; default 1, 1..=1000).
    pub weight: Option<u32>,
}

/// What a `per_tenant` scope does with a tenant that has no tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownTenant {
    /// The scope's own policy.
    #[default]
    Default,
    /// Refuse the call, naming the tenant.
    Reject,
}

/// Whether tenants share a scope's gates and local state (SPEC §11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// One set of gates and local state for every tenant.
    #[default]
    Shared,
    /// Gates, memo, health EWMA and quota keyed by (tenant, source); the account limit stays
    /// the provider key's, and waiting calls get a lane per tenant, served by tier weight.
    PerTenant,
}

impl Isolation {
    /// The config value: `shared` or `per_tenant`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Isolation::Shared => "shared",
            Isolation::PerTenant => "per_tenant",
        }
    }
}
