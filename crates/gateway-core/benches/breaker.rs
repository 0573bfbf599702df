//! The breaker hot path (`TryEnter` + a record, each through `Gate::apply`) and the
//! health-aware `order()` over 5 and 50 sources. The benchmark ids keep their old names
//! (`try_enter+record_*`) so that criterion compares against earlier baselines.

#![allow(missing_docs, clippy::unwrap_used)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gateway_core::breaker::{Gate, GateOp, GateParams, SuccessKind};
use gateway_core::policy::BreakerConfig;
use gateway_core::select::{Selector, SelectorKind, SourceView};
use gateway_core::time::Timestamp;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::hint::black_box;
use std::time::Duration;

fn params() -> GateParams {
    let policy = BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() }.resolve("bench").unwrap();
    GateParams::new(&policy, 16, Duration::from_secs(30), Duration::from_secs(30))
}

fn hot_path(c: &mut Criterion) {
    let p = params();
    let mut group = c.benchmark_group("breaker");
    group.bench_function("try_enter+record_success", |b| {
        let mut gate = Gate::new();
        let mut now = 0u64;
        b.iter(|| {
            now += 7; // crosses window buckets now and then, as real traffic does
            let t = Timestamp::from_millis(now);
            let entry = gate.apply(&p, GateOp::TryEnter, t);
            black_box(gate.apply(&p, GateOp::Success { fence: entry.fence(), kind: SuccessKind::Real }, t))
        });
    });
    group.bench_function("try_enter+record_failure", |b| {
        // One failure in nine keeps the gate CLOSED while the rate window counts every attempt.
        let mut gate = Gate::new();
        let mut now = 0u64;
        let mut i = 0u32;
        b.iter(|| {
            now += 7;
            i = i.wrapping_add(1);
            let t = Timestamp::from_millis(now);
            let entry = gate.apply(&p, GateOp::TryEnter, t);
            if i.is_multiple_of(9) {
                black_box(gate.apply(&p, GateOp::Failure { fence: entry.fence() }, t))
            } else {
                black_box(gate.apply(&p, GateOp::Success { fence: entry.fence(), kind: SuccessKind::Real }, t))
            }
        });
    });
    group.bench_function("try_enter+record_failure(every)", |b| {
        // Every attempt fails: the gate opens, denies, probes and reopens, as on a dead source.
        let mut gate = Gate::new();
        let mut now = 0u64;
        b.iter(|| {
            now += 7;
            let t = Timestamp::from_millis(now);
            let entry = gate.apply(&p, GateOp::TryEnter, t);
            black_box(gate.apply(&p, GateOp::Failure { fence: entry.fence() }, t))
        });
    });
    group.finish();
}

fn order(c: &mut Criterion) {
    let mut group = c.benchmark_group("order");
    for n in [5usize, 50] {
        let views: Vec<SourceView> =
            (0..n).map(|i| SourceView { health: 1.0 - (i as f64 * 0.37) % 1.0, inflight: (i % 4) as u32 }).collect();
        let selector = Selector::new(SelectorKind::HealthAware);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut out = Vec::with_capacity(n);
        group.bench_with_input(BenchmarkId::new("health_aware", n), &views, |b, views| {
            b.iter(|| {
                selector.order(black_box(views), &mut rng, &mut out);
                black_box(out.first().copied())
            });
        });
    }
    group.finish();
}

criterion_group!(benches, hot_path, order);
criterion_main!(benches);
