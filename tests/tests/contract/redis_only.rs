//! What only the Redis gates have: the key's TTL, which every change beyond the current
//! bucket's counts refreshes (the memory gates keep a gate likewise, `Gate::keeps_longer_than`),
//! and the per-process cache of encoded arguments, bounded however many gates a process touches.

#![allow(clippy::unwrap_used)]

use crate::support::{Backend, params, seed_breaker};
use fred::prelude::*;
use gateway_core::breaker::{GateOp, SuccessKind};
use gateway_core::outcome::OutcomeClass::Transient;
use gateway_core::ports::BreakerGate;

pub async fn a_change_beyond_the_buckets_counts_keeps_the_gate_for_its_ttl(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 1));
    b.at(0.0);
    b.attempt(&key, &p, Transient).await;
    let redis = b.redis_gates().unwrap();
    let pool = redis.connection().pool().clone();
    let hash = format!("gw:{{{}}}:gate:s", b.scope);
    let ttl = i64::try_from(p.key_ttl_ms()).unwrap();
    let left = || async { pool.pttl::<i64, _>(&hash).await.unwrap() };
    let _: i64 = pool.pexpire(&hash, 1_000, None).await.unwrap();
    // Neither a look (TryEnter on a CLOSED gate) nor a count within the current bucket keeps
    // the gate longer, in memory either (Gate::keeps_longer_than)...
    let fence = b.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap().fence();
    b.gates.apply(&key, &p, GateOp::Success { fence, kind: SuccessKind::Real }).await.unwrap();
    let kept = left().await;
    assert!((1..=1_000).contains(&kept), "a look or a count changed the TTL to {kept} ms (-1: none, -2: the key is gone)");
    // ...the first count of the next bucket does (an active gate is never lost).
    b.at(30.0);
    b.gates.apply(&key, &p, GateOp::Success { fence, kind: SuccessKind::Real }).await.unwrap();
    assert!(left().await > ttl - 60_000, "a new bucket left the gate {} ms to live, its TTL is {ttl} ms", left().await);
    // A window that never rotated (a clock before the first bucket's end) is kept by its first
    // count: the key never lives without a TTL.
    b.clock.set(gateway_core::time::Timestamp::from_millis(5));
    let early_hash = format!("gw:{{{}}}:gate:early", b.scope);
    let fence = b.gates.apply(&b.key("early"), &p, GateOp::TryEnter).await.unwrap().fence();
    let _: i64 = pool.pexpire(&early_hash, 1_000, None).await.unwrap();
    b.gates.apply(&b.key("early"), &p, GateOp::Success { fence, kind: SuccessKind::Real }).await.unwrap();
    let early: i64 = pool.pttl(&early_hash).await.unwrap();
    assert!(early > ttl - 60_000, "the first count of a window that never rotated left {early} ms to live");
    // TryEnter on a gate not stored creates it (its incarnation), with its TTL; a record on a
    // gate not stored is fenced and stores nothing.
    let record = GateOp::Failure { fence: gateway_core::breaker::Fence { incarnation: 7, epoch: 0 } };
    assert!(b.gates.apply(&b.key("lost"), &p, record).await.unwrap().fenced);
    let lost: i64 = pool.exists(format!("gw:{{{}}}:gate:lost", b.scope)).await.unwrap();
    assert_eq!(lost, 0, "a fenced record stored a gate");
    b.gates.apply(&b.key("fresh"), &p, GateOp::TryEnter).await.unwrap();
    let fresh: i64 = pool.pttl(format!("gw:{{{}}}:gate:fresh", b.scope)).await.unwrap();
    assert!(fresh > ttl - 60_000, "a gate created by TryEnter has {fresh} ms to live");
}

pub async fn the_encoded_arguments_are_bounded_with_churning_gates(b: Backend) {
    let p = params(seed_breaker(), 1);
    let redis = b.redis_gates().unwrap();
    for i in 0..5_000 {
        redis.apply(&b.key(&format!("t{i}")), &p, GateOp::TryEnter).await.unwrap();
    }
    assert!(redis.encoded_len() <= 4_096, "{} gates' arguments kept", redis.encoded_len());
    assert!(redis.encoded_len() > 0);
}

/// Every connection of the pool sends at once (`TCP_NODELAY`): one scope's commands share a
/// connection, and under Nagle's algorithm a command written while an earlier one is
/// unacknowledged waits for that acknowledgement (on a network: a round trip, or a delayed
/// ACK's 40 ms).
pub async fn every_connection_to_redis_sends_at_once(b: Backend) {
    let redis = b.redis_gates().unwrap();
    let clients = redis.connection().pool().clients();
    assert!(!clients.is_empty());
    for client in clients {
        assert_eq!(client.connection_config().tcp.nodelay, Some(true), "a pool client leaves Nagle's algorithm on");
    }
}

/// A release carried by the next admission (`handover.lua`) whose one part Redis cannot make: a
/// broken record leaves the admission to be asked on its own (and made), a broken admission
/// leaves the records made and answered; each error names its key.
pub async fn a_carried_release_and_its_admission_fail_apart(b: Backend) {
    use gateway_core::combined::{Admission, Admit, GateAsk, GateRecord, Records};
    let p = params(seed_breaker(), 1);
    let pool = b.redis_gates().unwrap().connection().pool().clone();
    // A gate's HASH that is not one: every script that reads it fails with WRONGTYPE.
    let _: () = pool.set(format!("gw:{{{}}}:gate:broken", b.scope), "x", None, None, false).await.unwrap();
    let (broken, fine, next) = (b.key("broken"), b.key("fine"), b.key("next"));
    let fence = b.gates.apply(&fine, &p, GateOp::TryEnter).await.unwrap().fence();
    let success = GateOp::Success { fence, kind: SuccessKind::Real };
    let ask = |key| Admit { pace: None, gate: GateAsk { key, params: &p }, permit: None, line: None };
    let records = |key| Records { gate: Some(GateRecord { key, params: &p, op: success }), ..Records::default() };

    let (recorded, admission) = b.attempts.record_then_admit(&records(&broken), &ask(&next)).await;
    let error = recorded.unwrap_err().to_string();
    assert!(error.contains("broken") && error.contains("WRONGTYPE"), "the broken record answered {error}");
    assert!(matches!(admission, Ok(Admission::Admitted { .. })), "the admission after a broken record: {admission:?}");

    let (recorded, admission) = b.attempts.record_then_admit(&records(&fine), &ask(&broken)).await;
    let reply = recorded.unwrap().gate.unwrap();
    assert!(!reply.fenced, "the record before a broken admission was not made: {reply:?}");
    let error = admission.unwrap_err().to_string();
    assert!(error.contains("broken") && error.contains("WRONGTYPE"), "the broken admission answered {error}");
    assert_eq!(b.snapshot(&fine).await.a1 + b.snapshot(&fine).await.a0, 1, "the record was not counted once");
}
