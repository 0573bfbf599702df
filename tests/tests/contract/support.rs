//! The backends the contract suite runs on, built fresh for each case: the memory gates, and
//! the Redis gates at the URL the harness found answering, both on one injected clock. Each
//! case gets its own scope, so cases run in parallel on one Redis without meeting.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gateway_core::breaker::{Gate, GateOp, GateParams, Reply};
use gateway_core::combined::{AttemptGate, InOrder};
use gateway_core::outcome::OutcomeClass;
use gateway_core::policy::{BreakerConfig, BreakerPolicy};
use gateway_core::ports::{AffinityMap, BreakerGate, PacerGate, QuotaGate, SourceKey};
use gateway_core::time::{Clock, ManualClock, Timestamp};
use gateway_memory::{MemoryAffinity, MemoryGates, MemoryPacer, MemoryQuota};
use gateway_redis::{RedisAffinity, RedisAttempts, RedisConfig, RedisConnection, RedisGates, RedisPacer, RedisQuota};
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Where the suite's clock starts (any value works; a non-zero one catches "0 means unset" bugs).
pub const START: Timestamp = Timestamp::from_secs(1_000_000);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind<'a> {
    Memory,
    /// Redis at this URL.
    Redis(&'a str),
}

/// One case's view of a backend.
pub struct Backend {
    pub affinity: Arc<dyn AffinityMap>,
    pub gates: Arc<dyn BreakerGate>,
    pub quota: Arc<dyn QuotaGate>,
    pub pacer: Arc<dyn PacerGate>,
    /// Where an attempt's admission and records go, one operation each: on Redis one script
    /// each, in memory the ports one by one.
    pub attempts: Arc<dyn AttemptGate>,
    pub clock: Arc<ManualClock>,
    pub scope: String,
    memory: Option<(Arc<MemoryGates>, Arc<MemoryQuota>)>,
    redis: Option<(RedisGates, RedisQuota, String)>,
}

/// A scope no other case (of this run or an earlier one) uses.
fn unique_scope() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static RUN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let run = RUN.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(std::process::id()));
    format!("c{:x}-{}", run & 0xffff_ffff, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A connection to the Redis at `url`. The cases check what the backend stores and answers, not
/// how fast: a command may take 5 s (not the production 250 ms), so that eight cases at once on a
/// loaded two-core CI machine with a three-node cluster never fail on a slow answer. How a slow
/// or hung Redis is met is `redis_faults`'s to test.
pub async fn redis_connection(url: &str, clock: Option<Arc<dyn Clock>>) -> Arc<RedisConnection> {
    let command_timeout = Duration::from_secs(5);
    let config = RedisConfig { url: url.to_owned(), pool_size: 2, clock, command_timeout, ..RedisConfig::default() };
    RedisConnection::connect(config).await.unwrap_or_else(|e| panic!("redis at {url} answered the probe, then: {e}"))
}

impl Backend {
    /// A fresh backend of `kind` (Redis at the URL the harness found answering).
    pub async fn new(kind: Kind<'_>) -> Backend {
        let clock = Arc::new(ManualClock::new(START));
        let scope = unique_scope();
        match kind {
            Kind::Memory => {
                let (gates, quota) = (Arc::new(MemoryGates::new(clock.clone())), Arc::new(MemoryQuota::new(clock.clone())));
                let pacer = Arc::new(MemoryPacer::new(clock.clone()));
                Backend {
                    affinity: Arc::new(MemoryAffinity::new(clock.clone(), 1000)),
                    gates: gates.clone(),
                    quota: quota.clone(),
                    pacer: pacer.clone(),
                    attempts: Arc::new(InOrder { gates: gates.clone(), quota: quota.clone(), pacer }),
                    clock,
                    scope,
                    memory: Some((gates, quota)),
                    redis: None,
                }
            }
            Kind::Redis(url) => {
                let conn = redis_connection(url, Some(clock.clone())).await;
                let (gates, quota, pacer) = (RedisGates::new(conn.clone()), RedisQuota::new(conn.clone()), RedisPacer::new(conn.clone()));
                Backend {
                    affinity: Arc::new(RedisAffinity::new(conn.clone())),
                    gates: Arc::new(gates.clone()),
                    quota: Arc::new(quota.clone()),
                    pacer: Arc::new(pacer.clone()),
                    attempts: Arc::new(RedisAttempts::new(gates.clone(), quota.clone(), pacer)),
                    clock,
                    scope,
                    memory: None,
                    redis: Some((gates, quota, url.to_owned())),
                }
            }
        }
    }

    /// A second, independent handle on the same shared state: another connection ("another
    /// process") for Redis, the same in-process gates for memory.
    pub async fn second_gates(&self) -> Arc<dyn BreakerGate> {
        match &self.redis {
            Some((_, _, url)) => Arc::new(RedisGates::new(redis_connection(url, Some(self.clock.clone())).await)),
            None => self.gates.clone(),
        }
    }

    /// A second handle on the same affinity map (another process's, for Redis).
    pub async fn second_affinity(&self) -> Arc<dyn AffinityMap> {
        match &self.redis {
            Some((_, _, url)) => Arc::new(RedisAffinity::new(redis_connection(url, Some(self.clock.clone())).await)),
            None => self.affinity.clone(),
        }
    }

    /// Whether this is the Redis backend (its keys expire on Redis's own clock).
    pub fn is_redis(&self) -> bool {
        self.redis.is_some()
    }

    /// A second handle on the same pacers (another process's, for Redis).
    pub async fn second_pacer(&self) -> Arc<dyn PacerGate> {
        match &self.redis {
            Some((_, _, url)) => Arc::new(RedisPacer::new(redis_connection(url, Some(self.clock.clone())).await)),
            None => self.pacer.clone(),
        }
    }

    pub fn key(&self, source: &str) -> SourceKey {
        SourceKey::new(self.scope.as_str(), source)
    }

    /// Sets the clock to `START + secs`.
    pub fn at(&self, secs: f64) {
        self.clock.set(START.saturating_add(Duration::from_secs_f64(secs)));
    }

    /// The stored gate state.
    pub async fn snapshot(&self, key: &SourceKey) -> Gate {
        match (&self.memory, &self.redis) {
            (Some((memory, _)), _) => memory.snapshot(key).unwrap_or_default(),
            (_, Some((redis, _, _))) => redis.snapshot(key).await.unwrap(),
            _ => unreachable!("a backend is memory or redis"),
        }
    }

    /// Loses the gates of `keys` and every quota account, as a backend that restarts empty does:
    /// the memory gates forget everything (the memory of a restarted process), Redis drops the
    /// keys (a flush of this case's own keys: the suite's Redis is shared by parallel cases).
    pub async fn lose(&self, keys: &[SourceKey]) {
        match (&self.memory, &self.redis) {
            (Some((gates, quota)), _) => {
                gates.clear();
                quota.clear();
            }
            (_, Some((gates, quota, _))) => {
                for key in keys {
                    gates.forget(key).await.unwrap();
                    quota.forget(key).await.unwrap();
                }
            }
            _ => unreachable!("a backend is memory or redis"),
        }
    }

    /// The Redis URL, when the backend is Redis.
    pub fn redis_url(&self) -> Option<&str> {
        self.redis.as_ref().map(|(_, _, url)| url.as_str())
    }

    /// The Redis gates, when the backend is Redis.
    pub fn redis_gates(&self) -> Option<&RedisGates> {
        self.redis.as_ref().map(|(gates, _, _)| gates)
    }

    /// Permits of `key`'s quota account holding a concurrency slot now.
    pub async fn quota_in_flight(&self, key: &SourceKey) -> usize {
        match (&self.memory, &self.redis) {
            (Some((_, memory)), _) => memory.in_flight(key),
            (_, Some((_, redis, _))) => redis.in_flight(key).await.unwrap(),
            _ => unreachable!("a backend is memory or redis"),
        }
    }

    /// One whole attempt: `TryEnter`, then, if admitted, the outcome table's operation for
    /// `class`.
    pub async fn attempt(&self, key: &SourceKey, p: &GateParams, class: OutcomeClass) -> Reply {
        let entry = self.gates.apply(key, p, GateOp::TryEnter).await.unwrap();
        if let Some(op) = class.effects().gate_op(&entry, Duration::ZERO, None) {
            self.gates.apply(key, p, op).await.unwrap();
        }
        entry
    }

    /// `n` attempts of `class` at the current time.
    pub async fn attempts(&self, key: &SourceKey, p: &GateParams, class: OutcomeClass, n: usize) {
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

/// A contract case on the port: its body, run on a fresh backend.
pub type Case = fn(Backend) -> CaseFuture;

/// The runtime a case runs on (as `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]`).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Runs `case` on a fresh backend of `kind`.
pub fn run(kind: Kind<'_>, case: Case) {
    let rt = runtime();
    rt.block_on(async { case(Backend::new(kind).await).await });
}
