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
//! success s [real|slow|unusable] [epoch=N] [incarnation=iN]
//! failure s [epoch=N] [incarnation=iN]            a record; the epoch defaults to the epoch of
//! release s [epoch=N] [incarnation=iN]            the source's last `enter` or `attempt` reply,
//!                                                 the incarnation to its last reply's
//! force_open s
//! lose                                            the backend loses every gate (a Redis restart
//!                                                 without persistence, a flush, an eviction)
//! attempt s <class> [xN]                          TryEnter, then the outcome table's operation
//!                                                 for <class> if admitted (N times)
//! show s                                          the gate's stored state
//! retry_after s t …                               the minimum retry_after over the gates
//!                                                 (none named: 0)
//! ```
//!
//! Incarnations are random; a trace names them `i1`, `i2`… in the order they appear (`i-` for
//! none: a gate not stored), so traces of different backends compare.

use crate::support::{Backend, START};
use gateway_core::breaker::{Fence, Gate, GateOp, GateParams, Reply, SuccessKind};
use gateway_core::outcome::OutcomeClass;
use gateway_core::policy::BreakerConfig;
use gateway_core::ports::GateKey;
use gateway_core::random::Incarnations;
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
    Lose,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Enter,
    Success(SuccessKind, Given),
    Failure(Given),
    Release(Given),
    ForceOpen,
    Attempt(OutcomeClass),
}

/// The fence a record line names: its epoch, and its incarnation by trace name (`i2`: 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Given {
    epoch: Option<u64>,
    incarnation: Option<usize>,
}

/// What a run remembers: each source's last admission and last incarnation, and the trace names
/// of the incarnations seen.
#[derive(Default)]
struct Memory {
    admitted: HashMap<String, Reply>,
    incarnation: HashMap<String, u64>,
    names: Vec<u64>,
}

impl Memory {
    /// The trace name of `incarnation`: `i-` for none, else `i<n>` by order of appearance.
    fn name(&mut self, incarnation: u64) -> String {
        if incarnation == 0 {
            return "i-".to_owned();
        }
        let n = match self.names.iter().position(|&i| i == incarnation) {
            Some(at) => at + 1,
            None => {
                self.names.push(incarnation);
                self.names.len()
            }
        };
        format!("i{n}")
    }

    fn heard(&mut self, source: &str, r: &Reply) -> String {
        if r.incarnation != 0 {
            self.incarnation.insert(source.to_owned(), r.incarnation);
        }
        let name = self.name(r.incarnation);
        reply(r, &name)
    }
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
        let mut memory = Memory::default();
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
                        let result = run_op(target, source, &p, *op, &mut memory).await;
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
                    let name = memory.name(gate.incarnation);
                    let _ = writeln!(trace, "  {}", show(&gate, p, &name));
                }
                Step::RetryAfter(sources) => {
                    let gates: Vec<(String, GateParams)> = sources
                        .iter()
                        .map(|s| (s.clone(), params.get(s).unwrap_or_else(|| panic!("{}: no `source {s}`", self.name)).clone()))
                        .collect();
                    let wait = target.retry_after(&gates).await;
                    let _ = writeln!(trace, "  {} ms", wait.as_millis());
                }
                Step::Lose => {
                    let sources: Vec<String> = params.keys().cloned().collect();
                    target.lose(&sources).await;
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

async fn run_op(target: &mut dyn Target, source: &str, p: &GateParams, op: Op, memory: &mut Memory) -> String {
    let fence = |given: Given, memory: &Memory| Fence {
        incarnation: match given.incarnation {
            Some(n) => memory.names.get(n.wrapping_sub(1)).copied().unwrap_or_else(|| panic!("no incarnation i{n} yet")),
            None => memory.incarnation.get(source).copied().unwrap_or(0),
        },
        epoch: given.epoch.unwrap_or_else(|| memory.admitted.get(source).map_or(0, |r| r.epoch)),
    };
    let op = match op {
        Op::Enter => GateOp::TryEnter,
        Op::Success(kind, given) => GateOp::Success { fence: fence(given, memory), kind },
        Op::Failure(given) => GateOp::Failure { fence: fence(given, memory) },
        Op::Release(given) => GateOp::Release { fence: fence(given, memory) },
        Op::ForceOpen => GateOp::ForceOpen,
        Op::Attempt(class) => {
            let entry = target.apply(source, p, GateOp::TryEnter).await;
            memory.admitted.insert(source.to_owned(), entry);
            let entered = memory.heard(source, &entry);
            let Some(op) = class.effects().gate_op(&entry, Duration::ZERO, None) else {
                return entered;
            };
            let record = target.apply(source, p, op).await;
            return format!("{entered} | {}", memory.heard(source, &record));
        }
    };
    let answer = target.apply(source, p, op).await;
    if op == GateOp::TryEnter {
        memory.admitted.insert(source.to_owned(), answer);
    }
    memory.heard(source, &answer)
}

/// One reply: `verdict state <incarnation> e<epoch> [retry <ms>ms] [from→to cause] [fenced]`.
fn reply(r: &Reply, incarnation: &str) -> String {
    let mut out = match r.verdict {
        Some(v) => format!("{v:?} ").to_lowercase(),
        None => String::new(),
    };
    let _ = write!(out, "{} {incarnation} e{}", r.state, r.epoch);
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
fn show(g: &Gate, p: &GateParams, incarnation: &str) -> String {
    let at = |t: Timestamp| format!("+{}ms", t.as_millis().saturating_sub(START.as_millis()));
    let opt = |t: Option<Timestamp>| t.map_or_else(|| "-".to_owned(), at);
    let win = g.win_id.saturating_sub(START.as_millis() / p.bucket_ms());
    format!(
        "{} {incarnation} e{} open_until {} probe_until {} failures {} window {win}:[{} {} {} | {} {} {}] streak {} closed_since {} probe_ok {}",
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
    let mut given = Given::default();
    let mut take_fence = |w: &str| -> Result<bool, String> {
        if let Some(e) = w.strip_prefix("epoch=") {
            given.epoch = Some(count("epoch", e)?);
            return Ok(true);
        }
        match w.strip_prefix("incarnation=") {
            Some(i) => {
                let n = i.strip_prefix('i').and_then(|n| n.parse::<usize>().ok()).filter(|&n| n >= 1);
                given.incarnation = Some(n.ok_or_else(|| format!("incarnation {i:?} is not a trace name like i1"))?);
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
                if take_fence(w)? {
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
            Step::Op { source: source()?, op: Op::Success(kind, given), times: 1 }
        }
        "failure" | "release" => {
            options(&mut take_fence)?;
            let op = if word == "failure" { Op::Failure(given) } else { Op::Release(given) };
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
        "lose" if rest.trim().is_empty() => Step::Lose,
        "lose" => return Err("`lose` takes no arguments: the backend loses every gate".to_owned()),
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
    /// Loses the gates of `sources`, as a backend that restarts empty does.
    async fn lose(&mut self, sources: &[String]);
}

/// The pure state machine: one `Gate` per source (a backend's stored gates), the script's
/// clock, and the incarnations it draws.
pub struct Pure {
    gates: HashMap<String, Gate>,
    now: Timestamp,
    incarnations: Incarnations,
}

impl Default for Pure {
    fn default() -> Self {
        Pure { gates: HashMap::new(), now: Timestamp::default(), incarnations: Incarnations::seeded(0) }
    }
}

#[async_trait::async_trait]
impl Target for Pure {
    fn set_time(&mut self, now: Timestamp) {
        self.now = now;
    }
    async fn apply(&mut self, source: &str, p: &GateParams, op: GateOp) -> Reply {
        let incarnations = &self.incarnations;
        self.gates.entry(source.to_owned()).or_default().apply_stored(p, op, self.now, || incarnations.draw())
    }
    async fn snapshot(&mut self, source: &str) -> Gate {
        self.gates.get(source).cloned().unwrap_or_default()
    }
    async fn retry_after(&mut self, gates: &[(String, GateParams)]) -> Duration {
        let fresh = Gate::new();
        gateway_core::breaker::min_retry_after(gates.iter().map(|(s, p)| (self.gates.get(s).unwrap_or(&fresh), p)), self.now)
    }
    async fn lose(&mut self, _sources: &[String]) {
        self.gates.clear();
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
    async fn lose(&mut self, sources: &[String]) {
        let keys: Vec<GateKey> = sources.iter().map(|s| script_key(self, s)).collect();
        Backend::lose(self, &keys).await;
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
        ("failure s incarnation=7", "incarnation \"7\" is not a trace name like i1"),
        ("lose s", "`lose` takes no arguments"),
    ] {
        let error = Script::parse("case", &format!("# a comment\n{text}\n")).unwrap_err();
        assert!(error.starts_with("case:2: ") && error.contains(says), "{text:?}: {error}");
    }
    let ok = Script::parse("case", "success s epoch=2 slow incarnation=i3\nsuccess s unusable\nattempt s transient x2\nlose\n").unwrap();
    let fence = Given { epoch: Some(2), incarnation: Some(3) };
    assert!(matches!(ok.lines[0].1, Step::Op { op: Op::Success(SuccessKind::Slow, g), .. } if g == fence), "{:?}", ok.lines[0]);
    assert!(matches!(ok.lines[1].1, Step::Op { op: Op::Success(SuccessKind::Unusable, g), .. } if g == Given::default()));
    assert!(matches!(ok.lines[3].1, Step::Lose));
    assert!(matches!(ok.lines[2].1, Step::Op { op: Op::Attempt(OutcomeClass::Transient), times: 2, .. }));
}
