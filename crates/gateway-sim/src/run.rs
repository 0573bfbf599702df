//! One soak run: the scenario's workload through a `GatewayClient` by closed-loop workers. By
//! default on a paused tokio clock with the memory gates and in-process simulated providers, so a
//! seed gives the same run. With a time scale, in real time with every duration scaled: the Redis
//! gates (their clock is the server's), the providers served over loopback HTTP and called
//! through the HTTP adapter, and several processes sharing one Redis ([`run_processes`]).

use crate::fault::{Fault, OwnRedis};
use crate::scenario::{Scenario, Tenant};
use crate::upstream::{LONG, POISON, Providers, SimUpstream};
use gateway_client::{Collector, GatewayClient, Preset, TokioClock};
use gateway_core::breaker::CircuitState;
use gateway_core::policy::{Isolation, ScopePolicy, WaitMode};
use gateway_core::ports::{BreakerGate, GateKey, PacerGate, QuotaGate, Upstream};
use gateway_core::random::unit;
use gateway_core::request::{Message, Request};
use gateway_core::telemetry::{AttemptEvent, CallEvent, GateEvent};
use gateway_core::time::{Clock, Timestamp};
use gateway_http::HttpUpstream;
use gateway_memory::backstop::{Backstop, BackstopGates, BackstopPacer, BackstopQuota, BackstopStats, OnUnavailable, RETRY_EVERY};
use gateway_memory::{MemoryGates, MemoryPacer, MemoryQuota};
use gateway_mock::source_url;
use gateway_redis::{RedisConfig, RedisConnection, RedisGates, RedisPacer, RedisQuota};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde::{Deserialize, Serialize};
use std::io::BufRead;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
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

/// How attempts reach the providers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// The simulated providers as an in-process `Upstream`.
    #[default]
    Sim,
    /// The simulated providers served over loopback HTTP, called through `gateway-http`.
    Http,
}

/// How to run a scenario.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The gate and quota backend.
    pub backend: Backend,
    /// How attempts reach the providers.
    pub transport: Transport,
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
    /// Overrides the scope's tenant isolation.
    pub isolation: Option<Isolation>,
    /// Calls take their answers as streams (`GatewayClient::stream`) instead of whole.
    pub stream: bool,
    /// What the Redis backend's clients do while it cannot answer.
    pub on_unavailable: OnUnavailable,
    /// A Redis fault to inject, into a Redis of the run's own (the backend's URL is not used).
    pub fault: Option<Fault>,
}

/// What the shared backend went through in a run (a Redis run only).
#[derive(Clone, Debug, Default)]
pub struct BackendRun {
    /// What the clients did while it could not answer.
    pub on_unavailable: OnUnavailable,
    /// The fault injected, if any, and whether it came before the run ended.
    pub fault: Option<(Fault, bool)>,
    /// The time scale the fault's seconds were scaled by.
    pub scale: f64,
    /// Each process's backstop figures.
    pub processes: Vec<BackstopStats>,
    /// Records the clients dropped in the background (no room, or out of time).
    pub background_dropped: u64,
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
    /// Scenario time the run took.
    pub duration: Duration,
    /// AIMD in-flight counts left at the end (the clients' and the pacers' leases).
    pub leftover_inflight: u32,
    /// Quota permits left at the end.
    pub leftover_permits: usize,
    /// Probe leases left at the end.
    pub leftover_leases: usize,
    /// Each `CircuitOpen` error: the call, its retry_after, and the time left until the
    /// earliest gate of the scope could be probed when the error was returned.
    pub circuit_open: Vec<(u64, Duration, Duration)>,
    /// The shared backend's part (a Redis run).
    pub backend: Option<BackendRun>,
}

/// Told the number of calls ended so far.
pub type Progress = Arc<dyn Fn(u32) + Send + Sync>;

fn check(config: &RunConfig) -> Result<Option<f64>, String> {
    if config.fault.is_some() && config.backend == Backend::Memory {
        return Err("--fault injects a Redis fault: add --backend redis (the run starts a Redis of its own for it)".to_owned());
    }
    match config.time_scale {
        None if config.backend != Backend::Memory => {
            Err("the Redis backend runs in real time (its clock is the server's): give a time scale, e.g. --time-scale 0.05".to_owned())
        }
        None if config.transport == Transport::Http => {
            Err("the HTTP transport runs in real time (sockets do not follow a virtual clock): give a time scale, e.g. --time-scale 0.05"
                .to_owned())
        }
        Some(scale) if !(scale.is_finite() && scale > 0.0) => Err(format!("time scale {scale} must be a positive number")),
        scale => Ok(scale),
    }
}

fn real_time_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(|e| e.to_string())
}

/// Runs `scenario` as `config` says in this process; `progress` is told the calls ended so far.
pub fn run(scenario: &Scenario, config: &RunConfig, progress: Progress) -> Result<RunResult, String> {
    match check(config)? {
        None => {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().map_err(|e| e.to_string())?;
            runtime.block_on(run_async(scenario, config, progress))
        }
        Some(scale) => with_fault(config, scale, |config, started| {
            real_time_runtime()?.block_on(run_target(&scenario.scaled(scale), config, progress, Target::Scenario, started))
        }),
    }
}

/// Runs `body` on `config`; with a fault, on a Redis of the run's own (never the backend's URL),
/// into which the fault is injected from a thread of its own, timed from the moment `body` says
/// the run started (the `started` it is given).
fn with_fault(
    config: &RunConfig,
    scale: f64,
    body: impl FnOnce(&RunConfig, &(dyn Fn() + Sync)) -> Result<RunResult, String>,
) -> Result<RunResult, String> {
    let Some(fault) = config.fault else { return body(config, &|| {}) };
    let mut redis = OwnRedis::start()?;
    let config = RunConfig { backend: Backend::Redis(redis.url()), ..config.clone() };
    let (run, runs) = std::sync::mpsc::channel::<()>();
    let injector = std::thread::spawn(move || {
        let injected = fault.inject(&mut redis, scale, &runs);
        (injected, redis)
    });
    let result = body(&config, &|| {
        let _ = run.send(());
    });
    drop(run);
    let (injected, _redis) = injector.join().map_err(|_| "the fault injector panicked".to_owned())?;
    let (mut result, injected) = (result?, injected?);
    if let Some(backend) = &mut result.backend {
        backend.fault = Some((fault, injected));
    }
    Ok(result)
}

/// The gates, quota and pacers of a run, with what the end-of-run checks need to read from them.
struct Gates {
    gates: Arc<dyn BreakerGate>,
    quota: Arc<dyn QuotaGate>,
    pacer: Arc<dyn PacerGate>,
    memory: Option<(Arc<MemoryGates>, Arc<MemoryQuota>)>,
    redis: Option<(RedisGates, RedisQuota)>,
    backstop: Option<Arc<Backstop>>,
}

impl Gates {
    /// The run's backend; on Redis behind a backstop that does what `on_unavailable` says while
    /// Redis cannot answer (the proxy's wiring, `gateway_server::build_with`).
    async fn new(backend: &Backend, clock: Arc<dyn Clock>, on_unavailable: OnUnavailable) -> Result<Gates, String> {
        match backend {
            Backend::Memory => {
                let (gates, quota) = (Arc::new(MemoryGates::new(clock.clone())), Arc::new(MemoryQuota::new(clock.clone())));
                let pacer = Arc::new(MemoryPacer::new(clock));
                Ok(Gates { gates: gates.clone(), quota: quota.clone(), pacer, memory: Some((gates, quota)), redis: None, backstop: None })
            }
            Backend::Redis(url) => {
                let config =
                    RedisConfig { url: url.clone(), connect_lazily: on_unavailable == OnUnavailable::Local, ..RedisConfig::default() };
                let conn = RedisConnection::connect(config).await.map_err(|e| e.to_string())?;
                let (gates, quota, pacer) = (RedisGates::new(conn.clone()), RedisQuota::new(conn.clone()), RedisPacer::new(conn));
                let backstop = Backstop::new(on_unavailable, clock, RETRY_EVERY);
                Ok(Gates {
                    gates: Arc::new(BackstopGates::new(Arc::new(gates.clone()), backstop.clone())),
                    quota: Arc::new(BackstopQuota::new(Arc::new(quota.clone()), backstop.clone())),
                    pacer: Arc::new(BackstopPacer::new(Arc::new(pacer), backstop.clone())),
                    memory: None,
                    redis: Some((gates, quota)),
                    backstop: Some(backstop),
                })
            }
        }
    }

    /// Pacer leases still in flight on the accounts of `policy` (and of every tenant of
    /// `scenario` when the scope isolates them).
    async fn pacer_leftovers(&self, policy: &ScopePolicy, scenario: &Scenario) -> Result<u32, String> {
        let mut accounts: Vec<GateKey> = Vec::new();
        for source in &policy.sources {
            let key = GateKey::new(policy.name.as_str(), source.account.as_str());
            if !accounts.contains(&key) {
                accounts.push(key);
            }
        }
        if policy.isolation == Isolation::PerTenant {
            let shared = accounts.clone();
            for tenant in scenario.tenants.keys() {
                accounts.extend(shared.iter().map(|key| key.clone().with_tenant(tenant.as_str())));
            }
        }
        let mut inflight = 0;
        for key in &accounts {
            inflight += self.pacer.read(key, &policy.pacer_params()).await.map_err(|e| e.to_string())?.inflight;
        }
        Ok(inflight)
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

/// How much longer, `since_start` into a run, until every lease granted before its fault ended
/// has expired. A paused Redis runs the commands a client gave up on once the pause ends, so an
/// admission whose reply was lost holds a quota permit, a pacer lease or a probe lease nobody
/// releases until it expires, as leases are made to; the end-of-run checks (invariant 5) wait
/// for that, and only after a fault. `policy` is the run's scope, scaled.
fn leases_from_the_fault_left(policy: &ScopePolicy, config: &RunConfig, since_start: Duration) -> Duration {
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

/// The scope name of a run: `soak` in process memory; on a shared backend one of the run's own,
/// so runs never meet in Redis.
fn scope_name(backend: &Backend, seed: u64) -> String {
    match backend {
        Backend::Memory => "soak".to_owned(),
        Backend::Redis(_) => format!("soak-{}-{seed}", std::process::id()),
    }
}

/// The scenario's scope under `name`, with the run's overrides.
fn scope_policy(scenario: &Scenario, name: &str, config: &RunConfig) -> Result<ScopePolicy, String> {
    let mut policy = scenario.scope_named(name).map_err(|e| e.to_string())?;
    apply_overrides(&mut policy, config);
    Ok(policy)
}

/// The run's `circuit_open` and isolation overrides, on any scope it runs.
fn apply_overrides(policy: &mut ScopePolicy, config: &RunConfig) {
    if let Some(mode) = config.circuit_open {
        policy.circuit_open = mode;
    }
    if let Some(isolation) = config.isolation {
        policy.isolation = isolation;
    }
}

/// The gate keys of a run: every source, and with per-tenant isolation every (tenant, source).
fn gate_keys(policy: &ScopePolicy, scenario: &Scenario) -> Vec<GateKey> {
    let mut keys: Vec<GateKey> = policy.sources.iter().map(|s| GateKey::new(policy.name.as_str(), s.name.as_str())).collect();
    if policy.isolation == Isolation::PerTenant {
        for tenant in scenario.tenants.keys() {
            keys.extend(policy.sources.iter().map(|s| GateKey::new(policy.name.as_str(), s.name.as_str()).with_tenant(tenant.as_str())));
        }
    }
    keys
}

/// The calls of a scenario without tenants.
const UNTENANTED: Tenant = Tenant { share: 1.0, long_prompts: false, think_s: 0.0 };

/// One closed-loop share of the workload: a tenant's (or the untenanted) calls and workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Load {
    /// The tenant the calls are made for.
    pub tenant: Option<String>,
    /// The calls (indices into the run's calls).
    pub calls: std::ops::Range<u32>,
    /// Its closed-loop workers.
    pub workers: u32,
    /// Whether its prompts are long.
    pub long: bool,
    /// A worker's pause between calls.
    pub think: Duration,
}

/// The run's loads: one per tenant by share (calls and workers), or one untenanted load; the
/// `part`-th of `parts` processes takes its share of each.
pub fn loads(scenario: &Scenario, calls: u32, workers: u32, part: u32, parts: u32) -> Vec<Load> {
    let split = |n: u32, i: u32, of: u32| u32::try_from(u64::from(n) * u64::from(i) / u64::from(of.max(1))).unwrap_or(n);
    let whole: Vec<(Option<String>, std::ops::Range<u32>, u32, &Tenant)> = if scenario.tenants.is_empty() {
        vec![(None, 0..calls, workers, &UNTENANTED)]
    } else {
        let mut start = 0u32;
        let mut cumulative = 0.0;
        let count = scenario.tenants.len();
        scenario
            .tenants
            .iter()
            .enumerate()
            .map(|(i, (name, t))| {
                cumulative += t.share;
                let end = if i + 1 == count { calls } else { ((f64::from(calls) * cumulative).round() as u32).min(calls) };
                let range = start..end;
                start = end;
                (Some(name.clone()), range, ((f64::from(workers) * t.share).round() as u32).max(1), t)
            })
            .collect()
    };
    whole
        .into_iter()
        .map(|(tenant, range, w, t)| {
            let n = range.end - range.start;
            let calls = range.start + split(n, part, parts)..range.start + split(n, part + 1, parts);
            let workers = (split(w, part + 1, parts) - split(w, part, parts)).max(1);
            Load { tenant, calls, workers, long: t.long_prompts, think: Duration::from_secs_f64(t.think_s) }
        })
        .collect()
}

/// Points every source of `policy` at the provider server whose root URL is `root`.
fn point_at(policy: &mut ScopePolicy, root: &str) {
    for source in &mut policy.sources {
        source.base_url = Some(source_url(root, &source.name));
        source.model = Some(source.name.clone());
    }
}

/// Which calls carry the poison payload: a function of the seed alone, so every process of a
/// run agrees.
fn poison_marks(seed: u64, calls: u32, rate: f64) -> Vec<bool> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5EED);
    (0..calls).map(|_| unit(&mut rng) < rate).collect()
}

/// The closed-loop workload of one process: `workers` tasks take the calls `calls` one by one.
struct Workload {
    client: Arc<GatewayClient>,
    scope: String,
    loads: Vec<Load>,
    poison: Arc<Vec<bool>>,
    structured: bool,
    stream: bool,
    /// With the memory gates in virtual time: read the cooldown left when a CircuitOpen returns.
    exact: Option<ExactGates>,
}

impl Workload {
    /// Runs every call; returns the CircuitOpen errors seen (when `exact`).
    async fn drive(self, progress: Progress) -> Result<Vec<(u64, Duration, Duration)>, String> {
        let done = Arc::new(AtomicU32::new(0));
        let circuit_open: Arc<Mutex<Vec<(u64, Duration, Duration)>>> = Arc::default();
        let this = Arc::new(self);
        let mut handles = Vec::new();
        for load in 0..this.loads.len() {
            let next = Arc::new(AtomicU32::new(this.loads[load].calls.start));
            for _ in 0..this.loads[load].workers.max(1) {
                let (this, next, done, progress, circuit_open) =
                    (this.clone(), next.clone(), done.clone(), progress.clone(), circuit_open.clone());
                handles.push(tokio::spawn(async move {
                    let load = &this.loads[load];
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= load.calls.end {
                            break;
                        }
                        let request = this.request(index, load.long);
                        let result = this.call(&request, load.tenant.as_deref()).await;
                        if let (Err(gateway_client::CallError::CircuitOpen { retry_after, .. }), Some(exact)) = (result, &this.exact) {
                            let remaining = exact.cooldown_left(load.tenant.as_deref());
                            circuit_open.lock().unwrap_or_else(PoisonError::into_inner).push((u64::from(index), retry_after, remaining));
                        }
                        progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                        if !load.think.is_zero() {
                            tokio::time::sleep(load.think).await;
                        }
                    }
                }));
            }
        }
        for handle in handles {
            handle.await.map_err(|e| e.to_string())?;
        }
        let seen = std::mem::take(&mut *circuit_open.lock().unwrap_or_else(PoisonError::into_inner));
        Ok(seen)
    }

    /// One call, whole or streamed (a stream read to its end; a break is a failed call).
    async fn call(&self, request: &Request, tenant: Option<&str>) -> Result<(), gateway_client::CallError> {
        if !self.stream {
            let called = match tenant {
                Some(tenant) => self.client.call_as(&self.scope, tenant, request).await,
                None => self.client.call(&self.scope, request).await,
            };
            return called.map(drop);
        }
        let mut stream = match tenant {
            Some(tenant) => self.client.stream_as(&self.scope, tenant, request).await?,
            None => self.client.stream(&self.scope, request).await?,
        };
        while let Some(chunk) = stream.next().await {
            if chunk.is_err() {
                break;
            }
        }
        Ok(())
    }

    fn request(&self, index: u32, long: bool) -> Request {
        let poisoned = self.poison.get(index as usize).copied().unwrap_or(false);
        let content = match (poisoned, long) {
            (true, _) => POISON.to_owned(),
            (false, true) => format!("{LONG}call {index}"),
            (false, false) => format!("call {index}"),
        };
        let mut request = Request::chat(vec![Message::user(content)]).max_completion_tokens(256);
        if self.structured {
            request = request.json_schema("answer", serde_json::json!({"type": "object", "required": ["answer"]}), false);
        }
        request.estimated_tokens = if long { 6000 } else { 450 };
        request
    }
}

/// The memory gates of a virtual-time run, their clock and the scope's policy: the cooldown
/// left when a CircuitOpen returns is known exactly.
struct ExactGates {
    gates: Arc<MemoryGates>,
    clock: Arc<dyn Clock>,
    policy: ScopePolicy,
}

impl ExactGates {
    /// Time until the earliest gate of the call's partition could be probed.
    fn cooldown_left(&self, tenant: Option<&str>) -> Duration {
        let now = self.clock.now();
        self.policy
            .sources
            .iter()
            .map(|s| {
                let key = GateKey::new(self.policy.name.as_str(), s.name.as_str());
                match tenant.filter(|_| self.policy.isolation == Isolation::PerTenant) {
                    Some(tenant) => key.with_tenant(tenant),
                    None => key,
                }
            })
            .filter_map(|key| self.gates.snapshot(&key))
            .map(|gate| if gate.state == CircuitState::Open { gate.open_until.saturating_since(now) } else { Duration::ZERO })
            .min()
            .unwrap_or(Duration::ZERO)
    }
}

fn build_client(
    config: &RunConfig,
    policy: &ScopePolicy,
    gates: &Gates,
    upstream: Arc<dyn Upstream>,
    telemetry: Arc<Collector>,
    clock: Arc<dyn Clock>,
    salt: u64,
) -> Result<GatewayClient, String> {
    GatewayClient::builder()
        .preset(config.preset)
        .scope(policy.clone())
        .gates(gates.gates.clone())
        .quota(gates.quota.clone())
        .pacer(gates.pacer.clone())
        .upstream(upstream)
        .telemetry(telemetry)
        .clock(clock)
        .seed(config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt)
        .build()
        .map_err(|e| e.to_string())
}

/// Where a single-process run's attempts go.
enum Target {
    /// The scenario's simulated providers, as the run's transport says.
    Scenario,
    /// Real endpoints: this scope of a gateway config file.
    Real(Box<ScopePolicy>),
}

async fn run_async(scenario: &Scenario, config: &RunConfig, progress: Progress) -> Result<RunResult, String> {
    run_target(scenario, config, progress, Target::Scenario, &|| {}).await
}

async fn run_target(
    scenario: &Scenario,
    config: &RunConfig,
    progress: Progress,
    target: Target,
    started: &(dyn Fn() + Sync),
) -> Result<RunResult, String> {
    let scope = scope_name(&config.backend, config.seed);
    let calls = config.calls.unwrap_or(scenario.calls);
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let start = clock.now();
    started();
    let backend = Gates::new(&config.backend, clock.clone(), config.on_unavailable).await?;
    let telemetry = Arc::new(Collector::new());
    let http = |policy: &ScopePolicy| -> Result<Arc<dyn Upstream>, String> {
        Ok(Arc::new(HttpUpstream::new(std::slice::from_ref(policy)).map_err(|e| e.to_string())?))
    };
    // The server lives until the run ends.
    let (policy, upstream, _server): (ScopePolicy, Arc<dyn Upstream>, _) = match (target, config.transport) {
        (Target::Scenario, Transport::Sim) => {
            let policy = scope_policy(scenario, &scope, config)?;
            let upstream = Arc::new(SimUpstream::new(scenario, &policy, clock.clone(), config.seed));
            (policy, upstream, None)
        }
        (Target::Scenario, Transport::Http) => {
            let mut policy = scope_policy(scenario, &scope, config)?;
            let providers = Arc::new(Providers::new(scenario, clock.clone(), config.seed));
            let server = providers.serve().await.map_err(|e| format!("cannot serve the simulated providers: {e}"))?;
            point_at(&mut policy, &server.root());
            (policy.clone(), http(&policy)?, Some(server))
        }
        (Target::Real(policy), _) => {
            let mut policy = *policy;
            // The run's own scope: a soak never shares gates with the deployment it measures.
            policy.name.clone_from(&scope);
            apply_overrides(&mut policy, config);
            (policy.clone(), http(&policy)?, None)
        }
    };
    let client = Arc::new(build_client(config, &policy, &backend, upstream, telemetry.clone(), clock.clone(), 0)?);
    let keys = gate_keys(&policy, scenario);
    let exact = match (&backend.memory, config.time_scale) {
        (Some((gates, _)), None) => Some(ExactGates { gates: gates.clone(), clock: clock.clone(), policy: policy.clone() }),
        _ => None,
    };
    let workload = Workload {
        client: client.clone(),
        scope: scope.clone(),
        loads: loads(scenario, calls, config.workers.unwrap_or(scenario.workers), 0, 1),
        poison: Arc::new(poison_marks(config.seed, calls, scenario.poison_rate)),
        structured: scenario.structured,
        stream: config.stream,
        exact,
    };
    let circuit_open = workload.drive(progress).await?;
    let duration = clock.now().saturating_since(start);
    let backend_run = backend.backstop.as_ref().map(|backstop| BackendRun {
        on_unavailable: config.on_unavailable,
        fault: None,
        scale: config.time_scale.unwrap_or(1.0),
        processes: vec![backstop.stats()],
        background_dropped: client.dropped_records(),
    });
    // let released leases and permits settle, and the records still in the background end
    tokio::time::sleep(Duration::from_secs(1)).await;
    client.released().await;
    tokio::time::sleep(leases_from_the_fault_left(&policy, config, clock.now().saturating_since(start))).await;
    let (leftover_permits, leftover_leases) = backend.leftovers(&keys, clock.now()).await?;
    let leftover_paced = backend.pacer_leftovers(&policy, scenario).await?;
    let mut preset_policy = policy;
    config.preset.apply(&mut preset_policy);
    Ok(RunResult {
        policy: preset_policy,
        calls,
        call_events: telemetry.calls(),
        attempt_events: telemetry.attempts(),
        gate_events: telemetry.gates(),
        start,
        duration,
        leftover_inflight: client.inflight(&scope) + leftover_paced,
        leftover_permits,
        leftover_leases,
        circuit_open,
        backend: backend_run,
    })
}

/// The scope of a gateway config file a `--upstreams` run uses: the one named `soak`, else the
/// only one.
pub fn upstreams_scope(scopes: Vec<ScopePolicy>, file: &str) -> Result<ScopePolicy, String> {
    let names: Vec<String> = scopes.iter().map(|s| s.name.clone()).collect();
    let mut scopes = scopes;
    match scopes.iter().position(|s| s.name == "soak") {
        Some(at) => Ok(scopes.swap_remove(at)),
        None if scopes.len() == 1 => scopes.pop().ok_or_else(|| format!("{file}: no scope")),
        None if scopes.is_empty() => Err(format!("{file}: declares no scope")),
        None => Err(format!("{file}: declares the scopes {} and none is named `soak`: name the one to soak `soak`", names.join(", "))),
    }
}

/// Runs the scenario's workload (calls, workers, poison payloads, structured output) against
/// the real endpoints of `scope` (a gateway config file's scope), in real time, on the run's
/// backend. The scenario's providers and gateway section are not used.
pub fn run_upstreams(scenario: &Scenario, scope: ScopePolicy, config: &RunConfig, progress: Progress) -> Result<RunResult, String> {
    if config.time_scale.is_some_and(|s| s != 1.0) {
        return Err("--upstreams runs against real endpoints in real time: --time-scale does not apply".to_owned());
    }
    let config = RunConfig { time_scale: Some(1.0), ..config.clone() };
    real_time_runtime()?.block_on(run_target(scenario, &config, progress, Target::Real(Box::new(scope)), &|| {}))
}

/// Milliseconds since a Unix-time origin shared by every process of a run: one time line for
/// their events.
#[derive(Clone, Copy, Debug)]
pub struct SharedClock {
    origin_unix_ms: u64,
}

impl SharedClock {
    /// A clock whose zero is `origin_unix_ms`.
    pub fn at(origin_unix_ms: u64) -> Self {
        SharedClock { origin_unix_ms }
    }

    /// A clock whose zero is now.
    pub fn starting_now() -> Self {
        SharedClock { origin_unix_ms: unix_ms() }
    }
}

// The one wall-clock read of the soak: processes share no other time line.
#[allow(clippy::disallowed_methods)]
fn unix_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

impl Clock for SharedClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(unix_ms().saturating_sub(self.origin_unix_ms))
    }
}

/// What one worker process is asked to run (sent to it as JSON on its standard input).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerSpec {
    /// The scenario's built-in name or file path.
    pub scenario: String,
    /// Its index among the processes.
    pub index: u32,
    /// The run's seed.
    pub seed: u64,
    /// The policy preset.
    pub preset: Preset,
    /// How many processes share the run.
    pub processes: u32,
    /// All calls of the run.
    pub total_calls: u32,
    /// All closed-loop workers of the run.
    pub total_workers: u32,
    /// The Redis URL.
    pub redis: String,
    /// The scope every process uses.
    pub scope: String,
    /// The provider server's root URL.
    pub providers: String,
    /// The run's time scale.
    pub time_scale: f64,
    /// The `circuit_open` override.
    pub circuit_open: Option<WaitMode>,
    /// The isolation override.
    pub isolation: Option<Isolation>,
    /// Calls take their answers as streams.
    #[serde(default)]
    pub stream: bool,
    /// What the process does while Redis cannot answer.
    #[serde(default)]
    pub on_unavailable: OnUnavailable,
    /// Zero of the shared time line, Unix milliseconds.
    pub origin_unix_ms: u64,
}

/// What one worker process reports back (as JSON, on the last line of its standard output).
#[derive(Debug, Serialize, Deserialize)]
pub struct WorkerResult {
    /// Its call events.
    pub call_events: Vec<CallEvent>,
    /// Its attempt events.
    pub attempt_events: Vec<AttemptEvent>,
    /// The gate transitions it caused.
    pub gate_events: Vec<GateEvent>,
    /// AIMD in-flight counts it left.
    pub leftover_inflight: u32,
    /// Its backstop's figures.
    #[serde(default)]
    pub backstop: BackstopStats,
    /// Records its client dropped in the background.
    #[serde(default)]
    pub background_dropped: u64,
}

/// The body of a worker process: runs its share of the calls through the Redis gates and the
/// provider server, on the shared time line.
pub fn run_worker(spec: &WorkerSpec, progress: Progress) -> Result<WorkerResult, String> {
    let scenario = Scenario::load(&spec.scenario).map_err(|e| e.to_string())?.scaled(spec.time_scale);
    let config = RunConfig {
        backend: Backend::Redis(spec.redis.clone()),
        transport: Transport::Http,
        time_scale: Some(spec.time_scale),
        seed: spec.seed,
        preset: spec.preset,
        calls: Some(spec.total_calls),
        workers: Some(spec.total_workers),
        circuit_open: spec.circuit_open,
        isolation: spec.isolation,
        stream: spec.stream,
        on_unavailable: spec.on_unavailable,
        fault: None,
    };
    let mut policy = scope_policy(&scenario, &spec.scope, &config)?;
    point_at(&mut policy, &spec.providers);
    real_time_runtime()?.block_on(async {
        let clock: Arc<dyn Clock> = Arc::new(SharedClock::at(spec.origin_unix_ms));
        let backend = Gates::new(&config.backend, clock.clone(), config.on_unavailable).await?;
        let upstream = Arc::new(HttpUpstream::new(std::slice::from_ref(&policy)).map_err(|e| e.to_string())?);
        let telemetry = Arc::new(Collector::new());
        let client = Arc::new(build_client(&config, &policy, &backend, upstream, telemetry.clone(), clock, u64::from(spec.index))?);
        let workload = Workload {
            client: client.clone(),
            scope: spec.scope.clone(),
            loads: loads(&scenario, spec.total_calls, spec.total_workers, spec.index, spec.processes),
            poison: Arc::new(poison_marks(spec.seed, spec.total_calls, scenario.poison_rate)),
            structured: scenario.structured,
            stream: spec.stream,
            exact: None,
        };
        workload.drive(progress).await?;
        // The records still in the background end (each within its bound) before the process does.
        client.released().await;
        // Call ids are unique per process; a process's calls are told apart by its index.
        let tag = |id: u64| (u64::from(spec.index) << 40) | id;
        let mut result = WorkerResult {
            call_events: telemetry.calls(),
            attempt_events: telemetry.attempts(),
            gate_events: telemetry.gates(),
            leftover_inflight: client.inflight(&spec.scope),
            backstop: backend.backstop.as_ref().map(|b| b.stats()).unwrap_or_default(),
            background_dropped: client.dropped_records(),
        };
        result.call_events.iter_mut().for_each(|c| c.call_id = tag(c.call_id));
        result.attempt_events.iter_mut().for_each(|a| a.call_id = tag(a.call_id));
        Ok(result)
    })
}

/// The whole of a worker process: reads its `WorkerSpec` as JSON on standard input, runs it,
/// and writes `progress N` lines and a last `result {json}` line on standard output.
pub fn worker_main() -> Result<(), String> {
    use std::io::Write;
    let spec: WorkerSpec = serde_json::from_reader(std::io::stdin().lock()).map_err(|e| format!("soak worker: bad spec on stdin: {e}"))?;
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        // A parent that went away stops reading; the run's result is then nobody's.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    };
    let result = run_worker(&spec, Arc::new(move |done| say(format!("progress {done}"))))?;
    let json = serde_json::to_string(&result).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "result {json}").and_then(|()| out.flush()).map_err(|e| format!("soak worker: cannot write the result: {e}"))
}

/// Starts a worker process for `spec`: its standard input takes the spec as JSON, its standard
/// output says `progress N` lines and a last `result {json}` line.
pub type Launcher = dyn Fn(&WorkerSpec) -> std::io::Result<std::process::Child> + Sync;

/// Runs `scenario` in `processes` worker processes sharing the Redis gates and one provider
/// server (served by this process over loopback HTTP), in real time; merges their telemetry into
/// one result for the invariants and the report.
pub fn run_processes(
    scenario_ref: &str,
    scenario: &Scenario,
    config: &RunConfig,
    processes: u32,
    launch: &Launcher,
    progress: Progress,
) -> Result<RunResult, String> {
    shared_url(config)?;
    if config.transport != Transport::Http {
        return Err("--workers N (several processes) needs one set of providers for all: add --transport http".to_owned());
    }
    let scale = check(config)?.ok_or("several processes run in real time: give --time-scale")?;
    let workers = Workers { scenario_ref, processes, launch, progress };
    with_fault(config, scale, |config, started| run_processes_on(scenario, config, scale, workers, started))
}

/// The worker processes of a [`run_processes`] run.
struct Workers<'a> {
    scenario_ref: &'a str,
    processes: u32,
    launch: &'a Launcher,
    progress: Progress,
}

/// The Redis a several-process run shares.
fn shared_url(config: &RunConfig) -> Result<&str, String> {
    match &config.backend {
        Backend::Redis(url) => Ok(url),
        Backend::Memory => Err("--workers N (several processes) needs the shared backend: add --backend redis".to_owned()),
    }
}

/// [`run_processes`] on the Redis of `config` (the run's own, with a fault), `scale` real seconds
/// per scenario second, telling `started` when the time line begins.
fn run_processes_on(
    scenario: &Scenario,
    config: &RunConfig,
    scale: f64,
    Workers { scenario_ref, processes, launch, progress }: Workers<'_>,
    started: &(dyn Fn() + Sync),
) -> Result<RunResult, String> {
    let redis = shared_url(config)?;
    let scaled = scenario.scaled(scale);
    let scope = scope_name(&config.backend, config.seed);
    let mut policy = scope_policy(&scaled, &scope, config)?;
    let calls = config.calls.unwrap_or(scenario.calls);
    let workers = config.workers.unwrap_or(scenario.workers).max(processes);
    real_time_runtime()?.block_on(async {
        let clock = SharedClock::starting_now();
        started();
        let providers = Arc::new(Providers::new(&scaled, Arc::new(clock), config.seed));
        let server = providers.serve().await.map_err(|e| format!("cannot serve the simulated providers: {e}"))?;
        point_at(&mut policy, &server.root());
        let done: Arc<Vec<AtomicU32>> = Arc::new((0..processes).map(|_| AtomicU32::new(0)).collect());
        let mut children = Vec::new();
        for index in 0..processes {
            let spec = WorkerSpec {
                scenario: scenario_ref.to_owned(),
                index,
                seed: config.seed,
                preset: config.preset,
                processes,
                total_calls: calls,
                total_workers: workers,
                redis: redis.to_owned(),
                scope: scope.clone(),
                providers: server.root(),
                time_scale: scale,
                circuit_open: config.circuit_open,
                isolation: config.isolation,
                stream: config.stream,
                on_unavailable: config.on_unavailable,
                origin_unix_ms: clock.origin_unix_ms,
            };
            let mut child = launch(&spec).map_err(|e| format!("cannot start worker process {index}: {e}"))?;
            let mut stdin = child.stdin.take().ok_or("worker process without a standard input")?;
            let stdout = child.stdout.take().ok_or("worker process without a standard output")?;
            serde_json::to_writer(&mut stdin, &spec).map_err(|e| format!("worker process {index}: {e}"))?;
            drop(stdin);
            let (done, progress) = (done.clone(), progress.clone());
            children.push(tokio::task::spawn_blocking(move || read_worker(index, child, stdout, &done, &progress)));
        }
        let mut results = Vec::new();
        for child in children {
            results.push(child.await.map_err(|e| e.to_string())??);
        }
        // The readers report concurrently, so their last reports may land out of order: the
        // total, once every reader is done, is the last word.
        progress(done.iter().map(|d| d.load(Ordering::Relaxed)).sum());
        drop(server);
        let duration = clock.now().saturating_since(Timestamp::from_millis(0));
        // The end-of-run reads ask Redis itself (no backstop: a figure it cannot read is an error).
        let backend = Gates::new(&config.backend, Arc::new(clock), OnUnavailable::FailClosed).await?;
        tokio::time::sleep(leases_from_the_fault_left(&policy, config, duration)).await;
        let keys = gate_keys(&policy, &scaled);
        let (leftover_permits, leftover_leases) = backend.leftovers(&keys, clock.now()).await?;
        let leftover_paced = backend.pacer_leftovers(&policy, &scaled).await?;
        let mut preset_policy = policy;
        config.preset.apply(&mut preset_policy);
        let mut merged = RunResult {
            policy: preset_policy,
            calls,
            call_events: Vec::new(),
            attempt_events: Vec::new(),
            gate_events: Vec::new(),
            start: Timestamp::from_millis(0),
            duration,
            leftover_inflight: leftover_paced,
            leftover_permits,
            leftover_leases,
            circuit_open: Vec::new(),
            backend: Some(BackendRun { on_unavailable: config.on_unavailable, scale, ..BackendRun::default() }),
        };
        for result in results {
            merged.call_events.extend(result.call_events);
            merged.attempt_events.extend(result.attempt_events);
            merged.gate_events.extend(result.gate_events);
            merged.leftover_inflight += result.leftover_inflight;
            if let Some(backend) = &mut merged.backend {
                backend.processes.push(result.backstop);
                backend.background_dropped += result.background_dropped;
            }
        }
        merged.call_events.sort_by_key(|c| (c.started, c.call_id));
        merged.attempt_events.sort_by_key(|a| (a.started, a.call_id));
        // One time line, millisecond resolution: within a millisecond a gate's own order (the
        // epoch, then OPEN before HALF_OPEN before CLOSED) decides.
        merged.gate_events.sort_by_key(|g| (g.at, g.epoch, state_rank(g.transition.to)));
        Ok(merged)
    })
}

fn state_rank(state: CircuitState) -> u8 {
    match state {
        CircuitState::Open => 0,
        CircuitState::HalfOpen => 1,
        CircuitState::Closed => 2,
    }
}

/// Reads a worker's progress and result, and waits for it to exit.
fn read_worker(
    index: u32,
    mut child: std::process::Child,
    stdout: std::process::ChildStdout,
    done: &[AtomicU32],
    progress: &Progress,
) -> Result<WorkerResult, String> {
    let mut result = None;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("worker process {index}: {e}"))?;
        if let Some(n) = line.strip_prefix("progress ").and_then(|n| n.parse::<u32>().ok()) {
            if let Some(slot) = done.get(index as usize) {
                slot.store(n, Ordering::Relaxed);
            }
            progress(done.iter().map(|d| d.load(Ordering::Relaxed)).sum());
        } else if let Some(json) = line.strip_prefix("result ") {
            result = Some(serde_json::from_str::<WorkerResult>(json).map_err(|e| format!("worker process {index}: bad result: {e}"))?);
        }
    }
    let status = child.wait().map_err(|e| format!("worker process {index}: {e}"))?;
    match result {
        Some(result) if status.success() => Ok(result),
        _ => Err(format!("worker process {index} failed ({status}); its error is above")),
    }
}
