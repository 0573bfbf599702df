//! `BreakerGate` on Redis: each operation is one EVALSHA of its script on the gate's HASH.

use crate::connection::RedisConnection;
use crate::keys;
use crate::keys::{malformed, unavailable};
use async_trait::async_trait;
use fred::prelude::*;
use gateway_core::breaker::{Cause, CircuitState, Gate, GateOp, GateParams, Reply, SuccessKind, Transition, Verdict};
use gateway_core::ports::{BackendError, BreakerGate, SourceKey};
use gateway_core::random::Incarnations;
use gateway_core::time::Timestamp;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The breaker gates of every process sharing one Redis.
#[derive(Clone)]
pub struct RedisGates {
    conn: Arc<RedisConnection>,
    encoded: Arc<Mutex<HashMap<SourceKey, Encoded>>>,
    incarnations: Arc<Incarnations>,
}

/// A gate operation's HASH, its own arguments and the gate's parameter arguments.
pub(crate) type OpCall = (Value, [Value; 4], Arc<[Value]>);

/// Gates whose encoded arguments are kept. Past it the cache starts afresh: a process that
/// serves churning tenants touches ever new keys, and the cache must not grow with them (the
/// memory gates bound their maps likewise).
const ENCODED_CAP: usize = 4096;

/// A gate's HASH name and parameter arguments as sent: every operation sends both, and building
/// them was a large part of the client's work per operation, so they are built once per gate.
struct Encoded {
    params: GateParams,
    hash: Value,
    args: Arc<[Value]>,
}

impl RedisGates {
    /// Gates on `conn`.
    pub fn new(conn: Arc<RedisConnection>) -> Self {
        RedisGates { conn, encoded: Arc::default(), incarnations: Arc::new(crate::incarnations()) }
    }

    /// The HASH name and parameter arguments of `key` under `params` (cached while they hold).
    fn encode(&self, key: &SourceKey, params: &GateParams) -> Result<(Value, Arc<[Value]>), BackendError> {
        let cached = self
            .encoded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .filter(|e| e.params == *params)
            .map(|e| (e.hash.clone(), e.args.clone()));
        if let Some(encoded) = cached {
            return Ok(encoded);
        }
        let (hash, args) = (Value::String(keys::gate(key)?.into()), param_args(params));
        let entry = Encoded { params: params.clone(), hash: hash.clone(), args: args.clone() };
        let mut encoded = self.encoded.lock().unwrap_or_else(PoisonError::into_inner);
        if encoded.len() >= ENCODED_CAP {
            encoded.clear();
        }
        encoded.insert(key.clone(), entry);
        Ok((hash, args))
    }

    /// The HASH, the operation's arguments and the parameter arguments of `gate.lua` for `op`
    /// on `key` (after the clock's argument).
    pub(crate) fn op_call(&self, key: &SourceKey, params: &GateParams, op: GateOp) -> Result<OpCall, BackendError> {
        let (hash, param_args) = self.encode(key, params)?;
        // A fresh incarnation is drawn only for the operations that may create the gate.
        let fresh = if op.fence().is_none() { self.incarnations.draw() } else { 0 };
        Ok((hash, op_args(op, fresh), param_args))
    }

    /// Gates whose encoded arguments this handle keeps now (at most 4 096).
    pub fn encoded_len(&self) -> usize {
        self.encoded.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The connection, e.g. to read `degraded_records`.
    pub fn connection(&self) -> &Arc<RedisConnection> {
        &self.conn
    }

    /// Drops one gate's HASH, as a flush, a restart without persistence or an eviction would
    /// (for tests and tools): the next enter creates a gate of a new incarnation.
    pub async fn forget(&self, key: &SourceKey) -> Result<(), BackendError> {
        let hash = keys::gate(key)?;
        self.conn.pool().del::<i64, _>(hash).await.map(|_| ()).map_err(|e| unavailable(key, e))
    }

    /// The stored state of one gate (a missing HASH is a new, CLOSED gate).
    pub async fn snapshot(&self, key: &SourceKey) -> Result<Gate, BackendError> {
        let hash = keys::gate(key)?;
        let fields: HashMap<String, String> = self.conn.pool().hgetall(&hash).await.map_err(|e| unavailable(key, e))?;
        gate_from_fields(key, &fields)
    }
}

/// ARGV[5..] of `gate.lua`: the parameters, in the order of its constants `THRESHOLD..SLA_CAP`.
/// The one encoder of them.
fn param_args(p: &GateParams) -> Arc<[Value]> {
    let int = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    let (sla_floor, sla_cap) = p.sla_cooldown_ms().unwrap_or((0, 0));
    // `{}` on an f64 prints the shortest string that reads back as the same f64, as Lua's
    // tonumber does, so both sides compare against the same rates.
    let rate = |r: f64| Value::String(r.to_string().into());
    Arc::from([
        int(u64::from(p.threshold())),
        int(p.cooldown_ms()),
        int(p.max_cooldown_ms()),
        int(u64::from(p.min_calls())),
        rate(p.fail_rate()),
        int(p.bucket_ms()),
        int(u64::from(p.half_open_successes())),
        int(p.probe_ttl_ms()),
        int(p.key_ttl_ms()),
        p.slow_rate().map_or_else(|| Value::from_static_str("-"), rate),
        int(sla_floor),
        int(sla_cap),
    ])
}

/// ARGV[2..5] of `gate.lua`: the operation, the incarnation (a record's admission's, else the
/// one a gate not stored takes: `fresh`), the admission epoch of a record, and how a success
/// counts ('-' where an operation has none). The one encoder of them.
fn op_args(op: GateOp, fresh: u64) -> [Value; 4] {
    let (fence, kind) = match op {
        GateOp::TryEnter | GateOp::ForceOpen => (None, "-"),
        GateOp::Success { fence, kind } => (
            Some(fence),
            match kind {
                SuccessKind::Real => "real",
                SuccessKind::Slow => "slow",
                SuccessKind::Unusable => "unusable",
            },
        ),
        GateOp::Failure { fence } | GateOp::Release { fence } => (Some(fence), "-"),
    };
    let incarnation = Value::Integer(i64::try_from(fence.map_or(fresh, |f| f.incarnation)).unwrap_or(i64::MAX));
    let epoch = fence.map_or(Value::from_static_str("-"), |f| Value::Integer(i64::try_from(f.epoch).unwrap_or(i64::MAX)));
    [Value::from_static_str(op_name(op)), incarnation, epoch, Value::from_static_str(kind)]
}

/// The operation's name in `gate.lua` (and in the log of a dropped record).
pub(crate) fn op_name(op: GateOp) -> &'static str {
    match op {
        GateOp::TryEnter => "enter",
        GateOp::Success { .. } => "success",
        GateOp::Failure { .. } => "failure",
        GateOp::ForceOpen => "force_open",
        GateOp::Release { .. } => "release",
    }
}

fn state_from(key: &SourceKey, s: &str) -> Result<CircuitState, BackendError> {
    match s {
        "CLOSED" => Ok(CircuitState::Closed),
        "OPEN" => Ok(CircuitState::Open),
        "HALF_OPEN" => Ok(CircuitState::HalfOpen),
        other => Err(malformed(key, format!("unknown state {other:?}"))),
    }
}

fn cause_from(key: &SourceKey, s: &str) -> Result<Cause, BackendError> {
    Ok(match s {
        "rate_channel" => Cause::RateChannel,
        "consecutive_channel" => Cause::ConsecutiveChannel,
        "probe_failed" => Cause::ProbeFailed,
        "forced_open" => Cause::ForcedOpen,
        "cooldown_elapsed" => Cause::CooldownElapsed,
        "probe_succeeded" => Cause::ProbeSucceeded,
        "slow_channel" => Cause::SlowChannel,
        other => return Err(malformed(key, format!("unknown cause {other:?}"))),
    })
}

/// `"verdict state incarnation epoch retry_after_ms from to cause fenced"` (`-` for an empty
/// item) → the reply. The one decoder of it.
pub(crate) fn parse_reply(key: &SourceKey, value: Value) -> Result<Reply, BackendError> {
    let text = value.as_str().ok_or_else(|| malformed(key, format!("expected a reply string, got {value:?}")))?;
    let items: Vec<&str> = text.split(' ').collect();
    let [verdict, state, incarnation, epoch, retry_after_ms, from, to, cause, fenced] = items[..] else {
        return Err(malformed(key, format!("expected 9 reply items, got {text:?}")));
    };
    let int = |item: &str| item.parse::<u64>().map_err(|_| malformed(key, format!("{item:?} is not a count in {text:?}")));
    let verdict = match verdict {
        "allowed" => Some(Verdict::Allowed),
        "probe" => Some(Verdict::Probe),
        "denied" => Some(Verdict::Denied),
        "-" => None,
        other => return Err(malformed(key, format!("unknown verdict {other:?} in {text:?}"))),
    };
    let fenced = match fenced {
        "0" => false,
        "1" => true,
        other => return Err(malformed(key, format!("fenced is {other:?}, not 0 or 1, in {text:?}"))),
    };
    let transition = match from {
        "-" => None,
        from => Some(Transition { from: state_from(key, from)?, to: state_from(key, to)?, cause: cause_from(key, cause)? }),
    };
    Ok(Reply {
        verdict,
        state: state_from(key, state)?,
        incarnation: int(incarnation)?,
        epoch: int(epoch)?,
        retry_after: Duration::from_millis(int(retry_after_ms)?),
        transition,
        fenced,
    })
}

fn gate_from_fields(key: &SourceKey, fields: &HashMap<String, String>) -> Result<Gate, BackendError> {
    let num = |name: &str| -> Result<Option<u64>, BackendError> {
        match fields.get(name).map(String::as_str) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<u64>().map(Some).map_err(|_| malformed(key, format!("field {name} = {v:?} is not a count"))),
        }
    };
    let small = |name: &str| -> Result<u32, BackendError> { Ok(u32::try_from(num(name)?.unwrap_or(0)).unwrap_or(u32::MAX)) };
    Ok(Gate {
        state: fields.get("state").map_or(Ok(CircuitState::Closed), |s| state_from(key, s))?,
        incarnation: num("incarnation")?.unwrap_or(0),
        epoch: num("epoch")?.unwrap_or(0),
        open_until: Timestamp::from_millis(num("open_until")?.unwrap_or(0)),
        probe_until: num("probe_until")?.map(Timestamp::from_millis),
        failures: small("failures")?,
        win_id: num("win_id")?.unwrap_or(0),
        a0: small("a0")?,
        f0: small("f0")?,
        a1: small("a1")?,
        f1: small("f1")?,
        s0: small("s0")?,
        s1: small("s1")?,
        streak: small("streak")?,
        closed_since: num("closed_since")?.map(Timestamp::from_millis),
        probe_ok: small("probe_ok")?,
    })
}

#[async_trait]
impl BreakerGate for RedisGates {
    async fn apply(&self, key: &SourceKey, params: &GateParams, op: GateOp) -> Result<Reply, BackendError> {
        let (hash, op_args, param_args) = self.op_call(key, params, op)?;
        let args: [&[Value]; 3] = [&[self.conn.now_arg()], &op_args, &param_args];
        let result = match self.conn.run(&self.conn.scripts().gate, std::slice::from_ref(&hash), &args, key).await {
            Ok(value) => parse_reply(key, value),
            Err(error) => Err(error),
        };
        // A record Redis does not take is counted and logged; the call goes on.
        if let Err(error @ (BackendError::BackendUnavailable { .. } | BackendError::Malformed { .. })) = &result
            && op.is_record()
        {
            self.conn.degrade(op_name(op), error);
        }
        result
    }

    async fn read(&self, key: &SourceKey) -> Result<Gate, BackendError> {
        self.snapshot(key).await
    }

    async fn forget(&self, key: &SourceKey) -> Result<(), BackendError> {
        self.conn.command("DEL", &keys::gate(key)?, Vec::new()).await.map(drop)
    }

    async fn retry_after(&self, gates: &[(SourceKey, GateParams)]) -> Result<Duration, BackendError> {
        // One script per scope: keys of different scopes may live in different cluster slots.
        let mut best: Option<Duration> = None;
        let mut scopes: Vec<&str> = gates.iter().map(|(k, _)| &*k.scope).collect();
        scopes.sort_unstable();
        scopes.dedup();
        for scope in scopes {
            let mut hashes = Vec::new();
            let mut args = vec![self.conn.now_arg()];
            for (key, params) in gates.iter().filter(|(k, _)| &*k.scope == scope) {
                hashes.push(self.encode(key, params)?.0);
                args.push(Value::Integer(i64::try_from(params.max_cooldown_ms()).unwrap_or(i64::MAX)));
            }
            let value = self.conn.run(&self.conn.scripts().retry_after, &hashes, &[&args], &scope).await?;
            let ms = value.as_i64().ok_or_else(|| BackendError::Malformed {
                backend: "redis",
                key: scope.to_owned(),
                detail: format!("retry_after reply {value:?}"),
            })?;
            let wait = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
            best = Some(best.map_or(wait, |b| b.min(wait)));
        }
        Ok(best.unwrap_or(Duration::ZERO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::breaker::Fence;

    fn key() -> SourceKey {
        SourceKey::new("chat", "s1")
    }

    #[test]
    fn replies_decode_into_every_verdict_and_none() {
        let reply = |text: &'static str| parse_reply(&key(), Value::from_static_str(text));
        let allowed = reply("allowed CLOSED 18446744073709551615 0 0 - - - 0").unwrap();
        assert_eq!((allowed.verdict, allowed.incarnation), (Some(Verdict::Allowed), u64::MAX));
        assert_eq!(reply("probe HALF_OPEN 7 1 0 OPEN HALF_OPEN cooldown_elapsed 0").unwrap().verdict, Some(Verdict::Probe));
        let denied = reply("denied OPEN 7 1 5000 - - - 0").unwrap();
        assert_eq!((denied.verdict, denied.retry_after), (Some(Verdict::Denied), Duration::from_secs(5)));
        let fenced = reply("- CLOSED 0 2 0 - - - 1").unwrap();
        assert_eq!((fenced.verdict, fenced.fenced, fenced.incarnation), (None, true, 0));
    }

    #[test]
    fn a_reply_this_build_cannot_read_is_malformed_and_says_what() {
        for (text, says) in [
            ("maybe CLOSED 7 0 0 - - - 0", "unknown verdict \"maybe\""),
            ("allowed AJAR 7 0 0 - - - 0", "unknown state \"AJAR\""),
            ("- CLOSED 7 x 0 - - - 0", "\"x\" is not a count"),
            ("- CLOSED -7 0 0 - - - 0", "\"-7\" is not a count"),
            ("- CLOSED 7 0 0 - - - yes", "fenced is \"yes\""),
            ("- OPEN 7 1 0 CLOSED OPEN gremlins 0", "unknown cause \"gremlins\""),
            ("- CLOSED 7 0 0 - - - 0 0", "expected 9 reply items"),
        ] {
            let error = parse_reply(&key(), Value::from_static_str(text)).unwrap_err();
            assert!(matches!(error, BackendError::Malformed { .. }) && error.to_string().contains(says), "{text:?}: {error}");
        }
        assert!(matches!(parse_reply(&key(), Value::Integer(1)), Err(BackendError::Malformed { .. })));
    }

    #[test]
    fn every_operation_has_its_arguments() {
        let text = |op| op_args(op, 42).map(|v| v.as_string().unwrap_or_default());
        let fence = |epoch| Fence { incarnation: (1 << 63) - 1, epoch };
        assert_eq!(text(GateOp::TryEnter), ["enter", "42", "-", "-"]);
        assert_eq!(text(GateOp::Success { fence: fence(3), kind: SuccessKind::Slow }), ["success", "9223372036854775807", "3", "slow"]);
        assert_eq!(text(GateOp::Success { fence: fence(0), kind: SuccessKind::Unusable })[3], "unusable");
        assert_eq!(text(GateOp::Failure { fence: fence(7) }), ["failure", "9223372036854775807", "7", "-"]);
        assert_eq!(text(GateOp::ForceOpen), ["force_open", "42", "-", "-"]);
        assert_eq!(text(GateOp::Release { fence: fence(1) })[..3], ["release", "9223372036854775807", "1"]);
    }
}
