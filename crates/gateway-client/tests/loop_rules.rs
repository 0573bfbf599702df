//! The call loop's glue (SPEC §5–§8) on a scripted upstream in virtual time: the budget and a
//! 429 past the stall budget as telemetry and errors report them, in-call demotion (seed 000
//! §3.36) through selection, first come first served, embeddings through the same loop, typed
//! errors, and where the baseline preset differs. The loop's rules themselves are scripts on the
//! call machine (`gateway-core`'s `tests/call_machine`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use async_trait::async_trait;
use gateway_client::{CallError, GatewayClient, Preset};
use gateway_core::breaker::{GateOp, GateParams, Reply};
use gateway_core::outcome::OutcomeClass::*;
use gateway_core::ports::{BackendError, BreakerGate, QuotaDecision, QuotaGate, SourceKey};
use gateway_core::request::{Kind, Request};
use gateway_core::telemetry::CallResult;
use gateway_mock::{ScriptedUpstream, Step};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::{Harness, chat, sources};

#[tokio::test(start_paused = true)]
async fn transient_failures_spend_the_budget_one_plus_max_retries() {
    let h = Harness::new(sources(2, json!({})), Preset::Default);
    h.upstream.always("s1", Step::Fail(Transient));
    h.upstream.always("s2", Step::Fail(Transient));
    let error = h.call().await.unwrap_err();
    assert!(matches!(error, CallError::RetryExhausted { .. }), "{error}");
    assert_eq!(h.upstream.sent().len(), 4, "1 + max_retries 3");
    let call = &h.telemetry.calls()[0];
    assert_eq!((call.result, call.attempts, call.budget_attempts), (CallResult::RetryExhausted, 4, 4));
}

#[tokio::test(start_paused = true)]
async fn the_baseline_spends_the_budget_on_429() {
    let h = Harness::new(sources(1, json!({})), Preset::Baseline);
    h.upstream.always("s1", Step::RateLimited(None));
    let error = h.call().await.unwrap_err();
    assert!(matches!(error, CallError::RetryExhausted { .. }), "{error}");
    assert_eq!(h.upstream.sent().len(), 4);
}

/// Lowers s2's health by `calls` warm-up calls of four failures each (s1's gate held open so
/// that s2 is tried), then lets s1 recover through a successful probe.
async fn degrade_s2(h: &Harness, calls: usize) {
    h.upstream.always("s2", Step::Fail(Transient));
    h.open("s1").await;
    for _ in 0..calls {
        assert!(h.call().await.is_err());
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    h.call().await.unwrap(); // s1's probe succeeds
    h.upstream.always("s2", Step::Ok);
}

/// A breaker that stays closed through the warm-up, so only health steers selection.
fn patient() -> serde_json::Value {
    json!({"breaker": {"fail_threshold": 100, "cooldown_s": 60, "min_calls": 1000}})
}

#[tokio::test(start_paused = true)]
async fn a_healthy_source_that_failed_twice_keeps_the_third_try_without_a_trusted_alternative() {
    // seed 000 §3.36: pushing the third try to a 10 % source is worse than staying.
    let h = Harness::new(sources(2, patient()), Preset::Default);
    degrade_s2(&h, 3).await;
    let health = h.client.health("chat");
    assert!(health[1].1 < 0.1, "{health:?}");
    let before = h.upstream.sent().len();
    h.upstream.script("s1", vec![Step::Fail(Transient), Step::Fail(Transient)]);
    h.call().await.unwrap();
    assert_eq!(h.upstream.sent()[before..], ["s1", "s1", "s1"]);
}

#[tokio::test(start_paused = true)]
async fn a_health_aware_source_that_failed_twice_yields_to_a_trusted_alternative() {
    let h = Harness::new(sources(2, patient()), Preset::Default);
    degrade_s2(&h, 1).await; // s2 at 0.8^4 ≈ 0.41: below s1 even after one failure, but trusted
    let before = h.upstream.sent().len();
    h.upstream.script("s1", vec![Step::Fail(Transient), Step::Fail(Transient)]);
    h.call().await.unwrap();
    assert_eq!(h.upstream.sent()[before..], ["s1", "s1", "s2"]);
}

#[tokio::test(start_paused = true)]
async fn a_selector_without_health_demotes_unconditionally() {
    let h = Harness::new(sources(2, json!({"selector": "least_inflight"})), Preset::Default);
    h.upstream.script("s1", vec![Step::Fail(Transient), Step::Fail(Transient)]);
    h.call().await.unwrap();
    assert_eq!(h.upstream.sent(), ["s1", "s1", "s2"]);
}

#[tokio::test(start_paused = true)]
async fn the_baseline_has_no_in_call_demotion() {
    let h = Harness::new(sources(2, json!({})), Preset::Baseline);
    h.upstream.script("s1", vec![Step::Fail(Transient), Step::Fail(Transient)]);
    h.call().await.unwrap();
    // round robin moves the start each pick (the old funnel), but a twice-failed source is not
    // pushed back: it comes round again
    assert_eq!(h.upstream.sent()[..2], ["s1", "s2"]);
}

#[tokio::test(start_paused = true)]
async fn a_rejected_payload_ends_the_call_at_once() {
    let h = Harness::new(sources(3, json!({})), Preset::Default);
    h.upstream.always("s1", Step::Fail(RequestRejected));
    h.upstream.always("s2", Step::Fail(RequestRejected));
    h.upstream.always("s3", Step::Fail(RequestRejected));
    let error = h.call().await.unwrap_err();
    assert!(matches!(error, CallError::RequestRejected { .. }), "{error}");
    assert_eq!(h.upstream.sent().len(), 1);
    assert!(error.to_string().starts_with("request rejected by s"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn calls_waiting_for_a_slot_are_served_first_come_first_served() {
    // One slot, one-second attempts: the first call holds it while six more queue at staggered
    // times, the last of them arriving just as a slot frees. Each must end in the order it
    // started; polling (each waiter racing for the freed slot) served them in jittered order.
    let narrow = json!({"max_concurrency": 1, "timeout_s": 30});
    let h = Harness::new(sources(1, json!({"sources": {"s1": narrow}})), Preset::Default);
    h.upstream.plan("s1", |_| (Step::Ok, Duration::from_secs(1)));
    let ended = std::sync::Mutex::new(Vec::new());
    let starts_ms = [0u64, 100, 130, 160, 400, 700, 1000];
    let calls = starts_ms.iter().enumerate().map(|(i, &start)| {
        let (h, ended) = (&h, &ended);
        async move {
            tokio::time::sleep(Duration::from_millis(start)).await;
            h.call().await.unwrap();
            ended.lock().unwrap().push((i, h.now_s()));
        }
    });
    futures_util::future::join_all(calls).await;
    let ended = ended.into_inner().unwrap();
    let order: Vec<usize> = ended.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 1, 2, 3, 4, 5, 6], "served in the order they started: {ended:?}");
    // Each takes the slot as the one before frees it: no slot sits idle while a call waits.
    for (k, (_, t)) in ended.iter().enumerate() {
        assert!((*t - (k as f64 + 1.0)).abs() < 0.01, "call {k} ended at {t} s: {ended:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_call_may_not_take_a_slot_freed_elsewhere_while_calls_wait_for_it() {
    // Another process holds the only permit; three calls queue for it. It is returned (no local
    // release wakes anyone: the waiters will see it at their next poll), and a fourth call
    // arrives that very moment. It queues behind the three instead of taking the slot.
    let narrow = json!({"max_concurrency": 1, "timeout_s": 30});
    let h = Harness::new(sources(1, json!({"sources": {"s1": narrow}})), Preset::Default);
    h.upstream.plan("s1", |_| (Step::Ok, Duration::from_secs(1)));
    let limits = h.policy.sources[0].quota;
    let QuotaDecision::Granted(elsewhere) = h.quota.acquire(&h.key("s1"), &limits, 0).await.unwrap() else { panic!() };
    let ended = std::sync::Mutex::new(Vec::new());
    let calls = [100u64, 200, 300, 1000].into_iter().enumerate().map(|(i, start)| {
        let (h, ended) = (&h, &ended);
        async move {
            tokio::time::sleep(Duration::from_millis(start)).await;
            h.call().await.unwrap();
            ended.lock().unwrap().push(i);
        }
    });
    let returned = async {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        h.quota.release(&elsewhere).await.unwrap();
    };
    tokio::join!(futures_util::future::join_all(calls), returned);
    assert_eq!(ended.into_inner().unwrap(), [0, 1, 2, 3], "the late call waited its turn");
}

#[tokio::test(start_paused = true)]
async fn embeddings_run_through_the_same_loop() {
    let h = Harness::new(sources(2, json!({})), Preset::Default);
    h.upstream.script("s1", vec![Step::Fail(Transient)]);
    h.upstream.script("s2", vec![Step::Fail(Transient)]);
    let request = Request::embeddings(vec!["a".into(), "b".into()]);
    let response = h.client.call("chat", &request).await.unwrap();
    assert_eq!((response.kind(), response.embeddings().len()), (Kind::Embeddings, 2));
    assert_eq!(h.upstream.sent().len(), 3, "two scripted failures, then an answer");
}

#[tokio::test(start_paused = true)]
async fn a_request_of_a_kind_the_scope_does_not_serve_is_refused_before_any_attempt() {
    let h = Harness::new(sources(1, json!({"kinds": "chat"})), Preset::Default);
    let request = Request::embeddings(vec!["a".into()]);
    let error = h.client.call("chat", &request).await.unwrap_err();
    assert_eq!(error.to_string(), "scope \"chat\" does not serve embeddings requests (kinds: chat)");
    assert!(h.upstream.sent().is_empty(), "no attempt");
    assert!(h.telemetry.calls().is_empty(), "a refused request is not a call");
    assert!(h.call().await.is_ok(), "the chat call afterwards is served");
    // Both kinds by default, and an empty list is a config error naming the key.
    assert_eq!(sources(1, json!({})).kinds, Kind::ALL);
    let empty = serde_json::from_value::<gateway_core::policy::ScopeConfig>(
        json!({"kinds": [], "breaker": {"fail_threshold": 1, "cooldown_s": 1}, "sources": {"s1": {}}}),
    )
    .unwrap()
    .resolve("chat")
    .unwrap_err();
    assert!(empty.to_string().starts_with("chat.kinds: value \"[]\" is invalid"), "{empty}");
}

#[tokio::test(start_paused = true)]
async fn every_call_ends_exactly_once_in_telemetry_and_attempts_are_reported() {
    let h = Harness::new(sources(2, json!({})), Preset::Default);
    h.upstream.script("s1", vec![Step::Fail(Transient)]);
    for _ in 0..3 {
        h.call().await.unwrap();
    }
    let calls = h.telemetry.calls();
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|c| c.result == CallResult::Ok));
    let attempts = h.telemetry.attempts();
    assert_eq!(attempts.len(), h.upstream.sent().len());
    assert!(attempts.iter().any(|a| a.class == Transient && a.consumed_budget && a.detail == "scripted_transient"));
    assert_eq!(h.client.inflight("chat"), 0);
}

#[tokio::test(start_paused = true)]
async fn gate_transitions_reach_telemetry() {
    let h = Harness::new(sources(1, json!({"circuit_open": "wait"})), Preset::Default);
    h.upstream.script("s1", vec![Step::Fail(SourceDead)]);
    h.call().await.unwrap();
    let transitions: Vec<_> = h.telemetry.gates().iter().map(|g| (g.transition.from, g.transition.to)).collect();
    use gateway_core::CircuitState::*;
    assert_eq!(transitions, [(Closed, Open), (Open, HalfOpen), (HalfOpen, Closed)]);
}

#[tokio::test(start_paused = true)]
async fn an_unknown_scope_is_a_typed_error_naming_the_known_ones() {
    let h = Harness::new(sources(1, json!({})), Preset::Default);
    let error = h.client.call("chta", &chat()).await.unwrap_err();
    assert_eq!(error.to_string(), "unknown scope \"chta\" (configured: chat)");
    assert!(h.telemetry.calls().is_empty());
}

/// Gates whose backend is down.
struct DownGates;

#[async_trait]
impl BreakerGate for DownGates {
    async fn apply(&self, key: &SourceKey, _: &GateParams, _: GateOp) -> Result<Reply, BackendError> {
        Err(BackendError::BackendUnavailable { backend: "test", key: key.to_string(), detail: "down".into() })
    }
    async fn read(&self, key: &SourceKey) -> Result<gateway_core::Gate, BackendError> {
        Err(BackendError::BackendUnavailable { backend: "test", key: key.to_string(), detail: "down".into() })
    }
    async fn retry_after(&self, _: &[(SourceKey, GateParams)]) -> Result<Duration, BackendError> {
        Err(BackendError::BackendUnavailable { backend: "test", key: "all".into(), detail: "down".into() })
    }
    async fn forget(&self, key: &SourceKey) -> Result<(), BackendError> {
        Err(BackendError::BackendUnavailable { backend: "test", key: key.to_string(), detail: "down".into() })
    }
}

#[tokio::test(start_paused = true)]
async fn an_unavailable_gate_backend_fails_the_call_closed() {
    let upstream = ScriptedUpstream::new();
    let client = GatewayClient::builder()
        .scope(sources(2, json!({})))
        .gates(Arc::new(DownGates))
        .upstream(upstream.clone())
        .seed(1)
        .build()
        .unwrap();
    let error = client.call("chat", &chat()).await.unwrap_err();
    assert!(matches!(error, CallError::BackendUnavailable { .. }), "{error}");
    assert!(upstream.sent().is_empty(), "nothing is sent without admission");
    assert_eq!(client.inflight("chat"), 0);
}

#[test]
fn a_client_needs_an_upstream_and_a_scope() {
    assert_eq!(
        GatewayClient::builder().scope(sources(1, json!({}))).build().err().unwrap().to_string(),
        "no upstream: call GatewayClientBuilder::upstream"
    );
    let upstream = ScriptedUpstream::new();
    assert!(GatewayClient::builder().upstream(upstream).build().is_err());
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_past_the_stall_budget_ends_the_call_at_once_with_it() {
    let h = Harness::new(sources(1, json!({})), Preset::Default);
    h.upstream.always("s1", Step::RateLimited(Some(Duration::from_secs(86_400))));
    let error = h.call().await.unwrap_err();
    let CallError::RateLimited { retry_after, ref report } = error else { panic!("{error}") };
    assert!(retry_after > Duration::from_secs(86_399) && retry_after <= Duration::from_secs(86_400), "{retry_after:?}");
    assert_eq!(report.attempts.len(), 1, "one attempt, no wait");
    assert!(h.now_s() < 0.1, "ended at once, not after the stall window: {}", h.now_s());
    assert_eq!(h.telemetry.calls()[0].result, CallResult::RateLimited);
    // With another source, that one serves the call at once.
    let h = Harness::new(sources(2, json!({})), Preset::Default);
    h.upstream.always("s1", Step::RateLimited(Some(Duration::from_secs(86_400))));
    for _ in 0..5 {
        h.call().await.unwrap();
    }
    assert!(h.now_s() < 1.0, "no call slept for s1's Retry-After: {}", h.now_s());
    // A Retry-After within the budget is still waited for.
    let h = Harness::new(sources(1, json!({})), Preset::Default);
    h.upstream.script("s1", vec![Step::RateLimited(Some(Duration::from_secs(20)))]);
    h.call().await.unwrap();
    assert!(h.now_s() >= 20.0, "{}", h.now_s());
}

#[tokio::test(start_paused = true)]
async fn slow_successes_feed_the_slow_call_channel_and_open_the_gate() {
    let slow = json!({"breaker": {"fail_threshold": 5, "cooldown_s": 60, "window_s": 600, "slow_call_s": 10, "slow_rate": 0.5}});
    let h = Harness::new(sources(2, slow), Preset::Default);
    h.upstream.plan("s1", |_| (Step::Ok, Duration::from_secs(12)));
    h.upstream.plan("s2", |_| (Step::Ok, Duration::from_secs(1)));
    h.open("s2").await;
    for _ in 0..12 {
        h.call().await.unwrap();
    }
    let gate = h.gates.snapshot(&h.key("s1")).unwrap();
    assert_eq!(gate.state, gateway_core::breaker::CircuitState::Open, "{gate:?}");
    let opened = h.telemetry.gates().into_iter().find(|g| g.key.source.as_ref() == "s1").unwrap();
    assert_eq!(opened.transition.cause, gateway_core::breaker::Cause::SlowChannel);
    // a fast source never counts as slow
    let fast = Harness::new(sources(1, json!({"breaker": {"fail_threshold": 5, "cooldown_s": 60, "slow_call_s": 10}})), Preset::Default);
    fast.upstream.plan("s1", |_| (Step::Ok, Duration::from_secs(9)));
    for _ in 0..20 {
        fast.call().await.unwrap();
    }
    assert_eq!(fast.gates.snapshot(&fast.key("s1")).unwrap().s0, 0);
}

#[tokio::test(start_paused = true)]
async fn another_calls_pushback_within_the_stall_budget_is_waited_out_not_read_as_a_full_quota() {
    // quota_full = fail_fast ends a call at once when capacity is full; a 429's pushback on the
    // account is not capacity, and it ends at a known time: the call waits for it.
    let h = Arc::new(Harness::new(sources(1, json!({"quota_full": "fail_fast"})), Preset::Default));
    h.upstream.plan("s1", |n| {
        if n == 0 {
            (Step::RateLimited(Some(Duration::from_secs(20))), Duration::from_millis(10))
        } else {
            (Step::Ok, Duration::from_millis(10))
        }
    });
    let first = {
        let h = h.clone();
        tokio::spawn(async move { h.call().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = h.call().await.unwrap();
    assert!(h.now_s() >= 20.0 && h.now_s() < 20.5, "waited until the pushback's end, no longer: {}", h.now_s());
    assert_eq!(second.attempts(), 1, "no attempt was spent on a certain 429");
    first.await.unwrap().unwrap();
    assert_eq!(h.upstream.sent().len(), 3, "the 429, then one attempt each");
}
