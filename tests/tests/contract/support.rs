//! The backends the contract suite runs on, built fresh for each case: the memory gates, and
//! the Redis gates on `GATEWAY_REDIS_URL` (default 127.0.0.1:6379), both on one injected clock.
//! Each case gets its own scope, so cases run in parallel on one Redis without meeting.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gateway_core::breaker::{Entry, Gate, GateParams, Verdict};
use gateway_core::outcome::{BreakerEffect, OutcomeClass};
use gateway_core::policy::{BreakerConfig, BreakerPolicy};
use gateway_core::ports::{BreakerGate, GateKey, PacerGate, QuotaGate};
use gateway_core::time::{Clock, ManualClock, Timestamp};
use gateway_memory::{MemoryGates, MemoryPacer, MemoryQuota};
use gateway_redis::{RedisConfig, RedisConnection, RedisGates, RedisPacer, RedisQuota};
use std::future::Future;
use std::hash::BuildHasher;
use std::io::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Where the suite's clock starts (any value works; a non-zero one catches "0 means unset" bugs).
pub const START: Timestamp = Timestamp::from_secs(1_000_000);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Memory,
    Redis,
}

/// One case's view of a backend.
pub struct Backend {
    pub gates: Arc<dyn BreakerGate>,
    pub quota: Arc<dyn QuotaGate>,
    pub pacer: Arc<dyn PacerGate>,
    pub clock: Arc<ManualClock>,
    pub scope: String,
    memory: Option<Arc<MemoryGates>>,
    redis: Option<(RedisGates, Arc<RedisConnection>)>,
}

pub fn redis_url() -> String {
    std::env::var("GATEWAY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

pub fn redis_required() -> bool {
    std::env::var("GATEWAY_REDIS_REQUIRED").is_ok_and(|v| v == "1" || v == "true")
}

/// A scope no other case (of this run or an earlier one) uses.
fn unique_scope() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static RUN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let run = RUN.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(std::process::id()));
    format!("c{:x}-{}", run & 0xffff_ffff, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Says, past the test harness's capture, that a Redis case was skipped and why.
pub fn say_skipped(case: &str, why: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED redis::{case}: {why} (start Redis or set GATEWAY_REDIS_URL; GATEWAY_REDIS_REQUIRED=1 makes this a failure)"
    );
}

pub async fn redis_connection(clock: Option<Arc<dyn Clock>>) -> Result<Arc<RedisConnection>, String> {
    let config = RedisConfig { url: redis_url(), pool_size: 2, clock, ..RedisConfig::default() };
    RedisConnection::connect(config).await.map_err(|e| e.to_string())
}

impl Backend {
    /// The backend of `kind`, or `None` (after saying why) when Redis is unreachable and not
    /// required.
    pub async fn new(kind: Kind, case: &str) -> Option<Backend> {
        let clock = Arc::new(ManualClock::new(START));
        let scope = unique_scope();
        match kind {
            Kind::Memory => {
                let gates = Arc::new(MemoryGates::new(clock.clone()));
                Some(Backend {
                    gates: gates.clone(),
                    quota: Arc::new(MemoryQuota::new(clock.clone())),
                    pacer: Arc::new(MemoryPacer::new(clock.clone())),
                    clock,
                    scope,
                    memory: Some(gates),
                    redis: None,
                })
            }
            Kind::Redis => match redis_connection(Some(clock.clone())).await {
                Ok(conn) => {
                    let gates = RedisGates::new(conn.clone());
                    Some(Backend {
                        gates: Arc::new(gates.clone()),
                        quota: Arc::new(RedisQuota::new(conn.clone())),
                        pacer: Arc::new(RedisPacer::new(conn.clone())),
                        clock,
                        scope,
                        memory: None,
                        redis: Some((gates, conn)),
                    })
                }
                Err(why) if redis_required() => panic!("redis at {} is required (GATEWAY_REDIS_REQUIRED=1): {why}", redis_url()),
                Err(why) => {
                    say_skipped(case, &why);
                    None
                }
            },
        }
    }

    /// A second, independent handle on the same shared state: another connection ("another
    /// process") for Redis, the same in-process gates for memory.
    pub async fn second_gates(&self) -> Arc<dyn BreakerGate> {
        match &self.redis {
            Some(_) => Arc::new(RedisGates::new(redis_connection(Some(self.clock.clone())).await.unwrap())),
            None => self.gates.clone(),
        }
    }

    /// A second handle on the same pacers (another process's, for Redis).
    pub async fn second_pacer(&self) -> Arc<dyn PacerGate> {
        match &self.redis {
            Some(_) => Arc::new(RedisPacer::new(redis_connection(Some(self.clock.clone())).await.unwrap())),
            None => self.pacer.clone(),
        }
    }

    pub fn key(&self, source: &str) -> GateKey {
        GateKey::new(self.scope.as_str(), source)
    }

    /// Sets the clock to `START + secs`.
    pub fn at(&self, secs: f64) {
        self.clock.set(START.saturating_add(Duration::from_secs_f64(secs)));
    }

    /// The stored gate state.
    pub async fn snapshot(&self, key: &GateKey) -> Gate {
        match (&self.memory, &self.redis) {
            (Some(memory), _) => memory.snapshot(key).unwrap_or_default(),
            (_, Some((redis, _))) => redis.snapshot(key).await.unwrap(),
            _ => unreachable!("a backend is memory or redis"),
        }
    }

    /// One whole attempt: `try_enter`, then the outcome's breaker effect from the outcome table
    /// (and `release_probe` for a probe whose outcome tells the gate nothing).
    pub async fn attempt(&self, key: &GateKey, p: &GateParams, class: OutcomeClass) -> Entry {
        let entry = self.gates.try_enter(key, p).await.unwrap();
        if entry.is_admitted() {
            self.record(key, p, entry, class).await;
        }
        entry
    }

    /// Reports `class` for an attempt admitted with `entry`.
    pub async fn record(&self, key: &GateKey, p: &GateParams, entry: Entry, class: OutcomeClass) {
        let epoch = entry.reply.epoch;
        match class.effects().breaker {
            BreakerEffect::RecordSuccess { real } => drop(self.gates.record_success(key, p, epoch, real).await.unwrap()),
            BreakerEffect::RecordFailure => drop(self.gates.record_failure(key, p, epoch).await.unwrap()),
            BreakerEffect::ForceOpen => drop(self.gates.force_open(key, p).await.unwrap()),
            BreakerEffect::Nothing if entry.verdict == Verdict::Probe => drop(self.gates.release_probe(key, p, epoch).await.unwrap()),
            BreakerEffect::Nothing => {}
        }
    }

    /// `n` attempts of `class` at the current time.
    pub async fn attempts(&self, key: &GateKey, p: &GateParams, class: OutcomeClass, n: usize) {
        for _ in 0..n {
            self.attempt(key, p, class).await;
        }
    }
}

/// The seed's breaker: fail_threshold 5, cooldown 60 s, defaults otherwise.
pub fn seed_breaker() -> BreakerConfig {
    BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() }
}

pub fn policy(config: BreakerConfig) -> BreakerPolicy {
    config.resolve("contract.breaker").unwrap()
}

/// Gate parameters for a source with `max_concurrency` and 30 s timeouts.
pub fn params(config: BreakerConfig, max_concurrency: u32) -> GateParams {
    GateParams::new(&policy(config), max_concurrency, Duration::from_secs(30), Duration::from_secs(30))
}

pub type CaseFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs `case` on a fresh backend of `kind` (or reports the skip).
pub async fn run(kind: Kind, name: &str, case: fn(Backend) -> CaseFuture) {
    if let Some(backend) = Backend::new(kind, name).await {
        case(backend).await;
    }
}
