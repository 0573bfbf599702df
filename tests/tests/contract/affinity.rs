//! The affinity map (which source holds the state an id names) is one map for every process:
//! what one remembers another finds, a later remembrance moves it, a forgotten id is gone, an id
//! expires after its time to live, and a string that cannot be an id is refused, never stored.

#![allow(clippy::unwrap_used)]

use crate::support::Backend;
use gateway_core::ports::{Affinity, BackendError};
use std::time::Duration;

pub async fn affinity_is_one_map_for_every_process(b: Backend) {
    let at = |source: &str| Affinity { scope: b.scope.as_str().into(), source: source.into() };
    let other = b.second_affinity().await;
    let id = format!("resp_{}_1", b.scope);
    let minute = Duration::from_secs(60);
    assert_eq!(b.affinity.find(&id).await.unwrap(), None);
    b.affinity.remember(&id, &at("s1"), minute).await.unwrap();
    assert_eq!(other.find(&id).await.unwrap(), Some(at("s1")), "another process finds it");
    other.remember(&id, &at("s2"), minute).await.unwrap();
    assert_eq!(b.affinity.find(&id).await.unwrap(), Some(at("s2")), "remembered again, it moved");
    other.forget(&id).await.unwrap();
    assert_eq!(b.affinity.find(&id).await.unwrap(), None, "forgotten everywhere");
    // Its time to live: the manual clock's in memory, Redis's own on Redis.
    let brief = format!("resp_{}_2", b.scope);
    if b.is_redis() {
        b.affinity.remember(&brief, &at("s1"), Duration::from_millis(40)).await.unwrap();
        assert!(b.affinity.find(&brief).await.unwrap().is_some());
        tokio::time::sleep(Duration::from_millis(120)).await;
    } else {
        b.affinity.remember(&brief, &at("s1"), minute).await.unwrap();
        b.at(61.0);
    }
    assert_eq!(b.affinity.find(&brief).await.unwrap(), None, "expired");
    for bad in ["", "a/b", "x y", &"r".repeat(10_000)] {
        let refused = b.affinity.remember(bad, &at("s1"), minute).await;
        assert!(matches!(refused, Err(BackendError::InvalidKey { .. })), "{bad:.20}: {refused:?}");
        assert!(matches!(b.affinity.find(bad).await, Err(BackendError::InvalidKey { .. })), "{bad:.20}");
    }
}
