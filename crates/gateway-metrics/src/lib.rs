//! `gateway-metrics`: the gateway's Prometheus metrics (SPEC §11), as a `Telemetry` adapter on
//! `prometheus-client`. Give [`Metrics`] to the client as its telemetry and serve
//! [`Metrics::render`] at `/metrics`:
//!
//! - `llm_circuit_state{scope,tenant_id,source,state}` gauge: 1 for the gate's state, 0 for the
//!   other two;
//! - `llm_circuit_failures_total{scope,tenant_id,source}`: attempts the breaker counted as
//!   failures (transient failures and dead sources);
//! - `llm_attempts_total{scope,tenant_id,source,outcome}`;
//! - `llm_tokens_total{scope,tenant_id,source,direction}`: the tokens providers' usage reported
//!   (`input`, `output`; chat's prompt and completion tokens, a Responses stream's from its
//!   terminal event);
//! - `llm_call_duration_seconds{scope,tenant_id,result}` histogram;
//! - `llm_aimd_limit{scope,tenant_id,source}` and `llm_source_health{scope,tenant_id,source}`
//!   gauges, as of each source's last attempt.
//!
//! - the shared backend's health (`llm_backend_*`) and the upstream side's figures: bytes held of
//!   answers (`llm_held_response_bytes`, its budget), calls refused at that budget, and provider
//!   `Retry-After` values not believed.
//!
//! `tenant_id` is empty for shared gates and untenanted calls. Label cardinality is bounded: past
//! `max_tenants` distinct tenants, further ones are reported as `tenant_id="_other"` (the
//! client's own `max_tenants` bounds the tenants it keeps; evicted tenants' series stay).

use gateway_core::breaker::CircuitState;
use gateway_core::outcome::OutcomeClass;
use gateway_core::ports::{SourceKey, Telemetry};
use gateway_core::telemetry::{AttemptEvent, CallEvent, GateEvent};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{PoisonError, RwLock};

mod series;
mod upstream;
pub use upstream::UpstreamCounts;

/// The tenant label of series past the tenant cap.
pub const OTHER_TENANTS: &str = "_other";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    scope: String,
    tenant_id: String,
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    /// `ok` (swapped in) or `refused` (the old configuration serves on).
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    scope: String,
    tenant_id: String,
    source: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    scope: String,
    tenant_id: String,
    source: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    scope: String,
    tenant_id: String,
    source: String,
    /// `input` (prompt) or `output` (completion).
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    scope: String,
    tenant_id: String,
    result: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The shared backend's health as the process sees it (see [`Metrics::backend`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendCounts {
    /// A degraded period is on.
    pub degraded: bool,
    /// Degraded periods so far.
    pub outages: u64,
    /// Admissions the process's own state granted while the backend could not answer.
    pub local_admissions: u64,
    /// Admission questions refused because the backend could not answer (`fail_closed`).
    pub failed_closed: u64,
    /// Records the backend did not take (it could not answer, or the backstop dropped them).
    pub dropped_records: u64,
    /// Records the client dropped: no room in the background, or out of time there.
    pub background_dropped: u64,
}

#[derive(Default)]
struct BackendMetrics {
    degraded: Gauge,
    outages: Counter,
    local_admissions: Counter,
    failed_closed: Counter,
    dropped_records: Counter,
    background_dropped: Counter,
}

impl BackendMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("llm_backend_degraded", "1 while the shared gate backend cannot answer", self.degraded.clone());
        registry.register("llm_backend_outages", "Periods the shared gate backend could not answer", self.outages.clone());
        registry.register(
            "llm_backend_local_admissions",
            "Admissions granted by the process's own state while the shared backend could not answer",
            self.local_admissions.clone(),
        );
        registry.register(
            "llm_backend_failed_closed",
            "Admission questions refused because the shared backend could not answer",
            self.failed_closed.clone(),
        );
        registry.register("llm_backend_dropped_records", "Records the shared backend did not take", self.dropped_records.clone());
        registry.register(
            "llm_background_records_dropped",
            "Records dropped for want of room or time in the background",
            self.background_dropped.clone(),
        );
    }

    fn set(&self, counts: BackendCounts) {
        self.degraded.set(i64::from(counts.degraded));
        // Counters only grow: each catches up with its total.
        for (counter, total) in [
            (&self.outages, counts.outages),
            (&self.local_admissions, counts.local_admissions),
            (&self.failed_closed, counts.failed_closed),
            (&self.dropped_records, counts.dropped_records),
            (&self.background_dropped, counts.background_dropped),
        ] {
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }
}

/// The metrics, registered in a registry of their own.
pub struct Metrics {
    registry: Registry,
    circuit_state: Family<StateLabels, Gauge>,
    circuit_failures: Family<SourceLabels, Counter>,
    attempts: Family<AttemptLabels, Counter>,
    tokens: Family<TokenLabels, Counter>,
    call_duration: Family<CallLabels, Histogram>,
    aimd_limit: Family<SourceLabels, FloatGauge>,
    health: Family<SourceLabels, FloatGauge>,
    backend: BackendMetrics,
    upstream: upstream::UpstreamMetrics,
    config_reloads: Family<ReloadLabels, Counter>,
    tenants: RwLock<HashSet<String>>,
    max_tenants: usize,
    /// Each source's series, once an attempt of its was recorded.
    found: series::Found,
}

impl Metrics {
    /// A configuration reload was swapped in (`taken`) or refused.
    pub fn config_reload(&self, taken: bool) {
        self.config_reloads.get_or_create(&ReloadLabels { result: if taken { "ok" } else { "refused" } }).inc();
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").field("max_tenants", &self.max_tenants).finish_non_exhaustive()
    }
}

const STATES: [CircuitState; 3] = [CircuitState::Closed, CircuitState::Open, CircuitState::HalfOpen];

impl Metrics {
    /// Metrics with tenant labels for at most `max_tenants` distinct tenants (use the scopes'
    /// `max_tenants`).
    pub fn new(max_tenants: usize) -> Self {
        let mut registry = Registry::default();
        let circuit_state = Family::<StateLabels, Gauge>::default();
        registry.register("llm_circuit_state", "Gate state: 1 for the current state, 0 for the others", circuit_state.clone());
        let circuit_failures = Family::<SourceLabels, Counter>::default();
        registry.register("llm_circuit_failures", "Attempts the breaker counted as failures", circuit_failures.clone());
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register("llm_attempts", "Attempts by outcome class", attempts.clone());
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register("llm_tokens", "Tokens the providers' usage reported, input and output", tokens.clone());
        let call_duration = Family::<CallLabels, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.05, 2.0, 14)));
        registry.register("llm_call_duration_seconds", "Whole call time, by how the call ended", call_duration.clone());
        let aimd_limit = Family::<SourceLabels, FloatGauge>::default();
        registry.register("llm_aimd_limit", "AIMD limit of a source as of its last attempt", aimd_limit.clone());
        let health = Family::<SourceLabels, FloatGauge>::default();
        registry.register("llm_source_health", "Health EWMA of a source as of its last attempt", health.clone());
        let backend = BackendMetrics::default();
        backend.register(&mut registry);
        let upstream = upstream::UpstreamMetrics::default();
        upstream.register(&mut registry);
        let config_reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "llm_config_reload",
            "Configuration reloads, by result: ok, or refused (the old one serves on)",
            config_reloads.clone(),
        );
        for result in ["ok", "refused"] {
            drop(config_reloads.get_or_create(&ReloadLabels { result }));
        }
        Metrics {
            config_reloads,
            registry,
            circuit_state,
            circuit_failures,
            attempts,
            tokens,
            call_duration,
            aimd_limit,
            health,
            backend,
            upstream,
            tenants: RwLock::new(HashSet::new()),
            max_tenants,
            found: series::Found::default(),
        }
    }

    /// Sets the shared backend's figures (the proxy does before each exposition).
    pub fn backend(&self, counts: BackendCounts) {
        self.backend.set(counts);
    }

    /// Sets the upstream side's figures (the proxy does before each exposition).
    pub fn upstream(&self, counts: UpstreamCounts) {
        self.upstream.set(counts);
    }

    /// The OpenMetrics text exposition (what `/metrics` serves).
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// The registry, to register further metrics beside these.
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    fn tenant(&self, tenant: Option<&str>) -> String {
        let Some(tenant) = tenant else { return String::new() };
        // Known tenants (every event but a tenant's first) take the shared read lock only.
        if self.tenants.read().unwrap_or_else(PoisonError::into_inner).contains(tenant) {
            return tenant.to_owned();
        }
        let mut seen = self.tenants.write().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(tenant) {
            return tenant.to_owned();
        }
        if seen.len() < self.max_tenants {
            seen.insert(tenant.to_owned());
            return tenant.to_owned();
        }
        OTHER_TENANTS.to_owned()
    }

    fn source_labels(&self, key: &SourceKey) -> SourceLabels {
        SourceLabels { scope: key.scope.to_string(), tenant_id: self.tenant(key.tenant.as_deref()), source: key.source.to_string() }
    }

    fn set_state(&self, labels: &SourceLabels, state: CircuitState) {
        for s in STATES {
            let series = StateLabels {
                scope: labels.scope.clone(),
                tenant_id: labels.tenant_id.clone(),
                source: labels.source.clone(),
                state: s.as_str(),
            };
            self.circuit_state.get_or_create(&series).set(i64::from(s == state));
        }
    }
}

impl Telemetry for Metrics {
    fn attempt(&self, event: &AttemptEvent) {
        let (series, first) = self.found.of(&event.key, || self.source_labels(&event.key));
        if first {
            let labels = series.labels();
            let closed = StateLabels {
                scope: labels.scope.clone(),
                tenant_id: labels.tenant_id.clone(),
                source: labels.source.clone(),
                state: CircuitState::Closed.as_str(),
            };
            // A gate first seen through an attempt is in the state it admitted the attempt in.
            if self.circuit_state.get(&closed).is_none() {
                self.set_state(labels, event.admitted_in);
            }
        }
        series.attempt(self, event.class).inc();
        if let Some(usage) = event.usage {
            // In `series::DIRECTIONS`' order.
            for (i, count) in [usage.prompt_tokens, usage.completion_tokens].into_iter().enumerate() {
                series.tokens(self, i).inc_by(u64::from(count));
            }
        }
        if matches!(event.class, OutcomeClass::Transient | OutcomeClass::SourceDead) {
            series.failures(self).inc();
        }
        series.health(self).set(event.health);
        if let Some(limit) = event.aimd_limit {
            series.aimd_limit(self).set(limit);
        }
    }

    fn call(&self, event: &CallEvent) {
        let labels =
            CallLabels { scope: event.scope.clone(), tenant_id: self.tenant(event.tenant.as_deref()), result: event.result.as_str() };
        self.call_duration.get_or_create(&labels).observe(event.elapsed.as_secs_f64());
    }

    fn gate(&self, event: &GateEvent) {
        self.set_state(&self.source_labels(&event.key), event.transition.to);
    }
}
