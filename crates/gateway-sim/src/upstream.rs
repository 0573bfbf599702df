//! The simulated providers: an `Upstream` that answers each attempt in virtual time as the
//! scenario's provider and account would (latency, empty answers, 5xx, invalid JSON, bad keys,
//! blackholes, outages, the account's in-flight and rpm limits, other tenants' 429s and load
//! peaks, the source's watchdog and timeout).

use crate::scenario::{Account, Kind, Provider, Scenario};
use async_trait::async_trait;
use gateway_core::outcome::OutcomeClass;
use gateway_core::policy::ScopePolicy;
use gateway_core::ports::Upstream;
use gateway_core::random::unit;
use gateway_core::request::{Attempt, Payload, Request, Response, Usage};
use gateway_core::time::{Clock, Timestamp};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The marker of a payload every provider rejects.
pub const POISON: &str = "POISON";

struct SimSource {
    provider: Provider,
    timeout: Duration,
    watchdog: Option<Duration>,
}

#[derive(Default)]
struct AccountState {
    inflight: u32,
    starts: VecDeque<Timestamp>,
}

struct State {
    rng: ChaCha8Rng,
    accounts: BTreeMap<String, AccountState>,
}

/// The scenario's providers as one `Upstream`.
pub struct SimUpstream {
    minute: Duration,
    sources: BTreeMap<String, SimSource>,
    accounts: BTreeMap<String, Account>,
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
    start: Timestamp,
}

impl SimUpstream {
    /// The providers of `scenario` behind the sources of `scope`, on `clock`, seeded.
    pub fn new(scenario: &Scenario, scope: &ScopePolicy, clock: Arc<dyn Clock>, seed: u64) -> Self {
        let sources = scope
            .sources
            .iter()
            .filter_map(|s| {
                let provider = scenario.providers.get(&s.name)?.clone();
                Some((s.name.clone(), SimSource { provider, timeout: s.timeout, watchdog: s.watchdog }))
            })
            .collect();
        let start = clock.now();
        SimUpstream {
            minute: Duration::from_secs_f64(scenario.minute_s),
            sources,
            accounts: scenario.accounts.clone(),
            state: Arc::new(Mutex::new(State { rng: ChaCha8Rng::seed_from_u64(seed), accounts: BTreeMap::new() })),
            clock,
            start,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn scenario_s(&self) -> f64 {
        self.clock.now().saturating_since(self.start).as_secs_f64()
    }

    fn draw(&self) -> f64 {
        unit(&mut self.state().rng)
    }

    /// A lognormal latency with the given median and σ.
    fn latency(&self, median_s: f64, sigma: f64) -> Duration {
        let (u1, u2) = {
            let mut state = self.state();
            (unit(&mut state.rng), unit(&mut state.rng))
        };
        let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        Duration::from_secs_f64((median_s.max(1e-6).ln() + sigma * z).exp().min(3600.0))
    }

    /// Admits a request to `account` or says 429. Returns a guard holding the in-flight slot.
    fn enter_account(&self, name: &str) -> Result<Option<InflightGuard>, ()> {
        let Some(account) = self.accounts.get(name) else { return Ok(None) };
        let t = self.scenario_s();
        let in_peak = account.peak_every_s > 0.0 && t >= account.peak_every_s && (t % account.peak_every_s) < account.peak_len_s;
        let capacity = if in_peak { account.peak_inflight } else { account.max_inflight };
        let now = self.clock.now();
        let mut state = self.state();
        let background = unit(&mut state.rng) < account.background_429;
        let entry = state.accounts.entry(name.to_owned()).or_default();
        while entry.starts.front().is_some_and(|&s| now.saturating_since(s) >= self.minute) {
            entry.starts.pop_front();
        }
        if background || entry.inflight >= capacity || entry.starts.len() >= account.rpm as usize {
            return Err(());
        }
        entry.inflight += 1;
        entry.starts.push_back(now);
        Ok(Some(InflightGuard { state: self.state.clone(), account: name.to_owned() }))
    }
}

/// Holds one in-flight slot of an account until the attempt ends (or is dropped).
struct InflightGuard {
    state: Arc<Mutex<State>>,
    account: String,
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(account) = state.accounts.get_mut(&self.account) {
            account.inflight = account.inflight.saturating_sub(1);
        }
    }
}

fn is_poison(request: &Request) -> bool {
    match &request.payload {
        Payload::Chat { messages, .. } => messages.iter().any(|m| m.content == POISON),
        Payload::Embedding { input } => input.iter().any(|i| i == POISON),
    }
}

fn fail(class: OutcomeClass, detail: &str) -> Attempt {
    Attempt::failure(class, detail, None)
}

#[async_trait]
impl Upstream for SimUpstream {
    async fn send(&self, source: &str, request: &Request) -> Attempt {
        let Some(src) = self.sources.get(source) else { return fail(OutcomeClass::SourceDead, "unknown_source") };
        let p = &src.provider;
        let t = self.scenario_s();
        if p.outages.iter().any(|o| t >= o.from_s && t < o.to_s) {
            tokio::time::sleep(Duration::from_millis(1)).await;
            return fail(OutcomeClass::Transient, "connect");
        }
        match p.kind {
            Kind::BadKey => {
                tokio::time::sleep(Duration::from_secs_f64(p.latency_median_s)).await;
                return fail(OutcomeClass::SourceDead, "http_401");
            }
            Kind::Blackhole => {
                tokio::time::sleep(src.timeout).await;
                return fail(OutcomeClass::Transient, "timeout");
            }
            Kind::Answers => {}
        }
        let _slot = match p.account.as_deref().map(|a| self.enter_account(a)) {
            Some(Err(())) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                return fail(OutcomeClass::RateLimited, "http_429");
            }
            Some(Ok(slot)) => slot,
            None => None,
        };
        if is_poison(request) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            return fail(OutcomeClass::RequestRejected, "http_400");
        }
        let latency = self.latency(p.latency_median_s, p.latency_sigma);
        if let Some(watchdog) = src.watchdog.filter(|w| latency > *w) {
            tokio::time::sleep(watchdog).await;
            return fail(OutcomeClass::Transient, "watchdog");
        }
        if latency >= src.timeout {
            tokio::time::sleep(src.timeout).await;
            return fail(OutcomeClass::Transient, "timeout");
        }
        tokio::time::sleep(latency).await;
        let r = self.draw();
        if r < p.empty_rate {
            return fail(OutcomeClass::Transient, "empty");
        }
        if r < p.empty_rate + p.error_5xx_rate {
            return fail(OutcomeClass::Transient, "http_503");
        }
        if request.structured.is_some() && self.draw() < p.invalid_json_rate {
            return fail(OutcomeClass::ResultInvalid, "schema");
        }
        let usage = Some(Usage { prompt_tokens: 200, completion_tokens: 250 });
        Attempt::success(Response::Chat { content: "{\"answer\": 42}".into(), usage }, "http_200")
    }
}
