//! Cancellation safety: 10 000 calls, each dropped at a random moment (seeded) while sources
//! answer slowly, fail, die and get probed; afterwards no quota permit, probe lease or AIMD
//! in-flight count is left, and every call ended exactly once in telemetry.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use gateway_client::Preset;
use gateway_core::breaker::CircuitState;
use gateway_core::outcome::OutcomeClass;
use gateway_core::random::unit;
use gateway_core::telemetry::CallResult;
use gateway_core::time::Clock;
use gateway_mock::{ScriptedUpstream, Step};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde_json::json;
use std::collections::HashSet;
use std::time::Duration;
use support::{Harness, sources};

const CALLS: usize = 10_000;
const AT_ONCE: usize = 40;

#[tokio::test(start_paused = true)]
async fn ten_thousand_randomly_cancelled_calls_leave_nothing_held() {
    let policy = sources(
        3,
        json!({
            "breaker": {"fail_threshold": 2, "cooldown_s": 1, "max_cooldown_s": 4, "window_s": 4, "min_calls": 4},
            "circuit_open": "wait",
            "sources": {
                "s1": {"timeout_s": 30, "max_concurrency": 4, "rpm": 600},
                "s2": {"timeout_s": 30, "max_concurrency": 8},
                "s3": {"timeout_s": 30, "max_concurrency": 2}
            }
        }),
    );
    let h = Harness::new(policy, Preset::Default);
    for (source, seed, fail_rate, class) in
        [("s1", 1, 0.1, OutcomeClass::Transient), ("s2", 2, 0.6, OutcomeClass::Transient), ("s3", 3, 0.7, OutcomeClass::SourceDead)]
    {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        h.upstream.plan(source, move |_| {
            let latency = Duration::from_millis((unit(&mut rng) * 2000.0) as u64);
            let step = if unit(&mut rng) < fail_rate { Step::Fail(class) } else { Step::Ok };
            (step, latency)
        });
    }
    let client = std::sync::Arc::new(h.client);
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let (mut completed, mut cancelled) = (0, 0);
    for _ in 0..CALLS / AT_ONCE {
        let mut batch = Vec::with_capacity(AT_ONCE);
        for _ in 0..AT_ONCE {
            let client = client.clone();
            let cancel_after = Duration::from_millis((unit(&mut rng) * 6000.0) as u64);
            batch
                .push(tokio::spawn(async move { tokio::time::timeout(cancel_after, client.call("chat", &support::chat())).await.is_ok() }));
        }
        for call in batch {
            if call.await.unwrap() {
                completed += 1;
            } else {
                cancelled += 1;
            }
        }
    }
    // Let the releases spawned by dropped attempts run.
    tokio::time::sleep(Duration::from_secs(1)).await;

    assert_eq!(client.inflight("chat"), 0, "AIMD in-flight counts");
    let now = h.clock.now();
    for source in ["s1", "s2", "s3"] {
        let key = gateway_core::ports::SourceKey::new("chat", source);
        assert_eq!(h.quota.in_flight(&key), 0, "{source}: permits (leases last 60 s, so none expired here)");
        if let Some(gate) = h.gates.snapshot(&key) {
            let live_lease = gate.state == CircuitState::HalfOpen && gate.probe_until.is_some_and(|until| now < until);
            assert!(!live_lease, "{source}: a probe lease is still held: {gate:?}");
        }
    }
    let calls = h.telemetry.calls();
    assert_eq!(calls.len(), CALLS, "every call ends exactly once");
    let ids: HashSet<u64> = calls.iter().map(|c| c.call_id).collect();
    assert_eq!(ids.len(), CALLS);
    assert_eq!(calls.iter().filter(|c| c.result == CallResult::Cancelled).count(), cancelled);
    let probes = h.telemetry.gates().iter().filter(|g| g.transition.to == CircuitState::HalfOpen).count();
    assert!(probes > 100, "probe leases were granted (and some dropped) along the way: {probes}");
    assert!(completed > 1000 && cancelled > 1000, "both paths exercised: {completed} completed, {cancelled} cancelled");
}

/// A client of one source whose attempts take 100 ms and succeed, on a pacer whose release takes
/// 10 ms; `records` bounds its records in the background (as `background_records` does).
fn slow_release_client(
    records: Option<(usize, Duration)>,
) -> (gateway_client::GatewayClient, std::sync::Arc<support::SpyPacer>, gateway_core::policy::ScopePolicy) {
    let policy = sources(1, json!({"sources": {"s1": {"timeout_s": 30}}}));
    let clock = std::sync::Arc::new(gateway_client::TokioClock::new());
    let pacer = std::sync::Arc::new(support::SpyPacer::new(clock.clone(), Duration::from_millis(10)));
    let upstream = ScriptedUpstream::new();
    upstream.plan("s1", |_| (Step::Ok, Duration::from_millis(100)));
    let mut builder =
        gateway_client::GatewayClient::builder().scope(policy.clone()).upstream(upstream).pacer(pacer.clone()).clock(clock).seed(3);
    if let Some((at_once, timeout)) = records {
        builder = builder.background_records(at_once, timeout);
    }
    (builder.build().unwrap(), pacer, policy)
}

#[tokio::test(start_paused = true)]
async fn a_call_returns_while_its_account_place_is_released_in_the_background_and_the_place_goes_back() {
    let (client, pacer, policy) = slow_release_client(None);
    // The attempt ends at 100 ms and the call returns then: its 10 ms release goes on after it.
    let began = tokio::time::Instant::now();
    client.call("chat", &support::chat()).await.unwrap();
    assert_eq!(began.elapsed(), Duration::from_millis(100), "the call waited for its records");
    let account = gateway_core::ports::SourceKey::new("chat", "s1");
    let paced = gateway_core::ports::PacerGate::read(&*pacer, &account, &policy.pacer_params()).await.unwrap();
    assert_eq!(paced.inflight, 1, "the release is still on its way");
    client.released().await;
    let paced = gateway_core::ports::PacerGate::read(&*pacer, &account, &policy.pacer_params()).await.unwrap();
    assert_eq!(paced.inflight, 0, "the lease went back (it would otherwise hold the account for 60 s)");
    assert_eq!(client.dropped_records(), 0);
}

#[tokio::test(start_paused = true)]
async fn records_past_their_bounds_are_dropped_and_counted_and_their_leases_expire() {
    // Room for one record in the background, for 5 ms: the second call's records find no room,
    // the first's run out of time.
    let (client, pacer, policy) = slow_release_client(Some((1, Duration::from_millis(5))));
    let request = support::chat();
    let (a, b) = tokio::join!(client.call("chat", &request), client.call("chat", &request));
    assert!(a.is_ok() && b.is_ok(), "records never fail a call");
    client.released().await;
    assert_eq!(client.dropped_records(), 2, "one without room, one out of time");
    let account = gateway_core::ports::SourceKey::new("chat", "s1");
    let paced = gateway_core::ports::PacerGate::read(&*pacer, &account, &policy.pacer_params()).await.unwrap();
    assert!(paced.inflight <= 2, "dropped leases are held until they expire");
    tokio::time::sleep(policy.pacer_params().lease_ttl).await;
    let paced = gateway_core::ports::PacerGate::read(&*pacer, &account, &policy.pacer_params()).await.unwrap();
    assert_eq!(paced.inflight, 0, "and then they have expired");
}

/// The memory backend's admission, answered 10 ms after it was made, as a Redis script's reply
/// is: what it granted is taken before the caller hears of it.
struct SlowAnswer(gateway_core::combined::InOrder);

#[async_trait::async_trait]
impl gateway_core::combined::AttemptGate for SlowAnswer {
    async fn admit(
        &self,
        ask: &gateway_core::combined::Admit<'_>,
    ) -> Result<gateway_core::combined::Admission, gateway_core::ports::BackendError> {
        let admission = self.0.admit(ask).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        admission
    }

    async fn record(
        &self,
        records: &gateway_core::combined::Records<'_>,
    ) -> Result<gateway_core::combined::Recorded, gateway_core::ports::BackendError> {
        self.0.record(records).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_its_admission_is_answered_leaves_nothing_taken() {
    let policy = sources(1, json!({"sources": {"s1": {"timeout_s": 30, "max_concurrency": 4}}}));
    let clock = std::sync::Arc::new(gateway_client::TokioClock::new());
    let gates = std::sync::Arc::new(gateway_memory::MemoryGates::new(clock.clone()));
    let quota = std::sync::Arc::new(gateway_memory::MemoryQuota::new(clock.clone()));
    let pacer = std::sync::Arc::new(gateway_memory::MemoryPacer::new(clock.clone()));
    let admit = SlowAnswer(gateway_core::combined::InOrder { gates: gates.clone(), quota: quota.clone(), pacer: pacer.clone() });
    let upstream = ScriptedUpstream::new();
    upstream.plan("s1", |_| (Step::Ok, Duration::from_millis(100)));
    let client = gateway_client::GatewayClient::builder()
        .scope(policy.clone())
        .upstream(upstream)
        .gates(gates)
        .quota(quota.clone())
        .pacer(pacer.clone())
        .attempts(std::sync::Arc::new(admit))
        .clock(clock)
        .seed(5)
        .build()
        .unwrap();
    // Dropped at 5 ms: its place and its permit are taken, their answer is 5 ms away.
    assert!(tokio::time::timeout(Duration::from_millis(5), client.call("chat", &support::chat())).await.is_err());
    client.released().await;
    let key = gateway_core::ports::SourceKey::new("chat", "s1");
    let paced = gateway_core::ports::PacerGate::read(&*pacer, &key, &policy.pacer_params()).await.unwrap();
    assert_eq!(paced.inflight, 0, "the place went back (it would otherwise hold the account until its lease expires)");
    assert_eq!(quota.in_flight(&key), 0, "the permit went back");
    // And the next call is served.
    client.call("chat", &support::chat()).await.unwrap();
}
