//! The soak's cases that need a live Redis: several processes sharing the Redis gates in a short
//! real-time run. `gateway_tests::redis_cases` runs them as `redis::<case>` where Redis answers at
//! `GATEWAY_REDIS_URL`, and otherwise reports them ignored (or failed, with
//! `GATEWAY_REDIS_REQUIRED=1`), never `ok`.

#![allow(clippy::unwrap_used)]

mod support;

use gateway_sim::invariants;
use gateway_sim::report::{Bounds, Summary};
use gateway_sim::run::{Backend, run_processes};
use gateway_sim::scenario::Scenario;
use gateway_tests::redis_cases;
use std::process::ExitCode;
use std::sync::Arc;
use support::{launch, real_time};

fn main() -> ExitCode {
    redis_cases::run(&[(
        "two_processes_share_the_redis_gates_and_one_provider_server",
        two_processes_share_the_redis_gates_and_one_provider_server,
    )])
}

fn two_processes_share_the_redis_gates_and_one_provider_server(url: String) {
    let scenario = Scenario::load("p6").unwrap();
    let seen = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = seen.clone();
    let progress = Arc::new(move |n| counter.store(n, std::sync::atomic::Ordering::Relaxed));
    let result = run_processes("p6", &scenario, &real_time(Backend::Redis(url), 400), 2, &launch, progress).unwrap();
    let summary = Summary::of(&result, "processes", 3, Some(Bounds::of(&scenario.scaled(0.02))), invariants::check(&result));
    assert!(summary.invariants_hold(), "{:?}", summary.invariants);
    assert!(summary.success_rate >= 0.95, "{}", summary.success_rate);
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 400, "progress from both processes adds up");
    let processes: std::collections::BTreeSet<u64> = result.call_events.iter().map(|c| c.call_id >> 40).collect();
    assert_eq!(processes.len(), 2, "both processes ran calls");
}
