//! One process's part of a run: its client and workload, what it leaves ([`WorkerResult`]), and
//! how the parts' results become one [`RunResult`]. A single-process run is one part in this
//! process; a several-process run starts a worker process per part and merges what they report.

use super::backend::{Gates, leases_from_the_fault_left};
use super::workload::{ExactGates, Workload, loads, poison_marks};
use super::{BackendRun, Progress, RunConfig, RunError, RunResult, gate_keys};
use crate::scenario::Scenario;
use gateway_client::{Collector, GatewayClient, Preset};
use gateway_core::breaker::CircuitState;
use gateway_core::policy::ScopePolicy;
use gateway_core::ports::Upstream;
use gateway_core::telemetry::{AttemptEvent, CallEvent, GateEvent};
use gateway_core::time::{Clock, Timestamp};
use gateway_memory::backstop::BackstopStats;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

fn build_client(
    config: &RunConfig,
    policy: &ScopePolicy,
    gates: &Gates,
    upstream: Arc<dyn Upstream>,
    telemetry: Arc<Collector>,
    clock: Arc<dyn Clock>,
    salt: u64,
) -> Result<GatewayClient, RunError> {
    let mut builder = GatewayClient::builder();
    if let Some(attempts) = &gates.attempts {
        builder = builder.attempts(attempts.clone());
    }
    builder
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
        .map_err(RunError::from)
}

/// One process's part of a run: its index among `processes`, the scenario (scaled), the scope
/// as the run configures it, and how long to let released leases settle before it reports.
pub(super) struct Part<'a> {
    pub(super) index: u32,
    pub(super) processes: u32,
    pub(super) scenario: &'a Scenario,
    pub(super) config: &'a RunConfig,
    pub(super) policy: &'a ScopePolicy,
    pub(super) scope: &'a str,
    pub(super) settle: Duration,
}

impl Part<'_> {
    /// Runs this part's share of the calls on `gates` through `upstream`, on `clock`: its
    /// result, and when its last call ended. With `exact` gates, every `CircuitOpen` is checked
    /// against the cooldown left.
    pub(super) async fn run(
        &self,
        gates: &Gates,
        upstream: Arc<dyn Upstream>,
        clock: Arc<dyn Clock>,
        exact: Option<ExactGates>,
        progress: Progress,
    ) -> Result<(WorkerResult, Timestamp), RunError> {
        let (config, scenario) = (self.config, self.scenario);
        let telemetry = Arc::new(Collector::new());
        let upstream_for_reload = upstream.clone();
        let client = Arc::new(build_client(config, self.policy, gates, upstream, telemetry.clone(), clock.clone(), u64::from(self.index))?);
        // Capacity freed by the other processes wakes this one's waiters, as in the proxy.
        let watch = gates.redis.as_ref().map(|(redis, _)| {
            let weak = Arc::downgrade(&client);
            gateway_redis::watch_freed(redis.connection(), move |scope| weak.upgrade().is_some_and(|client| client.capacity_freed(scope)))
        });
        let calls = config.calls.unwrap_or(scenario.calls);
        let workload = Workload {
            client: client.clone(),
            scope: self.scope.to_owned(),
            loads: loads(scenario, calls, config.workers.unwrap_or(scenario.workers), self.index, self.processes),
            poison: Arc::new(poison_marks(config.seed, calls, scenario.poison_rate)),
            structured: scenario.structured,
            stream: config.stream,
            api: config.api,
            exact,
        };
        let reload = config.reload_at.map(|at| self.reload_at(at, &client, &upstream_for_reload, &clock));
        let circuit_open = workload.drive(progress).await?;
        let ended = clock.now();
        let reloads = match reload {
            Some(task) => {
                task.abort();
                task.await.ok().flatten().into_iter().collect()
            }
            None => Vec::new(),
        };
        // Released leases and permits settle, and the records still in the background end
        // (each within its bound), before the part reports.
        tokio::time::sleep(self.settle).await;
        client.released().await;
        // Call ids are unique per process; a process's calls are told apart by its index.
        let tag = |id: u64| (u64::from(self.index) << 40) | id;
        let mut result = WorkerResult {
            call_events: telemetry.calls(),
            attempt_events: telemetry.attempts(),
            gate_events: telemetry.gates(),
            leftover_inflight: client.inflight(self.scope),
            backstop: gates.backstop.as_ref().map(|b| b.stats()).unwrap_or_default(),
            circuit_open,
            background_dropped: client.dropped_records(),
            reloads,
        };
        result.call_events.iter_mut().for_each(|c| c.call_id = tag(c.call_id));
        result.attempt_events.iter_mut().for_each(|a| a.call_id = tag(a.call_id));
        if let Some(watch) = watch {
            watch.abort();
        }
        Ok((result, ended))
    }
}

impl Part<'_> {
    /// Reloads the scope `at` scenario seconds (scaled in real time) from now while the calls
    /// run: over HTTP with an upstream of its own, as a proxy's reload builds one. The task
    /// ends with what the reload did, or is aborted if the run ends first.
    fn reload_at(
        &self,
        at: f64,
        client: &Arc<GatewayClient>,
        upstream: &Arc<dyn Upstream>,
        clock: &Arc<dyn Clock>,
    ) -> tokio::task::JoinHandle<Option<ReloadNote>> {
        let delay = Duration::from_secs_f64(at * self.config.time_scale.unwrap_or(1.0));
        let (client, upstream, clock, policy) = (client.clone(), upstream.clone(), clock.clone(), self.policy.clone());
        let http = self.config.transport == super::Transport::Http;
        let (scope, index) = (self.scope.to_owned(), self.index);
        tokio::spawn(async move {
            let began = clock.now();
            tokio::time::sleep(delay).await;
            let upstream: Arc<dyn Upstream> = match http {
                true => match gateway_http::HttpUpstream::new(std::slice::from_ref(&policy)) {
                    Ok(fresh) => Arc::new(fresh),
                    Err(e) => {
                        tracing::error!(%e, "the reload's upstream could not be built");
                        return None;
                    }
                },
                false => upstream,
            };
            let inflight = client.inflight(&scope);
            let at_s = clock.now().saturating_since(began).as_secs_f64();
            match client.reload_with(vec![policy], upstream).await {
                Ok(done) => Some(ReloadNote { process: index, at_s, kept: done.kept.len(), inflight }),
                Err(e) => {
                    tracing::error!(%e, "the soak's reload was refused");
                    None
                }
            }
        })
    }
}

/// A reload a process made mid-run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReloadNote {
    /// The process.
    pub process: u32,
    /// When, seconds into the part (scaled time in real time).
    pub at_s: f64,
    /// Sources kept (all of them: the scope reloads as it was).
    pub kept: usize,
    /// Attempts in flight in the process then (they finish on the old configuration).
    pub inflight: u32,
}

/// What a run's end found, besides the parts' results.
pub(super) struct Ending {
    /// The scope as configured (the preset is applied here, once, for the report).
    pub(super) policy: ScopePolicy,
    pub(super) start: Timestamp,
    pub(super) duration: Duration,
    pub(super) leftover_paced: u32,
    pub(super) leftover_permits: usize,
    pub(super) leftover_leases: usize,
    /// The shared backend's part (a Redis run), before the processes' figures.
    pub(super) backend: Option<BackendRun>,
}

/// Reads what the run left in `gates` once every lease a fault left has expired: the
/// [`Ending`] of a run of `policy` (scaled) over `scenario`, `duration` long from `start`.
pub(super) async fn ending(
    gates: &Gates,
    config: &RunConfig,
    scenario: &Scenario,
    policy: ScopePolicy,
    clock: &dyn Clock,
    start: Timestamp,
    duration: Duration,
) -> Result<Ending, RunError> {
    tokio::time::sleep(leases_from_the_fault_left(&policy, config, clock.now().saturating_since(start))).await;
    let keys = gate_keys(&policy, scenario);
    let (leftover_permits, leftover_leases) = gates.leftovers(&keys, clock.now()).await?;
    let leftover_paced = gates.pacer_leftovers(&policy).await?;
    let backend = gates.backstop.as_ref().map(|_| BackendRun {
        on_unavailable: config.on_unavailable,
        scale: config.time_scale.unwrap_or(1.0),
        ..BackendRun::default()
    });
    Ok(Ending { policy, start, duration, leftover_paced, leftover_permits, leftover_leases, backend })
}

/// One result of a run's parts: their telemetry, one process's events in the order they
/// happened, several processes' interleaved on their one time line.
pub(super) fn assemble(preset: Preset, calls: u32, ending: Ending, parts: Vec<WorkerResult>) -> RunResult {
    let Ending { mut policy, start, duration, leftover_paced, leftover_permits, leftover_leases, backend } = ending;
    preset.apply(&mut policy);
    let several = parts.len() > 1;
    let mut merged = RunResult {
        policy,
        calls,
        call_events: Vec::new(),
        attempt_events: Vec::new(),
        gate_events: Vec::new(),
        start,
        duration,
        leftover_inflight: leftover_paced,
        leftover_permits,
        leftover_leases,
        circuit_open: Vec::new(),
        backend,
        accounts: std::collections::BTreeMap::new(),
        reloads: Vec::new(),
    };
    for part in parts {
        merged.call_events.extend(part.call_events);
        merged.attempt_events.extend(part.attempt_events);
        merged.gate_events.extend(part.gate_events);
        merged.circuit_open.extend(part.circuit_open);
        merged.leftover_inflight += part.leftover_inflight;
        merged.reloads.extend(part.reloads);
        if let Some(backend) = &mut merged.backend {
            backend.processes.push(part.backstop);
            backend.background_dropped += part.background_dropped;
        }
    }
    if several {
        merged.call_events.sort_by_key(|c| (c.started, c.call_id));
        merged.attempt_events.sort_by_key(|a| (a.started, a.call_id));
        // One time line, millisecond resolution: within a millisecond a gate's own order (the
        // epoch, then OPEN before HALF_OPEN before CLOSED) decides.
        merged.gate_events.sort_by_key(|g| (g.at, g.epoch, state_rank(g.transition.to)));
    }
    merged
}

/// What one process's part of a run left: its telemetry and leftovers. A worker process
/// reports it back as JSON, on the last line of its standard output.
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
    /// Each `CircuitOpen` error it saw, with the cooldown left then (only where that is known
    /// exactly: the memory gates in virtual time).
    #[serde(default)]
    pub circuit_open: Vec<(u64, Duration, Duration)>,
    /// Records its client dropped in the background.
    #[serde(default)]
    pub background_dropped: u64,
    /// The reloads it made mid-run.
    #[serde(default)]
    pub reloads: Vec<ReloadNote>,
}

fn state_rank(state: CircuitState) -> u8 {
    match state {
        CircuitState::Open => 0,
        CircuitState::HalfOpen => 1,
        CircuitState::Closed => 2,
    }
}
