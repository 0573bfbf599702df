//! A stream's commit point (SPEC §13): chunks before it are held back, so a failure before it
//! is retried, re-asked or switched unseen, by the same rules as a whole answer.

use crate::script::{rules, trace, trace_structured, trace_validated};
use insta::assert_snapshot;
use serde_json::json;

#[test]
fn a_stream_commits_at_its_first_chunk_with_content() {
    let script = r#"
        pick s1
        chunk role
        chunk role
        chunk "Hel"
    "#;
    assert_snapshot!(trace(rules(1, json!({})), script), @r#"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > chunk role
          t=0s       read on
        > chunk role
          t=0s       read on
        > chunk "Hel"
          t=0s       commit: 3 chunk(s) to the caller
    "#);
}

#[test]
fn a_stream_that_ends_or_breaks_before_content_is_retried_unseen() {
    let script = "
        pick s1
        chunk role
        stream ends
        pick s2
        stream fails transient
        pick s1
        chunk role
        chunk \"ok\"
    ";
    assert_snapshot!(trace(rules(2, json!({})), script), @r#"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > chunk role
          t=0s       read on
        > stream ends
          t=0s       ended before the commit point: transient empty
          t=0s       spent a retry (1 so far)
          t=0s       sleep 0.101s
          t=0.1s     pick (a turn waits at most 299.95s)
        > pick s2
        > stream fails transient
          t=0.1s     ended before the commit point: transient stream
          t=0.1s     spent a retry (2 so far)
          t=0.1s     sleep 0.04s
          t=0.14s    pick (a turn waits at most 299.91s)
        > pick s1
        > chunk role
          t=0.14s    read on
        > chunk "ok"
          t=0.14s    commit: 2 chunk(s) to the caller
    "#);
}

#[test]
fn a_stream_asked_for_json_that_opens_with_prose_is_reasked_before_the_caller_sees_it() {
    let script = r#"
        pick s1
        chunk role
        chunk "Sure!"
        pick s2
        chunk "{"
    "#;
    assert_snapshot!(trace_structured(rules(2, json!({})), script), @r#"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > chunk role
          t=0s       read on
        > chunk "Sure!"
          t=0s       ended before the commit point: result_invalid not_json
          t=0s       pick (a turn waits at most 300.05s)
        > pick s2
        > chunk "{"
          t=0s       commit: 1 chunk(s) to the caller
    "#);
}

#[test]
fn a_stream_asked_for_json_is_held_until_it_passed_the_check_and_a_truncated_one_is_reasked_unseen() {
    // s1's answer opens like JSON and is cut (its upstream's check ends it result_invalid at its
    // end); s2's passes and goes out whole, at once.
    let script = r#"
        pick s1
        chunk role
        chunk "{answer:"
        chunk "4"
        stream fails result_invalid
        pick s2
        chunk "{answer:"
        chunk "42}"
        stream ends
    "#;
    assert_snapshot!(trace_validated(rules(2, json!({})), script), @r#"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > chunk role
          t=0s       read on
        > chunk "{answer:"
          t=0s       read on
        > chunk "4"
          t=0s       read on
        > stream fails result_invalid
          t=0s       ended before the commit point: result_invalid stream
          t=0s       pick (a turn waits at most 300.05s)
        > pick s2
        > chunk "{answer:"
          t=0s       read on
        > chunk "42}"
          t=0s       read on
        > stream ends
          t=0s       validated: 1 chunk(s) to the caller at once, "{answer:42}"
    "#);
}

#[test]
fn a_held_stream_that_opens_with_prose_ends_at_its_opening_and_one_without_content_is_empty() {
    let script = r#"
        pick s1
        chunk "Sure!{"
        pick s2
        chunk role
        stream ends
    "#;
    assert_snapshot!(trace_validated(rules(2, json!({})), script), @r#"
          t=0s       pick (a turn waits at most 300.05s)
        > pick s1
        > chunk "Sure!{"
          t=0s       ended before the commit point: result_invalid not_json
          t=0s       pick (a turn waits at most 300.05s)
        > pick s2
        > chunk role
          t=0s       read on
        > stream ends
          t=0s       ended before the commit point: transient empty
          t=0s       spent a retry (1 so far)
          t=0s       sleep 0.101s
          t=0.1s     pick (a turn waits at most 299.95s)
    "#);
}
