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
