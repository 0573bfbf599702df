//! The exposition: a fixed sequence of events rendered and pinned with an `insta` snapshot; a
//! client driven through failures, per-tenant gates and an open circuit, scraped and parsed
//! with a Prometheus text parser; the tenant label cap.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use gateway_client::{GatewayClient, TokioClock};
use gateway_core::breaker::{Cause, CircuitState, Transition};
use gateway_core::outcome::OutcomeClass;
use gateway_core::policy::ScopeConfig;
use gateway_core::ports::{SourceKey, Telemetry, Upstream};
use gateway_core::request::{Attempt, Message, Request, Response};
use gateway_core::telemetry::{AttemptEvent, CallEvent, CallResult, GateEvent};
use gateway_core::time::Timestamp;
use gateway_memory::{MemoryGates, MemoryQuota};
use gateway_metrics::Metrics;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

fn attempt(key: SourceKey, class: OutcomeClass) -> AttemptEvent {
    AttemptEvent {
        key,
        call_id: 1,
        started: Timestamp::from_millis(0),
        class,
        detail: "x".into(),
        latency: Duration::from_millis(300),
        retry_after: None,
        consumed_budget: true,
        probe: false,
        admitted_in: CircuitState::Closed,
        incarnation: 7,
        health: 0.8,
        aimd_limit: Some(8.5),
        usage: (class == OutcomeClass::Success).then_some(gateway_core::request::Usage { prompt_tokens: 12, completion_tokens: 30 }),
    }
}

#[test]
fn the_exposition_of_a_fixed_sequence() {
    let metrics = Metrics::new(10);
    let gold = SourceKey::new("chat", "s1").with_tenant("gold");
    metrics.attempt(&attempt(gold.clone(), OutcomeClass::Success));
    metrics.attempt(&attempt(gold.clone(), OutcomeClass::Transient));
    metrics.attempt(&attempt(SourceKey::new("chat", "s2"), OutcomeClass::RateLimited));
    metrics.gate(&GateEvent {
        key: gold,
        at: Timestamp::from_millis(5),
        transition: Transition { from: CircuitState::Closed, to: CircuitState::Open, cause: Cause::RateChannel },
        incarnation: 7,
        epoch: 1,
        retry_after: Duration::from_secs(60),
    });
    metrics.call(&CallEvent {
        scope: "chat".into(),
        tenant: Some("gold".into()),
        call_id: 1,
        started: Timestamp::from_millis(0),
        result: CallResult::Ok,
        attempts: 2,
        budget_attempts: 2,
        reasks: 0,
        reasons: Vec::new(),
        waited: Duration::ZERO,
        elapsed: Duration::from_millis(1200),
    });
    let counts = gateway_metrics::BackendCounts {
        degraded: true,
        outages: 1,
        local_admissions: 12,
        failed_closed: 0,
        dropped_records: 3,
        background_dropped: 1,
    };
    metrics.backend(counts);
    // A counter catches up with its total (and never goes back).
    metrics.backend(counts);
    // series order inside a family follows a hash map: sort the lines for a stable snapshot
    let mut lines: Vec<String> = metrics.render().lines().map(str::to_owned).collect();
    lines.sort();
    insta::assert_snapshot!(lines.join("\n"));
}

/// Times out every prompt that says `bad`; answers the rest.
struct Upstreams;

#[async_trait]
impl Upstream for Upstreams {
    async fn send(&self, _source: &str, request: &Request) -> Attempt {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if request.texts().next() == Some("bad") {
            return Attempt::failure(OutcomeClass::Transient, "timeout", None);
        }
        Attempt::success(
            Response::chat_text("ok", Some(gateway_core::request::Usage { prompt_tokens: 3, completion_tokens: 1 })),
            "http_200",
        )
    }
}

#[tokio::test(start_paused = true)]
async fn a_scrape_of_a_running_client_parses_and_has_every_metric() {
    let config: ScopeConfig = serde_json::from_value(serde_json::json!({
        "isolation": "per_tenant",
        "breaker": {"fail_threshold": 3, "cooldown_s": 60},
        "sources": {"s1": {"timeout_s": 30}, "s2": {"timeout_s": 30}}
    }))
    .unwrap();
    let clock = Arc::new(TokioClock::new());
    let metrics = Arc::new(Metrics::new(100));
    let client = GatewayClient::builder()
        .scope(config.resolve("chat").unwrap())
        .gates(Arc::new(MemoryGates::new(clock.clone())))
        .quota(Arc::new(MemoryQuota::new(clock.clone())))
        .upstream(Arc::new(Upstreams))
        .telemetry(metrics.clone())
        .clock(clock)
        .seed(5)
        .build()
        .unwrap();
    for i in 0..30 {
        let (tenant, text) = if i % 3 == 0 { ("bad", "bad") } else { ("good", "fine") };
        let _ = client.call_as("chat", tenant, &Request::chat(vec![Message::user(text)])).await;
    }
    let text = metrics.render();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("the exposition parses");
    let names: BTreeSet<&str> = scrape.samples.iter().map(|s| s.metric.as_str()).collect();
    for name in [
        "llm_circuit_state",
        "llm_circuit_failures_total",
        "llm_attempts_total",
        "llm_tokens_total",
        "llm_call_duration_seconds",
        "llm_call_duration_seconds_sum",
        "llm_call_duration_seconds_count",
        "llm_aimd_limit",
        "llm_source_health",
    ] {
        assert!(names.contains(name), "{name} missing from {names:?}\n{text}");
    }
    let histogram = scrape.samples.iter().find(|s| s.metric == "llm_call_duration_seconds").unwrap();
    assert!(matches!(&histogram.value, prometheus_parse::Value::Histogram(buckets) if buckets.len() > 10), "{histogram:?}");
    let gauge_is_one = |tenant: &str, source: &str, state: &str| {
        scrape.samples.iter().any(|s| {
            s.metric == "llm_circuit_state"
                && s.labels.get("tenant_id") == Some(tenant)
                && s.labels.get("source") == Some(source)
                && s.labels.get("state") == Some(state)
                && matches!(s.value, prometheus_parse::Value::Gauge(v) if v == 1.0)
        })
    };
    assert!(gauge_is_one("bad", "s1", "OPEN"), "s1 opened for tenant bad:\n{text}");
    assert!(gauge_is_one("good", "s1", "CLOSED"), "s1 stays closed for tenant good:\n{text}");
}

#[test]
fn tenants_past_the_cap_share_one_label() {
    let metrics = Metrics::new(2);
    for tenant in ["a", "b", "c", "d"] {
        metrics.attempt(&attempt(SourceKey::new("chat", "s1").with_tenant(tenant), OutcomeClass::Success));
    }
    let text = metrics.render();
    let tenants: BTreeSet<&str> = text.lines().filter_map(|l| l.split("tenant_id=\"").nth(1)?.split('"').next()).collect();
    assert_eq!(tenants, BTreeSet::from(["a", "b", gateway_metrics::OTHER_TENANTS]));
}
