//! Fallback scopes (SPEC §11): a call that ends `CircuitOpen`, `AllSourcesExhausted` or
//! `RateLimited` in its scope (or that none of its sources can carry, `NoSourceCarries`) is
//! tried once in the scope's fallback; if that fails too the error
//! carries both chains. Other endings never fall back, and a fallback does not fall back again.
//! Either way it is one call, with exactly one call event.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use gateway_client::{BuildError, CallError, Collector, GatewayClient, TokioClock};
use gateway_core::breaker::GateOp;
use gateway_core::outcome::OutcomeClass::*;
use gateway_core::policy::ScopeConfig;
use gateway_core::ports::{BreakerGate, SourceKey};
use gateway_core::telemetry::{CallEvent, CallResult};
use gateway_core::time::Clock;
use gateway_memory::MemoryGates;
use gateway_mock::{ScriptedUpstream, Step};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::chat;

struct Setup {
    client: GatewayClient,
    upstream: Arc<ScriptedUpstream>,
    gates: Arc<MemoryGates>,
    telemetry: Arc<Collector>,
    clock: Arc<TokioClock>,
}

fn scope(name: &str, source: &str, fallback: Option<&str>) -> gateway_core::policy::ScopePolicy {
    let mut config = json!({"breaker": {"fail_threshold": 5, "cooldown_s": 60}, "sources": {source: {"timeout_s": 30}}});
    if let Some(fallback) = fallback {
        config["fallback"] = json!(fallback);
    }
    serde_json::from_value::<ScopeConfig>(config).unwrap().resolve(name).unwrap()
}

fn setup(backup_falls_back: bool) -> Setup {
    setup_scopes(Some("backup"), backup_falls_back.then_some("chat"))
}

/// `chat` (source `s1`) and `backup` (source `s9`) with the given fallbacks.
fn setup_scopes(chat_fallback: Option<&str>, backup_fallback: Option<&str>) -> Setup {
    let clock = Arc::new(TokioClock::new());
    let gates = Arc::new(MemoryGates::new(clock.clone()));
    let upstream = ScriptedUpstream::new();
    let telemetry = Arc::new(Collector::new());
    let client = GatewayClient::builder()
        .scope(scope("chat", "s1", chat_fallback))
        .scope(scope("backup", "s9", backup_fallback))
        .gates(gates.clone())
        .upstream(upstream.clone())
        .telemetry(telemetry.clone())
        .clock(clock.clone())
        .seed(2)
        .build()
        .unwrap();
    Setup { client, upstream, gates, telemetry, clock }
}

async fn open(s: &Setup, scope: &str, source: &str) {
    let policy = self::scope(scope, source, None);
    s.gates.apply(&SourceKey::new(scope, source), &policy.gate_params(0).unwrap(), GateOp::ForceOpen).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_open_scope_falls_back_once_and_the_fallback_answers() {
    let s = setup(false);
    s.upstream.always("s9", Step::Ok);
    open(&s, "chat", "s1").await;
    s.client.call("chat", &chat()).await.unwrap();
    assert_eq!(s.upstream.sent(), ["s9"]);
    let results: Vec<(String, CallResult)> = s.telemetry.calls().into_iter().map(|c| (c.scope, c.result)).collect();
    assert_eq!(results, [("chat".to_owned(), CallResult::Ok)], "one call, one event: the primary scope's, with the fallback's result");
}

#[tokio::test(start_paused = true)]
async fn when_the_fallback_fails_too_the_error_carries_both_chains_and_nothing_loops() {
    let s = setup(true);
    open(&s, "chat", "s1").await;
    open(&s, "backup", "s9").await;
    let error = s.client.call("chat", &chat()).await.unwrap_err();
    let CallError::FallbackFailed { scope, primary, fallback_scope, fallback } = &error else { panic!("{error}") };
    assert_eq!((scope.as_str(), fallback_scope.as_str()), ("chat", "backup"));
    assert!(matches!(**primary, CallError::CircuitOpen { .. }), "{primary}");
    assert!(matches!(**fallback, CallError::CircuitOpen { .. }), "{fallback}");
    assert!(primary.report().unwrap().reasons.contains_key("s1"));
    assert!(error.report().unwrap().reasons.contains_key("s9"));
    assert_eq!(error.result(), Some(CallResult::CircuitOpen));
    assert!(error.to_string().contains("; then in fallback scope \"backup\": every source's circuit is open"), "{error}");
    assert!(s.upstream.sent().is_empty(), "{:?}", s.upstream.sent());
    let calls = s.telemetry.calls();
    assert_eq!(calls.len(), 1, "one call, one event; backup's own fallback (chat) is not tried: no loop: {calls:?}");
    assert_eq!((calls[0].scope.as_str(), calls[0].result), ("chat", CallResult::CircuitOpen));
    let sources: Vec<&str> = calls[0].reasons.iter().map(|(source, _)| source.as_str()).collect();
    assert_eq!(sources, ["s1", "s9"], "each scope's source once, the primary's first: no loop");
}

#[tokio::test(start_paused = true)]
async fn a_spent_retry_budget_or_a_rejected_payload_never_falls_back() {
    let s = setup(false);
    s.upstream.always("s1", Step::Fail(Transient));
    s.upstream.always("s9", Step::Ok);
    assert!(matches!(s.client.call("chat", &chat()).await.unwrap_err(), CallError::RetryExhausted { .. }));
    let s = setup(false);
    s.upstream.always("s1", Step::Fail(RequestRejected));
    assert!(matches!(s.client.call("chat", &chat()).await.unwrap_err(), CallError::RequestRejected { .. }));
    assert!(!s.upstream.sent().contains(&"s9".to_owned()));
}

#[test]
fn a_fallback_must_name_a_configured_scope_other_than_itself() {
    let error =
        GatewayClient::builder().scope(scope("chat", "s1", Some("backup"))).upstream(ScriptedUpstream::new()).build().err().unwrap();
    assert_eq!(error, BuildError::UnknownFallback { scope: "chat".into(), fallback: "backup".into(), known: "chat".into() });
    assert_eq!(error.to_string(), "chat.fallback: no scope \"backup\" (configured: chat)");
    let config: ScopeConfig =
        serde_json::from_value(json!({"fallback": "chat", "breaker": {"fail_threshold": 5, "cooldown_s": 60}, "sources": {"s1": {}}}))
            .unwrap();
    assert_eq!(
        config.resolve("chat").unwrap_err().to_string(),
        "chat.fallback: value \"chat\" is invalid (a scope cannot fall back to itself)"
    );
}

/// `chat`'s source fails once (a retry), then pushes back for a day: two attempts, then the
/// scope ends `RateLimited` at once, which falls back.
fn primary_plan(s: &Setup) {
    s.upstream.script("s1", vec![Step::Fail(Transient), Step::RateLimited(Some(Duration::from_secs(86_400)))]);
}

/// The one call event of a call to `scope` on `s`, with the call's result and the clock around it.
async fn one_call(s: &Setup, scope: &str) -> (Result<(), CallError>, CallEvent, gateway_core::Timestamp, gateway_core::Timestamp) {
    let before = s.clock.now();
    let result = s.client.call(scope, &chat()).await.map(drop);
    let after = s.clock.now();
    let calls = s.telemetry.calls();
    assert_eq!(calls.len(), 1, "a call to {scope} ends in exactly one call event: {calls:?}");
    (result, calls.into_iter().next().unwrap(), before, after)
}

/// Each scope's part of the call on its own (no fallback configured): the reference the merged
/// event is checked against.
async fn parts(fallback_plan: impl Fn(&Setup)) -> (CallEvent, CallEvent) {
    let alone = setup_scopes(None, None);
    primary_plan(&alone);
    let (result, primary, _, _) = one_call(&alone, "chat").await;
    assert!(matches!(result, Err(CallError::RateLimited { .. })), "{result:?}");
    let alone = setup_scopes(None, None);
    fallback_plan(&alone);
    let (_, fallback, _, _) = one_call(&alone, "backup").await;
    (primary, fallback)
}

/// The merged event: the primary scope's name (and call), the fallback's result, the sums of
/// both parts' counts, the reasons in order, and the time from the primary's start.
fn assert_merged(
    event: &CallEvent,
    primary: &CallEvent,
    fallback: &CallEvent,
    before: gateway_core::Timestamp,
    after: gateway_core::Timestamp,
) {
    assert_eq!((event.scope.as_str(), primary.scope.as_str(), fallback.scope.as_str()), ("chat", "chat", "backup"));
    assert_eq!(event.result, fallback.result, "the fallback's result: {event:?}");
    assert_eq!((event.call_id, event.tenant.as_deref()), (primary.call_id, None), "the primary scope's call");
    assert_eq!(event.attempts, primary.attempts + fallback.attempts, "attempts of both scopes: {event:?}");
    assert_eq!(event.budget_attempts, primary.budget_attempts + fallback.budget_attempts, "{event:?}");
    assert_eq!(event.reasks, primary.reasks + fallback.reasks, "{event:?}");
    assert_eq!(event.waited, primary.waited + fallback.waited, "{event:?}");
    let reasons: Vec<_> = primary.reasons.iter().chain(&fallback.reasons).cloned().collect();
    assert_eq!(event.reasons, reasons, "the primary's reasons, then the fallback's");
    assert_eq!(event.started, before, "the call started in the primary scope");
    assert_eq!(event.started.saturating_add(event.elapsed), after, "elapsed runs from the primary's start to the end");
    assert_eq!(event.elapsed, primary.elapsed + fallback.elapsed, "{event:?}");
}

#[tokio::test(start_paused = true)]
async fn a_call_that_falls_back_emits_one_event_with_the_primary_scope_and_the_fallback_result() {
    let (primary, fallback) = parts(|_| {}).await;
    assert_eq!((primary.result, primary.attempts, fallback.result, fallback.attempts), (CallResult::RateLimited, 2, CallResult::Ok, 1));
    let s = setup(false);
    primary_plan(&s);
    let (result, event, before, after) = one_call(&s, "chat").await;
    result.unwrap();
    assert_eq!(s.upstream.sent(), ["s1", "s1", "s9"]);
    assert_eq!((event.result, event.attempts), (CallResult::Ok, 3));
    assert_merged(&event, &primary, &fallback, before, after);
    let ids: Vec<u64> = s.telemetry.attempts().iter().map(|a| a.call_id).collect();
    assert_eq!(ids, [event.call_id; 3], "every attempt of both scopes belongs to the one call event");
}

#[tokio::test(start_paused = true)]
async fn a_fallback_that_refuses_the_call_before_it_starts_leaves_the_primary_its_error_and_event() {
    // `backup` serves embeddings only: a chat call it is handed never starts there.
    let mut backup = scope("backup", "s9", None);
    backup.kinds = vec![gateway_core::request::Kind::Embeddings];
    let telemetry = Arc::new(Collector::new());
    let clock = Arc::new(TokioClock::new());
    let gates = Arc::new(MemoryGates::new(clock.clone()));
    let client = GatewayClient::builder()
        .scope(scope("chat", "s1", Some("backup")))
        .scope(backup)
        .gates(gates.clone())
        .upstream(ScriptedUpstream::new())
        .telemetry(telemetry.clone())
        .clock(clock)
        .build()
        .unwrap();
    let policy = scope("chat", "s1", None);
    gates.apply(&SourceKey::new("chat", "s1"), &policy.gate_params(0).unwrap(), GateOp::ForceOpen).await.unwrap();
    let error = client.call("chat", &chat()).await.unwrap_err();
    assert!(matches!(error, CallError::CircuitOpen { .. }), "the primary's error, as its event says: {error}");
    let calls = telemetry.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!((calls[0].scope.as_str(), calls[0].result), ("chat", CallResult::CircuitOpen));
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_fallback_fails_too_emits_one_event() {
    let backup_pushes_back = |s: &Setup| s.upstream.always("s9", Step::RateLimited(Some(Duration::from_secs(86_400))));
    let (primary, fallback) = parts(backup_pushes_back).await;
    assert_eq!(
        (primary.result, primary.attempts, fallback.result, fallback.attempts),
        (CallResult::RateLimited, 2, CallResult::RateLimited, 1)
    );
    let s = setup(true);
    primary_plan(&s);
    backup_pushes_back(&s);
    let (result, event, before, after) = one_call(&s, "chat").await;
    let error = result.unwrap_err();
    let CallError::FallbackFailed { primary: first, fallback: second, .. } = &error else { panic!("{error}") };
    assert!(matches!(**first, CallError::RateLimited { .. }) && matches!(**second, CallError::RateLimited { .. }), "{error}");
    assert_eq!(error.result(), Some(event.result));
    assert_eq!(s.upstream.sent(), ["s1", "s1", "s9"], "backup's own fallback (chat) is not tried");
    assert_eq!((event.result, event.attempts), (CallResult::RateLimited, 3));
    assert_merged(&event, &primary, &fallback, before, after);
}

#[tokio::test(start_paused = true)]
async fn a_request_no_source_of_the_scope_can_carry_falls_back_to_one_that_can() {
    let clock = Arc::new(TokioClock::new());
    let upstream = ScriptedUpstream::new();
    let anthropic = json!({"breaker": {"fail_threshold": 5, "cooldown_s": 60}, "fallback": "backup",
                           "sources": {"s1": {"timeout_s": 30, "protocol": "anthropic"}}});
    let client = GatewayClient::builder()
        .scope(serde_json::from_value::<ScopeConfig>(anthropic).unwrap().resolve("chat").unwrap())
        .scope(scope("backup", "s9", None))
        .gates(Arc::new(MemoryGates::new(clock.clone())))
        .upstream(upstream.clone())
        .clock(clock)
        .build()
        .unwrap();
    upstream.always("s9", Step::Ok);
    // Two choices: Anthropic answers one, so s1 cannot carry it; the OpenAI fallback can.
    client.call("chat", &chat().with("n", 2)).await.unwrap();
    assert_eq!(upstream.sent(), ["s9"]);
    // Without a fallback the refusal names the source, its protocol and why.
    let lone = json!({"breaker": {"fail_threshold": 5, "cooldown_s": 60}, "sources": {"s1": {"timeout_s": 30, "protocol": "anthropic"}}});
    let lone = GatewayClient::builder()
        .scope(serde_json::from_value::<ScopeConfig>(lone).unwrap().resolve("lone").unwrap())
        .upstream(upstream.clone())
        .build()
        .unwrap();
    let error = lone.call("lone", &chat().with("n", 2)).await.unwrap_err();
    assert!(matches!(error, CallError::NoSourceCarries { .. }) && error.to_string().contains("s1 (anthropic): n > 1"), "{error}");
}
