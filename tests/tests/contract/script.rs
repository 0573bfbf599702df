//! The contract suite's scripts: a gate case as data. A script is a list of operations with
//! times (`cases/*.gate`); running it gives a trace, the replies and the gate snapshots it asks
//! for, one line each. The same script runs on the pure `Gate`, the memory gates and the Redis
//! gates; the three traces must be equal, and the pure one is kept as an `insta` snapshot.
//!
//! ```text
//! # a comment
//! breaker fail_threshold = 5, cooldown_s = 60    the breaker keys (TOML) for the sources below
//! source s concurrency=16                         a source: its max_concurrency (default 0);
//!                                                 `s@gold` is source s in tenant gold's partition
//! at 9.5                                          the clock: seconds after the suite's start
//!                                                 (negative: before it, a clock stepped back)
//! enter s                                         TryEnter
//! success s [real|slow|unusable] [epoch=N]        a record; the epoch defaults to the epoch of
//! failure s [epoch=N]                             the source's last `enter` or `attempt` reply
//! release s [epoch=N]
//! force_open s
//! attempt s <class> [xN]                          TryEnter, then the outcome table's operation
//!                                                 for <class> if admitted (N times)
//! show s                                          the gate's stored state
//! retry_after s t …                               the minimum retry_after over the gates
//!                                                 (none named: 0)
//! ```

use crate::support::{Backend, START};
use gateway_core::breaker::{Gate, GateOp, GateParams, Reply, SuccessKind};
use gateway_core::outcome::OutcomeClass;
use gateway_core::policy::BreakerConfig;
use gateway_core::ports::GateKey;
use gateway_core::time::Timestamp;
use std::collections::HashMap;
use std::fmt::Write;
use std::time::Duration;

/// The sources' timeouts: the probe lease derives from them.
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct Script {
    pub name: String,
    lines: Vec<(String, Step)>,
}

#[derive(Clone, Debug)]
enum Step {
    Breaker(BreakerConfig),
    Source { name: String, concurrency: u32 },
    At(f64),
    Op { source: String, op: Op, times: u32 },
    Show(String),
    RetryAfter(Vec<String>),
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Enter,
    Success(SuccessKind, Option<u64>),
    Failure(Option<u64>),
    Release(Option<u64>),
    ForceOpen,
    Attempt(OutcomeClass),
}

impl Script {
    /// Parses `text`; an error names the line and what is wrong with it.
    pub fn parse(name: &str, text: &str) -> Result<Script, String> {
        let mut lines = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let step = parse_step(line).map_err(|e| format!("{name}:{}: {e}: {line:?}", n + 1))?;
            lines.push((line.to_owned(), step));
        }
        Ok(Script { name: name.to_owned(), lines })
    }

    /// Runs the script on `target` and returns its trace.
    pub async fn run(&self, target: &mut dyn Target) -> String {
        let mut trace = String::new();
        let mut breaker: Option<BreakerConfig> = None;
        let mut params: HashMap<String, GateParams> = HashMap::new();
        let mut admitted: HashMap<String, Reply> = HashMap::new();
        for (line, step) in &self.lines {
            let _ = writeln!(trace, "{line}");
            match step {
                Step::Breaker(config) => breaker = Some(config.clone()),
                Step::Source { name, concurrency } => {
                    let config = breaker.clone().unwrap_or_else(|| panic!("{}: `source {name}` before any `breaker`", self.name));
                    let policy = config.resolve("contract.breaker").unwrap_or_else(|e| panic!("{}: {e}", self.name));
                    params.insert(name.clone(), GateParams::new(&policy, *concurrency, TIMEOUT, TIMEOUT));
                }
                Step::At(secs) => target.set_time(at(*secs)),
                Step::Op { source, op, times } => {
                    let p = params.get(source).unwrap_or_else(|| panic!("{}: no `source {source}`", self.name)).clone();
                    let mut results: Vec<(String, u32)> = Vec::new();
                    for _ in 0..*times {
                        let result = run_op(target, source, &p, *op, &mut admitted).await;
                        match results.last_mut() {
                            Some((last, n)) if *last == result => *n += 1,
                            _ => results.push((result, 1)),
                        }
                    }
                    for (result, n) in results {
                        let repeat = if n > 1 { format!(" (×{n})") } else { String::new() };
                        let _ = writeln!(trace, "  {result}{repeat}");
                    }
                }
                Step::Show(source) => {
                    let p = params.get(source).unwrap_or_else(|| panic!("{}: no `source {source}`", self.name));
                    let gate = target.snapshot(source).await;
                    let _ = writeln!(trace, "  {}", show(&gate, p));
                }
                Step::RetryAfter(sources) => {
                    let gates: Vec<(String, GateParams)> = sources
                        .iter()
                        .map(|s| (s.clone(), params.get(s).unwrap_or_else(|| panic!("{}: no `source {s}`", self.name)).clone()))
                        .collect();
                    let wait = target.retry_after(&gates).await;
                    let _ = writeln!(trace, "  {} ms", wait.as_millis());
                }
            }
        }
        trace
    }
}

/// `START + secs`; a negative `secs` is before the start (a clock that stepped back far).
fn at(secs: f64) -> Timestamp {
    let d = Duration::from_secs_f64(secs.abs());
    if secs < 0.0 {
        Timestamp::from_millis(START.as_millis().saturating_sub(gateway_core::time::millis(d)))
    } else {
        START.saturating_add(d)
    }
}

/// The backend key of a script source: `name@tenant` is `name` in `tenant`'s partition.
fn script_key(b: &Backend, source: &str) -> GateKey {
    match source.split_once('@') {
        Some((name, tenant)) => b.key(name).with_tenant(tenant),
        None => b.key(source),
    }
}

async fn run_op(target: &mut dyn Target, source: &str, p: &GateParams, op: Op, admitted: &mut HashMap<String, Reply>) -> String {
    let epoch =
        |given: Option<u64>, admitted: &HashMap<String, Reply>| given.unwrap_or_else(|| admitted.get(source).map_or(0, |r| r.epoch));
    let op = match op {
        Op::Enter => GateOp::TryEnter,
        Op::Success(kind, given) => GateOp::Success { epoch: epoch(given, admitted), kind },
        Op::Failure(given) => GateOp::Failure { epoch: epoch(given, admitted) },
        Op::Release(given) => GateOp::Release { epoch: epoch(given, admitted) },
        Op::ForceOpen => GateOp::ForceOpen,
        Op::Attempt(class) => {
            let entry = target.apply(source, p, GateOp::TryEnter).await;
            admitted.insert(source.to_owned(), entry);
            let Some(op) = class.effects().gate_op(&entry, Duration::ZERO, None) else {
                return reply(&entry);
            };
            let record = target.apply(source, p, op).await;
            return format!("{} | {}", reply(&entry), reply(&record));
        }
    };
    let answer = target.apply(source, p, op).await;
    if op == GateOp::TryEnter {
        admitted.insert(source.to_owned(), answer);
    }
    reply(&answer)
}

/// One reply: `verdict state e<epoch> [retry <ms>ms] [from→to cause] [fenced]`.
pub fn reply(r: &Reply) -> String {
    let mut out = match r.verdict {
        Some(v) => format!("{v:?} ").to_lowercase(),
        None => String::new(),
    };
    let _ = write!(out, "{} e{}", r.state, r.epoch);
    if !r.retry_after.is_zero() {
        let _ = write!(out, " retry {}ms", r.retry_after.as_millis());
    }
    if let Some(t) = r.transition {
        let _ = write!(out, " {}→{} {:?}", t.from, t.to, t.cause);
    }
    if r.fenced {
        out.push_str(" fenced");
    }
    out
}

/// A gate's stored state, times as offsets from the suite's start and the window id as buckets
/// since it.
pub fn show(g: &Gate, p: &GateParams) -> String {
    let at = |t: Timestamp| format!("+{}ms", t.as_millis().saturating_sub(START.as_millis()));
    let opt = |t: Option<Timestamp>| t.map_or_else(|| "-".to_owned(), at);
    let win = g.win_id.saturating_sub(START.as_millis() / p.bucket_ms());
    format!(
        "{} e{} open_until {} probe_until {} failures {} window {win}:[{} {} {} | {} {} {}] streak {} closed_since {} probe_ok {}",
        g.state,
        g.epoch,
        if g.open_until == Timestamp::default() { "-".to_owned() } else { at(g.open_until) },
        opt(g.probe_until),
        g.failures,
        g.a0,
        g.f0,
        g.s0,
        g.a1,
        g.f1,
        g.s1,
        g.streak,
        opt(g.closed_since),
        g.probe_ok
    )
}

fn parse_step(line: &str) -> Result<Step, String> {
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    let words: Vec<&str> = rest.split_whitespace().collect();
    let source = || words.first().map(|s| (*s).to_owned()).ok_or("a source name is missing".to_owned());
    // The words after the source: each must be one `take` knows.
    let options = |take: &mut dyn FnMut(&str) -> Result<bool, String>| -> Result<(), String> {
        for w in words.iter().skip(1) {
            if !take(w)? {
                return Err(format!("unexpected {w:?}"));
            }
        }
        Ok(())
    };
    let count = |what: &str, n: &str| n.parse::<u64>().map_err(|_| format!("{what} {n:?} is not a count"));
    let mut epoch = None;
    let mut take_epoch = |w: &str| -> Result<bool, String> {
        match w.strip_prefix("epoch=") {
            Some(e) => {
                epoch = Some(count("epoch", e)?);
                Ok(true)
            }
            None => Ok(false),
        }
    };
    Ok(match word {
        "breaker" => {
            let toml = rest.replace(',', "\n");
            Step::Breaker(toml::from_str(&toml).map_err(|e| format!("breaker keys: {e}"))?)
        }
        "source" => {
            let mut concurrency = 0;
            options(&mut |w| match w.strip_prefix("concurrency=") {
                Some(n) => {
                    concurrency = u32::try_from(count("concurrency", n)?).map_err(|_| format!("concurrency {n} is too large"))?;
                    Ok(true)
                }
                None => Ok(false),
            })?;
            Step::Source { name: source()?, concurrency }
        }
        "at" => Step::At(rest.trim().parse().map_err(|_| format!("{rest:?} is not a number of seconds"))?),
        "enter" | "force_open" | "show" => {
            options(&mut |_| Ok(false))?;
            match word {
                "enter" => Step::Op { source: source()?, op: Op::Enter, times: 1 },
                "force_open" => Step::Op { source: source()?, op: Op::ForceOpen, times: 1 },
                _ => Step::Show(source()?),
            }
        }
        "success" => {
            let mut kind = SuccessKind::Real;
            options(&mut |w| {
                if take_epoch(w)? {
                    return Ok(true);
                }
                kind = match w {
                    "real" => SuccessKind::Real,
                    "slow" => SuccessKind::Slow,
                    "unusable" => SuccessKind::Unusable,
                    _ => return Ok(false),
                };
                Ok(true)
            })?;
            Step::Op { source: source()?, op: Op::Success(kind, epoch), times: 1 }
        }
        "failure" | "release" => {
            options(&mut take_epoch)?;
            let op = if word == "failure" { Op::Failure(epoch) } else { Op::Release(epoch) };
            Step::Op { source: source()?, op, times: 1 }
        }
        "attempt" => {
            let class = words.get(1).ok_or("an outcome class is missing")?;
            let class = OutcomeClass::ALL.into_iter().find(|c| c.as_str() == *class).ok_or(format!("{class:?} is not an outcome class"))?;
            let times = match words.get(2) {
                None => 1,
                Some(w) => match w.strip_prefix('x').map(|n| count("repeat", n)) {
                    Some(Ok(n)) if n >= 1 => u32::try_from(n).map_err(|_| format!("repeat {n} is too large"))?,
                    _ => return Err(format!("the repeat is written xN with N ≥ 1, not {w:?}")),
                },
            };
            if let Some(extra) = words.get(3) {
                return Err(format!("unexpected {extra:?}"));
            }
            Step::Op { source: source()?, op: Op::Attempt(class), times }
        }
        // `retry_after` alone asks over no gates (0).
        "retry_after" => Step::RetryAfter(words.iter().map(|s| (*s).to_owned()).collect()),
        other => return Err(format!("unknown step {other:?}")),
    })
}

/// What a script runs on.
#[async_trait::async_trait]
pub trait Target: Send {
    fn set_time(&mut self, now: Timestamp);
    async fn apply(&mut self, source: &str, p: &GateParams, op: GateOp) -> Reply;
    async fn snapshot(&mut self, source: &str) -> Gate;
    async fn retry_after(&mut self, gates: &[(String, GateParams)]) -> Duration;
}

/// The pure state machine: one `Gate` per source and the script's clock.
#[derive(Default)]
pub struct Pure {
    gates: HashMap<String, Gate>,
    now: Timestamp,
}

#[async_trait::async_trait]
impl Target for Pure {
    fn set_time(&mut self, now: Timestamp) {
        self.now = now;
    }
    async fn apply(&mut self, source: &str, p: &GateParams, op: GateOp) -> Reply {
        self.gates.entry(source.to_owned()).or_default().apply(p, op, self.now)
    }
    async fn snapshot(&mut self, source: &str) -> Gate {
        self.gates.get(source).cloned().unwrap_or_default()
    }
    async fn retry_after(&mut self, gates: &[(String, GateParams)]) -> Duration {
        let fresh = Gate::new();
        gateway_core::breaker::min_retry_after(gates.iter().map(|(s, p)| (self.gates.get(s).unwrap_or(&fresh), p)), self.now)
    }
}

#[async_trait::async_trait]
impl Target for Backend {
    fn set_time(&mut self, now: Timestamp) {
        self.clock.set(now);
    }
    async fn apply(&mut self, source: &str, p: &GateParams, op: GateOp) -> Reply {
        self.gates.apply(&script_key(self, source), p, op).await.unwrap_or_else(|e| panic!("{op:?} on {source}: {e}"))
    }
    async fn snapshot(&mut self, source: &str) -> Gate {
        Backend::snapshot(self, &script_key(self, source)).await
    }
    async fn retry_after(&mut self, gates: &[(String, GateParams)]) -> Duration {
        let keyed: Vec<(GateKey, GateParams)> = gates.iter().map(|(s, p)| (script_key(self, s), p.clone())).collect();
        self.gates.retry_after(&keyed).await.unwrap()
    }
}

/// The parser refuses what it does not know, naming the script, the line and the fault.
pub fn the_parser_names_the_line_and_what_is_wrong() {
    for (text, says) in [
        ("enter s x3", "case:2: unexpected \"x3\": \"enter s x3\""),
        ("success s sometimes", "unexpected \"sometimes\""),
        ("success s epoch=two", "epoch \"two\" is not a count"),
        ("source s concurency=4", "unexpected \"concurency=4\""),
        ("attempt s success x0", "the repeat is written xN with N ≥ 1, not \"x0\""),
        ("attempt s timeout", "\"timeout\" is not an outcome class"),
        ("attempt s", "an outcome class is missing"),
        ("enter", "a source name is missing"),
        ("at soon", "\"soon\" is not a number of seconds"),
        ("breaker fail_threshold = five", "breaker keys:"),
        ("open s", "unknown step \"open\""),
    ] {
        let error = Script::parse("case", &format!("# a comment\n{text}\n")).unwrap_err();
        assert!(error.starts_with("case:2: ") && error.contains(says), "{text:?}: {error}");
    }
    let ok = Script::parse("case", "success s epoch=2 slow\nsuccess s unusable\nattempt s transient x2\n").unwrap();
    assert!(matches!(ok.lines[0].1, Step::Op { op: Op::Success(SuccessKind::Slow, Some(2)), .. }), "{:?}", ok.lines[0]);
    assert!(matches!(ok.lines[1].1, Step::Op { op: Op::Success(SuccessKind::Unusable, None), .. }));
    assert!(matches!(ok.lines[2].1, Step::Op { op: Op::Attempt(OutcomeClass::Transient), times: 2, .. }));
}
