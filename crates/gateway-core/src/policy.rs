//! Policies: the validated values every state machine and loop runs on (SPEC §3–§9), and the
//! raw, all-optional `*Config` shapes the config loader deserializes into them.
//!
//! Validation lives here, once: [`ScopeConfig::resolve`] fills defaults, rejects missing required
//! keys and out-of-range values, and names the key at fault (`chat.breaker.fail_threshold`).
//! The loader adds the layer (default, file, environment) the value came from.

use crate::breaker::GateParams;
use crate::request::Kind;
use crate::select::SelectorKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// A policy value that is missing, out of range or malformed, with the dotted key at fault.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct PolicyError {
    /// Dotted, lower-case key, e.g. `chat.breaker.cooldown_s` or `chat.sources.s1.rpm`.
    pub key: String,
    /// What is wrong with it.
    pub problem: Problem,
}

impl PolicyError {
    fn new(key: impl Into<String>, problem: Problem) -> Self {
        PolicyError { key: key.into(), problem }
    }

    /// The same key in environment form: `chat.breaker.cooldown_s` → `CHAT__BREAKER__COOLDOWN_S`.
    pub fn env_key(&self) -> String {
        self.key.split('.').map(str::to_ascii_uppercase).collect::<Vec<_>>().join("__")
    }
}

/// Why a policy value was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Problem {
    /// A required key has no value in any layer.
    #[error("required key is missing")]
    Missing,
    /// A number outside its allowed range.
    #[error("value {value} is out of range (expected {expected})")]
    OutOfRange {
        /// The value given, as written.
        value: String,
        /// The allowed range, in words.
        expected: String,
    },
    /// A value of the right type that is still unusable.
    #[error("value {value:?} is invalid ({reason})")]
    Invalid {
        /// The value given.
        value: String,
        /// Why it cannot be used.
        reason: String,
    },
}

/// Reads one key of a config section: joins the section's key prefix with field names and checks
/// ranges, so every error carries the full key.
struct Fields<'a> {
    prefix: &'a str,
}

impl Fields<'_> {
    fn key(&self, field: &str) -> String {
        if self.prefix.is_empty() { field.to_owned() } else { format!("{}.{field}", self.prefix) }
    }

    fn required<T: Copy>(&self, field: &str, value: Option<T>) -> Result<T, PolicyError> {
        value.ok_or_else(|| PolicyError::new(self.key(field), Problem::Missing))
    }

    fn int(&self, field: &str, value: u32, min: u32, max: u32) -> Result<u32, PolicyError> {
        if (min..=max).contains(&value) { Ok(value) } else { Err(self.out_of_range(field, value, format!("{min}..={max}"))) }
    }

    /// Seconds in `min..=max`, returned as a whole-millisecond duration.
    fn secs(&self, field: &str, value: f64, min: f64, max: f64) -> Result<Duration, PolicyError> {
        if value.is_finite() && value >= min && value <= max {
            Ok(Duration::from_millis((value * 1000.0).round() as u64))
        } else {
            Err(self.out_of_range(field, value, format!("{min}..={max} seconds")))
        }
    }

    fn fraction(&self, field: &str, value: f64) -> Result<f64, PolicyError> {
        if value.is_finite() && value > 0.0 && value <= 1.0 {
            Ok(value)
        } else {
            Err(self.out_of_range(field, value, "a fraction in (0, 1]".to_owned()))
        }
    }

    fn out_of_range(&self, field: &str, value: impl fmt::Display, expected: String) -> PolicyError {
        PolicyError::new(self.key(field), Problem::OutOfRange { value: value.to_string(), expected })
    }
}

const DAY_S: f64 = 86_400.0;

/// The breaker section of a scope as deserialized: every field optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// Consecutive failures that open the gate (*required*).
    pub fail_threshold: Option<u32>,
    /// First open duration in seconds (*required*).
    pub cooldown_s: Option<f64>,
    /// Window samples before the rate channel may open (default 10).
    pub min_calls: Option<u32>,
    /// Window failure rate that opens the gate (default 0.6).
    pub fail_rate: Option<f64>,
    /// Rate window length in seconds, two buckets of half each (default 60).
    pub window_s: Option<f64>,
    /// Cap of the escalated open duration (default max(300, cooldown_s)).
    pub max_cooldown_s: Option<f64>,
    /// Probe successes that close a half-open gate (default 1).
    pub half_open_successes: Option<u32>,
    /// Probe lease length in seconds (default derived from the sources' timeouts).
    pub probe_ttl_s: Option<f64>,
    /// Attempts slower than this many seconds count as slow (default: no slow-call channel).
    pub slow_call_s: Option<f64>,
    /// Window slow-call rate that opens the gate (default 0.5; with `slow_call_s`).
    pub slow_rate: Option<f64>,
    /// Whether open times adapt to the window's success rate R:
    /// `clamp(base × (2 − R), sla_min_cooldown_s, sla_max_cooldown_s)` (default false).
    pub sla_adaptive: Option<bool>,
    /// Floor of an SLA-adaptive open time (default `cooldown_s`).
    pub sla_min_cooldown_s: Option<f64>,
    /// Cap of an SLA-adaptive open time (default `max_cooldown_s`; at most that).
    pub sla_max_cooldown_s: Option<f64>,
}

/// Validated breaker policy of one scope (SPEC §3).
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerPolicy {
    /// Configured consecutive threshold before raising by concurrency.
    pub fail_threshold: u32,
    /// First open duration; the consecutive channel always opens for exactly this long.
    pub cooldown: Duration,
    /// Window samples before the rate channel may open, and before health evidence suppresses
    /// the consecutive channel.
    pub min_calls: u32,
    /// Window failure rate that opens the gate.
    pub fail_rate: f64,
    /// Rate window length (two fixed buckets of half each).
    pub window: Duration,
    /// Cap of every open duration and so of every `retry_after`.
    pub max_cooldown: Duration,
    /// Probe successes that close a half-open gate.
    pub half_open_successes: u32,
    /// Probe lease length; `None` derives it from the sources' timeouts.
    pub probe_ttl: Option<Duration>,
    /// The slow-call channel: attempts slower than this are slow (`None`: no channel).
    pub slow_call: Option<Duration>,
    /// Window slow-call rate that opens the gate.
    pub slow_rate: f64,
    /// SLA-adaptive open times: `(floor, cap)` of `base × (2 − R)` (`None`: off).
    pub sla_cooldown: Option<(Duration, Duration)>,
}

impl BreakerPolicy {
    /// The consecutive threshold raised by a concurrency: `max(fail_threshold, raise_by × 2)`
    /// (SPEC §3: a source's own `max_concurrency`; the `baseline` preset raises it by the scope's).
    pub fn raised_threshold(&self, raise_by: u32) -> u32 {
        self.fail_threshold.max(raise_by.saturating_mul(2))
    }
}

impl BreakerConfig {
    /// `over`'s keys where it sets them, this section's elsewhere (a tier's overlay).
    pub fn overlaid(&self, over: &BreakerConfig) -> BreakerConfig {
        BreakerConfig {
            fail_threshold: over.fail_threshold.or(self.fail_threshold),
            cooldown_s: over.cooldown_s.or(self.cooldown_s),
            min_calls: over.min_calls.or(self.min_calls),
            fail_rate: over.fail_rate.or(self.fail_rate),
            window_s: over.window_s.or(self.window_s),
            max_cooldown_s: over.max_cooldown_s.or(self.max_cooldown_s),
            half_open_successes: over.half_open_successes.or(self.half_open_successes),
            probe_ttl_s: over.probe_ttl_s.or(self.probe_ttl_s),
            slow_call_s: over.slow_call_s.or(self.slow_call_s),
            slow_rate: over.slow_rate.or(self.slow_rate),
            sla_adaptive: over.sla_adaptive.or(self.sla_adaptive),
            sla_min_cooldown_s: over.sla_min_cooldown_s.or(self.sla_min_cooldown_s),
            sla_max_cooldown_s: over.sla_max_cooldown_s.or(self.sla_max_cooldown_s),
        }
    }

    /// Fills defaults and validates; `prefix` is the key of this section (e.g. `chat.breaker`).
    pub fn resolve(&self, prefix: &str) -> Result<BreakerPolicy, PolicyError> {
        let f = Fields { prefix };
        let fail_threshold = f.int("fail_threshold", f.required("fail_threshold", self.fail_threshold)?, 1, 100_000)?;
        let cooldown_s = f.required("cooldown_s", self.cooldown_s)?;
        let cooldown = f.secs("cooldown_s", cooldown_s, 0.001, DAY_S)?;
        let max_cooldown_s = self.max_cooldown_s.unwrap_or(cooldown_s.max(300.0));
        let max_cooldown = f.secs("max_cooldown_s", max_cooldown_s, cooldown_s, 7.0 * DAY_S)?;
        Ok(BreakerPolicy {
            fail_threshold,
            cooldown,
            min_calls: f.int("min_calls", self.min_calls.unwrap_or(10), 1, 1_000_000)?,
            fail_rate: f.fraction("fail_rate", self.fail_rate.unwrap_or(0.6))?,
            window: f.secs("window_s", self.window_s.unwrap_or(60.0), 0.002, DAY_S)?,
            max_cooldown,
            half_open_successes: f.int("half_open_successes", self.half_open_successes.unwrap_or(1), 1, 1000)?,
            probe_ttl: self.probe_ttl_s.map(|s| f.secs("probe_ttl_s", s, 0.001, DAY_S)).transpose()?,
            slow_call: self.slow_call_s.map(|s| f.secs("slow_call_s", s, 0.001, DAY_S)).transpose()?,
            slow_rate: f.fraction("slow_rate", self.slow_rate.unwrap_or(0.5))?,
            sla_cooldown: if self.sla_adaptive.unwrap_or(false) {
                let max_s = max_cooldown.as_secs_f64();
                let cap_s = self.sla_max_cooldown_s.unwrap_or(max_s);
                let cap = f.secs("sla_max_cooldown_s", cap_s, 0.001, max_s)?;
                Some((f.secs("sla_min_cooldown_s", self.sla_min_cooldown_s.unwrap_or(cooldown_s.min(cap_s)), 0.001, cap_s)?, cap))
            } else {
                None
            },
        })
    }
}

/// What a call does when the breaker side or the quota side leaves no runnable source (§6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitMode {
    /// Sleep (the `nap` rule) and pick again, within the stall bound.
    Wait,
    /// End the call at once with a typed error carrying the retry hint.
    FailFast,
}

/// An API key: deserialized like a string, never shown by `Debug` or `Display`, and never
/// written: it has no `Serialize`, so a config dump or a report cannot carry it (a type that
/// holds one skips it when serialized).
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Secret(key.into())
    }

    /// The key itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// One source of a scope as deserialized.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Endpoint base URL (the HTTP adapter requires it).
    pub base_url: Option<String>,
    /// Provider API key: it names the provider account. Never serialized: a written config
    /// leaves it out, to be given again (by the file or `{SCOPE}__SOURCES__{NAME}__API_KEY`).
    #[serde(skip_serializing)]
    pub api_key: Option<Secret>,
    /// The provider account the source draws on (default: a digest of its `api_key`, so sources
    /// with one key share one account; the source's own name without a key). Sources of one
    /// account share its learned limit and in-flight count.
    pub account: Option<String>,
    /// Model name sent upstream.
    pub model: Option<String>,
    /// Whole-attempt timeout in seconds (default 60).
    pub timeout_s: Option<f64>,
    /// Stream first-token / idle limit in seconds (optional).
    pub watchdog_s: Option<f64>,
    /// Local in-flight cap (optional); also raises the breaker's consecutive threshold.
    pub max_concurrency: Option<u32>,
    /// Local requests-per-minute cap (optional).
    pub rpm: Option<u32>,
    /// Local tokens-per-minute cap (optional).
    pub tpm: Option<u32>,
    /// Extra HTTP headers sent with every request.
    pub headers: Option<BTreeMap<String, String>>,
}

/// Validated source of a scope.
#[derive(Clone, Debug, PartialEq)]
pub struct SourcePolicy {
    /// Name, unique in the scope: `[A-Za-z0-9_-]+`.
    pub name: String,
    /// Endpoint base URL.
    pub base_url: Option<String>,
    /// Provider API key.
    pub api_key: Option<Secret>,
    /// The provider account: explicit, a digest of the key (`key-…`), or the source's name.
    pub account: String,
    /// Model name sent upstream.
    pub model: Option<String>,
    /// Whole-attempt timeout.
    pub timeout: Duration,
    /// Stream first-token / idle limit.
    pub watchdog: Option<Duration>,
    /// Local quota of this source.
    pub quota: QuotaLimits,
    /// Extra HTTP headers.
    pub headers: BTreeMap<String, String>,
}

/// The local quota of one source; `None` is unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Attempts in flight at once.
    pub max_concurrency: Option<u32>,
    /// Attempts started per rolling minute.
    pub rpm: Option<u32>,
    /// Tokens per rolling minute (estimated at acquire, corrected at settle).
    pub tpm: Option<u32>,
    /// How long a permit's concurrency slot is held if it is never released (a crashed
    /// worker): twice the source timeout, so a live attempt never outlives its permit.
    pub permit_ttl: Duration,
}

impl QuotaLimits {
    /// How long an account's state is kept after its last use: an hour past its last permit's
    /// lease and the rolling minute of its starts (both backends; the Redis keys' TTL).
    pub fn keep_for(&self) -> Duration {
        self.permit_ttl.saturating_add(Duration::from_secs(60 + 3600))
    }
}

impl Default for QuotaLimits {
    fn default() -> Self {
        QuotaLimits { max_concurrency: None, rpm: None, tpm: None, permit_ttl: Duration::from_secs(120) }
    }
}

impl SourceConfig {
    /// Validates the source named `name`; `prefix` is this section's key (`chat.sources.s1`).
    pub fn resolve(&self, name: &str, prefix: &str) -> Result<SourcePolicy, PolicyError> {
        let f = Fields { prefix };
        check_name(name, prefix)?;
        let positive = |field: &str, v: Option<u32>| v.map(|v| f.int(field, v, 1, u32::MAX)).transpose();
        let timeout = f.secs("timeout_s", self.timeout_s.unwrap_or(60.0), 0.001, DAY_S)?;
        let account = match (&self.account, &self.api_key) {
            (Some(account), _) => {
                check_name(account, &f.key("account"))?;
                account.clone()
            }
            (None, Some(key)) => {
                use sha2::Digest;
                let digest = sha2::Sha256::digest(key.expose().as_bytes());
                format!("key-{}", digest.iter().take(8).map(|b| format!("{b:02x}")).collect::<String>())
            }
            (None, None) => name.to_owned(),
        };
        Ok(SourcePolicy {
            name: name.to_owned(),
            base_url: self.base_url.clone(),
            api_key: self.api_key.clone(),
            account,
            model: self.model.clone(),
            timeout,
            watchdog: self.watchdog_s.map(|s| f.secs("watchdog_s", s, 0.001, DAY_S)).transpose()?,
            quota: QuotaLimits {
                max_concurrency: positive("max_concurrency", self.max_concurrency)?,
                rpm: positive("rpm", self.rpm)?,
                tpm: positive("tpm", self.tpm)?,
                permit_ttl: timeout.saturating_mul(2),
            },
            headers: self.headers.clone().unwrap_or_default(),
        })
    }
}

/// Names become environment keys (which are matched case-blind) and Redis key parts, so they
/// are kept to one case and a safe alphabet.
fn check_name(name: &str, key: &str) -> Result<(), PolicyError> {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-') {
        Ok(())
    } else {
        Err(PolicyError::new(
            key,
            Problem::Invalid { value: name.to_owned(), reason: "names use only lower-case letters, digits, '_' and '-'".to_owned() },
        ))
    }
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
    /// Stall bound in seconds (default 300).
    pub stall_window_s: Option<f64>,
    /// Poll interval of a waiting call in seconds (default 0.05).
    pub poll_interval_s: Option<f64>,
    /// Concurrency of the scope: the AIMD ceiling (default 64).
    pub concurrency: Option<u32>,
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

/// A tier: an overlay on the scope's policy for the tenants assigned to it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    /// Breaker keys that differ from the scope's.
    #[serde(default)]
    pub breaker: BreakerConfig,
}

/// What a `per_tenant` scope does with a tenant that has no tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownTenant {
    /// The scope's own policy.
    #[default]
    Default,
    /// Refuse the call, naming the tenant.
    Reject,
}

/// Whether tenants share a scope's gates and local state (SPEC §11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// One set of gates and local state for every tenant.
    #[default]
    Shared,
    /// Gates, memo, health EWMA, AIMD and quota keyed by (tenant, source).
    PerTenant,
}

impl Isolation {
    /// The config value: `shared` or `per_tenant`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Isolation::Shared => "shared",
            Isolation::PerTenant => "per_tenant",
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
    /// Stall bound of a waiting call.
    pub stall_window: Duration,
    /// Poll interval of a waiting call.
    pub poll_interval: Duration,
    /// Scope concurrency: the AIMD ceiling.
    pub concurrency: u32,
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
        // A probe lease shorter than an attempt may run would let a second probe start while
        // the first is still in flight.
        let slowest = sources.iter().map(|s| s.timeout).max().unwrap_or_default();
        let check_ttl = |breaker: &BreakerPolicy, key: &str| match breaker.probe_ttl.filter(|ttl| *ttl < slowest) {
            Some(ttl) => Err(f.out_of_range(
                key,
                ttl.as_secs_f64(),
                format!("at least the slowest source timeout, {} seconds", slowest.as_secs_f64()),
            )),
            None => Ok(()),
        };
        check_ttl(&breaker, "breaker.probe_ttl_s")?;
        let isolation = self.isolation.unwrap_or_default();
        let per_tenant_only = |key: &str, set: bool| {
            if set && isolation != Isolation::PerTenant {
                Err(PolicyError::new(
                    f.key(key),
                    Problem::Invalid {
                        value: "set".into(),
                        reason: "tiers apply to tenants' own gates: set isolation = \"per_tenant\"".into(),
                    },
                ))
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
            check_ttl(&tier_breaker, &format!("tiers.{tier}.breaker.probe_ttl_s"))?;
            tiers.insert(tier.clone(), tier_breaker);
        }
        for (tenant, tier) in &self.tenants {
            check_name(tenant, &f.key(&format!("tenants.{tenant}")))?;
            if !tiers.contains_key(tier) {
                let known = self.tiers.keys().cloned().collect::<Vec<_>>().join(", ");
                return Err(PolicyError::new(
                    f.key(&format!("tenants.{tenant}")),
                    Problem::Invalid {
                        value: tier.clone(),
                        reason: format!("no such tier (tiers: {})", if known.is_empty() { "none" } else { &known }),
                    },
                ));
            }
        }
        let stall_window = f.secs("stall_window_s", self.stall_window_s.unwrap_or(300.0), 0.001, DAY_S)?;
        let stall_window_s = stall_window.as_secs_f64();
        let base_s = self.backoff_base_s.unwrap_or(0.25);
        let base = f.secs("backoff_base_s", base_s, 0.001, 3600.0)?;
        // Defaults follow the values they depend on, so a default never contradicts a key the
        // user did set (a 10 s base raises the default cap; a 10 ms stall window lowers the poll).
        let backoff =
            crate::backoff::Backoff { base, cap: f.secs("backoff_cap_s", self.backoff_cap_s.unwrap_or(base_s.max(8.0)), base_s, 3600.0)? };
        Ok(ScopePolicy {
            name: name.to_owned(),
            breaker,
            circuit_open: self.circuit_open.unwrap_or(WaitMode::FailFast),
            quota_full: self.quota_full.unwrap_or(WaitMode::Wait),
            selector: self.selector.unwrap_or_default(),
            max_retries: f.int("max_retries", self.max_retries.unwrap_or(3), 0, 100)?,
            structured_max_retries: f.int("structured_max_retries", self.structured_max_retries.unwrap_or(2), 0, 100)?,
            stall_window,
            poll_interval: f.secs("poll_interval_s", self.poll_interval_s.unwrap_or(stall_window_s.min(0.05)), 0.001, stall_window_s)?,
            concurrency: f.int("concurrency", self.concurrency.unwrap_or(64), 1, 1_000_000)?,
            backoff,
            isolation,
            max_tenants: f.int("max_tenants", self.max_tenants.unwrap_or(10_000), 1, 10_000_000)?,
            tenant_idle: f.secs("tenant_idle_s", self.tenant_idle_s.unwrap_or(600.0), 0.001, 30.0 * DAY_S)?,
            tiers,
            tenant_tiers: self.tenants.clone(),
            unknown_tenant: self.unknown_tenant.unwrap_or_default(),
            fallback: match &self.fallback {
                Some(fallback) if fallback == name => {
                    return Err(PolicyError::new(
                        f.key("fallback"),
                        Problem::Invalid { value: fallback.clone(), reason: "a scope cannot fall back to itself".into() },
                    ));
                }
                Some(fallback) => {
                    check_name(fallback, &f.key("fallback"))?;
                    Some(fallback.clone())
                }
                None => None,
            },
            kinds: match self.kinds.as_ref().map(OneOrMany::to_vec) {
                None => Kind::ALL.to_vec(),
                Some(mut kinds) => {
                    kinds.sort();
                    kinds.dedup();
                    if kinds.is_empty() {
                        return Err(PolicyError::new(
                            f.key("kinds"),
                            Problem::Invalid { value: "[]".into(), reason: "a scope serves at least one kind (chat, embeddings)".into() },
                        ));
                    }
                    kinds
                }
            },
            sources,
        })
    }
}

impl ScopePolicy {
    /// The AIMD pacer parameters of the scope's accounts: the scope's concurrency as the
    /// ceiling, leases living twice the slowest source's timeout.
    pub fn pacer_params(&self) -> crate::aimd::PacerParams {
        let slowest = self.sources.iter().map(|s| s.timeout).max().unwrap_or_default();
        crate::aimd::PacerParams { ceiling: f64::from(self.concurrency), lease_ttl: slowest.saturating_mul(2) }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(toml_breaker: BreakerConfig) -> ScopeConfig {
        ScopeConfig {
            breaker: toml_breaker,
            sources: BTreeMap::from([("s1".to_owned(), SourceConfig::default())]),
            ..ScopeConfig::default()
        }
    }

    fn required() -> BreakerConfig {
        BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() }
    }

    fn err(config: &ScopeConfig) -> String {
        config.resolve("chat").unwrap_err().to_string()
    }

    #[test]
    fn defaults_follow_the_spec() {
        let p = scope(required()).resolve("chat").unwrap();
        assert_eq!(p.breaker.min_calls, 10);
        assert_eq!(p.breaker.fail_rate, 0.6);
        assert_eq!(p.breaker.window, Duration::from_secs(60));
        assert_eq!(p.breaker.max_cooldown, Duration::from_secs(300));
        assert_eq!(p.breaker.half_open_successes, 1);
        assert_eq!((p.circuit_open, p.quota_full), (WaitMode::FailFast, WaitMode::Wait));
        assert_eq!((p.max_retries, p.structured_max_retries), (3, 2));
        assert_eq!(p.stall_window, Duration::from_secs(300));
        assert_eq!(p.poll_interval, Duration::from_millis(50));
        assert_eq!(p.selector, SelectorKind::HealthAware);
        assert_eq!(p.sources[0].timeout, Duration::from_secs(60));
    }

    #[test]
    fn max_cooldown_defaults_to_at_least_cooldown() {
        let p = scope(BreakerConfig { cooldown_s: Some(900.0), ..required() }).resolve("chat").unwrap();
        assert_eq!(p.breaker.max_cooldown, Duration::from_secs(900));
    }

    #[test]
    fn missing_required_keys_are_named() {
        let no_threshold = scope(BreakerConfig { fail_threshold: None, ..required() });
        assert_eq!(err(&no_threshold), "chat.breaker.fail_threshold: required key is missing");
        let no_cooldown = scope(BreakerConfig { cooldown_s: None, ..required() });
        assert_eq!(err(&no_cooldown), "chat.breaker.cooldown_s: required key is missing");
        let no_sources = ScopeConfig { breaker: required(), ..ScopeConfig::default() };
        assert_eq!(err(&no_sources), "chat.sources: required key is missing");
    }

    #[test]
    fn out_of_range_values_are_named_with_the_value() {
        let cases: Vec<(BreakerConfig, &str)> = vec![
            (BreakerConfig { fail_threshold: Some(0), ..required() }, "chat.breaker.fail_threshold: value 0 is out of range"),
            (BreakerConfig { cooldown_s: Some(-1.0), ..required() }, "chat.breaker.cooldown_s: value -1 is out of range"),
            (BreakerConfig { cooldown_s: Some(f64::NAN), ..required() }, "chat.breaker.cooldown_s: value NaN is out of range"),
            (BreakerConfig { fail_rate: Some(1.5), ..required() }, "chat.breaker.fail_rate: value 1.5 is out of range"),
            (BreakerConfig { fail_rate: Some(0.0), ..required() }, "chat.breaker.fail_rate: value 0 is out of range"),
            (BreakerConfig { min_calls: Some(0), ..required() }, "chat.breaker.min_calls: value 0 is out of range"),
            (BreakerConfig { window_s: Some(0.0), ..required() }, "chat.breaker.window_s: value 0 is out of range"),
            (
                BreakerConfig { max_cooldown_s: Some(30.0), ..required() },
                "chat.breaker.max_cooldown_s: value 30 is out of range (expected 60..=",
            ),
            (BreakerConfig { half_open_successes: Some(0), ..required() }, "chat.breaker.half_open_successes: value 0 is out of range"),
            (BreakerConfig { probe_ttl_s: Some(f64::INFINITY), ..required() }, "chat.breaker.probe_ttl_s: value inf is out of range"),
        ];
        for (breaker, expected) in cases {
            let message = err(&scope(breaker));
            assert!(message.starts_with(expected), "{message:?} does not start with {expected:?}");
        }
    }

    #[test]
    fn scope_and_source_errors_are_named() {
        let mut bad_poll = scope(required());
        bad_poll.poll_interval_s = Some(400.0);
        assert!(err(&bad_poll).starts_with("chat.poll_interval_s: value 400 is out of range"));
        let mut bad_backoff = scope(required());
        bad_backoff.backoff_cap_s = Some(0.1);
        assert!(err(&bad_backoff).starts_with("chat.backoff_cap_s: value 0.1 is out of range"));
        let mut bad_retries = scope(required());
        bad_retries.max_retries = Some(1000);
        assert!(err(&bad_retries).starts_with("chat.max_retries: value 1000 is out of range"));
        let mut bad_rpm = scope(required());
        bad_rpm.sources.insert("s2".into(), SourceConfig { rpm: Some(0), ..SourceConfig::default() });
        assert!(err(&bad_rpm).starts_with("chat.sources.s2.rpm: value 0 is out of range"));
        let mut bad_name = scope(required());
        bad_name.sources.insert("s 3".into(), SourceConfig::default());
        assert!(err(&bad_name).starts_with("chat.sources.s 3: value \"s 3\" is invalid"));
        assert!(scope(required()).resolve("").unwrap_err().to_string().contains("is invalid"));
        let mut upper = scope(required());
        upper.sources.insert("OpenAI".into(), SourceConfig::default());
        assert!(err(&upper).contains("lower-case"), "{}", err(&upper));
    }

    #[test]
    fn a_probe_lease_shorter_than_a_source_timeout_is_refused() {
        let mut config = scope(BreakerConfig { probe_ttl_s: Some(20.0), ..required() });
        config.sources.insert("s1".into(), SourceConfig { timeout_s: Some(30.0), ..SourceConfig::default() });
        assert_eq!(
            err(&config),
            "chat.breaker.probe_ttl_s: value 20 is out of range (expected at least the slowest source timeout, 30 seconds)"
        );
        config.breaker.probe_ttl_s = Some(30.0);
        assert_eq!(config.resolve("chat").unwrap().gate_params(0).unwrap().probe_ttl_ms(), 30_000);
    }

    #[test]
    fn baseline_knobs_are_not_config_keys() {
        for key in ["rate_channel", "escalate_cooldown", "threshold_basis"] {
            let e = serde_json::from_str::<BreakerConfig>(&format!(r#"{{"{key}": false}}"#)).unwrap_err().to_string();
            assert!(e.contains(&format!("unknown field `{key}`")), "{e}");
        }
    }

    #[test]
    fn defaults_follow_the_keys_they_depend_on() {
        let mut config = scope(required());
        config.backoff_base_s = Some(10.0);
        config.stall_window_s = Some(0.01);
        let p = config.resolve("chat").unwrap();
        assert_eq!((p.backoff.cap, p.poll_interval), (Duration::from_secs(10), Duration::from_millis(10)));
    }

    #[test]
    fn env_key_is_the_spec_form() {
        let e = scope(BreakerConfig { fail_threshold: None, ..required() }).resolve("chat").unwrap_err();
        assert_eq!(e.env_key(), "CHAT__BREAKER__FAIL_THRESHOLD");
    }

    #[test]
    fn unknown_keys_are_refused_by_deserialization() {
        let e = serde_json::from_str::<BreakerConfig>(r#"{"fail_treshold": 5}"#).unwrap_err().to_string();
        assert!(e.contains("unknown field `fail_treshold`"), "{e}");
        let e = serde_json::from_str::<ScopeConfig>(r#"{"circuit_open": "sometimes"}"#).unwrap_err().to_string();
        assert!(e.contains("unknown variant `sometimes`"), "{e}");
    }

    #[test]
    fn sources_of_one_key_share_an_account_unless_they_name_another() {
        let mut config = scope(required());
        let key = Some(Secret::new("sk-shared"));
        config.sources.insert("s1".into(), SourceConfig { api_key: key.clone(), ..SourceConfig::default() });
        config.sources.insert("s2".into(), SourceConfig { api_key: key.clone(), ..SourceConfig::default() });
        config.sources.insert("s3".into(), SourceConfig { api_key: key, account: Some("k9".into()), ..SourceConfig::default() });
        config.sources.insert("s4".into(), SourceConfig::default());
        let p = config.resolve("chat").unwrap();
        let accounts: Vec<&str> = p.sources.iter().map(|s| s.account.as_str()).collect();
        assert_eq!(accounts[0], accounts[1]);
        assert!(accounts[0].starts_with("key-") && accounts[0].len() == 20 && !accounts[0].contains("shared"), "{}", accounts[0]);
        assert_eq!(&accounts[2..], ["k9", "s4"]);
        config.sources.insert("s5".into(), SourceConfig { account: Some("K 1".into()), ..SourceConfig::default() });
        assert!(err(&config).starts_with("chat.sources.s5.account: value \"K 1\" is invalid"), "{}", err(&config));
    }

    #[test]
    fn api_keys_never_reach_debug_output() {
        let source = SourceConfig { api_key: Some(Secret::new("sk-live-123")), ..SourceConfig::default() };
        let shown = format!("{:?}", source.resolve("s1", "chat.sources.s1").unwrap());
        assert!(!shown.contains("sk-live-123") && shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn api_keys_are_never_serialized() {
        let source = SourceConfig { api_key: Some(Secret::new("sk-live-123")), model: Some("m".into()), ..SourceConfig::default() };
        let scope = ScopeConfig { sources: BTreeMap::from([("s1".to_owned(), source.clone())]), ..ScopeConfig::default() };
        for written in [serde_json::to_string(&source).unwrap(), serde_json::to_string(&scope).unwrap()] {
            assert!(!written.contains("sk-live-123") && !written.contains("api_key"), "{written}");
            assert!(written.contains(r#""model":"m""#), "the other keys are written: {written}");
        }
    }

    #[test]
    fn threshold_is_raised_by_the_source_concurrency_not_the_scope() {
        let mut config = scope(required());
        config.concurrency = Some(100);
        config.sources.insert("s1".into(), SourceConfig { max_concurrency: Some(16), ..SourceConfig::default() });
        config.sources.insert("s2".into(), SourceConfig { max_concurrency: Some(1), ..SourceConfig::default() });
        let p = config.resolve("chat").unwrap();
        assert_eq!(p.gate_params(0).unwrap().threshold(), 32);
        assert_eq!(p.gate_params(1).unwrap().threshold(), 5);
        assert!(p.gate_params(2).is_none());
    }
}
