//! The worker processes of a several-process run: what each is asked to run, its body, and
//! how the parent starts them, feeds them and gathers their parts.

use super::backend::Gates;
use super::clock::SharedClock;
use super::process::{Part, WorkerResult, assemble, ending};
use super::{
    Backend, BackendRun, Progress, RunConfig, RunError, RunResult, Transport, check, point_at, scope_name, scope_policy, with_fault,
};
use crate::scenario::Scenario;
use crate::upstream::Providers;
use gateway_client::Preset;
use gateway_core::policy::{Isolation, ScopePolicy, WaitMode};
use gateway_core::time::{Clock, Timestamp};
use gateway_http::HttpUpstream;
use gateway_memory::backstop::OnUnavailable;
use serde::{Deserialize, Serialize};
use std::io::BufRead;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// What one worker process is asked to run (sent to it as JSON on its standard input).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerSpec {
    /// The scenario's built-in name or file path.
    pub scenario: String,
    /// Its `--set` overrides.
    #[serde(default)]
    pub overrides: Vec<String>,
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
    /// When each process reloads its scope (scenario seconds), if asked.
    #[serde(default)]
    pub reload_at: Option<f64>,
    /// The `circuit_open` override.
    pub circuit_open: Option<WaitMode>,
    /// The isolation override.
    pub isolation: Option<Isolation>,
    /// Calls take their answers as streams.
    #[serde(default)]
    pub stream: bool,
    /// The API the calls go through.
    #[serde(default)]
    pub api: super::Api,
    /// What the process does while Redis cannot answer.
    #[serde(default)]
    pub on_unavailable: OnUnavailable,
    /// Zero of the shared time line, Unix milliseconds.
    pub origin_unix_ms: u64,
}

/// The body of a worker process: runs its share of the calls through the Redis gates and the
/// provider server, on the shared time line.
pub fn run_worker(spec: &WorkerSpec, progress: Progress) -> Result<WorkerResult, RunError> {
    let scenario = Scenario::load_with(&spec.scenario, &spec.overrides)?.scaled(spec.time_scale);
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
        api: spec.api,
        on_unavailable: spec.on_unavailable,
        fault: None,
        reload_at: spec.reload_at,
    };
    let mut policy = scope_policy(&scenario, &spec.scope, &config)?;
    point_at(&mut policy, &spec.providers);
    let part = Part {
        index: spec.index,
        processes: spec.processes,
        scenario: &scenario,
        config: &config,
        policy: &policy,
        scope: &spec.scope,
        settle: Duration::ZERO,
    };
    super::real_time_runtime()?.block_on(async {
        let clock: Arc<dyn Clock> = Arc::new(SharedClock::at(spec.origin_unix_ms));
        let gates = Gates::new(&config.backend, clock.clone(), config.on_unavailable).await?;
        let upstream = Arc::new(HttpUpstream::new(std::slice::from_ref(&policy))?);
        Ok(part.run(&gates, upstream, clock, None, progress).await?.0)
    })
}

/// The whole of a worker process: reads its `WorkerSpec` as JSON on standard input, runs it,
/// and writes `progress N` lines and a last `result {json}` line on standard output.
pub fn worker_main() -> Result<(), RunError> {
    use std::io::Write;
    let spec: WorkerSpec = serde_json::from_reader(std::io::stdin().lock()).map_err(RunError::WorkerSpec)?;
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        // A parent that went away stops reading; the run's result is then nobody's.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    };
    let result = run_worker(&spec, Arc::new(move |done| say(format!("progress {done}"))))?;
    let json = serde_json::to_string(&result).map_err(RunError::WorkerSpec)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "result {json}").and_then(|()| out.flush()).map_err(RunError::WorkerOutput)
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
) -> Result<RunResult, RunError> {
    shared_url(config)?;
    if config.transport != Transport::Http {
        return Err(RunError::ProcessesNeedHttp);
    }
    let scale = check(config)?.ok_or(RunError::ProcessesNeedTimeScale)?;
    let workers = Workers { scenario_ref, overrides: &scenario.overrides, processes, launch, progress };
    with_fault(config, scale, |config, started| run_processes_on(scenario, config, scale, workers, started))
}

/// The worker processes of a [`run_processes`] run.
struct Workers<'a> {
    scenario_ref: &'a str,
    overrides: &'a [String],
    processes: u32,
    launch: &'a Launcher,
    progress: Progress,
}

/// The Redis a several-process run shares.
fn shared_url(config: &RunConfig) -> Result<&str, RunError> {
    match &config.backend {
        Backend::Redis(url) => Ok(url),
        Backend::Memory => Err(RunError::ProcessesNeedRedis),
    }
}

/// [`run_processes`] on the Redis of `config` (the run's own, with a fault), `scale` real seconds
/// per scenario second, telling `started` when the time line begins.
fn run_processes_on(
    scenario: &Scenario,
    config: &RunConfig,
    scale: f64,
    workers: Workers<'_>,
    started: &(dyn Fn() + Sync),
) -> Result<RunResult, RunError> {
    let scaled = scenario.scaled(scale);
    let mut policy = scope_policy(&scaled, &scope_name(&config.backend, config.seed), config)?;
    let calls = config.calls.unwrap_or(scenario.calls);
    super::real_time_runtime()?.block_on(async {
        let clock = SharedClock::starting_now();
        started();
        let providers = Arc::new(Providers::new(&scaled, Arc::new(clock), config.seed));
        let server = providers.clone().serve().await.map_err(RunError::Serve)?;
        point_at(&mut policy, &server.root());
        let total_workers = config.workers.unwrap_or(scenario.workers).max(workers.processes);
        let results = workers.run(config, &policy, (calls, total_workers), scale, &server.root(), clock).await?;
        drop(server);
        let duration = clock.now().saturating_since(Timestamp::from_millis(0));
        // The end-of-run reads ask Redis itself (no backstop: a figure it cannot read is an error).
        let gates = Gates::new(&config.backend, Arc::new(clock), OnUnavailable::FailClosed).await?;
        let mut ending = ending(&gates, config, &scaled, policy, &clock, Timestamp::from_millis(0), duration).await?;
        ending.backend = Some(BackendRun { on_unavailable: config.on_unavailable, scale, ..BackendRun::default() });
        let mut run = assemble(config.preset, calls, ending, results);
        run.accounts = providers.accounts();
        Ok(run)
    })
}

impl Workers<'_> {
    /// Starts a worker process per part, feeds each its spec, and gathers their results.
    async fn run(
        self,
        config: &RunConfig,
        policy: &ScopePolicy,
        (total_calls, total_workers): (u32, u32),
        scale: f64,
        providers: &str,
        clock: SharedClock,
    ) -> Result<Vec<WorkerResult>, RunError> {
        let Workers { scenario_ref, overrides, processes, launch, progress } = self;
        let done: Arc<Vec<AtomicU32>> = Arc::new((0..processes).map(|_| AtomicU32::new(0)).collect());
        let mut children = Vec::new();
        for index in 0..processes {
            let spec = WorkerSpec {
                scenario: scenario_ref.to_owned(),
                overrides: overrides.to_vec(),
                index,
                seed: config.seed,
                preset: config.preset,
                processes,
                total_calls,
                total_workers,
                redis: shared_url(config)?.to_owned(),
                scope: policy.name.clone(),
                providers: providers.to_owned(),
                time_scale: scale,
                reload_at: config.reload_at,
                circuit_open: config.circuit_open,
                isolation: config.isolation,
                stream: config.stream,
                api: config.api,
                on_unavailable: config.on_unavailable,
                origin_unix_ms: clock.origin_unix_ms,
            };
            let mut child = launch(&spec).map_err(|e| RunError::Worker { index, problem: format!("cannot start: {e}") })?;
            let pipe = |what: &str| RunError::Worker { index, problem: format!("started without a standard {what}") };
            let mut stdin = child.stdin.take().ok_or_else(|| pipe("input"))?;
            let stdout = child.stdout.take().ok_or_else(|| pipe("output"))?;
            serde_json::to_writer(&mut stdin, &spec).map_err(|e| RunError::Worker { index, problem: e.to_string() })?;
            drop(stdin);
            let (done, progress) = (done.clone(), progress.clone());
            children.push(tokio::task::spawn_blocking(move || read_worker(index, child, stdout, &done, &progress)));
        }
        let mut results = Vec::new();
        for child in children {
            results.push(child.await.map_err(RunError::Task)??);
        }
        // The readers report concurrently, so their last reports may land out of order: the
        // total, once every reader is done, is the last word.
        progress(done.iter().map(|d| d.load(Ordering::Relaxed)).sum());
        Ok(results)
    }
}

/// Reads a worker's progress and result, and waits for it to exit.
fn read_worker(
    index: u32,
    mut child: std::process::Child,
    stdout: std::process::ChildStdout,
    done: &[AtomicU32],
    progress: &Progress,
) -> Result<WorkerResult, RunError> {
    let mut result = None;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.map_err(|e| RunError::Worker { index, problem: e.to_string() })?;
        if let Some(n) = line.strip_prefix("progress ").and_then(|n| n.parse::<u32>().ok()) {
            if let Some(slot) = done.get(index as usize) {
                slot.store(n, Ordering::Relaxed);
            }
            progress(done.iter().map(|d| d.load(Ordering::Relaxed)).sum());
        } else if let Some(json) = line.strip_prefix("result ") {
            let bad = |e: serde_json::Error| RunError::Worker { index, problem: format!("bad result: {e}") };
            result = Some(serde_json::from_str::<WorkerResult>(json).map_err(bad)?);
        }
    }
    let status = child.wait().map_err(|e| RunError::Worker { index, problem: e.to_string() })?;
    match result {
        Some(result) if status.success() => Ok(result),
        _ => Err(RunError::Worker { index, problem: format!("failed ({status}); its error is above") }),
    }
}
