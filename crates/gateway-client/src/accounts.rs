//! A scope's provider accounts, one for every tenant (SPEC §4: a provider limits per key):
//! their keys, what this process knows of them (429 pushback, the learned limit last heard, the
//! 429s as the pacer read them), and the scope's line of calls waiting for capacity.

use gateway_core::policy::ScopePolicy;
use gateway_core::ports::SourceKey;
use gateway_core::time::Timestamp;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What this process knows of one account, shared by the scope's partitions and carried over
/// by a reload while the account stays, so that calls still running on the old configuration
/// keep writing where the new one reads.
#[derive(Default)]
pub(crate) struct AccountLocal {
    /// Until when a 429's Retry-After asked everyone to stay away.
    pub(crate) pushed_back: Timestamp,
    /// Its learned AIMD limit as the last release this process saw answered.
    pub(crate) aimd_limit: Option<f64>,
    /// The 429s of this process's attempts as the pacer read them: noise that left the limit as
    /// it was (the provider's other traffic), and those that cut it or held it at a refused
    /// ceiling (our own load).
    pub(crate) rate_limited: RateLimited,
}

/// An account's 429s, as its pacer read them (SPEC §4: a lone 429 is noise, a burst or a refused
/// probe is our own load).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RateLimited {
    /// Read as noise: the limit stayed where it was.
    pub background: u64,
    /// Read as our own load: the limit went down.
    pub own: u64,
}

/// A scope's provider accounts, one for every tenant: their keys, what this process knows of
/// them, and the line of the scope's calls waiting for capacity.
pub(crate) struct Accounts {
    /// The accounts (`SourceKey::source` is the account's name; no tenant).
    pub(crate) keys: Vec<SourceKey>,
    /// The account of each source, by index into `keys`.
    pub(crate) of: Vec<usize>,
    /// Calls waiting for capacity: first come, first served within a tenant, by tier weight
    /// between tenants.
    pub(crate) turns: Arc<crate::turns::Turns>,
    /// What this process knows of each account, by index into `keys`.
    local: Vec<Arc<Mutex<AccountLocal>>>,
}

impl Accounts {
    pub(crate) fn new(policy: &ScopePolicy) -> Self {
        let mut keys: Vec<SourceKey> = Vec::new();
        let of = policy
            .sources
            .iter()
            .map(|source| match keys.iter().position(|a| a.source.as_ref() == source.account) {
                Some(at) => at,
                None => {
                    keys.push(SourceKey::new(policy.name.as_str(), source.account.as_str()));
                    keys.len() - 1
                }
            })
            .collect();
        let local = keys.iter().map(|_| Arc::default()).collect();
        Accounts { keys, of, turns: Arc::default(), local }
    }

    /// The accounts of `policy`, carried over from `old` (a reload): the scope's line of waiting
    /// calls, and what this process knows of each account `old` had too (the same cell, which
    /// calls on the old configuration go on writing).
    pub(crate) fn carried(policy: &ScopePolicy, old: &Accounts) -> Self {
        let mut accounts = Accounts::new(policy);
        accounts.turns = old.turns.clone();
        for (key, local) in accounts.keys.iter().zip(&mut accounts.local) {
            if let Some(j) = old.keys.iter().position(|k| k.source == key.source) {
                *local = old.local[j].clone();
            }
        }
        accounts
    }

    /// What this process knows of the account at `index` into `keys`. The lock is held for a
    /// few field updates, never across an await.
    pub(crate) fn local(&self, index: usize) -> MutexGuard<'_, AccountLocal> {
        self.local[index].lock().unwrap_or_else(PoisonError::into_inner)
    }
}
