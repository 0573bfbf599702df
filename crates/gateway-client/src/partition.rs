//! One scope at run time, in partitions. A [`Partition`] is the shared part of a scope, or one
//! tenant's: its policy, the rules its calls run on and its pacer, the source keys and
//! parameters of its sources, its selector, and the process-local state every call of the
//! partition shares (memo, health EWMA, in-flight counts, progress) under one short,
//! never-awaited lock. [`Partitions`] holds a scope's partitions: the shared one, and with
//! `isolation = per_tenant` one per tenant, created lazily in a sharded map, bounded by
//! `max_tenants`, and dropped after `tenant_idle` without calls (SPEC §11); a tenant with a tier
//! gets the scope's policy with the tier's breaker.
//!
//! A provider limits per key, not per tenant (SPEC §4): every partition of a scope shares its
//! [`Accounts`] (`accounts.rs`): the accounts' keys (no tenant in them, so the pacer's learned
//! limit, in-flight count and back-off are one per account), their 429 pushback, and the line
//! of calls waiting for capacity.

use crate::accounts::Accounts;
use crate::error::TenantRefusal;
use crate::preset::Preset;
use gateway_core::aimd::PacerParams;
use gateway_core::breaker::GateParams;
use gateway_core::call::CallRules;
use gateway_core::health::Ewma;
use gateway_core::memo::Memo;
use gateway_core::outcome::OutcomeTable;
use gateway_core::policy::{Isolation, ScopePolicy, UnknownTenant};
use gateway_core::ports::{SourceKey, is_key_part};
use gateway_core::select::{Selector, SourceView};
use gateway_core::stall::ScopeProgress;
use gateway_core::time::Timestamp;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Process-local state shared by a partition's calls.
pub(crate) struct Local {
    pub(crate) memo: Memo,
    pub(crate) health: Vec<Ewma>,
    /// Attempts in flight from this process, per source (what the selectors weigh).
    pub(crate) inflight: Vec<u32>,
    pub(crate) progress: ScopeProgress,
}

pub(crate) struct Partition {
    pub(crate) policy: Arc<ScopePolicy>,
    /// The rules its calls run on.
    pub(crate) rules: CallRules,
    pub(crate) gates: Vec<(SourceKey, GateParams)>,
    /// The scope's provider accounts, shared with its other partitions.
    pub(crate) accounts: Arc<Accounts>,
    /// The pacer of its accounts (`None`: unpaced).
    pub(crate) pacer: Option<PacerParams>,
    pub(crate) selector: Selector,
    /// Its tenant (`None`: the shared partition), its lane in the scope's line.
    pub(crate) tenant: crate::turns::Tenant,
    /// Its tenant's tier weight in the line (1 without a tier).
    pub(crate) weight: u32,
    local: Mutex<Local>,
}

impl Partition {
    /// The partition of `tenant` (`None`: the shared one), its calls running on `outcomes`,
    /// the scope's `accounts` paced by `pacer`.
    pub(crate) fn new(
        policy: Arc<ScopePolicy>,
        outcomes: OutcomeTable,
        accounts: Arc<Accounts>,
        pacer: Option<PacerParams>,
        tenant: Option<&Arc<str>>,
    ) -> Self {
        let n = policy.sources.len();
        let gates = (0..n)
            .filter_map(|i| {
                let params = policy.gate_params(i)?;
                let key = SourceKey::new(policy.name.as_str(), policy.sources[i].name.as_str());
                Some((if let Some(tenant) = tenant { key.with_tenant(tenant.clone()) } else { key }, params))
            })
            .collect();
        let local = Local { memo: Memo::new(n), health: vec![Ewma::new(); n], inflight: vec![0; n], progress: ScopeProgress::new() };
        Partition {
            selector: Selector::new(policy.selector),
            rules: CallRules::new(&policy, outcomes),
            weight: policy.tenant_weight(tenant.map(|t| &**t)),
            pacer,
            policy,
            gates,
            accounts,
            tenant: tenant.cloned(),
            local: Mutex::new(local),
        }
    }

    /// The shared local state. The lock is held for a few field updates, never across an await.
    pub(crate) fn local(&self) -> MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn source_name(&self, source: usize) -> &str {
        self.policy.sources.get(source).map_or("?", |s| s.name.as_str())
    }

    /// What the selector sees of each source now.
    pub(crate) fn views(&self) -> Vec<SourceView> {
        let local = self.local();
        local.health.iter().zip(&local.inflight).map(|(h, i)| SourceView { health: h.value(), inflight: *i }).collect()
    }

    /// Attempts of this process in flight (zero once every call has ended).
    pub(crate) fn inflight(&self) -> u32 {
        self.local().inflight.iter().sum()
    }

    /// The account of `source`.
    pub(crate) fn account(&self, source: usize) -> &SourceKey {
        &self.accounts.keys[self.accounts.of[source]]
    }

    /// Until when a 429 asked everyone to keep away from `source`'s account.
    pub(crate) fn pushed_back(&self, source: usize) -> Timestamp {
        self.accounts.local(self.accounts.of[source]).pushed_back
    }

    /// A 429 asked everyone, every tenant, to keep away from `source`'s account until `until`.
    pub(crate) fn note_pushback(&self, source: usize, until: Timestamp) {
        let mut local = self.accounts.local(self.accounts.of[source]);
        local.pushed_back = local.pushed_back.max(until);
    }

    /// The learned limit of `source`'s account as this process last heard it.
    pub(crate) fn aimd_limit(&self, source: usize) -> Option<f64> {
        self.accounts.local(self.accounts.of[source]).aimd_limit
    }

    /// A release of an attempt that ended `rate_limited` (a 429) or not answered `limit` for
    /// `source`'s account. A 429 that left the limit where this process last heard it (or at a
    /// fresh account's) was read as noise; one that lowered it, as our own load.
    pub(crate) fn heard_aimd_limit(&self, source: usize, limit: f64, rate_limited: bool) {
        let mut local = self.accounts.local(self.accounts.of[source]);
        if rate_limited {
            let before = local.aimd_limit.or_else(|| self.pacer.map(|p| p.initial_limit())).unwrap_or(limit);
            if limit < before {
                local.rate_limited.own += 1;
            } else {
                local.rate_limited.background += 1;
            }
        }
        local.aimd_limit = Some(limit);
    }

    /// The scope's line of calls waiting for capacity.
    pub(crate) fn turns(&self) -> &Arc<crate::turns::Turns> {
        &self.accounts.turns
    }
}

const SHARDS: usize = 16;

struct TenantEntry {
    partition: Arc<Partition>,
    last_used: Timestamp,
    /// Always admitted, never evicted, not counted against `max_tenants`.
    pinned: bool,
}

impl TenantEntry {
    /// No call holds the partition (the map's own reference is the only one).
    fn idle(&self) -> bool {
        Arc::strong_count(&self.partition) == 1
    }
}

type Shard = HashMap<Arc<str>, TenantEntry>;

/// A scope's partitions.
pub(crate) struct Partitions {
    /// The scope's name, as telemetry carries it.
    name: Arc<str>,
    shared: Arc<Partition>,
    /// The scope's policy with each tier's breaker, by tier.
    tiers: HashMap<String, Arc<ScopePolicy>>,
    per_tenant: bool,
    /// Tenants always admitted: those the scope assigns a tier, and those the client was told of
    /// (a proxy's key-bound tenants).
    pinned: HashSet<String>,
    shards: Vec<Mutex<Shard>>,
    /// Partitions of unpinned tenants: at most `max_tenants`.
    tenants: AtomicUsize,
    /// Partitions of pinned tenants.
    pinned_live: AtomicUsize,
    hasher: std::collections::hash_map::RandomState,
    /// The preset its partitions run on (a reload keeps it).
    preset: Preset,
}

/// A tenant name as the gateway keys it: 1 to 64 characters of `[A-Za-z0-9_-]`, lower-cased
/// (so `Acme` and `acme` are one tenant everywhere: gates, quota, tiers, telemetry).
pub fn tenant_name(raw: &str) -> Result<String, TenantRefusal> {
    if raw.len() > 64 || !is_key_part(raw) {
        return Err(TenantRefusal::Malformed);
    }
    Ok(raw.to_ascii_lowercase())
}

impl Partitions {
    /// The partitions of `policy` as configured, each (the shared one and every tier's)
    /// with `preset` applied on top; `pinned` tenants (names as [`tenant_name`] gives them) are
    /// always admitted, as are those the scope assigns a tier.
    pub(crate) fn new(policy: ScopePolicy, preset: Preset, pinned: &[String]) -> Self {
        Self::with_accounts(policy, preset, pinned, Accounts::new)
    }

    /// [`new`](Self::new), its [`Accounts`] made by `accounts` from the policy (a reload carries
    /// the old ones' line and local knowledge over).
    pub(crate) fn with_accounts(
        mut policy: ScopePolicy,
        preset: Preset,
        pinned: &[String],
        accounts: impl FnOnce(&ScopePolicy) -> Accounts,
    ) -> Self {
        let per_tenant = policy.isolation == Isolation::PerTenant;
        let tiers = policy
            .tiers
            .iter()
            .map(|(tier, breaker)| {
                let mut tiered = ScopePolicy { breaker: breaker.clone(), ..policy.clone() };
                preset.apply(&mut tiered);
                (tier.clone(), Arc::new(tiered))
            })
            .collect();
        let pinned = policy.tenant_tiers.keys().chain(pinned).cloned().collect();
        let outcomes = preset.apply(&mut policy);
        let pacer = preset.pacer(&policy);
        let accounts = Arc::new(accounts(&policy));
        Partitions {
            preset,
            name: Arc::from(policy.name.as_str()),
            tiers,
            shared: Arc::new(Partition::new(Arc::new(policy), outcomes, accounts, pacer, None)),
            per_tenant,
            pinned,
            shards: (0..if per_tenant { SHARDS } else { 0 }).map(|_| Mutex::default()).collect(),
            tenants: AtomicUsize::new(0),
            pinned_live: AtomicUsize::new(0),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub(crate) fn preset(&self) -> Preset {
        self.preset
    }

    pub(crate) fn policy(&self) -> &ScopePolicy {
        &self.shared.policy
    }

    /// The shared partition.
    pub(crate) fn shared(&self) -> &Arc<Partition> {
        &self.shared
    }

    fn shard(&self, tenant: &str) -> MutexGuard<'_, Shard> {
        let index = usize::try_from(self.hasher.hash_one(tenant) % SHARDS as u64).unwrap_or(0);
        lock(&self.shards[index])
    }

    /// The partition a call of `tenant` (a [`tenant_name`]) runs in: the shared one unless the
    /// scope isolates tenants and the call names one. A scope that rejects unknown tenants
    /// also refuses calls that name none.
    ///
    /// A new tenant takes a free place under `max_tenants`; at the cap, the least recently used
    /// idle partitions make room (their gates live on in the backend). A tenant is refused only
    /// when every partition at the cap has a call in flight. Pinned tenants are always admitted.
    pub(crate) fn partition(&self, tenant: Option<&str>, now: Timestamp) -> Result<Arc<Partition>, TenantRefusal> {
        let rejects = self.per_tenant && self.policy().unknown_tenant == UnknownTenant::Reject;
        let Some(tenant) = tenant.filter(|_| self.per_tenant) else {
            return if rejects { Err(TenantRefusal::Missing) } else { Ok(self.shared.clone()) };
        };
        let policy = match self.policy().tenant_tiers.get(tenant).and_then(|tier| self.tiers.get(tier)) {
            Some(tiered) => tiered.clone(),
            None if rejects => return Err(TenantRefusal::Unknown),
            None => self.shared.policy.clone(),
        };
        let pinned = self.pinned.contains(tenant);
        // At the cap, idle partitions make room; concurrent newcomers may take the room made, so
        // the scan is repeated while it finds idle partitions (a bounded number of times).
        for round in 0..16 {
            if round > 0 && self.evict_least_recent() == 0 {
                break;
            }
            let mut shard = self.shard(tenant);
            if let Some(entry) = shard.get_mut(tenant) {
                entry.last_used = entry.last_used.max(now);
                return Ok(entry.partition.clone());
            }
            self.evict_idle(&mut shard, now);
            // The place is taken before the insert, so concurrent first calls cannot pass the cap.
            let max = self.policy().max_tenants as usize;
            let placed = pinned || self.tenants.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).is_ok();
            if placed {
                let name: Arc<str> = Arc::from(tenant);
                let partition = Arc::new(Partition::new(
                    policy.clone(),
                    self.shared.rules.outcomes,
                    self.shared.accounts.clone(),
                    self.shared.pacer,
                    Some(&name),
                ));
                shard.insert(name, TenantEntry { partition: partition.clone(), last_used: now, pinned });
                if pinned {
                    self.pinned_live.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(partition);
            }
        }
        Err(TenantRefusal::Full)
    }

    /// Drops the partitions of this shard's tenants idle for `tenant_idle` with no call running.
    fn evict_idle(&self, shard: &mut Shard, now: Timestamp) {
        let idle = self.policy().tenant_idle;
        let mut dropped = 0;
        shard.retain(|_, e| {
            let keep = e.pinned || !e.idle() || now.saturating_since(e.last_used) < idle;
            dropped += usize::from(!keep);
            keep
        });
        self.tenants.fetch_sub(dropped, Ordering::AcqRel);
    }

    /// At the cap: drops the least recently used idle partitions, a 64th of the cap at a time
    /// (at least one), so a stream of new tenants pays one scan per batch, not per tenant.
    /// Returns how many idle partitions the scan found (0: every partition has a call).
    fn evict_least_recent(&self) -> usize {
        let mut idle: Vec<(Timestamp, usize, Arc<str>)> = Vec::new();
        for (index, shard) in self.shards.iter().enumerate() {
            let shard = lock(shard);
            idle.extend(shard.iter().filter(|(_, e)| !e.pinned && e.idle()).map(|(name, e)| (e.last_used, index, name.clone())));
        }
        let found = idle.len();
        let batch = (self.policy().max_tenants as usize / 64).max(1).min(found);
        if batch == 0 {
            return 0;
        }
        idle.select_nth_unstable_by_key(batch - 1, |(used, _, _)| *used);
        for (used, index, name) in idle.into_iter().take(batch) {
            let mut shard = lock(&self.shards[index]);
            // Still idle and unused since the scan (it may have had a call meanwhile).
            if shard.get(&name).is_some_and(|e| e.idle() && e.last_used <= used) {
                shard.remove(&name);
                self.tenants.fetch_sub(1, Ordering::AcqRel);
            }
        }
        found
    }

    /// Every partition now.
    pub(crate) fn all(&self) -> Vec<Arc<Partition>> {
        let mut all = vec![self.shared.clone()];
        for shard in &self.shards {
            all.extend(lock(shard).values().map(|e| e.partition.clone()));
        }
        all
    }

    /// Tenants with a partition of their own (pinned ones included).
    pub(crate) fn tenants(&self) -> usize {
        self.tenants.load(Ordering::Relaxed) + self.pinned_live.load(Ordering::Relaxed)
    }
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::policy::ScopeConfig;
    use std::sync::Barrier;

    fn partitions(max_tenants: usize, tenant_idle_s: u64) -> Partitions {
        let config: ScopeConfig = serde_json::from_value(serde_json::json!({
            "isolation": "per_tenant",
            "max_tenants": max_tenants,
            "tenant_idle_s": tenant_idle_s,
            "breaker": {"fail_threshold": 5, "cooldown_s": 60},
            "sources": {"s1": {}},
        }))
        .unwrap();
        Partitions::new(config.resolve("chat").unwrap(), Preset::Default, &[])
    }

    /// The tenants with a partition in the map.
    fn kept(partitions: &Partitions) -> usize {
        partitions.shards.iter().map(|shard| lock(shard).len()).sum()
    }

    #[test]
    fn concurrent_first_calls_never_pass_the_tenant_cap() {
        const THREADS: usize = 64;
        const CAP: usize = 4;
        let partitions = partitions(CAP, 60);
        let barrier = Barrier::new(THREADS);
        let mut now = Timestamp::default();
        for round in 0..300 {
            // Every other round the last round's tenants have been idle past tenant_idle_s (the
            // shard sweep drops them); otherwise they are idle but recent (the LRU scan does).
            now = now.saturating_add(std::time::Duration::from_secs(if round % 2 == 0 { 61 } else { 1 }));
            let served = std::thread::scope(|s| {
                let calls: Vec<_> = (0..THREADS)
                    .map(|i| {
                        let (partitions, barrier) = (&partitions, &barrier);
                        s.spawn(move || {
                            barrier.wait();
                            let held = partitions.partition(Some(&format!("r{round}-t{i}")), now);
                            // Every admitted tenant holds its partition (a call in flight) until
                            // all have asked, so none of this round's can make room.
                            barrier.wait();
                            held.is_ok()
                        })
                    })
                    .collect();
                calls.into_iter().map(|call| call.join().unwrap()).filter(|admitted| *admitted).count()
            });
            assert_eq!(served, CAP, "round {round}: the tenants admitted at once");
            assert_eq!((kept(&partitions), partitions.tenants()), (CAP, CAP), "round {round}: the tenants kept and counted");
        }
    }
}
