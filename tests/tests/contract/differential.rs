//! The differential suite: random operation sequences replayed on the pure state machines of
//! gateway-core and on a backend, comparing every reply and the stored state after every step,
//! and holding the pure gate to the breaker's invariants at every step (the retry_after
//! contract, legal transitions only, the epoch moving by one per open and by nothing else, a
//! fenced record changing nothing, one live probe lease, sane window counts, an incarnation that
//! changes only when a gate is created). Steps may lose the backend's state (as a Redis restart
//! without persistence, or a flush, does); incarnations are random on each side, so replies are
//! compared with the backend's incarnations mapped to the pure side's.
//! The breaker: `Gate::apply` against `BreakerGate::apply`. The quota: `QuotaAccount` against
//! `QuotaGate`. Sequences come from a seeded proptest runner, so a run is repeatable, and a
//! failure shrinks to a short sequence printed step by step.

#![allow(clippy::unwrap_used)]

use crate::support::{Backend, Kind, START, runtime};
use gateway_core::breaker::{CircuitState, Fence, Gate, GateOp, GateParams, Reply, SuccessKind, Transition, Verdict};
use gateway_core::policy::{BreakerConfig, QuotaLimits};
use gateway_core::ports::QuotaDecision;
use gateway_core::quota::QuotaAccount;
use gateway_core::random::Incarnations;
use gateway_core::time::Timestamp;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use std::collections::HashMap;
use std::fmt::{Debug, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Operations per sequence.
pub const STEPS: usize = 40;

/// The breaker configurations sequences run under: the seed's, a small fast one that reaches
/// every channel within a few steps, the slow-call channel, SLA-adaptive open times, and the
/// old breaker's values (no rate channel, no escalation).
fn breaker(index: usize) -> BreakerConfig {
    let small = BreakerConfig {
        fail_threshold: Some(3),
        cooldown_s: Some(1.0),
        min_calls: Some(4),
        fail_rate: Some(0.5),
        window_s: Some(10.0),
        max_cooldown_s: Some(8.0),
        half_open_successes: Some(2),
        probe_ttl_s: Some(40.0),
        ..BreakerConfig::default()
    };
    match index {
        0 => BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() },
        1 => small,
        2 => BreakerConfig { slow_call_s: Some(2.0), slow_rate: Some(0.5), ..small },
        3 => BreakerConfig { sla_adaptive: Some(true), sla_min_cooldown_s: Some(1.5), sla_max_cooldown_s: Some(6.0), ..small },
        _ => BreakerConfig { min_calls: Some(1_000_000), max_cooldown_s: Some(1.0), ..small },
    }
}

/// One step: the time it advances, whether the backend first loses its state, then an operation
/// (`kind`, every `GateOp` drawn) and, for a record, which fence it carries (`epoch`: the last
/// admission's, the gate's current one, one before it, or one after it; the last admission's
/// incarnation, or the gate's current one).
#[derive(Clone, Copy, Debug)]
struct Step {
    advance_ms: u64,
    lose: bool,
    kind: u8,
    epoch: u8,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let advance = prop_oneof![3 => Just(0u64), 3 => 1..400u64, 2 => 900..1_200u64, 1 => 4_500..5_500u64, 1 => 7_000..9_000u64, 1 => 35_000..45_000u64];
    let step = (advance, proptest::bool::weighted(0.03), 0u8..9, 0u8..8);
    proptest::collection::vec(step.prop_map(|(advance_ms, lose, kind, epoch)| Step { advance_ms, lose, kind, epoch }), STEPS)
}

/// The gate operation of `step`, with fences resolved against the pure gate now and the last
/// admission (`admitted`).
fn gate_op(step: Step, gate: &Gate, admitted: Fence) -> GateOp {
    let epoch = match step.epoch % 4 {
        0 => admitted.epoch,
        1 => gate.epoch,
        2 => gate.epoch.saturating_sub(1),
        _ => gate.epoch + 1,
    };
    let incarnation = if step.epoch < 4 { admitted.incarnation } else { gate.incarnation };
    let fence = Fence { incarnation, epoch };
    match step.kind {
        0 | 1 => GateOp::TryEnter,
        2 => GateOp::Success { fence, kind: SuccessKind::Real },
        3 => GateOp::Success { fence, kind: SuccessKind::Slow },
        4 => GateOp::Success { fence, kind: SuccessKind::Unusable },
        5 | 6 => GateOp::Failure { fence },
        7 => GateOp::Release { fence },
        _ => GateOp::ForceOpen,
    }
}

/// The pure side's incarnations and the backend's, paired as they appear (both sides create a
/// gate, or an account, at the same step).
#[derive(Default)]
struct Paired {
    pairs: HashMap<u64, u64>,
}

impl Paired {
    /// The backend's incarnation for the pure side's `ours` (one the backend never had: itself).
    fn theirs(&self, ours: u64) -> u64 {
        self.pairs.get(&ours).copied().unwrap_or(ours)
    }

    /// Pairs `ours` with `theirs` on first sight; the pure side's name for `theirs`.
    fn ours(&mut self, ours: u64, theirs: u64) -> u64 {
        if ours != 0 && theirs != 0 {
            self.pairs.entry(ours).or_insert(theirs);
        }
        match self.pairs.iter().find(|(_, t)| **t == theirs) {
            Some((o, _)) => *o,
            None if theirs == 0 => 0,
            None => u64::MAX,
        }
    }

    fn op(&self, op: GateOp) -> GateOp {
        let map = |fence: Fence| Fence { incarnation: self.theirs(fence.incarnation), ..fence };
        match op {
            GateOp::Success { fence, kind } => GateOp::Success { fence: map(fence), kind },
            GateOp::Failure { fence } => GateOp::Failure { fence: map(fence) },
            GateOp::Release { fence } => GateOp::Release { fence: map(fence) },
            other => other,
        }
    }
}

/// How many threads a run of sequences is split over, each with its own runtime, backend and
/// seeded runner: the cases wait on round trips to Redis one at a time, so a two-core machine
/// runs several at once.
const SHARDS: u8 = 4;

/// Runs `cases` sequences split over [`SHARDS`] threads: `shard` gets a seeded runner of its
/// share (shard 0's draws what one runner of all `cases` drew first, the others their own seed)
/// and runs its sequences on it. Panics with every failing shard's shrunk sequence.
pub(crate) fn in_shards<V: Debug>(cases: u32, shard: impl Fn(TestRunner) -> Result<(), TestError<V>> + Sync) {
    let shard = &shard;
    let failures: Vec<String> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..SHARDS).map(|i| scope.spawn(move || shard(runner(i, cases)).map_err(|e| e.to_string()))).collect();
        let results = threads.into_iter().map(|t| t.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        results.enumerate().filter_map(|(i, r)| r.err().map(|e| format!("shard {i} of {SHARDS}: {e}"))).collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Shard `i`'s runner: its share of `cases` (shard 0 takes the remainder), seeded by `i`.
fn runner(i: u8, cases: u32) -> TestRunner {
    let share = cases / u32::from(SHARDS) + if i == 0 { cases % u32::from(SHARDS) } else { 0 };
    let config = Config { cases: share, failure_persistence: None, ..Config::default() };
    let rng = match i {
        0 => TestRng::deterministic_rng(RngAlgorithm::ChaCha),
        _ => TestRng::from_seed(RngAlgorithm::ChaCha, &[i; 32]),
    };
    TestRunner::new_with_rng(config, rng)
}

pub(crate) fn fresh_source() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("d{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// `cases` random sequences of [`STEPS`] gate operations on the pure gate and on `kind`.
pub fn breaker_sequences(kind: Kind<'_>, cases: u32) {
    let strategy = (0usize..5, 0u32..4, steps());
    in_shards(cases, |mut runner| {
        let rt = runtime();
        let backend = rt.block_on(Backend::new(kind));
        runner.run(&strategy, |(config, concurrency, steps)| rt.block_on(breaker_sequence(&backend, config, concurrency, &steps)))
    });
}

async fn breaker_sequence(b: &Backend, config: usize, concurrency: u32, steps: &[Step]) -> Result<(), TestCaseError> {
    let policy = breaker(config).resolve("differential.breaker").unwrap();
    let p = GateParams::new(&policy, concurrency, Duration::from_secs(30), Duration::from_secs(30));
    let key = b.key(&fresh_source());
    // The pure gate as a backend stores it: none yet.
    let (mut gate, mut now, mut admitted) = (Gate::default(), START, Fence { incarnation: 0, epoch: 0 });
    let (incarnations, mut paired) = (Incarnations::seeded(u64::from(concurrency)), Paired::default());
    let mut trace = format!("breaker {config}, concurrency {concurrency}\n");
    for (i, &step) in steps.iter().enumerate() {
        now = now.saturating_add(Duration::from_millis(step.advance_ms));
        b.clock.set(now);
        if step.lose {
            gate = Gate::default();
            b.lose(std::slice::from_ref(&key)).await;
            let _ = writeln!(trace, "step {i}: the backend loses the gate");
        }
        let op = gate_op(step, &gate, admitted);
        let before = gate;
        let expected = gate.apply_stored(&p, op, now, || incarnations.draw());
        invariants(&before, &gate, &p, op, &expected, now).map_err(|e| TestCaseError::fail(format!("{trace}step {i} {op:?}: {e}")))?;
        let got = b.gates.apply(&key, &p, paired.op(op)).await.map_err(|e| TestCaseError::fail(format!("{trace}step {i} {op:?}: {e}")))?;
        let got = Reply { incarnation: paired.ours(expected.incarnation, got.incarnation), ..got };
        if op == GateOp::TryEnter {
            admitted = expected.fence();
        }
        let _ = writeln!(trace, "step {i}: +{} ms {op:?} → {expected:?}", step.advance_ms);
        if got != expected {
            return Err(TestCaseError::fail(format!("{trace}the backend replied {got:?}\nthe gate replied  {expected:?}")));
        }
        let stored = b.snapshot(&key).await;
        let stored = Gate { incarnation: paired.ours(gate.incarnation, stored.incarnation), ..stored };
        if stored != gate {
            return Err(TestCaseError::fail(format!("{trace}the backend holds {stored:?}\nthe gate holds     {gate:?}")));
        }
    }
    let wait = b.gates.retry_after(&[(key, p.clone())]).await.unwrap();
    prop_assert_eq!(wait, gate.retry_after(&p, now), "retry_after after\n{}", trace);
    Ok(())
}

/// The breaker's invariants over one operation of the pure gate: `before` → `after`, answered
/// `reply` at `now`.
fn invariants(before: &Gate, after: &Gate, p: &GateParams, op: GateOp, reply: &Reply, now: Timestamp) -> Result<(), String> {
    let max = Duration::from_millis(p.max_cooldown_ms());
    let check = |ok: bool, what: &str| if ok { Ok(()) } else { Err(format!("{what}: {before:?} → {after:?}, {reply:?}")) };
    check(reply.retry_after <= max, "retry_after above max_cooldown")?;
    check(reply.state == CircuitState::Open || reply.retry_after.is_zero(), "retry_after must be 0 unless OPEN")?;
    check(
        (reply.state, reply.incarnation, reply.epoch) == (after.state, after.incarnation, after.epoch),
        "the reply is not the gate's state",
    )?;
    check(
        after.incarnation == before.incarnation || (before.incarnation == 0 && op.fence().is_none() && after.incarnation != 0),
        "the incarnation changed, other than by creating a gate",
    )?;
    check(op.fence().is_none_or(|f| f == before.fence()) || reply.fenced, "a record under another fence was not fenced")?;
    check(reply.verdict.is_some() == (op == GateOp::TryEnter), "only TryEnter, and every TryEnter, has a verdict")?;
    match reply.transition {
        Some(Transition { from, to, .. }) => {
            check((from, to) == (before.state, after.state), "the transition is not the change")?;
            check(Transition::is_legal(from, to), "an illegal transition")?;
            check(after.epoch == before.epoch + u64::from(to == CircuitState::Open), "the epoch moves by one on every open only")?;
        }
        None => check((after.state, after.epoch) == (before.state, before.epoch), "the state changed without a transition")?,
    }
    check(!reply.fenced || after == before, "a fenced record changed the gate")?;
    match reply.verdict {
        Some(Verdict::Allowed) => check(before.state == CircuitState::Closed, "only CLOSED allows")?,
        Some(Verdict::Probe) => check(!before.lease_live(now) && after.lease_live(now), "a probe while a lease is live")?,
        Some(Verdict::Denied) => {
            check(before.state != CircuitState::Closed, "CLOSED never denies")?;
            // An OPEN gate denies until open_until, naming the exact wait; past it, or past a
            // HALF_OPEN lease's end, the caller gets the probe.
            check(before.state != CircuitState::Open || now < before.open_until, "an OPEN gate past open_until denied")?;
            check(before.state != CircuitState::HalfOpen || before.lease_live(now), "an expired probe lease was not reissued")?;
            let exact = before.open_until.saturating_since(now).min(max);
            check(
                reply.state != CircuitState::Open || (reply.retry_after == exact && !exact.is_zero()),
                "an OPEN denial's wait is not open_until − now",
            )?;
        }
        None => {}
    }
    // A record at the current epoch on an OPEN gate changes nothing.
    check(!(op.fence().is_some() && before.state == CircuitState::Open) || after == before, "a record changed an OPEN gate")?;
    check(after.f0 <= after.a0 && after.f1 <= after.a1 && after.s0 <= after.a0 && after.s1 <= after.a1, "window counts exceed attempts")
}

/// The quota account's limits sequences run under.
fn quota_limits(max_concurrency: Option<u32>, rpm: Option<u32>, tpm: Option<u32>) -> QuotaLimits {
    QuotaLimits { max_concurrency, rpm, tpm, permit_ttl: Duration::from_secs(30) }
}

/// `cases` random sequences of [`STEPS`] quota operations on `QuotaAccount` and on `kind`:
/// acquire (with an estimate), settle and release of a permit granted earlier, with time
/// passing; every decision (granted, or the refusing limit and its hint) and the in-flight
/// count after every step must agree.
pub fn quota_sequences(kind: Kind<'_>, cases: u32) {
    let limit = |range: std::ops::Range<u32>| proptest::option::of(range);
    // An op of 4 loses the backend's state first (about one step in 30).
    let op = prop_oneof![29 => 0u8..4, 1 => Just(4u8)];
    let step = (prop_oneof![2 => Just(0u64), 2 => 1..3_000u64, 1 => 20_000..40_000u64], op, 0usize..8, 0u32..400);
    let strategy = (limit(1..4), limit(1..6), limit(200..1_000), proptest::collection::vec(step, STEPS));
    in_shards(cases, |mut runner| {
        let rt = runtime();
        let backend = rt.block_on(Backend::new(kind));
        runner.run(&strategy, |(c, rpm, tpm, steps)| rt.block_on(quota_sequence(&backend, quota_limits(c, rpm, tpm), &steps)))
    });
}

async fn quota_sequence(b: &Backend, limits: QuotaLimits, steps: &[(u64, u8, usize, u32)]) -> Result<(), TestCaseError> {
    let key = b.key(&fresh_source());
    let mut account = QuotaAccount::new();
    let incarnations = Incarnations::seeded(limits.rpm.map_or(0, u64::from));
    let mut now: Timestamp = START;
    // Permits granted so far: the account's (incarnation, id) and the backend's permit; those of
    // an account the backend lost stay, and their settles and releases must change nothing.
    let mut permits = Vec::new();
    let mut trace = format!("{limits:?}\n");
    for (i, &(advance_ms, kind, pick, tokens)) in steps.iter().enumerate() {
        now = now.saturating_add(Duration::from_millis(advance_ms));
        b.clock.set(now);
        if kind == 4 {
            account = QuotaAccount::new();
            b.lose(std::slice::from_ref(&key)).await;
            let _ = writeln!(trace, "step {i}: the backend loses the account");
        }
        match (kind, permits.is_empty()) {
            (0 | 1 | 4, _) | (_, true) => {
                let expected = account.acquire(&limits, tokens, now, incarnations.draw());
                let got = b.quota.acquire(&key, &limits, tokens).await.map_err(|e| TestCaseError::fail(format!("{trace}step {i}: {e}")))?;
                let _ = writeln!(trace, "step {i}: +{advance_ms} ms acquire {tokens} → {expected:?}");
                match (expected, got) {
                    (Ok(id), QuotaDecision::Granted(permit)) => permits.push((id, permit)),
                    (Err(refusal), QuotaDecision::Refused { limit, retry_after })
                        if refusal.limit == limit && refusal.retry_after == retry_after => {}
                    (_, got) => return Err(TestCaseError::fail(format!("{trace}the backend decided {got:?}"))),
                }
            }
            (2, false) => {
                let ((incarnation, id), permit) = &permits[pick % permits.len()];
                account.settle(*incarnation, *id, tokens);
                b.quota.settle(permit, tokens).await.unwrap();
                let _ = writeln!(trace, "step {i}: +{advance_ms} ms settle permit {id} of {incarnation} at {tokens}");
            }
            (_, false) => {
                let ((incarnation, id), permit) = permits.swap_remove(pick % permits.len());
                account.release(incarnation, id);
                b.quota.release(&permit).await.unwrap();
                let _ = writeln!(trace, "step {i}: +{advance_ms} ms release permit {id} of {incarnation}");
            }
        }
        let (expected, got) = (account.in_flight(now), b.quota_in_flight(&key).await);
        prop_assert_eq!(got, expected, "in flight after\n{}", trace);
    }
    Ok(())
}
