//! The one `trace` helper of the call machine's tests (rust-analyzer's `check` style): a scope's
//! config and a script of events in, the machine's answers out, one line each, on a virtual
//! clock and a seeded RNG. A `Sleep` advances the clock by its length, as the glue would.
//!
//! Events, one a line (sources are named `s1`, `s2`, … by their index + 1):
//! - `pick s1`: s1 was admitted and its attempt starts now;
//! - `s1 <class> [after <d>] [retry_after=<d>]`: its attempt ended after `d` with `class`
//!   (`success`, `rate_limited`, `transient`, `source_dead`, `request_rejected`,
//!   `result_invalid`; `too_large`: a `Transient(body_too_large)` answer past the call's size
//!   budget, after which the source is spent for the call);
//! - `blocked [gates=<n>] [pushed=s1:<d>,…]`: the pick found no runnable source;
//! - `retry_after <d>`: the gates' answer to the machine's question;
//! - `chunk role|"<text>"`, `stream ends`, `stream fails <class>`: a streamed attempt before
//!   its commit point (an ending is told to the machine as the glue does);
//! - `idle <d>`: time passes (the glue waited for its turn); `progress`: the scope progressed.
//!
//! Output: `> event` lines, then what the machine asked, each `t=<seconds>` on the clock.

use gateway_core::call::{CallMachine, CallRules, Failure, Next, Picked, Settled, Streaming};
use gateway_core::outcome::{OutcomeClass, OutcomeTable};
use gateway_core::policy::ScopeConfig;
use gateway_core::request::{Outcome, Response, Structured};
use gateway_core::stall::ScopeProgress;
use gateway_core::stream::StructuredStream;
use gateway_core::time::Timestamp;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use std::fmt::Write;
use std::time::Duration;

/// The rules of a scope of `n` sources (`s1`…) with the client tests' breaker and `extra` keys.
pub fn rules(n: usize, extra: Value) -> CallRules {
    rules_with(n, extra, OutcomeTable::SPEC)
}

/// [`rules`] on another outcome table.
pub fn rules_with(n: usize, extra: Value, outcomes: OutcomeTable) -> CallRules {
    let mut config = json!({"breaker": {"fail_threshold": 5, "cooldown_s": 60}, "sources": {}});
    for i in 1..=n {
        config["sources"][format!("s{i}")] = json!({"timeout_s": 30});
    }
    for (key, value) in extra.as_object().into_iter().flatten() {
        config[key] = value.clone();
    }
    let config: ScopeConfig = serde_json::from_value(config).unwrap();
    CallRules::new(&config.resolve("chat").unwrap(), outcomes)
}

struct Run {
    machine: CallMachine,
    now: Timestamp,
    progress: ScopeProgress,
    rng: ChaCha8Rng,
    structured: Option<Structured>,
    mode: StructuredStream,
    /// The source of the attempt in progress.
    source: usize,
    out: String,
}

/// The machine's answers to `script` under `rules`.
pub fn trace(rules: CallRules, script: &str) -> String {
    run(rules, None, StructuredStream::FirstToken, script)
}

/// [`trace`] for a call that asks for JSON (a JSON Schema), its stream committing at its first
/// token (`structured_stream = "first_token"`).
pub fn trace_structured(rules: CallRules, script: &str) -> String {
    run(rules, Some(Structured::JsonSchema(json!({"type": "object"}))), StructuredStream::FirstToken, script)
}

/// [`trace_structured`] with the stream held until its answer passed the check (the default).
pub fn trace_validated(rules: CallRules, script: &str) -> String {
    run(rules, Some(Structured::JsonSchema(json!({"type": "object"}))), StructuredStream::Validated, script)
}

fn run(rules: CallRules, structured: Option<Structured>, mode: StructuredStream, script: &str) -> String {
    let mut run = Run {
        machine: CallMachine::new(rules, Timestamp::ZERO),
        now: Timestamp::ZERO,
        progress: ScopeProgress::new(),
        rng: ChaCha8Rng::seed_from_u64(1),
        structured,
        mode,
        source: 0,
        out: String::new(),
    };
    run.poll();
    for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
        writeln!(run.out, "> {line}").unwrap();
        run.event(line);
    }
    run.out
}

impl Run {
    fn event(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["pick", source] => {
                self.source = index(source);
                self.machine.on_pick(Picked::Source(self.source), self.now, self.progress, &mut self.rng);
            }
            ["blocked", rest @ ..] => {
                let picked = blocked(rest);
                self.machine.on_pick(picked, self.now, self.progress, &mut self.rng);
                self.poll();
            }
            ["retry_after", d] => {
                self.machine.on_retry_after(duration(d), self.now, &mut self.rng);
                self.poll();
            }
            ["idle", d] => {
                self.now = self.now.saturating_add(duration(d));
                self.poll();
            }
            ["progress"] => self.progress.record(self.now),
            ["chunk", text] => self.chunk(Some(Ok(chunk(text)))),
            ["stream", "ends"] => self.chunk(None),
            ["stream", "fails", class] => self.chunk(Some(Err(Outcome::new(class_named(class), "stream")))),
            [source, class, rest @ ..] => {
                let (after, retry_after) = ending(rest);
                self.now = self.now.saturating_add(after);
                let outcome = match *class {
                    "too_large" => Outcome::too_large("body_too_large"),
                    class => Outcome { retry_after, ..Outcome::new(class_named(class), class) },
                };
                self.outcome(index(source), &outcome);
            }
            _ => panic!("not an event: {line}"),
        }
    }

    fn chunk(&mut self, chunk: Option<Result<gateway_core::stream::Chunk, Outcome>>) {
        match self.machine.on_chunk(chunk, gateway_core::request::Kind::Chat, self.structured.as_ref(), self.mode) {
            Streaming::ReadOn => self.say("read on"),
            Streaming::Committed(preamble) => self.say(&format!("commit: {} chunk(s) to the caller", preamble.len())),
            Streaming::Validated(whole) => {
                let text: Vec<&str> = whole
                    .iter()
                    .flat_map(|c| c["choices"].as_array().into_iter().flatten())
                    .filter_map(|c| c["delta"]["content"].as_str())
                    .collect();
                self.say(&format!("validated: {} chunk(s) to the caller at once, {:?}", whole.len(), text.concat()));
            }
            Streaming::Ended(outcome) => {
                self.say(&format!("ended before the commit point: {} {}", outcome.class, outcome.detail));
                self.outcome(self.source, &outcome);
            }
        }
    }

    fn outcome(&mut self, source: usize, outcome: &Outcome) {
        let response = (outcome.class == OutcomeClass::Success).then(|| Response::chat_text("ok", None));
        let Settled { consumed_budget, push_back_until } = self.machine.on_outcome(source, outcome, response, self.now, &mut self.rng);
        if consumed_budget {
            self.say(&format!("spent a retry ({} so far)", self.machine.budget_spent()));
        }
        if outcome.source_spent && self.machine.is_spent(source) {
            self.say(&format!("s{} is not asked again in this call", source + 1));
        }
        if let Some(until) = push_back_until {
            self.say(&format!("push back s{}'s account until t={}", source + 1, secs(until.saturating_since(Timestamp::ZERO))));
        }
        self.poll();
    }

    /// Polls until the machine needs an event, sleeping as it asks.
    fn poll(&mut self) {
        loop {
            let next = self.machine.poll(self.now, self.progress);
            self.say(&describe(&next));
            match next {
                Next::Sleep { duration, .. } => self.now = self.now.saturating_add(duration),
                _ => return,
            }
        }
    }

    fn say(&mut self, what: &str) {
        let t = secs(self.now.saturating_since(Timestamp::ZERO));
        writeln!(self.out, "  t={t:<8} {what}").unwrap();
    }
}

fn describe(next: &Next) -> String {
    match next {
        Next::Pick { patience } => format!("pick (a turn waits at most {})", secs(*patience)),
        Next::AskRetryAfter { except } if except.is_empty() => "ask the gates' retry moment".to_owned(),
        Next::AskRetryAfter { except } => {
            let names: Vec<String> = except.iter().map(|s| format!("s{}", s + 1)).collect();
            format!("ask the gates' retry moment, all but {}", names.join(", "))
        }
        Next::Sleep { duration, in_line: true } => format!("sleep {} in line", secs(*duration)),
        Next::Sleep { duration, in_line: false } => format!("sleep {}", secs(*duration)),
        Next::Return(_) => "return the answer".to_owned(),
        Next::Fail(failure) => format!("fail: {}", failure_name(failure)),
    }
}

fn failure_name(failure: &Failure) -> String {
    match failure {
        Failure::Stalled => "stalled".to_owned(),
        Failure::QuotaExhausted => "quota_exhausted".to_owned(),
        Failure::RetryExhausted => "retry_exhausted".to_owned(),
        Failure::StructuredExhausted => "structured_exhausted".to_owned(),
        Failure::CircuitOpen { retry_after } => format!("circuit_open, retry after {}", secs(*retry_after)),
        Failure::RateLimited { retry_after } => format!("rate_limited, retry after {}", secs(*retry_after)),
        Failure::RequestRejected { source, detail, .. } => format!("request_rejected by s{} ({detail})", source + 1),
    }
}

/// Seconds, to the millisecond, without trailing zeros.
fn secs(d: Duration) -> String {
    let s = format!("{:.3}", d.as_secs_f64());
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}s")
}

fn index(source: &str) -> usize {
    source.strip_prefix('s').and_then(|n| n.parse::<usize>().ok()).filter(|n| *n > 0).expect("a source is s1, s2, …") - 1
}

fn duration(text: &str) -> Duration {
    if let Some(ms) = text.strip_suffix("ms") {
        return Duration::from_millis(ms.parse().unwrap());
    }
    Duration::from_secs_f64(text.strip_suffix('s').expect("a duration ends in s or ms").parse().unwrap())
}

fn class_named(name: &str) -> OutcomeClass {
    OutcomeClass::ALL.into_iter().find(|c| c.as_str() == name).unwrap_or_else(|| panic!("no outcome class {name}"))
}

fn blocked(words: &[&str]) -> Picked {
    let (mut gate_rejections, mut pushed_back, mut ready_in) = (0, Vec::new(), None);
    for word in words {
        if let Some(ready) = word.strip_prefix("ready=") {
            ready_in = Some(duration(ready));
        } else if let Some(n) = word.strip_prefix("gates=") {
            gate_rejections = n.parse().unwrap();
        } else if let Some(list) = word.strip_prefix("pushed=") {
            for entry in list.split(',') {
                let (source, away) = entry.split_once(':').unwrap();
                pushed_back.push((index(source), duration(away)));
            }
        } else {
            panic!("not a blocked pick: {word}");
        }
    }
    Picked::Blocked { gate_rejections, pushed_back, ready_in }
}

fn ending(words: &[&str]) -> (Duration, Option<Duration>) {
    let (mut after, mut retry_after) = (Duration::ZERO, None);
    let mut words = words.iter();
    while let Some(word) = words.next() {
        match *word {
            "after" => after = duration(words.next().expect("after <duration>")),
            other => retry_after = Some(duration(other.strip_prefix("retry_after=").unwrap_or_else(|| panic!("not an ending: {other}")))),
        }
    }
    (after, retry_after)
}

fn chunk(text: &str) -> gateway_core::stream::Chunk {
    let delta = match text {
        "role" => json!({"role": "assistant"}),
        quoted => json!({"content": quoted.trim_matches('"')}),
    };
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}).as_object().unwrap().clone()
}
