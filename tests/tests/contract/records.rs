//! The differential suite's combined part: random attempts admitted (the account's place, the
//! gate, a quota permit) and ended, on two backends of one kind side by side, each on a scope of
//! its own and the same times. One admits each attempt and makes its records with the backend's
//! `AttemptGate` (on Redis `RedisAttempts`: `admit.lua` and `settle.lua`, one script each, and
//! one end in four with the next admission carried in `handover.lua`); the other with the ports' own operations one after another
//! (`InOrder`, the reference: each of those operations is held to the pure rules by the other
//! sequences). Every admission, every record's answer (the limit
//! after the release, to the last bit, and the gate's reply) and the state after every step (the
//! gate, the account's limit, in-flight count and refused ceiling, the permits in flight) must
//! agree. Incarnations are drawn at random per handle, so they are compared by whether a record
//! named the current one, not by value.

#![allow(clippy::unwrap_used)]

use crate::differential::{fresh_source, in_shards};
use crate::pacer_sequences::report;
use crate::support::{Backend, Kind, START, params, runtime};
use gateway_core::aimd::PacerParams;
use gateway_core::breaker::Reply;
use gateway_core::combined::{
    Admission, Admit, AttemptGate, Freed, GateAsk, GateRecord, InLine, InOrder, PaceAsk, PaceRecord, PermitAsk, PermitRecord, Records,
};
use gateway_core::outcome::OutcomeClass;
use gateway_core::policy::{BreakerConfig, QuotaLimits};
use gateway_core::ports::{PaceLease, Permit, SourceKey};
use gateway_core::time::Timestamp;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

/// One step: time advanced (ms), admit (0..4), end (4..7) or end and admit in one (7), which
/// attempt, the outcome's class, the rate report and the tokens.
type Step = (u64, u8, usize, u8, u16, u32);

const CLASSES: [OutcomeClass; 6] = [
    OutcomeClass::Success,
    OutcomeClass::Success,
    OutcomeClass::Transient,
    OutcomeClass::RateLimited,
    OutcomeClass::ResultInvalid,
    OutcomeClass::SourceDead,
];

/// `cases` random sequences on two backends of `kind`: one's attempts made by its `AttemptGate`,
/// the other's one by one.
pub fn records_sequences(kind: Kind<'_>, cases: u32) {
    let advance = prop_oneof![3 => Just(0u64), 3 => 1..40u64, 2 => 40..2_000u64, 1 => 5_000..9_000u64];
    let step = (advance, 0u8..8, 0usize..32, 0u8..6, 0u16..1000, 0u32..3000);
    let strategy = proptest::collection::vec(step, 60);
    in_shards(cases, |mut runner| {
        let rt = runtime();
        let (combined, reference) = rt.block_on(async { (Backend::new(kind).await, Backend::new(kind).await) });
        runner.run(&strategy, |steps| rt.block_on(records_sequence(&combined, &reference, &steps)))
    });
}

/// An attempt admitted on one backend: what it holds.
struct Held {
    lease: PaceLease,
    entry: Reply,
    permit: Option<Permit>,
}

/// One side of the comparison: a backend, its keys and where its attempts go.
struct Side<'a> {
    b: &'a Backend,
    gate: SourceKey,
    account: SourceKey,
    attempts: Arc<dyn AttemptGate>,
    held: Vec<Held>,
}

impl Side<'_> {
    /// Admits an attempt through the side's `AttemptGate` (the account, the gate, the permit, a
    /// refusal handing back what was taken); what it came to, as text.
    async fn admit(&mut self, pacer: &PacerParams, limits: &QuotaLimits, tokens: u32) -> String {
        let p = params(breaker(), 3);
        let ask = ask(&self.gate, &self.account, (pacer, limits, &p), tokens);
        let admission = self.attempts.admit(&ask).await.unwrap();
        self.admitted(admission)
    }

    /// What `admission` came to, as text; an attempt admitted is held.
    fn admitted(&mut self, admission: Admission) -> String {
        // Without the keys (each side has its own scope) and the incarnations (drawn per handle).
        let text = match &admission {
            Admission::Admitted { lease, entry, permit } => {
                format!("admitted {:?} {} permit {:?}", lease.as_ref().map(|l| l.lease), shown(entry), permit.as_ref().map(|p| p.id))
            }
            Admission::Paced(paced) => format!("paced {paced:?}"),
            Admission::Denied(entry) => format!("denied {}", shown(entry)),
            Admission::Refused { entry, limit, retry_after } => format!("refused {} {limit:?} {retry_after:?}", shown(entry)),
        };
        if let Admission::Admitted { lease: Some(lease), entry, permit } = admission {
            self.held.push(Held { lease, entry, permit });
        }
        text
    }

    /// Ends attempt `pick` with `class`: its records through the side's `AttemptGate`; with
    /// `then_admit`, the next attempt's admission in the same operation (`record_then_admit`:
    /// a release carried by the next waiter). The answers, as text.
    async fn end(&mut self, pick: usize, ended: (OutcomeClass, u16, u32), pacer: &PacerParams, then_admit: Option<&QuotaLimits>) -> String {
        let (class, rate, tokens) = ended;
        let held = self.held.swap_remove(pick % self.held.len());
        let p = params(breaker(), 3);
        let signal = report(rate);
        let op = class.effects().gate_op(&held.entry, Duration::ZERO, None);
        let records = Records {
            pace: Some(PaceRecord { lease: &held.lease, effect: class.effects().aimd, rate: signal.as_ref(), params: pacer }),
            gate: op.map(|op| GateRecord { key: &self.gate, params: &p, op }),
            permit: held
                .permit
                .as_ref()
                .map(|permit| PermitRecord { permit, actual_tokens: (!tokens.is_multiple_of(3)).then_some(tokens) }),
            // Some settles hand what they free on in the line (a message, no state the rules read).
            freed: (!tokens.is_multiple_of(7)).then_some(Freed { waiting_here: tokens.is_multiple_of(5), grace: Duration::ZERO }),
        };
        let shown_recorded = |recorded: gateway_core::combined::Recorded| {
            format!("limit {:?} gate {:?}", recorded.limit.map(f64::to_bits), recorded.gate.as_ref().map(shown))
        };
        let Some(limits) = then_admit else { return shown_recorded(self.attempts.record(&records).await.unwrap()) };
        let ask = ask(&self.gate, &self.account, (pacer, limits, &p), tokens / 2);
        let (recorded, admission) = self.attempts.record_then_admit(&records, &ask).await;
        let recorded = shown_recorded(recorded.unwrap());
        format!("{recorded}, then {}", self.admitted(admission.unwrap()))
    }

    /// The state after a step, as text.
    async fn state(&self, pacer: &PacerParams) -> String {
        let gate = self.b.snapshot(&self.gate).await;
        let reading = self.b.pacer.read(&self.account, pacer).await.unwrap();
        let permits = self.b.quota_in_flight(&self.gate).await;
        format!(
            "{:?} epoch {} failures {} streak {} window {:?}; limit {} in flight {} ceiling {:?}; permits {permits}",
            gate.state,
            gate.epoch,
            gate.failures,
            gate.streak,
            (gate.a0, gate.f0, gate.a1, gate.f1),
            reading.limit.to_bits(),
            reading.inflight,
            reading.learned
        )
    }
}

/// An attempt's admission on `gate` and `account`: every other asks for no permit, as a source
/// without local limits does; some stand in the line across processes.
fn ask<'a>(
    gate: &'a SourceKey,
    account: &'a SourceKey,
    (pacer, limits, p): (&'a PacerParams, &'a QuotaLimits, &'a gateway_core::breaker::GateParams),
    tokens: u32,
) -> Admit<'a> {
    Admit {
        pace: Some(PaceAsk { key: account, params: pacer, tokens }),
        gate: GateAsk { key: gate, params: p },
        permit: tokens.is_multiple_of(2).then_some(PermitAsk { key: gate, limits, tokens }),
        // A standing, no state the rules read.
        line: tokens.is_multiple_of(3).then_some(InLine {
            waited: Duration::from_millis(u64::from(tokens)),
            others: tokens.is_multiple_of(2).then_some(Duration::from_millis(7)),
            lasts: Duration::from_secs(3),
        }),
    }
}

/// A reply without its incarnation (drawn at random per handle).
fn shown(reply: &Reply) -> String {
    format!(
        "{:?} {:?} epoch {} retry {:?} {:?} fenced {}",
        reply.verdict, reply.state, reply.epoch, reply.retry_after, reply.transition, reply.fenced
    )
}

/// A breaker that opens within a few steps: every record's kind is met.
fn breaker() -> BreakerConfig {
    BreakerConfig {
        fail_threshold: Some(3),
        cooldown_s: Some(1.0),
        min_calls: Some(4),
        max_cooldown_s: Some(8.0),
        ..BreakerConfig::default()
    }
}

fn fail(trace: &str, i: usize, what: String) -> TestCaseError {
    TestCaseError::fail(format!("{trace}step {i}: {what}"))
}

async fn records_sequence(combined: &Backend, reference: &Backend, steps: &[Step]) -> Result<(), TestCaseError> {
    let pacer = PacerParams { ceiling: 6.0, lease_ttl: Duration::from_secs(5), limit_window: Duration::from_secs(60) };
    let limits = QuotaLimits { max_concurrency: Some(4), rpm: Some(40), tpm: Some(20_000), permit_ttl: Duration::from_secs(30) };
    let (gate, account) = (fresh_source(), fresh_source());
    let in_order = Arc::new(InOrder { gates: reference.gates.clone(), quota: reference.quota.clone(), pacer: reference.pacer.clone() });
    let mut one = Side {
        b: combined,
        gate: combined.key(&gate),
        account: combined.key(&account),
        attempts: combined.attempts.clone(),
        held: Vec::new(),
    };
    let mut two = Side { b: reference, gate: reference.key(&gate), account: reference.key(&account), attempts: in_order, held: Vec::new() };
    let mut now: Timestamp = START;
    let mut trace = String::new();
    for (i, &(advance_ms, op, pick, class, rate, tokens)) in steps.iter().enumerate() {
        now = now.saturating_add(Duration::from_millis(advance_ms));
        combined.clock.set(now);
        reference.clock.set(now);
        let (got, expected) = if op < 4 || one.held.is_empty() {
            (one.admit(&pacer, &limits, tokens).await, two.admit(&pacer, &limits, tokens).await)
        } else {
            // One end in four carries the next admission with it.
            let (ended, then_admit) = ((CLASSES[usize::from(class)], rate, tokens), (op == 7).then_some(&limits));
            (one.end(pick, ended, &pacer, then_admit).await, two.end(pick, ended, &pacer, then_admit).await)
        };
        let _ = writeln!(trace, "step {i}: +{advance_ms} ms → {expected}");
        if got != expected {
            return Err(fail(&trace, i, format!("the combined records answered {got}")));
        }
        let (got, expected) = (one.state(&pacer).await, two.state(&pacer).await);
        if got != expected {
            return Err(fail(&trace, i, format!("after it the state is {got}, not {expected}")));
        }
    }
    Ok(())
}
