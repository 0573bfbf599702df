//! The memory gates stay bounded when keys churn (tenants that come and go): gates past their
//! TTL since their last change are swept from large maps, as Redis lets their keys expire;
//! changing ones stay, and a small map is never swept.

#![allow(clippy::unwrap_used)]

use gateway_core::breaker::{CircuitState, GateOp, GateParams};
use gateway_core::policy::BreakerConfig;
use gateway_core::ports::{BreakerGate, SourceKey};
use gateway_core::time::{ManualClock, Timestamp};
use gateway_memory::MemoryGates;
use std::sync::Arc;
use std::time::Duration;

fn params() -> GateParams {
    let policy =
        BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() }.resolve("t.breaker").unwrap();
    GateParams::new(&policy, 0, Duration::from_secs(30), Duration::from_secs(30))
}

#[tokio::test]
async fn churning_tenants_do_not_grow_the_gates_without_bound() {
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_000_000)));
    let gates = MemoryGates::new(clock.clone());
    let p = params();
    let live = SourceKey::new("chat", "s1").with_tenant("steady");
    gates.apply(&live, &p, GateOp::ForceOpen).await.unwrap();
    for i in 0..70_000 {
        gates.apply(&SourceKey::new("chat", "s1").with_tenant(format!("t{i}")), &p, GateOp::TryEnter).await.unwrap();
    }
    assert!(gates.len() > 70_000, "nothing expired yet: {}", gates.len());
    // past every idle gate's TTL, but the steady tenant keeps being used
    clock.set(Timestamp::from_millis(1_000_000 + p.key_ttl_ms() - 1000));
    gates.apply(&live, &p, GateOp::TryEnter).await.unwrap();
    clock.set(Timestamp::from_millis(1_000_000 + p.key_ttl_ms() + 1));
    for i in 0..70_000 {
        gates.apply(&SourceKey::new("chat", "s1").with_tenant(format!("u{i}")), &p, GateOp::TryEnter).await.unwrap();
    }
    assert!(gates.len() < 100_000, "idle gates were swept: {} held", gates.len());
    assert_eq!(gates.snapshot(&live).unwrap().epoch, 1, "a gate in use is never dropped");
}

#[tokio::test]
async fn a_small_map_is_never_swept() {
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(0)));
    let gates = MemoryGates::new(clock.clone());
    let p = params();
    let key = SourceKey::new("chat", "s1");
    gates.apply(&key, &p, GateOp::ForceOpen).await.unwrap();
    clock.set(Timestamp::from_millis(10 * p.key_ttl_ms()));
    for i in 0..500 {
        gates.apply(&SourceKey::new("chat", format!("x{i}")), &p, GateOp::TryEnter).await.unwrap();
    }
    // the old gate is still there (OPEN as left), as a Redis key within its TTL would be
    assert_eq!(gates.snapshot(&key).unwrap().state, CircuitState::Open);
}

#[tokio::test]
async fn a_gate_is_kept_its_ttl_past_its_last_change_not_its_last_look() {
    // As on Redis, where only a write refreshes the key's TTL: a gate that has only been asked
    // (TryEnter on a CLOSED gate changes nothing) expires its TTL after its last change.
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_000_000)));
    let gates = MemoryGates::new(clock.clone());
    let p = params();
    let (asked, written) = (SourceKey::new("chat", "asked"), SourceKey::new("chat", "written"));
    let mut fences = Vec::new();
    for key in [&asked, &written] {
        let fence = gates.apply(key, &p, GateOp::TryEnter).await.unwrap().fence();
        gates.apply(key, &p, GateOp::Failure { fence }).await.unwrap();
        fences.push(fence);
    }
    clock.set(Timestamp::from_millis(1_000_000 + p.key_ttl_ms() - 1000));
    gates.apply(&asked, &p, GateOp::TryEnter).await.unwrap();
    gates.apply(&written, &p, GateOp::Failure { fence: fences[1] }).await.unwrap();
    clock.set(Timestamp::from_millis(1_000_000 + p.key_ttl_ms() + 1));
    // Enough churn that every shard passes its sweep size (1 024) with certainty: 64 shards of
    // ~2 190 on average, where 70 000 left a shard below it in ~1.5 % of runs.
    for i in 0..140_000 {
        gates.apply(&SourceKey::new("chat", format!("c{i}")), &p, GateOp::TryEnter).await.unwrap();
    }
    assert_eq!(gates.snapshot(&asked), None, "only asked since its last change: dropped, as its Redis key expires");
    assert_eq!(gates.snapshot(&written).unwrap().failures, 2, "changed since: kept");
}
