//! The server's own settings: the `[server]` table of the gateway config file (every other
//! table is a scope, read by `gateway_client::config::Loader`), overridable by `SERVER__KEY`
//! variables. Errors name the key.

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use gateway_client::config::Loader;
use gateway_core::policy::ScopePolicy;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The `[server]` table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on (default `127.0.0.1:8080`).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Redis URL for gates and quota shared between replicas (default: in-process gates).
    #[serde(default)]
    pub redis_url: Option<String>,
    /// Largest request body in bytes (default 1 MiB); larger ones get 413.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Seconds given to in-flight calls after SIGTERM before the process exits (default 30).
    #[serde(default = "default_grace")]
    pub shutdown_grace_s: f64,
    /// Seconds between SSE keep-alive comments while a streamed call runs (default 5); a client
    /// that went away is noticed at the next one and its call cancelled.
    #[serde(default = "default_keepalive")]
    pub keepalive_s: f64,
    /// Gateway API keys by name. None: no authentication (for a loopback-only deployment).
    #[serde(default)]
    pub api_keys: BTreeMap<String, ApiKey>,
}

/// One gateway API key.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// The key clients send as `Authorization: Bearer <key>`.
    pub key: String,
    /// The tenant its calls are made for (then `x-tenant-id` may not name another).
    #[serde(default)]
    pub tenant: Option<String>,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey").field("key", &"<redacted>").field("tenant", &self.tenant).finish()
    }
}

fn default_listen() -> String {
    "127.0.0.1:8080".to_owned()
}
fn default_max_body() -> usize {
    1 << 20
}
fn default_grace() -> f64 {
    30.0
}
fn default_keepalive() -> f64 {
    5.0
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: default_listen(),
            redis_url: None,
            max_body_bytes: default_max_body(),
            shutdown_grace_s: default_grace(),
            keepalive_s: default_keepalive(),
            api_keys: BTreeMap::new(),
        }
    }
}

/// A configuration the server cannot start with, naming the key.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl ServerConfig {
    /// Checks the values a type cannot: positive durations, a body limit, non-empty keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |key: &str, v: f64| {
            if v.is_finite() && v > 0.0 && v <= 86_400.0 {
                Ok(())
            } else {
                Err(ConfigError(format!("server.{key}: value {v} is out of range (expected 0 < seconds <= 86400)")))
            }
        };
        positive("shutdown_grace_s", self.shutdown_grace_s)?;
        positive("keepalive_s", self.keepalive_s)?;
        if self.max_body_bytes == 0 {
            return Err(ConfigError("server.max_body_bytes: value 0 is out of range (expected at least 1)".into()));
        }
        if let Some((name, _)) = self.api_keys.iter().find(|(_, k)| k.key.len() < 16) {
            return Err(ConfigError(format!("server.api_keys.{name}.key: a gateway key has at least 16 characters")));
        }
        for (name, key) in &self.api_keys {
            if let Some(Err(why)) = key.tenant.as_deref().map(gateway_client::tenant_name) {
                return Err(ConfigError(format!(
                    "server.api_keys.{name}.tenant: value {:?} is invalid ({why})",
                    key.tenant.as_deref().unwrap_or_default()
                )));
            }
        }
        Ok(())
    }
}

/// Reads `path`: the `[server]` table (and `SERVER__*` variables) and the scopes.
pub fn load(path: &Path) -> Result<(ServerConfig, Vec<ScopePolicy>), ConfigError> {
    let scopes = Loader::new().file(path).reserve("server").load().map_err(|e| ConfigError(e.to_string()))?;
    let figment = Figment::new().merge(Toml::file(path)).merge(Env::prefixed("SERVER__").split("__").map(|k| format!("server.{k}").into()));
    let server = if figment.find_value("server").is_ok() {
        figment.extract_inner::<ServerConfig>("server").map_err(|e| {
            // figment puts the focused table last in the path: name the key from the top.
            let inner: Vec<&str> = e.path.iter().map(String::as_str).filter(|p| *p != "server").collect();
            let key = std::iter::once("server").chain(inner).collect::<Vec<_>>().join(".");
            let message = match &e.kind {
                figment::error::Kind::UnknownField(field, _) => format!("unknown key {field:?}"),
                figment::error::Kind::MissingField(field) => format!("required key {field:?} is missing"),
                // A value under api_keys may be a key: never print it.
                figment::error::Kind::InvalidType(_, expected) if key.contains("api_keys") => {
                    format!("invalid type (the value is not shown), expected {expected}")
                }
                other => other.to_string(),
            };
            ConfigError(format!("{key}: {message}"))
        })?
    } else {
        ServerConfig::default()
    };
    server.validate()?;
    Ok((server, scopes))
}
