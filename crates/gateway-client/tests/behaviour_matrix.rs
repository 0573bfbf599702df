//! Rows of the behaviour matrix of seed 003 §4 end to end: the glue, the memory gates and quota
//! and the call machine together, on a scripted upstream in virtual time; plus the trap of §3.3.
//! Every row's rule is a script on the call machine (`gateway-core`'s `tests/call_machine`);
//! these check that the gates' real answers reach it and its waits are slept.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use gateway_client::{CallError, Exhausted, Preset};
use gateway_core::admission::SkipReason;
use gateway_core::breaker::{GateOp, SuccessKind};
use gateway_core::outcome::OutcomeClass;
use gateway_core::ports::{QuotaDecision, QuotaGate};
use gateway_core::telemetry::SourceReason;
use gateway_mock::Step;
use serde_json::json;
use std::time::Duration;
use support::{Harness, sources};

const POLL: f64 = 0.05;
/// The fallback poll of a call waiting in line (`poll_interval_s`' default).
const FALLBACK: f64 = 1.0;

fn wait() -> serde_json::Value {
    json!({"circuit_open": "wait"})
}

fn retry_after(error: &CallError) -> Duration {
    match error {
        CallError::CircuitOpen { retry_after, .. } => *retry_after,
        other => panic!("expected CircuitOpen, got {other}"),
    }
}

#[tokio::test(start_paused = true)]
async fn single_source_open_fail_fast_fails_at_once_with_the_remaining_cooldown() {
    let h = Harness::new(sources(1, json!({})), Preset::Default);
    h.open("s1").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let error = h.call().await.unwrap_err();
    assert_eq!(retry_after(&error), Duration::from_secs(50), "the cooldown left, never the probe lease");
    assert_eq!(h.now_s(), 10.0, "at once");
    assert!(h.upstream.sent().is_empty());
    let reasons = &error.report().unwrap().reasons;
    assert_eq!(reasons["s1"], SourceReason::Skipped(SkipReason::CircuitOpen));
}

#[tokio::test(start_paused = true)]
async fn single_source_open_wait_sleeps_to_the_cooldown_end_then_probes_and_succeeds() {
    let h = Harness::new(sources(1, wait()), Preset::Default);
    h.open("s1").await;
    h.call().await.unwrap();
    let t = h.now_s();
    assert!((60.0..=60.0 + POLL + 0.05 + 0.001).contains(&t), "woke at the cooldown's end (+ jittered poll, + 50 ms attempt): {t}");
    assert_eq!(h.upstream.sent(), ["s1"], "one probe, no polling attempts");
}

#[tokio::test(start_paused = true)]
async fn single_source_dead_key_wait_reprobes_after_60_then_120_until_stalled() {
    let h = Harness::new(sources(1, wait()), Preset::Default);
    h.upstream.always("s1", Step::Fail(OutcomeClass::SourceDead));
    let error = h.call().await.unwrap_err();
    assert!(matches!(error, CallError::AllSourcesExhausted { reason: Exhausted::Stalled, .. }), "{error}");
    let t = h.now_s();
    assert!(t > 300.0 && t <= 300.0 + POLL + 0.2, "the stall bound ends the call: {t}");
    // attempts at 0, ~60 and ~180 s; the next probe (at ~420 s) is past the bound
    assert_eq!(h.upstream.sent().len(), 3);
    let report = error.report().unwrap();
    assert_eq!(report.reasons["s1"], SourceReason::Skipped(SkipReason::CircuitOpen));
}

#[tokio::test(start_paused = true)]
async fn all_sources_open_fail_fast_fails_at_once_with_the_earliest_recovery() {
    let h = Harness::new(sources(3, json!({})), Preset::Default);
    h.open("s1").await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    h.open("s2").await;
    h.open("s3").await;
    let error = h.call().await.unwrap_err();
    assert_eq!(retry_after(&error), Duration::from_secs(40), "min over the sources");
}

#[tokio::test(start_paused = true)]
async fn all_sources_open_wait_waits_for_the_earliest_recovery() {
    let h = Harness::new(sources(3, wait()), Preset::Default);
    h.open("s1").await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    h.open("s2").await;
    h.open("s3").await;
    h.call().await.unwrap();
    assert!((60.0..=60.0 + POLL + 0.051).contains(&h.now_s()), "{}", h.now_s());
    assert_eq!(h.upstream.sent(), ["s1"]);
}

/// Every gate of the scope half-open with a probe in flight (held by another caller).
async fn all_half_open(h: &Harness, names: &[&str]) -> Vec<gateway_core::Reply> {
    for name in names {
        h.open(name).await;
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    let mut probes = Vec::new();
    for name in names {
        let probe = h.gates.apply(&h.key(name), &h.params(name), GateOp::TryEnter).await.unwrap();
        assert_eq!(probe.verdict, Some(gateway_core::Verdict::Probe));
        probes.push(probe);
    }
    probes
}

use gateway_core::ports::BreakerGate;

#[tokio::test(start_paused = true)]
async fn all_half_open_wait_polls_and_gets_through_once_a_probe_succeeds() {
    let h = Harness::new(sources(2, wait()), Preset::Default);
    let probes = all_half_open(&h, &["s1", "s2"]).await;
    let (gates, key, params, fence) = (h.gates.clone(), h.key("s1"), h.params("s1"), probes[0].fence());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        gates.apply(&key, &params, GateOp::Success { fence, kind: SuccessKind::Real }).await.unwrap();
    });
    h.call().await.unwrap();
    let t = h.now_s();
    assert!((62.0..=62.0 + POLL + 0.051).contains(&t), "polled every ~50 ms and got through: {t}");
    assert_eq!(h.upstream.sent(), ["s1"]);
}

/// Holds the only permit of `source` (max_concurrency 1) until `release_at` seconds.
async fn hold_the_permit(h: &Harness, source: &str, release_at: f64) {
    let limits = h.policy.sources.iter().find(|s| s.name == source).unwrap().quota;
    let QuotaDecision::Granted(permit) = h.quota.acquire(&h.key(source), &limits, 0).await.unwrap() else { panic!("permit") };
    let quota = h.quota_gate();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs_f64(release_at)).await;
        quota.release(&permit).await.unwrap();
    });
}

async fn quota_full_is_governed_by_quota_full(circuit_open: &str) {
    let narrow = json!({"max_concurrency": 1, "timeout_s": 30});
    let fail_fast = Harness::new(
        sources(1, json!({"circuit_open": circuit_open, "quota_full": "fail_fast", "sources": {"s1": narrow}})),
        Preset::Default,
    );
    hold_the_permit(&fail_fast, "s1", 5.0).await;
    let error = fail_fast.call().await.unwrap_err();
    assert!(matches!(error, CallError::AllSourcesExhausted { reason: Exhausted::QuotaExhausted, .. }), "{error}");
    assert_eq!(error.report().unwrap().reasons["s1"], SourceReason::Skipped(SkipReason::RateLimited));

    let waiting =
        Harness::new(sources(1, json!({"circuit_open": circuit_open, "quota_full": "wait", "sources": {"s1": narrow}})), Preset::Default);
    hold_the_permit(&waiting, "s1", 5.0).await;
    waiting.call().await.unwrap();
    // The permit is returned behind the client's back (as another process on a backend without
    // messages would): the waiter finds it at its fallback poll, no sooner and no later.
    assert!((5.0..=5.0 + FALLBACK + 0.051).contains(&waiting.now_s()), "{}", waiting.now_s());
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_for_a_rate_window_goes_when_the_window_frees_not_at_the_next_poll() {
    let narrow = json!({"rpm": 1, "timeout_s": 30});
    let h = Harness::new(sources(1, json!({"quota_full": "wait", "sources": {"s1": narrow}})), Preset::Default);
    h.call().await.unwrap();
    // 0.3 s before the first start leaves the window the quota refuses, saying so: the call
    // sleeps those 0.3 s in line (not the 1 s fallback poll) and sends at 60 s.
    tokio::time::sleep(Duration::from_secs_f64(59.7 - h.now_s())).await;
    h.call().await.unwrap();
    let t = h.now_s();
    assert!((60.0..=60.0 + 0.05 + 0.001).contains(&t), "sent when the window freed (+ 50 ms attempt): {t}");
    assert_eq!(h.upstream.sent(), ["s1", "s1"]);
}

#[tokio::test(start_paused = true)]
async fn quota_full_or_aimd_limit_fail_fast_is_governed_by_quota_full() {
    quota_full_is_governed_by_quota_full("fail_fast").await;
}

#[tokio::test(start_paused = true)]
async fn quota_full_or_aimd_limit_wait_is_governed_by_quota_full() {
    quota_full_is_governed_by_quota_full("wait").await;
}

#[tokio::test(start_paused = true)]
async fn the_memo_never_keeps_a_recovered_source_out() {
    // Seed 003 §1.3: a HALF_OPEN denial must not memo the source (its retry_after is 0, never
    // the probe lease), or the source stays skipped after another process's probe closed it.
    let h = Harness::new(sources(1, json!({})), Preset::Default);
    h.open("s1").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    // an OPEN denial memoes the source until the cooldown ends, exactly
    assert_eq!(retry_after(&h.call().await.unwrap_err()), Duration::from_secs(50));
    tokio::time::sleep(Duration::from_secs(50)).await;
    // another process takes the probe; this one is denied with 0 and memoes nothing
    let probe = h.gates.apply(&h.key("s1"), &h.params("s1"), GateOp::TryEnter).await.unwrap();
    assert_eq!(probe.verdict, Some(gateway_core::Verdict::Probe));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(retry_after(&h.call().await.unwrap_err()), Duration::ZERO);
    // the other probe succeeds: the very next call uses the source
    h.gates.apply(&h.key("s1"), &h.params("s1"), GateOp::Success { fence: probe.fence(), kind: SuccessKind::Real }).await.unwrap();
    h.call().await.unwrap();
    assert_eq!(h.upstream.sent(), ["s1"]);
}
