//! `cargo xtask soak`: runs a scenario through the gateway in virtual time (memory backend,
//! simulated providers), checks the nine invariants, prints a summary with a progress bar
//! while it runs, and writes `report.md`, `report.json` and one SVG chart per policy.

use gateway_client::Preset;
use gateway_core::policy::{Isolation, ScopePolicy, WaitMode};
use gateway_memory::backstop::OnUnavailable;
use gateway_sim::fault::Fault;
use gateway_sim::invariants;
use gateway_sim::report::{Bounds, Report, Summary, chart, percent_or_na};
use gateway_sim::run::{Backend, RunConfig, Transport, WorkerSpec, run, run_processes, run_upstreams, upstreams_scope};
use gateway_sim::scenario::Scenario;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

pub const USAGE: &str = "usage: cargo xtask soak [--scenario p6|single-relay|tenants|FILE] [--seed N|A..B] [--policy default|baseline|both]
                        [--calls N] [--concurrency N] [--circuit-open wait|fail_fast]
                        [--backend memory|redis] [--transport sim|http] [--workers N] [--time-scale S]
                        [--upstreams FILE] [--isolation shared|per_tenant|both] [--stream] [--min-success PERCENT] [--report DIR]
                        [--on-unavailable fail_closed|local] [--fault kill@T+D|flush@T|pause@T+D]
  --backend redis uses REDIS_URL (default redis://127.0.0.1:6379). Redis, --transport http and
  --workers run in real time: give --time-scale (every duration of the scenario multiplied by
  it, e.g. 0.05). --workers N runs N processes sharing Redis and one provider server (it needs
  --backend redis --transport http). --upstreams FILE runs the scenario's workload against the
  real endpoints of a gateway config file (its scope `soak`, or its only scope) in real time.
  --isolation overrides the scope's tenant isolation; a scenario with tenants runs both by default.
  --stream makes every call a stream (GatewayClient::stream, read to its end) instead of a whole
  answer; a source with a watchdog is streamed upstream either way.
  --on-unavailable says what a Redis run's processes do while Redis cannot answer (default
  fail_closed; local: admit on their own state). --fault injects a Redis fault at T scenario
  seconds (scaled): kill (down for D seconds, back empty), flush (FLUSHALL) or pause (CLIENT
  PAUSE for D seconds), into a Redis the run starts for itself (it needs --backend redis;
  REDIS_URL is not used).";

struct Options {
    scenario: String,
    seeds: Vec<u64>,
    policies: Vec<(&'static str, Preset)>,
    calls: Option<u32>,
    workers: Option<u32>,
    circuit_open: Option<WaitMode>,
    min_success: Option<f64>,
    report: PathBuf,
    backend: Backend,
    transport: Transport,
    processes: u32,
    time_scale: Option<f64>,
    upstreams: Option<PathBuf>,
    isolation: Option<Vec<Option<Isolation>>>,
    stream: bool,
    on_unavailable: OnUnavailable,
    fault: Option<Fault>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        scenario: "p6".into(),
        seeds: vec![1],
        policies: vec![("default", Preset::Default)],
        calls: None,
        workers: None,
        circuit_open: None,
        min_success: None,
        report: PathBuf::from("target/soak"),
        backend: Backend::Memory,
        transport: Transport::Sim,
        processes: 1,
        time_scale: None,
        upstreams: None,
        isolation: None,
        stream: false,
        on_unavailable: OnUnavailable::FailClosed,
        fault: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        let number = |v: &str, what: &str| v.parse::<u64>().map_err(|_| format!("{flag}: {v:?} is not {what}"));
        match flag.as_str() {
            "--scenario" => o.scenario = value()?,
            "--seed" => {
                let v = value()?;
                o.seeds = match v.split_once("..") {
                    Some((a, b)) => {
                        let (a, b) = (number(a, "a seed")?, number(b, "a seed")?);
                        if a > b {
                            return Err(format!("--seed: empty range {v}"));
                        }
                        (a..=b).collect()
                    }
                    None => vec![number(&v, "a seed")?],
                };
            }
            "--policy" => {
                o.policies = match value()?.as_str() {
                    "default" => vec![("default", Preset::Default)],
                    "baseline" => vec![("baseline", Preset::Baseline)],
                    "both" => vec![("baseline", Preset::Baseline), ("default", Preset::Default)],
                    other => return Err(format!("--policy: {other:?} is not default, baseline or both")),
                }
            }
            "--calls" | "--concurrency" => {
                let n = number(&value()?, "a count")?;
                let n = u32::try_from(n).ok().filter(|n| *n >= 1).ok_or_else(|| format!("{flag}: {n} is not within 1..=4294967295"))?;
                if flag == "--calls" {
                    o.calls = Some(n);
                } else {
                    o.workers = Some(n);
                }
            }
            "--circuit-open" => {
                o.circuit_open = Some(match value()?.as_str() {
                    "wait" => WaitMode::Wait,
                    "fail_fast" => WaitMode::FailFast,
                    other => return Err(format!("--circuit-open: {other:?} is not wait or fail_fast")),
                })
            }
            "--min-success" => {
                let v = value()?;
                let percent: f64 = v.trim_end_matches('%').parse().map_err(|_| format!("--min-success: {v:?} is not a percentage"))?;
                if !(0.0..=100.0).contains(&percent) {
                    return Err(format!("--min-success: {v} is not within 0..=100"));
                }
                o.min_success = Some(percent / 100.0);
            }
            "--report" => o.report = PathBuf::from(value()?),
            "--help" | "-h" => return Err(USAGE.to_owned()),
            "--backend" => {
                o.backend = match value()?.as_str() {
                    "memory" => Backend::Memory,
                    "redis" => Backend::Redis(std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())),
                    other => return Err(format!("--backend: {other:?} is not memory or redis")),
                }
            }
            "--time-scale" => {
                let v = value()?;
                let scale: f64 = v.parse().map_err(|_| format!("--time-scale: {v:?} is not a number"))?;
                if !(scale.is_finite() && scale > 0.0) {
                    return Err(format!("--time-scale: {v} must be a positive number"));
                }
                o.time_scale = Some(scale);
            }
            "--transport" => {
                o.transport = match value()?.as_str() {
                    "sim" => Transport::Sim,
                    "http" => Transport::Http,
                    other => return Err(format!("--transport: {other:?} is not sim or http")),
                }
            }
            "--workers" => {
                let n = number(&value()?, "a count")?;
                o.processes =
                    u32::try_from(n).ok().filter(|n| (1..=64).contains(n)).ok_or_else(|| format!("--workers: {n} is not within 1..=64"))?;
            }
            "--upstreams" => o.upstreams = Some(PathBuf::from(value()?)),
            "--on-unavailable" => {
                o.on_unavailable = match value()?.as_str() {
                    "fail_closed" => OnUnavailable::FailClosed,
                    "local" => OnUnavailable::Local,
                    other => return Err(format!("--on-unavailable: {other:?} is not fail_closed or local")),
                }
            }
            "--fault" => o.fault = Some(value()?.parse().map_err(|e: gateway_sim::fault::FaultError| e.to_string())?),
            "--stream" => o.stream = true,
            "--isolation" => {
                o.isolation = Some(match value()?.as_str() {
                    "shared" => vec![Some(Isolation::Shared)],
                    "per_tenant" => vec![Some(Isolation::PerTenant)],
                    "both" => vec![Some(Isolation::Shared), Some(Isolation::PerTenant)],
                    other => return Err(format!("--isolation: {other:?} is not shared, per_tenant or both")),
                })
            }
            other => return Err(format!("unknown option {other:?}\n{USAGE}")),
        }
    }
    Ok(o)
}

pub fn run_soak(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let scenario = Scenario::load(&o.scenario).map_err(|e| e.to_string())?;
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
                let summary = run_one(&o, &scenario, real.as_ref(), (name, preset), isolation, seed, &label)?;
                for v in summary.invariants.iter().filter(|v| !v.held) {
                    failures.push(format!(
                        "{label} seed {seed}: invariant {} ({}) violated: {}",
                        v.number,
                        v.name,
                        v.violation.as_deref().unwrap_or("")
                    ));
                }
                if let Some(min) = o.min_success.filter(|min| name == "default" && summary.success_rate < *min) {
                    failures.push(format!(
                        "{label} seed {seed}: success {:.2} % is below --min-success {:.2} %",
                        summary.success_rate * 100.0,
                        min * 100.0
                    ));
                }
                runs.push((label.clone(), summary));
            }
        }
    }
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
    let runs: Vec<Summary> = runs.into_iter().map(|(_, r)| r).collect();
    let wall = began.elapsed().as_secs_f64();
    let report = Report { scenario: scenario.name.clone(), description: scenario.description.clone(), runs };
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())? + "\n";
    std::fs::write(o.report.join("report.json"), json).map_err(|e| e.to_string())?;
    std::fs::write(o.report.join("report.md"), report.markdown(wall)).map_err(|e| e.to_string())?;
    println!("wall time {wall:.1} s; report in {}", o.report.display());
    if failures.is_empty() { Ok(()) } else { Err(failures.join("\n")) }
}

/// One run: the progress bar, the run, its invariants and summary, the chart of the first seed,
/// the terminal line.
fn run_one(
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
        workers: o.workers,
        circuit_open: o.circuit_open,
        isolation,
        stream: o.stream,
        on_unavailable: o.on_unavailable,
        fault: o.fault,
    };
    let progress = Arc::new(move |done| tick.set_position(u64::from(done)));
    // A real-time run's figures are in scaled time: so is the capacity it is read against.
    let mut as_run = o.time_scale.map_or_else(|| scenario.clone(), |s| scenario.scaled(s));
    as_run.workers = o.workers.unwrap_or(as_run.workers);
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
    let tenants: String = summary.tenants.iter().map(|(t, f)| format!("  {t} {:.2} %", f.success_rate * 100.0)).collect();
    println!(
        "{label:>8} seed {seed:<3} success {:6.2} % (ceiling {})  {:.2} calls/s in {:.1} min (capacity {})  attempts/call {:.3}  429s {:5}  p95 {:5.1} s  p99 {:5.1} s  wait p99 {:5.1} s  invariants {}{tenants}",
        summary.success_rate * 100.0,
        percent_or_na(summary.ceiling),
        summary.throughput_calls_per_s,
        summary.scenario_time_s / 60.0,
        summary.capacity(),
        summary.attempts_per_call,
        summary.rate_limited,
        summary.call_time_p95_s,
        summary.call_time_p99_s,
        summary.wait_p99_s,
        summary.invariants_verdict()
    );
    if let Some(backend) = &summary.backend {
        println!("{label:>8} seed {seed:<3} {}", backend.line());
    }
    Ok(summary)
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

#[cfg(test)]
mod tests {
    use super::parse;
    use gateway_memory::backstop::OnUnavailable;
    use gateway_sim::fault::Fault;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn options_and_their_errors() {
        let o = parse(&args(&["--seed", "1..5", "--policy", "both", "--min-success", "98.5%"])).unwrap();
        assert_eq!(o.seeds, [1, 2, 3, 4, 5]);
        assert_eq!(o.policies.len(), 2);
        assert_eq!(o.min_success, Some(0.985));
        let error = |a: &[&str]| parse(&args(a)).err().unwrap();
        assert_eq!(error(&["--calls", "0"]), "--calls: 0 is not within 1..=4294967295");
        assert_eq!(error(&["--seed", "5..1"]), "--seed: empty range 5..1");
        assert_eq!(error(&["--seed", "x"]), "--seed: \"x\" is not a seed");
        assert!(error(&["--policy", "best"]).starts_with("--policy: \"best\""));
        assert!(error(&["--min-success", "120"]).contains("not within 0..=100"));
        assert!(error(&["--transport", "tcp"]).starts_with("--transport: \"tcp\""));
        assert_eq!(error(&["--workers", "0"]), "--workers: 0 is not within 1..=64");
        let o = parse(&args(&["--transport", "http", "--workers", "2", "--upstreams", "g.toml"])).unwrap();
        assert_eq!((o.transport, o.processes, o.upstreams.unwrap().to_str()), (gateway_sim::run::Transport::Http, 2, Some("g.toml")));
        assert!(error(&["--backend", "etcd"]).starts_with("--backend: \"etcd\""));
        assert!(error(&["--time-scale", "0"]).contains("positive"));
        assert_eq!(parse(&args(&["--backend", "redis", "--time-scale", "0.05"])).unwrap().time_scale, Some(0.05));
        assert!(error(&["--frobnicate"]).starts_with("unknown option"));
        assert!(error(&["--isolation", "per_user"]).starts_with("--isolation: \"per_user\" is not shared, per_tenant or both"));
        assert_eq!(parse(&args(&["--isolation", "both"])).unwrap().isolation.map(|v| v.len()), Some(2));
        assert!(error(&["--report"]).starts_with("--report needs a value"));
        let o = parse(&args(&["--on-unavailable", "local", "--fault", "kill@60+5"])).unwrap();
        assert_eq!((o.on_unavailable, o.fault), (OnUnavailable::Local, Some(Fault::Kill { at: 60.0, down: 5.0 })));
        assert!(error(&["--on-unavailable", "open"]).starts_with("--on-unavailable: \"open\" is not fail_closed or local"));
        assert!(error(&["--fault", "melt@3"]).starts_with("--fault: \"melt@3\" is not kill@T+D"));
    }
}
