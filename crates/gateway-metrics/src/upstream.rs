//! What the proxy holds of upstream answers and what it could not believe of them (see
//! [`Metrics::upstream`](crate::Metrics::upstream)).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The upstream side's figures, as of one exposition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpstreamCounts {
    /// Bytes of upstream answers held by the attempts in flight.
    pub held_bytes: u64,
    /// The budget of what may be held (`max_held_bytes`).
    pub max_held_bytes: u64,
    /// Calls refused because the held bytes reached the budget.
    pub refused_for_held_bytes: u64,
    /// Provider `Retry-After` values that could not be read or were absurd (treated as absent).
    pub unreadable_retry_after: u64,
    /// Provider rate-limit header values that could not be read or were absurd (ignored).
    pub unreadable_rate_limit: u64,
}

#[derive(Default)]
pub(crate) struct UpstreamMetrics {
    held_bytes: Gauge,
    max_held_bytes: Gauge,
    refused_for_held_bytes: Counter,
    unreadable_retry_after: Counter,
    unreadable_rate_limit: Counter,
}

impl UpstreamMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register("llm_held_response_bytes", "Bytes of upstream answers held by the attempts in flight", self.held_bytes.clone());
        registry.register("llm_max_held_response_bytes", "The budget of upstream answer bytes held at once", self.max_held_bytes.clone());
        registry.register(
            "llm_calls_refused_held_bytes",
            "Calls refused with 503 because the attempts in flight held the budget",
            self.refused_for_held_bytes.clone(),
        );
        registry.register(
            "llm_upstream_unreadable_retry_after",
            "Provider Retry-After values that could not be read or were absurd, treated as absent",
            self.unreadable_retry_after.clone(),
        );
        registry.register(
            "llm_upstream_unreadable_rate_limit",
            "Provider rate-limit header values that could not be read or were absurd, ignored",
            self.unreadable_rate_limit.clone(),
        );
    }

    pub(crate) fn set(&self, counts: UpstreamCounts) {
        self.held_bytes.set(i64::try_from(counts.held_bytes).unwrap_or(i64::MAX));
        self.max_held_bytes.set(i64::try_from(counts.max_held_bytes).unwrap_or(i64::MAX));
        // Counters only grow: each catches up with its total.
        for (counter, total) in [
            (&self.refused_for_held_bytes, counts.refused_for_held_bytes),
            (&self.unreadable_retry_after, counts.unreadable_retry_after),
            (&self.unreadable_rate_limit, counts.unreadable_rate_limit),
        ] {
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }
}
