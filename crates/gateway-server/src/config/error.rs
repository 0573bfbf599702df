//! Why the server cannot start with a configuration: each error names the key (never a
//! secret's value).

use super::MIN_KEY_CHARS;
use gateway_client::config;

/// A configuration the server cannot start with, naming the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or a scope's table does not load (`gateway_client::config::Loader`).
    #[error(transparent)]
    Scopes(config::ConfigError),
    /// A `SERVER__*` or `BACKEND__*` variable that cannot be a key (an empty key part, or both
    /// a value and a section under it).
    #[error(transparent)]
    Environment(config::ConfigError),
    /// A `[server]` or `[backend]` value of the wrong type, or an unknown key (a secret's value
    /// is never shown).
    #[error(transparent)]
    Table(config::ConfigError),
    /// A duration of `[server]` outside (0, 86400] seconds.
    #[error("server.{key}: value {value} is out of range (expected 0 < seconds <= 86400)")]
    Seconds {
        /// The key in `[server]`.
        key: &'static str,
        /// Its value.
        value: f64,
    },
    /// `server.affinity_ttl_s` outside (0, 366 days].
    #[error("server.affinity_ttl_s: value {value} is out of range (expected 0 < seconds <= 31622400, a year)")]
    AffinityTtl {
        /// Its value.
        value: f64,
    },
    /// A size or count of `[server]` that must be at least 1 is 0.
    #[error("server.{key}: value 0 is out of range (expected at least 1)")]
    Zero {
        /// The key in `[server]`.
        key: &'static str,
    },
    /// `server.metrics_key` is shorter than a key may be.
    #[error("server.metrics_key: a metrics key has at least {MIN_KEY_CHARS} characters")]
    ShortMetricsKey,
    /// `server.watch_config` is set and the file's directory cannot be watched.
    #[error("server.watch_config: cannot watch {path}: {reason}")]
    Watch {
        /// The config file.
        path: String,
        /// Why.
        reason: String,
    },
    /// `telemetry.endpoint` is not an http(s) URL.
    #[error("telemetry.endpoint: {value:?} is not an http:// or https:// URL (e.g. http://collector:4318/v1/traces)")]
    TelemetryEndpoint {
        /// The value, cut short.
        value: String,
    },
    /// A text key that may not be empty is.
    #[error("{key}: may not be empty")]
    Empty {
        /// The key.
        key: &'static str,
    },
    /// `server.admin_key` is shorter than a key may be.
    #[error("server.admin_key: an admin key has at least {MIN_KEY_CHARS} characters")]
    ShortAdminKey,
    /// A gateway key is shorter than a key may be.
    #[error("server.api_keys.{name}.key: a gateway key has at least {MIN_KEY_CHARS} characters")]
    ShortApiKey {
        /// The key's name in `[server.api_keys]`.
        name: String,
    },
    /// A key's tenant cannot be a tenant name.
    #[error("server.api_keys.{name}.tenant: value {shown:?} is invalid ({why})")]
    InvalidTenant {
        /// The key's name in `[server.api_keys]`.
        name: String,
        /// The tenant as it may be shown (`gateway_client::echoed`).
        shown: String,
        /// Why it is refused.
        why: gateway_client::TenantRefusal,
    },
    /// A key's `max_tenants` is 0.
    #[error("server.api_keys.{name}.max_tenants: value 0 is out of range (expected at least 1)")]
    ZeroMaxTenants {
        /// The key's name in `[server.api_keys]`.
        name: String,
    },
    /// A key bound to a tenant has a `max_tenants`.
    #[error("server.api_keys.{name}.max_tenants: a key bound to a tenant names no other; set it on unbound keys only")]
    MaxTenantsOfBoundKey {
        /// The key's name in `[server.api_keys]`.
        name: String,
    },
    /// `backend.command_timeout_ms` outside 1 to 60000.
    #[error("backend.command_timeout_ms: value {value} is out of range (expected 1 to 60000)")]
    CommandTimeout {
        /// Its value.
        value: u64,
    },
    /// The Redis URL is set in both its places.
    #[error("backend.redis_url: also set as server.redis_url (its older place); keep one")]
    RedisUrlTwice,
}
