//! A scope's sources: as deserialized, validated, their local quota and their API keys.

use super::error::{DAY_S, Fields, PolicyError, check_name};
use crate::request::Protocol;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The smallest `max_stream_bytes`: one event of a stream must fit.
const MIN_STREAM_BYTES: u64 = 1024;

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
    /// Most bytes one relayed stream of this source may carry (default: the adapter's,
    /// 64 MiB); past it the stream ends with an error and the source is at fault.
    pub max_stream_bytes: Option<u64>,
    /// Whether a streamed attempt sends `stream_options` (default true: the gateway asks for the
    /// usage chunk, which settles the token quota). Old Azure and vLLM deployments answer 400 to
    /// it: `false` sends none (the caller's too), and the quota keeps the call's estimate.
    pub stream_options: Option<bool>,
    /// The dialect the source speaks (default `openai`; `anthropic`: Anthropic's Messages API,
    /// with `x-api-key` and `anthropic-version`). A source serves the calls of its protocol's
    /// kinds; a call of another protocol's kind passes it by.
    pub protocol: Option<Protocol>,
    /// The `anthropic-version` an `anthropic` source is sent when the caller sends none
    /// (default `2023-06-01`).
    pub anthropic_version: Option<String>,
    /// Betas an `anthropic` source refuses: left out of the caller's `anthropic-beta` there.
    pub drop_betas: Option<Vec<String>>,
    /// The `max_tokens` an `anthropic` source is sent for a chat request that sets no limit
    /// (Anthropic requires one; default 4096).
    pub max_tokens: Option<u32>,
}

/// The `max_tokens` a chat request translated for an `anthropic` source gets when it sets none.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The `anthropic-version` sent to an `anthropic` source when the caller sends none.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

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
    /// Most bytes one relayed stream may carry (`None`: the adapter's default).
    pub max_stream_bytes: Option<u64>,
    /// Whether a streamed attempt sends `stream_options`.
    pub stream_options: bool,
    /// The dialect it speaks.
    pub protocol: Protocol,
    /// The `anthropic-version` it is sent when the caller sends none.
    pub anthropic_version: String,
    /// Betas left out of the caller's `anthropic-beta` here.
    pub drop_betas: Vec<String>,
    /// The `max_tokens` a translated chat request gets here when it sets none.
    pub max_tokens: u32,
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
            max_stream_bytes: self.max_stream_bytes.map(|v| f.bytes("max_stream_bytes", v, MIN_STREAM_BYTES)).transpose()?,
            stream_options: self.stream_options.unwrap_or(true),
            protocol: self.protocol.unwrap_or_default(),
            anthropic_version: match &self.anthropic_version {
                Some(version) if version.is_empty() || !version.bytes().all(|b| b.is_ascii_graphic()) => {
                    return Err(f.invalid("anthropic_version", version, "printable ASCII without spaces"));
                }
                Some(version) => version.clone(),
                None => ANTHROPIC_VERSION.to_owned(),
            },
            drop_betas: match &self.drop_betas {
                Some(betas) => {
                    if let Some(bad) = betas.iter().find(|b| b.is_empty() || !b.bytes().all(|c| c.is_ascii_graphic() && c != b',')) {
                        return Err(f.invalid("drop_betas", bad, "a beta's name: printable ASCII without spaces or commas"));
                    }
                    betas.clone()
                }
                None => Vec::new(),
            },
            max_tokens: f.int("max_tokens", self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS), 1, u32::MAX)?,
        })
    }
}
