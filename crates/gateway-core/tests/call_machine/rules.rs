//! The loop's rules (SPEC §5, §7, §8): the retry budget, 429 pushback, back-off with full
//! jitter, the structured ladder, a rejected payload, the stall bound and a Retry-After past
//! it, and how a preset's outcome table changes them.

use crate::script::{rules, rules_with, trace, trace_structured};
use gateway_core::call::CallMachine;
use gateway_core::outcome::{OutcomeClass, OutcomeTable};
use gateway_core::time::Timestamp;
use insta::assert_snapshot;
use serde_json::json;

#[test]
fn transient_failures_spend_the_budget_one_plus_max_retries() {
    let script = "
        pick s1
        s1 transient after 50ms
        pick s2
        s2 transient after 50ms
        pick s1
        s1 transient after 50ms
        pick s2
        s2 transient after 50ms
    ";
    assert_snapshot!(trace(rules(2, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 transient after 50ms
          t=0.05s    spent a retry (1 so far)
          t=0.05s    sleep 0.101s
          t=0.15s    pick (a turn waits at most 299.95s)
        > pick s2
        > s2 transient after 50ms
          t=0.2s     spent a retry (2 so far)
          t=0.2s     sleep 0.04s
          t=0.24s    pick (a turn waits at most 299.91s)
        > pick s1
        > s1 transient after 50ms
          t=0.29s    spent a retry (3 so far)
          t=0.29s    sleep 0.597s
          t=0.886s   pick (a turn waits at most 299.314s)
        > pick s2
        > s2 transient after 50ms
          t=0.936s   spent a retry (4 so far)
          t=0.936s   fail: retry_exhausted
    ");
}

#[test]
fn a_429_storm_never_spends_the_budget_and_honours_retry_after() {
    let script = "
        pick s1
        s1 rate_limited after 50ms retry_after=2s
        pick s1
        s1 rate_limited after 50ms retry_after=2s
        pick s1
        s1 rate_limited after 50ms retry_after=2s
        pick s1
        s1 rate_limited after 50ms retry_after=2s
        pick s1
        s1 rate_limited after 50ms retry_after=2s
        pick s1
        s1 success after 50ms
    ";
    assert_snapshot!(trace(rules(1, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 rate_limited after 50ms retry_after=2s
          t=0.05s    push back s1's account until t=2.05s
          t=0.05s    sleep 2s
          t=2.05s    pick (a turn waits at most 298.05s)
        > pick s1
        > s1 rate_limited after 50ms retry_after=2s
          t=2.1s     push back s1's account until t=4.1s
          t=2.1s     sleep 2s
          t=4.1s     pick (a turn waits at most 296.05s)
        > pick s1
        > s1 rate_limited after 50ms retry_after=2s
          t=4.15s    push back s1's account until t=6.15s
          t=4.15s    sleep 2s
          t=6.15s    pick (a turn waits at most 294.05s)
        > pick s1
        > s1 rate_limited after 50ms retry_after=2s
          t=6.2s     push back s1's account until t=8.2s
          t=6.2s     sleep 2s
          t=8.2s     pick (a turn waits at most 292.05s)
        > pick s1
        > s1 rate_limited after 50ms retry_after=2s
          t=8.25s    push back s1's account until t=10.25s
          t=8.25s    sleep 2s
          t=10.25s   pick (a turn waits at most 290.05s)
        > pick s1
        > s1 success after 50ms
          t=10.3s    return the answer
    ");
}

#[test]
fn an_outcome_table_in_which_a_429_spends_a_retry_ends_a_429_storm() {
    // The baseline preset's table: what the old library did.
    let old = OutcomeTable::SPEC.pushback_spends_retries();
    let script = "
        pick s1
        s1 rate_limited after 50ms
        pick s1
        s1 rate_limited after 50ms
        pick s1
        s1 rate_limited after 50ms
        pick s1
        s1 rate_limited after 50ms
    ";
    assert_snapshot!(trace(rules_with(1, json!({}), old), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 rate_limited after 50ms
          t=0.05s    spent a retry (1 so far)
          t=0.05s    sleep 0.101s
          t=0.15s    pick (a turn waits at most 299.95s)
        > pick s1
        > s1 rate_limited after 50ms
          t=0.2s     spent a retry (2 so far)
          t=0.2s     sleep 0.04s
          t=0.24s    pick (a turn waits at most 299.91s)
        > pick s1
        > s1 rate_limited after 50ms
          t=0.29s    spent a retry (3 so far)
          t=0.29s    sleep 0.597s
          t=0.886s   pick (a turn waits at most 299.314s)
        > pick s1
        > s1 rate_limited after 50ms
          t=0.936s   spent a retry (4 so far)
          t=0.936s   fail: retry_exhausted
    ");
}

#[test]
fn back_off_is_exponential_with_full_jitter_and_none_after_a_dead_source() {
    // Sleeps below 0.25 s, 0.5 s, 1 s; a dead source is left at once for the next.
    let script = "
        pick s1
        s1 transient after 50ms
        pick s1
        s1 transient after 50ms
        pick s1
        s1 transient after 50ms
        pick s1
        s1 source_dead after 50ms
    ";
    assert_snapshot!(trace(rules(2, json!({"max_retries": 5})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 transient after 50ms
          t=0.05s    spent a retry (1 so far)
          t=0.05s    sleep 0.101s
          t=0.15s    pick (a turn waits at most 299.95s)
        > pick s1
        > s1 transient after 50ms
          t=0.2s     spent a retry (2 so far)
          t=0.2s     sleep 0.04s
          t=0.24s    pick (a turn waits at most 299.91s)
        > pick s1
        > s1 transient after 50ms
          t=0.29s    spent a retry (3 so far)
          t=0.29s    sleep 0.597s
          t=0.886s   pick (a turn waits at most 299.314s)
        > pick s1
        > s1 source_dead after 50ms
          t=0.936s   spent a retry (4 so far)
          t=0.936s   pick (a turn waits at most 299.314s)
    ");
}

#[test]
fn back_off_is_capped_and_a_retry_after_is_its_floor() {
    let script = "
        pick s1
        s1 transient
        pick s1
        s1 transient
        pick s1
        s1 transient
        pick s1
        s1 rate_limited retry_after=3s
        pick s1
        s1 rate_limited
    ";
    assert_snapshot!(trace(rules(1, json!({"max_retries": 9, "backoff_base_s": 1, "backoff_cap_s": 2})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 transient
          t=0s       spent a retry (1 so far)
          t=0s       sleep 0.402s
          t=0.402s   pick (a turn waits at most 299.648s)
        > pick s1
        > s1 transient
          t=0.402s   spent a retry (2 so far)
          t=0.402s   sleep 0.161s
          t=0.562s   pick (a turn waits at most 299.488s)
        > pick s1
        > s1 transient
          t=0.562s   spent a retry (3 so far)
          t=0.562s   sleep 1.193s
          t=1.755s   pick (a turn waits at most 298.295s)
        > pick s1
        > s1 rate_limited retry_after=3s
          t=1.755s   push back s1's account until t=4.755s
          t=1.755s   sleep 3s
          t=4.755s   pick (a turn waits at most 295.295s)
        > pick s1
        > s1 rate_limited
          t=4.755s   sleep 0.567s
          t=5.322s   pick (a turn waits at most 294.728s)
    ");
}

#[test]
fn failures_count_toward_demotion_unless_the_table_says_otherwise() {
    let mut spec = CallMachine::new(rules(1, json!({})), Timestamp::ZERO);
    for class in [OutcomeClass::Transient, OutcomeClass::RateLimited, OutcomeClass::ResultInvalid, OutcomeClass::RequestRejected] {
        spec.on_attempt_ended(0, class, Timestamp::ZERO);
    }
    assert_eq!(spec.fails().get(0), 2, "a transient failure and a 429 count; a bad payload or a rejected request does not");
    let mut old = CallMachine::new(rules_with(1, json!({}), OutcomeTable::SPEC.without_call_failures()), Timestamp::ZERO);
    old.on_attempt_ended(0, OutcomeClass::Transient, Timestamp::ZERO);
    assert_eq!(old.fails().get(0), 0, "no in-call demotion");
}

#[test]
fn the_structured_ladder_reasks_without_spending_the_budget() {
    let script = "
        pick s1
        s1 result_invalid after 50ms
        pick s1
        s1 result_invalid after 50ms
        pick s2
        s2 success after 50ms
    ";
    assert_snapshot!(trace_structured(rules(2, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 result_invalid after 50ms
          t=0.05s    pick (a turn waits at most 300.05s)
        > pick s1
        > s1 result_invalid after 50ms
          t=0.1s     pick (a turn waits at most 300.05s)
        > pick s2
        > s2 success after 50ms
          t=0.15s    return the answer
    ");
    let script = "
        pick s1
        s1 result_invalid
        pick s1
        s1 result_invalid
        pick s1
        s1 result_invalid
    ";
    assert_snapshot!(trace_structured(rules(2, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 result_invalid
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 result_invalid
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 result_invalid
          t=0s       fail: structured_exhausted
    ");
}

#[test]
fn a_rejected_payload_ends_the_call_at_once() {
    let script = "
        pick s2
        s2 request_rejected after 50ms
    ";
    assert_snapshot!(trace(rules(2, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s2
        > s2 request_rejected after 50ms
          t=0.05s    fail: request_rejected by s2 (request_rejected)
    ");
}

#[test]
fn a_waiting_call_ends_within_the_stall_bound_plus_one_poll() {
    let script = "
        blocked gates=1
        retry_after 400s
    ";
    assert_snapshot!(trace(rules(1, json!({"circuit_open": "wait"})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=1
          t=0s       ask the gates' retry moment
        > retry_after 400s
          t=0s       sleep 300.05s
          t=300.05s  fail: stalled
    ");
}

#[test]
fn only_idle_time_counts_toward_the_stall_bound_and_scope_progress_holds_it_off() {
    // An attempt in flight is no idling; the turn's patience is what is left of the bound.
    let script = "
        idle 100s
        pick s1
        s1 transient after 150s
        idle 100s
        progress
        idle 50s
        idle 200s
        idle 51s
    ";
    assert_snapshot!(trace(rules(1, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > idle 100s
          t=100s     pick (a turn waits at most 200.05s)
        > pick s1
        > s1 transient after 150s
          t=250s     spent a retry (1 so far)
          t=250s     sleep 0.101s
          t=250.1s   pick (a turn waits at most 199.95s)
        > idle 100s
          t=350.1s   pick (a turn waits at most 99.95s)
        > progress
        > idle 50s
          t=400.1s   pick (a turn waits at most 49.95s)
        > idle 200s
          t=600.1s   pick (a turn waits at most 0.05s)
        > idle 51s
          t=651.1s   fail: stalled
    ");
}

#[test]
fn an_answer_past_the_size_budget_spends_its_source_for_the_call() {
    // Three sources: s1 is left out of the pool; when the rest are refused by their gates the
    // call fails fast asking the others' retry moment.
    let script = "
        pick s1
        s1 too_large after 50ms
        blocked gates=2
        retry_after 30s
    ";
    assert_snapshot!(trace(rules(3, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 too_large after 50ms
          t=0.05s    spent a retry (1 so far)
          t=0.05s    s1 is not asked again in this call
          t=0.05s    sleep 0.101s
          t=0.15s    pick (a turn waits at most 299.95s)
        > blocked gates=2
          t=0.15s    ask the gates' retry moment, all but s1
        > retry_after 30s
          t=0.15s    fail: circuit_open, retry after 30s
    ");
    // Two sources, both spent: the call ends though its retry budget is not.
    let script = "
        pick s1
        s1 too_large after 50ms
        pick s2
        s2 too_large after 50ms
    ";
    assert_snapshot!(trace(rules(2, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 too_large after 50ms
          t=0.05s    spent a retry (1 so far)
          t=0.05s    s1 is not asked again in this call
          t=0.05s    sleep 0.101s
          t=0.15s    pick (a turn waits at most 299.95s)
        > pick s2
        > s2 too_large after 50ms
          t=0.2s     spent a retry (2 so far)
          t=0.2s     s2 is not asked again in this call
          t=0.2s     fail: retry_exhausted
    ");
}

#[test]
fn a_call_waiting_for_capacity_sleeps_until_time_gives_some_back_or_the_fallback_poll() {
    // A quota's window or a budget's refill says when: the call sleeps exactly that, in line (a
    // release wakes it sooner). Only releases can free what refused: the fallback poll (1 s by
    // default), no hot loop. Near the stall bound neither sleeps past it by more than a nap's
    // spread.
    let script = "
        blocked ready=300ms
        blocked
        blocked ready=5s
        idle 297s
        blocked ready=5s
    ";
    assert_snapshot!(trace(rules(1, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked ready=300ms
          t=0s       sleep 0.3s in line
          t=0.3s     pick (a turn waits at most 299.75s)
        > blocked
          t=0.3s     sleep 1s in line
          t=1.3s     pick (a turn waits at most 298.75s)
        > blocked ready=5s
          t=1.3s     sleep 1s in line
          t=2.3s     pick (a turn waits at most 297.75s)
        > idle 297s
          t=299.3s   pick (a turn waits at most 0.75s)
        > blocked ready=5s
          t=299.3s   sleep 0.75s in line
          t=300.05s  fail: stalled
    ");
    // One source full, the other pushed back by a 429 for 300 ms: its end is time's too.
    let script = "
        blocked pushed=s1:300ms
    ";
    assert_snapshot!(trace(rules(2, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked pushed=s1:300ms
          t=0s       sleep 0.3s in line
          t=0.3s     pick (a turn waits at most 299.75s)
    ");
}
