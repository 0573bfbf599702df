//! The breaker cases that need several callers at once, so no script can say them: one probe
//! for 32 concurrent callers, and two processes that see one gate. Every rule they touch is the
//! scripts' and the differential suite's; these check only that the backend applies each
//! operation atomically and shares it.

#![allow(clippy::unwrap_used)]

use crate::support::{Backend, params, seed_breaker};
use gateway_core::breaker::{GateOp, SuccessKind, Verdict};
use gateway_core::outcome::OutcomeClass::{Success, Transient};
use std::time::Duration;

pub async fn concurrent_try_enter_on_an_expired_open_gate_grants_one_probe(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    b.at(0.0);
    b.attempt(&key, &p, Success).await;
    b.attempts(&key, &p, Transient, 9).await;
    b.at(60.0);
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (gates, key, p) = (b.gates.clone(), key.clone(), p.clone());
            tokio::spawn(async move { gates.apply(&key, &p, GateOp::TryEnter).await.unwrap().verdict })
        })
        .collect();
    let mut probes = 0;
    for task in tasks {
        probes += usize::from(task.await.unwrap() == Some(Verdict::Probe));
    }
    assert_eq!(probes, 1, "exactly one of 32 concurrent callers gets the probe");
}

pub async fn two_processes_see_one_gate(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    let other = b.second_gates().await;
    b.at(0.0);
    b.attempt(&key, &p, Success).await;
    b.attempts(&key, &p, Transient, 9).await;
    b.at(30.0);
    let seen = other.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    assert_eq!((seen.verdict, seen.retry_after), (Some(Verdict::Denied), Duration::from_secs(30)));
    b.at(60.0);
    let probe = other.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    assert_eq!(probe.verdict, Some(Verdict::Probe));
    assert_eq!(b.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap().verdict, Some(Verdict::Denied));
    other.apply(&key, &p, GateOp::Success { fence: probe.fence(), kind: SuccessKind::Real }).await.unwrap();
    assert_eq!(b.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap().verdict, Some(Verdict::Allowed));
}
