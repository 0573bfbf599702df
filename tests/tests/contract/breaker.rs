//! SPEC §3 contract cases ①–⑫ and every retry_after exit, on the `BreakerGate` port, with time
//! travel through the injected clock. The same bodies run on every backend.

#![allow(clippy::unwrap_used)]

use crate::support::{Backend, params, seed_breaker};
use gateway_core::breaker::{Cause, CircuitState, Transition, Verdict};
use gateway_core::memo::Memo;
use gateway_core::outcome::OutcomeClass::*;
use gateway_core::policy::BreakerConfig;
use gateway_core::time::Clock;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// Opens `key` through the rate channel at t = 0 (1 success, 9 failures; threshold 32).
async fn open_by_rate(b: &Backend, key: &gateway_core::GateKey, p: &gateway_core::GateParams) {
    b.at(0.0);
    b.attempt(key, p, Success).await;
    b.attempts(key, p, Transient, 9).await;
    assert_eq!(b.snapshot(key).await.state, CircuitState::Open);
}

pub async fn contract_01_low_success_source_opens_at_min_calls(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    b.at(0.0);
    b.attempt(&key, &p, Success).await;
    for i in 1..9 {
        b.at(f64::from(i));
        b.attempt(&key, &p, Transient).await;
        assert_eq!(b.snapshot(&key).await.state, CircuitState::Closed, "opened after {} samples", i + 1);
    }
    b.at(9.0);
    let entry = b.gates.try_enter(&key, &p).await.unwrap();
    let reply = b.gates.record_failure(&key, &p, entry.reply.epoch).await.unwrap();
    assert_eq!(reply.transition, Some(Transition { from: CircuitState::Closed, to: CircuitState::Open, cause: Cause::RateChannel }));
    assert_eq!((reply.epoch, reply.retry_after), (1, MIN));
    let gate = b.snapshot(&key).await;
    assert_eq!((gate.samples(), gate.streak), (10, 1));
}

pub async fn contract_02_rate_channel_never_opens_under_min_calls(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    b.at(1.0);
    b.attempts(&key, &p, Transient, 9).await;
    assert_eq!(b.snapshot(&key).await.state, CircuitState::Closed);
    b.at(61.0);
    b.attempt(&key, &p, Transient).await;
    let gate = b.snapshot(&key).await;
    assert_eq!((gate.state, gate.samples()), (CircuitState::Closed, 1));
}

pub async fn contract_02b_the_window_is_two_buckets_that_rotate_on_write(b: Backend) {
    let (key, p) = (b.key("s"), params(BreakerConfig { min_calls: Some(1000), ..seed_breaker() }, 16));
    // bucket ids are absolute: the suite's clock starts at 1 000 000 s = bucket 33 333
    let base = 1_000_000 / 30;
    let counts = |g: gateway_core::Gate| (g.win_id - base, g.a0, g.f0, g.a1, g.f1);
    b.at(1.0);
    b.attempts(&key, &p, Transient, 5).await;
    b.at(19.0);
    b.attempt(&key, &p, Success).await;
    assert_eq!(counts(b.snapshot(&key).await), (0, 6, 5, 0, 0));
    b.at(20.0); // 1 000 020 s: the next bucket
    b.attempt(&key, &p, Transient).await;
    assert_eq!(counts(b.snapshot(&key).await), (1, 1, 1, 6, 5));
    b.at(50.0);
    b.attempt(&key, &p, Success).await;
    assert_eq!(counts(b.snapshot(&key).await), (2, 1, 0, 1, 1));
    b.at(140.0);
    b.attempt(&key, &p, Transient).await;
    assert_eq!(counts(b.snapshot(&key).await), (5, 1, 1, 0, 0));
    b.at(100.0); // a clock that stepped back keeps writing the newest bucket
    b.attempt(&key, &p, Transient).await;
    assert_eq!(counts(b.snapshot(&key).await), (5, 2, 2, 0, 0));
    b.at(500.0); // reads and outcomes that tell the gate nothing do not rotate
    b.attempt(&key, &p, RateLimited).await;
    assert_eq!(counts(b.snapshot(&key).await), (5, 2, 2, 0, 0));
}

pub async fn contract_03_consecutive_threshold_is_raised_only_by_the_source_concurrency(b: Backend) {
    let isolate = BreakerConfig { min_calls: Some(1000), ..seed_breaker() };
    for (max_concurrency, threshold) in [(1, 5), (3, 6), (16, 32)] {
        let (key, p) = (b.key(&format!("s{max_concurrency}")), params(isolate.clone(), max_concurrency));
        assert_eq!(p.threshold(), threshold);
        b.at(0.0);
        b.attempts(&key, &p, Transient, threshold as usize - 1).await;
        assert_eq!(b.snapshot(&key).await.state, CircuitState::Closed);
        let entry = b.gates.try_enter(&key, &p).await.unwrap();
        let reply = b.gates.record_failure(&key, &p, entry.reply.epoch).await.unwrap();
        assert_eq!(reply.transition.unwrap().cause, Cause::ConsecutiveChannel);
        assert_eq!((b.snapshot(&key).await.streak, reply.retry_after), (0, MIN));
    }
}

pub async fn contract_04_open_time_doubles_per_streak_is_capped_and_decays(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    open_by_rate(&b, &key, &p).await;
    let mut now = 0.0;
    let mut opens = vec![60];
    for _ in 0..5 {
        now += f64::from(*opens.last().unwrap());
        b.at(now - 0.001);
        assert_eq!(b.gates.try_enter(&key, &p).await.unwrap().verdict, Verdict::Denied);
        b.at(now);
        let probe = b.gates.try_enter(&key, &p).await.unwrap();
        assert_eq!(probe.verdict, Verdict::Probe);
        let reply = b.gates.record_failure(&key, &p, probe.reply.epoch).await.unwrap();
        opens.push(reply.retry_after.as_secs() as u32);
    }
    assert_eq!(opens, [60, 120, 240, 300, 300, 300]);
    now += 300.0;
    b.at(now);
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    b.gates.record_success(&key, &p, probe.reply.epoch, true).await.unwrap();
    assert_eq!(b.snapshot(&key).await.streak, 6);
    b.at(now + 599.999);
    b.attempt(&key, &p, Success).await;
    assert_eq!(b.snapshot(&key).await.streak, 6);
    b.at(now + 600.0);
    b.attempt(&key, &p, Success).await;
    assert_eq!(b.snapshot(&key).await.streak, 0);
}

pub async fn contract_04b_decay_needs_a_real_success_after_twice_the_current_cooldown_eff(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    open_by_rate(&b, &key, &p).await;
    b.at(60.0);
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    b.gates.record_failure(&key, &p, probe.reply.epoch).await.unwrap(); // streak 2: 120 s
    b.at(180.0);
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    b.gates.record_success(&key, &p, probe.reply.epoch, true).await.unwrap();
    b.at(1000.0);
    b.gates.try_enter(&key, &p).await.unwrap();
    assert_eq!(b.snapshot(&key).await.streak, 2, "time alone decays nothing");
    b.at(419.999);
    b.attempt(&key, &p, Success).await;
    b.at(420.0);
    b.attempt(&key, &p, ResultInvalid).await;
    assert_eq!(b.snapshot(&key).await.streak, 2, "neither does a ResultInvalid");
    b.attempt(&key, &p, Success).await;
    assert_eq!(b.snapshot(&key).await.streak, 0);
}

pub async fn contract_04c_a_consecutive_open_keeps_the_streak_and_the_plain_cooldown(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 1));
    b.at(0.0);
    b.gates.force_open(&key, &p).await.unwrap();
    for t in [60.0, 180.0] {
        b.at(t);
        let probe = b.gates.try_enter(&key, &p).await.unwrap();
        b.gates.record_failure(&key, &p, probe.reply.epoch).await.unwrap();
    }
    b.at(420.0);
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    b.gates.record_success(&key, &p, probe.reply.epoch, true).await.unwrap();
    b.at(460.0);
    b.attempts(&key, &p, Transient, 5).await;
    let gate = b.snapshot(&key).await;
    assert_eq!((gate.state, gate.streak, gate.closed_since), (CircuitState::Open, 3, None));
    assert_eq!(b.gates.try_enter(&key, &p).await.unwrap().reply.retry_after, MIN);
}

pub async fn contract_05_result_invalid_and_request_rejected_never_enter_the_window(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 1));
    b.at(0.0);
    b.attempts(&key, &p, Transient, 4).await;
    for class in [ResultInvalid, RequestRejected, ResultInvalid, RequestRejected] {
        b.attempt(&key, &p, class).await;
    }
    let gate = b.snapshot(&key).await;
    assert_eq!((gate.a0, gate.f0, gate.failures), (4, 4, 0));
    for _ in 0..20 {
        b.attempt(&key, &p, RequestRejected).await;
        b.attempt(&key, &p, ResultInvalid).await;
    }
    let gate = b.snapshot(&key).await;
    assert_eq!((gate.state, gate.samples()), (CircuitState::Closed, 4));
}

pub async fn contract_06_a_burst_of_429_never_opens_a_burst_of_timeouts_opens_and_heals(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 1));
    b.at(0.0);
    b.attempts(&key, &p, RateLimited, 200).await;
    let gate = b.snapshot(&key).await;
    assert_eq!((gate.state, gate.samples(), gate.failures), (CircuitState::Closed, 0, 0));
    for round in 0..2 {
        let t = f64::from(round) * 100.0 + 1.0;
        b.at(t);
        b.attempts(&key, &p, Transient, 5).await;
        let gate = b.snapshot(&key).await;
        assert_eq!((gate.state, gate.streak), (CircuitState::Open, 0));
        b.at(t + 60.0);
        let probe = b.gates.try_enter(&key, &p).await.unwrap();
        assert_eq!(probe.verdict, Verdict::Probe);
        b.gates.record_success(&key, &p, probe.reply.epoch, true).await.unwrap();
        let gate = b.snapshot(&key).await;
        assert_eq!((gate.state, gate.streak), (CircuitState::Closed, 0));
    }
}

pub async fn contract_07_a_rate_channel_open_tops_failures_to_the_threshold(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    open_by_rate(&b, &key, &p).await;
    assert_eq!(b.snapshot(&key).await.failures, 32);
}

pub async fn contract_08_every_retry_after_exit(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    b.at(0.0);
    let allowed = b.gates.try_enter(&key, &p).await.unwrap();
    assert_eq!((allowed.verdict, allowed.reply.retry_after), (Verdict::Allowed, Duration::ZERO));
    open_by_rate(&b, &key, &p).await;
    b.at(15.5);
    let denied = b.gates.try_enter(&key, &p).await.unwrap();
    assert_eq!((denied.verdict, denied.reply.retry_after), (Verdict::Denied, Duration::from_millis(44_500)));
    b.at(20.0);
    let fenced = b.gates.record_failure(&key, &p, allowed.reply.epoch).await.unwrap();
    assert!(fenced.fenced);
    assert_eq!(fenced.retry_after, Duration::from_secs(40));
    b.at(60.0);
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    assert_eq!((probe.verdict, probe.reply.retry_after), (Verdict::Probe, Duration::ZERO));
    b.at(61.0);
    let busy = b.gates.try_enter(&key, &p).await.unwrap();
    assert_eq!((busy.verdict, busy.reply.state, busy.reply.retry_after), (Verdict::Denied, CircuitState::HalfOpen, Duration::ZERO));
    assert_eq!(b.gates.record_success(&key, &p, allowed.reply.epoch, true).await.unwrap().retry_after, Duration::ZERO);
    // retry_after() over gates: HALF_OPEN 0, OPEN the remaining time, CLOSED 0, the minimum
    let other = b.key("other");
    open_by_rate(&b, &other, &p).await;
    let fresh = b.key("fresh");
    b.at(10.0);
    let all = |keys: &[&gateway_core::GateKey]| keys.iter().map(|k| ((*k).clone(), p.clone())).collect::<Vec<_>>();
    assert_eq!(b.gates.retry_after(&all(&[&other])).await.unwrap(), Duration::from_secs(50));
    assert_eq!(b.gates.retry_after(&all(&[&other, &key])).await.unwrap(), Duration::ZERO);
    assert_eq!(b.gates.retry_after(&all(&[&other, &fresh])).await.unwrap(), Duration::ZERO);
    assert_eq!(b.gates.retry_after(&[]).await.unwrap(), Duration::ZERO);
    b.at(600.0);
    assert_eq!(b.gates.retry_after(&all(&[&other])).await.unwrap(), Duration::ZERO);
    // never above max_cooldown, even on a clock that stepped back far
    b.clock.set(gateway_core::Timestamp::from_secs(1));
    assert_eq!(b.gates.retry_after(&all(&[&other])).await.unwrap(), Duration::from_secs(300));
    assert_eq!(b.gates.try_enter(&other, &p).await.unwrap().reply.retry_after, Duration::from_secs(300));
}

pub async fn contract_09_a_recovered_source_is_never_kept_out_by_the_memo(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    open_by_rate(&b, &key, &p).await;
    let mut memo = Memo::new(1);
    b.at(10.0);
    let denied = b.gates.try_enter(&key, &p).await.unwrap();
    memo.note_denial(0, b.clock.now(), denied.reply.retry_after);
    b.at(60.0);
    assert!(!memo.active(0, b.clock.now()), "the memo ends when the gate becomes probeable");
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    assert_eq!(probe.verdict, Verdict::Probe);
    b.at(60.5);
    let busy = b.gates.try_enter(&key, &p).await.unwrap();
    memo.note_denial(0, b.clock.now(), busy.reply.retry_after);
    assert!(!memo.active(0, b.clock.now()), "a HALF_OPEN denial memoes nothing");
    b.at(61.0);
    b.gates.record_success(&key, &p, probe.reply.epoch, true).await.unwrap();
    assert_eq!(b.snapshot(&key).await.state, CircuitState::Closed);
    assert!(!memo.active(0, b.clock.now()));
}

pub async fn contract_10_a_warm_healthy_source_survives_a_short_run_a_dying_one_opens(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 1));
    b.at(0.0);
    b.attempts(&key, &p, Success, 20).await;
    b.attempts(&key, &p, Transient, 10).await;
    assert_eq!(b.snapshot(&key).await.state, CircuitState::Closed);
    let mut failures = 10;
    while b.snapshot(&key).await.state == CircuitState::Closed {
        b.attempt(&key, &p, Transient).await;
        failures += 1;
    }
    assert_eq!((failures, b.snapshot(&key).await.streak), (30, 1));
}

pub async fn contract_11_concurrent_try_enter_on_an_expired_open_gate_grants_one_probe(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    open_by_rate(&b, &key, &p).await;
    b.at(60.0);
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (gates, key, p) = (b.gates.clone(), key.clone(), p.clone());
            tokio::spawn(async move { gates.try_enter(&key, &p).await.unwrap().verdict })
        })
        .collect();
    let mut probes = 0;
    for task in tasks {
        probes += usize::from(task.await.unwrap() == Verdict::Probe);
    }
    assert_eq!(probes, 1, "exactly one of 32 concurrent callers gets the probe");
    b.at(119.999);
    assert_eq!(b.gates.try_enter(&key, &p).await.unwrap().verdict, Verdict::Denied);
    b.at(120.0);
    let reissued = b.gates.try_enter(&key, &p).await.unwrap();
    assert_eq!(reissued.verdict, Verdict::Probe, "lazy reissue after probe_ttl");
    b.gates.release_probe(&key, &p, reissued.reply.epoch).await.unwrap();
    assert_eq!(b.gates.try_enter(&key, &p).await.unwrap().verdict, Verdict::Probe, "at once after release_probe");
}

pub async fn contract_11b_two_processes_see_one_gate(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    let other = b.second_gates().await;
    open_by_rate(&b, &key, &p).await;
    b.at(30.0);
    let seen = other.try_enter(&key, &p).await.unwrap();
    assert_eq!((seen.verdict, seen.reply.retry_after), (Verdict::Denied, Duration::from_secs(30)));
    b.at(60.0);
    let probe = other.try_enter(&key, &p).await.unwrap();
    assert_eq!(probe.verdict, Verdict::Probe);
    assert_eq!(b.gates.try_enter(&key, &p).await.unwrap().verdict, Verdict::Denied);
    other.record_success(&key, &p, probe.reply.epoch, true).await.unwrap();
    assert_eq!(b.gates.try_enter(&key, &p).await.unwrap().verdict, Verdict::Allowed);
}

pub async fn contract_12_stale_epoch_records_change_nothing(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 1));
    b.at(0.0);
    let old = b.gates.try_enter(&key, &p).await.unwrap().reply.epoch;
    b.gates.force_open(&key, &p).await.unwrap();
    b.at(60.0);
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    let before = b.snapshot(&key).await;
    b.at(61.0);
    for reply in [
        b.gates.record_failure(&key, &p, old).await.unwrap(),
        b.gates.record_success(&key, &p, old, true).await.unwrap(),
        b.gates.release_probe(&key, &p, old).await.unwrap(),
    ] {
        assert!(reply.fenced && reply.transition.is_none());
    }
    assert_eq!(b.snapshot(&key).await, before);
    b.gates.record_success(&key, &p, probe.reply.epoch, true).await.unwrap();
    b.gates.force_open(&key, &p).await.unwrap();
    b.at(200.0);
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    b.gates.record_success(&key, &p, probe.reply.epoch, true).await.unwrap();
    let before = b.snapshot(&key).await;
    assert_eq!((before.state, before.epoch), (CircuitState::Closed, 2));
    for stale in [0, 1, 3] {
        assert!(b.gates.record_failure(&key, &p, stale).await.unwrap().fenced);
        assert!(b.gates.record_success(&key, &p, stale, true).await.unwrap().fenced);
    }
    assert_eq!(b.snapshot(&key).await, before);
}

pub async fn force_open_escalates_per_probe_and_leaves_an_open_gate_alone(b: Backend) {
    let (key, p) = (b.key("s"), params(seed_breaker(), 16));
    b.at(0.0);
    let first = b.gates.force_open(&key, &p).await.unwrap();
    assert_eq!(first.transition.unwrap().cause, Cause::ForcedOpen);
    b.at(1.0);
    assert_eq!(b.gates.force_open(&key, &p).await.unwrap().transition, None);
    let mut opens = vec![first.retry_after.as_secs()];
    let mut now = 0.0;
    for _ in 0..4 {
        now += *opens.last().unwrap() as f64;
        b.at(now);
        let probe = b.gates.try_enter(&key, &p).await.unwrap();
        assert_eq!(probe.verdict, Verdict::Probe);
        opens.push(b.gates.force_open(&key, &p).await.unwrap().retry_after.as_secs());
    }
    assert_eq!(opens, [60, 120, 240, 300, 300]);
}

pub async fn half_open_needs_n_sequential_probe_successes(b: Backend) {
    let (key, p) = (b.key("s"), params(BreakerConfig { half_open_successes: Some(3), ..seed_breaker() }, 16));
    open_by_rate(&b, &key, &p).await;
    b.at(60.0);
    for i in 1..=3 {
        let probe = b.gates.try_enter(&key, &p).await.unwrap();
        assert_eq!(probe.verdict, Verdict::Probe, "probe {i}");
        assert_eq!(b.gates.try_enter(&key, &p).await.unwrap().verdict, Verdict::Denied);
        b.record(&key, &p, probe, if i == 2 { ResultInvalid } else { Success }).await;
        assert_eq!(b.snapshot(&key).await.probe_ok, i);
    }
    assert_eq!(b.snapshot(&key).await.state, CircuitState::Closed);
}

pub async fn a_probe_ending_in_pushback_or_a_bad_payload_hands_the_lease_back(b: Backend) {
    let p = params(seed_breaker(), 16);
    for class in [RateLimited, RequestRejected] {
        let key = b.key(class.as_str());
        open_by_rate(&b, &key, &p).await;
        b.at(60.0);
        assert_eq!(b.attempt(&key, &p, class).await.verdict, Verdict::Probe);
        let gate = b.snapshot(&key).await;
        assert_eq!((gate.state, gate.probe_until), (CircuitState::HalfOpen, None));
        assert_eq!(b.gates.try_enter(&key, &p).await.unwrap().verdict, Verdict::Probe);
    }
}

pub async fn baseline_knobs_reproduce_the_old_breaker(b: Backend) {
    let old = BreakerConfig { rate_channel: Some(false), escalate_cooldown: Some(false), ..seed_breaker() };
    let (key, p) = (b.key("s"), params(old, 1));
    b.at(0.0);
    for _ in 0..4 {
        b.attempt(&key, &p, Success).await;
        b.attempt(&key, &p, Transient).await;
    }
    assert_eq!(b.snapshot(&key).await.state, CircuitState::Closed);
    b.attempts(&key, &p, Transient, 5).await;
    for t in [60.0, 120.0, 180.0] {
        b.at(t);
        let probe = b.gates.try_enter(&key, &p).await.unwrap();
        assert_eq!(b.gates.record_failure(&key, &p, probe.reply.epoch).await.unwrap().retry_after, MIN);
    }
}

/// A slow-call breaker: attempts over 10 s are slow, the gate opens at a 50 % slow rate.
fn slow_breaker() -> BreakerConfig {
    BreakerConfig { slow_call_s: Some(10.0), slow_rate: Some(0.5), ..seed_breaker() }
}

async fn slow_success(b: &Backend, key: &gateway_core::GateKey, p: &gateway_core::GateParams) -> gateway_core::breaker::Reply {
    let entry = b.gates.try_enter(key, p).await.unwrap();
    b.gates.record_slow_success(key, p, entry.reply.epoch).await.unwrap()
}

pub async fn slow_channel_opens_at_the_slow_rate_with_min_calls(b: Backend) {
    let (key, p) = (b.key("s"), params(slow_breaker(), 16));
    b.at(0.0);
    b.attempts(&key, &p, Success, 5).await;
    for i in 0..4 {
        assert!(slow_success(&b, &key, &p).await.transition.is_none(), "slow call {i}: under min_calls");
    }
    let reply = slow_success(&b, &key, &p).await;
    assert_eq!(reply.transition, Some(Transition { from: CircuitState::Closed, to: CircuitState::Open, cause: Cause::SlowChannel }));
    assert_eq!((reply.epoch, reply.retry_after), (1, MIN));
    let gate = b.snapshot(&key).await;
    assert_eq!((gate.samples(), gate.s0, gate.streak, gate.failures), (10, 5, 1, 0));
}

pub async fn slow_calls_rotate_with_the_window_and_count_nothing_without_the_channel(b: Backend) {
    let (key, p) = (b.key("s"), params(BreakerConfig { min_calls: Some(1000), ..slow_breaker() }, 16));
    b.at(1.0);
    for _ in 0..3 {
        slow_success(&b, &key, &p).await;
    }
    b.at(31.0);
    slow_success(&b, &key, &p).await;
    let gate = b.snapshot(&key).await;
    assert_eq!((gate.a0, gate.s0, gate.a1, gate.s1), (1, 1, 3, 3), "the previous bucket keeps its slow calls");
    b.at(95.0);
    slow_success(&b, &key, &p).await;
    let gate = b.snapshot(&key).await;
    assert_eq!((gate.s0, gate.s1), (1, 0), "two buckets later both were cleared");
    // without slow_call_s a slow success is a plain real success
    let (plain, q) = (b.key("plain"), params(seed_breaker(), 16));
    for _ in 0..20 {
        assert!(slow_success(&b, &plain, &q).await.transition.is_none());
    }
    let gate = b.snapshot(&plain).await;
    assert_eq!((gate.state, gate.samples(), gate.s0), (CircuitState::Closed, 20, 0));
}

pub async fn a_slow_probe_success_counts_as_a_probe_success(b: Backend) {
    let (key, p) = (b.key("s"), params(slow_breaker(), 16));
    open_by_rate(&b, &key, &p).await;
    b.at(60.0);
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    assert_eq!(probe.verdict, Verdict::Probe);
    let reply = b.gates.record_slow_success(&key, &p, probe.reply.epoch).await.unwrap();
    assert_eq!(reply.state, CircuitState::Closed);
}

pub async fn sla_adaptive_open_time_is_base_times_two_minus_the_success_rate_clamped(b: Backend) {
    let p = params(sla_config(), 16);
    // 1 success, 9 failures: R = 0.1, so 60 s × 1.9 = 114 s
    let key = b.key("rate");
    open_by_rate(&b, &key, &p).await;
    assert_eq!(b.gates.retry_after(&[(key.clone(), p.clone())]).await.unwrap(), Duration::from_secs(114));
    // the probe fails at 114 s, when the window of the open has rotated out (R = 1): streak 2,
    // the base 120 s; the next probe fails too: streak 3, 240 s, capped at 200 s
    b.at(114.0);
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    let reply = b.gates.record_failure(&key, &p, probe.reply.epoch).await.unwrap();
    assert_eq!(reply.retry_after, Duration::from_secs(120));
    b.at(234.0);
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    let reply = b.gates.record_failure(&key, &p, probe.reply.epoch).await.unwrap();
    assert_eq!(reply.retry_after, Duration::from_secs(200));
    // a dead key on an empty window: R = 1, so the base 60 s
    let dead = b.key("dead");
    b.at(0.0);
    assert_eq!(b.attempt(&dead, &p, SourceDead).await.verdict, Verdict::Allowed);
    assert_eq!(b.snapshot(&dead).await.open_until.saturating_since(b.clock.now()), MIN);
    // 4 failures in 10 samples on a 30 s breaker: the floor lifts 30 × 1.4 = 42 s to 45 s
    let short = params(BreakerConfig { cooldown_s: Some(30.0), min_calls: Some(10), fail_rate: Some(0.4), ..sla_config() }, 16);
    let low = b.key("floor");
    b.attempts(&low, &short, Success, 6).await;
    b.attempts(&low, &short, Transient, 4).await;
    assert_eq!(b.gates.retry_after(&[(low, short)]).await.unwrap(), Duration::from_secs(45));
}

fn sla_config() -> BreakerConfig {
    BreakerConfig { sla_adaptive: Some(true), sla_min_cooldown_s: Some(45.0), sla_max_cooldown_s: Some(200.0), ..seed_breaker() }
}

pub async fn tenant_partitions_of_one_source_are_independent_gates(b: Backend) {
    let p = params(seed_breaker(), 16);
    let (gold, bronze) = (b.key("s1").with_tenant("gold"), b.key("s1").with_tenant("bronze"));
    open_by_rate(&b, &bronze, &p).await;
    assert_eq!(b.snapshot(&gold).await.state, CircuitState::Closed);
    assert_eq!(b.snapshot(&b.key("s1")).await.state, CircuitState::Closed);
    assert_eq!(b.attempt(&gold, &p, Success).await.verdict, Verdict::Allowed);
    assert_eq!(b.gates.try_enter(&bronze, &p).await.unwrap().verdict, Verdict::Denied);
    assert_eq!(b.gates.retry_after(&[(gold, p.clone())]).await.unwrap(), Duration::ZERO);
}

pub async fn a_probe_close_starts_the_window_afresh(b: Backend) {
    // cooldown 30 s inside a 60 s window: the failures that opened the gate are still in the
    // window when the probe closes it
    let (key, p) = (b.key("s"), params(BreakerConfig { cooldown_s: Some(30.0), fail_rate: Some(0.05), ..seed_breaker() }, 16));
    open_by_rate(&b, &key, &p).await;
    b.at(30.0);
    let probe = b.gates.try_enter(&key, &p).await.unwrap();
    b.record(&key, &p, probe, Success).await;
    let gate = b.snapshot(&key).await;
    assert_eq!((gate.state, gate.samples(), gate.f0 + gate.f1), (CircuitState::Closed, 0, 0));
    b.at(31.0);
    b.attempt(&key, &p, Transient).await;
    assert_eq!(b.snapshot(&key).await.state, CircuitState::Closed, "one failure after recovery is not 9 in 10");
}

pub async fn sla_adaptive_reads_the_window_as_of_now(b: Backend) {
    let p = params(sla_config(), 16);
    let key = b.key("stale");
    b.at(0.0);
    b.attempt(&key, &p, Success).await;
    b.attempts(&key, &p, ResultInvalid, 2).await;
    // 9 failures would have opened it; put them in by a rate-neutral path: min_calls unmet
    let quiet = params(BreakerConfig { min_calls: Some(1000), fail_threshold: Some(1000), ..sla_config() }, 16);
    b.attempts(&key, &quiet, Transient, 9).await;
    // two hours later the 90 % failure window has rotated out: a dead key opens for the base
    b.at(7200.0);
    assert_eq!(b.attempt(&key, &p, SourceDead).await.verdict, Verdict::Allowed);
    assert_eq!(b.gates.retry_after(&[(key, p)]).await.unwrap(), MIN);
}
