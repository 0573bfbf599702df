//! `cargo xtask budget plan|trace`: the retry-budget planner of seed 002 on JSON. `plan` reads
//! `{"nodes": [...], "policy": {...}}` on stdin and prints `{"plan": ..., "worstCase": ...}`;
//! `trace` reads `{"breaker": {...}, "calls": [...]}` and prints the breaker trace. Invalid
//! input exits with status 2 and one `retry-budget: …` line on stderr naming the field.

use std::io::Read;
use std::process::ExitCode;

/// What `cargo xtask budget` computes.
#[derive(clap::Subcommand, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// reads {"nodes": [...], "policy": {...}} on stdin and prints {"plan": ..., "worstCase": ...}
    #[command(override_usage = "cargo xtask budget plan < input.json")]
    Plan,
    /// reads {"breaker": {...}, "calls": [...]} on stdin and prints the breaker trace
    #[command(override_usage = "cargo xtask budget trace < input.json")]
    Trace,
}

pub fn run(mode: Mode) -> ExitCode {
    let mut text = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut text) {
        eprintln!("retry-budget: input cannot be read: {e}");
        return ExitCode::from(2);
    }
    match answer(mode == Mode::Plan, &text) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(line) => {
            eprintln!("{line}");
            ExitCode::from(2)
        }
    }
}

fn answer(plan: bool, text: &str) -> Result<String, String> {
    let answer = if plan { gateway_budget::answer_plan(text) } else { gateway_budget::answer_trace(text) };
    answer.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::answer;

    #[test]
    fn errors_are_one_retry_budget_line() {
        let e = answer(true, "{").unwrap_err();
        assert!(e.starts_with("retry-budget: input is not JSON") && !e.contains('\n'), "{e}");
        let e = answer(true, r#"{"nodes": [], "policy": {}}"#).unwrap_err();
        assert_eq!(e, "retry-budget: nodes must hold at least one node");
        let trace =
            answer(false, r#"{"breaker": {"failureThreshold": 2, "halfOpenAfterCalls": 3}, "calls": [false, false, true]}"#).unwrap();
        assert_eq!(trace, r#"{"allowed":2,"rejected":1,"attempts":2,"finalState":"open","states":["closed","open","open"]}"#);
    }

    #[test]
    fn numbers_are_read_as_javascript_reads_them() {
        // serde_json's default reads 0.9999999999999999 as 1 (an invalid rate) and
        // 0.9856906946328695 one bit off; the reference's answer depends on every bit of both.
        let input = r#"{"nodes": [
            {"id": "a", "failureRate": 0.9999999999999999, "attemptCostMicros": 10, "latencyMs": 5, "maxRetries": 2, "required": true},
            {"id": "b", "failureRate": 0.9856906946328695, "attemptCostMicros": 10, "latencyMs": 5, "maxRetries": 2, "required": false}],
            "policy": {"globalRetryBudget": 3, "consecutiveFailureThreshold": "Infinity", "halfOpenAfterCalls": 3}}"#;
        let answer: serde_json::Value = serde_json::from_str(&answer(true, input).unwrap()).unwrap();
        let plan = &answer["plan"];
        assert_eq!(plan["costPerSuccessMicros"].as_f64(), Some(150_119_987_579_016_540.0));
        assert_eq!(plan["partialProbability"].as_f64(), Some(0.97158615));
    }
}
