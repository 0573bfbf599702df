//! `cargo xtask soak`: runs a scenario through the gateway in virtual time (memory backend,
//! simulated providers), checks the nine invariants, prints a summary with a progress bar
//! while it runs, and writes `report.md`, `report.json` and one SVG chart per policy.

mod args;
mod flood;

pub use args::SoakArgs;

use args::Options;
use gateway_client::Preset;
use gateway_core::policy::{Isolation, ScopePolicy};
use gateway_sim::invariants;
use gateway_sim::report::{Bounds, Report, Summary, chart, percent_or_na};
use gateway_sim::run::{RunConfig, Transport, WorkerSpec, run, run_processes, run_upstreams, upstreams_scope};
use gateway_sim::scenario::Scenario;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Arc;
use std::time::Instant;

pub fn run_soak(args: SoakArgs) -> Result<(), String> {
    let o = Options::from(args);
    let scenario = Scenario::load_with(&o.scenario, &o.sets).map_err(|e| e.to_string())?;
    let real = match &o.upstreams {
        Some(file) => {
            let scopes = gateway_client::config::Loader::new().file(file).load().map_err(|e| e.to_string())?;
            if o.processes > 1 || o.transport == Transport::Http {
                return Err("--upstreams runs in this process against the file's endpoints: drop --workers and --transport".to_owned());
            }
            Some(upstreams_scope(scopes, &file.display().to_string()).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    std::fs::create_dir_all(&o.report).map_err(|e| format!("cannot create {}: {e}", o.report.display()))?;
    // The wall clock measures the run for the terminal and the Markdown report only.
    #[allow(clippy::disallowed_methods)]
    let began = Instant::now();
    let (mut runs, mut failures) = run_all(&o, &scenario, real.as_ref())?;
    // The line on tenants sharing one account runs in this process, on simulated providers.
    if let Some(flood) = &scenario.flood {
        if real.is_none() && o.processes == 1 {
            flood::run_flood(&o, flood, &mut runs, &mut failures)?;
        } else {
            println!("the [flood] line runs in one process on simulated providers: skipped with --upstreams or --workers");
        }
    }
    print_seed_means(&runs);
    let runs: Vec<Summary> = runs.into_iter().map(|(_, r)| r).collect();
    let wall = began.elapsed().as_secs_f64();
    let report = Report { scenario: scenario.name.clone(), description: scenario.description.clone(), runs };
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())? + "\n";
    std::fs::write(o.report.join("report.json"), json).map_err(|e| e.to_string())?;
    std::fs::write(o.report.join("report.md"), report.markdown(wall)).map_err(|e| e.to_string())?;
    println!("wall time {wall:.1} s; report in {}", o.report.display());
    if failures.is_empty() { Ok(()) } else { Err(failures.join("\n")) }
}

/// Each run's label and summary, in the order they ran.
pub(crate) type Runs = Vec<(String, Summary)>;

/// Every run the options ask for (policies × isolations × seeds), and the failures found:
/// violated invariants, and the default policy below `--min-success`.
fn run_all(o: &Options, scenario: &Scenario, real: Option<&ScopePolicy>) -> Result<(Runs, Vec<String>), String> {
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    // A scenario with tenants runs both isolations side by side unless one is asked for.
    let isolations: Vec<Option<Isolation>> = match o.isolation.clone() {
        Some(asked) => asked,
        None if scenario.tenants.is_empty() => vec![None],
        None => vec![Some(Isolation::Shared), Some(Isolation::PerTenant)],
    };
    for &(name, preset) in &o.policies {
        for &isolation in &isolations {
            let label = isolation.map_or_else(|| name.to_owned(), |i| format!("{name}/{}", i.as_str()));
            for &seed in &o.seeds {
                let summary = run_one(o, scenario, real, (name, preset), isolation, seed, &label)?;
                failures.extend(failures_of(&label, &summary, o.min_success.filter(|_| name == "default")));
                runs.push((label.clone(), summary));
            }
        }
    }
    Ok((runs, failures))
}

/// What is wrong with a run labelled `label`: its violated invariants, and its success below
/// `min_success` when that applies to it.
pub(crate) fn failures_of(label: &str, summary: &Summary, min_success: Option<f64>) -> Vec<String> {
    let seed = summary.seed;
    let mut failures: Vec<String> = summary
        .invariants
        .iter()
        .filter(|v| !v.held)
        .map(|v| format!("{label} seed {seed}: invariant {} ({}) violated: {}", v.number, v.name, v.violation.as_deref().unwrap_or("")))
        .collect();
    if let Some(min) = min_success.filter(|min| summary.success_rate < *min) {
        failures.push(format!(
            "{label} seed {seed}: success {:.2} % is below --min-success {:.2} %",
            summary.success_rate * 100.0,
            min * 100.0
        ));
    }
    failures
}

/// The mean and worst success of each label run on more than one seed.
fn print_seed_means(runs: &[(String, Summary)]) {
    let labels: Vec<&String> = runs.iter().map(|(l, _)| l).fold(Vec::new(), |mut v, l| {
        if !v.contains(&l) {
            v.push(l);
        }
        v
    });
    for label in labels {
        let rates: Vec<f64> = runs.iter().filter(|(l, _)| l == label).map(|(_, r)| r.success_rate).collect();
        if rates.len() > 1 {
            let mean = rates.iter().sum::<f64>() / rates.len() as f64;
            let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
            println!("{label:>8} over {} seeds: mean {:.2} %, worst {:.2} %", rates.len(), mean * 100.0, min * 100.0);
        }
    }
}

/// One run: the progress bar, the run, its invariants and summary, the chart of the first seed,
/// the terminal line.
pub(crate) fn run_one(
    o: &Options,
    scenario: &Scenario,
    real: Option<&ScopePolicy>,
    (name, preset): (&str, Preset),
    isolation: Option<Isolation>,
    seed: u64,
    label: &str,
) -> Result<Summary, String> {
    let calls = u64::from(o.calls.unwrap_or(scenario.calls));
    let bar = ProgressBar::new(calls).with_style(
        ProgressStyle::with_template(&format!("{label:>8} seed {seed:<3} [{{bar:40}}] {{pos}}/{{len}} calls"))
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    let tick = bar.clone();
    let config = RunConfig {
        backend: o.backend.clone(),
        transport: o.transport,
        time_scale: o.time_scale,
        seed,
        preset,
        calls: o.calls,
        workers: o.callers,
        circuit_open: o.circuit_open,
        isolation,
        stream: o.stream,
        api: o.api,
        on_unavailable: o.on_unavailable,
        fault: o.fault,
        reload_at: o.reload_at,
    };
    let progress = Arc::new(move |done| tick.set_position(u64::from(done)));
    // A real-time run's figures are in scaled time: so is the capacity it is read against.
    let mut as_run = o.time_scale.map_or_else(|| scenario.clone(), |s| scenario.scaled(s));
    as_run.workers = o.callers.unwrap_or(as_run.workers);
    let bounds = Bounds::of(&as_run);
    let (result, bounds) = match real {
        Some(scope) => (run_upstreams(scenario, scope.clone(), &config, progress).map_err(|e| e.to_string())?, None),
        None if o.processes > 1 => {
            (run_processes(&o.scenario, scenario, &config, o.processes, &launch_worker, progress).map_err(|e| e.to_string())?, Some(bounds))
        }
        None => (run(scenario, &config, progress).map_err(|e| e.to_string())?, Some(bounds)),
    };
    bar.finish_and_clear();
    let verdicts = invariants::check(&result);
    let summary = Summary::of(&result, name, seed, bounds, verdicts);
    if seed == o.seeds[0] {
        let file = label.replace('/', "-");
        chart(&result, &format!("{} {label} seed {seed}", scenario.name), &o.report.join(format!("{file}.svg")))
            .map_err(|e| e.to_string())?;
    }
    print_summary(label, seed, &summary);
    Ok(summary)
}

/// A run's terminal line (and its backend's, for a Redis run).
fn print_summary(label: &str, seed: u64, summary: &Summary) {
    let tenants: String = summary.tenants.iter().map(|(t, f)| format!("  {t} {:.2} %", f.success_rate * 100.0)).collect();
    println!(
        "{label:>8} seed {seed:<3} success {:6.2} % (ceiling {})  {:.2} calls/s in {:.1} min (capacity {})  attempts/call {:.3}  429s {:5} (own {:4})  p95 {:5.1} s  p99 {:5.1} s  wait p99 {:5.1} s  invariants {}{tenants}",
        summary.success_rate * 100.0,
        percent_or_na(summary.ceiling),
        summary.throughput_calls_per_s,
        summary.scenario_time_s / 60.0,
        summary.capacity(),
        summary.attempts_per_call,
        summary.rate_limited,
        summary.own_429(),
        summary.call_time_p95_s,
        summary.call_time_p99_s,
        summary.wait_p99_s,
        summary.invariants_verdict()
    );
    if !summary.accounts.is_empty() {
        println!("{label:>8} seed {seed:<3} {}", summary.accounts_line());
    }
    if let Some(backend) = &summary.backend {
        println!("{label:>8} seed {seed:<3} {}", backend.line());
    }
    for reload in &summary.reloads {
        println!(
            "{label:>8} seed {seed:<3} process {} reloaded at {:.1} s: {} sources kept, {} attempts in flight went on",
            reload.process, reload.at_s, reload.kept, reload.inflight
        );
    }
}

/// Starts `cargo xtask soak-worker` (this executable) for one process of a `--workers` run.
fn launch_worker(_spec: &WorkerSpec) -> std::io::Result<std::process::Child> {
    std::process::Command::new(std::env::current_exe()?)
        .arg("soak-worker")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
}
