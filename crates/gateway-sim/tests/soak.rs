//! The soak in small: p6 and single-relay runs short enough for the test suite (the full runs
//! are `cargo xtask soak`), checking the invariants, the gap between policies, determinism, and
//! the retry_after of every CircuitOpen; the HTTP transport in short real-time runs. Several
//! processes sharing Redis need a live Redis: they are the target `soak_redis`.

#![allow(clippy::unwrap_used)]

mod support;

use gateway_client::Preset;
use gateway_core::outcome::OutcomeClass;
use gateway_core::policy::WaitMode;
use gateway_sim::invariants;
use gateway_sim::report::{Bounds, Summary};
use gateway_sim::run::{Api, Backend, RunConfig, Transport, run, run_processes, run_upstreams, upstreams_scope};
use gateway_sim::scenario::Scenario;
use gateway_sim::upstream::Providers;
use std::sync::Arc;
use support::{launch, real_time, virtual_time};

fn soak(scenario: &str, preset: Preset, calls: u32, seed: u64, circuit_open: Option<WaitMode>) -> Summary {
    let scenario = Scenario::load(scenario).unwrap();
    let config = RunConfig { preset, circuit_open, ..virtual_time(seed, calls) };
    let result = run(&scenario, &config, Arc::new(|_| {})).unwrap();
    Summary::of(&result, "test", seed, Some(Bounds::of(&scenario)), invariants::check(&result))
}

#[test]
fn p6_streamed_holds_every_invariant_and_a_stream_that_opens_with_prose_is_reasked_unseen() {
    let scenario = Scenario::load("p6").unwrap();
    let config = RunConfig { stream: true, ..virtual_time(1, 600) };
    let result = run(&scenario, &config, Arc::new(|_| {})).unwrap();
    let summary = Summary::of(&result, "stream", 1, Some(Bounds::of(&scenario)), invariants::check(&result));
    assert!(summary.invariants_hold(), "{:?}", summary.invariants);
    // The invalid answers open with prose: each fails at its commit point, before the caller
    // sees a chunk, and the call is re-asked like a whole one.
    let before_commit = result.attempt_events.iter().filter(|a| a.class == OutcomeClass::ResultInvalid && a.detail == "not_json").count();
    assert!(before_commit > 0, "the structured ladder ran on streams");
    assert_eq!(summary.results.get("stream_broken"), None, "{:?}", summary.results);
    assert!(summary.success_rate >= 0.97 && summary.success_rate <= scenario.ceiling() + 0.01, "{}", summary.success_rate);
}

#[test]
fn p6_through_the_responses_api_fares_as_through_chat_whole_and_streamed() {
    let scenario = Scenario::load("p6").unwrap();
    for stream in [false, true] {
        let mut summaries = Vec::new();
        for api in [Api::Chat, Api::Responses] {
            let config = RunConfig { stream, api, ..virtual_time(1, 400) };
            let result = run(&scenario, &config, Arc::new(|_| {})).unwrap();
            let summary = Summary::of(&result, "api", 1, Some(Bounds::of(&scenario)), invariants::check(&result));
            assert!(summary.invariants_hold(), "{api:?} stream {stream}: {:?}", summary.invariants);
            summaries.push(summary);
        }
        // The providers draw the same fates whichever API asks: the runs match call for call.
        assert_eq!(summaries[0].success_rate, summaries[1].success_rate, "stream {stream}");
        assert_eq!(summaries[0].attempts_by_source, summaries[1].attempts_by_source, "stream {stream}");
    }
}

#[test]
fn p6_default_holds_every_invariant_near_the_ceiling_and_the_baseline_falls_far_below() {
    let default = soak("p6", Preset::Default, 600, 1, None);
    assert!(default.invariants_hold(), "{:?}", default.invariants);
    assert!(default.success_rate >= 0.97, "{}", default.success_rate);
    let baseline = soak("p6", Preset::Baseline, 300, 1, None);
    assert!(baseline.invariants_hold(), "{:?}", baseline.invariants);
    assert!(baseline.success_rate <= 0.75, "{}", baseline.success_rate);
}

fn tenants(isolation: gateway_core::policy::Isolation) -> Summary {
    let scenario = Scenario::load("tenants").unwrap();
    let config = RunConfig { isolation: Some(isolation), ..virtual_time(1, 2000) };
    let result = run(&scenario, &config, Arc::new(|_| {})).unwrap();
    Summary::of(&result, "default", 1, Some(Bounds::of(&scenario)), invariants::check(&result))
}

#[test]
fn tenants_per_tenant_keeps_gold_whole_and_shared_makes_it_pay_for_bronze() {
    use gateway_core::policy::Isolation;
    let isolated = tenants(Isolation::PerTenant);
    assert!(isolated.invariants_hold(), "{:?}", isolated.invariants);
    let gold = &isolated.tenants["gold"];
    assert!(gold.success_rate >= 0.995, "gold {}", gold.success_rate);
    assert_eq!(gold.gate_opens["s1"], 0, "s1 never opens for gold");
    assert!(isolated.tenants["bronze"].gate_opens["s1"] > 0, "bronze's own s1 gate opens");
    let shared = tenants(Isolation::Shared);
    assert!(shared.invariants_hold(), "{:?}", shared.invariants);
    assert!(shared.tenants["gold"].gate_opens["s1"] > 0, "bronze's timeouts open the shared s1");
    assert!(shared.tenants["gold"].success_rate < gold.success_rate, "{} vs {}", shared.tenants["gold"].success_rate, gold.success_rate);
}

#[test]
fn the_report_reads_throughput_against_capacity_and_waits_apart_from_call_time() {
    let scenario = Scenario::load("p6").unwrap();
    let config = virtual_time(2, 400);
    let mut result = run(&scenario, &config, Arc::new(|_| {})).unwrap();
    let summary = Summary::of(&result, "default", 2, Some(Bounds::of(&scenario)), invariants::check(&result));
    assert_eq!(summary.invariants.len(), 9);
    assert!(summary.invariants_hold(), "{:?}", summary.invariants);
    assert!((summary.throughput_calls_per_s - 400.0 / summary.scenario_time_s).abs() < 1e-3, "{summary:?}");
    let capacity = summary.capacity_calls_per_s.unwrap();
    assert!((capacity - scenario.capacity()).abs() < 1e-4);
    assert!((summary.capacity_time_s.unwrap() - 400.0 / capacity).abs() < 1e-2);
    assert!(summary.wait_p50_s <= summary.wait_p95_s && summary.wait_p95_s <= summary.wait_p99_s);
    assert!(summary.wait_p99_s <= summary.call_time_p99_s, "a wait is part of its call: {summary:?}");
    // Invariant 9 catches a call that waited past the stall bound, naming it.
    let bound = result.policy.stall_window + result.policy.nap_jitter.max(result.policy.backoff.cap);
    let call = &mut result.call_events[7];
    call.waited = bound + std::time::Duration::from_millis(1);
    let id = call.call_id;
    let nine = invariants::check(&result).into_iter().find(|v| v.number == 9).unwrap();
    assert!(!nine.held);
    assert!(nine.violation.unwrap().starts_with(&format!("call {id} waited")));
    // The same wait on a stalled call is invariant 7's, and 7's alone.
    result.call_events[7].result = gateway_core::telemetry::CallResult::Stalled;
    let verdicts = invariants::check(&result);
    let held = |n: u8| verdicts.iter().find(|v| v.number == n).unwrap().held;
    assert!(!held(7) && held(9), "{verdicts:?}");
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let a = serde_json::to_string(&soak("p6", Preset::Default, 200, 9, None)).unwrap();
    let b = serde_json::to_string(&soak("p6", Preset::Default, 200, 9, None)).unwrap();
    assert_eq!(a, b);
    let c = serde_json::to_string(&soak("p6", Preset::Default, 200, 10, None)).unwrap();
    assert_ne!(a, c, "another seed, another run");
}

#[test]
fn single_relay_fail_fast_reports_the_remaining_cooldown_on_every_circuit_open() {
    let run = soak("single-relay", Preset::Default, 1500, 1, Some(WaitMode::FailFast));
    assert!(run.invariants_hold(), "{:?}", run.invariants);
    assert!(run.circuit_open_errors > 0, "the outage was hit");
    assert_eq!(run.circuit_open_with_remaining_cooldown, run.circuit_open_errors);
}

#[test]
fn the_redis_backend_needs_real_time() {
    let scenario = Scenario::load("p6").unwrap();
    let config = RunConfig { backend: Backend::Redis("redis://127.0.0.1:6379".into()), ..virtual_time(1, 10) };
    let error = run(&scenario, &config, Arc::new(|_| {})).err().unwrap().to_string();
    assert!(error.contains("runs in real time"), "{error}");
    let bad_scale = RunConfig { time_scale: Some(0.0), backend: Backend::Memory, ..config.clone() };
    assert!(run(&scenario, &bad_scale, Arc::new(|_| {})).err().unwrap().to_string().contains("positive"));
    let http = RunConfig { transport: Transport::Http, backend: Backend::Memory, ..config };
    assert!(run(&scenario, &http, Arc::new(|_| {})).err().unwrap().to_string().contains("the HTTP transport runs in real time"));
}

#[test]
fn p6_over_loopback_http_through_the_http_adapter_holds_every_invariant() {
    let scenario = Scenario::load("p6").unwrap();
    let result = run(&scenario, &real_time(Backend::Memory, 400), Arc::new(|_| {})).unwrap();
    let summary = Summary::of(&result, "http", 3, Some(Bounds::of(&scenario.scaled(0.02))), invariants::check(&result));
    assert!(summary.invariants_hold(), "{:?}", summary.invariants);
    assert!(summary.success_rate >= 0.95, "{}", summary.success_rate);
    // Every kind of reply crossed the wire and was classified by the adapter.
    let details: std::collections::BTreeSet<&str> = result.attempt_events.iter().map(|a| a.detail.as_str()).collect();
    for detail in ["http_200", "invalid_api_key", "header_timeout", "watchdog", "empty", "http_429"] {
        assert!(details.contains(detail), "{detail} missing from {details:?}");
    }
}

#[test]
fn p6_through_the_responses_api_over_loopback_http_holds_every_invariant_whole_and_streamed() {
    let scenario = Scenario::load("p6").unwrap();
    for stream in [false, true] {
        let config = RunConfig { stream, api: Api::Responses, ..real_time(Backend::Memory, 200) };
        let result = run(&scenario, &config, Arc::new(|_| {})).unwrap();
        let summary = Summary::of(&result, "http", 3, Some(Bounds::of(&scenario.scaled(0.02))), invariants::check(&result));
        assert!(summary.invariants_hold(), "stream {stream}: {:?}", summary.invariants);
        assert!(summary.success_rate >= 0.95, "stream {stream}: {}", summary.success_rate);
        // The provider's Responses answers crossed the wire, whole or as named events.
        assert!(result.attempt_events.iter().any(|a| a.detail == "http_200"), "stream {stream}");
    }
}

#[test]
fn a_reload_mid_run_loses_no_call_in_virtual_time_and_over_http() {
    let scenario = Scenario::load("p6").unwrap();
    for (config, label) in [
        (RunConfig { reload_at: Some(60.0), ..virtual_time(1, 800) }, "virtual"),
        (RunConfig { reload_at: Some(30.0), ..real_time(Backend::Memory, 300) }, "http"),
    ] {
        let result = run(&scenario, &config, Arc::new(|_| {})).unwrap();
        let bounds = Bounds::of(&config.time_scale.map_or_else(|| scenario.clone(), |s| scenario.scaled(s)));
        let summary = Summary::of(&result, "reload", 1, Some(bounds), invariants::check(&result));
        assert!(summary.invariants_hold(), "{label}: {:?}", summary.invariants);
        assert_eq!(result.reloads.len(), 1, "{label}: one reload, before the run ended");
        let reload = &result.reloads[0];
        assert_eq!(reload.kept, scenario.scope_named("soak").unwrap().sources.len(), "{label}: every source kept");
        assert!(reload.inflight > 0, "{label}: attempts were in flight at the reload");
        // Every call ended, none of them lost to the swap (the ledger's invariant holds above).
        assert_eq!(result.call_events.len(), result.calls as usize, "{label}");
        assert!(summary.success_rate >= 0.95, "{label}: {}", summary.success_rate);
    }
}

#[test]
fn several_processes_need_redis_and_http() {
    let scenario = Scenario::load("p6").unwrap();
    let memory = real_time(Backend::Memory, 10);
    assert!(run_processes("p6", &scenario, &memory, 2, &launch, Arc::new(|_| {})).err().unwrap().to_string().contains("--backend redis"));
    let sim = RunConfig { transport: Transport::Sim, ..real_time(Backend::Redis("redis://127.0.0.1:1".into()), 10) };
    assert!(run_processes("p6", &scenario, &sim, 2, &launch, Arc::new(|_| {})).err().unwrap().to_string().contains("--transport http"));
}

const FAST: &str = r#"
name = "fast"
description = "two fast providers, one with a bad key"
calls = 60
workers = 6
poison_rate = 0.05
structured = true

[gateway]
[gateway.breaker]
fail_threshold = 3
cooldown_s = 60

[gateway.sources.good]
timeout_s = 2
[gateway.sources.bad]
timeout_s = 2

[providers.good]
latency_median_s = 0.01
invalid_json_rate = 0.1
[providers.bad]
kind = "bad_key"
latency_median_s = 0.005
"#;

#[test]
fn the_simulated_providers_answer_the_responses_api_over_http_whole_and_as_named_events() {
    use gateway_core::ports::{Streamed, Upstream};
    let scenario = Scenario::parse("fast", FAST).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    runtime.block_on(async {
        let clock = Arc::new(gateway_client::TokioClock::new());
        let server = Arc::new(Providers::new(&scenario, clock, 5)).serve().await.unwrap();
        let scope: gateway_core::policy::ScopeConfig = serde_json::from_value(serde_json::json!({
            "breaker": {"fail_threshold": 3, "cooldown_s": 60},
            "sources": {"good": {"base_url": server.source_url("good"), "model": "m", "timeout_s": 2}}
        }))
        .unwrap();
        let upstream = gateway_http::HttpUpstream::new(&[scope.resolve("soak").unwrap()]).unwrap();
        let ask = gateway_core::request::Request::native(
            gateway_core::request::Kind::Responses,
            serde_json::json!({"input": "call 1"}).as_object().cloned().unwrap(),
        );
        let whole = upstream.send("good", &ask).await;
        let response = whole.response().unwrap_or_else(|| panic!("{:?}", whole.outcome()));
        assert_eq!(response.body()["object"], "response");
        assert!(response.body()["id"].as_str().unwrap().starts_with("resp_sim_"));
        let Streamed::Chunks(mut events) = upstream.stream("good", &ask).await else { panic!("no stream") };
        let mut types = Vec::new();
        while let Some(event) = events.next_chunk().await {
            types.push(event.unwrap()["type"].as_str().unwrap_or_default().to_owned());
        }
        assert_eq!(
            (types.first().map(String::as_str), types.last().map(String::as_str)),
            (Some("response.created"), Some("response.completed"))
        );
        assert!(types.iter().any(|t| t == "response.output_text.delta"), "{types:?}");
    });
}

#[test]
fn mixed_protocols_fare_as_p6_call_for_call_whole_and_streamed() {
    let (mixed, p6) = (Scenario::load("mixed").unwrap(), Scenario::load("p6").unwrap());
    let anthropic: Vec<&str> = mixed
        .gateway
        .sources
        .iter()
        .filter(|(_, s)| s.protocol == Some(gateway_core::request::Protocol::Anthropic))
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(anthropic, ["s1", "s2"]);
    for stream in [false, true] {
        let mut summaries = Vec::new();
        for scenario in [&mixed, &p6] {
            let config = RunConfig { stream, ..virtual_time(1, 400) };
            let result = run(scenario, &config, Arc::new(|_| {})).unwrap();
            let summary = Summary::of(&result, "mixed", 1, Some(Bounds::of(scenario)), invariants::check(&result));
            assert!(summary.invariants_hold(), "stream {stream}: {:?}", summary.invariants);
            summaries.push(summary);
        }
        // Translated both ways, the answers are the same answers: the runs match call for call.
        assert_eq!(summaries[0].success_rate, summaries[1].success_rate, "stream {stream}");
        assert_eq!(summaries[0].attempts_by_source, summaries[1].attempts_by_source, "stream {stream}");
    }
}

#[test]
fn the_simulated_providers_answer_anthropics_api_over_http_translated_for_chat() {
    use gateway_core::ports::{Streamed, Upstream};
    let scenario = Scenario::parse("fast", FAST).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    runtime.block_on(async {
        let clock = Arc::new(gateway_client::TokioClock::new());
        let server = Arc::new(Providers::new(&scenario, clock, 5)).serve().await.unwrap();
        let source =
            |name: &str| serde_json::json!({"protocol": "anthropic", "base_url": server.source_url(name), "model": "m", "timeout_s": 2});
        let scope: gateway_core::policy::ScopeConfig = serde_json::from_value(serde_json::json!({
            "breaker": {"fail_threshold": 3, "cooldown_s": 60},
            "sources": {"good": source("good"), "bad": source("bad")}
        }))
        .unwrap();
        let upstream = gateway_http::HttpUpstream::new(&[scope.resolve("soak").unwrap()]).unwrap();
        let ask = gateway_core::request::Request::chat(vec![gateway_core::request::Message::user("call 1")]);
        let whole = upstream.send("good", &ask).await;
        let response = whole.response().unwrap_or_else(|| panic!("{:?}", whole.outcome()));
        assert_eq!(response.body()["object"], "chat.completion", "translated for the caller");
        assert!(response.body()["id"].as_str().unwrap().starts_with("msg_sim_"), "a Messages answer on the wire");
        let dead = upstream.send("bad", &ask).await;
        assert_eq!((dead.outcome().class, dead.outcome().detail.as_str()), (OutcomeClass::SourceDead, "authentication_error"));
        let Streamed::Chunks(mut chunks) = upstream.stream("good", &ask).await else { panic!("no stream") };
        let mut objects = Vec::new();
        while let Some(chunk) = chunks.next_chunk().await {
            objects.push(chunk.unwrap()["object"].as_str().unwrap_or_default().to_owned());
        }
        assert!(!objects.is_empty() && objects.iter().all(|o| o == "chat.completion.chunk"), "{objects:?}");
    });
}

#[test]
fn upstreams_runs_the_workload_against_the_endpoints_of_a_config_file() {
    let scenario = Scenario::parse("fast", FAST).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let server = runtime.block_on(async {
        let clock = Arc::new(gateway_client::TokioClock::new());
        Arc::new(Providers::new(&scenario, clock, 5)).serve().await.unwrap()
    });
    let file = std::env::temp_dir().join(format!("soak-upstreams-{}.toml", std::process::id()));
    let source = |name: &str| {
        format!("[soak.sources.{name}]\nbase_url = \"{}\"\nmodel = \"m\"\napi_key = \"sk-test\"\ntimeout_s = 2\n", server.source_url(name))
    };
    let text = format!("[soak.breaker]\nfail_threshold = 3\ncooldown_s = 60\n{}{}", source("good"), source("bad"));
    std::fs::write(&file, text).unwrap();
    let scopes = gateway_client::config::Loader::new().file(&file).env_vars([]).load().unwrap();
    let scope = upstreams_scope(scopes, "gateway.toml").unwrap();
    let config = RunConfig { time_scale: None, transport: Transport::Sim, ..real_time(Backend::Memory, 60) };
    let result = run_upstreams(&scenario, scope, &config, Arc::new(|_| {})).unwrap();
    let _ = std::fs::remove_file(&file);
    let summary = Summary::of(&result, "real", 3, None, invariants::check(&result));
    assert!(summary.invariants_hold(), "{:?}", summary.invariants);
    assert_eq!(summary.results.get("ok").copied().unwrap_or(0) + summary.results.get("request_rejected").copied().unwrap_or(0), 60);
    assert!(summary.isolated_after_s.contains_key("bad"), "the bad key was isolated: {:?}", summary.isolated_after_s);
    assert_eq!(summary.ceiling, None);
    let error = run_upstreams(
        &scenario,
        upstreams_scope(vec![result.policy.clone()], "g").unwrap(),
        &real_time(Backend::Memory, 1),
        Arc::new(|_| {}),
    );
    assert!(error.err().unwrap().to_string().contains("--time-scale does not apply"));
}

#[test]
fn upstreams_names_the_scope_it_needs() {
    let scenario = Scenario::parse("fast", FAST).unwrap();
    let mut a = scenario.gateway.resolve("chat").unwrap();
    assert!(upstreams_scope(vec![], "g.toml").unwrap_err().to_string().contains("g.toml: declares no scope"));
    let b = scenario.gateway.resolve("embedding").unwrap();
    let error = upstreams_scope(vec![a.clone(), b.clone()], "g.toml").unwrap_err().to_string();
    assert!(error.contains("declares the scopes chat, embedding and none is named `soak`"), "{error}");
    assert_eq!(upstreams_scope(vec![b.clone()], "g.toml").unwrap().name, "embedding");
    a.name = "soak".into();
    assert_eq!(upstreams_scope(vec![b, a], "g.toml").unwrap().name, "soak");
}
