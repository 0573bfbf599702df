//! Selection (SPEC §5): EWMA convergence feeding P2C, the P2C distribution under a fixed seed,
//! round-robin and least-in-flight orders, and the in-call demotion rules.

#![allow(clippy::unwrap_used)]

use gateway_core::health::Ewma;
use gateway_core::outcome::OutcomeClass;
use gateway_core::select::{AttemptFails, Selector, SelectorKind, SourceView, demote, score};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

fn view(health: f64, inflight: u32) -> SourceView {
    SourceView { health, inflight }
}

/// How often each source is first over `draws` orders.
fn first_counts(views: &[SourceView], draws: usize, seed: u64) -> Vec<usize> {
    let selector = Selector::new(SelectorKind::HealthAware);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order = Vec::new();
    let mut counts = vec![0; views.len()];
    for _ in 0..draws {
        selector.order(views, &mut rng, &mut order);
        counts[order[0]] += 1;
    }
    counts
}

#[test]
fn ewma_fed_by_outcomes_converges_and_steers_p2c_away() {
    let mut healthy = Ewma::new();
    let mut flaky = Ewma::new();
    for i in 0..200 {
        healthy.observe_class(if i % 7 == 0 { OutcomeClass::Transient } else { OutcomeClass::Success });
        flaky.observe_class(if i % 10 == 0 { OutcomeClass::Success } else { OutcomeClass::Transient });
    }
    assert!((healthy.value() - 6.0 / 7.0).abs() < 0.15, "{}", healthy.value());
    assert!(flaky.value() < 0.3, "{}", flaky.value());
    let views = [view(healthy.value(), 0), view(flaky.value(), 0)];
    // With two sources P2C always draws both: the healthy one is always first.
    assert_eq!(first_counts(&views, 1000, 1), [1000, 0]);
}

#[test]
fn p2c_distribution_under_a_fixed_seed() {
    // Five sources: s0 healthy, s1 healthy but busy, s2 half-healthy, s3 and s4 dead (floor 0.05).
    let views = [view(1.0, 0), view(1.0, 3), view(0.5, 0), view(0.0, 0), view(0.0, 0)];
    let counts = first_counts(&views, 10_000, 42);
    // s0 wins every pair it is drawn in (8 of 20 ordered pairs); s2 beats s1 (score 0.25),
    // s3 and s4; s1 beats only s3/s4; a dead source is first only when paired with the other.
    // Expected shares: s0 40 %, s2 30 %, s1 20 %, s3 5 %, s4 5 %.
    assert_eq!(counts, first_counts(&views, 10_000, 42), "same seed, same draws");
    let expected = [0.40, 0.20, 0.30, 0.05, 0.05];
    for (i, (&got, want)) in counts.iter().zip(expected).enumerate() {
        let share = got as f64 / 10_000.0;
        assert!((share - want).abs() < 0.02, "s{i}: {share} vs {want} ({counts:?})");
    }
}

#[test]
fn p2c_orders_the_rest_by_score_descending() {
    let views = [view(0.2, 0), view(0.9, 0), view(0.5, 1), view(0.7, 0)];
    let selector = Selector::new(SelectorKind::HealthAware);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut order = Vec::new();
    for _ in 0..50 {
        selector.order(&views, &mut rng, &mut order);
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, [0, 1, 2, 3], "a full permutation");
        let tail: Vec<f64> = order[1..].iter().map(|&i| score(&views[i])).collect();
        assert!(tail.windows(2).all(|w| w[0] >= w[1]), "{order:?}");
    }
    selector.order(&[], &mut rng, &mut order);
    assert!(order.is_empty());
    selector.order(&views[..1], &mut rng, &mut order);
    assert_eq!(order, [0]);
}

#[test]
fn floor_keeps_exploring_a_dead_source() {
    assert_eq!(score(&view(0.0, 0)), 0.05);
    assert_eq!(score(&view(0.8, 3)), 0.2);
    let views = [view(0.0, 0), view(0.0, 0)];
    let counts = first_counts(&views, 1000, 5);
    assert!(counts.iter().all(|&c| c > 400), "{counts:?}");
}

#[test]
fn round_robin_rotates_and_least_inflight_sorts() {
    let views = [view(1.0, 2), view(0.1, 0), view(1.0, 1)];
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut order = Vec::new();
    let rr = Selector::new(SelectorKind::RoundRobin);
    let mut firsts = Vec::new();
    for _ in 0..4 {
        rr.order(&views, &mut rng, &mut order);
        firsts.push(order.clone());
    }
    assert_eq!(firsts, [vec![0, 1, 2], vec![1, 2, 0], vec![2, 0, 1], vec![0, 1, 2]]);
    assert!(!rr.uses_health());
    let li = Selector::new(SelectorKind::LeastInflight);
    li.order(&views, &mut rng, &mut order);
    assert_eq!(order, [1, 2, 0]);
}

#[test]
fn demotion_needs_two_failures_and_a_trusted_alternative() {
    let health = [0.9, 0.6, 0.1];
    let mut fails = AttemptFails::new(3);
    let mut order = vec![0, 1, 2];
    // One failure: still first (a 429 or empty completion is transient; retrying in place is best).
    fails.record(0);
    demote(&mut order, &fails, Some(&health));
    assert_eq!(order, [0, 1, 2]);
    // Two failures, and s1 (no failure, 0.6 ≥ 0.45) is trusted: s0 yields.
    fails.record(0);
    demote(&mut order, &fails, Some(&health));
    assert_eq!(order, [1, 2, 0]);
}

#[test]
fn without_a_trusted_alternative_the_healthy_source_keeps_its_place() {
    // Seed 000 iteration 2: pushing the third try to a 10 % source is worse than staying.
    let health = [0.9, 0.1, 0.3];
    let mut fails = AttemptFails::new(3);
    fails.record(0);
    fails.record(0);
    let mut order = vec![0, 1, 2];
    demote(&mut order, &fails, Some(&health));
    assert_eq!(order, [0, 1, 2]);
    // An alternative that already failed in this call is not trusted either.
    let health = [0.9, 0.9, 0.1];
    fails.record(1);
    let mut order = vec![0, 1, 2];
    demote(&mut order, &fails, Some(&health));
    assert_eq!(order, [0, 1, 2]);
}

#[test]
fn selectors_without_health_demote_unconditionally_keeping_relative_order() {
    let mut fails = AttemptFails::new(4);
    for s in [0, 0, 2, 2, 3] {
        fails.record(s);
    }
    let mut order = vec![2, 0, 3, 1];
    demote(&mut order, &fails, None);
    assert_eq!(order, [3, 1, 2, 0]);
    // When every source failed twice nothing moves.
    let mut all = AttemptFails::new(2);
    for s in [0, 0, 1, 1] {
        all.record(s);
    }
    let mut order = vec![1, 0];
    demote(&mut order, &all, None);
    assert_eq!(order, [1, 0]);
}

/// Three sources behind the default selector, three calls in flight at a time, every call
/// structured: `a` and `b` answer well, `c` fails the caller's structure 40 % of the time. Each
/// attempt is settled through the outcome table (health, and the gate), and a `ResultInvalid`
/// is re-asked through a new pick, as the call loop does. The attempts each source got, per
/// half of the run.
fn structured_run(calls: usize, seed: u64) -> ([[u32; 3]; 2], bool) {
    use gateway_core::breaker::{CircuitState, Gate, GateOp};
    use gateway_core::random::unit;
    let selector = Selector::new(SelectorKind::HealthAware);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut answers = ChaCha8Rng::seed_from_u64(seed + 1);
    let p = gateway_core::GateParams::new(
        &gateway_core::policy::BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..Default::default() }
            .resolve("chat.breaker")
            .unwrap(),
        16,
        std::time::Duration::from_secs(30),
        std::time::Duration::from_secs(30),
    );
    let (mut health, mut gates) = ([Ewma::new(); 3], [Gate::new(), Gate::new(), Gate::new()]);
    let mut attempts = [[0u32; 3]; 2];
    let mut gate_opened = false;
    let mut order = Vec::new();
    for batch in 0..calls.div_ceil(3) {
        let half = usize::from(batch * 3 >= calls / 2);
        // Three calls pick in turn; each counts in flight for the next pick.
        let mut inflight = [0u32; 3];
        let mut picked = Vec::new();
        for _ in 0..3 {
            let views: Vec<SourceView> = (0..3).map(|i| view(health[i].value(), inflight[i])).collect();
            selector.order(&views, &mut rng, &mut order);
            inflight[order[0]] += 1;
            picked.push(order[0]);
        }
        for (i, mut source) in picked.into_iter().enumerate() {
            let now = gateway_core::Timestamp::from_secs(u64::try_from(batch * 3 + i).unwrap());
            // One call: up to three answers (a first and two re-asks), each picked afresh.
            for _ in 0..3 {
                attempts[half][source] += 1;
                let class = if source == 2 && unit(&mut answers) < 0.4 { OutcomeClass::ResultInvalid } else { OutcomeClass::Success };
                health[source].observe_class(class);
                let entry = gates[source].apply(&p, GateOp::TryEnter, now);
                if let Some(op) = class.effects().gate_op(&entry, std::time::Duration::ZERO, None) {
                    gates[source].apply(&p, op, now);
                }
                gate_opened |= gates[source].state != CircuitState::Closed;
                if class == OutcomeClass::Success {
                    break;
                }
                let views: Vec<SourceView> = (0..3).map(|i| view(health[i].value(), 0)).collect();
                selector.order(&views, &mut rng, &mut order);
                source = order[0];
            }
        }
    }
    (attempts, gate_opened)
}

#[test]
fn a_source_whose_answers_fail_the_structure_loses_its_place_but_its_gate_never_opens() {
    for seed in 1..=5 {
        let ([first, second], gate_opened) = structured_run(50, seed);
        let total = |half: [u32; 3]| f64::from(half.iter().sum::<u32>());
        let share = |half: [u32; 3], i: usize| f64::from(half[i]) / total(half);
        // Within 50 calls its share of structured attempts falls below each healthy peer's.
        assert!(share(second, 2) < share(second, 0) && share(second, 2) < share(second, 1), "seed {seed}: {first:?} then {second:?}");
        assert!(!gate_opened, "seed {seed}: the provider is up: its gate never opens");
    }
}
