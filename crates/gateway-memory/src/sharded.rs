//! A map from `SourceKey` to state, split over independently locked shards so that operations on
//! different gates do not contend. Each operation holds one shard's lock for a few hundred
//! nanoseconds of pure state-machine work and never across an `.await`.
//!
//! Bounded: every entry carries the moment it may be dropped (its last use plus an idle time; for
//! gates, their last change beyond the current bucket's counts plus the Redis key TTL). A shard that has doubled since its last sweep (and holds at least
//! `SWEEP_MIN` entries) drops its expired entries, so churning keys (tenants that come and go)
//! cannot grow memory without bound, at an amortised O(1) per operation. Small maps are never
//! swept, so expiry is never observable where the Redis gates would still hold the key.
//!
//! Keys are hashed with foldhash (randomly seeded per map, hashbrown's default), not std's
//! SipHash: each operation hashes its key twice (the shard, then the shard's map), a proxied
//! call makes four, and SipHash's cost was ~3.6k instructions a call in the proxy bench's profile.

use foldhash::fast::RandomState;
use gateway_core::ports::SourceKey;
use gateway_core::time::Timestamp;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Shards per map: a power of two comfortably above the core count of a worker.
const SHARDS: usize = 64;

/// Entries a shard holds before it is ever swept.
pub(crate) const SWEEP_MIN: usize = 1024;

struct Entry<T> {
    state: T,
    /// When the entry may be dropped if nothing touches it again.
    expires: Timestamp,
}

struct Shard<T> {
    map: HashMap<SourceKey, Entry<T>, RandomState>,
    sweep_at: usize,
}

pub(crate) struct Sharded<T> {
    shards: Box<[Mutex<Shard<T>>]>,
    hasher: RandomState,
}

impl<T: Default + Clone> Sharded<T> {
    pub(crate) fn new() -> Self {
        Sharded {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard { map: HashMap::default(), sweep_at: SWEEP_MIN })).collect(),
            hasher: RandomState::default(),
        }
    }

    /// Runs `op` on the state of `key` (created on first use) under its shard's lock; the entry
    /// is kept at least until `keep_until`, and `droppable` says whether an expired one may go.
    pub(crate) fn with<R>(
        &self,
        key: &SourceKey,
        now: Timestamp,
        keep_until: Timestamp,
        droppable: impl Fn(&T) -> bool,
        op: impl FnOnce(&mut T) -> R,
    ) -> R {
        self.update(key, now, keep_until, droppable, |state| (op(state), true))
    }

    /// [`with`](Self::with), where `op` also says whether the entry is to be kept until
    /// `keep_until` (the gates: only an operation that changed the gate keeps it longer, as a
    /// Redis write refreshes the key's TTL).
    pub(crate) fn update<R>(
        &self,
        key: &SourceKey,
        now: Timestamp,
        keep_until: Timestamp,
        droppable: impl Fn(&T) -> bool,
        op: impl FnOnce(&mut T) -> (R, bool),
    ) -> R {
        let mut shard = self.shard(key);
        // The key is cloned only to insert it: a clone on every call would write the scope's
        // shared `Arc` counter from every shard.
        let result = match shard.map.get_mut(key) {
            Some(entry) => {
                let (result, keep) = op(&mut entry.state);
                if keep {
                    entry.expires = entry.expires.max(keep_until);
                }
                result
            }
            None => {
                let mut state = T::default();
                let (result, keep) = op(&mut state);
                shard.map.insert(key.clone(), Entry { state, expires: if keep { keep_until } else { now } });
                result
            }
        };
        if shard.map.len() >= shard.sweep_at {
            shard.map.retain(|_, entry| entry.expires > now || !droppable(&entry.state));
            shard.sweep_at = (shard.map.len() * 2).max(SWEEP_MIN);
        }
        result
    }

    /// Drops every entry: what a process restart does to it.
    pub(crate) fn clear(&self) {
        for shard in self.shards.iter() {
            shard.lock().unwrap_or_else(PoisonError::into_inner).map.clear();
        }
    }

    /// Drops the entry of `key`, if any.
    pub(crate) fn remove(&self, key: &SourceKey) {
        self.shard(key).map.remove(key);
    }

    /// A copy of the state of `key`, if any.
    pub(crate) fn get(&self, key: &SourceKey) -> Option<T> {
        self.shard(key).map.get(key).map(|entry| entry.state.clone())
    }

    /// Entries held now (tests of the bound).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).map.len()).sum()
    }

    fn shard(&self, key: &SourceKey) -> MutexGuard<'_, Shard<T>> {
        let index = (self.hasher.hash_one(key) as usize) % self.shards.len();
        // The state machines never panic while a lock is held; if something else did, the
        // state is still consistent (every operation writes it whole), so recover it.
        self.shards[index].lock().unwrap_or_else(PoisonError::into_inner)
    }
}
