//! `RecordGate` on Redis: an attempt's records (the pacer release, the gate's record, the
//! permit's settle and release) in one EVALSHA of `settle.lua`, which runs each part's own
//! script in turn. The keys of one attempt share its scope's hash tag, so one script may touch
//! them all on a cluster; records whose keys do not (none the client makes) are made one by one.

use crate::connection::RedisConnection;
use crate::gates::{RedisGates, parse_reply};
use crate::pacer::{RedisPacer, limit_of, pacer_keys};
use crate::quota::{RedisQuota, quota_keys};
use async_trait::async_trait;
use fred::prelude::*;
use gateway_core::ports::{BackendError, SourceKey};
use gateway_core::records::{InOrder, RecordGate, Recorded, Records};
use std::sync::Arc;

/// An attempt's records on Redis, one round trip for all of them.
pub struct RedisRecords {
    conn: Arc<RedisConnection>,
    gates: RedisGates,
    quota: RedisQuota,
    pacer: RedisPacer,
    /// Records whose keys are not of one scope: the parts one by one.
    in_order: InOrder,
}

impl RedisRecords {
    /// The records of `gates`, `quota` and `pacer` (one connection's), made together.
    pub fn new(gates: RedisGates, quota: RedisQuota, pacer: RedisPacer) -> Self {
        let conn = gates.connection().clone();
        let in_order = InOrder { gates: Arc::new(gates.clone()), quota: Arc::new(quota.clone()), pacer: Arc::new(pacer.clone()) };
        RedisRecords { conn, gates, quota, pacer, in_order }
    }
}

/// Whether every part's key is of one scope (one hash tag).
fn one_scope(records: &Records<'_>, key: &SourceKey) -> bool {
    let scopes = [records.pace.map(|p| &p.lease.key), records.gate.map(|g| g.key), records.permit.map(|p| &p.permit.key)];
    scopes.into_iter().flatten().all(|k| k.scope == key.scope)
}

/// One part's arguments: their count, then them.
fn push_part(args: &mut Vec<Value>, part: impl IntoIterator<Item = Value>) {
    let at = args.len();
    args.push(Value::Integer(0));
    args.extend(part);
    args[at] = Value::Integer(i64::try_from(args.len() - at - 1).unwrap_or(i64::MAX));
}

#[async_trait]
impl RecordGate for RedisRecords {
    async fn record(&self, records: &Records<'_>) -> Result<Recorded, BackendError> {
        let Some(key) = records.key() else { return Ok(Recorded::default()) };
        if !one_scope(records, key) {
            return self.in_order.record(records).await;
        }
        let (mut plan, mut keys, mut args) = (String::new(), Vec::with_capacity(7), vec![Value::Null]);
        if let Some(pace) = records.pace {
            plan.push('p');
            keys.extend(pacer_keys(&pace.lease.key)?);
            push_part(&mut args, self.pacer.release_args(pace.lease, pace.effect, pace.rate, pace.params));
        }
        if let Some(gate) = records.gate {
            plan.push('g');
            let (hash, op_args, param_args) = self.gates.op_call(gate.key, gate.params, gate.op)?;
            keys.push(hash);
            push_part(&mut args, std::iter::once(self.conn.now_arg()).chain(op_args).chain(param_args.iter().cloned()));
        }
        if let Some(permit) = records.permit {
            keys.extend(quota_keys(&permit.permit.key)?);
            if let Some(tokens) = permit.actual_tokens {
                plan.push('s');
                push_part(&mut args, self.quota.settle_args(permit.permit, tokens));
            }
            plan.push('r');
            push_part(&mut args, self.quota.release_args(permit.permit));
        }
        args[0] = Value::String(plan.into());
        let reply = match self.conn.run(&self.conn.scripts().settle, &keys, &[&args], key).await {
            Ok(reply) => reply,
            Err(error) => {
                self.conn.degrade("settle", &error);
                return Err(error);
            }
        };
        let items = match reply {
            Value::Array(items) => items,
            other => {
                return Err(BackendError::Malformed { backend: "redis", key: key.to_string(), detail: format!("settle reply {other:?}") });
            }
        };
        let mut items = items.into_iter();
        let (limit, gate) = (items.next(), items.next());
        Ok(Recorded {
            limit: match records.pace {
                Some(pace) => Some(limit_of(&pace.lease.key, limit.as_ref())?),
                None => None,
            },
            gate: match records.gate {
                Some(record) => Some(parse_reply(record.key, gate.unwrap_or(Value::Null))?),
                None => None,
            },
        })
    }
}
