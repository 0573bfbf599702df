//! One soak run: the scenario's workload through a `GatewayClient` by closed-loop workers. By
//! default on a paused tokio clock with the memory gates and in-process simulated providers, so a
//! seed gives the same run. With a time scale, in real time with every duration scaled: the Redis
//! gates (their clock is the server's), the providers served over loopback HTTP and called
//! through the HTTP adapter, and several processes sharing one Redis ([`run_processes`]).

mod backend;
mod clock;
mod process;
mod workers;
mod workload;

pub use clock::SharedClock;
pub use process::{ReloadNote, WorkerResult};
pub use workers::{Launcher, WorkerSpec, run_processes, run_worker, worker_main};
pub use workload::{Load, loads};

use crate::fault::{Fault, FaultError, OwnRedis};
use crate::ledger::AccountFigures;
use crate::scenario::{Scenario, ScenarioError};
use crate::upstream::{Providers, SimUpstream};
use backend::Gates;
use gateway_client::{BuildError, Preset, TokioClock};
use gateway_core::policy::{Isolation, PolicyError, ScopePolicy, WaitMode};
use gateway_core::ports::{BackendError, SourceKey, Upstream};
use gateway_core::telemetry::{AttemptEvent, CallEvent, GateEvent};
use gateway_core::time::{Clock, Timestamp};
use gateway_http::{HttpConfigError, HttpUpstream};
use gateway_memory::backstop::{BackstopStats, OnUnavailable};
use process::{Part, assemble, ending};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use workload::ExactGates;

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

/// The API the workload calls through: chat completions, or the Responses API (its calls
/// `responses` requests, its answers `response`s, its streams named events).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `chat/completions`.
    #[default]
    Chat,
    /// `responses`.
    Responses,
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
    /// The API the calls go through.
    pub api: Api,
    /// What the Redis backend's clients do while it cannot answer.
    pub on_unavailable: OnUnavailable,
    /// A Redis fault to inject, into a Redis of the run's own (the backend's URL is not used).
    pub fault: Option<Fault>,
    /// Scenario seconds (scaled in real time) after which each process reloads its scope
    /// (`GatewayClient::reload_with`, a new HTTP upstream over HTTP) while its calls run.
    pub reload_at: Option<f64>,
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
    /// What each simulated provider account saw (none against real endpoints).
    pub accounts: BTreeMap<String, AccountFigures>,
    /// The reloads the processes made mid-run.
    pub reloads: Vec<ReloadNote>,
}

/// Told the number of calls ended so far.
pub type Progress = Arc<dyn Fn(u32) + Send + Sync>;

/// Why a run could not be made, naming the flag, file, scope or process at fault.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A fault without the Redis backend.
    #[error("--fault injects a Redis fault: add --backend redis (the run starts a Redis of its own for it)")]
    FaultNeedsRedis,
    /// The Redis backend in virtual time.
    #[error("the Redis backend runs in real time (its clock is the server's): give a time scale, e.g. --time-scale 0.05")]
    RedisNeedsTimeScale,
    /// The HTTP transport in virtual time.
    #[error("the HTTP transport runs in real time (sockets do not follow a virtual clock): give a time scale, e.g. --time-scale 0.05")]
    HttpNeedsTimeScale,
    /// A time scale that is not a positive number.
    #[error("time scale {0} must be a positive number")]
    TimeScale(f64),
    /// Several processes without the shared backend.
    #[error("--workers N (several processes) needs the shared backend: add --backend redis")]
    ProcessesNeedRedis,
    /// Several processes without the HTTP transport.
    #[error("--workers N (several processes) needs one set of providers for all: add --transport http")]
    ProcessesNeedHttp,
    /// Several processes in virtual time.
    #[error("several processes run in real time: give --time-scale")]
    ProcessesNeedTimeScale,
    /// A time scale for a run against real endpoints.
    #[error("--upstreams runs against real endpoints in real time: --time-scale does not apply")]
    UpstreamsTimeScale,
    /// A gateway config file for `--upstreams` without a scope to soak.
    #[error("{file}: declares no scope")]
    NoScope {
        /// The file.
        file: String,
    },
    /// A gateway config file for `--upstreams` with several scopes, none named `soak`.
    #[error("{file}: declares the scopes {scopes} and none is named `soak`: name the one to soak `soak`")]
    NoSoakScope {
        /// The file.
        file: String,
        /// Its scopes.
        scopes: String,
    },
    /// The scenario cannot be loaded.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The scenario's scope is invalid (the error names the key).
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The client cannot be built.
    #[error(transparent)]
    Client(#[from] BuildError),
    /// The HTTP adapter refuses the scope (the error names the source).
    #[error(transparent)]
    Http(#[from] HttpConfigError),
    /// The backend failed (the error names it).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The run's Redis fault.
    #[error(transparent)]
    Fault(#[from] FaultError),
    /// The runtime cannot start.
    #[error("cannot start the run's runtime: {0}")]
    Runtime(std::io::Error),
    /// The simulated providers cannot be served.
    #[error("cannot serve the simulated providers: {0}")]
    Serve(std::io::Error),
    /// A task of the run failed.
    #[error("a task of the run failed: {0}")]
    Task(tokio::task::JoinError),
    /// A worker process failed.
    #[error("worker process {index}: {problem}")]
    Worker {
        /// Its index.
        index: u32,
        /// What went wrong.
        problem: String,
    },
    /// A worker process's spec (on its standard input) or result is not the JSON it must be.
    #[error("soak worker: bad spec on stdin: {0}")]
    WorkerSpec(serde_json::Error),
    /// A worker process cannot write its result.
    #[error("soak worker: cannot write the result: {0}")]
    WorkerOutput(std::io::Error),
    /// The fault injector's thread panicked.
    #[error("the fault injector panicked")]
    InjectorPanicked,
}

fn check(config: &RunConfig) -> Result<Option<f64>, RunError> {
    if config.fault.is_some() && config.backend == Backend::Memory {
        return Err(RunError::FaultNeedsRedis);
    }
    match config.time_scale {
        None if config.backend != Backend::Memory => Err(RunError::RedisNeedsTimeScale),
        None if config.transport == Transport::Http => Err(RunError::HttpNeedsTimeScale),
        Some(scale) if !(scale.is_finite() && scale > 0.0) => Err(RunError::TimeScale(scale)),
        scale => Ok(scale),
    }
}

fn real_time_runtime() -> Result<tokio::runtime::Runtime, RunError> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(RunError::Runtime)
}

/// Runs `scenario` as `config` says in this process; `progress` is told the calls ended so far.
pub fn run(scenario: &Scenario, config: &RunConfig, progress: Progress) -> Result<RunResult, RunError> {
    match check(config)? {
        None => {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().map_err(RunError::Runtime)?;
            runtime.block_on(run_target(scenario, config, progress, Target::Scenario, &|| {}))
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
    body: impl FnOnce(&RunConfig, &(dyn Fn() + Sync)) -> Result<RunResult, RunError>,
) -> Result<RunResult, RunError> {
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
    let (injected, _redis) = injector.join().map_err(|_| RunError::InjectorPanicked)?;
    let (mut result, injected) = (result?, injected?);
    if let Some(backend) = &mut result.backend {
        backend.fault = Some((fault, injected));
    }
    Ok(result)
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
fn scope_policy(scenario: &Scenario, name: &str, config: &RunConfig) -> Result<ScopePolicy, RunError> {
    let mut policy = scenario.scope_named(name)?;
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
fn gate_keys(policy: &ScopePolicy, scenario: &Scenario) -> Vec<SourceKey> {
    let mut keys: Vec<SourceKey> = policy.sources.iter().map(|s| SourceKey::new(policy.name.as_str(), s.name.as_str())).collect();
    if policy.isolation == Isolation::PerTenant {
        for tenant in scenario.tenants.keys() {
            keys.extend(policy.sources.iter().map(|s| SourceKey::new(policy.name.as_str(), s.name.as_str()).with_tenant(tenant.as_str())));
        }
    }
    keys
}

/// Points every source of `policy` at the provider server whose root URL is `root`.
fn point_at(policy: &mut ScopePolicy, root: &str) {
    for source in &mut policy.sources {
        source.base_url = Some(gateway_mock::source_url(root, &source.name));
        source.model = Some(source.name.clone());
    }
}

/// Where a single-process run's attempts go.
enum Target {
    /// The scenario's simulated providers, as the run's transport says.
    Scenario,
    /// Real endpoints: this scope of a gateway config file.
    Real(Box<ScopePolicy>),
}

/// The scope a single-process run uses and its transport (with the server of the simulated
/// providers, which must live until the run ends).
type Targeted = (ScopePolicy, Arc<dyn Upstream>, Option<gateway_mock::MockServer>, Option<Arc<Providers>>);

impl Target {
    async fn upstream(self, scenario: &Scenario, config: &RunConfig, scope: &str, clock: Arc<dyn Clock>) -> Result<Targeted, RunError> {
        let http = |policy: &ScopePolicy| -> Result<Arc<dyn Upstream>, RunError> {
            Ok(Arc::new(HttpUpstream::new(std::slice::from_ref(policy))?))
        };
        match (self, config.transport) {
            (Target::Scenario, Transport::Sim) => {
                let policy = scope_policy(scenario, scope, config)?;
                let timer = if config.time_scale.is_some() { gateway_mock::Timer::Precise } else { gateway_mock::Timer::Tokio };
                let upstream = Arc::new(SimUpstream::new(scenario, &policy, clock, config.seed, timer));
                let providers = upstream.providers();
                Ok((policy, upstream, None, Some(providers)))
            }
            (Target::Scenario, Transport::Http) => {
                let mut policy = scope_policy(scenario, scope, config)?;
                let providers = Arc::new(Providers::new(scenario, clock, config.seed));
                let server = providers.clone().serve().await.map_err(RunError::Serve)?;
                point_at(&mut policy, &server.root());
                let upstream = http(&policy)?;
                Ok((policy, upstream, Some(server), Some(providers)))
            }
            (Target::Real(policy), _) => {
                let mut policy = *policy;
                // The run's own scope: a soak never shares gates with the deployment it measures.
                policy.name = scope.to_owned();
                apply_overrides(&mut policy, config);
                let upstream = http(&policy)?;
                Ok((policy, upstream, None, None))
            }
        }
    }
}

/// A single-process run: one part, in this process.
async fn run_target(
    scenario: &Scenario,
    config: &RunConfig,
    progress: Progress,
    target: Target,
    started: &(dyn Fn() + Sync),
) -> Result<RunResult, RunError> {
    let scope = scope_name(&config.backend, config.seed);
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let start = clock.now();
    started();
    let gates = Gates::new(&config.backend, clock.clone(), config.on_unavailable).await?;
    let (policy, upstream, _server, providers) = target.upstream(scenario, config, &scope, clock.clone()).await?;
    let exact = match (&gates.memory, config.time_scale) {
        (Some((memory, _)), None) => Some(ExactGates { gates: memory.clone(), clock: clock.clone(), policy: policy.clone() }),
        _ => None,
    };
    let settle = Duration::from_secs(1);
    let part = Part { index: 0, processes: 1, scenario, config, policy: &policy, scope: &scope, settle };
    let (result, ended) = part.run(&gates, upstream, clock.clone(), exact, progress).await?;
    let ending = ending(&gates, config, scenario, policy.clone(), &*clock, start, ended.saturating_since(start)).await?;
    let mut run = assemble(config.preset, config.calls.unwrap_or(scenario.calls), ending, vec![result]);
    run.accounts = providers.map(|p| p.accounts()).unwrap_or_default();
    Ok(run)
}

/// The scope of a gateway config file a `--upstreams` run uses: the one named `soak`, else the
/// only one.
pub fn upstreams_scope(mut scopes: Vec<ScopePolicy>, file: &str) -> Result<ScopePolicy, RunError> {
    match scopes.iter().position(|s| s.name == "soak") {
        Some(at) => Ok(scopes.swap_remove(at)),
        None if scopes.len() == 1 => scopes.pop().ok_or_else(|| RunError::NoScope { file: file.to_owned() }),
        None if scopes.is_empty() => Err(RunError::NoScope { file: file.to_owned() }),
        None => {
            let names: Vec<&str> = scopes.iter().map(|s| s.name.as_str()).collect();
            Err(RunError::NoSoakScope { file: file.to_owned(), scopes: names.join(", ") })
        }
    }
}

/// Runs the scenario's workload (calls, workers, poison payloads, structured output) against
/// the real endpoints of `scope` (a gateway config file's scope), in real time, on the run's
/// backend. The scenario's providers and gateway section are not used.
pub fn run_upstreams(scenario: &Scenario, scope: ScopePolicy, config: &RunConfig, progress: Progress) -> Result<RunResult, RunError> {
    if config.time_scale.is_some_and(|s| s != 1.0) {
        return Err(RunError::UpstreamsTimeScale);
    }
    let config = RunConfig { time_scale: Some(1.0), ..config.clone() };
    real_time_runtime()?.block_on(run_target(scenario, &config, progress, Target::Real(Box::new(scope)), &|| {}))
}
