//! The soak report: a summary per run (success against the ceiling, throughput against the
//! pool's capacity, attempts, sources, 429s, time to isolate each bad source, call-time and
//! wait percentiles, results, the invariants), as JSON
//! and Markdown, and an SVG chart of success rate and attempts per source over scenario time
//! drawn with `plotters`. Everything in the JSON is a function of the seed: two runs of the same
//! seed give byte-identical files.

use crate::invariants::Invariant;
use crate::ledger::AccountFigures;
use crate::run::RunResult;
use gateway_core::breaker::CircuitState;
use gateway_core::outcome::OutcomeClass;
use gateway_core::telemetry::CallResult;
use serde::Serialize;
use std::collections::BTreeMap;

mod chart;
pub use chart::{ChartError, chart};

/// One run's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// `default` or `baseline`.
    pub policy: String,
    /// The seed.
    pub seed: u64,
    /// Calls in the run.
    pub calls: u32,
    /// Calls that returned a response.
    pub succeeded: u32,
    /// `succeeded / calls`.
    pub success_rate: f64,
    /// The scenario's ceiling (none against real endpoints: nobody knows it).
    pub ceiling: Option<f64>,
    /// Calls ended per second of scenario time.
    pub throughput_calls_per_s: f64,
    /// The pool's capacity in calls per second, computed from the scenario (none against real
    /// endpoints).
    pub capacity_calls_per_s: Option<f64>,
    /// The time the run's calls need at that capacity, seconds.
    pub capacity_time_s: Option<f64>,
    /// Attempts per call.
    pub attempts_per_call: f64,
    /// Attempts by source.
    pub attempts_by_source: BTreeMap<String, u32>,
    /// Share of attempts by source.
    pub attempt_share_by_source: BTreeMap<String, f64>,
    /// Attempts answered 429.
    pub rate_limited: u32,
    /// What each simulated provider account saw: its 429s by cause (our own load, or the
    /// background it would have sent anyway) and its mean in flight against its capacity.
    pub accounts: BTreeMap<String, AccountFigures>,
    /// Seconds from the start until each source's gate first opened.
    pub isolated_after_s: BTreeMap<String, f64>,
    /// Call time percentiles, seconds.
    pub call_time_p50_s: f64,
    /// 95th percentile.
    pub call_time_p95_s: f64,
    /// 99th percentile.
    pub call_time_p99_s: f64,
    /// Percentiles of the time a call spent not attempting (waiting for a slot, backing off),
    /// seconds.
    pub wait_p50_s: f64,
    /// 95th percentile.
    pub wait_p95_s: f64,
    /// 99th percentile.
    pub wait_p99_s: f64,
    /// Calls by how they ended.
    pub results: BTreeMap<String, u32>,
    /// Virtual time the run took, seconds.
    pub scenario_time_s: f64,
    /// `CircuitOpen` errors, and how many carried exactly the cooldown left.
    pub circuit_open_errors: u32,
    /// Of those, the ones whose retry_after was the remaining cooldown.
    pub circuit_open_with_remaining_cooldown: u32,
    /// The scope's tenant isolation (`shared` or `per_tenant`).
    pub isolation: String,
    /// Per tenant (scenarios with tenants).
    pub tenants: BTreeMap<String, TenantFigures>,
    /// The nine invariants.
    pub invariants: Vec<Invariant>,
    /// The shared backend's part: a Redis run's only (absent from a memory run's report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendFigures>,
    /// The reloads made mid-run (`--reload-at`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reloads: Vec<crate::run::ReloadNote>,
}

/// What the shared backend went through in a run, and what the calls saw of it. Times are the
/// run's (scaled, in a real-time run), from its start.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BackendFigures {
    /// `fail_closed` or `local`.
    pub on_unavailable: String,
    /// The fault injected (`kill@60+5`), if any.
    pub fault: Option<String>,
    /// When it started and when Redis was whole again, seconds (none: the run ended first).
    pub fault_window_s: Option<(f64, f64)>,
    /// Calls that ended `backend_unavailable`: failed closed.
    pub failed_closed_calls: u32,
    /// Admissions the processes' own state granted while Redis could not answer.
    pub local_admissions: u64,
    /// Periods a process found Redis unable to answer, over all processes.
    pub outages: u64,
    /// Each such period: its start and end, seconds (the process's order; none: still on).
    pub degraded_s: Vec<(f64, Option<f64>)>,
    /// From the end of the fault to the last process back on Redis, seconds (none without an
    /// outage).
    pub recovered_after_s: Option<f64>,
    /// Gates met under a new incarnation (Redis lost them, or a process's own while Redis could
    /// not answer).
    pub resets: usize,
    /// The first of them (`gate soak-…/s2 reset at 61.2 s`).
    pub first_resets: Vec<String>,
    /// Records the backend did not take or the backstop dropped, and records dropped in the
    /// background.
    pub dropped_records: u64,
}

impl BackendFigures {
    fn of(run: &RunResult) -> Option<BackendFigures> {
        let backend = run.backend.as_ref()?;
        let since_start = |t: gateway_core::time::Timestamp| round(t.saturating_since(run.start).as_secs_f64(), 3);
        let degraded_s: Vec<(f64, Option<f64>)> =
            backend.processes.iter().flat_map(|p| p.periods.iter().map(|(a, b)| (since_start(*a), b.map(since_start)))).collect();
        let fault_window_s = backend
            .fault
            .filter(|(_, injected)| *injected)
            .map(|(f, _)| (round(f.at() * backend.scale, 3), round(f.ends() * backend.scale, 3)));
        // The periods the fault caused (those that began once it had): the last one's end.
        let recovered_after_s = fault_window_s.and_then(|(at, end)| {
            let ends = degraded_s.iter().filter(|(start, _)| *start >= at).filter_map(|(_, e)| *e);
            ends.reduce(f64::max).map(|last| round((last - end).max(0.0), 3))
        });
        let resets = crate::invariants::resets(run);
        Some(BackendFigures {
            on_unavailable: backend.on_unavailable.as_str().to_owned(),
            fault: backend.fault.map(|(f, _)| f.label()),
            fault_window_s,
            failed_closed_calls: run.call_events.iter().filter(|c| c.result == CallResult::BackendUnavailable).count() as u32,
            local_admissions: backend.processes.iter().map(|p| p.local_admissions).sum(),
            outages: backend.processes.iter().map(|p| p.outages).sum(),
            degraded_s,
            recovered_after_s,
            resets: resets.len(),
            first_resets: resets.into_iter().take(10).collect(),
            dropped_records: backend.processes.iter().map(|p| p.dropped_records).sum::<u64>() + backend.background_dropped,
        })
    }

    /// The terminal's line: `redis fail_closed kill@60+5: 123 failed closed, 0 local, 2 outages, recovered 0.31 s, 8 resets`.
    pub fn line(&self) -> String {
        let recovered = self.recovered_after_s.map_or_else(|| "no outage".to_owned(), |s| format!("recovered {s:.2} s after"));
        format!(
            "redis {} {}: {} failed closed, {} admitted locally, {} outages, {recovered}, {} resets, {} records dropped",
            self.on_unavailable,
            self.fault.as_deref().unwrap_or("(no fault)"),
            self.failed_closed_calls,
            self.local_admissions,
            self.outages,
            self.resets,
            self.dropped_records
        )
    }
}

/// One tenant's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TenantFigures {
    /// Calls made for it.
    pub calls: u32,
    /// Of those, the ones that returned a response.
    pub succeeded: u32,
    /// `succeeded / calls`.
    pub success_rate: f64,
    /// How often each source's gate opened against this tenant's calls: its own gates with
    /// per-tenant isolation, the shared ones otherwise.
    pub gate_opens: BTreeMap<String, u32>,
    /// The 95th percentile of the time its calls waited (not attempting), seconds.
    pub wait_p95_s: f64,
}

fn round(x: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (x * scale).round() / scale
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// When each source's gate first opened, seconds into the run.
fn isolated_after_s(run: &RunResult) -> BTreeMap<String, f64> {
    let mut isolated_after_s = BTreeMap::new();
    for g in run.gate_events.iter().filter(|g| g.transition.to == CircuitState::Open) {
        isolated_after_s.entry(g.key.source.to_string()).or_insert_with(|| round(g.at.saturating_since(run.start).as_secs_f64(), 3));
    }
    isolated_after_s
}

impl TenantFigures {
    /// Each tenant's figures in `run`.
    fn of(run: &RunResult) -> BTreeMap<String, TenantFigures> {
        let mut tenants: BTreeMap<String, TenantFigures> = BTreeMap::new();
        let mut waits: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for c in &run.call_events {
            if let Some(tenant) = &c.tenant {
                let figures = tenants.entry(tenant.clone()).or_default();
                figures.calls += 1;
                figures.succeeded += u32::from(c.result == CallResult::Ok);
                waits.entry(tenant.clone()).or_default().push(c.waited.as_secs_f64());
            }
        }
        for (tenant, figures) in &mut tenants {
            let mut waited = waits.remove(tenant).unwrap_or_default();
            waited.sort_by(f64::total_cmp);
            figures.wait_p95_s = round(percentile(&waited, 0.95), 3);
            figures.success_rate = round(f64::from(figures.succeeded) / f64::from(figures.calls.max(1)), 6);
            figures.gate_opens = run.policy.sources.iter().map(|s| (s.name.clone(), 0)).collect();
            let affects = |key: &gateway_core::ports::SourceKey| key.tenant.as_deref().is_none_or(|t| t == tenant.as_str());
            for g in run.gate_events.iter().filter(|g| g.transition.to == CircuitState::Open && affects(&g.key)) {
                *figures.gate_opens.entry(g.key.source.to_string()).or_default() += 1;
            }
        }
        tenants
    }
}

impl Summary {
    /// The figures of `run`; `bounds` are the scenario's ceiling and capacity (none against real
    /// endpoints).
    pub fn of(run: &RunResult, policy: &str, seed: u64, bounds: Option<Bounds>, invariants: Vec<Invariant>) -> Summary {
        let succeeded = run.call_events.iter().filter(|c| c.result == CallResult::Ok).count() as u32;
        let mut attempts_by_source: BTreeMap<String, u32> = run.policy.sources.iter().map(|s| (s.name.clone(), 0)).collect();
        for a in &run.attempt_events {
            *attempts_by_source.entry(a.key.source.to_string()).or_default() += 1;
        }
        let total = run.attempt_events.len().max(1) as f64;
        let sorted = |of: fn(&gateway_core::telemetry::CallEvent) -> std::time::Duration| {
            let mut times: Vec<f64> = run.call_events.iter().map(|c| of(c).as_secs_f64()).collect();
            times.sort_by(f64::total_cmp);
            times
        };
        let times = sorted(|c| c.elapsed);
        let waits = sorted(|c| c.waited);
        let duration_s = run.duration.as_secs_f64();
        let mut results = BTreeMap::new();
        for c in &run.call_events {
            *results.entry(c.result.as_str().to_owned()).or_insert(0) += 1;
        }
        Summary {
            policy: policy.to_owned(),
            seed,
            calls: run.calls,
            succeeded,
            success_rate: round(f64::from(succeeded) / f64::from(run.calls.max(1)), 6),
            ceiling: bounds.map(|b| round(b.ceiling, 6)),
            throughput_calls_per_s: round(f64::from(run.calls) / duration_s.max(f64::MIN_POSITIVE), 4),
            capacity_calls_per_s: bounds.map(|b| round(b.capacity_calls_per_s, 4)),
            capacity_time_s: bounds
                .filter(|b| b.capacity_calls_per_s > 0.0)
                .map(|b| round(f64::from(run.calls) / b.capacity_calls_per_s, 3)),
            attempts_per_call: round(run.attempt_events.len() as f64 / f64::from(run.calls.max(1)), 4),
            attempt_share_by_source: attempts_by_source.iter().map(|(s, n)| (s.clone(), round(f64::from(*n) / total, 4))).collect(),
            attempts_by_source,
            rate_limited: run.attempt_events.iter().filter(|a| a.class == OutcomeClass::RateLimited).count() as u32,
            accounts: run.accounts.iter().map(|(name, a)| (name.clone(), a.rounded())).collect(),
            isolated_after_s: isolated_after_s(run),
            call_time_p50_s: round(percentile(&times, 0.50), 3),
            call_time_p95_s: round(percentile(&times, 0.95), 3),
            call_time_p99_s: round(percentile(&times, 0.99), 3),
            wait_p50_s: round(percentile(&waits, 0.50), 3),
            wait_p95_s: round(percentile(&waits, 0.95), 3),
            wait_p99_s: round(percentile(&waits, 0.99), 3),
            results,
            scenario_time_s: round(duration_s, 3),
            circuit_open_errors: run.circuit_open.len() as u32,
            circuit_open_with_remaining_cooldown: run.circuit_open.iter().filter(|(_, given, left)| given == left).count() as u32,
            isolation: run.policy.isolation.as_str().to_owned(),
            tenants: TenantFigures::of(run),
            reloads: run.reloads.clone(),
            invariants,
            backend: BackendFigures::of(run),
        }
    }

    /// Whether every invariant held.
    pub fn invariants_hold(&self) -> bool {
        self.invariants.iter().all(|v| v.held)
    }

    /// `6.71 (19.9 min)`, or `n/a`.
    pub fn capacity(&self) -> String {
        match (self.capacity_calls_per_s, self.capacity_time_s) {
            (Some(c), Some(t)) => format!("{c:.2} ({:.1} min)", t / 60.0),
            (Some(c), None) => format!("{c:.2}"),
            _ => "n/a".to_owned(),
        }
    }

    /// 429s our own load caused, over every account.
    pub fn own_429(&self) -> u32 {
        self.accounts.values().map(|a| a.own_429).sum()
    }

    /// `k1: own 429s 120 (3 past its rpm), background 190, in flight 13.8 of 14.2`, an account a
    /// part.
    pub fn accounts_line(&self) -> String {
        let account = |(name, a): (&String, &AccountFigures)| {
            format!(
                "{name}: own 429s {} ({} past its rpm), background {}, in flight {:.1} of {:.1}",
                a.own_429, a.rpm_429, a.background_429, a.mean_inflight, a.mean_capacity
            )
        };
        self.accounts.iter().map(account).collect::<Vec<_>>().join("; ")
    }

    /// `9/9`, or `VIOLATED`.
    pub fn invariants_verdict(&self) -> String {
        if self.invariants_hold() { format!("{n}/{n}", n = self.invariants.len()) } else { "VIOLATED".to_owned() }
    }
}

/// What the scenario allows at best: the ceiling of success and the pool's capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    /// The best success rate ([`crate::scenario::Scenario::ceiling`]).
    pub ceiling: f64,
    /// The most calls a second ([`crate::scenario::Scenario::capacity`]).
    pub capacity_calls_per_s: f64,
}

impl Bounds {
    /// The bounds of `scenario` (as run: scaled for a real-time run).
    pub fn of(scenario: &crate::scenario::Scenario) -> Bounds {
        Bounds { ceiling: scenario.ceiling(), capacity_calls_per_s: scenario.capacity() }
    }
}

/// The whole report of a soak.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Its description.
    pub description: String,
    /// Every run, in order (policy, then seed).
    pub runs: Vec<Summary>,
}

/// `99.43 %`, or `n/a`.
pub fn percent_or_na(share: Option<f64>) -> String {
    share.map_or_else(|| "n/a".to_owned(), |s| format!("{:.2} %", s * 100.0))
}

impl Report {
    /// The Markdown form; `wall_s` is the measured wall time (not in the JSON, which depends
    /// only on the seed).
    pub fn markdown(&self, wall_s: f64) -> String {
        let mut md = format!("# Soak report: {}\n\n{}\n\nWall time: {wall_s:.1} s.\n\n", self.scenario, self.description);
        md += "| policy | isolation | seed | success | ceiling | minutes | calls/s | capacity calls/s (minutes) | attempts/call | 429s | p50 s | p95 s | p99 s | wait p50/p95/p99 s | invariants |\n";
        md += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for r in &self.runs {
            md += &format!(
                "| {} | {} | {} | {:.2} % | {} | {:.1} | {:.2} | {} | {:.3} | {} | {:.1} | {:.1} | {:.1} | {:.1} / {:.1} / {:.1} | {} |\n",
                r.policy,
                r.isolation,
                r.seed,
                r.success_rate * 100.0,
                percent_or_na(r.ceiling),
                r.scenario_time_s / 60.0,
                r.throughput_calls_per_s,
                r.capacity(),
                r.attempts_per_call,
                r.rate_limited,
                r.call_time_p50_s,
                r.call_time_p95_s,
                r.call_time_p99_s,
                r.wait_p50_s,
                r.wait_p95_s,
                r.wait_p99_s,
                r.invariants_verdict()
            );
        }
        for r in &self.runs {
            md += &r.markdown_section();
        }
        md
    }
}

impl Summary {
    /// The Markdown section of this run: its sources, tenants, backend, results and invariants.
    fn markdown_section(&self) -> String {
        let r = self;
        let mut md = String::new();
        md += &format!("\n## {} policy, {} isolation, seed {}\n\n", r.policy, r.isolation, r.seed);
        md += "| source | attempts | share | first isolated at |\n|---|---|---|---|\n";
        for (source, n) in &r.attempts_by_source {
            let isolated = r.isolated_after_s.get(source).map_or_else(|| "never".to_owned(), |t| format!("{t:.1} s"));
            md += &format!(
                "| {source} | {n} | {:.1} % | {isolated} |\n",
                r.attempt_share_by_source.get(source).copied().unwrap_or(0.0) * 100.0
            );
        }
        if !r.accounts.is_empty() {
            md += "\n| account | own 429s | of them past its rpm | background 429s | mean in flight | mean capacity |\n|---|---|---|---|---|---|\n";
            for (name, a) in &r.accounts {
                md += &format!(
                    "| {name} | {} | {} | {} | {:.1} | {:.1} |\n",
                    a.own_429, a.rpm_429, a.background_429, a.mean_inflight, a.mean_capacity
                );
            }
        }
        if !r.tenants.is_empty() {
            md += &format!(
                "\nTenants ({} isolation):\n\n| tenant | calls | success | gate opens against its calls |\n|---|---|---|---|\n",
                r.isolation
            );
            for (tenant, t) in &r.tenants {
                let opens = t.gate_opens.iter().map(|(s, n)| format!("{s}: {n}")).collect::<Vec<_>>().join(", ");
                md += &format!("| {tenant} | {} | {:.2} % | {opens} |\n", t.calls, t.success_rate * 100.0);
            }
        }
        if let Some(backend) = &r.backend {
            md += &format!("\nShared backend: {}.\n", backend.line());
            for reset in &backend.first_resets {
                md += &format!("- {reset}\n");
            }
        }
        md += "\nResults: ";
        md += &r.results.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
        md += "\n\nInvariants:\n\n";
        for v in &r.invariants {
            md += &format!(
                "{}. {} — {}\n",
                v.number,
                v.name,
                v.violation.as_deref().map_or("holds".to_owned(), |w| format!("**violated**: {w}"))
            );
        }
        md
    }
}
