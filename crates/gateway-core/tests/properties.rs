//! Property tests over random event sequences on one gate with random (valid) parameters and
//! several concurrent callers: the retry_after contract, epoch monotonicity, legal transitions
//! only, sane window counts and at most one live probe lease.
//!
//! Model of the callers: each admission is held by a caller that later reports (success,
//! failure, release) with the epoch it was admitted at. A probe caller whose lease has expired
//! is a lost worker and never reports: attempts are bounded by the source timeout, and the lease
//! is at least twice the slowest timeout.

#![allow(clippy::unwrap_used)]

use gateway_core::breaker::{CircuitState, Gate, GateParams, Reply, Transition, Verdict};
use gateway_core::policy::BreakerConfig;
use gateway_core::time::Timestamp;
use proptest::prelude::*;
use std::time::Duration;

#[derive(Clone, Debug)]
enum Op {
    /// Let time pass (milliseconds).
    Advance(u64),
    /// A new caller asks to enter.
    Enter,
    /// Caller `n` (modulo the callers holding an admission) reports; a stale caller may report.
    Success(usize, bool),
    Failure(usize),
    Release(usize),
    ForceOpen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..120_000).prop_map(Op::Advance),
        4 => Just(Op::Enter),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(n, real)| Op::Success(n, real)),
        4 => any::<usize>().prop_map(Op::Failure),
        1 => any::<usize>().prop_map(Op::Release),
        1 => Just(Op::ForceOpen),
    ]
}

fn config() -> impl Strategy<Value = (BreakerConfig, u32)> {
    (1u32..8, 1u32..120, 1u32..15, 1u32..=10, 2u32..120, 1u32..4, 0u32..5, prop::option::of(1u32..400), any::<bool>()).prop_map(
        |(threshold, cooldown, min_calls, rate_tenths, window, hos, concurrency, max_cooldown, rate_channel)| {
            let config = BreakerConfig {
                fail_threshold: Some(threshold),
                cooldown_s: Some(f64::from(cooldown)),
                min_calls: Some(min_calls),
                fail_rate: Some(f64::from(rate_tenths) / 10.0),
                window_s: Some(f64::from(window)),
                max_cooldown_s: max_cooldown.map(|m| f64::from(m.max(cooldown))),
                half_open_successes: Some(hos),
                rate_channel: Some(rate_channel),
                ..BreakerConfig::default()
            };
            (config, concurrency)
        },
    )
}

/// A caller holding an admission: the epoch it was admitted at and, for a probe, its lease end.
#[derive(Clone, Copy, Debug)]
struct Holder {
    epoch: u64,
    lease_until: Option<Timestamp>,
}

fn check_reply(gate: &Gate, p: &GateParams, before: &Gate, reply: &Reply) -> Result<(), TestCaseError> {
    let max = Duration::from_millis(p.max_cooldown_ms());
    prop_assert!(reply.retry_after <= max, "retry_after {:?} above max_cooldown {max:?}", reply.retry_after);
    if reply.state != CircuitState::Open {
        prop_assert_eq!(reply.retry_after, Duration::ZERO, "retry_after must be 0 unless OPEN");
    }
    prop_assert_eq!((reply.state, reply.epoch), (gate.state, gate.epoch));
    prop_assert!(gate.epoch >= before.epoch, "epoch went back");
    match reply.transition {
        Some(Transition { from, to, .. }) => {
            prop_assert_eq!((from, to), (before.state, gate.state));
            prop_assert!(Transition::is_legal(from, to), "illegal transition {from} → {to}");
            let opened = to == CircuitState::Open;
            prop_assert_eq!(gate.epoch, before.epoch + u64::from(opened), "epoch moves by one on every open and nothing else");
        }
        None => {
            prop_assert_eq!(gate.state, before.state, "state changed without a transition");
            prop_assert_eq!(gate.epoch, before.epoch);
        }
    }
    if reply.fenced {
        prop_assert_eq!(gate, before, "a fenced record changed the gate");
    }
    prop_assert!(gate.f0 <= gate.a0 && gate.f1 <= gate.a1, "window failures exceed attempts: {gate:?}");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn gate_invariants_hold_for_any_event_sequence((config, concurrency) in config(), ops in prop::collection::vec(op(), 1..300)) {
        let policy = config.resolve("prop.breaker").unwrap();
        let p = GateParams::new(&policy, concurrency, Duration::from_secs(30), Duration::from_secs(30));
        let mut gate = Gate::new();
        let mut now = Timestamp::ZERO;
        let mut holders: Vec<Holder> = Vec::new();
        for op in ops {
            let before = gate.clone();
            let reply = match op {
                Op::Advance(ms) => {
                    now = now.saturating_add(Duration::from_millis(ms));
                    continue;
                }
                Op::Enter => {
                    let entry = gate.try_enter(&p, now);
                    match entry.verdict {
                        Verdict::Allowed => {
                            prop_assert_eq!(before.state, CircuitState::Closed);
                            holders.push(Holder { epoch: entry.reply.epoch, lease_until: None });
                        }
                        Verdict::Probe => {
                            prop_assert_eq!(entry.reply.retry_after, Duration::ZERO);
                            let live = holders.iter().filter(|h| h.epoch == gate.epoch && h.lease_until.is_some_and(|u| now < u)).count();
                            prop_assert_eq!(live, 0, "a second probe lease while one is live");
                            holders.push(Holder { epoch: entry.reply.epoch, lease_until: gate.probe_until });
                        }
                        Verdict::Denied => {
                            prop_assert_ne!(before.state, CircuitState::Closed, "CLOSED never denies");
                            if entry.reply.state == CircuitState::Open {
                                prop_assert_eq!(entry.reply.retry_after, gate.open_until.saturating_since(now).min(Duration::from_millis(p.max_cooldown_ms())));
                                prop_assert!(entry.reply.retry_after > Duration::ZERO, "an OPEN denial names a wait");
                            }
                        }
                    }
                    entry.reply
                }
                Op::Success(n, _) | Op::Failure(n) | Op::Release(n) if !holders.is_empty() => {
                    let holder = holders.remove(n % holders.len());
                    if holder.lease_until.is_some_and(|until| now >= until) {
                        // A probe outlives its lease only if its worker is lost: attempts end
                        // within the source timeout and probe_ttl ≥ 2 × the slowest timeout.
                        // A lost worker never reports.
                        continue;
                    }
                    match op {
                        Op::Success(_, real) => gate.record_success(&p, holder.epoch, now, real),
                        Op::Failure(_) => gate.record_failure(&p, holder.epoch, now),
                        _ => gate.release_probe(&p, holder.epoch, now),
                    }
                }
                Op::Success(..) | Op::Failure(_) | Op::Release(_) => {
                    // Nobody is holding an admission: a stray, stale record must be fenced.
                    let reply = gate.record_failure(&p, gate.epoch.wrapping_add(1), now);
                    prop_assert!(reply.fenced);
                    reply
                }
                Op::ForceOpen => gate.force_open(&p, now),
            };
            check_reply(&gate, &p, &before, &reply)?;
            prop_assert!(gate.retry_after(&p, now) <= Duration::from_millis(p.max_cooldown_ms()));
        }
    }

    #[test]
    fn retry_after_is_capped_even_when_the_clock_steps_back(back_ms in 0u64..10_000_000, streak in 0u32..64) {
        let policy = BreakerConfig { fail_threshold: Some(1), cooldown_s: Some(60.0), ..BreakerConfig::default() }.resolve("prop.breaker").unwrap();
        let p = GateParams::new(&policy, 0, Duration::from_secs(30), Duration::from_secs(30));
        let mut gate = Gate { streak, ..Gate::new() };
        let at = Timestamp::from_millis(10_000_000);
        gate.force_open(&p, at);
        let earlier = Timestamp::from_millis(10_000_000 - back_ms);
        prop_assert!(gate.try_enter(&p, earlier).reply.retry_after <= Duration::from_secs(300));
        prop_assert!(p.cooldown_eff_ms(streak) <= 300_000);
    }
}
