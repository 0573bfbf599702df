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

mod parse;
mod target;
mod trace;

use crate::support::START;
use gateway_core::breaker::{Fence, GateOp, GateParams, Reply, SuccessKind};
use gateway_core::outcome::OutcomeClass;
use gateway_core::policy::BreakerConfig;
use gateway_core::time::Timestamp;
use parse::parse_step;
use std::collections::HashMap;
use std::fmt::Write;
use std::time::Duration;
use trace::{reply, show};

pub use parse::the_parser_names_the_line_and_what_is_wrong;
pub use target::{Pure, Target};

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
