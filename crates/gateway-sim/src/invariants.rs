//! The nine invariants of SPEC §12, checked from a run's telemetry. A violation names the
//! offending call or gate.

use crate::run::RunResult;
use gateway_core::breaker::{CircuitState, Transition};
use gateway_core::telemetry::CallResult;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// One invariant's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Invariant {
    /// Which (1–9).
    pub number: u8,
    /// What it says.
    pub name: &'static str,
    /// Whether it held.
    pub held: bool,
    /// The first violation, naming the call or gate.
    pub violation: Option<String>,
}

fn invariant(number: u8, name: &'static str, violation: Option<String>) -> Invariant {
    Invariant { number, name, held: violation.is_none(), violation }
}

/// All nine, in order.
pub fn check(run: &RunResult) -> Vec<Invariant> {
    let p = &run.policy;
    vec![
        invariant(1, "every call ends exactly once", ends_once(run)),
        invariant(2, "budget-consuming attempts <= 1 + max_retries and re-asks <= structured_max_retries", {
            run.call_events
                .iter()
                .find(|c| c.budget_attempts > 1 + p.max_retries || c.reasks > p.structured_max_retries)
                .map(|c| format!("call {}: {} budget attempts, {} re-asks", c.call_id, c.budget_attempts, c.reasks))
        }),
        invariant(3, "at most one probe in flight per gate", one_probe(run)),
        invariant(4, "no non-probe attempt is sent to a gate that is not CLOSED", {
            run.attempt_events
                .iter()
                .find(|a| !a.probe && a.admitted_in != CircuitState::Closed)
                .map(|a| format!("call {} on {} admitted in {}", a.call_id, a.key, a.admitted_in))
        }),
        invariant(5, "permits, AIMD in-flight counts and probe leases all return to zero", {
            (run.leftover_inflight + u32::try_from(run.leftover_permits + run.leftover_leases).unwrap_or(u32::MAX) > 0).then(|| {
                format!("{} in flight, {} permits, {} leases left", run.leftover_inflight, run.leftover_permits, run.leftover_leases)
            })
        }),
        invariant(6, "every retry_after <= max_cooldown, 0 when no gate is OPEN, and a CircuitOpen's is the cooldown left", {
            let gates = run
                .gate_events
                .iter()
                .find(|g| g.retry_after > p.breaker.max_cooldown || (g.transition.to != CircuitState::Open && !g.retry_after.is_zero()))
                .map(|g| format!("gate {} after {:?}: retry_after {:?}", g.key, g.transition, g.retry_after));
            gates.or_else(|| {
                run.circuit_open
                    .iter()
                    .find(|(_, given, left)| *given > p.breaker.max_cooldown || given != left)
                    .map(|(call, given, left)| format!("call {call}: CircuitOpen retry_after {given:?}, cooldown left {left:?}"))
            })
        }),
        invariant(7, "no call waits beyond its bound", waited_past_the_bound(run, |c| c.result == CallResult::Stalled)),
        invariant(8, "every gate transition is legal and epochs only grow", legal_transitions(run)),
        // Waiting served first come, first served (SPEC §6): every other call's own time not
        // attempting stays within the bound a stalled call has (7), even while others progress.
        invariant(
            9,
            "no call waits past stall_window + one poll or back-off",
            waited_past_the_bound(run, |c| c.result != CallResult::Stalled),
        ),
    ]
}

/// The first call of those `counted` whose time not attempting passed the stall bound: the
/// stall window plus the last sleep it may start (a poll, or a back-off of at most its cap).
fn waited_past_the_bound(run: &RunResult, counted: impl Fn(&gateway_core::telemetry::CallEvent) -> bool) -> Option<String> {
    let p = &run.policy;
    let bound = p.stall_window + p.nap_jitter.max(p.backoff.cap);
    run.call_events
        .iter()
        .find(|c| counted(c) && c.waited > bound)
        .map(|c| format!("call {} waited {:?} (bound {:?})", c.call_id, c.waited, bound))
}

fn ends_once(run: &RunResult) -> Option<String> {
    let mut seen: HashMap<u64, u32> = HashMap::new();
    for c in &run.call_events {
        *seen.entry(c.call_id).or_default() += 1;
    }
    if let Some((id, n)) = seen.iter().find(|(_, n)| **n != 1) {
        return Some(format!("call {id} ended {n} times"));
    }
    (seen.len() != run.calls as usize).then(|| format!("{} calls ended of {}", seen.len(), run.calls))
}

/// One probe at a time per gate: per incarnation of it (the gate a backend created after it
/// lost the last one, or a process's own while the shared backend is unavailable, knows nothing
/// of the other's lease).
fn one_probe(run: &RunResult) -> Option<String> {
    /// A probe's start, end and call.
    type Span = (Duration, Duration, u64);
    let mut probes: BTreeMap<(String, u64), Vec<Span>> = BTreeMap::new();
    for a in run.attempt_events.iter().filter(|a| a.probe) {
        let start = a.started.saturating_since(run.start);
        probes.entry((a.key.to_string(), a.incarnation)).or_default().push((start, start + a.latency, a.call_id));
    }
    for ((gate, _), mut spans) in probes {
        spans.sort();
        for pair in spans.windows(2) {
            if pair[1].0 < pair[0].1 {
                return Some(format!("gate {gate}: probes of calls {} and {} overlap", pair[0].2, pair[1].2));
            }
        }
    }
    None
}

/// Transitions and epochs compare within one incarnation of a gate. A key's first incarnation
/// starts CLOSED at epoch 0; a later one (a reset: a gate its backend made again after losing
/// one, or a process's own while the shared backend could not answer, started from the state it
/// last read there) starts where its first transition says, and is held to the rules from there.
fn legal_transitions(run: &RunResult) -> Option<String> {
    let mut last: HashMap<(String, u64), (CircuitState, u64)> = HashMap::new();
    let mut first_incarnation: HashMap<String, u64> = HashMap::new();
    for g in &run.gate_events {
        let key = g.key.to_string();
        let first = *first_incarnation.entry(key.clone()).or_insert(g.incarnation) == g.incarnation;
        let (state, epoch) = match last.get(&(key.clone(), g.incarnation)) {
            Some(seen) => *seen,
            None if first => (CircuitState::Closed, 0),
            None => (g.transition.from, 0),
        };
        if !Transition::is_legal(g.transition.from, g.transition.to) || g.transition.from != state {
            return Some(format!("gate {key}: {} -> {} after {state}", g.transition.from, g.transition.to));
        }
        if g.epoch < epoch {
            return Some(format!("gate {key}: epoch went from {epoch} to {}", g.epoch));
        }
        last.insert((key, g.incarnation), (g.transition.to, g.epoch));
    }
    None
}

/// Each first admission by a new incarnation of a gate that had another: "gate s2 reset at
/// 61.2 s" (its backend lost it and made a new one, or a process admitted on a gate of its own
/// while the shared backend could not answer). Events, not violations.
pub fn resets(run: &RunResult) -> Vec<String> {
    let mut seen: HashMap<String, std::collections::HashSet<u64>> = HashMap::new();
    let mut events = Vec::new();
    for a in run.attempt_events.iter().filter(|a| a.incarnation != 0) {
        let key = a.key.to_string();
        let known = seen.entry(key.clone()).or_default();
        if known.insert(a.incarnation) && known.len() > 1 {
            let at = a.started.saturating_since(run.start).as_secs_f64();
            events.push(format!("gate {key} reset at {at:.1} s"));
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::breaker::Cause;
    use gateway_core::outcome::OutcomeClass;
    use gateway_core::ports::SourceKey;
    use gateway_core::telemetry::{AttemptEvent, GateEvent};
    use gateway_core::time::Timestamp;
    use std::time::Duration;

    fn run_of(gate_events: Vec<GateEvent>, attempt_events: Vec<AttemptEvent>) -> RunResult {
        let policy = crate::scenario::Scenario::load("p6").unwrap().scope_named("soak").unwrap();
        RunResult {
            policy,
            calls: 0,
            call_events: Vec::new(),
            attempt_events,
            gate_events,
            start: Timestamp::from_secs(100),
            duration: Duration::ZERO,
            leftover_inflight: 0,
            leftover_permits: 0,
            leftover_leases: 0,
            circuit_open: Vec::new(),
            backend: None,
            accounts: Default::default(),
            reloads: Vec::new(),
        }
    }

    fn gate(incarnation: u64, epoch: u64, from: CircuitState, to: CircuitState) -> GateEvent {
        let cause = if to == Open { Cause::ConsecutiveChannel } else { Cause::CooldownElapsed };
        GateEvent {
            key: SourceKey::new("chat", "s1"),
            at: Timestamp::from_secs(101),
            transition: Transition { from, to, cause },
            incarnation,
            epoch,
            retry_after: Duration::ZERO,
        }
    }

    fn attempt(incarnation: u64, at_s: u64) -> AttemptEvent {
        AttemptEvent {
            key: SourceKey::new("chat", "s1"),
            call_id: at_s,
            started: Timestamp::from_secs(100 + at_s),
            class: OutcomeClass::Success,
            detail: String::new(),
            latency: Duration::from_millis(10),
            retry_after: None,
            consumed_budget: false,
            probe: false,
            admitted_in: Closed,
            incarnation,
            health: 1.0,
            aimd_limit: None,
            usage: None,
        }
    }

    use CircuitState::{Closed, HalfOpen, Open};

    #[test]
    fn a_reset_is_an_event_not_a_violation() {
        // Incarnation 7 opens at epoch 1; the backend loses it; incarnation 9 opens at epoch 1 again.
        let run = run_of(vec![gate(7, 1, Closed, Open), gate(9, 1, Closed, Open)], vec![attempt(7, 1), attempt(7, 2), attempt(9, 3)]);
        assert_eq!(legal_transitions(&run), None);
        assert_eq!(resets(&run), ["gate chat/s1 reset at 3.0 s"]);
    }

    #[test]
    fn within_an_incarnation_the_rules_hold() {
        let twice = run_of(vec![gate(7, 1, Closed, Open), gate(9, 1, Closed, Open), gate(7, 2, Closed, Open)], Vec::new());
        assert_eq!(legal_transitions(&twice).unwrap(), "gate chat/s1: CLOSED -> OPEN after OPEN");
        let back = run_of(vec![gate(7, 2, Closed, Open), gate(7, 1, Open, HalfOpen)], Vec::new());
        assert_eq!(legal_transitions(&back).unwrap(), "gate chat/s1: epoch went from 2 to 1");
        // A key's first incarnation starts CLOSED; a later one (a gate started from the state read
        // elsewhere) where its first transition says.
        let seeded = run_of(vec![gate(7, 1, Closed, Open), gate(9, 3, Open, HalfOpen), gate(9, 3, HalfOpen, Closed)], Vec::new());
        assert_eq!(legal_transitions(&seeded), None);
        let unseeded = run_of(vec![gate(7, 1, Open, HalfOpen)], Vec::new());
        assert_eq!(legal_transitions(&unseeded).unwrap(), "gate chat/s1: OPEN -> HALF_OPEN after CLOSED");
    }

    #[test]
    fn probes_of_different_incarnations_may_overlap() {
        let probe = |incarnation, at_s| AttemptEvent {
            probe: true,
            admitted_in: HalfOpen,
            latency: Duration::from_secs(5),
            ..attempt(incarnation, at_s)
        };
        let run = run_of(Vec::new(), vec![probe(7, 1), probe(9, 2)]);
        assert_eq!(one_probe(&run), None);
        let run = run_of(Vec::new(), vec![probe(7, 1), probe(7, 2)]);
        assert!(one_probe(&run).unwrap().contains("overlap"));
    }
}
