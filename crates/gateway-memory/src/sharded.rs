//! A map from `GateKey` to state, split over independently locked shards so that operations on
//! different gates do not contend. Each operation holds one shard's lock for a few hundred
//! nanoseconds of pure state-machine work and never across an `.await`.

use gateway_core::ports::GateKey;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Shards per map: a power of two comfortably above the core count of a worker.
const SHARDS: usize = 64;

pub(crate) struct Sharded<T> {
    shards: Box<[Mutex<HashMap<GateKey, T>>]>,
    hasher: RandomState,
}

impl<T: Default + Clone> Sharded<T> {
    pub(crate) fn new() -> Self {
        Sharded { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(), hasher: RandomState::new() }
    }

    /// Runs `op` on the state of `key` (created on first use) under its shard's lock.
    pub(crate) fn with<R>(&self, key: &GateKey, op: impl FnOnce(&mut T) -> R) -> R {
        let mut shard = self.shard(key);
        match shard.get_mut(key) {
            Some(state) => op(state),
            None => op(shard.entry(key.clone()).or_default()),
        }
    }

    /// A copy of the state of `key`, if any.
    pub(crate) fn get(&self, key: &GateKey) -> Option<T> {
        self.shard(key).get(key).cloned()
    }

    fn shard(&self, key: &GateKey) -> MutexGuard<'_, HashMap<GateKey, T>> {
        let index = (self.hasher.hash_one(key) as usize) % self.shards.len();
        // The state machines never panic while a lock is held; if something else did, the
        // state is still consistent (every operation writes it whole), so recover it.
        self.shards[index].lock().unwrap_or_else(PoisonError::into_inner)
    }
}
