//! `PacerGate` on Redis: an account's learned limit, cut generation, refused ceiling, round-trip
//! EWMAs and lease sequence in one HASH, its leases in a sorted set (a crashed worker's attempts expire), one script per
//! operation. Every process sharing the Redis respects one limit per account.

use crate::connection::RedisConnection;
use crate::keys;
use crate::keys::malformed;
use async_trait::async_trait;
use fred::prelude::*;
use gateway_core::aimd::{AccountReading, LearnedCeiling, Lease, Paced, PacerParams};
use gateway_core::outcome::AimdEffect;
use gateway_core::ports::{BackendError, PaceDecision, PaceLease, PacerGate, SourceKey};
use gateway_core::request::{RateReport, RateSignal};
use gateway_core::time::Timestamp;
use std::sync::Arc;
use std::time::Duration;

/// The AIMD pacers of every provider account, shared by every process using one Redis.
#[derive(Clone)]
pub struct RedisPacer {
    conn: Arc<RedisConnection>,
}

pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl RedisPacer {
    /// Pacers on `conn`.
    pub fn new(conn: Arc<RedisConnection>) -> Self {
        RedisPacer { conn }
    }

    /// The arguments of `pacer_acquire.lua` for a place estimated at `tokens`.
    pub(crate) fn acquire_args(&self, params: &PacerParams, tokens: u32) -> Vec<Value> {
        let mut args = self.base_args(params);
        args.extend([Value::Integer(ms(params.lease_ttl)), Value::Integer(i64::from(tokens))]);
        args
    }

    /// What a hand-back (`pacer_release.lua` with no effect, in `admit.lua`) needs that a
    /// grant does not say: the ceiling and the advertised limits' window.
    pub(crate) fn hand_back_args(params: &PacerParams) -> [Value; 2] {
        [Value::String(format!("{:?}", params.ceiling).into()), Value::Integer(ms(params.limit_window))]
    }

    /// The arguments of `pacer_release.lua` for `lease` ending with `effect` and `rate`.
    pub(crate) fn release_args(
        &self,
        lease: &PaceLease,
        effect: AimdEffect,
        rate: Option<&RateSignal>,
        params: &PacerParams,
    ) -> Vec<Value> {
        let mut args = self.base_args(params);
        let effect = match effect {
            AimdEffect::Increase => "increase",
            AimdEffect::Decrease => "decrease",
            AimdEffect::RoundTrip => "round_trip",
            AimdEffect::Nothing => "nothing",
        };
        let l = &lease.lease;
        args.extend([
            Value::String(l.id.to_string().into()),
            Value::String(l.generation.to_string().into()),
            Value::String(l.epoch.to_string().into()),
            Value::String(l.n.to_string().into()),
            Value::String(l.granted.as_millis().to_string().into()),
            Value::String(effect.into()),
            Value::String(format!("{:?}", params.ceiling).into()),
            Value::String(l.tokens.to_string().into()),
        ]);
        for report in [rate.and_then(|r| r.requests), rate.and_then(|r| r.tokens)] {
            args.extend(report_args(report.as_ref()));
        }
        args.push(Value::Integer(ms(params.limit_window)));
        args
    }

    /// The arguments every pacer script starts with: now, the key TTL, the initial limit.
    fn base_args(&self, params: &PacerParams) -> Vec<Value> {
        let initial = params.initial_limit();
        vec![self.conn.now_arg(), Value::Integer(ms(params.keep_for())), Value::String(format!("{initial:?}").into())]
    }
}

pub(crate) fn pacer_keys(key: &SourceKey) -> Result<Vec<Value>, BackendError> {
    Ok(keys::pacer(key)?.into_iter().map(|k| Value::String(k.into())).collect())
}

/// A `%.17g` limit from a script.
pub(crate) fn limit_of(key: &SourceKey, value: Option<&Value>) -> Result<f64, BackendError> {
    let text = value.and_then(Value::as_str).ok_or_else(|| malformed(key, format!("limit {value:?}")))?;
    text.parse::<f64>().ok().filter(|l| l.is_finite()).ok_or_else(|| malformed(key, format!("limit {text:?}")))
}

fn items(key: &SourceKey, op: &str, value: Value) -> Result<Vec<Value>, BackendError> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(malformed(key, format!("{op} reply {other:?}"))),
    }
}

fn count(key: &SourceKey, value: Option<&Value>) -> Result<u64, BackendError> {
    value.and_then(Value::as_i64).and_then(|n| u64::try_from(n).ok()).ok_or_else(|| malformed(key, format!("count {value:?}")))
}

/// `pacer_acquire.lua`'s reply: a place, or the limit and in-flight count that refused one.
pub(crate) fn parse_acquire(key: &SourceKey, reply: Value) -> Result<PaceDecision, BackendError> {
    let items = items(key, "acquire", reply)?;
    if items.first().and_then(Value::as_i64) == Some(1) {
        let lease = Lease {
            id: count(key, items.get(1))?,
            generation: count(key, items.get(2))?,
            epoch: count(key, items.get(3))?,
            n: u32::try_from(count(key, items.get(4))?).unwrap_or(u32::MAX),
            granted: Timestamp::from_millis(count(key, items.get(5))?),
            tokens: count(key, items.get(6))?,
            room: count(key, items.get(7))? == 1,
        };
        return Ok(PaceDecision::Granted(PaceLease { key: key.clone(), lease }));
    }
    let inflight = u32::try_from(count(key, items.get(2))?).unwrap_or(u32::MAX);
    let ready_in = match items.get(3).and_then(Value::as_i64) {
        Some(-1) => None,
        Some(ms) => Some(Duration::from_millis(u64::try_from(ms).map_err(|_| malformed(key, format!("ready_in {ms}")))?)),
        None => return Err(malformed(key, format!("acquire reply without ready_in: {items:?}"))),
    };
    Ok(PaceDecision::Paced(Paced { limit: limit_of(key, items.get(1))?, inflight, ready_in }))
}

/// A reported budget as the release script reads it: limit, remaining, reset in ms ('' each
/// when absent).
fn report_args(report: Option<&RateReport>) -> [Value; 3] {
    let text = |v: Option<String>| Value::String(v.unwrap_or_default().into());
    [
        text(report.and_then(|r| r.limit).map(|l| l.to_string())),
        text(report.map(|r| r.remaining.to_string())),
        text(report.map(|r| r.reset.as_millis().to_string())),
    ]
}

#[async_trait]
impl PacerGate for RedisPacer {
    async fn try_acquire(&self, key: &SourceKey, params: &PacerParams, tokens: u32) -> Result<PaceDecision, BackendError> {
        let args = self.acquire_args(params, tokens);
        let reply = self.conn.run(&self.conn.scripts().pacer_acquire, &pacer_keys(key)?, &[&args], key).await?;
        parse_acquire(key, reply)
    }

    async fn release(
        &self,
        lease: &PaceLease,
        effect: AimdEffect,
        rate: Option<&RateSignal>,
        params: &PacerParams,
    ) -> Result<f64, BackendError> {
        let key = &lease.key;
        let args = self.release_args(lease, effect, rate, params);
        let reply = self.conn.run(&self.conn.scripts().pacer_release, &pacer_keys(key)?, &[&args], key).await?;
        limit_of(key, Some(&reply))
    }

    async fn read(&self, key: &SourceKey, params: &PacerParams) -> Result<AccountReading, BackendError> {
        let reply = self.conn.run(&self.conn.scripts().pacer_read, &pacer_keys(key)?, &[&self.base_args(params)], key).await?;
        let items = items(key, "read", reply)?;
        let inflight = u32::try_from(count(key, items.get(1))?).unwrap_or(u32::MAX);
        // `w` is -1 while no ceiling is known.
        let learned = match items.get(2).and_then(Value::as_i64) {
            Some(-1) => None,
            Some(at) => Some(LearnedCeiling {
                at: u32::try_from(at).map_err(|_| malformed(key, format!("ceiling {at}")))?,
                held: items.get(3).and_then(Value::as_i64) == Some(1),
            }),
            None => return Err(malformed(key, format!("ceiling {:?}", items.get(2)))),
        };
        Ok(AccountReading { limit: limit_of(key, items.first())?, inflight, learned })
    }
}
