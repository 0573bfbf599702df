//! [`GatewayClientBuilder`]: the adapters, scopes and presets a [`GatewayClient`] is built
//! from, and what it cannot be built without ([`BuildError`]).

use crate::GatewayClient;
use crate::admission::SourceAdmission;
use crate::affinity::{AFFINITY_TTL, Affinities};
use crate::clock::TokioClock;
use crate::partition::{Partitions, tenant_name};
use crate::preset::Preset;
use crate::reload::{Serving, checked};
use crate::slot::Holders;
use crate::telemetry::TracingTelemetry;
use gateway_core::combined::{AttemptGate, InOrder};
use gateway_core::policy::ScopePolicy;
use gateway_core::ports::{AffinityMap, BreakerGate, PacerGate, QuotaGate, Telemetry, Upstream};
use gateway_core::time::Clock;
use gateway_memory::{MemoryAffinity, MemoryGates, MemoryPacer, MemoryQuota};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::task::TaskTracker;

/// What a client cannot be built without.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// No upstream transport was given.
    #[error("no upstream: call GatewayClientBuilder::upstream")]
    NoUpstream,
    /// No scope was given.
    #[error("no scope: add at least one with GatewayClientBuilder::scope")]
    NoScope,
    /// A scope's `fallback` names a scope the client does not have.
    #[error("{scope}.fallback: no scope {fallback:?} (configured: {known})")]
    UnknownFallback {
        /// The scope that falls back.
        scope: String,
        /// The scope it names.
        fallback: String,
        /// The configured scopes.
        known: String,
    },
}

/// Builds a [`GatewayClient`]. Unset adapters default to the in-memory gates and quota on
/// tokio's clock, `tracing` telemetry and an RNG seeded per process.
#[derive(Default)]
pub struct GatewayClientBuilder {
    scopes: Vec<(ScopePolicy, Preset)>,
    preset: Preset,
    gates: Option<Arc<dyn BreakerGate>>,
    quota: Option<Arc<dyn QuotaGate>>,
    pacer: Option<Arc<dyn PacerGate>>,
    attempts: Option<Arc<dyn AttemptGate>>,
    upstream: Option<Arc<dyn Upstream>>,
    telemetry: Option<Arc<dyn Telemetry>>,
    clock: Option<Arc<dyn Clock>>,
    seed: Option<u64>,
    pinned_tenants: Vec<String>,
    background_records: Option<(usize, Duration)>,
    affinity: Option<Arc<dyn AffinityMap>>,
    affinity_ttl: Option<Duration>,
    traces: Option<crate::trace::Traces>,
}

/// Records in the background at once, by default (see [`GatewayClientBuilder::background_records`]).
pub const BACKGROUND_RECORDS: usize = 4096;
/// How long a record in the background may take, by default: several command timeouts of a
/// remote backend (each of an attempt's up to four record operations is bounded by one).
pub const RECORD_TIMEOUT: Duration = Duration::from_secs(5);

impl GatewayClientBuilder {
    /// Adds a scope with the builder's preset.
    pub fn scope(mut self, policy: ScopePolicy) -> Self {
        let preset = self.preset;
        self.scopes.push((policy, preset));
        self
    }

    /// Adds every scope of a loaded config.
    pub fn scopes(mut self, policies: impl IntoIterator<Item = ScopePolicy>) -> Self {
        for policy in policies {
            self = self.scope(policy);
        }
        self
    }

    /// The preset of the scopes added after this call (default: [`Preset::Default`]).
    pub fn preset(mut self, preset: Preset) -> Self {
        self.preset = preset;
        self
    }

    /// The breaker gates (e.g. `RedisGates` to share them between processes).
    pub fn gates(mut self, gates: Arc<dyn BreakerGate>) -> Self {
        self.gates = Some(gates);
        self
    }

    /// The quota gate.
    pub fn quota(mut self, quota: Arc<dyn QuotaGate>) -> Self {
        self.quota = Some(quota);
        self
    }

    /// The AIMD pacers of provider accounts (e.g. `RedisPacer`, so that every process learns
    /// and respects one limit per account).
    pub fn pacer(mut self, pacer: Arc<dyn PacerGate>) -> Self {
        self.pacer = Some(pacer);
        self
    }

    /// Where an attempt's admission and its records go, one operation each (e.g.
    /// `RedisAttempts`: one script admits, one settles). Default: the gates', quota's and
    /// pacers' own operations one after another ([`InOrder`]).
    pub fn attempts(mut self, attempts: Arc<dyn AttemptGate>) -> Self {
        self.attempts = Some(attempts);
        self
    }

    /// The upstream transport (*required*).
    pub fn upstream(mut self, upstream: Arc<dyn Upstream>) -> Self {
        self.upstream = Some(upstream);
        self
    }

    /// Records off the answer's path: a call returns without waiting for its records (the
    /// pacer release, the gate's record, the permit's settle and release); those a remote
    /// backend keeps waiting go on in the background, at most `at_once` (default
    /// [`BACKGROUND_RECORDS`]) and each for at most `timeout` (default [`RECORD_TIMEOUT`]). A
    /// record past either bound is dropped and counted ([`GatewayClient::dropped_records`]); its
    /// leases expire by themselves. An in-process backend's records complete before the call
    /// returns.
    pub fn background_records(mut self, at_once: usize, timeout: Duration) -> Self {
        self.background_records = Some((at_once, timeout));
        self
    }

    /// The telemetry sink.
    pub fn telemetry(mut self, telemetry: Arc<dyn Telemetry>) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// The clock of the local state (memo, stall, progress): it must be the gates' clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Tenants every `per_tenant` scope always admits (besides those it assigns a tier): never
    /// evicted, not counted against `max_tenants`, so other tenants' churn cannot lock them out.
    /// A proxy pins the tenants its API keys are bound to. Names that are not valid tenant
    /// names are ignored (no call could name them).
    pub fn pinned_tenants(mut self, tenants: impl IntoIterator<Item = impl AsRef<str>>) -> Self {
        self.pinned_tenants.extend(tenants.into_iter().filter_map(|t| tenant_name(t.as_ref()).ok()));
        self
    }

    /// Seeds the RNG of selection and jitter: the same seed gives the same choices.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Where the client remembers which source holds the state an id names (default: a map
    /// of this process, [`MemoryAffinity`] of at most `gateway_memory::affinity::MAX_IDS` ids;
    /// several processes share one through the backend).
    pub fn affinity(mut self, map: Arc<dyn AffinityMap>) -> Self {
        self.affinity = Some(map);
        self
    }

    /// How long an id is remembered (default [`AFFINITY_TTL`], 30 days).
    pub fn affinity_ttl(mut self, ttl: Duration) -> Self {
        self.affinity_ttl = Some(ttl);
        self
    }

    /// Makes a span of every call, attempt and wait (`trace.rs`: the OpenTelemetry GenAI
    /// conventions), for a `tracing-opentelemetry` layer to export. Off by default: no span is
    /// made then.
    pub fn traces(mut self, traces: crate::trace::Traces) -> Self {
        self.traces = Some(traces);
        self
    }

    /// The client.
    pub fn build(self) -> Result<GatewayClient, BuildError> {
        let upstream = self.upstream.ok_or(BuildError::NoUpstream)?;
        let clock: Arc<dyn Clock> = self.clock.unwrap_or_else(|| Arc::new(TokioClock::new()));
        let gates = self.gates.unwrap_or_else(|| Arc::new(MemoryGates::new(clock.clone())));
        let quota = self.quota.unwrap_or_else(|| Arc::new(MemoryQuota::new(clock.clone())));
        let pacer = self.pacer.unwrap_or_else(|| Arc::new(MemoryPacer::new(clock.clone())));
        // A per-process seed (std's RandomState is seeded from the OS) keeps workers' jitter apart.
        let seed = self.seed.unwrap_or_else(|| std::collections::hash_map::RandomState::new().hash_one(0u8));
        let scopes: BTreeMap<String, Partitions> = self
            .scopes
            .into_iter()
            .map(|(policy, preset)| (policy.name.clone(), Partitions::new(policy, preset, &self.pinned_tenants)))
            .collect();
        let scopes = checked(scopes)?;
        let telemetry = self.telemetry.unwrap_or_else(|| Arc::new(TracingTelemetry));
        let (at_once, record_timeout) = self.background_records.unwrap_or((BACKGROUND_RECORDS, RECORD_TIMEOUT));
        let attempts = self.attempts.unwrap_or_else(|| Arc::new(InOrder { gates: gates.clone(), quota, pacer: pacer.clone() }));
        let holders = Holders {
            gates,

            pacer,
            attempts,
            releases: TaskTracker::new(),
            records: Arc::new(tokio::sync::Semaphore::new(at_once)),
            record_timeout,
            dropped_records: AtomicU64::new(0),
            telemetry: telemetry.clone(),
            clock: clock.clone(),
        };
        let affinity = Affinities {
            map: self.affinity.unwrap_or_else(|| Arc::new(MemoryAffinity::new(clock.clone(), gateway_memory::affinity::MAX_IDS))),
            ttl: self.affinity_ttl.unwrap_or(AFFINITY_TTL),
        };
        Ok(GatewayClient {
            serving: arc_swap::ArcSwap::from_pointee(Serving { scopes, upstream }),
            preset: self.preset,
            pinned: self.pinned_tenants,
            reloading: tokio::sync::Mutex::new(()),
            admission: Arc::new(SourceAdmission {
                holders: Arc::new(holders),
                telemetry,
                clock,
                rng: Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(seed))),
                traces: self.traces,
            }),
            next_call: AtomicU64::new(1),
            affinity,
        })
    }
}
