//! The simulated providers. [`Providers`] decides, as the scenario's provider and account would,
//! what one request gets (latency, empty answers, 5xx, invalid JSON, bad keys, blackholes,
//! outages, the account's in-flight and rpm limits, other tenants' 429s and load peaks).
//! [`SimUpstream`] plays those replies in (virtual) time as an `Upstream`, applying the source's
//! watchdog and timeout the way the HTTP adapter does; `http` serves them over loopback HTTP.

use crate::ledger::{AccountFigures, Ledger, Throttle};
use crate::scenario::{Account, JsonShape, Kind, Provider, Scenario};
use gateway_core::random::unit;
use gateway_core::request::{Protocol, RateSignal, Request};
use gateway_core::time::{Clock, Timestamp};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

mod sim;
pub use sim::{SimUpstream, prompt_of};

/// The marker of a payload every provider rejects.
pub const POISON: &str = "POISON";

/// The prefix of a long prompt (a tenant with `long_prompts`).
pub const LONG: &str = "LONG ";

/// What a provider looks at in a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prompt {
    /// It carries the payload every provider rejects.
    pub poisoned: bool,
    /// It is long (providers with `long_timeout_rate` may never answer it in time).
    pub long: bool,
}

impl Prompt {
    /// The prompt of a request's messages.
    pub fn of<'a>(contents: impl Iterator<Item = &'a str>) -> Prompt {
        contents.fold(Prompt::default(), |p, c| Prompt { poisoned: p.poisoned || c == POISON, long: p.long || c.starts_with(LONG) })
    }
}

/// The content of a good structured answer.
pub const VALID_JSON: &str = "{\"answer\": 42}";

/// The content of an answer that fails structured output by opening with prose.
pub const INVALID_JSON: &str = "Sure! Here is the JSON: {answer: 42";

/// The content of an answer that fails structured output by being cut off.
pub const TRUNCATED_JSON: &str = "{\"answer\": 4";

/// Whether `content`, the answer to a request asking for JSON, fails the check at its end: the
/// HTTP adapter's check (which, as it, skips a blank text), reduced to what the simulated
/// answers can get wrong.
fn fails_the_check(request: &Request, content: &str) -> bool {
    request.structured.is_some() && !content.trim().is_empty() && serde_json::from_str::<serde_json::Value>(content).is_err()
}

/// What a provider answers, once the reply's delay has passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The connection is refused (the relay is down).
    Refused,
    /// Accepted and never answered.
    Hang,
    /// An HTTP error status with the provider's error code.
    Status(u16, &'static str),
    /// A completion with this content (empty for an empty completion).
    Content(&'static str),
}

/// One request's fate: wait `after` (for a completion: until its first token), then `answer`
/// with `headers`. Holds the account's in-flight slot until dropped.
pub struct Reply {
    /// The provider's latency.
    pub after: Duration,
    /// What it answers.
    pub answer: Answer,
    /// The account's rate-limit headers, as OpenAI sends them (none without an account, or with
    /// `rate_limit_headers = false`).
    pub headers: Headers,
    _slot: Option<InflightGuard>,
}

impl Reply {
    /// What its headers tell the gateway: the HTTP adapter's own reading of them.
    fn rate(&self) -> Option<RateSignal> {
        let header = |name: &str| self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
        gateway_http::ratelimit::read_with(header, &gateway_http::SystemWallClock).signal
    }
}

/// Response headers, as a reply carries them.
pub type Headers = Vec<(&'static str, String)>;

/// What an account's answer says in OpenAI's headers: its rpm, what is left of it, and when the
/// window is empty again (OpenAI's reset: until the budget is full).
fn rate_headers(account: &Account, starts: &VecDeque<Timestamp>, now: Timestamp, minute: Duration) -> Headers {
    if !account.rate_limit_headers {
        return Vec::new();
    }
    let remaining = (account.rpm as usize).saturating_sub(starts.len());
    let reset = starts.back().map_or(Duration::ZERO, |newest| minute.saturating_sub(now.saturating_since(*newest)));
    vec![
        ("x-ratelimit-limit-requests", account.rpm.to_string()),
        ("x-ratelimit-remaining-requests", remaining.to_string()),
        ("x-ratelimit-reset-requests", gateway_http::ratelimit::go_duration_text(reset)),
    ]
}

#[derive(Default)]
struct AccountState {
    inflight: u32,
    starts: VecDeque<Timestamp>,
    ledger: Ledger,
}

struct State {
    rng: ChaCha8Rng,
    accounts: BTreeMap<String, AccountState>,
}

/// The scenario's providers and accounts, with their shared state and one seeded RNG.
pub struct Providers {
    minute: Duration,
    /// The run's time scale: the providers' own fixed delays (a refusal, a 429) scale with it.
    time_scale: f64,
    providers: BTreeMap<String, Provider>,
    accounts: BTreeMap<String, Account>,
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
    start: Timestamp,
    /// Responses made so far (each a `resp_sim_<n>` of its own).
    responses: std::sync::atomic::AtomicU64,
}

impl Providers {
    /// A simulated answer of `kind` (chat, a Responses `response` or an Anthropic `message`, each
    /// with an id of its own)
    /// saying `content`, with the usage every simulated completion reports.
    pub fn answer(&self, kind: gateway_core::request::Kind, content: &str) -> gateway_core::request::Response {
        use gateway_core::request::{Kind, Response, Usage};
        let usage = Some(Usage { prompt_tokens: 200, completion_tokens: 250 });
        match kind {
            Kind::Responses => {
                let n = self.responses.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                Response::responses_text(&format!("resp_sim_{n}"), content, usage)
            }
            Kind::Messages => {
                let n = self.responses.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                Response::message_text(&format!("msg_sim_{n}"), content, usage)
            }
            _ => Response::chat_text(content, usage),
        }
    }

    /// A simulated answer to a request of `kind` from a source speaking `protocol`: made in the
    /// source's dialect, and reaching the call in the request's, as the HTTP adapter translates it.
    pub fn answer_for(&self, kind: gateway_core::request::Kind, protocol: Protocol, content: &str) -> gateway_core::request::Response {
        let wire = gateway_core::translate::wire_kind(kind, protocol);
        gateway_core::translate::answer(kind, protocol, self.answer(wire, content).into_body())
    }

    /// The providers of `scenario` on `clock` (scenario time starts now), seeded.
    pub fn new(scenario: &Scenario, clock: Arc<dyn Clock>, seed: u64) -> Self {
        let start = clock.now();
        Providers {
            minute: Duration::from_secs_f64(scenario.minute_s()),
            time_scale: scenario.time_scale,
            providers: scenario.providers.clone(),
            accounts: scenario.accounts.clone(),
            state: Arc::new(Mutex::new(State { rng: ChaCha8Rng::seed_from_u64(seed), accounts: BTreeMap::new() })),
            clock,
            start,
            responses: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn scenario_s(&self) -> f64 {
        self.clock.now().saturating_since(self.start).as_secs_f64()
    }

    /// `ms` milliseconds of scenario time, as this run plays them.
    fn scaled_ms(&self, ms: f64) -> Duration {
        Duration::from_secs_f64(ms * self.time_scale / 1000.0)
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

    /// Admits a request to `account` or says 429 (`Err`), with the account's rate-limit headers
    /// either way. `Ok` holds a guard of the in-flight slot.
    fn enter_account(&self, name: &str) -> (Result<Option<InflightGuard>, ()>, Headers) {
        let Some(account) = self.accounts.get(name) else { return (Ok(None), Vec::new()) };
        let capacity = capacity_at(account, self.scenario_s());
        let now = self.clock.now();
        let mut state = self.state();
        let background = unit(&mut state.rng) < account.background_429;
        let entry = state.accounts.entry(name.to_owned()).or_default();
        while entry.starts.front().is_some_and(|&s| now.saturating_since(s) >= self.minute) {
            entry.starts.pop_front();
        }
        let (full, rpm) = (entry.inflight >= capacity, entry.starts.len() >= account.rpm as usize);
        if background || full || rpm {
            entry.ledger.throttled(match (background, full) {
                (true, _) => Throttle::Background,
                (false, true) => Throttle::Own,
                (false, false) => Throttle::OwnRpm,
            });
            return (Err(()), rate_headers(account, &entry.starts, now, self.minute));
        }
        entry.inflight += 1;
        entry.starts.push_back(now);
        entry.ledger.step(now, entry.inflight, capacity);
        let headers = rate_headers(account, &entry.starts, now, self.minute);
        let guard = InflightGuard {
            state: self.state.clone(),
            name: name.to_owned(),
            account: account.clone(),
            clock: self.clock.clone(),
            start: self.start,
        };
        (Ok(Some(guard)), headers)
    }

    /// What each account saw so far: 429s by cause, mean in flight against capacity.
    pub fn accounts(&self) -> BTreeMap<String, AccountFigures> {
        let now = self.clock.now();
        let state = self.state();
        state.accounts.iter().map(|(name, a)| (name.clone(), a.ledger.figures(self.start, now))).collect()
    }

    /// What `source`'s provider does with a request arriving now; `None` for a source the
    /// scenario has no provider for.
    pub fn reply(&self, source: &str, prompt: Prompt) -> Option<Reply> {
        let p = self.providers.get(source)?;
        let reply = |after: Duration, answer: Answer| Some(Reply { after, answer, headers: Vec::new(), _slot: None });
        let t = self.scenario_s();
        if p.outages.iter().any(|o| t >= o.from_s && t < o.to_s) {
            return reply(self.scaled_ms(1.0), Answer::Refused);
        }
        match p.kind {
            Kind::BadKey => return reply(Duration::from_secs_f64(p.latency_median_s), Answer::Status(401, "invalid_api_key")),
            Kind::Blackhole => return reply(Duration::ZERO, Answer::Hang),
            Kind::Answers => {}
        }
        let (slot, headers) = match p.account.as_deref().map(|a| self.enter_account(a)) {
            Some((Err(()), headers)) => {
                return Some(Reply {
                    after: self.scaled_ms(20.0),
                    answer: Answer::Status(429, "rate_limit_exceeded"),
                    headers,
                    _slot: None,
                });
            }
            Some((Ok(slot), headers)) => (slot, headers),
            None => (None, Vec::new()),
        };
        if prompt.poisoned {
            return Some(Reply { after: self.scaled_ms(50.0), answer: Answer::Status(400, "invalid_request_error"), headers, _slot: slot });
        }
        let after = self.latency(p.latency_median_s, p.latency_sigma);
        // Drawn for long prompts only, so scenarios without them keep their random sequence.
        if prompt.long && unit(&mut self.state().rng) < p.long_timeout_rate {
            return Some(Reply { after, answer: Answer::Hang, headers, _slot: slot });
        }
        let (r, invalid) = {
            let mut state = self.state();
            (unit(&mut state.rng), unit(&mut state.rng))
        };
        let answer = if r < p.empty_rate {
            Answer::Content("")
        } else if r < p.empty_rate + p.error_5xx_rate {
            Answer::Status(503, "server_error")
        } else if invalid < p.invalid_json_rate {
            let truncated = match p.invalid_json_shape {
                JsonShape::Prose => false,
                JsonShape::Truncated => true,
                // Drawn for this shape only, so other scenarios keep their random sequence.
                JsonShape::Mixed => unit(&mut self.state().rng) < 0.5,
            };
            Answer::Content(if truncated { TRUNCATED_JSON } else { INVALID_JSON })
        } else {
            Answer::Content(VALID_JSON)
        };
        Some(Reply { after, answer, headers, _slot: slot })
    }
}

/// The in-flight capacity of `account` at `t` s of scenario time (smaller in its peaks).
fn capacity_at(account: &Account, t: f64) -> u32 {
    let in_peak = account.peak_every_s > 0.0 && t >= account.peak_every_s && (t % account.peak_every_s) < account.peak_len_s;
    if in_peak { account.peak_inflight } else { account.max_inflight }
}

/// Holds one in-flight slot of an account until the attempt ends (or is dropped).
struct InflightGuard {
    state: Arc<Mutex<State>>,
    name: String,
    account: Account,
    clock: Arc<dyn Clock>,
    start: Timestamp,
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        let now = self.clock.now();
        let capacity = capacity_at(&self.account, now.saturating_since(self.start).as_secs_f64());
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = state.accounts.get_mut(&self.name) {
            entry.inflight = entry.inflight.saturating_sub(1);
            entry.ledger.step(now, entry.inflight, capacity);
        }
    }
}
