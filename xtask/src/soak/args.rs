//! `cargo xtask soak`'s command line: its flags, their defaults and checks (clap derive), and the
//! [`Options`] a run reads from them.

use clap::{Args, ValueEnum};
use gateway_client::Preset;
use gateway_core::policy::{Isolation, WaitMode};
use gateway_memory::backstop::OnUnavailable;
use gateway_sim::fault::Fault;
use gateway_sim::run::{Api, Backend, Transport};
use std::path::PathBuf;

/// The synopsis `cargo xtask soak --help` opens with (clap's own would read `[OPTIONS]`).
const SYNOPSIS: &str = "cargo xtask soak [--scenario p6|p6-rpm|single-relay|tenants|tenants-flood|FILE] [--set KEY=VALUE]... [--seed N|A..B] [--policy default|baseline|both]
                        [--calls N] [--callers N] [--circuit-open wait|fail_fast]
                        [--backend memory|redis] [--transport sim|http] [--workers N] [--time-scale S]
                        [--upstreams FILE] [--isolation shared|per_tenant|both] [--api chat|responses] [--stream] [--min-success PERCENT] [--report DIR]
                        [--on-unavailable fail_closed|local] [--fault kill@T+D|flush@T|pause@T+D] [--reload-at T]";

/// `cargo xtask soak`'s flags (the subcommand's description is `Command::Soak`'s).
// A repeated flag takes its last value, and `--time-scale -1` reaches the check that names it,
// as the hand-written parser before clap did.
#[derive(Args, Debug)]
#[command(override_usage = SYNOPSIS, args_override_self = true, allow_negative_numbers = true)]
pub struct SoakArgs {
    /// a built-in scenario (p6, p6-rpm, single-relay, tenants, tenants-flood) or a scenario TOML file
    #[arg(long, verbatim_doc_comment, value_name = "p6|p6-rpm|single-relay|tenants|tenants-flood|FILE", default_value = "p6")]
    scenario: String,
    /// overrides one key of the scenario file (repeatable), a dotted key and a TOML value, e.g.
    /// --set accounts.k1.background_429=0.05
    #[arg(long = "set", verbatim_doc_comment, value_name = "KEY=VALUE", action = clap::ArgAction::Append)]
    sets: Vec<String>,
    /// one seed, or every seed from A to B (both included)
    #[arg(long, verbatim_doc_comment, value_name = "N|A..B", default_value = "1", value_parser = seeds)]
    seed: Seeds,
    /// the policy: the default preset, the baseline, or both side by side
    #[arg(
        long,
        verbatim_doc_comment,
        value_enum,
        value_name = "default|baseline|both",
        hide_possible_values = true,
        default_value = "default"
    )]
    policy: PolicyArg,
    /// overrides the scenario's call count
    #[arg(long, verbatim_doc_comment, value_name = "N", value_parser = count)]
    calls: Option<u32>,
    /// closed-loop callers in each process, overriding the scenario's (--concurrency is the old
    /// name, still read; --workers sets the processes)
    #[arg(long, verbatim_doc_comment, visible_alias = "concurrency", value_name = "N", value_parser = count)]
    callers: Option<u32>,
    /// overrides the scope's circuit_open
    #[arg(long, verbatim_doc_comment, value_enum, value_name = "wait|fail_fast", hide_possible_values = true)]
    circuit_open: Option<CircuitOpenArg>,
    /// the gate and quota backend; redis uses REDIS_URL (default redis://127.0.0.1:6379) and runs
    /// in real time (give --time-scale)
    #[arg(long, verbatim_doc_comment, value_enum, value_name = "memory|redis", hide_possible_values = true, default_value = "memory")]
    backend: BackendArg,
    /// how attempts reach the simulated providers; http serves them over loopback HTTP and runs
    /// in real time (give --time-scale)
    #[arg(long, verbatim_doc_comment, value_enum, value_name = "sim|http", hide_possible_values = true, default_value = "sim")]
    transport: TransportArg,
    /// runs N processes sharing Redis and one provider server (it needs --backend redis
    /// --transport http), in real time (give --time-scale)
    #[arg(long, verbatim_doc_comment, value_name = "N", default_value = "1", value_parser = processes)]
    workers: u32,
    /// real time: every duration of the scenario multiplied by S (e.g. 0.05)
    #[arg(long, verbatim_doc_comment, value_name = "S", value_parser = time_scale)]
    time_scale: Option<f64>,
    /// runs the scenario's workload against the real endpoints of a gateway config file (its
    /// scope `soak`, or its only scope) in real time
    #[arg(long, verbatim_doc_comment, value_name = "FILE")]
    upstreams: Option<PathBuf>,
    /// overrides the scope's tenant isolation; a scenario with tenants runs both by default
    #[arg(long, verbatim_doc_comment, value_enum, value_name = "shared|per_tenant|both", hide_possible_values = true)]
    isolation: Option<IsolationArg>,
    /// makes every call a stream (GatewayClient::stream, read to its end) instead of a whole
    /// answer; a source with a watchdog is streamed upstream either way
    #[arg(long, verbatim_doc_comment)]
    stream: bool,
    /// the API the calls go through: chat completions, or the Responses API (its requests,
    /// answers and named stream events, from the simulated providers too)
    #[arg(long, verbatim_doc_comment, value_enum, value_name = "chat|responses", hide_possible_values = true, default_value = "chat")]
    api: ApiArg,
    /// the default policy must reach this success rate on every seed, else exit 1
    #[arg(long, verbatim_doc_comment, value_name = "PERCENT", value_parser = percentage)]
    min_success: Option<f64>,
    /// where report.md, report.json and the charts go
    #[arg(long, verbatim_doc_comment, value_name = "DIR", default_value = "target/soak")]
    report: PathBuf,
    /// what a Redis run's processes do while Redis cannot answer (fail_closed; local: admit on
    /// their own state)
    #[arg(
        long,
        verbatim_doc_comment,
        value_enum,
        value_name = "fail_closed|local",
        hide_possible_values = true,
        default_value = "fail_closed"
    )]
    on_unavailable: OnUnavailableArg,
    /// injects a Redis fault at T scenario seconds (scaled): kill (down for D seconds, back
    /// empty), flush (FLUSHALL) or pause (CLIENT PAUSE for D seconds), into a Redis the run starts
    /// for itself (it needs --backend redis; REDIS_URL is not used)
    #[arg(long, verbatim_doc_comment, value_name = "kill@T+D|flush@T|pause@T+D", value_parser = fault)]
    fault: Option<Fault>,
    /// reloads the scope's configuration T scenario seconds (scaled) into the run, in every
    /// process, while its calls run (GatewayClient::reload; a new HTTP upstream over HTTP)
    #[arg(long, verbatim_doc_comment, value_name = "T", value_parser = reload_at)]
    reload_at: Option<f64>,
}

/// `--reload-at`: a finite number of seconds above zero.
fn reload_at(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(t) if t.is_finite() && t > 0.0 => Ok(t),
        _ => Err(format!("{text:?} is not a number of seconds above 0 (e.g. 600)")),
    }
}

/// What a soak runs, as its flags asked.
#[derive(Clone, Debug)]
pub struct Options {
    pub scenario: String,
    /// `--set` overrides of the scenario's keys.
    pub sets: Vec<String>,
    pub seeds: Vec<u64>,
    pub policies: Vec<(&'static str, Preset)>,
    pub calls: Option<u32>,
    /// Closed-loop callers per process (`--callers`).
    pub callers: Option<u32>,
    pub circuit_open: Option<WaitMode>,
    pub min_success: Option<f64>,
    pub report: PathBuf,
    pub backend: Backend,
    pub transport: Transport,
    /// Processes (`--workers`).
    pub processes: u32,
    pub time_scale: Option<f64>,
    pub upstreams: Option<PathBuf>,
    pub isolation: Option<Vec<Option<Isolation>>>,
    pub stream: bool,
    pub api: Api,
    pub on_unavailable: OnUnavailable,
    pub fault: Option<Fault>,
    pub reload_at: Option<f64>,
}

impl From<SoakArgs> for Options {
    fn from(a: SoakArgs) -> Options {
        Options {
            scenario: a.scenario,
            sets: a.sets,
            seeds: a.seed.0,
            policies: match a.policy {
                PolicyArg::Default => vec![("default", Preset::Default)],
                PolicyArg::Baseline => vec![("baseline", Preset::Baseline)],
                PolicyArg::Both => vec![("baseline", Preset::Baseline), ("default", Preset::Default)],
            },
            calls: a.calls,
            callers: a.callers,
            circuit_open: a.circuit_open.map(|c| match c {
                CircuitOpenArg::Wait => WaitMode::Wait,
                CircuitOpenArg::FailFast => WaitMode::FailFast,
            }),
            min_success: a.min_success,
            report: a.report,
            backend: match a.backend {
                BackendArg::Memory => Backend::Memory,
                BackendArg::Redis => Backend::Redis(std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())),
            },
            transport: match a.transport {
                TransportArg::Sim => Transport::Sim,
                TransportArg::Http => Transport::Http,
            },
            processes: a.workers,
            time_scale: a.time_scale,
            upstreams: a.upstreams,
            isolation: a.isolation.map(|i| match i {
                IsolationArg::Shared => vec![Some(Isolation::Shared)],
                IsolationArg::PerTenant => vec![Some(Isolation::PerTenant)],
                IsolationArg::Both => vec![Some(Isolation::Shared), Some(Isolation::PerTenant)],
            }),
            stream: a.stream,
            api: match a.api {
                ApiArg::Chat => Api::Chat,
                ApiArg::Responses => Api::Responses,
            },
            on_unavailable: match a.on_unavailable {
                OnUnavailableArg::FailClosed => OnUnavailable::FailClosed,
                OnUnavailableArg::Local => OnUnavailable::Local,
            },
            fault: a.fault,
            reload_at: a.reload_at,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PolicyArg {
    Default,
    Baseline,
    Both,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
#[value(rename_all = "snake_case")]
enum CircuitOpenArg {
    Wait,
    FailFast,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum BackendArg {
    Memory,
    Redis,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TransportArg {
    Sim,
    Http,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
#[value(rename_all = "snake_case")]
enum ApiArg {
    Chat,
    Responses,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
#[value(rename_all = "snake_case")]
enum IsolationArg {
    Shared,
    PerTenant,
    Both,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
#[value(rename_all = "snake_case")]
enum OnUnavailableArg {
    FailClosed,
    Local,
}

/// The seeds of `--seed`, in order.
#[derive(Clone, Debug)]
struct Seeds(Vec<u64>);

fn seeds(v: &str) -> Result<Seeds, String> {
    let seed = |s: &str| s.parse::<u64>().map_err(|_| format!("{s:?} is not a seed"));
    match v.split_once("..") {
        Some((a, b)) => {
            let (a, b) = (seed(a)?, seed(b)?);
            if a > b {
                return Err(format!("empty range {v}"));
            }
            Ok(Seeds((a..=b).collect()))
        }
        None => Ok(Seeds(vec![seed(v)?])),
    }
}

fn at_least_one(v: &str, most: u32) -> Result<u32, String> {
    let n = v.parse::<u64>().map_err(|_| format!("{v:?} is not a count"))?;
    u32::try_from(n).ok().filter(|n| (1..=most).contains(n)).ok_or_else(|| format!("{n} is not within 1..={most}"))
}

/// `--calls` and `--callers`: 1 or more.
fn count(v: &str) -> Result<u32, String> {
    at_least_one(v, u32::MAX)
}

/// `--workers`: 1 to 64 processes.
fn processes(v: &str) -> Result<u32, String> {
    at_least_one(v, 64)
}

fn time_scale(v: &str) -> Result<f64, String> {
    let scale: f64 = v.parse().map_err(|_| format!("{v:?} is not a number"))?;
    if !(scale.is_finite() && scale > 0.0) {
        return Err(format!("{v} must be a positive number"));
    }
    Ok(scale)
}

/// `--min-success`: a percentage (`98.5` or `98.5%`), as a fraction.
fn percentage(v: &str) -> Result<f64, String> {
    let percent: f64 = v.trim_end_matches('%').parse().map_err(|_| format!("{v:?} is not a percentage"))?;
    if !(0.0..=100.0).contains(&percent) {
        return Err(format!("{v} is not within 0..=100"));
    }
    Ok(percent / 100.0)
}

/// `--fault`; clap names the flag, so the parser's own `--fault: ` prefix is dropped.
fn fault(v: &str) -> Result<Fault, String> {
    v.parse::<Fault>().map_err(|e| {
        let message = e.to_string();
        message.strip_prefix("--fault: ").map_or_else(|| message.clone(), str::to_owned)
    })
}

#[cfg(test)]
mod tests {
    use super::Options;
    use crate::{Cli, Command};
    use clap::Parser;
    use gateway_client::Preset;
    use gateway_core::policy::{Isolation, WaitMode};
    use gateway_memory::backstop::OnUnavailable;
    use gateway_sim::fault::Fault;
    use gateway_sim::run::{Backend, Transport};

    fn parse(flags: &[&str]) -> Result<Options, String> {
        let argv = ["cargo xtask", "soak"].iter().chain(flags);
        match Cli::try_parse_from(argv).map_err(|e| e.to_string())?.command {
            Command::Soak(args) => Ok(Options::from(*args)),
            other => Err(format!("parsed as {other:?}")),
        }
    }

    fn error(flags: &[&str]) -> String {
        parse(flags).err().unwrap_or_default()
    }

    #[test]
    fn no_flag_is_the_seed_soak() {
        let o = parse(&[]).unwrap();
        assert_eq!((o.scenario.as_str(), o.seeds.as_slice(), o.policies.as_slice()), ("p6", &[1][..], &[("default", Preset::Default)][..]));
        assert_eq!((o.calls, o.callers, o.circuit_open, o.min_success), (None, None, None, None));
        assert_eq!((o.report.to_str(), &o.backend, o.transport, o.processes), (Some("target/soak"), &Backend::Memory, Transport::Sim, 1));
        assert_eq!((o.time_scale, o.upstreams, o.isolation, o.stream), (None, None, None, false));
        assert_eq!((o.on_unavailable, o.fault), (OnUnavailable::FailClosed, None));
    }

    #[test]
    fn each_flag_sets_its_option() {
        let o = parse(&["--scenario", "tenants", "--seed", "1..5", "--policy", "both", "--calls", "200", "--callers", "10"]).unwrap();
        assert_eq!((o.scenario.as_str(), o.seeds.as_slice(), o.calls, o.callers), ("tenants", &[1, 2, 3, 4, 5][..], Some(200), Some(10)));
        assert_eq!(o.policies, [("baseline", Preset::Baseline), ("default", Preset::Default)]);
        let o = parse(&["--circuit-open", "fail_fast", "--min-success", "98.5%", "--report", "out/", "--stream"]).unwrap();
        assert_eq!(
            (o.circuit_open, o.min_success, o.report.to_str(), o.stream),
            (Some(WaitMode::FailFast), Some(0.985), Some("out/"), true)
        );
        let o = parse(&["--backend", "redis", "--transport", "http", "--workers", "2", "--time-scale", "0.05"]).unwrap();
        assert!(matches!(o.backend, Backend::Redis(_)));
        assert_eq!((o.transport, o.processes, o.time_scale), (Transport::Http, 2, Some(0.05)));
        let o = parse(&["--upstreams", "g.toml", "--isolation", "both", "--on-unavailable", "local", "--fault", "kill@60+5"]).unwrap();
        assert_eq!((o.upstreams.as_deref().and_then(|p| p.to_str()), o.on_unavailable), (Some("g.toml"), OnUnavailable::Local));
        assert_eq!(o.isolation, Some(vec![Some(Isolation::Shared), Some(Isolation::PerTenant)]));
        assert_eq!(o.fault, Some(Fault::Kill { at: 60.0, down: 5.0 }));
        assert_eq!(parse(&["--reload-at", "600"]).unwrap().reload_at, Some(600.0));
        assert_eq!(parse(&[]).unwrap().reload_at, None);
        assert_eq!(parse(&["--policy", "baseline", "--seed", "7"]).unwrap().policies, [("baseline", Preset::Baseline)]);
        assert_eq!(parse(&["--seed", "7"]).unwrap().seeds, [7]);
        assert_eq!(parse(&["--isolation", "per_tenant"]).unwrap().isolation, Some(vec![Some(Isolation::PerTenant)]));
        assert_eq!(parse(&["--calls", "5", "--calls", "6"]).unwrap().calls, Some(6), "the last of a repeated flag counts");
    }

    #[test]
    fn concurrency_is_the_old_name_of_callers() {
        assert_eq!(parse(&["--concurrency", "50"]).unwrap().callers, Some(50));
        assert_eq!(parse(&["--concurrency", "50"]).unwrap().processes, 1, "not the processes");
        assert!(error(&["--concurrency", "0"]).contains("0 is not within 1..=4294967295"));
    }

    #[test]
    fn an_invalid_value_names_its_flag_and_the_value() {
        let cases: &[(&[&str], &str, &str)] = &[
            (&["--calls", "0"], "--calls <N>", "0 is not within 1..=4294967295"),
            (&["--callers", "x"], "--callers <N>", "\"x\" is not a count"),
            (&["--seed", "5..1"], "--seed <N|A..B>", "empty range 5..1"),
            (&["--seed", "x"], "--seed <N|A..B>", "\"x\" is not a seed"),
            (&["--policy", "best"], "--policy <default|baseline|both>", "[possible values: default, baseline, both]"),
            (&["--circuit-open", "open"], "--circuit-open <wait|fail_fast>", "[possible values: wait, fail_fast]"),
            (&["--min-success", "120"], "--min-success <PERCENT>", "120 is not within 0..=100"),
            (&["--min-success", "most"], "--min-success <PERCENT>", "\"most\" is not a percentage"),
            (&["--backend", "etcd"], "--backend <memory|redis>", "[possible values: memory, redis]"),
            (&["--transport", "tcp"], "--transport <sim|http>", "[possible values: sim, http]"),
            (&["--workers", "0"], "--workers <N>", "0 is not within 1..=64"),
            (&["--workers", "65"], "--workers <N>", "65 is not within 1..=64"),
            (&["--time-scale", "0"], "--time-scale <S>", "0 must be a positive number"),
            (&["--time-scale", "-1"], "--time-scale <S>", "-1 must be a positive number"),
            (&["--isolation", "per_user"], "--isolation <shared|per_tenant|both>", "[possible values: shared, per_tenant, both]"),
            (&["--on-unavailable", "open"], "--on-unavailable <fail_closed|local>", "[possible values: fail_closed, local]"),
            (&["--fault", "melt@3"], "--fault <kill@T+D|flush@T|pause@T+D>", "\"melt@3\" is not kill@T+D, flush@T or pause@T+D"),
            (&["--reload-at", "0"], "--reload-at <T>", "\"0\" is not a number of seconds above 0 (e.g. 600)"),
            (&["--reload-at", "soon"], "--reload-at <T>", "\"soon\" is not a number of seconds above 0 (e.g. 600)"),
            (&["--reload-at", "inf"], "--reload-at <T>", "\"inf\" is not a number of seconds above 0 (e.g. 600)"),
        ];
        for (flags, flag, why) in cases {
            let e = error(flags);
            let value = flags[1];
            assert!(e.contains(&format!("invalid value '{value}' for '{flag}'")) && e.contains(why), "{flags:?}: {e}");
        }
        assert!(error(&["--frobnicate"]).contains("unexpected argument '--frobnicate'"));
        assert!(error(&["--report"]).contains("a value is required for '--report <DIR>'"));
    }
}
