//! Telemetry sinks: [`TracingTelemetry`] (structured `tracing` events, for production) and
//! [`Collector`] (every event kept in memory, for tests and the soak's invariant checks).

use gateway_core::ports::Telemetry;
use gateway_core::telemetry::{AttemptEvent, CallEvent, CallResult, GateEvent};
use std::sync::{Mutex, PoisonError};

/// Emits one `tracing` event per attempt (debug), call (info; warn when it failed) and gate
/// transition (info). No API key or payload ever reaches these events.
#[derive(Debug, Default, Clone, Copy)]
pub struct TracingTelemetry;

impl Telemetry for TracingTelemetry {
    fn attempt(&self, e: &AttemptEvent) {
        tracing::debug!(
            gate = %e.key, call = e.call_id, class = %e.class, detail = %e.detail,
            latency_ms = e.latency.as_millis() as u64,
            retry_after_ms = e.retry_after.map(|d| d.as_millis() as u64),
            consumed_budget = e.consumed_budget, probe = e.probe,
            "attempt"
        );
    }

    fn call(&self, e: &CallEvent) {
        if e.result == CallResult::Ok {
            tracing::info!(scope = %e.scope, call = e.call_id, attempts = e.attempts, waited_ms = e.waited.as_millis() as u64, "call ok");
        } else {
            let reasons: Vec<String> = e.reasons.iter().map(|(s, r)| format!("{s}={r:?}")).collect();
            tracing::warn!(
                scope = %e.scope, call = e.call_id, result = ?e.result, attempts = e.attempts,
                waited_ms = e.waited.as_millis() as u64, reasons = %reasons.join(" "),
                "call failed"
            );
        }
    }

    fn gate(&self, e: &GateEvent) {
        tracing::info!(
            gate = %e.key, from = %e.transition.from, to = %e.transition.to, cause = ?e.transition.cause,
            epoch = e.epoch, retry_after_ms = e.retry_after.as_millis() as u64,
            "gate transition"
        );
    }
}

/// Keeps every event, in order.
#[derive(Debug, Default)]
pub struct Collector {
    attempts: Mutex<Vec<AttemptEvent>>,
    calls: Mutex<Vec<CallEvent>>,
    gates: Mutex<Vec<GateEvent>>,
}

impl Collector {
    /// An empty collector.
    pub fn new() -> Self {
        Collector::default()
    }

    /// The attempt events so far.
    pub fn attempts(&self) -> Vec<AttemptEvent> {
        self.attempts.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The call events so far.
    pub fn calls(&self) -> Vec<CallEvent> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The gate transition events so far.
    pub fn gates(&self) -> Vec<GateEvent> {
        self.gates.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Telemetry for Collector {
    fn attempt(&self, event: &AttemptEvent) {
        self.attempts.lock().unwrap_or_else(PoisonError::into_inner).push(event.clone());
    }

    fn call(&self, event: &CallEvent) {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).push(event.clone());
    }

    fn gate(&self, event: &GateEvent) {
        self.gates.lock().unwrap_or_else(PoisonError::into_inner).push(event.clone());
    }
}
