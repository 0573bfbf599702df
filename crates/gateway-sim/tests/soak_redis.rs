//! The soak's cases that need a live Redis: several processes sharing the Redis gates in a short
//! real-time run (`GATEWAY_SOAK_CALLS` calls, default 400: CI runs 2 000 on its Redis Cluster),
//! and runs through a Redis fault (on a Redis of the run's own). `gateway_tests::redis_cases`
//! runs them as `redis::<case>` where Redis answers at `GATEWAY_REDIS_URL`, and otherwise
//! reports them ignored (or failed, with `GATEWAY_REDIS_REQUIRED=1`), never `ok`.

#![allow(clippy::unwrap_used)]

mod support;

use gateway_memory::backstop::OnUnavailable;
use gateway_sim::fault::Fault;
use gateway_sim::invariants;
use gateway_sim::report::{Bounds, Summary};
use gateway_sim::run::{Backend, RunConfig, run_processes};
use gateway_sim::scenario::Scenario;
use gateway_tests::redis_cases;
use std::process::ExitCode;
use std::sync::Arc;
use support::{launch, real_time};

fn main() -> ExitCode {
    redis_cases::run(&[
        ("two_processes_share_the_redis_gates_and_one_provider_server", two_processes_share_the_redis_gates_and_one_provider_server),
        ("a_local_soak_serves_through_a_redis_kill", a_local_soak_serves_through_a_redis_kill),
        ("a_fail_closed_soak_through_a_flush_counts_resets_and_keeps_the_invariants", |_| {
            a_fail_closed_soak_through_a_flush_counts_resets_and_keeps_the_invariants()
        }),
    ])
}

fn calls() -> u32 {
    std::env::var("GATEWAY_SOAK_CALLS").ok().and_then(|n| n.parse().ok()).unwrap_or(400)
}

fn two_processes_share_the_redis_gates_and_one_provider_server(url: String) {
    let scenario = Scenario::load("p6").unwrap();
    let seen = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = seen.clone();
    let progress = Arc::new(move |n| counter.store(n, std::sync::atomic::Ordering::Relaxed));
    let calls = calls();
    let result = run_processes("p6", &scenario, &real_time(Backend::Redis(url), calls), 2, &launch, progress).unwrap();
    let summary = Summary::of(&result, "processes", 3, Some(Bounds::of(&scenario.scaled(0.02))), invariants::check(&result));
    assert!(summary.invariants_hold(), "{:?}", summary.invariants);
    assert!(summary.success_rate >= 0.95, "{}", summary.success_rate);
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), calls, "progress from both processes adds up");
    let processes: std::collections::BTreeSet<u64> = result.call_events.iter().map(|c| c.call_id >> 40).collect();
    assert_eq!(processes.len(), 2, "both processes ran calls");
}

/// Two processes with `on_unavailable = "local"` through a kill of their Redis (20 scenario
/// seconds in, down for 15, back empty): no call fails closed, the processes admit on their own
/// state meanwhile, and every invariant holds. (The Redis is the run's own: `url` only says
/// that Redis runs here.)
fn a_local_soak_serves_through_a_redis_kill(url: String) {
    let scenario = Scenario::load("p6").unwrap();
    let config = RunConfig {
        on_unavailable: OnUnavailable::Local,
        fault: Some(Fault::Kill { at: 20.0, down: 15.0 }),
        ..real_time(Backend::Redis(url), 400)
    };
    let result = run_processes("p6", &scenario, &config, 2, &launch, Arc::new(|_| {})).unwrap();
    let summary = Summary::of(&result, "local", 3, Some(Bounds::of(&scenario.scaled(0.02))), invariants::check(&result));
    assert!(summary.invariants_hold(), "{:?}", summary.invariants);
    let backend = summary.backend.unwrap();
    assert_eq!(backend.fault.as_deref(), Some("kill@20+15"));
    assert!(backend.fault_window_s.is_some(), "the fault came before the run ended");
    assert_eq!(backend.failed_closed_calls, 0, "{backend:?}");
    assert!(backend.outages >= 1 && backend.local_admissions > 0, "{backend:?}");
    assert!(summary.success_rate >= 0.95, "{}", summary.success_rate);
}

/// Two processes failing closed through a FLUSHALL: Redis keeps answering, the gates come back
/// as new incarnations (resets, not violations), and every invariant holds.
fn a_fail_closed_soak_through_a_flush_counts_resets_and_keeps_the_invariants() {
    let scenario = Scenario::load("p6").unwrap();
    let config = RunConfig { fault: Some(Fault::Flush { at: 20.0 }), ..real_time(Backend::Redis(String::new()), 400) };
    let result = run_processes("p6", &scenario, &config, 2, &launch, Arc::new(|_| {})).unwrap();
    let summary = Summary::of(&result, "flush", 3, Some(Bounds::of(&scenario.scaled(0.02))), invariants::check(&result));
    assert!(summary.invariants_hold(), "{:?}", summary.invariants);
    let backend = summary.backend.unwrap();
    assert!(backend.resets > 0, "{backend:?}");
    assert_eq!((backend.failed_closed_calls, backend.outages), (0, 0), "{backend:?}");
}
