//! The differential suite's pacer part: random sequences of acquires and releases, with time
//! passing, replayed on gateway-core's `AccountPacer` and on a backend's `PacerGate`. Every
//! decision (the lease with its generation, epoch, `n` and grant time, or the limit and
//! in-flight count that paced it), every limit after a release (to the last bit) and the
//! in-flight count after every step must agree. Sequences draw their 429 share, so some live in
//! bursts, refused ceilings and the paced regime below one in flight; releases carry random
//! rate-limit reports and acquires random token estimates, so some are refused by a reported
//! budget alone.

#![allow(clippy::unwrap_used)]

use crate::differential::{STEPS, fresh_source, in_shards};
use crate::support::{Backend, Kind, START, runtime};
use gateway_core::aimd::{AccountPacer, PacerParams};
use gateway_core::outcome::AimdEffect;
use gateway_core::ports::{PaceDecision, PaceLease};
use gateway_core::request::{RateReport, RateSignal};
use gateway_core::time::Timestamp;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::fmt::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Steps of a pacer sequence (more than a gate's: the regimes take a while to reach).
const PACER_STEPS: usize = STEPS * 3;

/// One step: time advanced (ms), acquire (0..3) or release (3..8), which lease, the release's
/// effect drawn against the sequence's 429 share (`roll` in 0..100), the release's rate report
/// (`rate`, see [`report`]) and the acquire's token estimate.
type Step = (u64, u8, usize, u8, u8, u16, u32);

/// `cases` random pacer sequences on `kind`.
pub fn pacer_sequences(kind: Kind<'_>, cases: u32) {
    let advance = prop_oneof![3 => Just(0u64), 3 => 1..40u64, 2 => 40..2_000u64, 1 => 5_000..9_000u64];
    let step = (advance, 0u8..8, 0usize..32, 0u8..100, 0u8..100, 0u16..1000, 0u32..3000);
    let strategy = (prop_oneof![Just(16.0), Just(3.0), Just(1.0)], 0u8..100, proptest::collection::vec(step, PACER_STEPS));
    let reached = Reached::default();
    in_shards(cases, |mut runner| {
        let rt = runtime();
        let backend = rt.block_on(Backend::new(kind));
        runner.run(&strategy, |(ceiling, share, steps)| rt.block_on(pacer_sequence(&backend, ceiling, share, &steps, &reached)))
    });
    // The regimes the rules differ in were compared, not only the plain one.
    let (below_one, held) = (reached.below_one.load(Ordering::Relaxed), reached.held.load(Ordering::Relaxed));
    let budget = reached.budget.load(Ordering::Relaxed);
    assert!(
        below_one > 0 && held > 0 && budget > 0,
        "sequences reached below one in flight {below_one} times, a held ceiling {held} times, a reported budget's refusal {budget} times"
    );
}

/// The rate signal a release carries, drawn from `rate`: none for 0..400; else a request report
/// (an advertised limit of 20 or none, 0..4 left, a reset of up to 3 s) and, for a third of
/// them, a token report (a limit of 5000, up to 3000 left).
pub(crate) fn report(rate: u16) -> Option<RateSignal> {
    if rate < 400 {
        return None;
    }
    let r = u64::from(rate);
    let requests = RateReport { limit: (r % 2 == 0).then_some(20), remaining: r % 5, reset: Duration::from_millis(r * 37 % 3000) };
    let tokens =
        (r % 3 == 0).then(|| RateReport { limit: Some(5000), remaining: r * 53 % 3000, reset: Duration::from_millis(r * 11 % 4000) });
    Some(RateSignal { requests: Some(requests), tokens })
}

/// Steps at which the core was in a regime of its own: below one in flight, held at a refused
/// ceiling.
#[derive(Default)]
struct Reached {
    below_one: AtomicU32,
    held: AtomicU32,
    /// Acquires refused with room under the limit, at or above one: a reported budget refused.
    budget: AtomicU32,
}

fn fail(trace: &str, i: usize, what: String) -> TestCaseError {
    TestCaseError::fail(format!("{trace}step {i}: {what}"))
}

fn effect(share: u8, roll: u8, kind: u8) -> AimdEffect {
    match (roll < share, kind % 4) {
        (true, _) => AimdEffect::Decrease,
        (false, 0) => AimdEffect::RoundTrip,
        (false, 1) => AimdEffect::Nothing,
        (false, _) => AimdEffect::Increase,
    }
}

async fn pacer_sequence(b: &Backend, ceiling: f64, share: u8, steps: &[Step], reached: &Reached) -> Result<(), TestCaseError> {
    let params = PacerParams { ceiling, lease_ttl: Duration::from_secs(5), limit_window: Duration::from_secs(60) };
    let key = b.key(&fresh_source());
    let mut core = AccountPacer::new(&params);
    let mut now: Timestamp = START;
    let mut leases: Vec<PaceLease> = Vec::new();
    let mut trace = format!("ceiling {ceiling}, 429 share {share} %\n");
    for (i, &(advance_ms, op, pick, roll, kind, rate, tokens)) in steps.iter().enumerate() {
        now = now.saturating_add(Duration::from_millis(advance_ms));
        b.clock.set(now);
        if op < 3 || leases.is_empty() {
            let expected = core.try_acquire(&params, tokens, now);
            let got = b.pacer.try_acquire(&key, &params, tokens).await.map_err(|e| fail(&trace, i, e.to_string()))?;
            let _ = writeln!(trace, "step {i}: +{advance_ms} ms acquire {tokens} tokens → {expected:?}");
            if let Err(paced) = expected
                && paced.limit >= 1.0
                && f64::from(paced.inflight) < paced.limit
            {
                reached.budget.fetch_add(1, Ordering::Relaxed);
            }
            match (expected, got) {
                (Ok(lease), PaceDecision::Granted(granted)) if granted.lease == lease => leases.push(granted),
                (Err(paced), PaceDecision::Paced(got))
                    if got.inflight == paced.inflight && got.limit.to_bits() == paced.limit.to_bits() && got.ready_in == paced.ready_in => {
                }
                (_, got) => return Err(fail(&trace, i, format!("the backend decided {got:?}"))),
            }
        } else {
            let lease = leases.swap_remove(pick % leases.len());
            let effect = effect(share, roll, kind);
            let signal = report(rate);
            let expected = core.release(lease.lease, effect, signal.as_ref(), &params, now);
            let got = b.pacer.release(&lease, effect, signal.as_ref(), &params).await.map_err(|e| fail(&trace, i, e.to_string()))?;
            let _ = writeln!(trace, "step {i}: +{advance_ms} ms release {:?} {effect:?} {signal:?} → {expected}", lease.lease);
            if got.to_bits() != expected.to_bits() {
                return Err(fail(&trace, i, format!("the backend's limit is {got}")));
            }
        }
        let read = b.pacer.read(&key, &params).await.map_err(|e| fail(&trace, i, e.to_string()))?;
        prop_assert_eq!(read.inflight, core.inflight(now), "in flight after\n{}", trace);
        prop_assert_eq!(read.limit.to_bits(), core.limit().to_bits(), "limit after\n{}", trace);
        prop_assert_eq!(read.learned, core.learned_ceiling(), "refused ceiling after\n{}", trace);
        if core.limit() < 1.0 {
            reached.below_one.fetch_add(1, Ordering::Relaxed);
        }
        if core.learned_ceiling().is_some_and(|w| w.held) {
            reached.held.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}
