//! The server's own settings: the `[server]` and `[backend]` tables of the gateway config file
//! (every other table is a scope, read by `gateway_client::config::Loader`), overridable by
//! `SERVER__KEY` and `BACKEND__KEY` variables. Errors name the key.

use figment::Figment;
use figment::providers::{Format, Toml};
use gateway_client::config::{self, EnvLayer, Loader};
use gateway_core::policy::ScopePolicy;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

mod error;
pub use error::ConfigError;
pub use telemetry::TelemetryConfig;

mod telemetry;

/// The `[server]` table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on (default `127.0.0.1:8080`).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The older place of `backend.redis_url` (still read; setting both is an error).
    #[serde(default)]
    pub redis_url: Option<String>,
    /// Largest request body in bytes (default 1 MiB); larger ones get 413.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Most bytes held of one attempt's answer (default 8 MiB): a whole body, a stream assembled
    /// for a caller that did not stream, the text kept for a structured check and the events
    /// before a stream's commit point. Past it the attempt fails (the source is at fault and
    /// not asked again in that call).
    #[serde(default = "default_max_response")]
    pub max_response_bytes: usize,
    /// Most bytes one relayed stream may carry (default 64 MiB; a source's own
    /// `max_stream_bytes` overrides it). Past it the stream ends with an `error` event.
    #[serde(default = "default_max_stream")]
    pub max_stream_bytes: u64,
    /// The fastest a stream is read from a provider, in bytes a second (default 8 MiB/s after a
    /// first second's worth at once; a model streams a few KiB/s): one streaming without end as
    /// fast as the network allows is slowed to it rather than take the CPU of every other call.
    #[serde(default = "default_max_stream_rate")]
    pub max_stream_bytes_per_s: u64,
    /// Most bytes of upstream answers held by all calls at once (default a quarter of the
    /// memory the process may use: cgroup `memory.max` or `RLIMIT_AS`, else the machine's).
    /// At it new calls get 503 with `Retry-After` until enough is released.
    #[serde(default)]
    pub max_held_bytes: Option<usize>,
    /// Largest structured-output schema (`response_format.json_schema.schema`) in bytes, as
    /// compact JSON (default 64 KiB); larger ones get 400.
    #[serde(default = "default_max_schema")]
    pub max_schema_bytes: usize,
    /// Seconds a client has, from its first byte, to send a request's headers (default 10).
    #[serde(default = "default_header_timeout")]
    pub header_timeout_s: f64,
    /// Seconds a client has to send a request's body once its headers are in (default 30);
    /// a slower body gets 408.
    #[serde(default = "default_body_timeout")]
    pub body_timeout_s: f64,
    /// Seconds an idle keep-alive connection is kept before the server closes it (default 60).
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_s: f64,
    /// Most client connections at once (default: three quarters of the file-descriptor limit,
    /// at most 16 384); further ones are answered 503 and closed. Must stay below the limit,
    /// which is read (and raised to its hard maximum) at start.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Seconds given to in-flight calls after SIGTERM (default 30); calls still running at the
    /// deadline are ended with 503 and release everything they hold.
    #[serde(default = "default_grace")]
    pub shutdown_grace_s: f64,
    /// Seconds between SSE keep-alive comments while a streamed call runs (default 5); a client
    /// that went away is noticed at the next one and its call cancelled.
    #[serde(default = "default_keepalive")]
    pub keepalive_s: f64,
    /// A key (16 characters or more) that a scraper sends as `Authorization: Bearer <key>` to
    /// read `/metrics`. Without it, `/metrics` takes any gateway key not bound to a tenant
    /// (or nothing, when no gateway keys are configured).
    #[serde(default)]
    pub metrics_key: Option<String>,
    /// A key (16 characters or more) for the operator's routes: the status page (`/ui`, which
    /// the metrics key also opens) and `POST /v1/gateway/reload`. Sent as `Authorization:
    /// Bearer <key>`, or as a browser's Basic password. Without it they take what `/metrics`
    /// takes.
    #[serde(default)]
    pub admin_key: Option<String>,
    /// Load the config file again whenever it changes (default false); `SIGHUP` and `POST
    /// /v1/gateway/reload` do it on demand.
    #[serde(default)]
    pub watch_config: bool,
    /// The `[telemetry]` table (traces), read beside `[server]`.
    #[serde(skip)]
    pub telemetry: TelemetryConfig,
    /// A separate address serving `/metrics` only, unauthenticated (e.g. on a private
    /// interface); `/metrics` then answers 404 on `listen`.
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// Distinct tenants with series of their own in `/metrics` (default 100); later ones are
    /// reported as `tenant_id="_other"`, so a scrape stays small whatever the tenant churn.
    #[serde(default = "default_metrics_tenants")]
    pub metrics_max_tenants: usize,
    /// Gateway API keys by name. None: no authentication (for a loopback-only deployment).
    #[serde(default)]
    pub api_keys: BTreeMap<String, ApiKey>,
    /// How long the gateway remembers which source holds a stored response, a conversation, a
    /// file or a batch (default 30 days, as long as OpenAI keeps a stored response).
    #[serde(default = "default_affinity_ttl")]
    pub affinity_ttl_s: f64,
    /// The most ids the in-process affinity map keeps (default 200 000, about 50 MiB), the
    /// oldest remembered forgotten first; with `[backend] redis_url` the map is Redis's, and
    /// its memory policy bounds it.
    #[serde(default = "default_affinity_ids")]
    pub affinity_max_ids: usize,
}

/// The `[backend]` table: where the gates, quota and pacers are shared, and what happens while
/// that backend cannot answer.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// Redis URL (`redis://…`, `rediss://…`, `redis-cluster://…`) for gates, quota and pacers
    /// shared between replicas (default: in-process ones).
    #[serde(default)]
    pub redis_url: Option<String>,
    /// While Redis cannot answer: `fail_closed` (default; admission fails, 503) or `local`
    /// (each replica admits on its own in-memory state, seeded from what it last read, until
    /// Redis answers again).
    #[serde(default)]
    pub on_unavailable: gateway_memory::backstop::OnUnavailable,
    /// Milliseconds a Redis command may take before it counts as unavailable (default 250).
    #[serde(default = "default_command_timeout_ms")]
    pub command_timeout_ms: u64,
}

fn default_command_timeout_ms() -> u64 {
    250
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig { redis_url: None, on_unavailable: Default::default(), command_timeout_ms: default_command_timeout_ms() }
    }
}

impl BackendConfig {
    /// Checks what a type cannot, and takes `server.redis_url` (the older place) when set.
    fn merged(mut self, server: &ServerConfig) -> Result<Self, ConfigError> {
        if !(1..=60_000).contains(&self.command_timeout_ms) {
            return Err(ConfigError::CommandTimeout { value: self.command_timeout_ms });
        }
        match (&self.redis_url, &server.redis_url) {
            (Some(_), Some(_)) => Err(ConfigError::RedisUrlTwice),
            (None, Some(url)) => {
                self.redis_url = Some(url.clone());
                Ok(self)
            }
            _ => Ok(self),
        }
    }
}

/// One gateway API key.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// The key clients send as `Authorization: Bearer <key>`.
    pub key: String,
    /// The tenant its calls are made for (then `x-tenant-id` may not name another). A bound
    /// tenant is always admitted, whatever other tenants do.
    #[serde(default)]
    pub tenant: Option<String>,
    /// For a key bound to no tenant: the most tenants it may name in `x-tenant-id` at once
    /// (a tenant it has not named for the longest `tenant_idle_s` of the scopes stops counting).
    /// Default: no limit.
    #[serde(default)]
    pub max_tenants: Option<usize>,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey").field("key", &"<redacted>").field("tenant", &self.tenant).field("max_tenants", &self.max_tenants).finish()
    }
}

fn default_listen() -> String {
    "127.0.0.1:8080".to_owned()
}
fn default_max_body() -> usize {
    1 << 20
}
fn default_max_response() -> usize {
    8 << 20
}
fn default_max_stream() -> u64 {
    64 << 20
}
fn default_max_stream_rate() -> u64 {
    8 << 20
}
fn default_max_schema() -> usize {
    64 << 10
}
fn default_header_timeout() -> f64 {
    10.0
}
fn default_body_timeout() -> f64 {
    30.0
}
fn default_idle_timeout() -> f64 {
    60.0
}
fn default_grace() -> f64 {
    30.0
}
fn default_keepalive() -> f64 {
    5.0
}
fn default_metrics_tenants() -> usize {
    100
}
fn default_affinity_ttl() -> f64 {
    gateway_client::AFFINITY_TTL.as_secs_f64()
}
fn default_affinity_ids() -> usize {
    gateway_memory::affinity::MAX_IDS
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: default_listen(),
            redis_url: None,
            max_body_bytes: default_max_body(),
            max_response_bytes: default_max_response(),
            max_stream_bytes: default_max_stream(),
            max_stream_bytes_per_s: default_max_stream_rate(),
            max_held_bytes: None,
            max_schema_bytes: default_max_schema(),
            header_timeout_s: default_header_timeout(),
            body_timeout_s: default_body_timeout(),
            idle_timeout_s: default_idle_timeout(),
            max_connections: None,
            shutdown_grace_s: default_grace(),
            keepalive_s: default_keepalive(),
            metrics_key: None,
            admin_key: None,
            watch_config: false,
            telemetry: TelemetryConfig::default(),
            metrics_listen: None,
            metrics_max_tenants: default_metrics_tenants(),
            api_keys: BTreeMap::new(),
            affinity_ttl_s: default_affinity_ttl(),
            affinity_max_ids: default_affinity_ids(),
        }
    }
}

/// The least a gateway or metrics key may have.
const MIN_KEY_CHARS: usize = 16;

impl ServerConfig {
    /// Checks the values a type cannot: positive durations, limits, long enough keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let at_least_one_early = |key: &'static str, v: usize| if v == 0 { Err(ConfigError::Zero { key }) } else { Ok(()) };
        let positive = |key: &'static str, value: f64| {
            if value.is_finite() && value > 0.0 && value <= 86_400.0 { Ok(()) } else { Err(ConfigError::Seconds { key, value }) }
        };
        positive("shutdown_grace_s", self.shutdown_grace_s)?;
        positive("keepalive_s", self.keepalive_s)?;
        positive("header_timeout_s", self.header_timeout_s)?;
        positive("body_timeout_s", self.body_timeout_s)?;
        positive("idle_timeout_s", self.idle_timeout_s)?;
        if !(self.affinity_ttl_s.is_finite() && self.affinity_ttl_s > 0.0 && self.affinity_ttl_s <= 366.0 * 86_400.0) {
            return Err(ConfigError::AffinityTtl { value: self.affinity_ttl_s });
        }
        at_least_one_early("affinity_max_ids", self.affinity_max_ids)?;
        let at_least_one = |key: &'static str, v: usize| if v == 0 { Err(ConfigError::Zero { key }) } else { Ok(()) };
        at_least_one("max_body_bytes", self.max_body_bytes)?;
        at_least_one("max_response_bytes", self.max_response_bytes)?;
        at_least_one("max_stream_bytes", usize::try_from(self.max_stream_bytes).unwrap_or(usize::MAX))?;
        at_least_one("max_stream_bytes_per_s", usize::try_from(self.max_stream_bytes_per_s).unwrap_or(usize::MAX))?;
        if let Some(max) = self.max_held_bytes {
            at_least_one("max_held_bytes", max)?;
        }
        at_least_one("max_schema_bytes", self.max_schema_bytes)?;
        at_least_one("metrics_max_tenants", self.metrics_max_tenants)?;
        if let Some(max) = self.max_connections {
            at_least_one("max_connections", max)?;
        }
        if self.metrics_key.as_ref().is_some_and(|k| k.chars().count() < MIN_KEY_CHARS) {
            return Err(ConfigError::ShortMetricsKey);
        }
        if self.admin_key.as_ref().is_some_and(|k| k.chars().count() < MIN_KEY_CHARS) {
            return Err(ConfigError::ShortAdminKey);
        }
        if let Some((name, _)) = self.api_keys.iter().find(|(_, k)| k.key.chars().count() < MIN_KEY_CHARS) {
            return Err(ConfigError::ShortApiKey { name: name.clone() });
        }
        for (name, key) in &self.api_keys {
            if let Some(Err(why)) = key.tenant.as_deref().map(gateway_client::tenant_name) {
                let shown = gateway_client::echoed(key.tenant.as_deref().unwrap_or_default());
                return Err(ConfigError::InvalidTenant { name: name.clone(), shown, why });
            }
            match (key.max_tenants, &key.tenant) {
                (Some(0), _) => return Err(ConfigError::ZeroMaxTenants { name: name.clone() }),
                (Some(_), Some(_)) => return Err(ConfigError::MaxTenantsOfBoundKey { name: name.clone() }),
                _ => {}
            }
        }
        Ok(())
    }

    /// Every tenant a gateway key is bound to (the client always admits them).
    pub fn bound_tenants(&self) -> impl Iterator<Item = &str> {
        self.api_keys.values().filter_map(|k| k.tenant.as_deref())
    }
}

/// Keys whose values are secrets: never printed in an error, whatever their type.
fn is_secret(path: &str) -> bool {
    path.split('.').any(|part| part == "api_keys" || part == "metrics_key" || part == "admin_key" || part == "redis_url")
}

/// The tables of the file this module reads: `[server]` and `[backend]` (every other is a
/// scope's).
#[derive(Deserialize)]
struct Tables {
    #[serde(default)]
    server: Option<ServerConfig>,
    #[serde(default)]
    backend: Option<BackendConfig>,
    #[serde(default)]
    telemetry: Option<TelemetryConfig>,
}

/// Reads `path`: the `[server]` and `[backend]` tables (and `SERVER__*`, `BACKEND__*`
/// variables) and the scopes.
pub fn load(path: &Path) -> Result<(ServerConfig, Vec<ScopePolicy>), ConfigError> {
    load_with(path, config::process_vars())
}

/// As [`load`], with the `[backend]` table too.
pub fn load_all(path: &Path) -> Result<(ServerConfig, BackendConfig, Vec<ScopePolicy>), ConfigError> {
    load_all_with(path, config::process_vars())
}

/// As [`load`], with these environment variables instead of the process's. A variable's value
/// loads as the same value in the file would for its key's type (`SERVER__METRICS_KEY` of digits
/// is text, `SERVER__MAX_BODY_BYTES=2048` a number).
pub fn load_with(path: &Path, vars: Vec<(String, String)>) -> Result<(ServerConfig, Vec<ScopePolicy>), ConfigError> {
    load_all_with(path, vars).map(|(server, _, scopes)| (server, scopes))
}

/// As [`load_all`], with these environment variables instead of the process's.
pub fn load_all_with(path: &Path, vars: Vec<(String, String)>) -> Result<(ServerConfig, BackendConfig, Vec<ScopePolicy>), ConfigError> {
    let scopes = Loader::new()
        .file(path)
        .reserve("server")
        .reserve("backend")
        .reserve("telemetry")
        .env_vars(vars.clone())
        .load()
        .map_err(ConfigError::Scopes)?;
    let tables = ["server".to_owned(), "backend".to_owned(), "telemetry".to_owned()];
    let env = EnvLayer::new(vars, &tables).map_err(ConfigError::Environment)?;
    // Named as the scopes' errors are; a secret's value is never printed, whatever is wrong.
    let (_, tables) = env
        .extract::<Tables>(&Figment::new().merge(Toml::file(path)))
        .map_err(|e| ConfigError::Table(config::describe(*e, Some(path), |key| is_secret(&key.join(".")))))?;
    let mut server = tables.server.unwrap_or_default();
    server.validate()?;
    server.telemetry = tables.telemetry.unwrap_or_default();
    server.telemetry.validate()?;
    let backend = tables.backend.unwrap_or_default().merged(&server)?;
    Ok((server, backend, scopes))
}

#[cfg(test)]
mod tests;
