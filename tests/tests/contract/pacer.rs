//! Pacer contract on the `PacerGate` port (SPEC §4): the learned limit of a provider account,
//! its leases and their expiry, one cut per round trip, and one limit for every process. The
//! limits are also played on gateway-core's `AccountPacer` and must agree to the last bit. The
//! same bodies run on every backend.

#![allow(clippy::unwrap_used)]

use crate::support::Backend;
use gateway_core::aimd::{AccountPacer, Lease, Paced, PacerParams};
use gateway_core::outcome::AimdEffect::{self, Decrease, Increase, Nothing};
use gateway_core::ports::{PaceDecision, PaceLease, PacerGate};
use gateway_core::time::Clock;
use std::time::Duration;

const PARAMS: PacerParams = PacerParams { ceiling: 16.0, lease_ttl: Duration::from_secs(60) };

async fn granted(pacer: &dyn PacerGate, b: &Backend, account: &str, params: &PacerParams) -> PaceLease {
    match pacer.try_acquire(&b.key(account), params).await.unwrap() {
        PaceDecision::Granted(lease) => lease,
        paced => panic!("expected a lease, got {paced:?}"),
    }
}

async fn paced(pacer: &dyn PacerGate, b: &Backend, account: &str, params: &PacerParams) -> Paced {
    match pacer.try_acquire(&b.key(account), params).await.unwrap() {
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
        let core = self.core.try_acquire(&PARAMS, b.clock.now()).unwrap();
        assert_eq!(backend.lease.generation, core.generation, "the generation a lease carries");
        (backend, core)
    }

    /// Releases a lease of both with `effect`; the limit after, the same on both.
    async fn give(&mut self, b: &Backend, (backend, core): (PaceLease, Lease), effect: AimdEffect) -> f64 {
        let limit = b.pacer.release(&backend, effect, &PARAMS).await.unwrap();
        let expected = self.core.release(core, effect, &PARAMS);
        assert_eq!(limit.to_bits(), expected.to_bits(), "{limit} against core's {expected} after {effect:?}");
        limit
    }

    /// One attempt begun and ended with `effect`.
    async fn round(&mut self, b: &Backend, effect: AimdEffect) -> f64 {
        let lease = self.take(b).await;
        self.give(b, lease, effect).await
    }
}

pub async fn pacer_starts_at_eight_or_its_ceiling_and_grants_up_to_its_limit(b: Backend) {
    b.at(0.0);
    for _ in 0..8 {
        granted(&*b.pacer, &b, "k1", &PARAMS).await;
    }
    assert_eq!(paced(&*b.pacer, &b, "k1", &PARAMS).await, Paced { limit: 8.0, inflight: 8 });
    let narrow = PacerParams { ceiling: 3.0, ..PARAMS };
    for _ in 0..3 {
        granted(&*b.pacer, &b, "k2", &narrow).await;
    }
    assert_eq!(paced(&*b.pacer, &b, "k2", &narrow).await, Paced { limit: 3.0, inflight: 3 }, "accounts are separate");
    assert_eq!(b.pacer.read(&b.key("never-used"), &PARAMS).await.unwrap(), Paced { limit: 8.0, inflight: 0 });
    assert_eq!(b.pacer.read(&b.key("k1"), &PARAMS).await.unwrap(), Paced { limit: 8.0, inflight: 8 });
}

pub async fn pacer_cuts_once_per_round_trip_and_grows_back_by_one_over_the_limit(b: Backend) {
    b.at(0.0);
    let mut m = Mirror { core: AccountPacer::new(&PARAMS) };
    // A burst: eight in flight, all answered 429: one cut, not eight.
    let mut burst = Vec::new();
    for _ in 0..8 {
        burst.push(m.take(&b).await);
    }
    for lease in burst {
        assert_eq!(m.give(&b, lease, Decrease).await, 4.0);
    }
    // The first 429 on an attempt begun after the cut cuts at once.
    assert_eq!(m.round(&b, Decrease).await, 2.0);
    // Background noise among successes, then recovery.
    for effect in [Increase, Decrease, Increase, Increase, Nothing, Increase, Decrease, Decrease] {
        m.round(&b, effect).await;
    }
    for _ in 0..200 {
        m.round(&b, Increase).await;
    }
    assert_eq!(m.round(&b, Increase).await, 16.0, "capped at the ceiling");
    for _ in 0..10 {
        m.round(&b, Decrease).await;
    }
    assert_eq!(m.round(&b, Decrease).await, 1.0, "floored at one");
}

pub async fn pacer_leases_of_a_crashed_worker_expire(b: Backend) {
    let one = PacerParams { ceiling: 1.0, ..PARAMS };
    b.at(0.0);
    granted(&*b.pacer, &b, "k1", &one).await; // never released
    b.at(59.999);
    assert_eq!(paced(&*b.pacer, &b, "k1", &one).await, Paced { limit: 1.0, inflight: 1 });
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
    // One process's 429 cuts for both; the other's 429 from the same round is the same event.
    assert_eq!(b.pacer.release(&mine[0], Decrease, &PARAMS).await.unwrap(), 4.0);
    assert_eq!(other.release(&theirs[0], Decrease, &PARAMS).await.unwrap(), 4.0, "no second cut in one round trip");
    // Six in flight against four: two must end before a new attempt fits, on either side.
    for lease in &mine[1..3] {
        b.pacer.release(lease, Nothing, &PARAMS).await.unwrap();
    }
    assert_eq!(paced(&*other, &b, "k1", &PARAMS).await, Paced { limit: 4.0, inflight: 4 });
    other.release(&theirs[1], Nothing, &PARAMS).await.unwrap();
    let fresh = granted(&*other, &b, "k1", &PARAMS).await;
    assert_eq!(b.pacer.release(&fresh, Decrease, &PARAMS).await.unwrap(), 2.0, "a lease of the new round cuts again");
    let tenant = b.key("k1").with_tenant("gold");
    assert!(matches!(b.pacer.try_acquire(&tenant, &PARAMS).await.unwrap(), PaceDecision::Granted(_)), "a tenant's account is its own");
}
