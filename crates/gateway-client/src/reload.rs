//! A configuration swapped in while calls run ([`GatewayClient::reload`]). The scopes and the
//! upstream a call uses are one [`Serving`] snapshot, taken when the call starts: a call in
//! flight (and a stream being read) finishes on the configuration it started with, whatever is
//! swapped in meanwhile.
//!
//! What carries over is keyed by a source's identity — its scope and name, base URL, account
//! and provider key: for a source whose identity is unchanged, its gate and quota (the
//! backend's, keyed by scope and name) and its health in every partition stay; live tenant
//! partitions are made again with their health, and a scope's line of waiting calls is kept. A
//! source removed, or changed past its identity, has its gates forgotten (the shared one and
//! each live tenant's). An account is its name — the key's digest unless the config names it —
//! so a changed key is a new account, and an account a reload keeps keeps its learned limit (the
//! backend's) and this process's pushback and 429 counts. An account no longer used is not
//! forgotten: calls still in flight on it release their leases, and its state expires an hour
//! past its longest lease.
//!
//! Calls in flight go on with their configuration, retries included: a retry at a source the
//! reload changed uses its gate, which the reload forgot, so for a moment an old call's failure
//! at the old address counts on the new gate.

use crate::accounts::Accounts;
use crate::partition::{Partition, Partitions};
use crate::{BuildError, GatewayClient};
use gateway_core::policy::{ScopePolicy, SourcePolicy};
use gateway_core::ports::{SourceKey, Upstream};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The scopes and upstream calls start on.
pub(crate) struct Serving {
    pub(crate) scopes: BTreeMap<String, Partitions>,
    pub(crate) upstream: Arc<dyn Upstream>,
}

/// What a reload changed, by `scope.source`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reloaded {
    /// Sources whose identity is unchanged: their state stays.
    pub kept: Vec<String>,
    /// New sources.
    pub added: Vec<String>,
    /// Sources whose base URL, account or key changed: they start afresh.
    pub changed: Vec<String>,
    /// Sources no longer configured: their state is released.
    pub removed: Vec<String>,
    /// State the backend could not forget now (it expires on its own), with why.
    pub not_forgotten: Vec<String>,
}

/// The identity of a source: what it calls and on whose account.
fn same(a: &SourcePolicy, b: &SourcePolicy) -> bool {
    a.base_url == b.base_url && a.account == b.account && a.api_key == b.api_key
}

/// `to` takes the health EWMA of each of `from`'s sources that is still the same source (by
/// name and [`same`] identity).
fn take_health(to: &Partition, from: &Partition) {
    let old = from.local().health.clone();
    let mut local = to.local();
    for (i, source) in to.policy.sources.iter().enumerate() {
        if let Some(j) = from.policy.sources.iter().position(|s| s.name == source.name && same(s, source)) {
            local.health[i] = old[j];
        }
    }
}

/// The scopes of `policies` checked whole: at least one, every fallback naming one of them.
pub(crate) fn checked(scopes: BTreeMap<String, Partitions>) -> Result<BTreeMap<String, Partitions>, BuildError> {
    if scopes.is_empty() {
        return Err(BuildError::NoScope);
    }
    for (name, partitions) in &scopes {
        if let Some(fallback) = partitions.policy().fallback.as_ref().filter(|f| !scopes.contains_key(*f)) {
            return Err(BuildError::UnknownFallback {
                scope: name.clone(),
                fallback: fallback.clone(),
                known: scopes.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        }
    }
    Ok(scopes)
}

impl GatewayClient {
    /// Swaps in `scopes`, keeping the upstream: validated whole before anything changes (an
    /// error changes nothing); calls in flight finish on the configuration they started with;
    /// the state of every source whose identity is unchanged stays (see the module). A scope
    /// new to the client runs on the builder's last preset, one it had keeps its own. One
    /// reload at a time.
    pub async fn reload(&self, scopes: Vec<ScopePolicy>) -> Result<Reloaded, BuildError> {
        self.swap(scopes, None).await
    }

    /// [`reload`](Self::reload) with a new upstream (e.g. an `HttpUpstream` of the new sources):
    /// calls that started before go on with the old one.
    pub async fn reload_with(&self, scopes: Vec<ScopePolicy>, upstream: Arc<dyn Upstream>) -> Result<Reloaded, BuildError> {
        self.swap(scopes, Some(upstream)).await
    }

    /// The reload, one at a time: `upstream`, or the one serving when the turn comes.
    async fn swap(&self, scopes: Vec<ScopePolicy>, upstream: Option<Arc<dyn Upstream>>) -> Result<Reloaded, BuildError> {
        let _one = self.reloading.lock().await;
        let old = self.serving.load_full();
        let upstream = upstream.unwrap_or_else(|| old.upstream.clone());
        let now = self.admission.clock.now();
        let mut reloaded = Reloaded::default();
        let mut forget_gates: Vec<SourceKey> = Vec::new();
        let mut built = BTreeMap::new();
        for policy in scopes {
            let name = policy.name.clone();
            let Some(before) = old.scopes.get(&name) else {
                reloaded.added.extend(policy.sources.iter().map(|s| format!("{name}.{}", s.name)));
                built.insert(name, Partitions::new(policy, self.preset, &self.pinned));
                continue;
            };
            for source in &policy.sources {
                let label = format!("{name}.{}", source.name);
                match before.policy().sources.iter().find(|s| s.name == source.name) {
                    Some(was) if same(was, source) => reloaded.kept.push(label),
                    Some(_) => reloaded.changed.push(label),
                    None => reloaded.added.push(label),
                }
            }
            for (i, was) in before.policy().sources.iter().enumerate() {
                let now_there = policy.sources.iter().find(|s| s.name == was.name);
                if now_there.is_none_or(|source| !same(was, source)) {
                    if now_there.is_none() {
                        reloaded.removed.push(format!("{name}.{}", was.name));
                    }
                    forget_gates.extend(before.all().iter().filter_map(|p| p.gates.get(i).map(|(key, _)| key.clone())));
                }
            }
            let partitions = Partitions::with_accounts(policy, before.preset(), &self.pinned, |policy| {
                // An account is its name: a key's digest, unless named (then every key named
                // so draws on it), so a changed key is another account unless the config says not.
                Accounts::carried(policy, &before.shared().accounts)
            });
            take_health(partitions.shared(), before.shared());
            for tenant_partition in before.all().iter().skip(1) {
                // A scope no longer isolating tenants hands every tenant its shared partition:
                // tenants' health is not the scope's.
                if let Some(tenant) = tenant_partition.tenant.as_deref()
                    && let Ok(partition) = partitions.partition(Some(tenant), now)
                    && partition.tenant.is_some()
                {
                    take_health(&partition, tenant_partition);
                }
            }
            built.insert(name, partitions);
        }
        for (name, before) in old.scopes.iter().filter(|(name, _)| !built.contains_key(*name)) {
            reloaded.removed.extend(before.policy().sources.iter().map(|s| format!("{name}.{}", s.name)));
            forget_gates.extend(before.all().iter().flat_map(|p| p.gates.iter().map(|(key, _)| key.clone())).collect::<Vec<_>>());
        }
        let scopes = checked(built)?;
        self.serving.store(Arc::new(Serving { scopes, upstream }));
        let holders = &self.admission.holders;
        for key in forget_gates {
            if let Err(e) = holders.gates.forget(&key).await {
                reloaded.not_forgotten.push(format!("gate {key}: {e}"));
            }
        }
        for list in [&mut reloaded.kept, &mut reloaded.added, &mut reloaded.changed, &mut reloaded.removed] {
            list.sort();
        }
        tracing::info!(
            kept = reloaded.kept.len(),
            added = ?reloaded.added,
            changed = ?reloaded.changed,
            removed = ?reloaded.removed,
            "configuration reloaded"
        );
        Ok(reloaded)
    }
}
