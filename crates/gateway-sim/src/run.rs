//! One soak run: the scenario's workload through a `GatewayClient` (memory or Redis gates,
//! simulated providers) by closed-loop workers. By default on a paused tokio clock, so a seed
//! gives the same run; with a time scale, in real time with every duration scaled (the Redis
//! backend needs real time: its clock is the server's).

use crate::scenario::Scenario;
use crate::upstream::{POISON, SimUpstream};
use gateway_client::{Collector, GatewayClient, Preset, TokioClock};
use gateway_core::breaker::CircuitState;
use gateway_core::policy::{ScopePolicy, WaitMode};
use gateway_core::ports::{BreakerGate, GateKey, QuotaGate};
use gateway_core::random::unit;
use gateway_core::request::{Message, Payload, Request, Role, Structured};
use gateway_core::telemetry::{AttemptEvent, CallEvent, GateEvent};
use gateway_core::time::{Clock, Timestamp};
use gateway_memory::{MemoryGates, MemoryQuota};
use gateway_redis::{RedisConfig, RedisConnection, RedisGates, RedisQuota};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Where the gates and quota live.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// In process (`gateway-memory`).
    #[default]
    Memory,
    /// Shared in Redis (`gateway-redis`) at this URL.
    Redis(String),
}

/// How to run a scenario.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The gate and quota backend.
    pub backend: Backend,
    /// `None`: virtual time. `Some(s)`: real time, every duration multiplied by `s`.
    pub time_scale: Option<f64>,
    /// The seed of everything random: providers, selection, jitter, poison payloads.
    pub seed: u64,
    /// The policy preset.
    pub preset: Preset,
    /// Overrides the scenario's call count.
    pub calls: Option<u32>,
    /// Overrides the scenario's worker count.
    pub workers: Option<u32>,
    /// Overrides the scope's `circuit_open`.
    pub circuit_open: Option<WaitMode>,
}

/// What a run left behind: every telemetry event, and what was still held at the end.
pub struct RunResult {
    /// The scope as run (after the preset).
    pub policy: ScopePolicy,
    /// Calls in the run.
    pub calls: u32,
    /// Every call event.
    pub call_events: Vec<CallEvent>,
    /// Every attempt event.
    pub attempt_events: Vec<AttemptEvent>,
    /// Every gate transition.
    pub gate_events: Vec<GateEvent>,
    /// When the run started (timestamps of events are on the same clock).
    pub start: Timestamp,
    /// Virtual time the run took.
    pub duration: Duration,
    /// AIMD in-flight counts left at the end.
    pub leftover_inflight: u32,
    /// Quota permits left at the end.
    pub leftover_permits: usize,
    /// Probe leases left at the end.
    pub leftover_leases: usize,
    /// Each `CircuitOpen` error: the call, its retry_after, and the time left until the
    /// earliest gate of the scope could be probed when the error was returned.
    pub circuit_open: Vec<(u64, Duration, Duration)>,
}

/// Runs `scenario` as `config` says; `progress` is told the number of calls ended so far.
pub fn run(scenario: &Scenario, config: &RunConfig, progress: Arc<dyn Fn(u32) + Send + Sync>) -> Result<RunResult, String> {
    match config.time_scale {
        None if config.backend != Backend::Memory => {
            Err("the Redis backend runs in real time (its clock is the server's): give a time scale, e.g. --time-scale 0.05".to_owned())
        }
        None => {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().map_err(|e| e.to_string())?;
            runtime.block_on(run_async(scenario, config, progress))
        }
        Some(scale) if !(scale.is_finite() && scale > 0.0) => Err(format!("time scale {scale} must be a positive number")),
        Some(scale) => {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(|e| e.to_string())?;
            runtime.block_on(run_async(&scenario.scaled(scale), config, progress))
        }
    }
}

/// The gates and quota of a run, with what the end-of-run checks need to read from them.
struct Gates {
    gates: Arc<dyn BreakerGate>,
    quota: Arc<dyn QuotaGate>,
    memory: Option<(Arc<MemoryGates>, Arc<MemoryQuota>)>,
    redis: Option<(RedisGates, RedisQuota)>,
}

impl Gates {
    async fn new(backend: &Backend, clock: Arc<dyn Clock>) -> Result<Gates, String> {
        match backend {
            Backend::Memory => {
                let (gates, quota) = (Arc::new(MemoryGates::new(clock.clone())), Arc::new(MemoryQuota::new(clock)));
                Ok(Gates { gates: gates.clone(), quota: quota.clone(), memory: Some((gates, quota)), redis: None })
            }
            Backend::Redis(url) => {
                let conn = RedisConnection::connect(RedisConfig { url: url.clone(), ..RedisConfig::default() })
                    .await
                    .map_err(|e| e.to_string())?;
                let (gates, quota) = (RedisGates::new(conn.clone()), RedisQuota::new(conn));
                Ok(Gates { gates: Arc::new(gates.clone()), quota: Arc::new(quota.clone()), memory: None, redis: Some((gates, quota)) })
            }
        }
    }

    /// Permits still held and probe leases still live, over `keys`.
    async fn leftovers(&self, keys: &[GateKey], now: Timestamp) -> Result<(usize, usize), String> {
        let (mut permits, mut leases) = (0, 0);
        for key in keys {
            let (held, gate) = match (&self.memory, &self.redis) {
                (Some((gates, quota)), _) => (quota.in_flight(key), gates.snapshot(key)),
                (_, Some((gates, quota))) => {
                    (quota.in_flight(key).await.map_err(|e| e.to_string())?, Some(gates.snapshot(key).await.map_err(|e| e.to_string())?))
                }
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

async fn run_async(scenario: &Scenario, config: &RunConfig, progress: Arc<dyn Fn(u32) + Send + Sync>) -> Result<RunResult, String> {
    // A shared backend gets a scope of this run's own, so runs never meet in Redis.
    let scope_name = match config.backend {
        Backend::Memory => "soak".to_owned(),
        Backend::Redis(_) => format!("soak-{}-{}", std::process::id(), config.seed),
    };
    let mut policy = scenario.gateway.resolve(&scope_name).map_err(|e| e.to_string())?;
    if let Some(mode) = config.circuit_open {
        policy.circuit_open = mode;
    }
    let calls = config.calls.unwrap_or(scenario.calls);
    let workers = config.workers.unwrap_or(scenario.workers).max(1);
    let clock = Arc::new(TokioClock::new());
    let start = clock.now();
    let backend = Gates::new(&config.backend, clock.clone()).await?;
    let (gates, quota) = (backend.gates.clone(), backend.quota.clone());
    let exact_clock = config.time_scale.is_none();
    let telemetry = Arc::new(Collector::new());
    let upstream = Arc::new(SimUpstream::new(scenario, &policy, clock.clone(), config.seed));
    let client = GatewayClient::builder()
        .preset(config.preset)
        .scope(policy.clone())
        .gates(gates)
        .quota(quota)
        .upstream(upstream)
        .telemetry(telemetry.clone())
        .clock(clock.clone())
        .seed(config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .build()
        .map_err(|e| e.to_string())?;
    let mut preset_policy = policy.clone();
    config.preset.apply(&mut preset_policy);

    let mut rng = ChaCha8Rng::seed_from_u64(config.seed ^ 0x5EED);
    let poison: Arc<Vec<bool>> = Arc::new((0..calls).map(|_| unit(&mut rng) < scenario.poison_rate).collect());
    let client = Arc::new(client);
    let next = Arc::new(AtomicU32::new(0));
    let done = Arc::new(AtomicU32::new(0));
    let structured = scenario.structured;
    let mut handles = Vec::new();
    let sources: Arc<Vec<GateKey>> = Arc::new(policy.sources.iter().map(|s| GateKey::new(scope_name.as_str(), s.name.as_str())).collect());
    let memory_gates = backend.memory.as_ref().map(|(gates, _)| gates.clone());
    let circuit_open: Arc<std::sync::Mutex<Vec<(u64, Duration, Duration)>>> = Arc::default();
    for _ in 0..workers {
        let (client, next, done, poison, progress) = (client.clone(), next.clone(), done.clone(), poison.clone(), progress.clone());
        let (clock, gates, sources, circuit_open) = (clock.clone(), memory_gates.clone(), sources.clone(), circuit_open.clone());
        let scope_name = scope_name.clone();
        handles.push(tokio::spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= calls {
                    break;
                }
                let content = if poison[index as usize] { POISON.to_owned() } else { format!("call {index}") };
                let request = Request {
                    payload: Payload::Chat {
                        messages: vec![Message { role: Role::User, content }],
                        max_tokens: Some(256),
                        temperature: None,
                        stream: false,
                    },
                    structured: structured.then(|| Structured::JsonSchema(serde_json::json!({"type": "object", "required": ["answer"]}))),
                    estimated_tokens: 450,
                };
                let result = client.call(&scope_name, &request).await;
                // In virtual time with the memory gates the cooldown left is known exactly when
                // the error returns; elsewhere time moves on between the two readings.
                if let (Err(gateway_client::CallError::CircuitOpen { retry_after, .. }), Some(gates), true) = (result, &gates, exact_clock)
                {
                    let now = clock.now();
                    let remaining = sources
                        .iter()
                        .filter_map(|key| gates.snapshot(key))
                        .map(|gate| if gate.state == CircuitState::Open { gate.open_until.saturating_since(now) } else { Duration::ZERO })
                        .min()
                        .unwrap_or(Duration::ZERO);
                    let call = u64::from(index);
                    circuit_open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((call, retry_after, remaining));
                }
                progress(done.fetch_add(1, Ordering::Relaxed) + 1);
            }
        }));
    }
    for handle in handles {
        handle.await.map_err(|e| e.to_string())?;
    }
    let duration = clock.now().saturating_since(start);
    // let released leases and permits settle
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (leftover_permits, leftover_leases) = backend.leftovers(&sources, clock.now()).await?;
    Ok(RunResult {
        policy: preset_policy,
        calls,
        call_events: telemetry.calls(),
        attempt_events: telemetry.attempts(),
        gate_events: telemetry.gates(),
        start,
        duration,
        leftover_inflight: client.inflight(&scope_name),
        leftover_permits,
        leftover_leases,
        circuit_open: std::mem::take(&mut *circuit_open.lock().unwrap_or_else(std::sync::PoisonError::into_inner)),
    })
}
