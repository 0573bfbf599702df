//! The backend a process's part runs on: the memory gates, or Redis behind a backstop; and
//! what the end-of-run checks read from it.

use super::{Backend, RunConfig, RunError};
use gateway_core::breaker::CircuitState;
use gateway_core::combined::AttemptGate;
use gateway_core::policy::ScopePolicy;
use gateway_core::ports::{BreakerGate, PacerGate, QuotaGate, SourceKey};
use gateway_core::time::{Clock, Timestamp};
use gateway_memory::backstop::{Backstop, BackstopAttempts, BackstopGates, BackstopPacer, BackstopQuota, OnUnavailable, RETRY_EVERY};
use gateway_memory::{MemoryGates, MemoryPacer, MemoryQuota};
use gateway_redis::{RedisAttempts, RedisConfig, RedisConnection, RedisGates, RedisPacer, RedisQuota};
use std::sync::Arc;
use std::time::Duration;

/// The gates, quota and pacers of a run, with what the end-of-run checks need to read from them.
pub(super) struct Gates {
    pub(super) gates: Arc<dyn BreakerGate>,
    pub(super) quota: Arc<dyn QuotaGate>,
    pub(super) pacer: Arc<dyn PacerGate>,
    /// Where an attempt's admission and records go as one operation each (Redis: one script
    /// each), if not the three ports one by one.
    pub(super) attempts: Option<Arc<dyn AttemptGate>>,
    pub(super) memory: Option<(Arc<MemoryGates>, Arc<MemoryQuota>)>,
    /// The Redis gates and quota (their connection's messages tell of capacity freed by the
    /// other processes).
    pub(super) redis: Option<(RedisGates, RedisQuota)>,
    pub(super) backstop: Option<Arc<Backstop>>,
}

impl Gates {
    /// The run's backend; on Redis behind a backstop that does what `on_unavailable` says while
    /// Redis cannot answer (the proxy's wiring, `gateway_server::build_with`).
    pub(super) async fn new(backend: &Backend, clock: Arc<dyn Clock>, on_unavailable: OnUnavailable) -> Result<Gates, RunError> {
        match backend {
            Backend::Memory => {
                let (gates, quota) = (Arc::new(MemoryGates::new(clock.clone())), Arc::new(MemoryQuota::new(clock.clone())));
                let pacer = Arc::new(MemoryPacer::new(clock));
                Ok(Gates {
                    gates: gates.clone(),
                    quota: quota.clone(),
                    pacer,
                    attempts: None,
                    memory: Some((gates, quota)),
                    redis: None,
                    backstop: None,
                })
            }
            Backend::Redis(url) => {
                let config =
                    RedisConfig { url: url.clone(), connect_lazily: on_unavailable == OnUnavailable::Local, ..RedisConfig::default() };
                let conn = RedisConnection::connect(config).await?;
                let (gates, quota, pacer) = (RedisGates::new(conn.clone()), RedisQuota::new(conn.clone()), RedisPacer::new(conn));
                let backstop = Backstop::new(on_unavailable, clock, RETRY_EVERY);
                let attempts = Arc::new(RedisAttempts::new(gates.clone(), quota.clone(), pacer.clone()));
                let shared = (
                    Arc::new(BackstopGates::new(Arc::new(gates.clone()), backstop.clone())),
                    Arc::new(BackstopQuota::new(Arc::new(quota.clone()), backstop.clone())),
                    Arc::new(BackstopPacer::new(Arc::new(pacer), backstop.clone())),
                );
                let attempts = BackstopAttempts::new(attempts, shared.0.clone(), shared.1.clone(), shared.2.clone(), backstop.clone());
                Ok(Gates {
                    gates: shared.0,
                    quota: shared.1,
                    pacer: shared.2,
                    attempts: Some(Arc::new(attempts)),
                    memory: None,
                    redis: Some((gates, quota)),
                    backstop: Some(backstop),
                })
            }
        }
    }

    /// Pacer leases still in flight on the accounts of `policy` (one per account, whatever the
    /// isolation: a provider limits per key, not per tenant).
    pub(super) async fn pacer_leftovers(&self, policy: &ScopePolicy) -> Result<u32, RunError> {
        let mut accounts: Vec<SourceKey> = Vec::new();
        for source in &policy.sources {
            let key = SourceKey::new(policy.name.as_str(), source.account.as_str());
            if !accounts.contains(&key) {
                accounts.push(key);
            }
        }
        let mut inflight = 0;
        for key in &accounts {
            inflight += self.pacer.read(key, &policy.pacer_params()).await?.inflight;
        }
        Ok(inflight)
    }

    /// Permits still held and probe leases still live, over `keys`.
    pub(super) async fn leftovers(&self, keys: &[SourceKey], now: Timestamp) -> Result<(usize, usize), RunError> {
        let (mut permits, mut leases) = (0, 0);
        for key in keys {
            let (held, gate) = match (&self.memory, &self.redis) {
                (Some((gates, quota)), _) => (quota.in_flight(key), gates.snapshot(key)),
                (_, Some((gates, quota))) => (quota.in_flight(key).await?, Some(gates.snapshot(key).await?)),
                _ => (0, None),
            };
            permits += held;
            // A Redis gate's lease is on the server's clock: any lease still set is live enough
            // to count (every probe has ended by now).
            let live = |until: Timestamp| self.redis.is_some() || now < until;
            leases += usize::from(gate.is_some_and(|g| g.state == CircuitState::HalfOpen && g.probe_until.is_some_and(live)));
        }
        Ok((permits, leases))
    }
}

/// How much longer, `since_start` into a run, until every lease granted before its fault ended
/// has expired. A paused Redis runs the commands a client gave up on once the pause ends, so an
/// admission whose reply was lost holds a quota permit, a pacer lease or a probe lease nobody
/// releases until it expires, as leases are made to; the end-of-run checks (invariant 5) wait
/// for that, and only after a fault. `policy` is the run's scope, scaled.
pub(super) fn leases_from_the_fault_left(policy: &ScopePolicy, config: &RunConfig, since_start: Duration) -> Duration {
    let Some(fault) = config.fault else { return Duration::ZERO };
    let scale = config.time_scale.unwrap_or(1.0);
    let longest = (0..policy.sources.len())
        .flat_map(|i| {
            let probe = policy.gate_params(i).map_or(Duration::ZERO, |p| Duration::from_millis(p.probe_ttl_ms()));
            [policy.sources[i].quota.permit_ttl, probe]
        })
        .chain([policy.pacer_params().lease_ttl])
        .max()
        .unwrap_or(Duration::ZERO);
    Duration::from_secs_f64(fault.ends() * scale).saturating_add(longest).saturating_sub(since_start)
}
