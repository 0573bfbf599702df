//! Retry-budget planning against the reference's sample (seed 002) with its exact numbers,
//! property tests over random chains, and every validation rule.

#![allow(clippy::unwrap_used)]

use gateway_budget::*;
use proptest::prelude::*;
use serde_json::json;

fn node(id: &str, failure_rate: f64, cost: u64, latency: f64, required: bool) -> RetryNode {
    RetryNode { id: id.into(), failure_rate, attempt_cost_micros: cost, latency_ms: latency, max_retries: 2, required }
}

/// The reference's ECHO_RETRY_NODES.
fn sample() -> Vec<RetryNode> {
    vec![
        node("search.rerank", 0.01, 1_055, 160.0, true),
        node("content.summarize", 0.03, 1_643, 620.0, true),
        node("chat.reply", 0.02, 1_088, 420.0, true),
    ]
}

fn policy(budget: u32, threshold: Threshold) -> BudgetPolicy {
    BudgetPolicy { global_retry_budget: budget, consecutive_failure_threshold: threshold, half_open_after_calls: 3 }
}

#[test]
fn the_reference_sample_with_budget_3_and_threshold_2() {
    let p = policy(3, Threshold::Finite(2));
    let plan = plan_retry_budget(&sample(), &p).unwrap();
    let per_node: Vec<(u32, u32, f64, f64, f64, u64)> = plan
        .allocations
        .iter()
        .map(|a| (a.retries, a.retry_cap, a.effective_failure_rate, a.expected_attempts, a.success_probability, a.expected_cost_micros))
        .collect();
    assert_eq!(per_node, [(1, 1, 0.0001, 1.01, 0.9999, 1066), (1, 1, 0.0009, 1.03, 0.9991, 1692), (1, 1, 0.0004, 1.02, 0.9996, 1110)]);
    assert_eq!(plan.retries_used, 3);
    assert_eq!(plan.chain_success, 0.99860049);
    assert_eq!(plan.expected_cost_micros, 3868);
    assert_eq!(plan.cost_per_success_micros, Some(3873.0));
    assert_eq!(plan.expected_latency_ms, 1229);
    assert_eq!(plan.retry_amplification, 1.02);
    assert_eq!(plan.partial_probability, 0.0);
    assert_eq!(plan.breaker_capped, ["search.rerank", "content.summarize", "chat.reply"]);
    let worst = worst_case_retry_cost(&sample(), &p).unwrap();
    assert_eq!(worst, WorstCase { max_attempts: 6, max_cost_micros: 7572, amplification: 2.0 });
}

#[test]
fn the_reference_sample_with_budget_10_and_no_threshold() {
    let plan = plan_retry_budget(&sample(), &policy(10, Threshold::Infinite)).unwrap();
    assert_eq!(plan.allocations.iter().map(|a| a.retries).collect::<Vec<_>>(), [2, 2, 2]);
    assert_eq!(plan.chain_success, 0.999964);
    assert_eq!(plan.expected_cost_micros, 3870);
    assert_eq!(plan.cost_per_success_micros, Some(3870.0));
    assert_eq!(plan.retry_amplification, 1.0205);
    assert!(plan.breaker_capped.is_empty());
}

#[test]
fn the_reference_trace() {
    let calls = [false, false, true, true, true, true, false, true, true];
    let trace = trace_breaker(Threshold::Finite(2), 3, &calls).unwrap();
    use NodeBreakerState::*;
    assert_eq!((trace.allowed, trace.rejected, trace.attempts, trace.final_state), (6, 3, 6, Closed));
    assert_eq!(trace.states, [Closed, Open, Open, Open, Open, Closed, Closed, Closed, Closed]);
}

#[test]
fn a_chain_that_cannot_succeed_has_no_cost_per_success() {
    // Each success is 1 − f ≈ 1.1e-16; thirty of them multiply to below the smallest double.
    let nodes: Vec<RetryNode> = (0..30).map(|i| node(&format!("n{i}"), 0.999_999_999_999_999_9, 10, 1.0, true)).collect();
    let plan = plan_retry_budget(&nodes, &policy(0, Threshold::Infinite)).unwrap();
    assert_eq!(plan.cost_per_success_micros, None);
    let json = plan_to_json(&plan, &worst_case_retry_cost(&nodes, &policy(0, Threshold::Infinite)).unwrap());
    assert!(json.contains(r#","costPerSuccessMicros":null,"#), "{json}");
}

#[test]
fn optional_nodes_wait_for_the_required_ones_and_count_as_partial() {
    let nodes = vec![node("required", 0.01, 100, 10.0, true), node("optional", 0.5, 100, 10.0, false)];
    let plan = plan_retry_budget(&nodes, &policy(3, Threshold::Infinite)).unwrap();
    // the required node takes both of its retries first, although the optional one gains more
    assert_eq!(plan.allocations.iter().map(|a| a.retries).collect::<Vec<_>>(), [2, 1]);
    assert_eq!(plan.partial_probability, 0.25);
}

#[test]
fn the_json_form_uses_the_reference_field_names_order_and_numbers() {
    let input = json!({
        "nodes": [
            {"id": "search.rerank", "failureRate": 0.01, "attemptCostMicros": 1055, "latencyMs": 160, "maxRetries": 2, "required": true},
            {"id": "content.summarize", "failureRate": 0.03, "attemptCostMicros": 1643, "latencyMs": 620, "maxRetries": 2, "required": true},
            {"id": "chat.reply", "failureRate": 0.02, "attemptCostMicros": 1088, "latencyMs": 420, "maxRetries": 2, "required": true}
        ],
        "policy": {"globalRetryBudget": 3, "consecutiveFailureThreshold": 2, "halfOpenAfterCalls": 3}
    });
    let allocation = |id: &str, failure: &str, attempts: &str, success: &str, cost: u64| {
        format!(
            r#"{{"nodeId":"{id}","retries":1,"retryCap":1,"effectiveFailureRate":{failure},"expectedAttempts":{attempts},"successProbability":{success},"expectedCostMicros":{cost}}}"#
        )
    };
    let expected = format!(
        r#"{{"plan":{{"allocations":[{},{},{}],"retriesUsed":3,"chainSuccess":0.99860049,"expectedCostMicros":3868,"costPerSuccessMicros":3873,"expectedLatencyMs":1229,"retryAmplification":1.02,"partialProbability":0,"breakerCapped":["search.rerank","content.summarize","chat.reply"]}},"worstCase":{{"maxAttempts":6,"maxCostMicros":7572,"amplification":2}}}}"#,
        allocation("search.rerank", "0.0001", "1.01", "0.9999", 1066),
        allocation("content.summarize", "0.0009", "1.03", "0.9991", 1692),
        allocation("chat.reply", "0.0004", "1.02", "0.9996", 1110),
    );
    assert_eq!(answer_plan(&input.to_string()).unwrap(), expected);
    let infinite = json!({"nodes": input["nodes"], "policy": {"globalRetryBudget": 10, "consecutiveFailureThreshold": "Infinity", "halfOpenAfterCalls": 3}});
    assert_eq!(plan_input_from_json(&infinite.to_string()).unwrap().1.consecutive_failure_threshold, Threshold::Infinite);
    let trace = r#"{"breaker": {"failureThreshold": 2, "halfOpenAfterCalls": 3}, "calls": [false, false, true, true, true, true, false, true, true]}"#;
    assert_eq!(
        answer_trace(trace).unwrap(),
        r#"{"allowed":6,"rejected":3,"attempts":6,"finalState":"closed","states":["closed","open","open","open","open","closed","closed","closed","closed"]}"#
    );
}

/// The JSON form reads its input as the reference's JavaScript reads an object: a field of a
/// value that is not an object is missing, `null` is a value of the wrong kind, the last of a
/// repeated key wins, unknown fields are ignored (but must be JSON).
#[test]
fn the_json_form_reads_values_of_every_kind_as_the_reference_does() {
    let node = r#"{"id": "a", "failureRate": 0.1, "attemptCostMicros": 10, "latencyMs": 5, "maxRetries": 2, "required": true}"#;
    let policy = r#"{"globalRetryBudget": 3, "consecutiveFailureThreshold": 2, "halfOpenAfterCalls": 3}"#;
    let plan = |nodes: &str, policy: &str| answer_plan(&format!(r#"{{"nodes": {nodes}, "policy": {policy}}}"#));
    let error = |answer: Result<String, BudgetError>| answer.unwrap_err().to_string();
    assert_eq!(error(answer_plan("[1, 2]")), "retry-budget: nodes is missing");
    assert_eq!(error(plan("null", policy)), "retry-budget: nodes must be an array");
    assert_eq!(error(plan(r#"[["a", 0.1, 10, 5, 2, true]]"#, policy)), "retry-budget: nodes[0].id is missing");
    assert_eq!(error(plan(&format!("[{node}, 7]"), policy)), "retry-budget: nodes[1].id is missing");
    assert_eq!(error(plan(&format!("[{}]", node.replace("5,", "null,")), policy)), "retry-budget: a.latencyMs must be a number");
    assert_eq!(error(plan(&format!("[{node}]"), "5")), "retry-budget: globalRetryBudget is missing");
    assert_eq!(error(plan(&format!("[{node}]"), r#"{"consecutiveFailureThreshold": null}"#)), "retry-budget: globalRetryBudget is missing");
    let repeated = node.replace(r#""maxRetries": 2"#, r#""maxRetries": 0.5, "maxRetries": 2e0"#);
    assert_eq!(plan(&format!("[{repeated}]"), policy).unwrap(), plan(&format!("[{node}]"), policy).unwrap());
    let unknown = node.replace(r#""required""#, r#""note": {"any": [1, "x"]}, "required""#);
    assert_eq!(plan(&format!("[{unknown}]"), policy).unwrap(), plan(&format!("[{node}]"), policy).unwrap());
    let out_of_range = node.replace(r#""required""#, r#""note": 1e400, "required""#);
    assert!(error(plan(&format!("[{out_of_range}]"), policy)).starts_with("retry-budget: input is not JSON: number out of range"));
    assert_eq!(error(answer_trace(r#"{"breaker": [2, 3], "calls": []}"#)), "retry-budget: failureThreshold is missing");
    assert_eq!(error(answer_trace(r#"{"breaker": {"failureThreshold": 2, "halfOpenAfterCalls": 1}}"#)), "retry-budget: calls is missing");
}

#[test]
fn every_validation_rule_rejects_naming_the_field() {
    let base = || {
        json!({
            "nodes": [{"id": "a", "failureRate": 0.1, "attemptCostMicros": 10, "latencyMs": 5, "maxRetries": 2, "required": true}],
            "policy": {"globalRetryBudget": 3, "consecutiveFailureThreshold": 2, "halfOpenAfterCalls": 3}
        })
    };
    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        ("/nodes", json!([]), "retry-budget: nodes must hold at least one node"),
        ("/nodes/0/id", json!("  "), "retry-budget: node.id must not be empty"),
        ("/nodes/0/failureRate", json!(1.0), "retry-budget: a.failureRate must lie in [0, 1)"),
        ("/nodes/0/failureRate", json!(-0.1), "retry-budget: a.failureRate must lie in [0, 1)"),
        ("/nodes/0/attemptCostMicros", json!(1.5), "retry-budget: a.attemptCostMicros must be an integer >= 0"),
        ("/nodes/0/attemptCostMicros", json!(-1), "retry-budget: a.attemptCostMicros must be an integer >= 0"),
        ("/nodes/0/latencyMs", json!(-1), "retry-budget: a.latencyMs must be >= 0"),
        ("/nodes/0/maxRetries", json!(0.5), "retry-budget: a.maxRetries must be an integer >= 0"),
        ("/nodes/0/required", json!("yes"), "retry-budget: a.required must be true or false"),
        ("/policy/globalRetryBudget", json!(-1), "retry-budget: globalRetryBudget must be an integer >= 0"),
        ("/policy/consecutiveFailureThreshold", json!(0), "retry-budget: consecutiveFailureThreshold must be an integer >= 1 or Infinity"),
        (
            "/policy/consecutiveFailureThreshold",
            json!(1.5),
            "retry-budget: consecutiveFailureThreshold must be an integer >= 1 or Infinity",
        ),
        (
            "/policy/consecutiveFailureThreshold",
            json!("lots"),
            "retry-budget: consecutiveFailureThreshold must be an integer >= 1 or Infinity",
        ),
        ("/policy/halfOpenAfterCalls", json!(0), "retry-budget: halfOpenAfterCalls must be an integer >= 1"),
    ];
    for (pointer, value, expected) in cases {
        let mut input = base();
        *input.pointer_mut(pointer).unwrap() = value;
        assert_eq!(plan_input_from_json(&input.to_string()).unwrap_err().to_string(), expected, "{pointer}");
    }
    let mut twice = base();
    let first = twice["nodes"][0].clone();
    twice["nodes"].as_array_mut().unwrap().push(first);
    assert_eq!(plan_input_from_json(&twice.to_string()).unwrap_err().to_string(), "retry-budget: node.id a is repeated");
    let mut missing = base();
    missing["policy"].as_object_mut().unwrap().remove("halfOpenAfterCalls");
    assert_eq!(plan_input_from_json(&missing.to_string()).unwrap_err().to_string(), "retry-budget: halfOpenAfterCalls is missing");
    // the breaker constructor's rules
    assert_eq!(NodeCircuitBreaker::new(" ", Threshold::Finite(1), 1).unwrap_err().field, "nodeId");
    assert_eq!(NodeCircuitBreaker::new("n", Threshold::Finite(0), 1).unwrap_err().field, "failureThreshold");
    // the reference's breaker wants an integer threshold: Infinity is the planner policy's only
    let infinite = json!({"breaker": {"failureThreshold": "Infinity", "halfOpenAfterCalls": 1}, "calls": [false]});
    let input = trace_input_from_json(&infinite.to_string()).unwrap();
    assert_eq!(input.failure_threshold, Threshold::Infinite);
    assert_eq!(answer_trace(&infinite.to_string()).unwrap_err().to_string(), "retry-budget: failureThreshold must be an integer >= 1");
    assert_eq!(NodeCircuitBreaker::new("n", Threshold::Finite(1), 0).unwrap_err().field, "halfOpenAfterCalls");
    let calls = json!({"breaker": {"failureThreshold": 2, "halfOpenAfterCalls": 1}, "calls": [true, 1]});
    assert_eq!(trace_input_from_json(&calls.to_string()).unwrap_err().to_string(), "retry-budget: calls[1] must be true or false");
}

#[test]
fn powers_are_javascripts_math_pow_to_the_last_bit() {
    // 0.895³ = 0.716917375 is a toFixed(8) tie: V8's Math.pow lands below it, the C library's
    // pow (f64::powf) above, so only the former prints the reference's 0.71691737.
    let nodes = vec![RetryNode { max_retries: 3, ..node("n1", 0.895, 1088, 0.0, true) }];
    let plan = plan_retry_budget(&nodes, &policy(10, Threshold::Finite(3))).unwrap();
    assert_eq!((plan.allocations[0].retries, plan.allocations[0].effective_failure_rate), (2, 0.71691737));
    assert_eq!(plan.allocations[0].success_probability, 0.28308263);
}

#[test]
fn to_fixed_rounds_half_up_like_javascript() {
    assert_eq!(to_fixed(1.005, 2), 1.0, "1.005 is 1.00499999999999989… in binary");
    assert_eq!(to_fixed(0.5, 0), 1.0);
    assert_eq!(to_fixed(2.5, 0), 3.0);
    assert_eq!(to_fixed(0.125, 2), 0.13, "an exact tie rounds up");
    assert_eq!(to_fixed(0.9999999999, 8), 1.0);
}

fn chain() -> impl Strategy<Value = Vec<RetryNode>> {
    prop::collection::vec((0.0f64..0.9, 0u64..5000, 0.0f64..1000.0, 0u32..5, any::<bool>()), 1..6).prop_map(|nodes| {
        nodes
            .into_iter()
            .enumerate()
            .map(|(i, (f, cost, latency, max_retries, required))| RetryNode {
                id: format!("n{i}"),
                failure_rate: f,
                attempt_cost_micros: cost,
                latency_ms: latency,
                max_retries,
                required,
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn more_budget_never_lowers_chain_success(nodes in chain(), budget in 0u32..12, threshold in prop::option::of(1u32..5)) {
        let t = threshold.map_or(Threshold::Infinite, Threshold::Finite);
        let less = plan_retry_budget(&nodes, &policy(budget, t)).unwrap();
        let more = plan_retry_budget(&nodes, &policy(budget + 1, t)).unwrap();
        prop_assert!(more.chain_success >= less.chain_success);
    }

    #[test]
    fn no_node_exceeds_its_cap_and_the_pool_is_respected(nodes in chain(), budget in 0u32..12, threshold in prop::option::of(1u32..5)) {
        let p = policy(budget, threshold.map_or(Threshold::Infinite, Threshold::Finite));
        let plan = plan_retry_budget(&nodes, &p).unwrap();
        for (a, n) in plan.allocations.iter().zip(&nodes) {
            prop_assert!(a.retries <= a.retry_cap && a.retry_cap == retry_cap(n, &p));
        }
        prop_assert!(plan.retries_used <= budget);
        let worst = worst_case_retry_cost(&nodes, &p).unwrap();
        prop_assert!(worst.max_attempts <= nodes.len() as u64 + u64::from(budget));
    }

    #[test]
    fn optional_nodes_get_nothing_while_a_required_node_can_take_a_retry(nodes in chain(), budget in 0u32..12) {
        let p = policy(budget, Threshold::Infinite);
        let plan = plan_retry_budget(&nodes, &p).unwrap();
        let required_open = plan.allocations.iter().zip(&nodes).any(|(a, n)| n.required && n.failure_rate > 0.0 && a.retries < a.retry_cap);
        let optional_got = plan.allocations.iter().zip(&nodes).any(|(a, n)| !n.required && a.retries > 0);
        prop_assert!(!(required_open && optional_got));
    }
}

#[test]
fn the_worst_case_of_a_huge_retry_cap_is_counted_not_listed() {
    // Four billion retries a node: listing them one by one took 34 GB and aborted.
    let nodes: Vec<RetryNode> = [("a", 300), ("b", 500)]
        .into_iter()
        .map(|(id, cost)| RetryNode { max_retries: u32::MAX, ..node(id, 0.1, cost, 10.0, true) })
        .collect();
    let worst = worst_case_retry_cost(&nodes, &policy(5, Threshold::Infinite)).unwrap();
    assert_eq!((worst.max_attempts, worst.max_cost_micros), (7, 800 + 5 * 500), "the pool goes to the dearest node");
    let worst = worst_case_retry_cost(&sample(), &policy(u32::MAX, Threshold::Infinite)).unwrap();
    let caps: u64 = sample().iter().map(|n| u64::from(n.max_retries)).sum();
    assert_eq!(worst.max_attempts, sample().len() as u64 + caps, "the pool is capped by the nodes' caps");
}
