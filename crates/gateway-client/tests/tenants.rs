//! Tenant isolation (SPEC §11) in virtual time: with `per_tenant` one tenant's failures open
//! its own gates only, its quota is its own, and its process-local state is bounded by
//! `max_tenants` and dropped after `tenant_idle_s`; with `shared` one tenant's failures cost the
//! others. Tenant names that cannot be keys are refused by name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use async_trait::async_trait;
use gateway_client::{CallError, Collector, GatewayClient, TenantRefusal, TokioClock};
use gateway_core::breaker::CircuitState;
use gateway_core::outcome::OutcomeClass;
use gateway_core::ports::{SourceKey, Upstream};
use gateway_core::request::{Attempt, Message, Request, Response};
use gateway_memory::{MemoryGates, MemoryQuota};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::sources;

/// Fails every request whose message says `bronze` with a timeout; answers the rest.
struct ByTenant;

#[async_trait]
impl Upstream for ByTenant {
    async fn send(&self, _source: &str, request: &Request) -> Attempt {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if request.texts().next() == Some("bronze") {
            Attempt::failure(OutcomeClass::Transient, "timeout", None)
        } else {
            Attempt::success(Response::chat_text("ok", None), "http_200")
        }
    }
}

struct Setup {
    client: GatewayClient,
    gates: Arc<MemoryGates>,
    quota: Arc<MemoryQuota>,
}

fn setup(extra: serde_json::Value) -> Setup {
    let clock = Arc::new(TokioClock::new());
    let gates = Arc::new(MemoryGates::new(clock.clone()));
    let quota = Arc::new(MemoryQuota::new(clock.clone()));
    let client = GatewayClient::builder()
        .scope(sources(1, extra))
        .gates(gates.clone())
        .quota(quota.clone())
        .upstream(Arc::new(ByTenant))
        .telemetry(Arc::new(Collector::new()))
        .clock(clock)
        .seed(3)
        .build()
        .unwrap();
    Setup { client, gates, quota }
}

fn said(who: &str) -> Request {
    Request::chat(vec![Message::user(who)])
}

fn state(gates: &MemoryGates, key: &SourceKey) -> CircuitState {
    gates.snapshot(key).map_or(CircuitState::Closed, |g| g.state)
}

#[tokio::test(start_paused = true)]
async fn per_tenant_failures_open_only_the_tenants_own_gate() {
    let s = setup(json!({"isolation": "per_tenant"}));
    for _ in 0..3 {
        assert!(s.client.call_as("chat", "bronze", &said("bronze")).await.is_err());
    }
    assert_eq!(state(&s.gates, &SourceKey::new("chat", "s1").with_tenant("bronze")), CircuitState::Open);
    assert_eq!(state(&s.gates, &SourceKey::new("chat", "s1").with_tenant("gold")), CircuitState::Closed);
    assert_eq!(state(&s.gates, &SourceKey::new("chat", "s1")), CircuitState::Closed);
    s.client.call_as("chat", "gold", &said("gold")).await.unwrap();
    s.client.call("chat", &said("untenanted")).await.unwrap();
    assert_eq!(s.client.tenants("chat"), 2);
    let error = s.client.call_as("chat", "bronze", &said("bronze")).await.unwrap_err();
    assert!(matches!(error, CallError::CircuitOpen { .. }), "{error}");
}

#[tokio::test(start_paused = true)]
async fn shared_isolation_lets_one_tenants_failures_cost_the_others() {
    let s = setup(json!({}));
    for _ in 0..3 {
        assert!(s.client.call_as("chat", "bronze", &said("bronze")).await.is_err());
    }
    assert_eq!(state(&s.gates, &SourceKey::new("chat", "s1")), CircuitState::Open);
    let error = s.client.call_as("chat", "gold", &said("gold")).await.unwrap_err();
    assert!(matches!(error, CallError::CircuitOpen { .. }), "{error}");
    assert_eq!(s.client.tenants("chat"), 0, "a shared scope keeps no tenant state");
}

#[tokio::test(start_paused = true)]
async fn per_tenant_quota_is_the_tenants_own() {
    let s = Arc::new(setup(json!({"isolation": "per_tenant", "quota_full": "fail_fast", "sources": {"s1": {"max_concurrency": 1}}})));
    let busy = {
        let s = s.clone();
        tokio::spawn(async move { s.client.call_as("chat", "gold", &said("gold")).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(s.quota.in_flight(&SourceKey::new("chat", "s1").with_tenant("gold")), 1);
    let error = s.client.call_as("chat", "gold", &said("gold")).await.unwrap_err();
    assert!(matches!(error, CallError::AllSourcesExhausted { .. }), "gold's one permit is taken: {error}");
    // silver starts while gold still holds its permit
    s.client.call_as("chat", "silver", &said("silver")).await.unwrap();
    busy.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_the_least_recently_used_idle_tenant_makes_room() {
    let s = Arc::new(setup(json!({"isolation": "per_tenant", "max_tenants": 2, "tenant_idle_s": 60})));
    let running: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|t| {
            let s = s.clone();
            tokio::spawn(async move { s.client.call_as("chat", t, &said(t)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let error = s.client.call_as("chat", "c", &said("c")).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "scope \"chat\" refuses tenant \"c\": the scope keeps max_tenants tenants and every one has a call in flight (raise max_tenants)"
    );
    for call in running {
        call.await.unwrap().unwrap();
    }
    s.client.call_as("chat", "b", &said("b")).await.unwrap(); // b is now more recent than a
    // a and b are idle, not for 60 s yet: the least recently used (a) makes room for c, then b for d
    s.client.call_as("chat", "c", &said("c")).await.unwrap();
    s.client.call_as("chat", "d", &said("d")).await.unwrap();
    assert_eq!(s.client.tenants("chat"), 2);
    let kept: Vec<Option<String>> = s.client.status(None).await.unwrap().into_iter().map(|x| x.tenant).collect();
    assert!(kept.contains(&Some("c".into())) && kept.contains(&Some("d".into())) && !kept.contains(&Some("a".into())), "{kept:?}");
    // idle past tenant_idle_s: expired entries of e's shard go first, then the least recent
    tokio::time::sleep(Duration::from_secs(61)).await;
    s.client.call_as("chat", "e", &said("e")).await.unwrap();
    assert!(s.client.tenants("chat") <= 2);
    assert_eq!(s.client.inflight("chat"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_churn_of_made_up_tenants_locks_out_neither_a_pinned_tenant_nor_a_new_one() {
    let clock = Arc::new(TokioClock::new());
    let client = GatewayClient::builder()
        .scope(sources(1, json!({"isolation": "per_tenant", "max_tenants": 100, "tiers": {"gold": {}}, "tenants": {"acme": "gold"}})))
        .pinned_tenants(["Bound-Key-Tenant", "not a name"])
        .upstream(Arc::new(ByTenant))
        .telemetry(Arc::new(Collector::new()))
        .clock(clock)
        .seed(3)
        .build()
        .unwrap();
    for i in 0..10_000 {
        let tenant = format!("made-up-{i}");
        client.call_as("chat", &tenant, &said("x")).await.unwrap();
    }
    assert_eq!(client.tenants("chat"), 100, "the cap holds through the churn");
    client.call_as("chat", "bound-key-tenant", &said("x")).await.unwrap();
    client.call_as("chat", "acme", &said("x")).await.unwrap();
    client.call_as("chat", "brand-new", &said("x")).await.unwrap();
    assert_eq!(client.tenants("chat"), 102, "pinned tenants are on top of the cap");
    for i in 0..200 {
        client.call_as("chat", &format!("again-{i}"), &said("x")).await.unwrap();
    }
    let kept: Vec<Option<String>> = client.status(None).await.unwrap().into_iter().map(|x| x.tenant).collect();
    assert!(kept.contains(&Some("bound-key-tenant".into())) && kept.contains(&Some("acme".into())), "pinned tenants are never evicted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_newcomers_at_the_cap_all_find_room_while_idle_partitions_remain() {
    /// Answers at once.
    struct Quick;
    #[async_trait]
    impl Upstream for Quick {
        async fn send(&self, _source: &str, _request: &Request) -> Attempt {
            Attempt::success(Response::chat_text("ok", None), "http_200")
        }
    }
    let client = Arc::new(
        GatewayClient::builder()
            .scope(sources(1, json!({"isolation": "per_tenant", "max_tenants": 100})))
            .upstream(Arc::new(Quick))
            .telemetry(Arc::new(Collector::new()))
            .build()
            .unwrap(),
    );
    for i in 0..100 {
        client.call_as("chat", &format!("old-{i}"), &said("x")).await.unwrap();
    }
    let newcomers: Vec<_> = (0..32)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move { client.call_as("chat", &format!("new-{i}"), &said("x")).await })
        })
        .collect();
    for call in newcomers {
        call.await.unwrap().unwrap();
    }
    assert!(client.tenants("chat") <= 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_calls_cannot_pass_the_tenant_cap() {
    /// Holds every call for a while, so that every admitted tenant has a call in flight.
    struct Slow;
    #[async_trait]
    impl Upstream for Slow {
        async fn send(&self, _source: &str, _request: &Request) -> Attempt {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Attempt::success(Response::chat_text("ok", None), "http_200")
        }
    }
    let client = Arc::new(
        GatewayClient::builder()
            .scope(sources(1, json!({"isolation": "per_tenant", "max_tenants": 8})))
            .upstream(Arc::new(Slow))
            .telemetry(Arc::new(Collector::new()))
            .build()
            .unwrap(),
    );
    let calls: Vec<_> = (0..64)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move { client.call_as("chat", &format!("t{i}"), &said("x")).await })
        })
        .collect();
    let mut served = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(_) => served += 1,
            Err(error) => assert!(matches!(error, CallError::TenantRefused { reason: TenantRefusal::Full, .. }), "{error}"),
        }
    }
    assert_eq!(served, 8, "exactly max_tenants tenants held a call at once");
}

#[tokio::test(start_paused = true)]
async fn a_tenant_name_that_cannot_be_a_key_is_refused_by_name() {
    // checked in shared scopes too: the name reaches telemetry and metric labels
    for isolation in ["per_tenant", "shared"] {
        let s = setup(json!({"isolation": isolation}));
        for bad in ["", "a:b", "gold tier", &"x".repeat(65)] {
            let error = s.client.call_as("chat", bad, &said("x")).await.unwrap_err();
            let CallError::TenantRefused { tenant, reason, .. } = &error else { panic!("{error}") };
            assert_eq!((tenant.as_str(), *reason), (gateway_client::echoed(bad).as_str(), TenantRefusal::Malformed));
            assert!(error.to_string().contains("1 to 64 characters"), "{error}");
            assert_eq!(error.result(), None, "a refused call never started");
        }
        let huge = "y".repeat(10_000);
        let error = s.client.call_as("chat", &huge, &said("x")).await.unwrap_err();
        assert!(error.to_string().contains(&format!("\"{}…\"", "y".repeat(64))), "the name is cut to 64 characters");
        assert!(error.to_string().len() < 400, "{error}");
    }
}

#[tokio::test(start_paused = true)]
async fn tenant_names_are_one_tenant_whatever_their_case() {
    let s = setup(json!({"isolation": "per_tenant"}));
    for _ in 0..3 {
        assert!(s.client.call_as("chat", "Bronze", &said("bronze")).await.is_err());
    }
    let error = s.client.call_as("chat", "BRONZE", &said("bronze")).await.unwrap_err();
    assert!(matches!(error, CallError::CircuitOpen { .. }), "{error}");
    assert_eq!(s.client.tenants("chat"), 1);
    assert_eq!(state(&s.gates, &SourceKey::new("chat", "s1").with_tenant("bronze")), CircuitState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_scope_that_rejects_unknown_tenants_needs_every_call_to_name_one() {
    let s = setup(json!({"isolation": "per_tenant", "unknown_tenant": "reject", "tiers": {"gold": {}}, "tenants": {"acme": "gold"}}));
    s.client.call_as("chat", "ACME", &said("acme")).await.unwrap();
    let error = s.client.call("chat", &said("nobody")).await.unwrap_err();
    assert!(matches!(error, CallError::TenantRefused { reason: TenantRefusal::Missing, .. }), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_tenants_tier_sets_its_gates_breaker_and_unknown_tenants_can_be_refused() {
    let tiered = json!({
        "isolation": "per_tenant",
        "unknown_tenant": "reject",
        "tiers": {"gold": {"breaker": {"cooldown_s": 30}}, "bronze": {"breaker": {"cooldown_s": 120}}},
        "tenants": {"gold": "gold", "bronze": "bronze"}
    });
    let s = setup(tiered);
    // bronze's prompts fail: its gate opens for the bronze tier's 120 s, not the scope's 60 s
    for _ in 0..3 {
        assert!(s.client.call_as("chat", "bronze", &said("bronze")).await.is_err());
    }
    let bronze = s.gates.snapshot(&SourceKey::new("chat", "s1").with_tenant("bronze")).unwrap();
    assert_eq!(bronze.state, CircuitState::Open);
    let error = s.client.call_as("chat", "bronze", &said("bronze")).await.unwrap_err();
    let CallError::CircuitOpen { retry_after, .. } = error else { panic!("{error}") };
    assert!(retry_after > Duration::from_secs(110), "{retry_after:?}");
    s.client.call_as("chat", "gold", &said("gold")).await.unwrap();
    let error = s.client.call_as("chat", "initech", &said("x")).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "scope \"chat\" refuses tenant \"initech\": the tenant has no tier and the scope rejects unknown tenants (unknown_tenant = \"reject\")"
    );
}
