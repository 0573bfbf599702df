//! Fallback scopes (SPEC §11): a call that ends `CircuitOpen` or `AllSourcesExhausted` in its
//! scope is tried once in the scope's fallback; if that fails too the error carries both
//! chains. Other endings never fall back, and a fallback does not fall back again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use gateway_client::{BuildError, CallError, Collector, GatewayClient, TokioClock};
use gateway_core::outcome::OutcomeClass::*;
use gateway_core::policy::ScopeConfig;
use gateway_core::ports::{BreakerGate, GateKey};
use gateway_core::telemetry::CallResult;
use gateway_memory::MemoryGates;
use serde_json::json;
use std::sync::Arc;
use support::{FakeUpstream, Step, chat};

struct Setup {
    client: GatewayClient,
    upstream: Arc<FakeUpstream>,
    gates: Arc<MemoryGates>,
    telemetry: Arc<Collector>,
}

fn scope(name: &str, source: &str, fallback: Option<&str>) -> gateway_core::policy::ScopePolicy {
    let mut config = json!({"breaker": {"fail_threshold": 5, "cooldown_s": 60}, "sources": {source: {"timeout_s": 30}}});
    if let Some(fallback) = fallback {
        config["fallback"] = json!(fallback);
    }
    serde_json::from_value::<ScopeConfig>(config).unwrap().resolve(name).unwrap()
}

fn setup(backup_falls_back: bool) -> Setup {
    let clock = Arc::new(TokioClock::new());
    let gates = Arc::new(MemoryGates::new(clock.clone()));
    let upstream = FakeUpstream::new();
    let telemetry = Arc::new(Collector::new());
    let client = GatewayClient::builder()
        .scope(scope("chat", "s1", Some("backup")))
        .scope(scope("backup", "s9", backup_falls_back.then_some("chat")))
        .gates(gates.clone())
        .upstream(upstream.clone())
        .telemetry(telemetry.clone())
        .clock(clock)
        .seed(2)
        .build()
        .unwrap();
    Setup { client, upstream, gates, telemetry }
}

async fn open(s: &Setup, scope: &str, source: &str) {
    let policy = self::scope(scope, source, None);
    s.gates.force_open(&GateKey::new(scope, source), &policy.gate_params(0).unwrap()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_open_scope_falls_back_once_and_the_fallback_answers() {
    let s = setup(false);
    s.upstream.always("s9", Step::Ok);
    open(&s, "chat", "s1").await;
    s.client.call("chat", &chat()).await.unwrap();
    assert_eq!(s.upstream.sent(), ["s9"]);
    let results: Vec<(String, CallResult)> = s.telemetry.calls().into_iter().map(|c| (c.scope, c.result)).collect();
    assert_eq!(results, [("chat".to_owned(), CallResult::CircuitOpen), ("backup".to_owned(), CallResult::Ok)]);
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
    assert_eq!(s.telemetry.calls().len(), 2, "backup's own fallback (chat) is not tried: no loop");
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
    let error = GatewayClient::builder().scope(scope("chat", "s1", Some("backup"))).upstream(FakeUpstream::new()).build().err().unwrap();
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
