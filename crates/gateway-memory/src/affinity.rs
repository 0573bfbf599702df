//! [`MemoryAffinity`]: the affinity map of one process (`AffinityMap`): which source holds the
//! state an id names, for the time it was remembered for, and at most `max_ids` ids, the
//! oldest remembered forgotten first. A string that cannot be an id (`affinity::check_id`) is
//! refused, as the Redis map refuses it.

use async_trait::async_trait;
use gateway_core::affinity::checked_key as checked;
use gateway_core::ports::{Affinity, AffinityMap, BackendError};
use gateway_core::time::{Clock, Timestamp};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The ids a map keeps by default: about 50 MiB at most (`cargo bench -p gateway-memory --bench
/// affinity`: 254 bytes an id).
pub const MAX_IDS: usize = 200_000;

struct Entry {
    at: Affinity,
    expires: Timestamp,
    /// When it was (last) remembered, in the map's count of remembrances: its place in `order`.
    stamp: u64,
}

#[derive(Default)]
struct Map {
    ids: HashMap<Arc<str>, Entry>,
    /// Ids in the order they were remembered, each with its stamp then; an id remembered again
    /// leaves a stale place behind, skipped when it comes up.
    order: VecDeque<(Arc<str>, u64)>,
    stamps: u64,
}

impl Map {
    /// Forgets the oldest ids until at most `max` remain; drops stale places as they come up.
    fn trim(&mut self, max: usize) {
        while self.ids.len() > max {
            let Some((id, stamp)) = self.order.pop_front() else { return };
            if self.ids.get(&id).is_some_and(|e| e.stamp == stamp) {
                self.ids.remove(&id);
            }
        }
        // Stale places never outnumber the live ones: rebuild the order when they would.
        if self.order.len() > 2 * self.ids.len().max(16) {
            let mut live: Vec<(Arc<str>, u64)> = self.ids.iter().map(|(id, e)| (id.clone(), e.stamp)).collect();
            live.sort_by_key(|(_, stamp)| *stamp);
            self.order = live.into();
        }
    }
}

/// The affinity map of one process: `max_ids` at most, each for its time to live.
pub struct MemoryAffinity {
    map: Mutex<Map>,
    clock: Arc<dyn Clock>,
    max_ids: usize,
}

impl MemoryAffinity {
    /// A map on `clock` keeping at most `max_ids` ids (at least one).
    pub fn new(clock: Arc<dyn Clock>, max_ids: usize) -> Self {
        MemoryAffinity { map: Mutex::new(Map::default()), clock, max_ids: max_ids.max(1) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ids it holds now (expired ones included until they are looked up or pushed out).
    pub fn len(&self) -> usize {
        self.lock().ids.len()
    }

    /// Whether it holds no id.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The places its order keeps (live and stale), for tests of its bound.
    pub fn places(&self) -> usize {
        self.lock().order.len()
    }
}

#[async_trait]
impl AffinityMap for MemoryAffinity {
    async fn remember(&self, id: &str, at: &Affinity, ttl: Duration) -> Result<(), BackendError> {
        let id = checked(id)?;
        let expires = self.clock.now().saturating_add(ttl);
        let mut map = self.lock();
        map.stamps += 1;
        let stamp = map.stamps;
        let id: Arc<str> = match map.ids.get_key_value(id) {
            Some((known, _)) => known.clone(),
            None => Arc::from(id),
        };
        map.ids.insert(id.clone(), Entry { at: at.clone(), expires, stamp });
        map.order.push_back((id, stamp));
        map.trim(self.max_ids);
        Ok(())
    }

    async fn find(&self, id: &str) -> Result<Option<Affinity>, BackendError> {
        let id = checked(id)?;
        let now = self.clock.now();
        let mut map = self.lock();
        match map.ids.get(id) {
            Some(entry) if entry.expires > now => Ok(Some(entry.at.clone())),
            Some(_) => {
                map.ids.remove(id);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn forget(&self, id: &str) -> Result<(), BackendError> {
        self.lock().ids.remove(checked(id)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::time::ManualClock;

    fn at(source: &str) -> Affinity {
        Affinity { scope: "chat".into(), source: source.into() }
    }

    #[tokio::test]
    async fn an_id_is_found_until_it_expires_or_is_forgotten() {
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(0)));
        let map = MemoryAffinity::new(clock.clone(), 10);
        map.remember("resp_1", &at("s1"), Duration::from_secs(60)).await.unwrap();
        map.remember("resp_2", &at("s2"), Duration::from_secs(120)).await.unwrap();
        assert_eq!(map.find("resp_1").await.unwrap(), Some(at("s1")));
        assert_eq!(map.find("resp_3").await.unwrap(), None);
        clock.advance(Duration::from_secs(60));
        assert_eq!(map.find("resp_1").await.unwrap(), None, "expired at its time to live");
        assert_eq!(map.len(), 1, "an expired id met is dropped");
        map.forget("resp_2").await.unwrap();
        assert_eq!(map.find("resp_2").await.unwrap(), None);
    }

    #[tokio::test]
    async fn past_its_bound_the_oldest_remembered_goes_first() {
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(0)));
        let map = MemoryAffinity::new(clock, 3);
        let day = Duration::from_secs(86_400);
        for id in ["a", "b", "c"] {
            map.remember(id, &at("s1"), day).await.unwrap();
        }
        map.remember("a", &at("s2"), day).await.unwrap();
        map.remember("d", &at("s1"), day).await.unwrap();
        assert_eq!(map.find("b").await.unwrap(), None, "b was the oldest remembered");
        assert_eq!(map.find("a").await.unwrap(), Some(at("s2")), "a was remembered again, and moved");
        assert_eq!((map.len(), map.find("d").await.unwrap().is_some()), (3, true));
    }

    #[tokio::test]
    async fn a_million_ids_churned_through_stay_within_the_bound() {
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(0)));
        let map = MemoryAffinity::new(clock, 1000);
        let day = Duration::from_secs(86_400);
        for i in 0..1_000_000u32 {
            // Every tenth is remembered twice: stale places must not pile up either.
            map.remember(&format!("resp_{i}"), &at("s1"), day).await.unwrap();
            if i % 10 == 0 {
                map.remember(&format!("resp_{i}"), &at("s1"), day).await.unwrap();
            }
        }
        assert_eq!(map.len(), 1000);
        assert!(map.places() <= 2 * 1000 + 1, "{} places for 1000 ids", map.places());
        assert!(map.find("resp_999999").await.unwrap().is_some());
        assert!(map.find("resp_0").await.unwrap().is_none());
    }
}
