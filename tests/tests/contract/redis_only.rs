//! What only the Redis gates have: the key's TTL, which every operation refreshes as the memory
//! gates keep a gate on every operation, and the per-process cache of encoded arguments, which
//! is bounded however many gates a process touches.

#![allow(clippy::unwrap_used)]

use crate::support::{Backend, params, seed_breaker};
use fred::prelude::*;
use gateway_core::breaker::GateOp;
use gateway_core::outcome::OutcomeClass::Transient;
use gateway_core::ports::BreakerGate;

pub async fn every_operation_keeps_the_gate_for_its_ttl(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 1));
    b.at(0.0);
    b.attempt(&key, &p, Transient).await;
    let redis = b.redis_gates().unwrap();
    let pool = redis.connection().pool().clone();
    let hash = format!("gw:{{{}}}:gate:s", b.scope);
    let ttl = i64::try_from(p.key_ttl_ms()).unwrap();
    // A gate that only sees TryEnter (a CLOSED gate whose attempts the quota refuses) is still
    // in use: its streak and counts must outlive the TTL as they do in memory.
    let _: i64 = pool.pexpire(&hash, 1_000, None).await.unwrap();
    b.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    let left: i64 = pool.pttl(&hash).await.unwrap();
    assert!(left > ttl - 60_000, "TryEnter left the gate {left} ms to live, its TTL is {ttl} ms");
    // A gate nothing was written to stays absent: TryEnter on it stores nothing.
    b.gates.apply(&b.key("fresh"), &p, GateOp::TryEnter).await.unwrap();
    let exists: i64 = pool.exists(format!("gw:{{{}}}:gate:fresh", b.scope)).await.unwrap();
    assert_eq!(exists, 0);
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
