//! Who is calling: gateway API keys (compared by digest, in constant time), the tenant a key
//! binds or lets a caller name (with the per-key cap on how many), and who may read `/metrics`.

use crate::config::ServerConfig;
use crate::openai::ApiError;
use axum::http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::time::Instant;

/// One configured key, hashed once.
struct Key {
    digest: [u8; 32],
    /// The tenant it binds.
    tenant: Option<String>,
    /// For an unbound key with `max_tenants`: the tenants it named, with when it last did.
    named: Option<(usize, Mutex<HashMap<String, Instant>>)>,
}

/// The gateway keys and the metrics key, as checked per request.
pub(crate) struct Keys {
    keys: Vec<Key>,
    /// Tenants a key is bound to: no other key may name them.
    bound: std::collections::HashSet<String>,
    metrics: Option<[u8; 32]>,
    admin: Option<[u8; 32]>,
    /// How long a tenant a key named keeps counting against its cap without being named again,
    /// in milliseconds: the longest `tenant_idle_s` of the scopes, followed on every reload.
    tenant_idle_ms: AtomicU64,
}

/// Who is calling, after authentication.
pub(crate) struct Caller {
    /// The tenant its calls are made for.
    pub(crate) tenant: Option<String>,
    /// Whether its key is bound to that tenant (it then sees only its own tenant's state).
    pub(crate) bound: bool,
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

fn unauthorized(why: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "authentication_error", "invalid_api_key", why)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "))
}

/// The password of `Authorization: Basic` (a browser's prompt; the user name is not read).
fn basic_password(headers: &HeaderMap) -> Option<String> {
    use base64::Engine;
    let encoded = headers.get("authorization")?.to_str().ok()?.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    text.split_once(':').map(|(_, password)| password.to_owned())
}

/// The gateway keys a caller gives: `Authorization: Bearer <key>`, and `x-api-key` (as the
/// Anthropic SDKs and Claude Code send theirs).
fn given_keys(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    bearer(headers).into_iter().chain(headers.get("x-api-key").and_then(|v| v.to_str().ok()))
}

impl Keys {
    /// The keys of `config`; `tenant_idle` is the longest `tenant_idle_s` of the scopes.
    pub(crate) fn new(config: &ServerConfig, tenant_idle: Duration) -> Self {
        let keys = config
            .api_keys
            .values()
            .map(|k| Key {
                digest: digest(&k.key),
                tenant: k.tenant.clone(),
                named: k.max_tenants.filter(|_| k.tenant.is_none()).map(|max| (max, Mutex::default())),
            })
            .collect();
        let bound = config.bound_tenants().map(str::to_ascii_lowercase).collect();
        Keys {
            keys,
            bound,
            metrics: config.metrics_key.as_deref().map(digest),
            admin: config.admin_key.as_deref().map(digest),
            tenant_idle_ms: AtomicU64::new(millis(tenant_idle)),
        }
    }

    /// The configured key `given` is, compared with every key in constant time and without
    /// stopping at a match: neither a key's bytes nor its length show in the timing.
    fn find(&self, given: &str) -> Option<&Key> {
        let given = digest(given);
        let mut found = None;
        for key in &self.keys {
            if bool::from(key.digest.ct_eq(&given)) {
                found = Some(key);
            }
        }
        found
    }

    /// The caller of a request: `Err` answers it.
    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let header_tenant = match headers.get("x-tenant-id").map(|v| v.to_str()) {
            None => None,
            Some(Ok(t)) => Some(t.to_owned()),
            Some(Err(_)) => return Err(ApiError::invalid("x-tenant-id", "the tenant header is not visible ASCII")),
        };
        if self.keys.is_empty() {
            return Ok(Caller { tenant: header_tenant, bound: false });
        }
        let mut given = given_keys(headers).peekable();
        if given.peek().is_none() {
            return Err(unauthorized("missing gateway API key (Authorization: Bearer <key>, or x-api-key)"));
        }
        // Either header may carry it (a caller may send an Authorization of its own beside it).
        let key = given.find_map(|given| self.find(given)).ok_or_else(|| unauthorized("invalid gateway API key"))?;
        match (&key.tenant, header_tenant) {
            (Some(bound), Some(asked)) if !bound.eq_ignore_ascii_case(&asked) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                "tenant_mismatch",
                format!("this key is bound to tenant {bound:?}; x-tenant-id may not name another"),
            )),
            (Some(bound), _) => Ok(Caller { tenant: Some(bound.clone()), bound: true }),
            (None, Some(asked)) => {
                // A malformed name is the client's own to learn of (named in the call's error);
                // a well-formed one must not be another key's tenant, and counts against the cap.
                if let Ok(name) = gateway_client::tenant_name(&asked) {
                    if self.bound.contains(&name) {
                        return Err(ApiError::new(
                            StatusCode::FORBIDDEN,
                            "permission_error",
                            "tenant_bound_to_another_key",
                            format!("tenant {name:?} is bound to a key of its own; only that key may name it"),
                        ));
                    }
                    self.count_named(key, &name)?;
                }
                Ok(Caller { tenant: Some(asked), bound: false })
            }
            (None, None) => Ok(Caller { tenant: None, bound: false }),
        }
    }

    /// Follows the scopes' longest `tenant_idle_s` after a reload.
    pub(crate) fn set_tenant_idle(&self, tenant_idle: Duration) {
        self.tenant_idle_ms.store(millis(tenant_idle), Ordering::Relaxed);
    }

    /// Holds an unbound key to its `max_tenants`: a tenant (a valid, normalised name) it has
    /// named within the idle time counts, a new one past the cap is refused.
    fn count_named(&self, key: &Key, tenant: &str) -> Result<(), ApiError> {
        let Some((max, named)) = &key.named else { return Ok(()) };
        let now = Instant::now();
        let mut named = named.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(seen) = named.get_mut(tenant) {
            *seen = now;
            return Ok(());
        }
        if named.len() >= *max {
            let idle = Duration::from_millis(self.tenant_idle_ms.load(Ordering::Relaxed));
            named.retain(|_, seen| now.duration_since(*seen) < idle);
        }
        if named.len() >= *max {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "tenant_limit",
                format!(
                    "this key already names {max} tenants (its max_tenants); a tenant stops counting after it goes unnamed for tenant_idle_s"
                ),
            ));
        }
        named.insert(tenant.to_owned(), now);
        Ok(())
    }

    /// Whether a request may read `/metrics`: with a metrics key, only it; otherwise, when
    /// gateway keys are configured, one bound to no tenant (the series name every tenant).
    pub(crate) fn authorize_metrics(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if let Some(expected) = &self.metrics {
            let given =
                bearer(headers).map(digest).ok_or_else(|| unauthorized("/metrics needs the metrics key (Authorization: Bearer <key>)"))?;
            return if bool::from(expected.ct_eq(&given)) { Ok(()) } else { Err(unauthorized("invalid metrics key")) };
        }
        self.unbound_key(bearer(headers), "/metrics")
    }

    /// With gateway keys configured, one bound to no tenant (what such a route shows names every
    /// tenant); without any, nothing.
    fn unbound_key(&self, given: Option<&str>, route: &str) -> Result<(), ApiError> {
        if self.keys.is_empty() {
            return Ok(());
        }
        let given = given.ok_or_else(|| unauthorized(&format!("{route} needs a gateway API key (Authorization: Bearer <key>)")))?;
        match self.find(given) {
            None => Err(unauthorized("invalid gateway API key")),
            Some(key) if key.tenant.is_some() => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                "tenant_bound_key",
                format!("a key bound to a tenant may not use {route} (it shows every tenant)"),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Whether a request may use an operator's route (`route`, for the messages): the admin key,
    /// or the metrics key too when `metrics_too` (a read-only page, which with neither
    /// configured takes what `/metrics` takes without a metrics key). A route that changes
    /// something (`metrics_too` false) takes the admin key only, and without one it is closed.
    /// The key comes as `Authorization: Bearer`, or, for a read-only page only, as the password
    /// of `Basic` (a browser's prompt): a browser sends a stored Basic login with any request to
    /// the origin, a cross-site form's POST too, so a route that changes something never takes it.
    pub(crate) fn authorize_operator(&self, headers: &HeaderMap, route: &str, metrics_too: bool) -> Result<(), ApiError> {
        let given = bearer(headers).map(str::to_owned).or_else(|| metrics_too.then(|| basic_password(headers)).flatten());
        let accepted: Vec<&[u8; 32]> = self.admin.iter().chain(self.metrics.iter().filter(|_| metrics_too)).collect();
        if accepted.is_empty() && !metrics_too {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                "admin_key_not_set",
                format!("{route} needs server.admin_key, which is not set (SIGHUP reloads without it)"),
            ));
        }
        if accepted.is_empty() {
            return self.unbound_key(given.as_deref(), route);
        }
        let which = if metrics_too { "the admin or metrics key" } else { "the admin key" };
        let given =
            given.map(|g| digest(&g)).ok_or_else(|| unauthorized(&format!("{route} needs {which} (Authorization: Bearer <key>)")))?;
        // Every accepted key is compared, without stopping at a match.
        let matched = accepted.iter().fold(false, |any, key| any | bool::from(key.ct_eq(&given)));
        if matched { Ok(()) } else { Err(unauthorized(&format!("invalid key: {route} needs {which}"))) }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
