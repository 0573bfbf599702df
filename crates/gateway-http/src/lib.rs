//! `gateway-http`: the `Upstream` for OpenAI-compatible HTTP providers (official APIs, relays,
//! local servers) and Anthropic's Messages API (a source's `protocol`, [`anthropic`]; a chat
//! completion or a Messages call translated for a source of the other protocol). One
//! connection pool per source, the source's key in its protocol's header; the caller's native
//! body sent with the source's `model`; chat answered whole or streamed chunk by chunk (SSE, every chunk wait under
//! the watchdog), and a source with a watchdog always streamed and assembled; embeddings; every
//! way an endpoint can answer classified by [`classify`] into an outcome class with a detail for
//! telemetry; structured output checked on text answers against the request's JSON Schema or
//! parse function; on every attempt a budget for what is held of its answer
//! (`max_response_bytes`), a cap on a relayed stream (`max_stream_bytes`) and on one event, a
//! header timeout and the source's total timeout; the bytes held by all attempts in flight
//! ([`HeldBytes`]). API keys never reach `Debug`, logs or telemetry.

pub mod anthropic;
pub mod classify;
mod held;
mod openai;
mod pace;
pub mod ratelimit;
mod schema_bounds;
pub mod structured;
pub(crate) mod wire;

use async_trait::async_trait;
use gateway_core::outcome::OutcomeClass;
use gateway_core::policy::{ScopePolicy, SourcePolicy};
use gateway_core::ports::{Streamed, Upstream};
use gateway_core::request::{Attempt, Kind, Protocol, Request};
use gateway_core::time::WallClock;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use held::HeldBytes;

/// Limits of every attempt, beyond the source's own `timeout_s` and `watchdog_s`. Past a size
/// limit the attempt is `Transient` for the source, which the call does not ask again
/// ([`Outcome::too_large`](gateway_core::request::Outcome::too_large)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Most bytes held of one attempt's answer (default 8 MiB): a whole body, a stream
    /// assembled for a caller that did not stream, the text kept for a structured check and
    /// the events before a stream's commit point, together. Past it: `body_too_large`.
    pub max_response_bytes: usize,
    /// Most bytes one relayed stream may carry (default 64 MiB; a source's `max_stream_bytes`
    /// overrides it). Past it: `stream_too_large`.
    pub max_stream_bytes: u64,
    /// Largest event of a stream (default 1 MiB; a chat chunk is a few hundred bytes). Past
    /// it: `event_too_large`.
    pub max_event_bytes: usize,
    /// The fastest a stream is read, in bytes a second (default 8 MiB/s, after a first second's
    /// worth at once; a model streams a few KiB/s): a provider streaming as fast as the network
    /// allows is slowed to it rather than take the process's CPU.
    pub max_stream_bytes_per_s: u64,
    /// Longest wait for the response headers; `None` waits up to the source timeout.
    pub header_timeout: Option<Duration>,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_response_bytes: 8 << 20,
            max_stream_bytes: 64 << 20,
            max_event_bytes: 1 << 20,
            max_stream_bytes_per_s: 8 << 20,
            header_timeout: None,
        }
    }
}

/// The longest wait for an attempt's response headers and what a cut-off there is called: the
/// header timeout (the source's timeout without one), or, for an attempt streamed from a source
/// with a watchdog, the watchdog when it is shorter (it bounds the first token from the
/// attempt's start, SPEC §13). The simulated upstream asks the same.
pub fn header_wait(timeout: Duration, streamed_watchdog: Option<Duration>, header_timeout: Option<Duration>) -> (Duration, &'static str) {
    let wait = header_timeout.unwrap_or(timeout);
    match streamed_watchdog {
        Some(watchdog) if watchdog < wait => (watchdog, "watchdog"),
        _ => (wait, "header_timeout"),
    }
}

/// A source the adapter cannot be built with, naming the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct HttpConfigError {
    /// Dotted key, e.g. `chat.sources.s1.base_url`.
    pub key: String,
    /// What is wrong.
    pub problem: String,
}

/// The system wall clock, for HTTP-date Retry-After values.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemWallClock;

impl WallClock for SystemWallClock {
    fn unix_now(&self) -> Duration {
        // The adapter is where wall-clock time is read (only for HTTP-date Retry-After).
        #[allow(clippy::disallowed_methods)]
        let now = std::time::SystemTime::now();
        now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
    }
}

pub(crate) struct Source {
    pub(crate) name: String,
    /// Sends what [`Source::direct`] does not (see [`wire`]).
    pub(crate) client: reqwest::Client,
    /// The source's pooled client for JSON calls, unless a proxy stands in front of it.
    pub(crate) direct: Option<wire::Direct>,
    pub(crate) base_url: String,
    /// Each kind's endpoint below `base_url`, parsed once.
    pub(crate) endpoints: Vec<(Kind, http::Uri)>,
    pub(crate) model: String,
    pub(crate) timeout: Duration,
    pub(crate) watchdog: Option<Duration>,
    pub(crate) headers: HeaderMap,
    /// Whom a 404 blames here, from the kinds of the scopes the source serves.
    pub(crate) not_found: classify::NotFound,
    /// The source's own cap on a relayed stream, over [`HttpLimits::max_stream_bytes`].
    pub(crate) max_stream_bytes: Option<u64>,
    /// A streamed attempt sends `stream_options` (the usage asked for).
    pub(crate) stream_options: bool,
    /// The dialect it speaks, and an Anthropic source's default version and refused betas.
    pub(crate) protocol: Protocol,
    pub(crate) anthropic_version: HeaderValue,
    pub(crate) drop_betas: Vec<String>,
    /// The `max_tokens` a chat request translated for it gets when it sets none.
    pub(crate) max_tokens: u32,
}

impl Source {
    /// The endpoint of `kind` below the base URL.
    pub(crate) fn endpoint(&self, kind: Kind) -> &http::Uri {
        match self.endpoints.iter().find(|(k, _)| *k == kind) {
            Some((_, uri)) => uri,
            // Every kind's is parsed when the source is built.
            None => unreachable!("no endpoint for {kind}"),
        }
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Source")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            // The key is among the headers, whose values are all marked sensitive: `Sensitive`.
            .field("headers", &self.headers)
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("watchdog", &self.watchdog)
            .finish_non_exhaustive()
    }
}

/// The HTTP upstream of one or more scopes, by source name.
pub struct HttpUpstream {
    sources: HashMap<String, Arc<Source>>,
    shared: Shared,
}

/// Adds the trace context of the attempt being sent (W3C `traceparent`, `tracestate`) to its
/// headers; called as each attempt is sent, inside the attempt's span.
pub type Propagate = Arc<dyn Fn(&mut HeaderMap) + Send + Sync>;

/// What every attempt of an upstream reads besides its source.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) propagate: Option<Propagate>,
    pub(crate) wall: Arc<dyn WallClock>,
    pub(crate) limits: HttpLimits,
    pub(crate) schemas: Arc<structured::Schemas>,
    pub(crate) held: Arc<HeldBytes>,
    pub(crate) ignored: Arc<classify::IgnoredHeaders>,
}

impl Shared {
    /// A fresh share of what is held, for one attempt.
    pub(crate) fn hold(&self) -> held::Held {
        held::Held::new(&self.held, self.limits.max_response_bytes)
    }
}

impl fmt::Debug for HttpUpstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpUpstream")
            .field("sources", &self.sources.values().collect::<Vec<_>>())
            .field("limits", &self.shared.limits)
            .finish()
    }
}

impl HttpUpstream {
    /// The sources of `scopes`. A source name used by two scopes must have the same settings
    /// in both (the `Upstream` port names sources, not scopes).
    pub fn new(scopes: &[ScopePolicy]) -> Result<Self, HttpConfigError> {
        let mut kinds: HashMap<&str, Vec<Kind>> = HashMap::new();
        for scope in scopes {
            for policy in &scope.sources {
                let served = kinds.entry(policy.name.as_str()).or_default();
                // The kinds it carries: its protocol's, and those translated for it.
                let protocol = policy.protocol;
                served
                    .extend(scope.kinds.iter().filter(|kind| gateway_core::translate::wire_kind(**kind, protocol).protocol() == protocol));
                served.sort();
                served.dedup();
            }
        }
        let mut sources: HashMap<String, (String, Arc<Source>, &SourcePolicy)> = HashMap::new();
        // The environment's proxy settings, read as reqwest reads them.
        let proxies = hyper_util::client::proxy::matcher::Matcher::from_system();
        for scope in scopes {
            for policy in &scope.sources {
                let key = format!("{}.sources.{}", scope.name, policy.name);
                if let Some((first, _, earlier)) = sources.get(&policy.name) {
                    if *earlier != policy {
                        return Err(HttpConfigError {
                            key,
                            problem: format!("source {:?} is configured differently in {first}; give the two different names", policy.name),
                        });
                    }
                    continue;
                }
                let not_found = classify::NotFound::for_kinds(kinds.get(policy.name.as_str()).map_or(&[][..], Vec::as_slice));
                let source = Arc::new(build_source(policy, &key, not_found, &proxies)?);
                sources.insert(policy.name.clone(), (key, source, policy));
            }
        }
        let sources = sources.into_iter().map(|(name, (_, source, _))| (name, source)).collect();
        let shared = Shared {
            propagate: None,
            wall: Arc::new(SystemWallClock),
            limits: HttpLimits::default(),
            schemas: Arc::default(),
            held: Arc::default(),
            ignored: Arc::default(),
        };
        Ok(HttpUpstream { sources, shared })
    }

    /// An upstream of the sources of `scopes` sharing everything else with this one (limits,
    /// schemas, the bytes held, the headers it could not believe, the wall clock): what a
    /// configuration reload swaps in, while the attempts begun here finish on this one.
    pub fn reconfigured(&self, scopes: &[ScopePolicy]) -> Result<Self, HttpConfigError> {
        let mut upstream = HttpUpstream::new(scopes)?;
        upstream.shared = self.shared.clone();
        Ok(upstream)
    }

    /// Sends each attempt with the trace context `propagate` adds (a proxy's traces, or its
    /// caller's `traceparent` passed on).
    pub fn with_propagation(mut self, propagate: Propagate) -> Self {
        self.shared.propagate = Some(propagate);
        self
    }

    /// Replaces the attempt limits.
    pub fn with_limits(mut self, limits: HttpLimits) -> Self {
        self.shared.limits = limits;
        self
    }

    /// Counts what its attempts hold in `held` (shared with whoever reads it, such as a proxy
    /// that refuses new calls past a process-wide budget).
    pub fn with_held_bytes(mut self, held: Arc<HeldBytes>) -> Self {
        self.shared.held = held;
        self
    }

    /// The bytes its attempts in flight hold.
    pub fn held_bytes(&self) -> Arc<HeldBytes> {
        self.shared.held.clone()
    }

    /// The provider headers it could not believe, counted.
    pub fn ignored_headers(&self) -> Arc<classify::IgnoredHeaders> {
        self.shared.ignored.clone()
    }

    /// The budget an answer of `source` passed when its attempt ended with `detail`: the
    /// limit's name and its value for that source (`body_too_large`: `max_response_bytes`;
    /// `stream_too_large`: `max_stream_bytes`, the source's own where it sets one;
    /// `event_too_large`: `max_event_bytes`). `None` for any other detail or an unknown source.
    pub fn budget_passed(&self, source: &str, detail: &str) -> Option<(&'static str, u64)> {
        let src = self.sources.get(source)?;
        let limits = &self.shared.limits;
        match detail {
            "body_too_large" => Some(("max_response_bytes", limits.max_response_bytes as u64)),
            "stream_too_large" => Some(("max_stream_bytes", src.max_stream_bytes.unwrap_or(limits.max_stream_bytes))),
            "event_too_large" => Some(("max_event_bytes", limits.max_event_bytes as u64)),
            _ => None,
        }
    }

    /// Checks structured output with these compiled schemas (shared with whoever else compiles
    /// the same callers' schemas, such as a proxy that refuses unusable ones up front).
    pub fn with_schemas(mut self, schemas: Arc<structured::Schemas>) -> Self {
        self.shared.schemas = schemas;
        self
    }

    /// Replaces the wall clock (tests of HTTP-date Retry-After).
    pub fn with_wall_clock(mut self, wall: Arc<dyn WallClock>) -> Self {
        self.shared.wall = wall;
        self
    }
}

fn build_source(
    policy: &SourcePolicy,
    key: &str,
    not_found: classify::NotFound,
    proxies: &hyper_util::client::proxy::matcher::Matcher,
) -> Result<Source, HttpConfigError> {
    let invalid = |field: &str, problem: String| HttpConfigError { key: format!("{key}.{field}"), problem };
    let base_url = policy.base_url.clone().ok_or_else(|| invalid("base_url", "required key is missing".into()))?;
    let parsed = reqwest::Url::parse(&base_url).map_err(|e| invalid("base_url", format!("value {base_url:?} is not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid("base_url", format!("value {base_url:?} is not an http or https URL")));
    }
    let model = policy.model.clone().ok_or_else(|| invalid("model", "required key is missing".into()))?;
    let mut headers = HeaderMap::new();
    for (name, value) in &policy.headers {
        let header =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid(&format!("headers.{name}"), "not a valid header name".into()))?;
        let mut value = HeaderValue::from_str(value).map_err(|_| invalid(&format!("headers.{name}"), "not a valid header value".into()))?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    // The source's key, in its protocol's header: made once here, sent with every attempt.
    if let Some(key) = &policy.api_key {
        let (name, value) = match policy.protocol {
            Protocol::OpenAi => (reqwest::header::AUTHORIZATION, format!("Bearer {}", key.expose())),
            Protocol::Anthropic => (HeaderName::from_static("x-api-key"), key.expose().to_owned()),
        };
        let mut value =
            HeaderValue::from_str(&value).map_err(|_| invalid("api_key", "not a valid header value (the key is not shown)".into()))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    let anthropic_version = HeaderValue::from_str(&policy.anthropic_version)
        .map_err(|_| invalid("anthropic_version", format!("value {:?} is not a valid header value", policy.anthropic_version)))?;
    let connect_timeout = policy.timeout.min(Duration::from_secs(10));
    let client = wire::reqwest_client(connect_timeout).map_err(|e| invalid("base_url", format!("cannot build an HTTP client: {e}")))?;
    let base_url = base_url.trim_end_matches('/').to_owned();
    let direct = match wire::is_direct(&parsed, proxies).map_err(|e| invalid("base_url", format!("value {e}")))? {
        true => {
            let base = wire::uri(&parsed).map_err(|e| invalid("base_url", format!("value {e}")))?;
            Some(wire::Direct::new(connect_timeout, &base).map_err(|e| invalid("base_url", e))?)
        }
        false => None,
    };
    let mut endpoints = Vec::with_capacity(Kind::ALL.len());
    for kind in Kind::ALL {
        let url = format!("{base_url}/{}", kind.path());
        let parsed = reqwest::Url::parse(&url).map_err(|e| invalid("base_url", format!("endpoint {url:?} is not a URL ({e})")))?;
        endpoints.push((kind, wire::uri(&parsed).map_err(|e| invalid("base_url", format!("endpoint {e}")))?));
    }
    Ok(Source {
        name: policy.name.clone(),
        client,
        direct,
        base_url,
        endpoints,
        model,
        timeout: policy.timeout,
        watchdog: policy.watchdog,
        headers,
        not_found,
        max_stream_bytes: policy.max_stream_bytes,
        stream_options: policy.stream_options,
        protocol: policy.protocol,
        anthropic_version,
        drop_betas: policy.drop_betas.clone(),
        max_tokens: policy.max_tokens,
    })
}

#[async_trait]
impl Upstream for HttpUpstream {
    async fn send(&self, source: &str, request: &Request) -> Attempt {
        let Some(src) = self.sources.get(source) else {
            return Attempt::failure(OutcomeClass::SourceDead, "unknown_source", None);
        };
        match tokio::time::timeout(src.timeout, openai::exchange(src, request, &self.shared)).await {
            Ok(attempt) => attempt,
            Err(_) => Attempt::failure(OutcomeClass::Transient, "timeout", None),
        }
    }

    async fn stream(&self, source: &str, request: &Request) -> Streamed {
        let Some(src) = self.sources.get(source) else {
            return Streamed::Ended(Attempt::failure(OutcomeClass::SourceDead, "unknown_source", None));
        };
        // The chunks keep the source's deadline themselves; this bounds the wait for headers.
        match tokio::time::timeout(src.timeout, openai::open_checked(src, request, &self.shared)).await {
            Ok(streamed) => streamed,
            Err(_) => Streamed::Ended(Attempt::failure(OutcomeClass::Transient, "timeout", None)),
        }
    }
}
