//! Scenarios as data: the workload, the gateway scope it runs through, and the simulated
//! providers and accounts behind the sources (SPEC §12). The built-in ones live in
//! `scenarios/*.toml`.

use gateway_core::policy::{PolicyError, ScopeConfig, ScopePolicy};
use serde::Deserialize;
use std::collections::BTreeMap;

/// A scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name (`p6`).
    pub name: String,
    /// One line for the report.
    pub description: String,
    /// Calls in the run.
    pub calls: u32,
    /// Closed-loop workers: each takes the next call when its call ends.
    pub workers: u32,
    /// Share of calls whose payload every provider rejects with 400.
    #[serde(default)]
    pub poison_rate: f64,
    /// Whether every call asks for structured output (JSON).
    #[serde(default)]
    pub structured: bool,
    /// The gateway scope the calls go through (the `[scope]` table of a config file), as
    /// written: [`Scenario::scope_named`] gives it as run, scaled.
    pub gateway: ScopeConfig,
    /// Provider accounts whose limits several sources share.
    #[serde(default)]
    pub accounts: BTreeMap<String, Account>,
    /// The simulated provider behind each source, by source name.
    pub providers: BTreeMap<String, Provider>,
    /// Tenants sharing the scope, by name (none: every call is untenanted). Each takes its
    /// share of the calls and of the workers.
    #[serde(default)]
    pub tenants: BTreeMap<String, Tenant>,
    /// A scenario the soak runs beside this one for its line on tenants sharing an account.
    #[serde(default)]
    pub flood: Option<Flood>,
    /// What every duration of the scenario is multiplied by in this run (1 as written; see
    /// [`Scenario::scaled`]).
    #[serde(skip, default = "unscaled")]
    pub time_scale: f64,
    /// The `--set KEY=VALUE` overrides it was loaded with (worker processes load it the same).
    #[serde(skip)]
    pub overrides: Vec<String>,
}

fn unscaled() -> f64 {
    1.0
}

/// A tenant of the workload.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    /// Its share of the calls and of the workers (the shares sum to 1).
    pub share: f64,
    /// Whether its prompts are long (providers with `long_timeout_rate` time out on them).
    #[serde(default)]
    pub long_prompts: bool,
    /// Seconds a worker of this tenant waits between the end of a call and the next (its users'
    /// think time); 0: the next call starts at once.
    #[serde(default)]
    pub think_s: f64,
}

/// A provider account's own limits (they answer 429) and other tenants' load.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Account {
    /// Requests in flight above this are refused with 429 at once.
    pub max_inflight: u32,
    /// Requests started in the last 60 s above this are refused with 429.
    pub rpm: u32,
    /// Share of requests refused with 429 because of other tenants.
    #[serde(default)]
    pub background_429: f64,
    /// Every this many seconds an external peak starts…
    #[serde(default)]
    pub peak_every_s: f64,
    /// …lasting this long…
    #[serde(default)]
    pub peak_len_s: f64,
    /// …during which the in-flight capacity shrinks to this.
    #[serde(default)]
    pub peak_inflight: u32,
    /// Whether its answers carry OpenAI's rate-limit headers (`x-ratelimit-*-requests`; default
    /// true).
    #[serde(default = "yes")]
    pub rate_limit_headers: bool,
}

fn yes() -> bool {
    true
}

/// What an answer that fails structured output looks like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonShape {
    /// It opens with prose (ended at a stream's commit point).
    #[default]
    Prose,
    /// JSON cut off (a dropped relay, a cut at `max_tokens`): it opens like JSON.
    Truncated,
    /// Half each.
    Mixed,
}

/// What kind of endpoint a provider is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Answers, with the configured latency and failure rates.
    #[default]
    Answers,
    /// Its key is bad: 401 after the latency.
    BadKey,
    /// Accepts and never answers (the attempt ends at the source's timeout).
    Blackhole,
}

/// A simulated provider.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    /// Its kind.
    #[serde(default)]
    pub kind: Kind,
    /// The account it shares limits with.
    pub account: Option<String>,
    /// Median latency (time to the first token when the source has a watchdog), seconds.
    #[serde(default = "default_latency")]
    pub latency_median_s: f64,
    /// σ of the lognormal latency.
    #[serde(default)]
    pub latency_sigma: f64,
    /// Share of answers with empty content.
    #[serde(default)]
    pub empty_rate: f64,
    /// Share of 5xx answers.
    #[serde(default)]
    pub error_5xx_rate: f64,
    /// Share of answers that fail structured output.
    #[serde(default)]
    pub invalid_json_rate: f64,
    /// What those look like: `prose` (opens with prose, default), `truncated` (JSON cut off:
    /// opens like JSON, fails only at its end) or `mixed` (half each).
    #[serde(default)]
    pub invalid_json_shape: JsonShape,
    /// Share of long prompts it never answers within the source's timeout.
    #[serde(default)]
    pub long_timeout_rate: f64,
    /// Windows of scenario time when it refuses connections.
    #[serde(default)]
    pub outages: Vec<Outage>,
}

fn default_latency() -> f64 {
    1.0
}

/// A window of refused connections.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outage {
    /// Start, seconds of scenario time.
    pub from_s: f64,
    /// End, seconds of scenario time.
    pub to_s: f64,
}

/// A scenario that cannot run, naming the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioError {
    /// No such built-in scenario and no such file.
    #[error("unknown scenario {name:?} (built in: {known}; or give a path to a .toml file)")]
    Unknown {
        /// What was asked.
        name: String,
        /// The built-in names.
        known: String,
    },
    /// The file is not a scenario.
    #[error("scenario {name}: {detail}")]
    Invalid {
        /// The scenario.
        name: String,
        /// What is wrong, naming the key.
        detail: String,
    },
}

/// The built-in scenarios, by name.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("p6", include_str!("../scenarios/p6.toml")),
    ("p6-rpm", include_str!("../scenarios/p6-rpm.toml")),
    ("mixed", include_str!("../scenarios/mixed.toml")),
    ("single-relay", include_str!("../scenarios/single-relay.toml")),
    ("tenants", include_str!("../scenarios/tenants.toml")),
    ("tenants-flood", include_str!("../scenarios/tenants-flood.toml")),
];

impl Scenario {
    /// A built-in scenario by name, or a scenario file by path.
    pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
        Scenario::load_with(name_or_path, &[])
    }

    /// [`Scenario::load`], with `sets` (`KEY=VALUE`, a dotted key of the file and a TOML value,
    /// or a bare word as a string) applied to the file before it is read.
    pub fn load_with(name_or_path: &str, sets: &[String]) -> Result<Scenario, ScenarioError> {
        let text = match BUILT_IN.iter().find(|(name, _)| *name == name_or_path) {
            Some((_, text)) => (*text).to_owned(),
            None => std::fs::read_to_string(name_or_path).map_err(|_| ScenarioError::Unknown {
                name: name_or_path.to_owned(),
                known: BUILT_IN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            })?,
        };
        let text = overridden(&text, sets).map_err(|detail| ScenarioError::Invalid { name: name_or_path.to_owned(), detail })?;
        let mut scenario = Scenario::parse(name_or_path, &text)?;
        scenario.overrides = sets.to_vec();
        Ok(scenario)
    }

    /// Parses and checks a scenario.
    pub fn parse(name: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let invalid = |detail: String| ScenarioError::Invalid { name: name.to_owned(), detail };
        let scenario: Scenario = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let scope = scenario.scope().map_err(|e| invalid(format!("gateway.{e}")))?;
        for source in &scope.sources {
            let Some(provider) = scenario.providers.get(&source.name) else {
                return Err(invalid(format!("providers.{}: required key is missing (every gateway source needs a provider)", source.name)));
            };
            if let Some(account) = provider.account.as_ref().filter(|a| !scenario.accounts.contains_key(*a)) {
                return Err(invalid(format!("providers.{}.account: no account {account:?}", source.name)));
            }
        }
        if scenario.calls == 0 || scenario.workers == 0 {
            return Err(invalid("calls and workers must be at least 1".into()));
        }
        if let Some((name, _)) = scenario.tenants.iter().find(|(_, t)| !(t.share > 0.0 && t.share <= 1.0)) {
            return Err(invalid(format!("tenants.{name}.share: a share is within (0, 1]")));
        }
        if let Some((name, t)) = scenario.tenants.iter().find(|(_, t)| !(t.think_s.is_finite() && (0.0..=3600.0).contains(&t.think_s))) {
            return Err(invalid(format!("tenants.{name}.think_s: {} is not within 0..=3600 seconds", t.think_s)));
        }
        let total: f64 = scenario.tenants.values().map(|t| t.share).sum();
        if !scenario.tenants.is_empty() && (total - 1.0).abs() > 1e-9 {
            return Err(invalid(format!("tenants: the shares sum to {total}, not 1")));
        }
        Ok(scenario)
    }

    /// The gateway scope (named `soak`), as run: see [`Scenario::scope_named`].
    pub fn scope(&self) -> Result<ScopePolicy, PolicyError> {
        self.scope_named("soak")
    }

    /// The gateway scope under `name` as run: the policy gateway-core resolves (defaults
    /// included), with every duration multiplied by the time scale and per-minute limits divided
    /// by it.
    pub fn scope_named(&self, name: &str) -> Result<ScopePolicy, PolicyError> {
        Ok(scaled_policy(self.gateway.resolve(name)?, self.time_scale))
    }

    /// Length of the accounts' rate window in seconds: 60, less in a scaled run.
    pub fn minute_s(&self) -> f64 {
        60.0 * self.time_scale
    }

    /// The same scenario with every duration multiplied by `scale` (a real-time run at
    /// `--time-scale`): the gateway's (through [`Scenario::scope_named`]), the providers'
    /// latencies and outages, the tenants' think times, the accounts' peaks and rate windows;
    /// per-minute limits are divided by it, since a minute of the scenario lasts `60 × scale`
    /// seconds.
    pub fn scaled(&self, scale: f64) -> Scenario {
        let mut s = self.clone();
        s.time_scale *= scale;
        for provider in s.providers.values_mut() {
            provider.latency_median_s *= scale;
            for outage in &mut provider.outages {
                outage.from_s *= scale;
                outage.to_s *= scale;
            }
        }
        for tenant in s.tenants.values_mut() {
            tenant.think_s *= scale;
        }
        for account in s.accounts.values_mut() {
            account.peak_every_s *= scale;
            account.peak_len_s *= scale;
        }
        s
    }

    /// The best success a call can have: poison payloads always fail, and the best provider
    /// fails a call only when every budgeted attempt fails (or every re-ask is invalid). With
    /// tenants, the mean over them by share (long prompts also time out). Streamed calls have
    /// the same ceiling: the simulated invalid answer opens with prose, so a stream that must be
    /// JSON fails before its commit point and is re-asked like a whole answer.
    pub fn ceiling(&self) -> f64 {
        if self.tenants.is_empty() {
            return self.ceiling_of(false);
        }
        self.tenants.values().map(|t| t.share * self.ceiling_of(t.long_prompts)).sum()
    }

    /// The ceiling of one tenant's calls.
    pub fn tenant_ceiling(&self, tenant: &str) -> Option<f64> {
        self.tenants.get(tenant).map(|t| self.ceiling_of(t.long_prompts))
    }

    fn ceiling_of(&self, long: bool) -> f64 {
        let Ok(scope) = self.scope() else { return 0.0 };
        let best = self
            .providers
            .values()
            .filter(|p| p.kind == Kind::Answers)
            .map(|p| {
                let fail = (p.empty_rate + p.error_5xx_rate + if long { p.long_timeout_rate } else { 0.0 }).min(1.0);
                let invalid = if self.structured { p.invalid_json_rate } else { 0.0 };
                let answers = 1 + scope.structured_max_retries as i32;
                (1.0 - fail.powi(1 + scope.max_retries as i32)) * (1.0 - invalid.powi(answers))
            })
            .fold(0.0, f64::max);
        (1.0 - self.poison_rate) * best
    }
}

mod flood;
mod overrides;
mod scaled;
pub use flood::Flood;
use overrides::overridden;
use scaled::scaled_policy;
#[cfg(test)]
mod tests;
