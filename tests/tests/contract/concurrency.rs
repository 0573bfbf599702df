//! The cases that need several callers at once, so no script can say them: one probe for 32
//! concurrent callers, two processes that see one gate, and a release sent before an admission
//! made before it. Every rule they touch is the scripts' and the differential suite's; these
//! check only that the backend applies each operation atomically, in the order sent, and shares
//! it.

#![allow(clippy::unwrap_used)]

use crate::support::{Backend, params, seed_breaker};
use gateway_core::aimd::PacerParams;
use gateway_core::breaker::{GateOp, SuccessKind, Verdict};
use gateway_core::combined::{Admission, Admit, GateAsk, GateRecord, PaceAsk, PaceRecord, Records};
use gateway_core::outcome::OutcomeClass::{Success, Transient};
use std::task::Poll;
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

/// `AttemptGate::record`'s order: a release sent (its future polled once) before an admission is
/// asked is made before it, so the next waiter may go as soon as a release is on its way (SPEC
/// §6). An account of one place, taken and handed on a hundred times, each admission asked while
/// the release before it is still unanswered (on Redis, a pool of two connections).
pub async fn a_release_sent_before_an_admission_is_made_before_it(b: Backend) {
    let pacer = PacerParams { ceiling: 1.0, lease_ttl: Duration::from_secs(30), limit_window: Duration::from_secs(60) };
    let (gate, account, p) = (b.key("s"), b.key("account"), params(seed_breaker(), 16));
    let ask = Admit {
        pace: Some(PaceAsk { key: &account, params: &pacer, tokens: 1 }),
        gate: GateAsk { key: &gate, params: &p },
        permit: None,
        line: None,
    };
    b.at(0.0);
    let Admission::Admitted { lease: Some(mut lease), mut entry, .. } = b.attempts.admit(&ask).await.unwrap() else {
        panic!("the account's one place is free at first")
    };
    for i in 0..100 {
        let next = {
            let op = Success.effects().gate_op(&entry, Duration::ZERO, None);
            let records = Records {
                pace: Some(PaceRecord { lease: &lease, effect: Success.effects().aimd, rate: None, params: &pacer }),
                gate: op.map(|op| GateRecord { key: &gate, params: &p, op }),
                permit: None,
                freed: None,
            };
            let mut release = b.attempts.record(&records);
            let answered = std::future::poll_fn(|cx| {
                Poll::Ready(match release.as_mut().poll(cx) {
                    Poll::Ready(answer) => Some(answer),
                    Poll::Pending => None,
                })
            })
            .await;
            let next = b.attempts.admit(&ask).await.unwrap();
            match answered {
                Some(answer) => answer.unwrap(),
                None => release.await.unwrap(),
            };
            next
        };
        let Admission::Admitted { lease: Some(next), entry: next_entry, .. } = next else {
            panic!("admission {i}, asked after the release of the one place was sent: {next:?}")
        };
        (lease, entry) = (next, next_entry);
    }
}
