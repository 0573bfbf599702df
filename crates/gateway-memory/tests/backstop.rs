//! The backstop: a shared backend that goes away and comes back, in both modes. The shared
//! backend here is a memory one behind a switch (`Flaky`), on an injected clock.

#![allow(clippy::unwrap_used)]

use async_trait::async_trait;
use gateway_core::aimd::{AccountReading, PacerParams};
use gateway_core::breaker::{CircuitState, Gate, GateOp, GateParams, Reply, SuccessKind};
use gateway_core::outcome::AimdEffect;
use gateway_core::policy::{BreakerConfig, QuotaLimits};
use gateway_core::ports::{BackendError, BreakerGate, PaceDecision, PaceLease, PacerGate, Permit, QuotaDecision, QuotaGate, SourceKey};
use gateway_core::request::RateSignal;
use gateway_core::time::{Clock, ManualClock, Timestamp};
use gateway_memory::backstop::{Backstop, BackstopGates, BackstopPacer, BackstopQuota, LOCAL_LEASE, OnUnavailable};
use gateway_memory::{MemoryGates, MemoryPacer, MemoryQuota};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

const RETRY: Duration = Duration::from_millis(200);

/// A memory backend that answers `BackendUnavailable` while `down`, counting what it is asked.
struct Flaky {
    gates: MemoryGates,
    quota: MemoryQuota,
    pacer: MemoryPacer,
    down: AtomicBool,
    asked: AtomicU32,
}

impl Flaky {
    fn check(&self, key: &SourceKey) -> Result<(), BackendError> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        if self.down.load(Ordering::Relaxed) {
            return Err(BackendError::BackendUnavailable { backend: "flaky", key: key.to_string(), detail: "down".into() });
        }
        Ok(())
    }
}

#[async_trait]
impl BreakerGate for Flaky {
    async fn apply(&self, key: &SourceKey, params: &GateParams, op: GateOp) -> Result<Reply, BackendError> {
        self.check(key)?;
        self.gates.apply(key, params, op).await
    }
    async fn read(&self, key: &SourceKey) -> Result<Gate, BackendError> {
        self.check(key)?;
        self.gates.read(key).await
    }
    async fn retry_after(&self, gates: &[(SourceKey, GateParams)]) -> Result<Duration, BackendError> {
        self.check(&gates[0].0)?;
        self.gates.retry_after(gates).await
    }
    async fn forget(&self, key: &SourceKey) -> Result<(), BackendError> {
        self.check(key)?;
        self.gates.forget(key).await
    }
}

#[async_trait]
impl QuotaGate for Flaky {
    async fn acquire(&self, key: &SourceKey, limits: &QuotaLimits, tokens: u32) -> Result<QuotaDecision, BackendError> {
        self.check(key)?;
        self.quota.acquire(key, limits, tokens).await
    }
    async fn settle(&self, permit: &Permit, tokens: u32) -> Result<(), BackendError> {
        self.check(&permit.key)?;
        self.quota.settle(permit, tokens).await
    }
    async fn release(&self, permit: &Permit) -> Result<(), BackendError> {
        self.check(&permit.key)?;
        self.quota.release(permit).await
    }
}

#[async_trait]
impl PacerGate for Flaky {
    async fn try_acquire(&self, key: &SourceKey, params: &PacerParams, tokens: u32) -> Result<PaceDecision, BackendError> {
        self.check(key)?;
        self.pacer.try_acquire(key, params, tokens).await
    }
    async fn release(
        &self,
        lease: &PaceLease,
        effect: AimdEffect,
        rate: Option<&RateSignal>,
        params: &PacerParams,
    ) -> Result<f64, BackendError> {
        self.check(&lease.key)?;
        self.pacer.release(lease, effect, rate, params).await
    }
    async fn read(&self, key: &SourceKey, params: &PacerParams) -> Result<AccountReading, BackendError> {
        self.check(key)?;
        self.pacer.read(key, params).await
    }
}

struct Setup {
    clock: Arc<ManualClock>,
    shared: Arc<Flaky>,
    backstop: Arc<Backstop>,
    gates: BackstopGates,
    quota: BackstopQuota,
    pacer: BackstopPacer,
}

fn setup(mode: OnUnavailable) -> Setup {
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let shared = Arc::new(Flaky {
        gates: MemoryGates::new(clock.clone()),
        quota: MemoryQuota::new(clock.clone()),
        pacer: MemoryPacer::new(clock.clone()),
        down: AtomicBool::new(false),
        asked: AtomicU32::new(0),
    });
    let backstop = Backstop::new(mode, clock.clone(), RETRY);
    Setup {
        gates: BackstopGates::new(shared.clone(), backstop.clone()),
        quota: BackstopQuota::new(shared.clone(), backstop.clone()),
        pacer: BackstopPacer::new(shared.clone(), backstop.clone()),
        clock,
        shared,
        backstop,
    }
}

impl Setup {
    fn advance(&self, ms: u64) {
        self.clock.set(self.clock.now().saturating_add(Duration::from_millis(ms)));
    }
    fn down(&self, down: bool) {
        self.shared.down.store(down, Ordering::Relaxed);
    }
    fn asked(&self) -> u32 {
        self.shared.asked.load(Ordering::Relaxed)
    }
}

fn params() -> GateParams {
    let policy =
        BreakerConfig { fail_threshold: Some(2), cooldown_s: Some(60.0), ..BreakerConfig::default() }.resolve("b.breaker").unwrap();
    GateParams::new(&policy, 0, Duration::from_secs(30), Duration::from_secs(30))
}

fn unavailable<T: std::fmt::Debug>(result: &Result<T, BackendError>) -> bool {
    matches!(result, Err(BackendError::BackendUnavailable { .. }))
}

#[tokio::test(start_paused = true)]
async fn fail_closed_refuses_admission_asks_again_once_per_interval_and_comes_back() {
    let s = setup(OnUnavailable::FailClosed);
    let (key, p) = (SourceKey::new("chat", "s1"), params());
    let admitted = s.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    s.down(true);
    assert!(unavailable(&s.gates.apply(&key, &p, GateOp::TryEnter).await));
    assert!(s.backstop.is_degraded());
    // Within the interval the backend is not asked again: nobody waits out its timeout.
    let asked = s.asked();
    for _ in 0..10 {
        assert!(unavailable(&s.gates.apply(&key, &p, GateOp::TryEnter).await));
    }
    assert_eq!(s.asked(), asked);
    // A record of an attempt the backend admitted waits for it (RECORD_WAIT), then is dropped
    // and counted.
    let began = tokio::time::Instant::now();
    assert!(unavailable(&s.gates.apply(&key, &p, GateOp::Success { fence: admitted.fence(), kind: SuccessKind::Real }).await));
    assert_eq!(began.elapsed(), gateway_memory::backstop::RECORD_WAIT);
    s.advance(200);
    assert!(unavailable(&s.gates.apply(&key, &p, GateOp::TryEnter).await));
    assert_eq!(s.asked(), asked + 1, "one operation per interval asks again");
    s.down(false);
    s.advance(200);
    assert!(s.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap().is_admitted());
    assert!(!s.backstop.is_degraded());
    let stats = s.backstop.stats();
    assert_eq!((stats.outages, stats.failed_closed, stats.dropped_records, stats.local_admissions), (1, 12, 1, 0));
    assert_eq!(stats.periods.len(), 1);
    let (start, end) = stats.periods[0];
    assert_eq!(end.unwrap().saturating_since(start), Duration::from_millis(400));
}

#[tokio::test(start_paused = true)]
async fn local_admits_on_its_own_gate_seeded_from_the_last_state_read() {
    let s = setup(OnUnavailable::Local);
    let (key, p) = (SourceKey::new("chat", "s1"), params());
    let (dead, healthy) = (SourceKey::new("chat", "dead"), SourceKey::new("chat", "ok"));
    let shared_admission = s.gates.apply(&healthy, &p, GateOp::TryEnter).await.unwrap();
    // The dead source's gate is OPEN (60 s) in the shared backend when it goes away.
    s.gates.apply(&dead, &p, GateOp::ForceOpen).await.unwrap();
    s.advance(10_000);
    s.down(true);
    let denied = s.gates.apply(&dead, &p, GateOp::TryEnter).await.unwrap();
    assert_eq!((denied.is_admitted(), denied.state), (false, CircuitState::Open), "still OPEN, as last read");
    assert_eq!(denied.retry_after, Duration::from_secs(50), "until the open_until it was read with");
    // A healthy source is admitted by a gate of the process's own, under its own incarnation.
    let local = s.gates.apply(&healthy, &p, GateOp::TryEnter).await.unwrap();
    assert!(local.is_admitted());
    assert_ne!(local.incarnation, shared_admission.incarnation);
    // Its records count locally; the shared admission's are dropped (the shared gate is away).
    for _ in 0..2 {
        let again = s.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap();
        s.gates.apply(&key, &p, GateOp::Failure { fence: again.fence() }).await.unwrap();
    }
    assert_eq!(s.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap().state, CircuitState::Open, "opened locally");
    assert!(unavailable(&s.gates.apply(&healthy, &p, GateOp::Failure { fence: shared_admission.fence() }).await));
    // Past the dead source's open_until, the local gate grants one probe.
    s.advance(50_000);
    assert!(s.gates.apply(&dead, &p, GateOp::TryEnter).await.unwrap().is_probe());
    // Redis answers again: at the next ask (within the interval), back on the shared state, where
    // the local opens never happened.
    s.down(false);
    assert_eq!(s.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap().state, CircuitState::Open, "not asked again yet");
    s.advance(200);
    let back = s.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    assert_eq!((back.state, back.is_admitted()), (CircuitState::Closed, true));
    assert!(!s.backstop.is_degraded());
    // A record of a local admission made before the recovery still goes to the local gate.
    assert!(s.gates.apply(&healthy, &p, GateOp::Success { fence: local.fence(), kind: SuccessKind::Real }).await.is_ok());
    let stats = s.backstop.stats();
    assert_eq!((stats.outages, stats.failed_closed), (1, 0));
    assert!(stats.local_admissions >= 4, "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn a_new_outage_starts_the_local_state_afresh() {
    let s = setup(OnUnavailable::Local);
    let (key, p) = (SourceKey::new("chat", "s1"), params());
    s.down(true);
    s.gates.apply(&key, &p, GateOp::ForceOpen).await.unwrap();
    assert_eq!(s.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap().state, CircuitState::Open);
    s.down(false);
    s.advance(200);
    assert!(s.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap().is_admitted(), "the shared gate never opened");
    s.down(true);
    s.advance(200);
    let fresh = s.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    assert!(fresh.is_admitted(), "the last outage's local OPEN is gone: this one starts from the shared CLOSED");
    assert_eq!(s.backstop.stats().outages, 2);
}

#[tokio::test(start_paused = true)]
async fn local_quota_and_pacer_leases_find_their_way_back() {
    let s = setup(OnUnavailable::Local);
    let key = SourceKey::new("chat", "s1");
    let limits = QuotaLimits { max_concurrency: Some(1), rpm: None, tpm: None, permit_ttl: Duration::from_secs(60) };
    let pacer = PacerParams { ceiling: 4.0, lease_ttl: Duration::from_secs(60), limit_window: Duration::from_secs(60) };
    let QuotaDecision::Granted(shared_permit) = s.quota.acquire(&key, &limits, 5).await.unwrap() else { panic!("refused") };
    s.down(true);
    // The local quota starts empty: each process enforces the whole limit alone.
    let QuotaDecision::Granted(local_permit) = s.quota.acquire(&key, &limits, 5).await.unwrap() else { panic!("refused") };
    assert!(matches!(s.quota.acquire(&key, &limits, 5).await.unwrap(), QuotaDecision::Refused { .. }));
    s.quota.release(&local_permit).await.unwrap();
    assert!(matches!(s.quota.acquire(&key, &limits, 5).await.unwrap(), QuotaDecision::Granted(_)), "the local release freed it");
    assert!(unavailable(&s.quota.release(&shared_permit).await), "the shared permit's release is dropped");
    let PaceDecision::Granted(lease) = s.pacer.try_acquire(&key, &pacer, 1).await.unwrap() else { panic!("paced") };
    assert_ne!(lease.lease.id & LOCAL_LEASE, 0, "a local lease is marked");
    s.down(false);
    s.advance(200);
    // After the recovery the local lease still goes back to the local pacer.
    assert!(s.pacer.release(&lease, AimdEffect::Increase, None, &pacer).await.is_ok());
    assert_eq!(s.shared.pacer.in_flight(&key), 0, "the shared pacer never saw it");
    assert_eq!(s.backstop.stats().dropped_records, 1);
}

#[tokio::test(start_paused = true)]
async fn a_record_waits_for_the_backend_and_lands_when_it_answers() {
    let s = Arc::new(setup(OnUnavailable::FailClosed));
    let (key, p) = (SourceKey::new("chat", "s1"), params());
    let admitted = s.gates.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    s.down(true);
    assert!(unavailable(&s.gates.apply(&key, &p, GateOp::TryEnter).await));
    let waiting = {
        let s = s.clone();
        tokio::spawn(async move { s.gates.apply(&key, &p, GateOp::Failure { fence: admitted.fence() }).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished(), "the record waits while the backend cannot answer");
    s.down(false);
    s.advance(200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reply = waiting.await.unwrap().unwrap();
    assert!(!reply.fenced, "the record landed on the gate that admitted it");
    assert_eq!(s.shared.gates.snapshot(&SourceKey::new("chat", "s1")).unwrap().failures, 1);
    assert_eq!(s.backstop.stats().dropped_records, 0);
}

/// The shared backend's attempt gate as Redis's fails: whole, while `down`.
struct FlakyAttempts {
    made: gateway_core::combined::InOrder,
    shared: Arc<Flaky>,
}

#[async_trait]
impl gateway_core::combined::AttemptGate for FlakyAttempts {
    async fn admit(&self, ask: &gateway_core::combined::Admit<'_>) -> Result<gateway_core::combined::Admission, BackendError> {
        self.shared.check(ask.gate.key)?;
        self.made.admit(ask).await
    }

    async fn record(&self, records: &gateway_core::combined::Records<'_>) -> Result<gateway_core::combined::Recorded, BackendError> {
        self.shared.check(records.key().unwrap())?;
        self.made.record(records).await
    }

    fn carries_records(&self) -> bool {
        true
    }
}

#[tokio::test(start_paused = true)]
async fn a_carried_release_the_backend_cannot_take_comes_back_at_once_and_the_admission_goes_local() {
    use gateway_core::combined::{Admission, Admit, AttemptGate, GateAsk, GateRecord, InOrder, Records};
    use gateway_memory::backstop::BackstopAttempts;
    let s = setup(OnUnavailable::Local);
    let shared: Arc<dyn AttemptGate> = Arc::new(FlakyAttempts {
        made: InOrder { gates: s.shared.clone(), quota: s.shared.clone(), pacer: s.shared.clone() },
        shared: s.shared.clone(),
    });
    let (gates, quota, pacer) = (
        Arc::new(BackstopGates::new(s.shared.clone(), s.backstop.clone())),
        Arc::new(BackstopQuota::new(s.shared.clone(), s.backstop.clone())),
        Arc::new(BackstopPacer::new(s.shared.clone(), s.backstop.clone())),
    );
    let attempts = BackstopAttempts::new(shared, gates, quota, pacer, s.backstop.clone());
    assert!(attempts.carries_records(), "the backstop carries records as its shared backend does");
    let (ended, next, p) = (SourceKey::new("chat", "s1"), SourceKey::new("chat", "s2"), params());
    let ask = |key| Admit { pace: None, gate: GateAsk { key, params: &p }, permit: None, line: None };
    let Admission::Admitted { entry, .. } = attempts.admit(&ask(&ended)).await.unwrap() else { panic!("refused") };
    let success = GateOp::Success { fence: entry.fence(), kind: SuccessKind::Real };
    let records = Records { gate: Some(GateRecord { key: &ended, params: &p, op: success }), ..Records::default() };

    // Up: both made by the shared backend.
    let (recorded, admission) = attempts.record_then_admit(&records, &ask(&next)).await;
    assert!(!recorded.unwrap().gate.unwrap().fenced);
    assert!(matches!(admission, Ok(Admission::Admitted { .. })));
    assert_eq!(s.shared.gates.snapshot(&ended).unwrap().a1 + s.shared.gates.snapshot(&ended).unwrap().a0, 1);

    // Down: the records' error comes back at once (the client makes them on their own, off the
    // waiter's path), and the admission is made on the local state.
    s.down(true);
    let started = tokio::time::Instant::now();
    let (recorded, admission) = attempts.record_then_admit(&records, &ask(&next)).await;
    assert_eq!(started.elapsed(), Duration::ZERO, "the waiter's admission waited for the records");
    assert!(unavailable(&recorded), "{recorded:?}");
    assert!(matches!(admission, Ok(Admission::Admitted { .. })), "{admission:?}");
    assert!(s.backstop.is_degraded());
    // Degraded: the same, without asking the shared backend (no RECORD_WAIT on the waiter's path).
    let asked = s.asked();
    let (recorded, admission) = attempts.record_then_admit(&records, &ask(&next)).await;
    assert_eq!(started.elapsed(), Duration::ZERO, "the waiter's admission waited for the records");
    assert!(unavailable(&recorded), "{recorded:?}");
    assert!(matches!(admission, Ok(Admission::Admitted { .. })), "{admission:?}");
    assert_eq!(s.asked(), asked, "a degraded period asked the shared backend");
}
