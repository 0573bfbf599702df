//! One scope: as deserialized, validated, and what the call loop does when no source is
//! runnable.

use super::breaker::{BreakerConfig, BreakerPolicy};
use super::error::{DAY_S, Fields, PolicyError, Problem, check_name};
use super::source::{SourceConfig, SourcePolicy};
use super::tenancy::{Isolation, TierConfig, UnknownTenant};
use crate::breaker::GateParams;
use crate::request::Kind;
use crate::select::SelectorKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// What a call does when the breaker side or the quota side leaves no runnable source (§6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitMode {
    /// Sleep (the `nap` rule) and pick again, within the stall bound.
    Wait,
    /// End the call at once with a typed error carrying the retry hint.
    FailFast,
}

/// One scope as deserialized: every key of SPEC §9 under `{SCOPE}__…`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeConfig {
    /// The breaker section.
    #[serde(default)]
    pub breaker: BreakerConfig,
    /// When every source is refused by the breaker side (default `fail_fast`).
    pub circuit_open: Option<WaitMode>,
    /// When some source is only quota- or AIMD-blocked (default `wait`).
    pub quota_full: Option<WaitMode>,
    /// Source ordering (default `health_aware`).
    pub selector: Option<SelectorKind>,
    /// Budget-consuming retries per call (default 3).
    pub max_retries: Option<u32>,
    /// Structured-output re-asks per call (default 2).
    pub structured_max_retries: Option<u32>,
    /// Where a stream asking for JSON commits: `validated` (default) or `first_token`.
    pub structured_stream: Option<crate::stream::StructuredStream>,
    /// Stall bound in seconds (default 300).
    pub stall_window_s: Option<f64>,
    /// The fallback poll of a call waiting in line for capacity, in seconds (default 1, at most
    /// the stall window): releases and time's own hints wake it; the poll covers a lost wake.
    pub poll_interval_s: Option<f64>,
    /// The spread added to a nap whose end a hint says (a gate's retry, a 429's pushback), in
    /// seconds (default 0.05).
    pub nap_jitter_s: Option<f64>,
    /// Concurrency of the scope: the AIMD ceiling (default 64).
    pub concurrency: Option<u32>,
    /// The window of the limits providers advertise in their rate-limit headers, in seconds
    /// (default 60: OpenAI and Anthropic advertise per minute).
    pub rate_limit_window_s: Option<f64>,
    /// Base of the exponential back-off in seconds (default 0.25).
    pub backoff_base_s: Option<f64>,
    /// Cap of the exponential back-off in seconds (default 8).
    pub backoff_cap_s: Option<f64>,
    /// `shared` (default) or `per_tenant`: whether each tenant gets gates, memo, health, AIMD
    /// and quota of its own (SPEC §11).
    pub isolation: Option<Isolation>,
    /// With `per_tenant`: the most tenants one process keeps state for (default 10 000); a
    /// call for one more is refused with an error naming the tenant.
    pub max_tenants: Option<u32>,
    /// With `per_tenant`: a tenant's process-local state (memo, health, AIMD) is dropped after
    /// this many idle seconds (default 600). Its gates live on in the backend.
    pub tenant_idle_s: Option<f64>,
    /// With `per_tenant`: named policy overlays (`[chat.tiers.gold.breaker]`).
    #[serde(default)]
    pub tiers: BTreeMap<String, TierConfig>,
    /// With `per_tenant`: each tenant's tier, by tenant name (lower-case).
    #[serde(default)]
    pub tenants: BTreeMap<String, String>,
    /// With `per_tenant`: what a tenant absent from `tenants` gets: `default` (the scope's own
    /// policy, the default) or `reject` (the call is refused, naming the tenant).
    pub unknown_tenant: Option<UnknownTenant>,
    /// A scope to try once when a call here ends `CircuitOpen` or `AllSourcesExhausted`.
    pub fallback: Option<String>,
    /// The kinds of call the scope serves (default both, `["chat", "embeddings"]`); a request of
    /// another kind is refused before any attempt. A scope that serves one kind lets a 404 for
    /// it say the source's model is gone (`SourceDead`); otherwise a 404 is the request's.
    pub kinds: Option<OneOrMany<Kind>>,
    /// The sources, by name (at least one).
    #[serde(default)]
    pub sources: BTreeMap<String, SourceConfig>,
}

/// A list that may also be written as its single item (`kinds = "chat"`, `CHAT__KINDS=chat`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    /// One item.
    One(T),
    /// Several.
    Many(Vec<T>),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{IntoDeserializer, SeqAccess, Visitor, value::SeqAccessDeserializer};
        struct Either<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Either<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("one value or a list of them")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(OneOrMany::One)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Vec::<T>::deserialize(SeqAccessDeserializer::new(seq)).map(OneOrMany::Many)
            }
        }
        // Unknown values name the value and what was expected (an untagged enum would not).
        deserializer.deserialize_any(Either(std::marker::PhantomData))
    }
}

impl<T: Clone> OneOrMany<T> {
    /// The items.
    pub fn to_vec(&self) -> Vec<T> {
        match self {
            OneOrMany::One(item) => vec![item.clone()],
            OneOrMany::Many(items) => items.clone(),
        }
    }
}

/// Validated policy of one scope.
#[derive(Clone, Debug, PartialEq)]
pub struct ScopePolicy {
    /// Scope name (`chat`, `embedding`, a tenant…).
    pub name: String,
    /// Breaker policy shared by the scope's gates.
    pub breaker: BreakerPolicy,
    /// What to do when only the breaker side blocks.
    pub circuit_open: WaitMode,
    /// What to do when the quota side blocks.
    pub quota_full: WaitMode,
    /// Source ordering.
    pub selector: SelectorKind,
    /// Budget-consuming retries per call.
    pub max_retries: u32,
    /// Structured-output re-asks per call.
    pub structured_max_retries: u32,
    /// Where a stream asking for JSON commits (a request may override it).
    pub structured_stream: crate::stream::StructuredStream,
    /// Stall bound of a waiting call.
    pub stall_window: Duration,
    /// The fallback poll of a call waiting in line.
    pub poll_interval: Duration,
    /// The spread added to a hinted nap.
    pub nap_jitter: Duration,
    /// Scope concurrency: the AIMD ceiling.
    pub concurrency: u32,
    /// The window of the limits providers advertise.
    pub rate_limit_window: Duration,
    /// Exponential back-off after failures.
    pub backoff: crate::backoff::Backoff,
    /// Tenant isolation.
    pub isolation: Isolation,
    /// Most tenants with state of their own in one process (`per_tenant`).
    pub max_tenants: u32,
    /// Idle time after which a tenant's process-local state is dropped (`per_tenant`).
    pub tenant_idle: Duration,
    /// Breaker policies of the tiers, by tier name (`per_tenant`).
    pub tiers: BTreeMap<String, BreakerPolicy>,
    /// Each tier's weight among tenants waiting for one account (`per_tenant`; default 1).
    pub tier_weights: BTreeMap<String, u32>,
    /// Each tenant's tier (`per_tenant`).
    pub tenant_tiers: BTreeMap<String, String>,
    /// What a tenant without a tier gets (`per_tenant`).
    pub unknown_tenant: UnknownTenant,
    /// The scope tried once when a call here ends `CircuitOpen` or `AllSourcesExhausted`.
    pub fallback: Option<String>,
    /// The kinds of call the scope serves, sorted, without repeats (at least one).
    pub kinds: Vec<Kind>,
    /// The sources, ordered by name.
    pub sources: Vec<SourcePolicy>,
}

impl ScopeConfig {
    /// Fills defaults and validates the scope named `name`. Every error names its full key.
    pub fn resolve(&self, name: &str) -> Result<ScopePolicy, PolicyError> {
        check_name(name, name)?;
        let f = Fields { prefix: name };
        let breaker = self.breaker.resolve(&f.key("breaker"))?;
        if self.sources.is_empty() {
            return Err(PolicyError::new(f.key("sources"), Problem::Missing));
        }
        let sources = self
            .sources
            .iter()
            .map(|(source, config)| config.resolve(source, &format!("{name}.sources.{source}")))
            .collect::<Result<Vec<_>, _>>()?;
        let slowest = sources.iter().map(|s| s.timeout).max().unwrap_or_default();
        check_probe_ttl(&f, &breaker, "breaker.probe_ttl_s", slowest)?;
        let isolation = self.isolation.unwrap_or_default();
        let tiers = self.resolve_tiers(&f, isolation, slowest)?;
        let mut tier_weights = BTreeMap::new();
        for (tier, config) in &self.tiers {
            tier_weights.insert(tier.clone(), f.int(&format!("tiers.{tier}.weight"), config.weight.unwrap_or(1), 1, 1000)?);
        }
        let stall_window = f.secs("stall_window_s", self.stall_window_s.unwrap_or(300.0), 0.001, DAY_S)?;
        let stall_window_s = stall_window.as_secs_f64();
        let backoff = self.resolve_backoff(&f)?;
        Ok(ScopePolicy {
            name: name.to_owned(),
            breaker,
            circuit_open: self.circuit_open.unwrap_or(WaitMode::FailFast),
            quota_full: self.quota_full.unwrap_or(WaitMode::Wait),
            selector: self.selector.unwrap_or_default(),
            max_retries: f.int("max_retries", self.max_retries.unwrap_or(3), 0, 100)?,
            structured_max_retries: f.int("structured_max_retries", self.structured_max_retries.unwrap_or(2), 0, 100)?,
            structured_stream: self.structured_stream.unwrap_or_default(),
            stall_window,
            poll_interval: f.secs("poll_interval_s", self.poll_interval_s.unwrap_or(stall_window_s.min(1.0)), 0.001, stall_window_s)?,
            nap_jitter: f.secs("nap_jitter_s", self.nap_jitter_s.unwrap_or(stall_window_s.min(0.05)), 0.001, stall_window_s)?,
            concurrency: f.int("concurrency", self.concurrency.unwrap_or(64), 1, 1_000_000)?,
            rate_limit_window: f.secs("rate_limit_window_s", self.rate_limit_window_s.unwrap_or(60.0), 0.001, DAY_S)?,
            backoff,
            isolation,
            max_tenants: f.int("max_tenants", self.max_tenants.unwrap_or(10_000), 1, 10_000_000)?,
            tenant_idle: f.secs("tenant_idle_s", self.tenant_idle_s.unwrap_or(600.0), 0.001, 30.0 * DAY_S)?,
            tiers,
            tier_weights,
            tenant_tiers: self.tenants.clone(),
            unknown_tenant: self.unknown_tenant.unwrap_or_default(),
            fallback: self.resolve_fallback(&f, name)?,
            kinds: self.resolve_kinds(&f)?,
            sources,
        })
    }

    /// The back-off. Defaults follow the values they depend on, so a default never contradicts
    /// a key the user did set (a 10 s base raises the default cap).
    fn resolve_backoff(&self, f: &Fields<'_>) -> Result<crate::backoff::Backoff, PolicyError> {
        let base_s = self.backoff_base_s.unwrap_or(0.25);
        let base = f.secs("backoff_base_s", base_s, 0.001, 3600.0)?;
        Ok(crate::backoff::Backoff { base, cap: f.secs("backoff_cap_s", self.backoff_cap_s.unwrap_or(base_s.max(8.0)), base_s, 3600.0)? })
    }

    /// The tiers' breaker policies (each the scope's overlaid with the tier's keys), once the
    /// tenancy keys are checked: they need `isolation = "per_tenant"`, and every tenant names a
    /// tier that exists.
    fn resolve_tiers(
        &self,
        f: &Fields<'_>,
        isolation: Isolation,
        slowest: Duration,
    ) -> Result<BTreeMap<String, BreakerPolicy>, PolicyError> {
        let per_tenant_only = |key: &str, set: bool| {
            if set && isolation != Isolation::PerTenant {
                let reason = "tiers apply to tenants' own gates: set isolation = \"per_tenant\"".into();
                Err(PolicyError::new(f.key(key), Problem::Invalid { value: "set".into(), reason }))
            } else {
                Ok(())
            }
        };
        per_tenant_only("tiers", !self.tiers.is_empty())?;
        per_tenant_only("tenants", !self.tenants.is_empty())?;
        per_tenant_only("unknown_tenant", self.unknown_tenant == Some(UnknownTenant::Reject))?;
        let mut tiers = BTreeMap::new();
        for (tier, config) in &self.tiers {
            check_name(tier, &f.key(&format!("tiers.{tier}")))?;
            let tier_breaker = self.breaker.overlaid(&config.breaker).resolve(&f.key(&format!("tiers.{tier}.breaker")))?;
            check_probe_ttl(f, &tier_breaker, &format!("tiers.{tier}.breaker.probe_ttl_s"), slowest)?;
            tiers.insert(tier.clone(), tier_breaker);
        }
        for (tenant, tier) in &self.tenants {
            check_name(tenant, &f.key(&format!("tenants.{tenant}")))?;
            if !tiers.contains_key(tier) {
                let known = self.tiers.keys().cloned().collect::<Vec<_>>().join(", ");
                let reason = format!("no such tier (tiers: {})", if known.is_empty() { "none" } else { &known });
                return Err(PolicyError::new(f.key(&format!("tenants.{tenant}")), Problem::Invalid { value: tier.clone(), reason }));
            }
        }
        Ok(tiers)
    }

    /// The fallback scope: another scope, by a valid name.
    fn resolve_fallback(&self, f: &Fields<'_>, name: &str) -> Result<Option<String>, PolicyError> {
        match &self.fallback {
            Some(fallback) if fallback == name => Err(PolicyError::new(
                f.key("fallback"),
                Problem::Invalid { value: fallback.clone(), reason: "a scope cannot fall back to itself".into() },
            )),
            Some(fallback) => {
                check_name(fallback, &f.key("fallback"))?;
                Ok(Some(fallback.clone()))
            }
            None => Ok(None),
        }
    }

    /// The kinds served (all by default), sorted, at least one.
    fn resolve_kinds(&self, f: &Fields<'_>) -> Result<Vec<Kind>, PolicyError> {
        let Some(mut kinds) = self.kinds.as_ref().map(OneOrMany::to_vec) else { return Ok(Kind::ALL.to_vec()) };
        kinds.sort();
        kinds.dedup();
        if kinds.is_empty() {
            return Err(PolicyError::new(
                f.key("kinds"),
                Problem::Invalid { value: "[]".into(), reason: "a scope serves at least one kind (chat, embeddings)".into() },
            ));
        }
        Ok(kinds)
    }
}

/// A probe lease shorter than an attempt may run would let a second probe start while the
/// first is still in flight: `breaker`'s lease (the key `key`) is at least the slowest source's
/// timeout.
fn check_probe_ttl(f: &Fields<'_>, breaker: &BreakerPolicy, key: &str, slowest: Duration) -> Result<(), PolicyError> {
    match breaker.probe_ttl.filter(|ttl| *ttl < slowest) {
        Some(ttl) => {
            Err(f.out_of_range(key, ttl.as_secs_f64(), format!("at least the slowest source timeout, {} seconds", slowest.as_secs_f64())))
        }
        None => Ok(()),
    }
}

impl ScopePolicy {
    /// The weight of `tenant`'s calls among those waiting for one account: its tier's, or 1.
    pub fn tenant_weight(&self, tenant: Option<&str>) -> u32 {
        tenant.and_then(|t| self.tenant_tiers.get(t)).and_then(|tier| self.tier_weights.get(tier)).copied().unwrap_or(1)
    }

    /// The AIMD pacer parameters of the scope's accounts: the scope's concurrency as the
    /// ceiling, leases living twice the slowest source's timeout, the advertised limits' window.
    pub fn pacer_params(&self) -> crate::aimd::PacerParams {
        let slowest = self.sources.iter().map(|s| s.timeout).max().unwrap_or_default();
        crate::aimd::PacerParams {
            ceiling: f64::from(self.concurrency),
            lease_ttl: slowest.saturating_mul(2),
            limit_window: self.rate_limit_window,
        }
    }

    /// The breaker parameters of the source at `index` in [`ScopePolicy::sources`], or `None`
    /// when there is no such source.
    pub fn gate_params(&self, index: usize) -> Option<GateParams> {
        let source = self.sources.get(index)?;
        let raise_by = source.quota.max_concurrency.unwrap_or(0);
        let slowest = self.sources.iter().map(|s| s.timeout).max().unwrap_or(source.timeout);
        Some(GateParams::new(&self.breaker, raise_by, slowest, source.timeout))
    }
}
