//! `QuotaGate` on Redis: leases in a sorted set (a crashed worker's permit expires), starts and
//! token charges of the rolling minute, one script per operation.

use crate::connection::RedisConnection;
use crate::keys;
use crate::keys::{malformed, unavailable};
use async_trait::async_trait;
use fred::prelude::*;
use gateway_core::policy::QuotaLimits;
use gateway_core::ports::{BackendError, Permit, QuotaDecision, QuotaGate, QuotaLimit, SourceKey};
use std::sync::Arc;
use std::time::Duration;

/// The local quota of every source account, shared by every process using one Redis.
#[derive(Clone)]
pub struct RedisQuota {
    conn: Arc<RedisConnection>,
    incarnations: Arc<gateway_core::random::Incarnations>,
}

impl RedisQuota {
    /// Quota on `conn`.
    pub fn new(conn: Arc<RedisConnection>) -> Self {
        RedisQuota { conn, incarnations: Arc::new(crate::incarnations()) }
    }

    /// The arguments of `quota_acquire.lua` for a permit under `limits` estimated at
    /// `estimated_tokens`.
    pub(crate) fn acquire_args(&self, limits: &QuotaLimits, estimated_tokens: u32) -> Vec<Value> {
        let mut args = self.base_args(limits.keep_for());
        args.extend([
            limit_arg(limits.max_concurrency),
            limit_arg(limits.rpm),
            limit_arg(limits.tpm),
            Value::Integer(i64::try_from(limits.permit_ttl.as_millis()).unwrap_or(i64::MAX)),
            Value::Integer(i64::from(estimated_tokens)),
            id_arg(self.incarnations.draw()),
        ]);
        args
    }

    /// The arguments of `quota_settle.lua` for `permit` used `actual_tokens`.
    pub(crate) fn settle_args(&self, permit: &Permit, actual_tokens: u32) -> Vec<Value> {
        let mut args = self.base_args(Duration::ZERO);
        args.extend([id_arg(permit.incarnation), id_arg(permit.id), Value::Integer(i64::from(actual_tokens))]);
        args
    }

    /// The arguments of `quota_release.lua` for `permit`.
    pub(crate) fn release_args(&self, permit: &Permit) -> Vec<Value> {
        let mut args = self.base_args(Duration::ZERO);
        args.extend([id_arg(permit.incarnation), id_arg(permit.id)]);
        args
    }

    /// Permits of `key` holding a concurrency slot at the script clock's now.
    pub async fn in_flight(&self, key: &SourceKey) -> Result<usize, BackendError> {
        let [leases, ..] = keys::quota(key)?;
        let now = match self.conn.now_arg() {
            Value::Integer(ms) => format!("({ms}"),
            _ => {
                let (secs, micros): (i64, i64) =
                    self.conn.pool().custom(fred::cmd!("TIME"), Vec::<Value>::new()).await.map_err(|e| unavailable(key, e))?;
                format!("({}", secs * 1000 + micros / 1000)
            }
        };
        let count: i64 =
            self.conn.pool().custom(fred::cmd!("ZCOUNT"), vec![leases, now, "+inf".to_owned()]).await.map_err(|e| unavailable(key, e))?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// Drops one account's keys, as a flush, a restart without persistence or an eviction would
    /// (for tests and tools). One DEL per key: a cluster routes each by its slot.
    pub async fn forget(&self, key: &SourceKey) -> Result<(), BackendError> {
        for name in keys::quota(key)? {
            self.conn.pool().del::<i64, _>(name).await.map_err(|e| unavailable(key, e))?;
        }
        Ok(())
    }

    /// ARGV[1..2] of the quota scripts: now, and the keys' TTL (`QuotaLimits::keep_for`, set by
    /// acquire; settle and release leave it as it is and send 0).
    fn base_args(&self, keep_for: Duration) -> Vec<Value> {
        vec![self.conn.now_arg(), Value::Integer(i64::try_from(keep_for.as_millis()).unwrap_or(i64::MAX))]
    }
}

/// `quota_acquire.lua`'s reply: a permit charging `estimated_tokens`, or the limit that refused
/// one and the wait it hints.
pub(crate) fn parse_acquire(key: &SourceKey, value: Value, estimated_tokens: u32) -> Result<QuotaDecision, BackendError> {
    let items = match value {
        Value::Array(items) => items,
        other => return Err(malformed(key, format!("acquire reply {other:?}"))),
    };
    let int = |i: usize| items.get(i).and_then(Value::as_i64).ok_or_else(|| malformed(key, format!("acquire reply item {i}: {items:?}")));
    if int(0)? == 1 {
        let incarnation = items.get(1).and_then(Value::as_str).and_then(|text| text.parse::<u64>().ok());
        let incarnation = incarnation.ok_or_else(|| malformed(key, format!("acquire reply incarnation: {items:?}")))?;
        let id = u64::try_from(int(2)?).map_err(|_| malformed(key, "negative permit id".to_owned()))?;
        return Ok(QuotaDecision::Granted(Permit { key: key.clone(), incarnation, id, estimated_tokens }));
    }
    let limit = match items.get(1).and_then(Value::as_str).as_deref() {
        Some("max_concurrency") => QuotaLimit::Concurrency,
        Some("rpm") => QuotaLimit::RequestsPerMinute,
        Some("tpm") => QuotaLimit::TokensPerMinute,
        other => return Err(malformed(key, format!("unknown limit {other:?}"))),
    };
    Ok(QuotaDecision::Refused { limit, retry_after: Duration::from_millis(u64::try_from(int(2)?).unwrap_or(0)) })
}

pub(crate) fn quota_keys(key: &SourceKey) -> Result<Vec<Value>, BackendError> {
    Ok(keys::quota(key)?.into_iter().map(|k| Value::String(k.into())).collect())
}

/// An id as a script argument: an integer (Redis hands it to Lua as its decimal text).
fn id_arg(id: u64) -> Value {
    Value::Integer(i64::try_from(id).unwrap_or(i64::MAX))
}

fn limit_arg(limit: Option<u32>) -> Value {
    Value::Integer(limit.map_or(-1, i64::from))
}

#[async_trait]
impl QuotaGate for RedisQuota {
    async fn acquire(&self, key: &SourceKey, limits: &QuotaLimits, estimated_tokens: u32) -> Result<QuotaDecision, BackendError> {
        let keys = quota_keys(key)?;
        let value = self.conn.run(&self.conn.scripts().quota_acquire, &keys, &[&self.acquire_args(limits, estimated_tokens)], key).await?;
        parse_acquire(key, value, estimated_tokens)
    }

    async fn settle(&self, permit: &Permit, actual_tokens: u32) -> Result<(), BackendError> {
        let keys = quota_keys(&permit.key)?;
        self.conn.run(&self.conn.scripts().quota_settle, &keys, &[&self.settle_args(permit, actual_tokens)], &permit.key).await.map(|_| ())
    }

    async fn release(&self, permit: &Permit) -> Result<(), BackendError> {
        let keys = quota_keys(&permit.key)?;
        self.conn.run(&self.conn.scripts().quota_release, &keys, &[&self.release_args(permit)], &permit.key).await.map(|_| ())
    }
}
