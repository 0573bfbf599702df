//! The retry-budget planner against the seed's own TypeScript reference (seed 002, transcribed to
//! `tests/budget_reference/reference.mjs`): 1 000 cases drawn from a seeded RNG, `plan` and
//! `trace`, valid and invalid, go through the same JSON path as `cargo xtask budget` and must
//! give the reference's output field for field, every number exactly equal.
//!
//! With `node` available the reference runs live (`tests/budget_reference/driver.mjs`) and the
//! committed outputs must equal its answers; without it the committed outputs are the oracle.
//!
//! - `BUDGET_REFERENCE_NODE`: the node binary (default `node`); `off` skips node, as if absent.
//! - `BUDGET_REFERENCE_DUMP=<dir>`: also write each case's input, as xtask reads it, to
//!   `<dir>/<case>.<mode>.json` (to feed two builds of `cargo xtask budget` the same inputs).
//! - `BUDGET_REFERENCE_BLESS=1`: rewrite the committed outputs from node. To regenerate them after
//!   changing the cases or the reference, run
//!   `BUDGET_REFERENCE_BLESS=1 cargo test -p gateway-budget --test budget_reference`.
//!
//! The reference's numbers depend on the engine's `Math.pow`: Node 20's V8 uses its own fdlibm
//! port, newer V8 can use the C library's `pow` (its `use_std_math_pow` flag). The committed
//! outputs come from an fdlibm engine (see their first line); a live engine whose `Math.pow` is
//! not fdlibm's is reported and the committed outputs are used instead.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use gateway_budget::*;
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};

#[path = "budget_reference/draw.rs"]
mod draw;

const SEED: u64 = 2;
const CASES: usize = 1000;
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/budget_reference");
/// The committed reference outputs: a header line, then `<fingerprint of the case> <output>`.
const OUTPUTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/budget_reference/outputs.txt");
const REGENERATE: &str = "BUDGET_REFERENCE_BLESS=1 cargo test -p gateway-budget --test budget_reference";

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

fn cases() -> Vec<Case> {
    let mut draw = draw::Draw::seeded(SEED);
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
    let answer = if case.plan { answer_plan(&case.input_text()) } else { answer_trace(&case.input_text()) };
    match answer {
        Ok(text) => serde_json::from_str(&text).unwrap(),
        Err(e) => json!({"error": e.field}),
    }
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

fn dump(cases: &[Case]) {
    let Some(dir) = std::env::var_os("BUDGET_REFERENCE_DUMP") else { return };
    std::fs::create_dir_all(&dir).unwrap();
    for (i, case) in cases.iter().enumerate() {
        let mode = if case.plan { "plan" } else { "trace" };
        std::fs::write(std::path::Path::new(&dir).join(format!("{i:04}.{mode}.json")), case.input_text()).unwrap();
    }
}

#[test]
fn the_planner_matches_the_reference_on_1000_random_cases() {
    let cases = cases();
    dump(&cases);
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
