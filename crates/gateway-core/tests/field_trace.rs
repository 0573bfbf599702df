//! The seed's field case as a transition trace: a source with 10 % success under steady traffic
//! next to a blackhole, both with max_concurrency 16 (consecutive threshold 32), fail_threshold 5,
//! cooldown 60 s. Each source is offered one attempt per second for 30 minutes of virtual time;
//! the trace shows when each opens, by which channel, its streak and how long it stays open.
//! Under the old "consecutive failures, success resets" breaker the 10 % source never opened
//! (seed 000, defect 1); here the rate channel isolates it within seconds and the streak keeps
//! it out for ever longer.

#![allow(clippy::unwrap_used)]

mod common;

use common::{params, seed_breaker};
use gateway_core::breaker::{Fence, Gate, GateOp, GateParams, Reply, SuccessKind, Verdict};
use gateway_core::outcome::OutcomeClass;
use gateway_core::random::unit;
use gateway_core::time::Timestamp;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write;

struct Source {
    name: &'static str,
    gate: Gate,
    params: GateParams,
    /// Attempt latency in milliseconds.
    latency_ms: u64,
    /// Chance an attempt succeeds.
    success: f64,
    sent: u32,
    denied: u32,
}

/// An attempt that will end at `.0` (ms) on source `.1`, admitted at epoch `.2`, as a probe `.3`.
type Pending = Reverse<(u64, usize, u64, bool)>;

fn trace() -> String {
    let p = params(seed_breaker(), 16);
    let mut sources = [
        Source { name: "flaky10", gate: Gate::new(), params: p.clone(), latency_ms: 1500, success: 0.1, sent: 0, denied: 0 },
        Source { name: "blackhole", gate: Gate::new(), params: p, latency_ms: 30_000, success: 0.0, sent: 0, denied: 0 },
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut pending: BinaryHeap<Pending> = BinaryHeap::new();
    let mut out = String::from("      t  source     transition            cause                epoch streak  open for\n");
    let mut log = |now: u64, s: &Source, reply: &Reply| {
        if let Some(t) = reply.transition {
            let open_for = match reply.retry_after {
                d if d.is_zero() => String::new(),
                d => format!("{}s", d.as_secs()),
            };
            let arrow = format!("{}→{}", t.from, t.to);
            let cause = serde_json::to_value(t.cause).unwrap();
            writeln!(
                out,
                "{:>6.1}s  {:<9}  {:<20}  {:<19}  {:>5}  {:>6}  {:>8}",
                now as f64 / 1000.0,
                s.name,
                arrow,
                cause.as_str().unwrap(),
                reply.epoch,
                s.gate.streak,
                open_for
            )
            .unwrap();
        }
    };
    let end_ms = 30 * 60 * 1000;
    for now in (0..end_ms).step_by(1000) {
        // Attempts that end by now report first, in time order.
        while let Some(&Reverse((at, i, epoch, probe))) = pending.peek() {
            if at > now {
                break;
            }
            pending.pop();
            let s = &mut sources[i];
            let class = if unit(&mut rng) < s.success { OutcomeClass::Success } else { OutcomeClass::Transient };
            let t = Timestamp::from_millis(at);
            let op = match class {
                OutcomeClass::Success => GateOp::Success { fence: Fence { incarnation: 0, epoch }, kind: SuccessKind::Real },
                _ => GateOp::Failure { fence: Fence { incarnation: 0, epoch } },
            };
            let reply = s.gate.apply(&s.params, op, t);
            if probe || reply.transition.is_some() {
                log(at, s, &reply);
            }
        }
        for (i, s) in sources.iter_mut().enumerate() {
            let t = Timestamp::from_millis(now);
            let entry = s.gate.apply(&s.params, GateOp::TryEnter, t);
            log(now, s, &entry);
            if entry.verdict == Some(Verdict::Denied) {
                s.denied += 1;
                continue;
            }
            s.sent += 1;
            pending.push(Reverse((now + s.latency_ms, i, entry.epoch, entry.is_probe())));
        }
    }
    writeln!(out, "\nover {} s of steady traffic (one attempt offered per second per source):", end_ms / 1000).unwrap();
    for s in &sources {
        writeln!(out, "  {:<9}  sent {:>4}  denied {:>4}", s.name, s.sent, s.denied).unwrap();
    }
    out
}

#[test]
fn field_case_transition_trace() {
    let trace = trace();
    assert_eq!(trace, self::trace(), "the same seed gives the same trace");
    insta::assert_snapshot!(trace);
}
