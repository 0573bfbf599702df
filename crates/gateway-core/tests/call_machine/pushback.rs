//! A 429's Retry-After (SPEC §6, §7): past the call's stall budget it ends the call at once
//! with it, or leaves the call to the other sources; within the budget, another call's pushback
//! on the account is waited out to its end, never read as a full quota.

use crate::script::{rules, trace};
use insta::assert_snapshot;
use serde_json::json;

#[test]
fn a_retry_after_past_the_stall_budget_ends_the_call_at_once_with_it() {
    let script = "
        pick s1
        s1 rate_limited after 50ms retry_after=400s
        blocked pushed=s1:399.95s
    ";
    assert_snapshot!(trace(rules(1, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 rate_limited after 50ms retry_after=400s
          t=0.05s    push back s1's account until t=400.05s
          t=0.05s    pick (a turn waits at most 300.05s)
        > blocked pushed=s1:399.95s
          t=0.05s    fail: rate_limited, retry after 399.95s
    ");
}

#[test]
fn a_retry_after_within_the_stall_budget_is_waited_out_to_its_end_not_read_as_a_capacity_wait() {
    // Another call's 429 pushed the account back for 10 s. quota_full = fail_fast would end a
    // capacity wait at once, and a capacity wait polls in line: a pushback is neither.
    let script = "
        blocked pushed=s1:10s
        pick s1
        s1 success after 50ms
    ";
    assert_snapshot!(trace(rules(1, json!({"quota_full": "fail_fast"})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked pushed=s1:10s
          t=0s       sleep 10.035s
          t=10.035s  pick (a turn waits at most 290.015s)
        > pick s1
        > s1 success after 50ms
          t=10.085s  return the answer
    ");
    // Beside a source refused by its gate, the first to free is waited for.
    let script = "
        blocked gates=1 pushed=s2:10s
        retry_after 30s
        blocked gates=1 pushed=s2:0.5s
        retry_after 0s
    ";
    assert_snapshot!(trace(rules(2, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > blocked gates=1 pushed=s2:10s
          t=0s       ask the gates' retry moment, all but s2
        > retry_after 30s
          t=0s       sleep 10.035s
          t=10.035s  pick (a turn waits at most 290.015s)
        > blocked gates=1 pushed=s2:0.5s
          t=10.035s  ask the gates' retry moment, all but s2
        > retry_after 0s
          t=10.035s  sleep 0.027s
          t=10.062s  pick (a turn waits at most 289.988s)
    ");
}

#[test]
fn a_retry_after_past_the_stall_budget_leaves_the_call_to_the_other_sources() {
    let script = "
        pick s1
        s1 rate_limited after 50ms retry_after=400s
        pick s2
        s2 success after 50ms
    ";
    assert_snapshot!(trace(rules(2, json!({})), script), @r"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > s1 rate_limited after 50ms retry_after=400s
          t=0.05s    push back s1's account until t=400.05s
          t=0.05s    pick (a turn waits at most 300.05s)
        > pick s2
        > s2 success after 50ms
          t=0.1s     return the answer
    ");
}
