//! What a status page reads: every source's gate and this process's view of it
//! ([`GatewayClient::status`]), and per scope its accounts, tenants and waiting calls
//! ([`GatewayClient::overview`]).

use crate::GatewayClient;
use crate::accounts::RateLimited;
use crate::partition::Partition;
use gateway_core::ports::{BackendError, SourceKey};
use std::collections::HashMap;
use std::sync::Arc;

/// One source of one scope partition, as [`GatewayClient::status`] sees it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SourceStatus {
    /// The scope.
    pub scope: String,
    /// The tenant partition (`None`: the shared one).
    pub tenant: Option<String>,
    /// The source.
    pub source: String,
    /// Its provider account (none when the scope is unpaced).
    pub account: Option<String>,
    /// Its gate's state.
    pub state: gateway_core::breaker::CircuitState,
    /// Its gate's epoch.
    pub epoch: u64,
    /// Its gate's reopen streak.
    pub streak: u32,
    /// Seconds until a certain retry moment (0 unless OPEN).
    pub retry_after_s: f64,
    /// Health EWMA in this process.
    pub health: f64,
    /// The learned AIMD limit of its provider account (shared by every process on a shared
    /// backend; none when unpaced).
    pub aimd_limit: Option<f64>,
    /// Attempts in flight from this process.
    pub inflight: u32,
}

/// One provider account of a scope, as [`GatewayClient::overview`] sees it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AccountStatus {
    /// The account.
    pub account: String,
    /// Its learned limit (every process's, on a shared backend).
    pub limit: f64,
    /// The most it may learn: the scope's concurrency.
    pub ceiling: f64,
    /// The in-flight count it refused (SPEC §4's `W`), while that is known.
    pub learned_ceiling: Option<u32>,
    /// Whether it holds there, probing slowly (a probe of it was refused).
    pub held: bool,
    /// Leases in flight (every process's, on a shared backend).
    pub inflight: u32,
    /// This process's 429s from it, as the pacer read them.
    pub rate_limited: RateLimited,
}

/// One tenant with a partition of its own, or calls waiting.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TenantStatus {
    /// The tenant (`None`: calls made for no tenant).
    pub tenant: Option<String>,
    /// Its tier weight in the line.
    pub weight: u32,
    /// Its calls waiting for capacity in this process.
    pub waiting: usize,
}

/// One scope: its accounts, tenants and the calls waiting in its line.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ScopeOverview {
    /// The scope.
    pub scope: String,
    /// Calls of this process waiting for capacity (a quota or an account's limit).
    pub waiting: usize,
    /// Its provider accounts (none when the scope is unpaced).
    pub accounts: Vec<AccountStatus>,
    /// Tenants with a partition of their own, and any other lane with calls waiting.
    pub tenants: Vec<TenantStatus>,
}

impl GatewayClient {
    /// Every source of every scope and live tenant partition now (with `only_tenant`, the shared
    /// partitions and that tenant's): its gate (state, epoch, reopen streak, retry_after, from the
    /// gate backend) and this process's view of it (health, AIMD limit, attempts in flight). For
    /// status pages (`/v1/gateway/sources`).
    pub async fn status(&self, only_tenant: Option<&str>) -> Result<Vec<SourceStatus>, BackendError> {
        let only = only_tenant.map(str::to_ascii_lowercase);
        // The local views are read first, and the partitions let go before the backend is asked:
        // a partition held across those awaits would count as busy and could not be evicted.
        let mut views = Vec::new();
        let serving = self.serving.load_full();
        for partitions in serving.scopes.values() {
            for partition in partitions.all() {
                let tenant = partition.gates.first().and_then(|(key, _)| key.tenant.as_deref());
                if only.is_some() && tenant.is_some() && tenant != only.as_deref() {
                    continue;
                }
                let local = partition.local();
                for (i, (key, params)) in partition.gates.iter().enumerate() {
                    let account = partition.pacer.map(|pacer| (partition.account(i).clone(), pacer));
                    views.push((key.clone(), params.clone(), local.health[i].value(), account, local.inflight[i]));
                }
            }
        }
        let holders = &self.admission.holders;
        let mut all = Vec::with_capacity(views.len());
        // Every partition of a scope shares its accounts: each is read once.
        let mut limits: HashMap<SourceKey, f64> = HashMap::new();
        for (key, params, health, account, inflight) in views {
            let gate = holders.gates.read(&key).await?;
            let retry_after = holders.gates.retry_after(std::slice::from_ref(&(key.clone(), params))).await?;
            let aimd_limit = match &account {
                Some((account, pacer)) => match limits.get(account) {
                    Some(&limit) => Some(limit),
                    None => {
                        let limit = holders.pacer.read(account, pacer).await?.limit;
                        limits.insert(account.clone(), limit);
                        Some(limit)
                    }
                },
                None => None,
            };
            all.push(SourceStatus {
                scope: key.scope.to_string(),
                tenant: key.tenant.as_deref().map(str::to_owned),
                source: key.source.to_string(),
                account: account.map(|(account, _)| account.source.to_string()),
                state: gate.state,
                epoch: gate.epoch,
                streak: gate.streak,
                retry_after_s: retry_after.as_secs_f64(),
                health,
                aimd_limit,
                inflight,
            });
        }
        Ok(all)
    }

    /// Each scope's accounts (learned limit against the ceiling, the refused ceiling, leases in
    /// flight, this process's 429s as noise or our own), its tenants by weight, and the calls
    /// waiting in its line, per tenant. With `only_tenant`, other tenants are left out.
    pub async fn overview(&self, only_tenant: Option<&str>) -> Result<Vec<ScopeOverview>, BackendError> {
        let only = only_tenant.map(str::to_ascii_lowercase);
        let shown = |tenant: Option<&str>| only.is_none() || tenant.is_none() || tenant == only.as_deref();
        let serving = self.serving.load_full();
        let mut scopes = Vec::with_capacity(serving.scopes.len());
        for (name, partitions) in &serving.scopes {
            let shared: &Arc<Partition> = partitions.shared();
            let mut waiting: HashMap<Option<String>, usize> = shared
                .turns()
                .waiting()
                .into_iter()
                .filter(|(tenant, _)| shown(tenant.as_deref()))
                .map(|(tenant, n)| (tenant.as_deref().map(str::to_owned), n))
                .collect();
            let total = waiting.values().sum();
            let mut tenants: Vec<TenantStatus> = partitions
                .all()
                .iter()
                .filter_map(|p| p.tenant.as_deref().filter(|t| shown(Some(t))).map(|t| (Some(t.to_owned()), p.weight)))
                .map(|(tenant, weight)| {
                    let waiting = waiting.remove(&tenant).unwrap_or(0);
                    TenantStatus { tenant, weight, waiting }
                })
                .collect();
            // Lanes waiting without a partition of their own (calls for no tenant, or for a tenant
            // of a shared scope).
            tenants.extend(waiting.into_iter().map(|(tenant, waiting)| TenantStatus { tenant, weight: 1, waiting }));
            tenants.sort_by(|a, b| a.tenant.cmp(&b.tenant));
            let mut accounts = Vec::new();
            if let Some(pacer) = shared.pacer {
                for (index, key) in shared.accounts.keys.iter().enumerate() {
                    let rate_limited = shared.accounts.local(index).rate_limited;
                    let reading = self.admission.holders.pacer.read(key, &pacer).await?;
                    accounts.push(AccountStatus {
                        account: key.source.to_string(),
                        limit: reading.limit,
                        ceiling: pacer.top(),
                        learned_ceiling: reading.learned.map(|w| w.at),
                        held: reading.learned.is_some_and(|w| w.held),
                        inflight: reading.inflight,
                        rate_limited,
                    });
                }
            }
            scopes.push(ScopeOverview { scope: name.clone(), waiting: total, accounts, tenants });
        }
        Ok(scopes)
    }
}
