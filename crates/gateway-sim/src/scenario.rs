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
    /// The gateway scope the calls go through (the `[scope]` table of a config file).
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
    /// Length of the accounts' rate window in seconds (60, less in a scaled run).
    #[serde(skip, default = "default_minute")]
    pub minute_s: f64,
}

fn default_minute() -> f64 {
    60.0
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
    ("single-relay", include_str!("../scenarios/single-relay.toml")),
    ("tenants", include_str!("../scenarios/tenants.toml")),
];

impl Scenario {
    /// A built-in scenario by name, or a scenario file by path.
    pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
        let text = match BUILT_IN.iter().find(|(name, _)| *name == name_or_path) {
            Some((_, text)) => (*text).to_owned(),
            None => std::fs::read_to_string(name_or_path).map_err(|_| ScenarioError::Unknown {
                name: name_or_path.to_owned(),
                known: BUILT_IN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            })?,
        };
        Scenario::parse(name_or_path, &text)
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

    /// The gateway scope (named `soak`).
    pub fn scope(&self) -> Result<ScopePolicy, PolicyError> {
        self.gateway.resolve("soak")
    }

    /// The same scenario with every duration multiplied by `scale` (a real-time run at
    /// `--time-scale`): the gateway's timeouts, windows, cooldowns, back-off and stall bound
    /// (defaults included), the providers' latencies and outages, the accounts' peaks and rate
    /// windows; per-minute limits are divided by it, since a minute of the scenario lasts
    /// `60 × scale` seconds.
    pub fn scaled(&self, scale: f64) -> Scenario {
        let mut s = self.clone();
        let x = |v: Option<f64>, default: f64| Some(v.unwrap_or(default) * scale);
        let per_minute = |v: Option<u32>| v.map(|v| ((f64::from(v) / scale).ceil() as u32).max(1));
        let g = &mut s.gateway;
        let cooldown = g.breaker.cooldown_s.unwrap_or(60.0);
        g.breaker.max_cooldown_s = x(g.breaker.max_cooldown_s, cooldown.max(300.0));
        g.breaker.cooldown_s = g.breaker.cooldown_s.map(|c| c * scale);
        g.breaker.window_s = x(g.breaker.window_s, 60.0);
        g.breaker.probe_ttl_s = g.breaker.probe_ttl_s.map(|t| t * scale);
        g.stall_window_s = x(g.stall_window_s, 300.0);
        g.poll_interval_s = x(g.poll_interval_s, 0.05);
        g.backoff_base_s = x(g.backoff_base_s, 0.25);
        g.backoff_cap_s = x(g.backoff_cap_s, 8.0);
        for source in g.sources.values_mut() {
            source.timeout_s = x(source.timeout_s, 60.0);
            source.watchdog_s = source.watchdog_s.map(|w| w * scale);
            source.rpm = per_minute(source.rpm);
            source.tpm = per_minute(source.tpm);
        }
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
        s.minute_s = 60.0 * scale;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_scenarios_load_and_p6_has_the_seed_ceiling() {
        let p6 = Scenario::load("p6").unwrap();
        assert_eq!((p6.calls, p6.workers), (8000, 100));
        assert!((p6.ceiling() - 0.994).abs() < 0.001, "{}", p6.ceiling());
        Scenario::load("single-relay").unwrap();
        let tenants = Scenario::load("tenants").unwrap();
        assert_eq!(tenants.tenant_ceiling("gold"), Some(1.0));
        assert!(tenants.tenant_ceiling("bronze").unwrap() < 1.0);
    }

    #[test]
    fn scaling_shrinks_every_duration_and_widens_per_minute_limits() {
        let p6 = Scenario::load("p6").unwrap().scaled(0.05);
        let scope = p6.scope().unwrap();
        assert_eq!(scope.breaker.cooldown, std::time::Duration::from_secs(3));
        assert_eq!(scope.breaker.window, std::time::Duration::from_secs(3));
        assert_eq!(scope.stall_window, std::time::Duration::from_secs(15));
        assert_eq!(scope.sources[0].timeout, std::time::Duration::from_millis(1500));
        assert_eq!(scope.sources[3].quota.rpm, Some(120));
        assert_eq!(p6.minute_s, 3.0);
        assert!((p6.providers["s1"].latency_median_s - 0.075).abs() < 1e-12);
    }

    #[test]
    fn bad_scenarios_are_named() {
        let e = Scenario::load("p7").unwrap_err().to_string();
        assert!(e.starts_with("unknown scenario \"p7\" (built in: p6, single-relay"), "{e}");
        let text = include_str!("../scenarios/p6.toml").replace("[providers.s3]\nkind = \"blackhole\"", "");
        assert!(Scenario::parse("x", &text).unwrap_err().to_string().contains("providers.s3: required key is missing"));
        let text = include_str!("../scenarios/p6.toml").replace("fail_threshold = 5", "fail_threshold = 0");
        assert!(Scenario::parse("x", &text).unwrap_err().to_string().contains("gateway.soak.breaker.fail_threshold"));
        let text = include_str!("../scenarios/tenants.toml").replace("share = 0.4", "share = 0.5");
        assert!(Scenario::parse("x", &text).unwrap_err().to_string().contains("tenants: the shares sum to 1.1, not 1"));
        let text = include_str!("../scenarios/tenants.toml").replace("share = 0.4", "share = 0");
        assert!(Scenario::parse("x", &text).unwrap_err().to_string().contains("tenants.gold.share: a share is within (0, 1]"));
        let text = include_str!("../scenarios/p6.toml").replace("calls = 8000", "calls = 8000\ncals = 1");
        assert!(Scenario::parse("x", &text).unwrap_err().to_string().contains("unknown field `cals`"));
    }
}
