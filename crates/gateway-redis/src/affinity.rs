//! [`RedisAffinity`]: the affinity map shared by every process (`AffinityMap`): one string key
//! per id, `gw:aff:<id>` → `<scope> <source>`, set with the id's time to live (`SET … PX`), so
//! Redis forgets it then, and its memory policy bounds the whole. Ids, scopes and sources are
//! checked before they reach a key (`affinity::check_id`, the config alphabet): none can break
//! the key or the value's one separator.

use crate::connection::RedisConnection;
use async_trait::async_trait;
use fred::types::Value;
use gateway_core::affinity::checked_key;
use gateway_core::ports::{Affinity, AffinityMap, BackendError, is_key_part};
use std::sync::Arc;
use std::time::Duration;

/// The affinity map on Redis.
pub struct RedisAffinity {
    conn: Arc<RedisConnection>,
}

impl RedisAffinity {
    /// The map on `conn`.
    pub fn new(conn: Arc<RedisConnection>) -> Self {
        RedisAffinity { conn }
    }
}

fn key(id: &str) -> Result<String, BackendError> {
    Ok(format!("gw:aff:{}", checked_key(id)?))
}

#[async_trait]
impl AffinityMap for RedisAffinity {
    async fn remember(&self, id: &str, at: &Affinity, ttl: Duration) -> Result<(), BackendError> {
        let key = key(id)?;
        for (what, part) in [("scope", &at.scope), ("source", &at.source)] {
            if !is_key_part(part) {
                return Err(BackendError::InvalidKey {
                    key,
                    detail: format!("{what} {part:?} must use only letters, digits, '_' and '-'"),
                });
            }
        }
        let ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1);
        let value = Value::String(format!("{} {}", at.scope, at.source).into());
        self.conn.command("SET", &key, vec![value, Value::String("PX".into()), Value::Integer(ms)]).await?;
        Ok(())
    }

    async fn find(&self, id: &str) -> Result<Option<Affinity>, BackendError> {
        let key = key(id)?;
        let value = self.conn.command("GET", &key, Vec::new()).await?;
        let Some(text) = value.as_str() else { return Ok(None) };
        match text.split_once(' ') {
            Some((scope, source)) => Ok(Some(Affinity { scope: scope.into(), source: source.into() })),
            None => {
                Err(BackendError::Malformed { backend: "redis", key, detail: format!("an affinity value without its source: {text:?}") })
            }
        }
    }

    async fn forget(&self, id: &str) -> Result<(), BackendError> {
        let key = key(id)?;
        self.conn.command("DEL", &key, Vec::new()).await?;
        Ok(())
    }
}
