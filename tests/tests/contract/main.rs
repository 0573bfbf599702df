//! The backend contract suite, one target (`cargo test -p gateway-tests --test contract`;
//! `cargo xtask contract` prints its table):
//! - `suite::<test>`: the suite's own tests (the script parser's), not contract cases;
//! - `script::<case>`: a gate case as data (`cases/<case>.gate`) run on the pure `Gate`, its
//!   trace kept as an `insta` snapshot (`snapshots/`); `memory::<case>` and `redis::<case>` run
//!   the same script on the backend and must give the same trace;
//! - `memory::` / `redis::random_breaker_sequences`, `…random_quota_sequences` and
//!   `…random_pacer_sequences`: the
//!   differential suite (random operation sequences, every reply and state compared);
//!   `redis::random_records_sequences`: an attempt's admission and records in one script each
//!   (and records carried by the next admission, in one) against the same made part by part (a quarter of `CONTRACT_SEQUENCES`: each is two
//!   backends' work);
//! - `memory::` / `redis::<case>` for the cases a script cannot say: concurrent callers, two
//!   processes, the pacer, the quota's leases, the affinity map; `redis::<case>` for what only Redis has (the key
//!   TTL, the bounded argument cache).
//!
//! Redis cases need Redis at `GATEWAY_REDIS_URL`: without it they are reported ignored, never
//! `ok` (or failed, with `GATEWAY_REDIS_REQUIRED=1`). `CONTRACT_SEQUENCES` sets how many random
//! sequences each differential case runs (default 2 000).

// A test binary with its own harness: a broken fixture panics, as in a #[test].
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod affinity;
mod concurrency;
mod differential;
mod line;
mod pacer;
mod pacer_sequences;
mod quota;
mod records;
mod redis_only;
mod script;
mod support;

use gateway_tests::redis_cases::{self, NamedCase};
use libtest_mimic::Trial;
use script::{Pure, Script};
use std::process::ExitCode;
use std::sync::Arc;
use support::{Backend, Case, Kind, runtime};

/// The cases that run on every backend as code.
const CASES: &[(&str, Case)] = &[
    ("concurrent_try_enter_on_an_expired_open_gate_grants_one_probe", |b| {
        Box::pin(concurrency::concurrent_try_enter_on_an_expired_open_gate_grants_one_probe(b))
    }),
    ("two_processes_see_one_gate", |b| Box::pin(concurrency::two_processes_see_one_gate(b))),
    ("a_release_sent_before_an_admission_is_made_before_it", |b| {
        Box::pin(concurrency::a_release_sent_before_an_admission_is_made_before_it(b))
    }),
    ("quota_concurrency_frees_on_release", |b| Box::pin(quota::quota_concurrency_frees_on_release(b))),
    ("quota_leases_of_a_crashed_worker_expire", |b| Box::pin(quota::quota_leases_of_a_crashed_worker_expire(b))),
    ("quota_rpm_hints_when_the_oldest_start_leaves", |b| Box::pin(quota::quota_rpm_hints_when_the_oldest_start_leaves(b))),
    ("quota_tpm_charges_the_estimate_and_settle_corrects_it", |b| {
        Box::pin(quota::quota_tpm_charges_the_estimate_and_settle_corrects_it(b))
    }),
    ("quota_refusal_names_the_first_limit_and_the_longest_wait", |b| {
        Box::pin(quota::quota_refusal_names_the_first_limit_and_the_longest_wait(b))
    }),
    ("pacer_starts_at_eight_or_its_ceiling_and_grants_up_to_its_limit", |b| {
        Box::pin(pacer::pacer_starts_at_eight_or_its_ceiling_and_grants_up_to_its_limit(b))
    }),
    ("pacer_tells_noise_from_a_burst_and_holds_a_refused_ceiling", |b| {
        Box::pin(pacer::pacer_tells_noise_from_a_burst_and_holds_a_refused_ceiling(b))
    }),
    ("pacer_leases_of_a_crashed_worker_expire", |b| Box::pin(pacer::pacer_leases_of_a_crashed_worker_expire(b))),
    ("pacer_two_processes_respect_one_limit", |b| Box::pin(pacer::pacer_two_processes_respect_one_limit(b))),
    ("forgetting_a_gate_starts_it_afresh", |b| Box::pin(pacer::forgetting_a_gate_starts_it_afresh(b))),
    ("affinity_is_one_map_for_every_process", |b| Box::pin(affinity::affinity_is_one_map_for_every_process(b))),
];

/// The cases of what only Redis has.
const REDIS_CASES: &[(&str, Case)] = &[
    ("a_change_beyond_the_buckets_counts_keeps_the_gate_for_its_ttl", |b| {
        Box::pin(redis_only::a_change_beyond_the_buckets_counts_keeps_the_gate_for_its_ttl(b))
    }),
    ("the_encoded_arguments_are_bounded_with_churning_gates", |b| {
        Box::pin(redis_only::the_encoded_arguments_are_bounded_with_churning_gates(b))
    }),
    ("every_connection_to_redis_sends_at_once", |b| Box::pin(redis_only::every_connection_to_redis_sends_at_once(b))),
    ("a_carried_release_and_its_admission_fail_apart", |b| Box::pin(redis_only::a_carried_release_and_its_admission_fail_apart(b))),
    ("freed_capacity_goes_to_the_process_whose_waiter_is_oldest", |b| {
        Box::pin(line::freed_capacity_goes_to_the_process_whose_waiter_is_oldest(b))
    }),
];

fn sequences() -> u32 {
    std::env::var("CONTRACT_SEQUENCES").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000)
}

fn scripts() -> Vec<Script> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/contract/cases");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "gate"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            Script::parse(&name, &text).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

/// The script's trace on the pure gate.
fn pure_trace(script: &Script) -> String {
    runtime().block_on(script.run(&mut Pure::default()))
}

/// The script's trace on `kind` must be the pure gate's.
fn same_trace(script: &Script, kind: Kind<'_>) {
    let expected = pure_trace(script);
    let got = runtime().block_on(async { script.run(&mut Backend::new(kind).await).await });
    assert_eq!(got, expected, "{}: the backend's trace (left) is not the pure gate's (right)", script.name);
}

fn main() -> ExitCode {
    let scripts: Vec<Arc<Script>> = scripts().into_iter().map(Arc::new).collect();
    let mut plain = vec![Trial::test("suite::the_parser_names_the_line_and_what_is_wrong", || {
        script::the_parser_names_the_line_and_what_is_wrong();
        Ok(())
    })];
    let mut redis = Vec::new();
    for script in &scripts {
        let s = script.clone();
        plain.push(Trial::test(format!("script::{}", script.name), move || {
            insta::with_settings!({ snapshot_path => "snapshots", prepend_module_to_snapshot => false, omit_expression => true }, {
                insta::assert_snapshot!(s.name.as_str(), pure_trace(&s));
            });
            Ok(())
        }));
        let s = script.clone();
        plain.push(Trial::test(format!("memory::{}", script.name), move || {
            same_trace(&s, Kind::Memory);
            Ok(())
        }));
        let s = script.clone();
        redis.push(NamedCase { name: script.name.clone(), body: Box::new(move |url| same_trace(&s, Kind::Redis(&url))) });
    }
    for &(name, case) in CASES {
        plain.push(Trial::test(format!("memory::{name}"), move || {
            support::run(Kind::Memory, case);
            Ok(())
        }));
        redis.push(NamedCase { name: name.to_owned(), body: Box::new(move |url| support::run(Kind::Redis(&url), case)) });
    }
    for &(name, case) in REDIS_CASES {
        redis.push(NamedCase { name: name.to_owned(), body: Box::new(move |url| support::run(Kind::Redis(&url), case)) });
    }
    let n = sequences();
    plain.push(Trial::test("memory::random_breaker_sequences", move || {
        differential::breaker_sequences(Kind::Memory, n);
        Ok(())
    }));
    plain.push(Trial::test("memory::random_quota_sequences", move || {
        differential::quota_sequences(Kind::Memory, n);
        Ok(())
    }));
    plain.push(Trial::test("memory::random_pacer_sequences", move || {
        pacer_sequences::pacer_sequences(Kind::Memory, n);
        Ok(())
    }));
    redis.push(NamedCase {
        name: "random_pacer_sequences".into(),
        body: Box::new(move |url| pacer_sequences::pacer_sequences(Kind::Redis(&url), n)),
    });
    redis.push(NamedCase {
        name: "random_breaker_sequences".into(),
        body: Box::new(move |url| differential::breaker_sequences(Kind::Redis(&url), n)),
    });
    redis.push(NamedCase {
        name: "random_records_sequences".into(),
        // A records sequence admits and settles on two backends, a dozen round trips a step:
        // a quarter as many sequences cost what the other differential cases do.
        body: Box::new(move |url| records::records_sequences(Kind::Redis(&url), (n / 4).max(1))),
    });
    redis.push(NamedCase {
        name: "random_quota_sequences".into(),
        body: Box::new(move |url| differential::quota_sequences(Kind::Redis(&url), n)),
    });
    redis_cases::run_with(plain, redis)
}
