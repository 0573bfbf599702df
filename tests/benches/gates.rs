//! Gate throughput: the memory gates and the Redis gates (loopback) with 1 and 64 concurrent
//! tasks, beside an EVALSHA of an empty script (the floor any Redis gate pays), with no
//! arguments and with a gate operation's. Each iteration
//! is one operation, so criterion's throughput is operations per second. Redis benchmarks are
//! skipped, with the reason, when Redis is unreachable (`GATEWAY_REDIS_URL`, default
//! 127.0.0.1:6379).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]
// A benchmark is where the wall clock is read.
#![allow(clippy::disallowed_methods)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fred::prelude::*;
use gateway_core::breaker::{Fence, GateOp, GateParams, SuccessKind};
use gateway_core::policy::BreakerConfig;
use gateway_core::ports::{BreakerGate, SourceKey};
use gateway_core::time::{Clock, Timestamp};
use gateway_memory::MemoryGates;
use gateway_redis::{RedisConfig, RedisConnection, RedisGates};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// The process's monotonic clock, for the memory gates.
struct Monotonic(Instant);

impl Clock for Monotonic {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.0.elapsed().as_millis() as u64)
    }
}

fn params() -> GateParams {
    let policy =
        BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() }.resolve("bench.breaker").unwrap();
    GateParams::new(&policy, 16, Duration::from_secs(30), Duration::from_secs(30))
}

/// Runs `iters` operations spread over `tasks` concurrent tasks and returns the wall time.
fn spread<F, Fut>(rt: &Runtime, tasks: u64, iters: u64, op: F) -> Duration
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + Send,
{
    rt.block_on(async {
        let start = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let op = op.clone();
                let share = iters / tasks + u64::from(t < iters % tasks);
                tokio::spawn(async move {
                    for i in 0..share {
                        op(t * 1_000_000 + i).await;
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.await.unwrap();
        }
        start.elapsed()
    })
}

/// The gate operations measured; `RecordMix` fails one call in ten, which keeps the gates
/// CLOSED while every call writes the window.
#[derive(Clone, Copy)]
enum Op {
    TryEnter,
    RecordSuccess,
    RecordMix,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::TryEnter => "try_enter",
            Op::RecordSuccess => "record_success",
            Op::RecordMix => "record_1_in_10_failed",
        }
    }

    /// One operation on `key`, whose records carry `fence` (the gate's admission fence: the
    /// gate stays CLOSED at epoch 0, so every record counts).
    async fn run(self, gates: &dyn BreakerGate, (key, fence): &(SourceKey, Fence), p: &GateParams, i: u64) {
        let fence = *fence;
        match self {
            Op::TryEnter => gates.apply(key, p, GateOp::TryEnter).await.map(|_| ()).unwrap(),
            Op::RecordMix if i.is_multiple_of(10) => gates.apply(key, p, GateOp::Failure { fence }).await.map(|_| ()).unwrap(),
            Op::RecordSuccess | Op::RecordMix => {
                gates.apply(key, p, GateOp::Success { fence, kind: SuccessKind::Real }).await.map(|_| ()).unwrap();
            }
        }
    }
}

fn gate_ops(c: &mut Criterion, group_name: &str, rt: &Runtime, gates: Arc<dyn BreakerGate>, scope: &str) {
    let p = Arc::new(params());
    let keys: Vec<SourceKey> = (0..8).map(|i| SourceKey::new(scope, format!("s{i}"))).collect();
    // Each gate is created by an admission, whose fence its records carry.
    let fenced = rt.block_on(async {
        let mut fenced = Vec::new();
        for key in keys {
            let fence = gates.apply(&key, &p, GateOp::TryEnter).await.unwrap().fence();
            fenced.push((key, fence));
        }
        fenced
    });
    let keys = Arc::new(fenced);
    let mut group = c.benchmark_group(group_name);
    group.throughput(Throughput::Elements(1)).sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    for tasks in [1u64, 64] {
        for op in [Op::TryEnter, Op::RecordSuccess, Op::RecordMix] {
            group.bench_function(BenchmarkId::new(op.name(), tasks), |b| {
                b.iter_custom(|iters| {
                    let (g, k, pp) = (gates.clone(), keys.clone(), p.clone());
                    spread(rt, tasks, iters, move |i| {
                        let (g, k, pp) = (g.clone(), k.clone(), pp.clone());
                        async move { op.run(&*g, &k[(i % 8) as usize], &pp, i).await }
                    })
                });
            });
        }
    }
    group.finish();
}

fn memory(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let gates: Arc<dyn BreakerGate> = Arc::new(MemoryGates::new(Arc::new(Monotonic(Instant::now()))));
    gate_ops(c, "memory_gate", &rt, gates, "bench");
}

fn redis(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let url = std::env::var("GATEWAY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let conn = match rt.block_on(RedisConnection::connect(RedisConfig { url: url.clone(), ..RedisConfig::default() })) {
        Ok(conn) => conn,
        Err(e) => {
            eprintln!("SKIPPED redis benchmarks: {e}");
            return;
        }
    };
    let sha: String = rt.block_on(conn.pool().custom(fred::cmd!("SCRIPT"), vec!["LOAD", "return 1"])).unwrap();
    let mut group = c.benchmark_group("redis_floor");
    group.throughput(Throughput::Elements(1)).sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    for tasks in [1u64, 64] {
        let (conn, sha) = (conn.clone(), sha.clone());
        group.bench_function(BenchmarkId::new("evalsha_empty", tasks), |b| {
            b.iter_custom(|iters| {
                let (conn, sha) = (conn.clone(), sha.clone());
                spread(&rt, tasks, iters, move |_| {
                    let (conn, sha) = (conn.clone(), sha.clone());
                    async move {
                        let _: i64 =
                            conn.pool().custom(fred::cmd!("EVALSHA"), vec![Value::from(sha.as_str()), Value::Integer(0)]).await.unwrap();
                    }
                })
            });
        });
    }
    {
        let tasks = 64u64;
        let (conn, sha) = (conn.clone(), sha.clone());
        group.bench_function(BenchmarkId::new("evalsha_empty_gate_args", tasks), |b| {
            b.iter_custom(|iters| {
                let (conn, sha) = (conn.clone(), sha.clone());
                spread(&rt, tasks, iters, move |_| {
                    let (conn, sha) = (conn.clone(), sha.clone());
                    async move {
                        // the arguments of a success as gate.lua takes them: one key, now, the
                        // operation, epoch and kind, then the twelve parameters
                        let mut args: Vec<Value> = vec![Value::from(sha.as_str()), Value::Integer(1), Value::from("gw:{bench}:gate:s1")];
                        args.extend(["", "success", "0", "real"].map(Value::from));
                        let params = [32, 60_000, 300_000, 10, 30_000, 1, 60_000, 4_440_000].map(Value::Integer);
                        args.extend(params[..4].iter().cloned());
                        args.push(Value::from("0.6"));
                        args.extend(params[4..].iter().cloned());
                        args.extend([Value::from("-"), Value::Integer(0), Value::Integer(0)]);
                        let _: i64 = conn.pool().custom(fred::cmd!("EVALSHA"), args).await.unwrap();
                    }
                })
            });
        });
    }
    group.finish();
    let scope = format!("bench{}", std::process::id());
    gate_ops(c, "redis_gate", &rt, Arc::new(RedisGates::new(conn)), &scope);
}

criterion_group!(benches, memory, redis);
criterion_main!(benches);
