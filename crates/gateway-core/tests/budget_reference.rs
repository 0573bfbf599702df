//! The retry-budget planner against the seed's own TypeScript reference (seed 002, transcribed to
//! `tests/budget_reference/reference.mjs`): 1 000 cases drawn from a seeded RNG, `plan` and
//! `trace`, valid and invalid, go through the same JSON path as `cargo xtask budget` and must
//! give the reference's output field for field, every number exactly equal.
//!
//! With `node` available the reference runs live (`tests/budget_reference/driver.mjs`) and the
//! committed outputs must equal its answers; without it the committed outputs are the oracle.
//!
//! - `BUDGET_REFERENCE_NODE`: the node binary (default `node`); `off` skips node, as if absent.
//! - `BUDGET_REFERENCE_BLESS=1`: rewrite the committed outputs from node. To regenerate them after
//!   changing the cases or the reference, run
//!   `BUDGET_REFERENCE_BLESS=1 cargo test -p gateway-core --test budget_reference`.
//!
//! The reference's numbers depend on the engine's `Math.pow`: Node 20's V8 uses its own fdlibm
//! port, newer V8 can use the C library's `pow` (its `use_std_math_pow` flag). The committed
//! outputs come from an fdlibm engine (see their first line); a live engine whose `Math.pow` is
//! not fdlibm's is reported and the committed outputs are used instead.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use gateway_core::budget::*;
use gateway_core::random::{below, unit};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};

const SEED: u64 = 2;
const CASES: usize = 1000;
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/budget_reference");
/// The committed reference outputs: a header line, then `<fingerprint of the case> <output>`.
const OUTPUTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/budget_reference/outputs.txt");
const REGENERATE: &str = "BUDGET_REFERENCE_BLESS=1 cargo test -p gateway-core --test budget_reference";

/// One case: `{"mode": "plan" | "trace", "input": <what xtask reads on stdin>}` as one line.
struct Case {
    plan: bool,
    line: String,
}

impl Case {
    fn new(plan: bool, input: Value) -> Case {
        let line = json!({"mode": if plan { "plan" } else { "trace" }, "input": input}).to_string();
        Case { plan, line }
    }

    /// The input as text, the way xtask reads it.
    fn input_text(&self) -> String {
        let case: Value = serde_json::from_str(&self.line).unwrap();
        case["input"].to_string()
    }

    /// FNV-1a of the line: ties a committed output to the case it was made for.
    fn fingerprint(&self) -> String {
        let hash = self.line.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        format!("{hash:016x}")
    }
}

struct Draw(ChaCha8Rng);

impl Draw {
    fn unit(&mut self) -> f64 {
        unit(&mut self.0)
    }

    fn below(&mut self, n: usize) -> usize {
        below(&mut self.0, n)
    }

    /// A uniform integer in `lo..=hi`.
    fn int(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(usize::try_from(hi - lo + 1).unwrap()) as u64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }

    /// Decimal rates with few digits matter most: their powers and products land exactly on the
    /// rounding ties of `toFixed(8)`, where the last bit of `Math.pow` decides.
    fn failure_rate(&mut self) -> f64 {
        match self.below(12) {
            0 => 0.0,
            1 | 2 => self.unit(),
            3 => self.int(0, 999) as f64 / 1000.0,
            4 => self.tie_rate(),
            5 => self.int(0, 99) as f64 / 100.0,
            6 => self.int(0, 19) as f64 / 20.0,
            7 => self.pick(&[0.5, 0.25, 0.75, 0.125, 0.375, 0.625, 0.875]),
            // log-uniform in [1e-8, 1e-1]
            8 => 10f64.powf(-1.0 - 7.0 * self.unit()),
            // close to one: 1 − 10^−[1, 16], or the largest double below one
            9 => (1.0 - 10f64.powf(-1.0 - 15.0 * self.unit())).min(1.0 - f64::EPSILON / 2.0),
            _ => self.pick(&[0.01, 0.02, 0.03, 0.1, 0.2, 0.3, 0.9, 0.99, 0.999_999, 1.0 - f64::EPSILON / 2.0, 5e-324, 1e-300]),
        }
    }

    fn cost(&mut self) -> u64 {
        match self.below(6) {
            0 => 0,
            1 | 2 => self.int(1, 5000),
            3 => self.int(1, 1_000_000),
            4 => self.int(1, 1_000_000_000),
            _ => self.pick(&[1, 1_055, 1_643, 1_088, 999_999_999_999, 1 << 40]),
        }
    }

    fn latency(&mut self) -> f64 {
        match self.below(6) {
            0 => 0.0,
            1 | 2 => self.int(0, 2000) as f64,
            3 => self.unit() * 1000.0,
            4 => self.unit() * 1e6,
            _ => self.pick(&[0.5, 1e-9, 160.0, 620.0, 1e9, 2.5]),
        }
    }

    fn max_retries(&mut self) -> u64 {
        match self.below(10) {
            0 => 0,
            1..=3 => self.int(1, 3),
            4..=7 => self.int(2, 8),
            8 => self.int(9, 12),
            _ => self.int(13, 20),
        }
    }

    fn threshold(&mut self) -> Value {
        match self.below(10) {
            0..=3 => json!("Infinity"),
            4 => json!(1),
            _ => json!(self.int(2, 10)),
        }
    }

    /// A rate `k/1000` with `k` an odd multiple of 5: its cube has nine decimals ending in 5, an
    /// exact tie for `toFixed(8)` but for the last bits of the input and of `Math.pow`.
    fn tie_rate(&mut self) -> f64 {
        (self.int(0, 99) * 10 + 5) as f64 / 1000.0
    }

    fn plan_input(&mut self) -> Value {
        // One case in ten spends two retries on every node, each failing at a tie rate.
        let ties = self.chance(0.1);
        let count = if self.chance(0.05) { self.int(6, 8) } else { self.int(1, 5) };
        let style = self.below(4);
        let nodes: Vec<Value> = (0..count)
            .map(|i| {
                let id = match style {
                    0 => format!("n{i}"),
                    1 => format!("search.rerank.{i}"),
                    2 => format!("检索{i}"),
                    _ => format!(" pad {i} "),
                };
                json!({
                    "id": id,
                    "failureRate": if ties { self.tie_rate() } else { self.failure_rate() },
                    "attemptCostMicros": self.cost(),
                    "latencyMs": self.latency(),
                    "maxRetries": if ties { self.int(2, 4) } else { self.max_retries() },
                    "required": self.chance(0.6),
                })
            })
            .collect();
        let budget = match self.below(10) {
            0 => 0,
            1..=3 => self.int(1, 6),
            4..=7 => self.int(7, 30),
            8 => self.int(31, 80),
            _ => self.pick(&[1000, u64::from(u32::MAX)]),
        };
        let (budget, threshold) = if ties { (2 * count, json!(3)) } else { (budget, self.threshold()) };
        let policy = json!({"globalRetryBudget": budget, "consecutiveFailureThreshold": threshold, "halfOpenAfterCalls": self.int(1, 5)});
        json!({"nodes": nodes, "policy": policy})
    }

    /// Breaks exactly one rule of the reference's validation.
    fn break_plan(&mut self, input: &mut Value) {
        let n = input["nodes"].as_array().unwrap().len();
        let k = self.below(n);
        let field = |input: &mut Value, name: &str, value: Value| input["nodes"][k][name] = value;
        match self.below(16) {
            0 => input["nodes"] = json!([]),
            1 => field(input, "id", json!(self.pick(&["", "  "]))),
            2 => {
                let copy = input["nodes"][0].clone();
                input["nodes"].as_array_mut().unwrap().push(copy);
            }
            3 | 4 => field(input, "failureRate", json!(self.pick(&[1.0, -0.1, 1.5, -5e-324]))),
            5 => field(input, "attemptCostMicros", json!(self.pick(&[1.5, -1.0, 0.001]))),
            6 => field(input, "latencyMs", json!(self.pick(&[-1.0, -0.001]))),
            7 | 8 => field(input, "maxRetries", json!(self.pick(&[0.5, -1.0, 2.25]))),
            9 | 10 => input["policy"]["globalRetryBudget"] = json!(self.pick(&[-1.0, 2.5])),
            11..=13 => input["policy"]["consecutiveFailureThreshold"] = self.pick(&[json!(0), json!(1.5), json!(-1), json!("lots")]),
            _ => input["policy"]["halfOpenAfterCalls"] = json!(self.pick(&[0.0, 1.5, -2.0])),
        }
    }

    fn trace_input(&mut self) -> Value {
        let threshold = if self.chance(0.9) { self.int(1, 6) } else { self.pick(&[10, 1000]) };
        let half_open = if self.chance(0.9) { self.int(1, 6) } else { self.pick(&[20, 50]) };
        let len = self.int(0, 40);
        let p = self.pick(&[0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]);
        let calls: Vec<bool> = (0..len).map(|_| self.chance(p)).collect();
        json!({"breaker": {"failureThreshold": threshold, "halfOpenAfterCalls": half_open}, "calls": calls})
    }

    fn break_trace(&mut self, input: &mut Value) {
        match self.below(2) {
            0 => input["breaker"]["failureThreshold"] = self.pick(&[json!(0), json!(1.5), json!("Infinity")]),
            _ => input["breaker"]["halfOpenAfterCalls"] = json!(self.pick(&[0.0, 2.5])),
        }
    }
}

fn cases() -> Vec<Case> {
    let mut draw = Draw(ChaCha8Rng::seed_from_u64(SEED));
    (0..CASES)
        .map(|_| {
            if draw.chance(0.7) {
                let mut input = draw.plan_input();
                if draw.chance(0.08) {
                    draw.break_plan(&mut input);
                }
                Case::new(true, input)
            } else {
                let mut input = draw.trace_input();
                if draw.chance(0.06) {
                    draw.break_trace(&mut input);
                }
                Case::new(false, input)
            }
        })
        .collect()
}

/// What `cargo xtask budget` answers, with an error reduced to the field it names.
fn rust_output(case: &Case) -> Value {
    let input: Value = serde_json::from_str(&case.input_text()).unwrap();
    let answer = if case.plan {
        plan_input_from_json(&input).and_then(|(nodes, policy)| {
            let plan = plan_retry_budget(&nodes, &policy)?;
            Ok(plan_to_json(&plan, &worst_case_retry_cost(&nodes, &policy)?))
        })
    } else {
        trace_input_from_json(&input)
            .and_then(|(threshold, half_open, calls)| Ok(trace_to_json(&trace_breaker(threshold, half_open, &calls)?)))
    };
    answer.unwrap_or_else(|e| json!({"error": e.field}))
}

/// The field a reference message (`retry-budget: <field> 必须…`) names, as `BudgetError::field`.
fn reference_error_field(message: &str) -> String {
    let rest = message.strip_prefix("retry-budget: ").unwrap_or(message);
    if rest == "至少需要一个节点" {
        return "nodes".into();
    }
    if rest.starts_with("重复的 node.id ") {
        return "node.id".into();
    }
    let end = rest.rfind(" 必须").or_else(|| rest.rfind(" 不能为空")).unwrap_or(rest.len());
    rest[..end].to_owned()
}

/// A reference output line as comparable JSON, with an error reduced to the field it names.
fn reference_output(line: &str) -> Value {
    let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("reference output is not JSON ({e}): {line}"));
    match value.get("error").and_then(Value::as_str) {
        Some(message) => json!({"error": reference_error_field(message)}),
        None => value,
    }
}

/// The first place where `ours` and `theirs` differ: numbers compare as exactly equal `f64`s.
fn first_difference(path: &str, ours: &Value, theirs: &Value) -> Option<String> {
    let differ = || Some(format!("{path}: rust {ours} vs reference {theirs}"));
    match (ours, theirs) {
        (Value::Number(a), Value::Number(b)) => (a.as_f64() != b.as_f64()).then(differ).flatten(),
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                return differ();
            }
            a.iter().zip(b).enumerate().find_map(|(i, (x, y))| first_difference(&format!("{path}[{i}]"), x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            if !a.keys().eq(b.keys()) {
                return Some(format!(
                    "{path}: rust keys {:?} vs reference keys {:?}",
                    a.keys().collect::<Vec<_>>(),
                    b.keys().collect::<Vec<_>>()
                ));
            }
            a.iter().find_map(|(k, x)| first_difference(&format!("{path}.{k}"), x, &b[k]))
        }
        _ => (ours != theirs).then(differ).flatten(),
    }
}

/// The reference's answers from node: the engine line, then one line per case; `None` when node
/// is not there (or `BUDGET_REFERENCE_NODE=off`).
fn run_node(cases: &[Case]) -> Option<(String, Vec<String>)> {
    let node = std::env::var("BUDGET_REFERENCE_NODE").unwrap_or_else(|_| "node".into());
    if node == "off" {
        return None;
    }
    let mut child = match Command::new(&node)
        .arg(format!("{DIR}/driver.mjs"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("{node} cannot be started: {e}"),
    };
    let mut stdin = child.stdin.take().unwrap();
    let input: String = cases.iter().map(|c| format!("{}\n", c.line)).collect();
    // The driver reads all of its input before it writes anything, so this cannot deadlock.
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the reference driver failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines().map(str::to_owned);
    let engine = lines.next().unwrap();
    let lines: Vec<String> = lines.collect();
    assert_eq!(lines.len(), cases.len(), "the driver answered {} of {} cases", lines.len(), cases.len());
    Some((engine, lines))
}

fn committed_file(engine: &str, cases: &[Case], lines: &[String]) -> String {
    let mut text = format!(
        "# tests/budget_reference.rs: reference outputs of driver.mjs for {CASES} cases of seed {SEED}, made by {engine}; \
         regenerate with `{REGENERATE}`\n"
    );
    for (case, line) in cases.iter().zip(lines) {
        text.push_str(&format!("{} {line}\n", case.fingerprint()));
    }
    text
}

/// The committed outputs, checked to belong to these very cases.
fn read_committed(cases: &[Case]) -> Vec<String> {
    let text = std::fs::read_to_string(OUTPUTS).unwrap_or_else(|e| panic!("{OUTPUTS} cannot be read ({e}); with node, `{REGENERATE}`"));
    let rows: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), cases.len(), "{OUTPUTS} holds {} outputs for {} cases: regenerate with `{REGENERATE}`", rows.len(), cases.len());
    cases
        .iter()
        .zip(rows)
        .enumerate()
        .map(|(i, (case, row))| {
            let (fingerprint, line) = row.split_once(' ').unwrap_or((row, ""));
            assert_eq!(fingerprint, case.fingerprint(), "{OUTPUTS} was made for other cases (case {i}): regenerate with `{REGENERATE}`");
            line.to_owned()
        })
        .collect()
}

/// The oracle: node's answers when node runs an fdlibm `Math.pow` (then the committed outputs
/// must match them, or are rewritten when blessing), else the committed outputs.
fn reference(cases: &[Case]) -> Vec<String> {
    let bless = std::env::var_os("BUDGET_REFERENCE_BLESS").is_some();
    let Some((engine, lines)) = run_node(cases) else {
        assert!(!bless, "BUDGET_REFERENCE_BLESS needs node");
        println!("node is not available: comparing with the committed outputs {OUTPUTS}");
        return read_committed(cases);
    };
    let engine_info: Value = serde_json::from_str(&engine).unwrap();
    if engine_info["fdlibmPow"] != json!(true) {
        assert!(!bless, "{engine}: this engine's Math.pow is not fdlibm's, so it cannot regenerate the committed outputs");
        println!("{engine}: Math.pow is not fdlibm's; comparing with the committed outputs {OUTPUTS}");
        return read_committed(cases);
    }
    println!("reference running live on {engine}");
    let expected = committed_file(&engine, cases, &lines);
    if bless {
        std::fs::write(OUTPUTS, &expected).unwrap();
        println!("rewrote {OUTPUTS}");
    } else {
        let committed = read_committed(cases);
        let stale = committed.iter().zip(&lines).position(|(a, b)| a != b);
        assert!(stale.is_none(), "{OUTPUTS} differs from the live reference at case {stale:?}: regenerate with `{REGENERATE}`");
    }
    lines
}

#[test]
fn the_planner_matches_the_reference_on_1000_random_cases() {
    let cases = cases();
    let reference = reference(&cases);
    let mut differing = Vec::new();
    for (i, (case, line)) in cases.iter().zip(&reference).enumerate() {
        if let Some(difference) = first_difference("", &rust_output(case), &reference_output(line)) {
            differing.push((i, case, difference));
        }
    }
    for (i, case, difference) in differing.iter().take(20) {
        println!("case {i}: {difference}\n  input: {}", case.line);
    }
    // How many cases differ first at each field (array indices dropped).
    let mut by_field = std::collections::BTreeMap::<String, usize>::new();
    for (_, _, difference) in &differing {
        let path = difference.split(": ").next().unwrap_or_default();
        let field: String = path.split('[').map(|part| part.split_once(']').map_or(part, |(_, rest)| rest)).collect::<Vec<_>>().join("[]");
        *by_field.entry(if field.is_empty() { "(the whole answer)".into() } else { field }).or_default() += 1;
    }
    if !by_field.is_empty() {
        println!("first differing field: {by_field:?}");
    }
    let (plans, errors) = (cases.iter().filter(|c| c.plan).count(), reference.iter().filter(|l| l.starts_with(r#"{"error""#)).count());
    println!("{} of {CASES} cases differ ({plans} plan, {} trace, {errors} rejected by the reference)", differing.len(), CASES - plans);
    assert!(differing.is_empty(), "{} of {CASES} cases differ from the reference; the first: {}", differing.len(), differing[0].2);
}

#[test]
fn reference_error_messages_name_the_field_as_budget_error_does() {
    assert_eq!(reference_error_field("retry-budget: 至少需要一个节点"), "nodes");
    assert_eq!(reference_error_field("retry-budget: 重复的 node.id  pad 1 "), "node.id");
    assert_eq!(reference_error_field("retry-budget:  pad 1 .failureRate 必须落在 [0, 1)"), " pad 1 .failureRate");
    assert_eq!(reference_error_field("retry-budget: node.id 不能为空"), "node.id");
    assert_eq!(
        reference_error_field("retry-budget: consecutiveFailureThreshold 必须是 >= 1 的整数或 Infinity"),
        "consecutiveFailureThreshold"
    );
}
