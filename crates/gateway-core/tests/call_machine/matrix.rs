//! The behaviour matrix of seed 003 §4: what a call does, by `circuit_open`, when one, some or
//! all sources are open, dead, half-open or full. The gates' answers (their retry moments)
//! are the script's; the breaker's own rules (cooldowns, their escalation, probes) are tested
//! with the breaker.

use crate::script::{rules, trace};
use insta::assert_snapshot;
use serde_json::json;

#[test]
fn single_source_open_fail_fast_fails_at_once_with_the_remaining_cooldown() {
    let script = "
        blocked gates=1
        retry_after 50s
    ";
    assert_snapshot!(trace(rules(1, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=1
          t=0s       ask the gates' retry moment
        > retry_after 50s
          t=0s       fail: circuit_open, retry after 50s
    ");
}

#[test]
fn single_source_open_wait_sleeps_to_the_cooldown_end_then_probes_and_succeeds() {
    let script = "
        blocked gates=1
        retry_after 60s
        pick s1
        s1 success after 50ms
    ";
    assert_snapshot!(trace(rules(1, json!({"circuit_open": "wait"})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=1
          t=0s       ask the gates' retry moment
        > retry_after 60s
          t=0s       sleep 60.035s
          t=60.035s  pick (a turn waits at most 240.015s)
        > pick s1
        > s1 success after 50ms
          t=60.085s  return the answer
    ");
}

#[test]
fn single_source_dead_key_fail_fast_fails_at_once() {
    let script = "
        pick s1
        s1 source_dead after 20ms
        blocked gates=1
        retry_after 60s
    ";
    assert_snapshot!(trace(rules(1, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 source_dead after 20ms
          t=0.02s    spent a retry (1 so far)
          t=0.02s    pick (a turn waits at most 300.05s)
        > blocked gates=1
          t=0.02s    ask the gates' retry moment
        > retry_after 60s
          t=0.02s    fail: circuit_open, retry after 60s
    ");
}

#[test]
fn single_source_dead_key_wait_reprobes_after_60_then_120_until_stalled() {
    // The gate's cooldowns escalate 60 s, 120 s, 240 s; the third probe is past the stall bound.
    let script = "
        pick s1
        s1 source_dead
        blocked gates=1
        retry_after 60s
        pick s1
        s1 source_dead
        blocked gates=1
        retry_after 120s
        pick s1
        s1 source_dead
        blocked gates=1
        retry_after 240s
    ";
    assert_snapshot!(trace(rules(1, json!({"circuit_open": "wait"})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 source_dead
          t=0s       spent a retry (1 so far)
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=1
          t=0s       ask the gates' retry moment
        > retry_after 60s
          t=0s       sleep 60.035s
          t=60.035s  pick (a turn waits at most 240.015s)
        > pick s1
        > s1 source_dead
          t=60.035s  spent a retry (2 so far)
          t=60.035s  pick (a turn waits at most 240.015s)
        > blocked gates=1
          t=60.035s  ask the gates' retry moment
        > retry_after 120s
          t=60.035s  sleep 120.027s
          t=180.062s pick (a turn waits at most 119.988s)
        > pick s1
        > s1 source_dead
          t=180.062s spent a retry (3 so far)
          t=180.062s pick (a turn waits at most 119.988s)
        > blocked gates=1
          t=180.062s ask the gates' retry moment
        > retry_after 240s
          t=180.062s sleep 119.988s
          t=300.05s  fail: stalled
    ");
}

#[test]
fn some_sources_open_leaves_the_call_to_the_others_whatever_circuit_open() {
    // Picking skips the open source; the machine only sees the pick.
    let script = "
        pick s2
        s2 success after 50ms
    ";
    let fail_fast = trace(rules(2, json!({"circuit_open": "fail_fast"})), script);
    assert_eq!(fail_fast, trace(rules(2, json!({"circuit_open": "wait"})), script));
    assert_snapshot!(fail_fast, @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s2
        > s2 success after 50ms
          t=0.05s    return the answer
    ");
}

#[test]
fn all_sources_open_fail_fast_fails_at_once_with_the_earliest_recovery() {
    let script = "
        blocked gates=3
        retry_after 40s
    ";
    assert_snapshot!(trace(rules(3, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=3
          t=0s       ask the gates' retry moment
        > retry_after 40s
          t=0s       fail: circuit_open, retry after 40s
    ");
}

#[test]
fn all_sources_open_wait_waits_for_the_earliest_recovery() {
    let script = "
        blocked gates=3
        retry_after 40s
        pick s1
        s1 success after 50ms
    ";
    assert_snapshot!(trace(rules(3, json!({"circuit_open": "wait"})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=3
          t=0s       ask the gates' retry moment
        > retry_after 40s
          t=0s       sleep 40.035s
          t=40.035s  pick (a turn waits at most 260.015s)
        > pick s1
        > s1 success after 50ms
          t=40.085s  return the answer
    ");
}

#[test]
fn all_half_open_fail_fast_fails_with_retry_after_zero() {
    // A probe may answer any moment: the gates know no certain wait.
    let script = "
        blocked gates=2
        retry_after 0s
    ";
    assert_snapshot!(trace(rules(2, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=2
          t=0s       ask the gates' retry moment
        > retry_after 0s
          t=0s       fail: circuit_open, retry after 0s
    ");
}

#[test]
fn all_half_open_wait_polls_and_gets_through_once_a_probe_succeeds() {
    let script = "
        blocked gates=2
        retry_after 0s
        blocked gates=2
        retry_after 0s
        pick s1
        s1 success after 50ms
    ";
    assert_snapshot!(trace(rules(2, json!({"circuit_open": "wait"})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=2
          t=0s       ask the gates' retry moment
        > retry_after 0s
          t=0s       sleep 0.035s
          t=0.035s   pick (a turn waits at most 300.015s)
        > blocked gates=2
          t=0.035s   ask the gates' retry moment
        > retry_after 0s
          t=0.035s   sleep 0.027s
          t=0.062s   pick (a turn waits at most 299.988s)
        > pick s1
        > s1 success after 50ms
          t=0.112s   return the answer
    ");
}

#[test]
fn quota_full_or_aimd_limit_is_governed_by_quota_full_whatever_circuit_open() {
    let script = "
        blocked gates=0
        blocked gates=0
        pick s1
        s1 success after 50ms
    ";
    let (fail_fast, waiting): (Vec<_>, Vec<_>) = ["fail_fast", "wait"]
        .into_iter()
        .map(|circuit_open| {
            let fail_fast = trace(rules(1, json!({"circuit_open": circuit_open, "quota_full": "fail_fast"})), "blocked gates=0");
            (fail_fast, trace(rules(1, json!({"circuit_open": circuit_open, "quota_full": "wait"})), script))
        })
        .unzip();
    assert_eq!((&fail_fast[0], &waiting[0]), (&fail_fast[1], &waiting[1]), "circuit_open changes nothing");
    assert_snapshot!(fail_fast[0], @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=0
          t=0s       fail: quota_exhausted
    ");
    // No time hint: releases wake the line, the fallback poll (1 s) covers a lost wake.
    assert_snapshot!(waiting[0], @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=0
          t=0s       sleep 1s in line
          t=1s       pick (a turn waits at most 299.05s)
        > blocked gates=0
          t=1s       sleep 1s in line
          t=2s       pick (a turn waits at most 298.05s)
        > pick s1
        > s1 success after 50ms
          t=2.05s    return the answer
    ");
}

#[test]
fn wait_with_quota_fail_fast_never_reports_a_breaker_wait_as_quota_exhausted() {
    let script = "
        blocked gates=2
        retry_after 60s
    ";
    assert_snapshot!(trace(rules(2, json!({"circuit_open": "wait", "quota_full": "fail_fast"})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=2
          t=0s       ask the gates' retry moment
        > retry_after 60s
          t=0s       sleep 60.035s
          t=60.035s  pick (a turn waits at most 240.015s)
    ");
}

#[test]
fn a_single_source_scope_behaves_like_a_pool_whose_sources_are_all_open() {
    for circuit_open in ["fail_fast", "wait"] {
        let one = trace(rules(1, json!({"circuit_open": circuit_open})), "blocked gates=1\nretry_after 45s");
        let four = trace(rules(4, json!({"circuit_open": circuit_open})), "blocked gates=4\nretry_after 45s");
        assert_eq!(one.replace("gates=1", "gates=4"), four, "circuit_open = {circuit_open}");
    }
}

#[test]
fn a_mixed_refusal_waits_for_the_breaker_side_only_when_nothing_else_can_serve() {
    // One source open, one pushed back by a 429 past the stall budget: the call ends now
    // (fail_fast), or waits for the open one (wait), asking the gates about it alone.
    let script = "blocked gates=1 pushed=s2:400s";
    assert_snapshot!(trace(rules(2, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=1 pushed=s2:400s
          t=0s       fail: rate_limited, retry after 400s
    ");
    let script = "
        blocked gates=1 pushed=s2:400s
        retry_after 30s
    ";
    assert_snapshot!(trace(rules(2, json!({"circuit_open": "wait"})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=1 pushed=s2:400s
          t=0s       ask the gates' retry moment, all but s2
        > retry_after 30s
          t=0s       sleep 30.035s
          t=30.035s  pick (a turn waits at most 270.015s)
    ");
}
