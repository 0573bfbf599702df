//! The soak in small: p6 and single-relay runs short enough for the test suite (the full runs
//! are `cargo xtask soak`), checking the invariants, the gap between policies, determinism, and
//! the retry_after of every CircuitOpen.

#![allow(clippy::unwrap_used)]

use gateway_client::Preset;
use gateway_core::policy::WaitMode;
use gateway_sim::invariants;
use gateway_sim::report::Summary;
use gateway_sim::run::{Backend, RunConfig, run};
use gateway_sim::scenario::Scenario;
use std::sync::Arc;

fn soak(scenario: &str, preset: Preset, calls: u32, seed: u64, circuit_open: Option<WaitMode>) -> Summary {
    let scenario = Scenario::load(scenario).unwrap();
    let config = RunConfig { backend: Backend::Memory, time_scale: None, seed, preset, calls: Some(calls), workers: None, circuit_open };
    let result = run(&scenario, &config, Arc::new(|_| {})).unwrap();
    Summary::of(&result, "test", seed, scenario.ceiling(), invariants::check(&result))
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
    let config = RunConfig {
        backend: Backend::Redis("redis://127.0.0.1:6379".into()),
        time_scale: None,
        seed: 1,
        preset: Preset::Default,
        calls: Some(10),
        workers: None,
        circuit_open: None,
    };
    let error = run(&scenario, &config, Arc::new(|_| {})).err().unwrap();
    assert!(error.contains("runs in real time"), "{error}");
    let bad_scale = RunConfig { time_scale: Some(0.0), backend: Backend::Memory, ..config };
    assert!(run(&scenario, &bad_scale, Arc::new(|_| {})).err().unwrap().contains("positive"));
}
