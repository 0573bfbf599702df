//! An account's limit belongs to the provider key, not to a tenant (SPEC §4, §6), in virtual
//! time: with `per_tenant` isolation every tenant's calls count against one learned limit per
//! account, a 429's pushback keeps every tenant away, and the calls waiting for the account are
//! served first come, first served within a tenant and by tier weight between tenants.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use async_trait::async_trait;
use gateway_client::{GatewayClient, TokioClock};
use gateway_core::policy::ScopeConfig;
use gateway_core::ports::Upstream;
use gateway_core::request::{Attempt, Message, Request, Response};
use gateway_core::time::Clock;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::sources;

/// Answers every request after 100 ms.
struct Slow;

#[async_trait]
impl Upstream for Slow {
    async fn send(&self, _source: &str, _request: &Request) -> Attempt {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Attempt::success(Response::chat_text("ok", None), "http_200")
    }
}

fn client(extra: serde_json::Value) -> (GatewayClient, Arc<TokioClock>) {
    let clock = Arc::new(TokioClock::new());
    let client = GatewayClient::builder().scope(sources(1, extra)).upstream(Arc::new(Slow)).clock(clock.clone()).seed(5).build().unwrap();
    (client, clock)
}

fn said(who: &str) -> Request {
    Request::chat(vec![Message::user(who)])
}

const TIERED: fn() -> serde_json::Value = || {
    json!({
        "isolation": "per_tenant",
        "concurrency": 1,
        "quota_full": "wait",
        "tiers": {"gold": {"weight": 4}, "bronze": {}},
        "tenants": {"gold": "gold", "bronze": "bronze"}
    })
};

#[tokio::test(start_paused = true)]
async fn every_tenant_counts_against_one_limit_per_account() {
    let (client, _) = client(json!({"isolation": "per_tenant", "concurrency": 2}));
    let client = Arc::new(client);
    let mut calls = Vec::new();
    for who in ["bronze", "bronze", "gold"] {
        let client = client.clone();
        calls.push(tokio::spawn(async move { client.call_as("chat", who, &said(who)).await.map(|_| tokio::time::Instant::now()) }));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(client.inflight("chat"), 2, "the account's limit (2) holds across tenants: gold waits");
    let start = tokio::time::Instant::now() - Duration::from_millis(50);
    let mut ends = Vec::new();
    for call in calls {
        ends.push(call.await.unwrap().unwrap().duration_since(start));
    }
    // Gold started 2 ms in and was served when a slot freed, after 100 ms of waiting.
    assert!(ends[2] >= Duration::from_millis(150), "gold was served when a slot freed: {ends:?}");
}

/// 20 bronze calls at once, then, 50 ms in, 3 calls of `tenant`: when each of `tenant`'s calls
/// ended, and when the last bronze one did, from the start.
async fn beside_a_bronze_flood(extra: serde_json::Value, tenant: &'static str) -> (Vec<Duration>, Duration) {
    let (client, clock) = client(extra);
    let client = Arc::new(client);
    let started = clock.now();
    let spawn = |who: &'static str| {
        let (client, clock) = (client.clone(), clock.clone());
        tokio::spawn(async move {
            client.call_as("chat", who, &said(who)).await.unwrap();
            clock.now().saturating_since(started)
        })
    };
    let bronze: Vec<_> = (0..20).map(|_| spawn("bronze")).collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let theirs: Vec<_> = (0..3).map(|_| spawn(tenant)).collect();
    let mut ends = Vec::new();
    for call in theirs {
        ends.push(call.await.unwrap());
    }
    let mut last = Duration::ZERO;
    for call in bronze {
        last = last.max(call.await.unwrap());
    }
    (ends, last)
}

#[tokio::test(start_paused = true)]
async fn gold_is_served_ahead_of_a_bronze_flood_by_its_weight() {
    let (gold, last) = beside_a_bronze_flood(TIERED(), "gold").await;
    // One slot of 100 ms at a time: first come, first served, gold would wait for the 20 bronze
    // calls before it (2.1 s and more); by weight it waits for one bronze at most.
    assert!(gold.iter().all(|d| *d <= Duration::from_millis(500)), "gold finished at {gold:?}");
    assert!(last >= Duration::from_millis(2300), "one slot at a time: {last:?}");
}

#[tokio::test(start_paused = true)]
async fn without_tiers_tenants_share_the_account_one_to_one() {
    let (acme, _) = beside_a_bronze_flood(json!({"isolation": "per_tenant", "concurrency": 1}), "acme").await;
    // Alternating with bronze: acme's three calls end by the seventh slot, not after bronze's 20.
    assert!(acme.iter().all(|d| *d <= Duration::from_millis(800)), "{acme:?}");
    assert!(acme.iter().any(|d| *d >= Duration::from_millis(450)), "but not all at once ahead of bronze: {acme:?}");
}

#[test]
fn a_tier_weight_out_of_range_is_refused_by_its_key() {
    for weight in [0, 1001] {
        let mut config = TIERED();
        config["tiers"]["gold"]["weight"] = json!(weight);
        config["sources"] = json!({"s1": {"timeout_s": 30}});
        config["breaker"] = json!({"fail_threshold": 5, "cooldown_s": 60});
        let error = serde_json::from_value::<ScopeConfig>(config).unwrap().resolve("chat").unwrap_err();
        assert_eq!(error.key, "chat.tiers.gold.weight", "{error}");
        assert!(error.to_string().contains("1..=1000"), "{error}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_tenant_waiting_for_its_own_quota_holds_no_other_tenant_back() {
    // Per tenant, s1 allows one call in flight (each tenant's own quota); the account has room.
    let extra = json!({"isolation": "per_tenant", "concurrency": 8, "sources": {"s1": {"timeout_s": 30, "max_concurrency": 1}}});
    let (client, clock) = client(extra);
    let client = Arc::new(client);
    let started = clock.now();
    let mut bronze = Vec::new();
    for _ in 0..3 {
        let client = client.clone();
        bronze.push(tokio::spawn(async move { client.call_as("chat", "bronze", &said("bronze")).await.unwrap() }));
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    client.call_as("chat", "gold", &said("gold")).await.unwrap();
    let done = clock.now().saturating_since(started);
    assert!(done <= Duration::from_millis(120), "gold went at once, beside bronze's queue for its own quota: {done:?}");
    for call in bronze {
        call.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_not_woken_to_be_refused_after_the_last_place_went() {
    // One account of 2 places (the scope's concurrency), six calls at once, each 100 ms long.
    let clock = Arc::new(TokioClock::new());
    let pacer = Arc::new(support::SpyPacer::new(clock.clone(), Duration::ZERO));
    let scope = sources(1, json!({"concurrency": 2}));
    let client = GatewayClient::builder().scope(scope).upstream(Arc::new(Slow)).pacer(pacer.clone()).clock(clock).seed(5).build().unwrap();
    let client = Arc::new(client);
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call("chat", &said("hi")).await.map(|_| tokio::time::Instant::now()) })
        })
        .collect();
    let start = tokio::time::Instant::now();
    // The calls that came while both places were taken were refused, and queued.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let on_arrival = pacer.refused();
    assert!(on_arrival >= 1);
    let mut ends = Vec::new();
    for call in calls {
        ends.push(call.await.unwrap().unwrap().duration_since(start));
    }
    ends.sort();
    assert_eq!(ends, [100, 100, 200, 200, 300, 300].map(Duration::from_millis), "two at a time, each pair as the last ended");
    // When two places freed, the two next waiters took them, and the one that took the last
    // woke nobody (only a release makes room): no waiter was woken to be refused.
    assert_eq!(pacer.refused(), on_arrival, "no refusal after the arrivals");
}

#[tokio::test(start_paused = true)]
async fn the_places_a_burst_frees_are_taken_at_once_not_one_admission_after_another() {
    // One account of 4 places, eight calls at once, each 100 ms long; an admission takes 5 ms
    // (a round trip, as on Redis). The four places the first calls free together go to the four
    // waiters together: their admissions overlap, and they all end 5 ms + 100 ms later, not one
    // admission after another (110, 115, 120 and 125 ms after the frees).
    let clock = Arc::new(TokioClock::new());
    let pacer = Arc::new(support::SpyPacer::new(clock.clone(), Duration::ZERO).acquiring_in(Duration::from_millis(5)));
    let scope = sources(1, json!({"concurrency": 4}));
    let client = GatewayClient::builder().scope(scope).upstream(Arc::new(Slow)).pacer(pacer.clone()).clock(clock).seed(5).build().unwrap();
    let client = Arc::new(client);
    let start = tokio::time::Instant::now();
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call("chat", &said("hi")).await.map(|_| tokio::time::Instant::now()) })
        })
        .collect();
    let mut ends = Vec::new();
    for call in calls {
        ends.push(call.await.unwrap().unwrap().duration_since(start));
    }
    ends.sort();
    let (first, second) = ends.split_at(4);
    assert!(first.iter().all(|end| *end == first[0]), "the first four together: {ends:?}");
    assert!(second.iter().all(|end| *end == second[0]), "the four waiters together: {ends:?}");
    assert_eq!(second[0] - first[0], Duration::from_millis(105), "one admission after the frees: {ends:?}");
}
