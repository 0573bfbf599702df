//! `AttemptGate` on Redis: an attempt's admission (the account's place, the
//! gate, the permit) in one EVALSHA of `admit.lua`, and its records (the pacer release, the
//! gate's record, the permit's settle and release) in one of `settle.lua`, or both, an ended
//! attempt's records and the next waiter's admission, in one of `handover.lua`; each runs every part's
//! own script in turn, and `line.lua` for the scope's line across processes: an admission
//! renews, moves or ends the process's standing (while its `watch_freed` runs), a settle hands
//! what it frees to the process whose waiter is oldest (telling it). The keys of one attempt share its scope's hash tag, so one script may
//! touch them all on a cluster; an attempt whose keys do not (none the client makes) is asked
//! part by part.

use crate::connection::RedisConnection;
use crate::gates::{RedisGates, parse_reply};
use crate::keys;
use crate::keys::malformed;
use crate::pacer::parse_acquire as parse_place;
use crate::pacer::{RedisPacer, limit_of, ms, pacer_keys};
use crate::quota::parse_acquire as parse_permit;
use crate::quota::{RedisQuota, quota_keys};
use async_trait::async_trait;
use fred::prelude::*;
use gateway_core::breaker::GateOp;
use gateway_core::combined::{Admission, Admit, AttemptGate, InOrder, Recorded, Records};
use gateway_core::ports::{BackendError, PaceDecision, QuotaDecision, SourceKey};
use std::sync::Arc;

/// An attempt's admission and its records on Redis, one round trip each.
pub struct RedisAttempts {
    conn: Arc<RedisConnection>,
    gates: RedisGates,
    quota: RedisQuota,
    pacer: RedisPacer,
    /// Attempts whose keys are not of one scope: the parts one by one.
    in_order: InOrder,
}

impl RedisAttempts {
    /// The admissions and records of `gates`, `quota` and `pacer` (one connection's).
    pub fn new(gates: RedisGates, quota: RedisQuota, pacer: RedisPacer) -> Self {
        let conn = gates.connection().clone();
        let in_order = InOrder { gates: Arc::new(gates.clone()), quota: Arc::new(quota.clone()), pacer: Arc::new(pacer.clone()) };
        RedisAttempts { conn, gates, quota, pacer, in_order }
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

/// One script's keys and arguments (its plan first).
struct Call {
    keys: Vec<Value>,
    args: Vec<Value>,
}

impl RedisAttempts {
    /// `admit.lua`'s keys and arguments for `ask` (its parts of one scope).
    fn admit_call(&self, ask: &Admit<'_>) -> Result<Call, BackendError> {
        let key = ask.gate.key;
        let (mut plan, mut keys, mut args) = (String::new(), Vec::with_capacity(9), vec![Value::Null]);
        if let Some(line) = ask.line.filter(|_| self.stands_in_line()) {
            plan.push('l');
            keys.extend(keys::line(key)?.map(|k| Value::String(k.into())));
            let oldest = Value::Integer(ms(line.others.map_or(line.waited, |others| others.max(line.waited))));
            let others = line.others.map_or(Value::String("".into()), |others| Value::Integer(ms(others)));
            // A quota of the call's tenant's own is nobody else's capacity (SPEC §6).
            let shared = Value::String(if ask.permit.is_none_or(|p| p.key.tenant.is_none()) { "1" } else { "0" }.into());
            push_part(&mut args, [self.conn.now_arg(), self.conn.line_arg(), oldest, others, Value::Integer(ms(line.lasts)), shared]);
        }
        if let Some(pace) = ask.pace {
            plan.push('p');
            keys.extend(pacer_keys(pace.key)?);
            push_part(&mut args, self.pacer.acquire_args(pace.params, pace.tokens));
            push_part(&mut args, RedisPacer::hand_back_args(pace.params));
        }
        plan.push('g');
        let (hash, op_args, param_args) = self.gates.op_call(key, ask.gate.params, GateOp::TryEnter)?;
        keys.push(hash);
        push_part(&mut args, std::iter::once(self.conn.now_arg()).chain(op_args).chain(param_args.iter().cloned()));
        if let Some(permit) = ask.permit {
            plan.push('q');
            keys.extend(quota_keys(permit.key)?);
            push_part(&mut args, self.quota.acquire_args(permit.limits, permit.tokens));
        }
        args[0] = Value::String(plan.into());
        Ok(Call { keys, args })
    }

    /// `settle.lua`'s keys and arguments for `records` (their parts of one scope).
    fn settle_call(&self, records: &Records<'_>, key: &SourceKey) -> Result<Call, BackendError> {
        let (mut plan, mut keys, mut args) = (String::new(), Vec::with_capacity(9), vec![Value::Null]);
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
        if let Some(freed) = records.handed_on() {
            plan.push('w');
            keys.extend(keys::line(key)?.map(|k| Value::String(k.into())));
            let channel = Value::String(keys::freed_channels(&key.scope).into());
            let (here, grace) = (Value::Integer(i64::from(freed.waiting_here)), Value::Integer(ms(freed.grace)));
            push_part(&mut args, [self.conn.now_arg(), self.conn.line_arg(), here, channel, grace]);
        }
        args[0] = Value::String(plan.into());
        Ok(Call { keys, args })
    }
}

/// What `admit.lua` answered for `ask`.
fn admission_of(ask: &Admit<'_>, reply: Value) -> Result<Admission, BackendError> {
    let key = ask.gate.key;
    let items = match reply {
        Value::Array(items) => items,
        other => return Err(malformed(key, format!("admit reply {other:?}"))),
    };
    let mut items = items.into_iter().map(|item| Some(item).filter(|v| !v.is_null()));
    let (pace, gate, permit) = (items.next().flatten(), items.next().flatten(), items.next().flatten());
    let lease = match (ask.pace, pace) {
        (None, _) => None,
        (Some(ask), Some(reply)) => match parse_place(ask.key, reply)? {
            PaceDecision::Granted(lease) => Some(lease),
            PaceDecision::Paced(paced) => return Ok(Admission::Paced(paced)),
        },
        (Some(_), None) => return Err(malformed(key, "admit reply without the account's answer".to_owned())),
    };
    let entry = parse_reply(key, gate.ok_or_else(|| malformed(key, "admit reply without the gate's answer".to_owned()))?)?;
    if !entry.is_admitted() {
        return Ok(Admission::Denied(entry));
    }
    let permit = match (ask.permit, permit) {
        (None, _) => None,
        (Some(ask), Some(reply)) => match parse_permit(ask.key, reply, ask.tokens)? {
            QuotaDecision::Granted(permit) => Some(permit),
            QuotaDecision::Refused { limit, retry_after } => return Ok(Admission::Refused { entry, limit, retry_after }),
        },
        (Some(_), None) => return Err(malformed(key, "admit reply without the quota's answer".to_owned())),
    };
    Ok(Admission::Admitted { lease, entry, permit })
}

/// What `settle.lua` answered for `records` (`key`: theirs).
fn recorded_of(records: &Records<'_>, key: &SourceKey, reply: Value) -> Result<Recorded, BackendError> {
    let items = match reply {
        Value::Array(items) => items,
        other => return Err(malformed(key, format!("settle reply {other:?}"))),
    };
    let mut items = items.into_iter();
    let (limit, gate, elsewhere) = (items.next(), items.next(), items.next());
    Ok(Recorded {
        elsewhere: matches!(elsewhere, Some(Value::Integer(1))),
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

/// Whether every part `ask` asks for is of its gate's scope (one hash tag).
fn admits_in_one_scope(ask: &Admit<'_>) -> bool {
    let scopes = [ask.pace.map(|p| p.key), ask.permit.map(|p| p.key)];
    scopes.into_iter().flatten().all(|k| k.scope == ask.gate.key.scope)
}

#[async_trait]
impl AttemptGate for RedisAttempts {
    async fn admit(&self, ask: &Admit<'_>) -> Result<Admission, BackendError> {
        if !admits_in_one_scope(ask) {
            return self.in_order.admit(ask).await;
        }
        let call = self.admit_call(ask)?;
        let reply = self.conn.run(&self.conn.scripts().admit, &call.keys, &[&call.args], ask.gate.key).await?;
        admission_of(ask, reply)
    }

    async fn record(&self, records: &Records<'_>) -> Result<Recorded, BackendError> {
        let Some(key) = records.key() else { return Ok(Recorded::default()) };
        if !one_scope(records, key) {
            return self.in_order.record(records).await;
        }
        let call = self.settle_call(records, key)?;
        let reply = self.conn.run(&self.conn.scripts().settle, &call.keys, &[&call.args], key).await.inspect_err(|error| {
            self.conn.degrade("settle", error);
        })?;
        recorded_of(records, key, reply)
    }

    /// Both in one EVALSHA of `handover.lua` (`settle.lua`, then `admit.lua`) when every key is
    /// of one scope; else one after the other.
    async fn record_then_admit(
        &self,
        records: &Records<'_>,
        ask: &Admit<'_>,
    ) -> (Result<Recorded, BackendError>, Result<Admission, BackendError>) {
        let key = match records.key() {
            Some(key) if one_scope(records, key) && admits_in_one_scope(ask) && ask.gate.key.scope == key.scope => key,
            _ => return (self.record(records).await, self.admit(ask).await),
        };
        let (Ok(settle), Ok(admit)) = (self.settle_call(records, key), self.admit_call(ask)) else {
            // A key Redis cannot hold: each answers its own error.
            return (self.record(records).await, self.admit(ask).await);
        };
        let keys: Vec<Value> = settle.keys.into_iter().chain(admit.keys).collect();
        let items = match self.conn.run(&self.conn.scripts().handover, &keys, &[&settle.args, &admit.args], key).await {
            Ok(Value::Array(items)) if items.len() == 3 => items,
            Ok(other) => {
                let error = malformed(key, format!("handover reply {other:?}"));
                self.conn.degrade("settle", &error);
                return (Err(error.clone()), Err(error));
            }
            // The records could not be made (the admission after them is caught in the script):
            // the admission is asked on its own.
            Err(error @ BackendError::Malformed { .. }) => {
                self.conn.degrade("settle", &error);
                return (Err(error), self.admit(ask).await);
            }
            Err(error) => {
                self.conn.degrade("settle", &error);
                return (Err(error.clone()), Err(error));
            }
        };
        let mut items = items.into_iter();
        let (recorded, admission, failed) = (items.next(), items.next(), items.next());
        let recorded = recorded_of(records, key, recorded.unwrap_or(Value::Null));
        let admission = match failed.as_ref().and_then(Value::as_str_lossy) {
            Some(why) => Err(malformed(ask.gate.key, format!("handover's admission: {why}"))),
            None => admission_of(ask, admission.unwrap_or(Value::Null)),
        };
        (recorded, admission)
    }

    /// Every operation is a round trip: a release is best carried by the admission it frees
    /// room for.
    fn carries_records(&self) -> bool {
        true
    }

    /// A process stands in the lines only while it hears what is handed to it (`watch_freed`).
    fn stands_in_line(&self) -> bool {
        self.conn.is_watched()
    }
}
