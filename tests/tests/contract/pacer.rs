//! Pacer contract on the `PacerGate` port (SPEC §4): the learned limit of a provider account,
//! its leases and their expiry, noise against a burst, the refused ceiling, pacing below one in
//! flight, one cut per round trip, and one limit for every process. The
//! limits are also played on gateway-core's `AccountPacer` and must agree to the last bit. The
//! same bodies run on every backend.

#![allow(clippy::unwrap_used)]

use crate::support::Backend;
use gateway_core::aimd::{AccountPacer, AccountReading, LearnedCeiling, Lease, Paced, PacerParams};
use gateway_core::outcome::AimdEffect::{self, Decrease, Increase, Nothing, RoundTrip};
use gateway_core::ports::{PaceDecision, PaceLease, PacerGate};
use gateway_core::time::Clock;
use std::time::Duration;

const PARAMS: PacerParams = PacerParams { ceiling: 16.0, lease_ttl: Duration::from_secs(60), limit_window: Duration::from_secs(60) };

async fn granted(pacer: &dyn PacerGate, b: &Backend, account: &str, params: &PacerParams) -> PaceLease {
    match pacer.try_acquire(&b.key(account), params, 1).await.unwrap() {
        PaceDecision::Granted(lease) => lease,
        paced => panic!("expected a lease, got {paced:?}"),
    }
}

async fn paced(pacer: &dyn PacerGate, b: &Backend, account: &str, params: &PacerParams) -> Paced {
    match pacer.try_acquire(&b.key(account), params, 1).await.unwrap() {
        PaceDecision::Paced(paced) => paced,
        PaceDecision::Granted(lease) => panic!("expected to be paced, got {lease:?}"),
    }
}

/// The backend's account `k1` and core's machine, driven by the same operations.
struct Mirror {
    core: AccountPacer,
}

impl Mirror {
    /// A lease on both.
    async fn take(&mut self, b: &Backend) -> (PaceLease, Lease) {
        let backend = granted(&*b.pacer, b, "k1", &PARAMS).await;
        let core = self.core.try_acquire(&PARAMS, 1, b.clock.now()).unwrap();
        assert_eq!(backend.lease, core, "the lease: generation, epoch, n, grant time");
        (backend, core)
    }

    /// Releases a lease of both with `effect`; the limit after, the same on both.
    async fn give(&mut self, b: &Backend, (backend, core): (PaceLease, Lease), effect: AimdEffect) -> f64 {
        let limit = b.pacer.release(&backend, effect, None, &PARAMS).await.unwrap();
        let expected = self.core.release(core, effect, None, &PARAMS, b.clock.now());
        assert_eq!(limit.to_bits(), expected.to_bits(), "{limit} against core's {expected} after {effect:?}");
        // What a status page reads is the same account: its limit and its refused ceiling.
        let read = b.pacer.read(&b.key("k1"), &PARAMS).await.unwrap();
        assert_eq!((read.limit.to_bits(), read.learned), (limit.to_bits(), self.core.learned_ceiling()), "the reading after {effect:?}");
        limit
    }

    /// One attempt begun at `at` s and ended with `effect` `took` s later.
    async fn round(&mut self, b: &Backend, at: f64, took: f64, effect: AimdEffect) -> f64 {
        b.at(at);
        let lease = self.take(b).await;
        b.at(at + took);
        self.give(b, lease, effect).await
    }
}

pub async fn pacer_starts_at_eight_or_its_ceiling_and_grants_up_to_its_limit(b: Backend) {
    b.at(0.0);
    for _ in 0..8 {
        granted(&*b.pacer, &b, "k1", &PARAMS).await;
    }
    assert_eq!(paced(&*b.pacer, &b, "k1", &PARAMS).await, Paced { limit: 8.0, inflight: 8, ready_in: None });
    let narrow = PacerParams { ceiling: 3.0, ..PARAMS };
    for _ in 0..3 {
        granted(&*b.pacer, &b, "k2", &narrow).await;
    }
    assert_eq!(paced(&*b.pacer, &b, "k2", &narrow).await, Paced { limit: 3.0, inflight: 3, ready_in: None }, "accounts are separate");
    let fresh = AccountReading { limit: 8.0, inflight: 0, learned: None };
    assert_eq!(b.pacer.read(&b.key("never-used"), &PARAMS).await.unwrap(), fresh);
    assert_eq!(b.pacer.read(&b.key("k1"), &PARAMS).await.unwrap(), AccountReading { inflight: 8, ..fresh });
}

pub async fn pacer_tells_noise_from_a_burst_and_holds_a_refused_ceiling(b: Backend) {
    let mut m = Mirror { core: AccountPacer::new(&PARAMS) };
    // Noise: a lone 429 among successes does not cut.
    let mut t = 0.0;
    for effect in [Increase, Decrease, Increase, RoundTrip, Nothing, Increase, Decrease, Increase] {
        m.round(&b, t, 1.5, effect).await;
        t += 2.0;
    }
    assert_eq!(m.core.generation(), 0, "noise never cuts");
    // A burst: eight in flight, answered 429 within 20 ms: one cut by 0.7 of the flight it met,
    // at the second (with the noise 429 four seconds before, within four 429 latencies of the
    // noise's 1.5 s: seven still out, its own included).
    b.at(t);
    let mut burst = Vec::new();
    for _ in 0..8 {
        burst.push(m.take(&b).await);
    }
    b.at(t + 0.02);
    let before = m.core.limit();
    for lease in burst {
        m.give(&b, lease, Decrease).await;
    }
    assert_eq!((m.core.limit(), m.core.generation()), (before.min(7.0) * 0.7, 1), "one cut for the round trip");
    assert!(m.core.learned_ceiling().is_some_and(|w| !w.held), "a burst finds a ceiling, not held");
    // A success at n ≥ W (two in flight, so n reaches the ceiling's) forgets it.
    let w = m.core.learned_ceiling().unwrap().at;
    b.at(t + 1.0);
    let leases = [m.take(&b).await, m.take(&b).await];
    assert!(leases[1].1.n >= w);
    b.at(t + 2.0);
    for lease in leases {
        m.give(&b, lease, Increase).await;
    }
    assert_eq!(m.core.learned_ceiling(), None, "a success above the ceiling forgot it");
    for _ in 0..200 {
        m.round(&b, t + 60.0, 0.1, Increase).await;
    }
    assert_eq!(m.round(&b, t + 70.0, 0.1, Increase).await, 16.0, "capped at the ceiling");
    // A burst at three in flight finds a ceiling of two (the third 429 is the burst).
    let mut t = t + 100.0;
    b.at(t);
    let three = [m.take(&b).await, m.take(&b).await, m.take(&b).await];
    b.at(t + 0.01);
    for lease in three {
        m.give(&b, lease, Decrease).await;
    }
    assert_eq!(m.core.learned_ceiling(), Some(LearnedCeiling { at: 2, held: false }));
    // A refused probe (n ≥ W): held there, at n − 1 (at least one); no cut.
    t += 100.0;
    b.at(t);
    let [a, c, probe] = [m.take(&b).await, m.take(&b).await, m.take(&b).await];
    b.at(t + 0.01);
    let generation = m.core.generation();
    assert_eq!(m.give(&b, probe, Decrease).await, 1.0);
    assert_eq!((m.core.learned_ceiling(), m.core.generation()), (Some(LearnedCeiling { at: 2, held: true }), generation));
    for lease in [a, c] {
        m.give(&b, lease, Nothing).await;
    }
    // Bursts under the ceiling cut below one, where every current 429 cuts, paced by the round
    // trip; floored at 1/16.
    t += 100.0;
    for _ in 0..60 {
        t += if m.core.limit() < 1.0 { 40.0 } else { 0.02 };
        m.round(&b, t, 0.01, Decrease).await;
    }
    assert_eq!(m.core.limit(), 1.0 / 16.0, "floored at 1/16");
    b.at(t + 0.02);
    assert!(matches!(b.pacer.try_acquire(&b.key("k1"), &PARAMS, 1).await.unwrap(), PaceDecision::Paced(_)), "too soon after the last");
}

pub async fn pacer_leases_of_a_crashed_worker_expire(b: Backend) {
    let one = PacerParams { ceiling: 1.0, ..PARAMS };
    b.at(0.0);
    granted(&*b.pacer, &b, "k1", &one).await; // never released
    b.at(59.999);
    assert_eq!(paced(&*b.pacer, &b, "k1", &one).await, Paced { limit: 1.0, inflight: 1, ready_in: None });
    b.at(60.0);
    assert_eq!(b.pacer.read(&b.key("k1"), &one).await.unwrap().inflight, 0);
    granted(&*b.pacer, &b, "k1", &one).await;
}

pub async fn pacer_two_processes_respect_one_limit(b: Backend) {
    b.at(0.0);
    let other = b.second_pacer().await;
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        mine.push(granted(&*b.pacer, &b, "k1", &PARAMS).await);
        theirs.push(granted(&*other, &b, "k1", &PARAMS).await);
    }
    assert_eq!(paced(&*other, &b, "k1", &PARAMS).await.inflight, 8, "eight in flight between the two");
    assert_eq!(paced(&*b.pacer, &b, "k1", &PARAMS).await.inflight, 8);
    // A burst of 429s from both processes cuts once for both; the round trip's other 429s are
    // the same event.
    b.at(0.02);
    assert_eq!(b.pacer.release(&mine[0], Decrease, None, &PARAMS).await.unwrap(), 8.0, "one 429 is noise");
    assert_eq!(other.release(&theirs[0], Decrease, None, &PARAMS).await.unwrap(), 8.0);
    let cut = b.pacer.release(&mine[1], Decrease, None, &PARAMS).await.unwrap();
    assert_eq!(cut, 6.0 * 0.7, "three within four 429 latencies: a burst, cut from the six in flight");
    assert_eq!(other.release(&theirs[1], Decrease, None, &PARAMS).await.unwrap(), cut, "no second cut in one round trip");
    // Four in flight against 4.2: one more fits, on either side, then neither.
    granted(&*other, &b, "k1", &PARAMS).await;
    assert_eq!(paced(&*other, &b, "k1", &PARAMS).await, Paced { limit: cut, inflight: 5, ready_in: None });
    assert_eq!(paced(&*b.pacer, &b, "k1", &PARAMS).await, Paced { limit: cut, inflight: 5, ready_in: None });
    assert!(matches!(b.pacer.try_acquire(&b.key("k2"), &PARAMS, 1).await.unwrap(), PaceDecision::Granted(_)), "another account is its own");
}

/// What a reload does to a removed or changed source: its gate is forgotten, so the next
/// operation finds a fresh one, and records of what the old one granted change nothing.
pub async fn forgetting_a_gate_starts_it_afresh(b: Backend) {
    use gateway_core::breaker::{CircuitState, GateOp};
    use gateway_core::policy::BreakerConfig;
    let params = crate::support::params(BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() }, 0);
    let key = b.key("s1");
    let admitted = b.gates.apply(&key, &params, GateOp::TryEnter).await.unwrap();
    b.gates.apply(&key, &params, GateOp::ForceOpen).await.unwrap();
    assert_eq!(b.gates.read(&key).await.unwrap().state, CircuitState::Open);
    b.gates.forget(&key).await.unwrap();
    assert_eq!(b.gates.read(&key).await.unwrap().state, CircuitState::Closed, "a forgotten gate reads as a new one");
    let fresh = b.gates.apply(&key, &params, GateOp::TryEnter).await.unwrap();
    assert_eq!(fresh.state, CircuitState::Closed);
    assert_ne!(fresh.incarnation, admitted.incarnation, "a new incarnation");
    let stale = b.gates.apply(&key, &params, GateOp::Failure { fence: admitted.fence() }).await.unwrap();
    assert!(stale.fenced, "a record of the old gate's admission changes nothing: {stale:?}");
    b.gates.forget(&b.key("never-used")).await.unwrap();
}
