//! `GatewayClient::reload` in virtual time: a reload under load loses no call and a call in
//! flight finishes on the configuration it started with; a refused reload changes nothing; a
//! removed source stops being picked and its gate is released; an unchanged source keeps its
//! gate, health and account; a source whose key changed starts a new account.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use gateway_client::{BuildError, GatewayClient, Preset};
use gateway_core::aimd::AccountReading;
use gateway_core::breaker::CircuitState;
use gateway_core::outcome::OutcomeClass::Transient;
use gateway_core::ports::{BreakerGate, PacerGate, SourceKey};
use gateway_memory::MemoryPacer;
use gateway_mock::Step;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::{Harness, chat, sources};

/// Two keyed sources (accounts named after their keys).
fn keyed(keys: &[(&str, &str)]) -> gateway_core::policy::ScopePolicy {
    let mut listed = serde_json::Map::new();
    for (name, key) in keys {
        listed.insert((*name).to_owned(), json!({"timeout_s": 30, "api_key": key}));
    }
    support::scope(json!({"breaker": {"fail_threshold": 5, "cooldown_s": 60}, "sources": listed}))
}

#[tokio::test(start_paused = true)]
async fn a_reload_under_load_loses_no_call_and_calls_in_flight_finish_on_their_configuration() {
    let h = Harness::new(sources(2, json!({})), Preset::Default);
    h.upstream.plan("s1", |_| (Step::Ok, Duration::from_secs(2)));
    h.upstream.plan("s2", |_| (Step::Ok, Duration::from_secs(2)));
    let client = Arc::new(h.client);
    let calls: Vec<_> = (0..40)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100 * i)).await;
                client.call("chat", &chat()).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // s1 goes, s3 comes: the calls on s1 now finish there, later ones never go to it.
    let reloaded = client.reload(vec![sources(3, json!({})).without("s1")]).await.unwrap();
    assert_eq!(
        (reloaded.removed.clone(), reloaded.added.clone(), reloaded.kept.clone()),
        (vec!["chat.s1".to_owned()], vec!["chat.s3".to_owned()], vec!["chat.s2".to_owned()])
    );
    let sent_before = h.upstream.sent().len();
    let mut on_s1 = 0;
    for call in calls {
        let answer = call.await.unwrap().unwrap();
        on_s1 += usize::from(answer.source() == Some("s1"));
    }
    assert!(on_s1 > 0, "calls in flight on s1 at the reload finished there");
    let after: Vec<String> = h.upstream.sent()[sent_before..].to_vec();
    assert!(!after.is_empty() && after.iter().all(|s| s != "s1"), "no attempt starts on s1 after the reload: {after:?}");
    assert!(after.iter().any(|s| s == "s3"), "the new source is picked: {after:?}");
}

trait Without {
    fn without(self, source: &str) -> Self;
}

impl Without for gateway_core::policy::ScopePolicy {
    fn without(mut self, source: &str) -> Self {
        self.sources.retain(|s| s.name != source);
        self
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_reload_changes_nothing() {
    let h = Harness::new(sources(2, json!({})), Preset::Default);
    h.open("s1").await;
    let bad = sources(1, json!({"fallback": "nowhere"}));
    let error = h.client.reload(vec![bad]).await.unwrap_err();
    assert_eq!(error, BuildError::UnknownFallback { scope: "chat".into(), fallback: "nowhere".into(), known: "chat".into() });
    assert_eq!(error.to_string(), "chat.fallback: no scope \"nowhere\" (configured: chat)");
    assert_eq!(h.client.reload(Vec::new()).await.unwrap_err(), BuildError::NoScope);
    // The old configuration serves on: both sources, s1 still open.
    assert_eq!(h.client.health("chat").len(), 2);
    assert_eq!(h.gates.snapshot(&h.key("s1")).unwrap().state, CircuitState::Open);
    assert_eq!(h.call().await.unwrap().source(), Some("s2"));
}

#[tokio::test(start_paused = true)]
async fn an_unchanged_source_keeps_its_gate_and_health_and_a_removed_one_is_released() {
    let h = Harness::new(sources(3, json!({})), Preset::Default);
    h.open("s1").await;
    h.upstream.script("s2", vec![Step::Fail(Transient)]);
    for _ in 0..4 {
        h.call().await.unwrap();
    }
    let health = h.client.health("chat");
    assert!(health[1].1 < 1.0, "{health:?}");
    h.open("s3").await;
    let reloaded = h.client.reload(vec![sources(3, json!({})).without("s3")]).await.unwrap();
    assert_eq!(reloaded.removed, ["chat.s3"]);
    assert_eq!(h.gates.snapshot(&h.key("s1")).unwrap().state, CircuitState::Open, "s1's gate stays");
    assert_eq!(h.client.health("chat"), health[..2].to_vec(), "health stays");
    assert!(h.gates.snapshot(&h.key("s3")).is_none(), "s3's gate is released");
    // Back again, s3 starts closed.
    h.client.reload(vec![sources(3, json!({}))]).await.unwrap();
    assert_eq!(h.gates.read(&h.key("s3")).await.unwrap().state, CircuitState::Closed);
    assert_eq!(h.client.health("chat")[2].1, 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_changed_key_starts_a_new_account_and_a_changed_source_a_new_gate() {
    let pacer = Arc::new(MemoryPacer::new(Arc::new(gateway_client::TokioClock::new())));
    let gates = Arc::new(gateway_memory::MemoryGates::new(Arc::new(gateway_client::TokioClock::new())));
    let upstream = gateway_mock::ScriptedUpstream::new();
    let first = keyed(&[("s1", "sk-one-0000"), ("s2", "sk-two-0000")]);
    let accounts: Vec<String> = first.sources.iter().map(|s| s.account.clone()).collect();
    let client = GatewayClient::builder()
        .scope(first.clone())
        .gates(gates.clone())
        .pacer(pacer.clone())
        .upstream(upstream.clone())
        .seed(3)
        .build()
        .unwrap();
    for _ in 0..20 {
        client.call("chat", &chat()).await.unwrap();
    }
    let params = Preset::Default.pacer(&first).unwrap();
    let learned = |account: &str| {
        let pacer = pacer.clone();
        let key = SourceKey::new("chat", account);
        async move { pacer.read(&key, &params).await.unwrap() }
    };
    let fresh = AccountReading { limit: 8.0, inflight: 0, learned: None };
    let (before_s1, before_s2) = (learned(&accounts[0]).await, learned(&accounts[1]).await);
    assert!(before_s1.limit > 8.0 && before_s2.limit > 8.0, "both accounts learned: {before_s1:?}, {before_s2:?}");
    gates.apply(&SourceKey::new("chat", "s1"), &first.gate_params(0).unwrap(), gateway_core::breaker::GateOp::ForceOpen).await.unwrap();
    // s1 gets another key: a new account, a new gate; s2 is unchanged.
    let second = keyed(&[("s1", "sk-new-0000"), ("s2", "sk-two-0000")]);
    let reloaded = client.reload(vec![second.clone()]).await.unwrap();
    assert_eq!((reloaded.changed, reloaded.kept), (vec!["chat.s1".to_owned()], vec!["chat.s2".to_owned()]));
    assert_ne!(second.sources[0].account, accounts[0], "the new key is another account");
    assert_eq!(learned(&second.sources[0].account).await, fresh, "which starts afresh");
    client.call("chat", &chat()).await.unwrap();
    assert_eq!(learned(&accounts[0]).await, before_s1, "the old key's account is left to expire as it was, not forgotten");
    assert_eq!(learned(&accounts[1]).await, before_s2, "s2's account stays");
    assert_eq!(gates.read(&SourceKey::new("chat", "s1")).await.unwrap().state, CircuitState::Closed, "a changed source starts closed");
}

#[tokio::test(start_paused = true)]
async fn what_an_account_heard_carries_over_a_reload_even_from_calls_on_the_old_configuration() {
    let pacer = Arc::new(MemoryPacer::new(Arc::new(gateway_client::TokioClock::new())));
    let upstream = gateway_mock::ScriptedUpstream::new();
    // Each call's first attempt meets a lone 429 (read as noise), the second call's after 500 ms;
    // the retry is answered.
    upstream.plan("s1", |n| match n {
        0 => (Step::RateLimited(None), Duration::ZERO),
        2 => (Step::RateLimited(None), Duration::from_millis(500)),
        _ => (Step::Ok, Duration::ZERO),
    });
    let policy = keyed(&[("s1", "sk-one-0000")]);
    let client = Arc::new(GatewayClient::builder().scope(policy.clone()).pacer(pacer).upstream(upstream.clone()).seed(3).build().unwrap());
    let heard = |client: Arc<GatewayClient>| async move {
        let overview = client.overview(None).await.unwrap();
        let account = &overview[0].accounts[0];
        (account.rate_limited.background, account.rate_limited.own)
    };
    client.call("chat", &chat()).await.unwrap();
    assert_eq!(heard(client.clone()).await, (1, 0));
    // A call on the configuration before the reload meets its 429 after it.
    let running = tokio::spawn({
        let client = client.clone();
        async move { client.call("chat", &chat()).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut again = policy.clone();
    again.sources[0].timeout = Duration::from_secs(20);
    let reloaded = client.reload(vec![again]).await.unwrap();
    assert_eq!(reloaded.kept, ["chat.s1"], "a new timeout keeps the source: {reloaded:?}");
    running.await.unwrap().unwrap();
    assert_eq!(heard(client.clone()).await, (2, 0), "the old configuration's 429 reached the account the new one reads");
}
