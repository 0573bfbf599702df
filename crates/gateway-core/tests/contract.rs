//! SPEC §3 contract cases ①–⑫ as they concern the breaker machine itself (the backend contract
//! suite in `tests/` runs the same cases against the memory and Redis gates). Numbers are the
//! seed's: fail_threshold 5, cooldown 60 s, min_calls 10, fail_rate 0.6, window 60 s.

#![allow(clippy::unwrap_used)]

mod common;

use common::{attempt, params, record, secs, seed_breaker};
use gateway_core::breaker::{Cause, CircuitState, Gate, Transition, Verdict, min_retry_after};
use gateway_core::memo::Memo;
use gateway_core::outcome::OutcomeClass::*;
use gateway_core::policy::BreakerConfig;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// Opens a fresh gate through the rate channel at t = 0 (1 success, 9 failures).
fn opened_by_rate(p: &gateway_core::GateParams) -> Gate {
    let mut gate = Gate::new();
    attempt(&mut gate, p, secs(0.0), Success);
    for _ in 0..9 {
        attempt(&mut gate, p, secs(0.0), Transient);
    }
    assert_eq!(gate.state, CircuitState::Open);
    gate
}

#[test]
fn contract_01_low_success_source_opens_at_min_calls() {
    // max_concurrency 16 raises the consecutive threshold to 32: only the rate channel can act.
    let p = params(seed_breaker(), 16);
    let mut gate = Gate::new();
    let pattern = [Success, Transient, Transient, Transient, Transient, Transient, Transient, Transient, Transient];
    for (i, class) in pattern.into_iter().enumerate() {
        attempt(&mut gate, &p, secs(i as f64), class);
        assert_eq!(gate.state, CircuitState::Closed, "opened after {} samples", i + 1);
    }
    let e = gate.try_enter(&p, secs(9.0));
    let reply = gate.record_failure(&p, e.reply.epoch, secs(9.0));
    assert_eq!(gate.samples(), 10);
    assert_eq!(reply.transition, Some(Transition { from: CircuitState::Closed, to: CircuitState::Open, cause: Cause::RateChannel }));
    assert_eq!((reply.epoch, gate.streak), (1, 1));
    assert_eq!(reply.retry_after, MIN);
}

#[test]
fn contract_02_rate_channel_never_opens_under_min_calls() {
    let p = params(seed_breaker(), 16);
    let mut gate = Gate::new();
    for _ in 0..9 {
        attempt(&mut gate, &p, secs(1.0), Transient);
    }
    assert_eq!((gate.state, gate.samples()), (CircuitState::Closed, 9));
    // Once the window has rotated past, old samples no longer count: 9 + 1 is not 10.
    attempt(&mut gate, &p, secs(61.0), Transient);
    assert_eq!((gate.state, gate.samples()), (CircuitState::Closed, 1));
    // A bucket one ahead keeps the previous one: 9 failures at 31 s and 1 at 61 s make 10.
    let mut gate = Gate::new();
    for _ in 0..9 {
        attempt(&mut gate, &p, secs(31.0), Transient);
    }
    attempt(&mut gate, &p, secs(61.0), Transient);
    assert_eq!(gate.state, CircuitState::Open);
}

#[test]
fn contract_02b_the_window_is_two_buckets_that_rotate_on_write() {
    let p = params(BreakerConfig { min_calls: Some(1000), ..seed_breaker() }, 16);
    let mut gate = Gate::new();
    let counts = |g: &Gate| (g.win_id, g.a0, g.f0, g.a1, g.f1);
    for _ in 0..5 {
        attempt(&mut gate, &p, secs(1.0), Transient);
    }
    attempt(&mut gate, &p, secs(29.0), Success);
    assert_eq!(counts(&gate), (0, 6, 5, 0, 0));
    // one bucket ahead: previous := current, current := 0, then the write
    attempt(&mut gate, &p, secs(30.0), Transient);
    assert_eq!(counts(&gate), (1, 1, 1, 6, 5));
    // one more: the oldest bucket falls out
    attempt(&mut gate, &p, secs(60.0), Success);
    assert_eq!(counts(&gate), (2, 1, 0, 1, 1));
    // further ahead: both buckets restart
    attempt(&mut gate, &p, secs(150.0), Transient);
    assert_eq!(counts(&gate), (5, 1, 1, 0, 0));
    // a clock that stepped back keeps writing the newest bucket
    attempt(&mut gate, &p, secs(100.0), Transient);
    assert_eq!(counts(&gate), (5, 2, 2, 0, 0));
    // reads and records that change nothing do not rotate
    gate.try_enter(&p, secs(500.0));
    attempt(&mut gate, &p, secs(500.0), RateLimited);
    assert_eq!(counts(&gate), (5, 2, 2, 0, 0));
}

#[test]
fn contract_03_consecutive_threshold_is_raised_only_by_the_source_concurrency() {
    let isolate = BreakerConfig { min_calls: Some(1000), ..seed_breaker() };
    for (max_concurrency, threshold) in [(0, 5), (1, 5), (2, 5), (3, 6), (16, 32)] {
        let p = params(isolate.clone(), max_concurrency);
        assert_eq!(p.threshold(), threshold, "max_concurrency {max_concurrency}");
        let mut gate = Gate::new();
        for i in 1..threshold {
            attempt(&mut gate, &p, secs(0.0), Transient);
            assert_eq!(gate.state, CircuitState::Closed, "opened after {i} of {threshold}");
        }
        let e = gate.try_enter(&p, secs(0.0));
        let reply = gate.record_failure(&p, e.reply.epoch, secs(0.0));
        assert_eq!(reply.transition.unwrap().cause, Cause::ConsecutiveChannel);
        assert_eq!((gate.streak, reply.retry_after), (0, MIN), "consecutive opens never grow the streak");
    }
    // Through a scope: a concurrency of 100 never raises it, the source's own concurrency does.
    let scope: gateway_core::ScopeConfig = serde_json::from_value(serde_json::json!({
        "breaker": {"fail_threshold": 5, "cooldown_s": 60},
        "concurrency": 100,
        "sources": {"narrow": {"max_concurrency": 1}, "wide": {"max_concurrency": 16}, "open": {}}
    }))
    .unwrap();
    let scope = scope.resolve("chat").unwrap();
    let thresholds: Vec<(&str, u32)> =
        scope.sources.iter().enumerate().map(|(i, s)| (s.name.as_str(), scope.gate_params(i).unwrap().threshold())).collect();
    assert_eq!(thresholds, [("narrow", 5), ("open", 5), ("wide", 32)]);
    // A success resets the consecutive count.
    let p = params(isolate, 1);
    let mut gate = Gate::new();
    for class in [Transient, Transient, Transient, Transient, Success, Transient, Transient, Transient, Transient] {
        attempt(&mut gate, &p, secs(0.0), class);
    }
    assert_eq!((gate.state, gate.failures), (CircuitState::Closed, 4));
}

#[test]
fn contract_04_open_time_doubles_per_streak_is_capped_and_decays() {
    let p = params(seed_breaker(), 16);
    let mut gate = opened_by_rate(&p);
    let mut now = 0.0;
    let mut opens = vec![gate.retry_after(&p, secs(now)).as_secs()];
    for _ in 0..5 {
        now += opens.last().copied().unwrap() as f64;
        assert_eq!(gate.try_enter(&p, secs(now - 0.001)).verdict, Verdict::Denied);
        let probe = gate.try_enter(&p, secs(now));
        assert_eq!(probe.verdict, Verdict::Probe);
        let reply = gate.record_failure(&p, probe.reply.epoch, secs(now));
        assert_eq!(reply.transition.unwrap().cause, Cause::ProbeFailed);
        opens.push(reply.retry_after.as_secs());
    }
    assert_eq!(opens, [60, 120, 240, 300, 300, 300]);
    assert_eq!(gate.streak, 6);
    // The probe that closes keeps the streak; it decays on the first success after 2 × cooldown_eff
    // (2 × 300 s) of stable CLOSED, not on a timer.
    now += 300.0;
    let probe = gate.try_enter(&p, secs(now));
    gate.record_success(&p, probe.reply.epoch, secs(now), true);
    assert_eq!((gate.state, gate.streak, gate.closed_since), (CircuitState::Closed, 6, Some(secs(now))));
    attempt(&mut gate, &p, secs(now + 599.999), Success);
    assert_eq!(gate.streak, 6);
    attempt(&mut gate, &p, secs(now + 600.0), Success);
    assert_eq!(gate.streak, 0);
    // After decay the next open is back to one cooldown.
    let t = now + 700.0;
    for class in [Transient; 10] {
        attempt(&mut gate, &p, secs(t), class);
    }
    assert_eq!((gate.state, gate.streak, gate.retry_after(&p, secs(t))), (CircuitState::Open, 1, MIN));
}

#[test]
fn contract_04c_decay_needs_a_real_success_after_twice_the_current_cooldown_eff() {
    let p = params(seed_breaker(), 16);
    let mut gate = opened_by_rate(&p);
    let probe = gate.try_enter(&p, secs(60.0));
    gate.record_failure(&p, probe.reply.epoch, secs(60.0)); // streak 2: open 120 s
    let probe = gate.try_enter(&p, secs(180.0));
    gate.record_success(&p, probe.reply.epoch, secs(180.0), true);
    assert_eq!((gate.state, gate.streak), (CircuitState::Closed, 2));
    // 2 × cooldown_eff(2) = 240 s. Time alone decays nothing, and neither does a ResultInvalid.
    gate.try_enter(&p, secs(1000.0));
    assert_eq!(gate.streak, 2);
    attempt(&mut gate, &p, secs(419.999), Success);
    assert_eq!(gate.streak, 2);
    attempt(&mut gate, &p, secs(420.0), ResultInvalid);
    assert_eq!(gate.streak, 2, "ResultInvalid resets the consecutive counter only");
    attempt(&mut gate, &p, secs(420.0), Success);
    assert_eq!(gate.streak, 0);
}

#[test]
fn contract_04d_a_consecutive_open_keeps_the_streak_and_the_plain_cooldown() {
    let p = params(seed_breaker(), 1); // threshold 5
    let mut gate = Gate::new();
    gate.force_open(&p, secs(0.0)); // streak 1: open 60 s
    for t in [60.0, 180.0] {
        let probe = gate.try_enter(&p, secs(t));
        assert_eq!(probe.verdict, Verdict::Probe);
        gate.record_failure(&p, probe.reply.epoch, secs(t)); // streak 2 (120 s), then 3 (240 s)
    }
    let probe = gate.try_enter(&p, secs(420.0));
    gate.record_success(&p, probe.reply.epoch, secs(420.0), true);
    assert_eq!(gate.streak, 3);
    assert_eq!(gate.closed_since, Some(secs(420.0)));
    for _ in 0..5 {
        attempt(&mut gate, &p, secs(460.0), Transient); // 5 samples < min_calls: consecutive channel
    }
    assert_eq!((gate.state, gate.streak, gate.retry_after(&p, secs(460.0))), (CircuitState::Open, 3, MIN));
    assert_eq!(gate.closed_since, None, "closed_since is cleared on open");
}

#[test]
fn contract_04b_a_reopen_before_decay_escalates() {
    let p = params(seed_breaker(), 16);
    let mut gate = opened_by_rate(&p);
    let probe = gate.try_enter(&p, secs(60.0));
    gate.record_success(&p, probe.reply.epoch, secs(60.0), true);
    for _ in 0..10 {
        attempt(&mut gate, &p, secs(100.0), Transient);
    }
    assert_eq!((gate.streak, gate.retry_after(&p, secs(100.0))), (2, 2 * MIN));
}

#[test]
fn contract_05_result_invalid_and_request_rejected_never_enter_the_window() {
    let p = params(seed_breaker(), 1);
    let mut gate = Gate::new();
    for _ in 0..4 {
        attempt(&mut gate, &p, secs(0.0), Transient);
    }
    for class in [ResultInvalid, RequestRejected, ResultInvalid, RequestRejected] {
        attempt(&mut gate, &p, secs(0.0), class);
    }
    assert_eq!((gate.a0, gate.f0, gate.failures), (4, 4, 0), "ResultInvalid resets the consecutive count only");
    for _ in 0..50 {
        attempt(&mut gate, &p, secs(1.0), RequestRejected);
        attempt(&mut gate, &p, secs(1.0), ResultInvalid);
    }
    assert_eq!((gate.state, gate.samples()), (CircuitState::Closed, 4));
}

#[test]
fn contract_06_a_burst_of_429_never_opens_a_burst_of_timeouts_opens_and_heals() {
    let p = params(seed_breaker(), 1);
    let mut gate = Gate::new();
    for _ in 0..1000 {
        attempt(&mut gate, &p, secs(0.0), RateLimited);
    }
    assert_eq!((gate.state, gate.samples(), gate.failures), (CircuitState::Closed, 0, 0));
    for _ in 0..5 {
        attempt(&mut gate, &p, secs(1.0), Transient);
    }
    assert_eq!((gate.state, gate.streak, gate.retry_after(&p, secs(1.0))), (CircuitState::Open, 0, MIN));
    let probe = gate.try_enter(&p, secs(61.0));
    assert_eq!(probe.verdict, Verdict::Probe);
    gate.record_success(&p, probe.reply.epoch, secs(61.0), true);
    assert_eq!((gate.state, gate.streak), (CircuitState::Closed, 0));
    // A second burst, a minute later, costs one plain cooldown again.
    for _ in 0..5 {
        attempt(&mut gate, &p, secs(62.0), Transient);
    }
    assert_eq!((gate.state, gate.streak, gate.retry_after(&p, secs(62.0))), (CircuitState::Open, 0, MIN));
    let probe = gate.try_enter(&p, secs(122.0));
    gate.record_success(&p, probe.reply.epoch, secs(122.0), true);
    assert_eq!((gate.state, gate.streak), (CircuitState::Closed, 0));
}

#[test]
fn contract_07_a_rate_channel_open_tops_failures_to_the_threshold() {
    let p = params(seed_breaker(), 16);
    let gate = opened_by_rate(&p);
    assert_eq!(gate.failures, 32);
    assert_eq!(gate.failures, p.threshold());
}

#[test]
fn contract_08_every_retry_after_exit() {
    let p = params(seed_breaker(), 16);
    let mut gate = Gate::new();
    // allowed ⇒ 0
    let allowed = gate.try_enter(&p, secs(0.0));
    assert_eq!((allowed.verdict, allowed.reply.retry_after), (Verdict::Allowed, Duration::ZERO));
    let stale_epoch = allowed.reply.epoch;
    let mut gate = opened_by_rate(&p);
    // OPEN ⇒ the time until open_until
    let denied = gate.try_enter(&p, secs(15.5));
    assert_eq!((denied.verdict, denied.reply.retry_after), (Verdict::Denied, Duration::from_millis(44_500)));
    // fenced record on an OPEN gate ⇒ still the time until open_until
    let fenced = gate.record_failure(&p, stale_epoch, secs(20.0));
    assert!(fenced.fenced);
    assert_eq!(fenced.retry_after, Duration::from_secs(40));
    // probe granted ⇒ 0, and the lease length never leaks into it
    let probe = gate.try_enter(&p, secs(60.0));
    assert_eq!((probe.verdict, probe.reply.retry_after), (Verdict::Probe, Duration::ZERO));
    // HALF_OPEN, lease live ⇒ denied with 0
    let busy = gate.try_enter(&p, secs(61.0));
    assert_eq!((busy.verdict, busy.reply.state, busy.reply.retry_after), (Verdict::Denied, CircuitState::HalfOpen, Duration::ZERO));
    // fenced update on a HALF_OPEN gate ⇒ 0
    assert_eq!(gate.record_success(&p, stale_epoch, secs(61.0), true).retry_after, Duration::ZERO);
    // retry_after(): HALF_OPEN ⇒ 0, OPEN ⇒ remaining, CLOSED ⇒ 0, min over gates
    assert_eq!(gate.retry_after(&p, secs(61.0)), Duration::ZERO);
    let other = opened_by_rate(&p);
    assert_eq!(other.retry_after(&p, secs(59.0)), Duration::from_secs(1));
    assert_eq!(other.retry_after(&p, secs(600.0)), Duration::ZERO);
    assert_eq!(min_retry_after([(&other, &p), (&gate, &p)], secs(10.0)), Duration::ZERO);
    assert_eq!(min_retry_after([(&other, &p), (&other, &p)], secs(10.0)), Duration::from_secs(50));
    assert_eq!(min_retry_after([], secs(10.0)), Duration::ZERO);
    assert_eq!(Gate::new().retry_after(&p, secs(1.0)), Duration::ZERO);
    // never above max_cooldown, even on a clock that stepped back
    assert_eq!(other.retry_after(&p, secs(0.0)), MIN);
    let mut capped = opened_by_rate(&p);
    capped.open_until = secs(10_000.0);
    assert_eq!(capped.try_enter(&p, secs(0.0)).reply.retry_after, Duration::from_secs(300));
}

#[test]
fn contract_09_a_recovered_source_is_never_kept_out_by_the_memo() {
    let p = params(seed_breaker(), 16);
    let mut gate = opened_by_rate(&p);
    let mut memo = Memo::new(1);
    let denied = gate.try_enter(&p, secs(10.0));
    memo.note_denial(0, secs(10.0), denied.reply.retry_after);
    assert!(memo.active(0, secs(59.999)));
    // The memo ends exactly when the gate becomes probeable.
    assert!(!memo.active(0, secs(60.0)));
    let probe = gate.try_enter(&p, secs(60.0));
    assert_eq!(probe.verdict, Verdict::Probe);
    // A HALF_OPEN denial carries 0 and memoes nothing.
    let busy = gate.try_enter(&p, secs(60.5));
    memo.note_denial(0, secs(60.5), busy.reply.retry_after);
    assert!(!memo.active(0, secs(60.5)));
    gate.record_success(&p, probe.reply.epoch, secs(61.0), true);
    assert_eq!(gate.state, CircuitState::Closed);
    assert!(!memo.active(0, secs(61.0)));
}

#[test]
fn contract_10_a_warm_healthy_source_survives_a_short_run_a_dying_one_opens() {
    let p = params(seed_breaker(), 1); // threshold 5
    let mut healthy = Gate::new();
    for _ in 0..20 {
        attempt(&mut healthy, &p, secs(0.0), Success);
    }
    for _ in 0..10 {
        attempt(&mut healthy, &p, secs(0.0), Transient);
    }
    assert_eq!(healthy.state, CircuitState::Closed, "10 failures in 30 samples is noise on a proven source");
    assert!(healthy.failures >= p.threshold());
    // The same source dying: the rate channel opens once failures reach 60 % of the window.
    let mut dying = healthy;
    let mut failures = 10;
    while dying.state == CircuitState::Closed {
        attempt(&mut dying, &p, secs(0.0), Transient);
        failures += 1;
    }
    assert_eq!(failures, 30, "30 of 50 samples = 0.6");
    assert_eq!(dying.streak, 1, "opened by the rate channel");
    // Cold, with too few samples for evidence, the consecutive channel still acts.
    let mut cold = Gate::new();
    for _ in 0..5 {
        attempt(&mut cold, &p, secs(0.0), Transient);
    }
    assert_eq!((cold.state, cold.streak), (CircuitState::Open, 0));
}

#[test]
fn contract_11_concurrent_try_enter_on_an_expired_open_gate_grants_one_probe() {
    let p = params(seed_breaker(), 16);
    let mut gate = opened_by_rate(&p);
    let verdicts: Vec<Verdict> = (0..10).map(|_| gate.try_enter(&p, secs(60.0)).verdict).collect();
    assert_eq!(verdicts.iter().filter(|v| **v == Verdict::Probe).count(), 1);
    assert_eq!(verdicts[0], Verdict::Probe);
    // The lease is reissued lazily once it expires (probe_ttl = max(2 × 30, 60, 35) = 60 s) ...
    assert_eq!(p.probe_ttl_ms(), 60_000);
    assert_eq!(gate.try_enter(&p, secs(119.999)).verdict, Verdict::Denied);
    assert_eq!(gate.try_enter(&p, secs(120.0)).verdict, Verdict::Probe);
    // ... and at once after release_probe.
    let epoch = gate.epoch;
    gate.release_probe(&p, epoch, secs(121.0));
    assert_eq!(gate.try_enter(&p, secs(121.0)).verdict, Verdict::Probe);
    assert_eq!(gate.try_enter(&p, secs(121.0)).verdict, Verdict::Denied);
}

#[test]
fn contract_11b_the_probe_lease_outlives_the_slowest_attempt_not_the_cooldown() {
    // cooldown 10 s, timeouts 30 s: probe_ttl = max(2 × 30, 10, 30 + 5) = 60 s.
    let p = params(BreakerConfig { cooldown_s: Some(10.0), ..seed_breaker() }, 16);
    assert_eq!(p.probe_ttl_ms(), 60_000);
    let mut gate = Gate::new();
    gate.force_open(&p, secs(0.0));
    assert_eq!(gate.try_enter(&p, secs(10.0)).verdict, Verdict::Probe);
    assert_eq!(gate.try_enter(&p, secs(69.999)).verdict, Verdict::Denied);
    assert_eq!(gate.try_enter(&p, secs(70.0)).verdict, Verdict::Probe);
}

#[test]
fn contract_12_stale_epoch_records_change_nothing() {
    let p = params(seed_breaker(), 1);
    let mut gate = Gate::new();
    let old = gate.try_enter(&p, secs(0.0)).reply.epoch;
    gate.force_open(&p, secs(0.0));
    let probe = gate.try_enter(&p, secs(60.0));
    assert_eq!(probe.reply.epoch, old + 1);
    let before = gate.clone();
    for reply in
        [gate.record_failure(&p, old, secs(61.0)), gate.record_success(&p, old, secs(61.0), true), gate.release_probe(&p, old, secs(61.0))]
    {
        assert!(reply.fenced && reply.transition.is_none());
    }
    assert_eq!(gate, before);
    // The current epoch is not fenced.
    assert!(!gate.record_success(&p, probe.reply.epoch, secs(61.0), true).fenced);
    assert_eq!(gate.state, CircuitState::Closed);
    // Reopened and closed again: callers of both earlier epochs are fenced on the CLOSED gate.
    gate.force_open(&p, secs(62.0));
    let probe = gate.try_enter(&p, secs(200.0));
    gate.record_success(&p, probe.reply.epoch, secs(200.0), true);
    assert_eq!((gate.state, gate.epoch), (CircuitState::Closed, 2));
    let before = gate.clone();
    for stale in [0, 1, 3] {
        assert!(gate.record_failure(&p, stale, secs(201.0)).fenced);
        assert!(gate.record_success(&p, stale, secs(201.0), true).fenced);
    }
    assert_eq!(gate, before);
}

#[test]
fn force_open_escalates_per_probe_and_leaves_an_open_gate_alone() {
    let p = params(seed_breaker(), 16);
    let mut gate = Gate::new();
    let mut opens = Vec::new();
    let mut now = 0.0;
    let first = gate.force_open(&p, secs(now));
    assert_eq!(first.transition.unwrap().cause, Cause::ForcedOpen);
    // Calls admitted before the open that also come back 401 do not push the streak.
    let again = gate.force_open(&p, secs(now + 1.0));
    assert_eq!((again.transition, gate.streak, gate.epoch), (None, 1, 1));
    opens.push(first.retry_after.as_secs());
    for _ in 0..4 {
        now += *opens.last().unwrap() as f64;
        let probe = gate.try_enter(&p, secs(now));
        assert_eq!(probe.verdict, Verdict::Probe);
        opens.push(record(&mut gate, &p, probe.reply.epoch, secs(now), SourceDead).unwrap().retry_after.as_secs());
    }
    assert_eq!(opens, [60, 120, 240, 300, 300], "a revoked key is re-probed after 60, 120, 240, 300 s");
}

#[test]
fn half_open_needs_n_sequential_probe_successes() {
    let p = params(BreakerConfig { half_open_successes: Some(3), ..seed_breaker() }, 16);
    let mut gate = opened_by_rate(&p);
    for i in 1..=3 {
        let probe = gate.try_enter(&p, secs(60.0));
        assert_eq!(probe.verdict, Verdict::Probe, "probe {i}");
        assert_eq!(gate.try_enter(&p, secs(60.0)).verdict, Verdict::Denied, "one probe in flight at a time");
        // ResultInvalid proves the provider is up: it counts as a probe success.
        let class = if i == 2 { ResultInvalid } else { Success };
        record(&mut gate, &p, probe.reply.epoch, secs(60.0), class);
        assert_eq!(gate.probe_ok, i);
    }
    assert_eq!(gate.state, CircuitState::Closed);
}

#[test]
fn a_probe_ending_in_pushback_or_a_bad_payload_hands_the_lease_back() {
    let p = params(seed_breaker(), 16);
    for class in [RateLimited, RequestRejected] {
        let mut gate = opened_by_rate(&p);
        assert_eq!(attempt(&mut gate, &p, secs(60.0), class).verdict, Verdict::Probe);
        assert_eq!((gate.state, gate.probe_until), (CircuitState::HalfOpen, None));
        assert_eq!(gate.try_enter(&p, secs(60.0)).verdict, Verdict::Probe, "{class}: next caller probes at once");
    }
}

#[test]
fn records_on_an_open_gate_change_nothing() {
    let p = params(seed_breaker(), 16);
    let mut gate = opened_by_rate(&p);
    let before = gate.clone();
    let epoch = gate.epoch;
    gate.record_failure(&p, epoch, secs(1.0));
    gate.record_success(&p, epoch, secs(1.0), true);
    gate.release_probe(&p, epoch, secs(1.0));
    assert_eq!(gate, before);
}

#[test]
fn baseline_knobs_reproduce_the_old_breaker() {
    let old = BreakerConfig { rate_channel: Some(false), escalate_cooldown: Some(false), ..seed_breaker() };
    let p = params(old, 1);
    let mut gate = Gate::new();
    for _ in 0..4 {
        attempt(&mut gate, &p, secs(0.0), Success);
        attempt(&mut gate, &p, secs(0.0), Transient);
    }
    assert_eq!(gate.state, CircuitState::Closed, "no rate channel: 50 % failures never open");
    for _ in 0..5 {
        attempt(&mut gate, &p, secs(0.0), Transient);
    }
    assert_eq!(gate.state, CircuitState::Open);
    let mut now = 0.0;
    for _ in 0..3 {
        now += 60.0;
        let probe = gate.try_enter(&p, secs(now));
        assert_eq!(gate.record_failure(&p, probe.reply.epoch, secs(now)).retry_after, MIN, "fixed cooldown");
    }
}
