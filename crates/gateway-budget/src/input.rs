//! The reference's JSON inputs (`cargo xtask budget plan|trace`), read with its field names and
//! validated with its messages: the first field at fault, in the reference's order, named as it
//! names it (`nodes[0].id is missing`, `a.latencyMs must be a number`). Unknown fields are
//! ignored.
//!
//! The text is read into a `serde_json::Value` first, as `JSON.parse` reads it: of a repeated
//! key the last wins, and every number is range-checked wherever it is. (A derived struct read
//! from the text would refuse a repeated key, skip an unknown field's numbers unchecked and take
//! an array as a struct, by position.) The `Value` is then read into the raw structs below, whose
//! fields are [`Slot`]s: a slot takes any JSON value and notes whether it was missing or of
//! another kind, so that the checks after it, not serde, give each message.

use crate::plan::{BudgetPolicy, RetryNode, Threshold, validate_nodes, validate_policy};
use crate::{BudgetError, fail};
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor, value::MapAccessDeserializer};
use serde_json::Value;
use std::marker::PhantomData;

/// `{"nodes": [...], "policy": {...}}` with the reference's field names and rules.
pub fn plan_input_from_json(text: &str) -> Result<(Vec<RetryNode>, BudgetPolicy), BudgetError> {
    let raw: RawPlan = read(text)?;
    let nodes = raw.nodes.get("nodes", "must be an array")?;
    let nodes = nodes.into_iter().enumerate().map(|(i, node)| node_from(i, node)).collect::<Result<Vec<_>, _>>()?;
    validate_nodes(&nodes)?;
    let policy = policy_from(raw.policy.fields("policy")?)?;
    validate_policy(&policy)?;
    Ok((nodes, policy))
}

/// What `trace` reads: the breaker's options and the call script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceInput {
    /// Consecutive failures that open the breaker (`"Infinity"` is read, and the breaker refuses it).
    pub failure_threshold: Threshold,
    /// Calls an open breaker rejects before it lets a probe through.
    pub half_open_after_calls: u32,
    /// Whether each call would succeed if it were let through.
    pub calls: Vec<bool>,
}

/// `{"breaker": {"failureThreshold", "halfOpenAfterCalls"}, "calls": [bool…]}`.
pub fn trace_input_from_json(text: &str) -> Result<TraceInput, BudgetError> {
    let raw: RawTrace = read(text)?;
    let breaker = raw.breaker.fields("breaker")?;
    let failure_threshold = threshold(breaker.failure_threshold, "failureThreshold", "must be an integer >= 1")?;
    let half_open_after_calls = small(breaker.half_open_after_calls, "halfOpenAfterCalls", 1)?;
    let calls = raw.calls.get("calls", "must be an array")?;
    let calls = calls.into_iter().enumerate().map(|(i, call)| call.get(&format!("calls[{i}]"), "must be true or false"));
    Ok(TraceInput { failure_threshold, half_open_after_calls, calls: calls.collect::<Result<_, _>>()? })
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawPlan {
    nodes: Slot<Vec<Slot<Fields<RawNode>>>>,
    policy: Slot<Fields<RawPolicy>>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawNode {
    id: Slot<String>,
    failure_rate: Slot<f64>,
    attempt_cost_micros: Slot<f64>,
    latency_ms: Slot<f64>,
    max_retries: Slot<f64>,
    required: Slot<bool>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawPolicy {
    global_retry_budget: Slot<f64>,
    consecutive_failure_threshold: Slot<RawThreshold>,
    half_open_after_calls: Slot<f64>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawTrace {
    breaker: Slot<Fields<RawBreaker>>,
    calls: Slot<Vec<Slot<bool>>>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RawBreaker {
    failure_threshold: Slot<RawThreshold>,
    half_open_after_calls: Slot<f64>,
}

/// A threshold as written: a number, or a name (`"Infinity"` is the one the planner takes).
#[derive(Deserialize)]
#[serde(untagged)]
enum RawThreshold {
    Count(f64),
    Name(String),
}

/// A field as the input holds it: absent, of another kind than wanted, or a `T`. It takes any
/// JSON value, so reading one never fails; a JSON number is a `T` of `f64` whatever its form
/// (`2`, `2.0`, `2e0`), as the reference reads it.
#[derive(Default)]
enum Slot<T> {
    #[default]
    Missing,
    Other,
    Is(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Slot<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Loose<T> {
            Is(T),
            Other(IgnoredAny),
        }
        Ok(match Loose::deserialize(deserializer)? {
            Loose::Is(value) => Slot::Is(value),
            Loose::Other(_) => Slot::Other,
        })
    }
}

impl<T> Slot<T> {
    /// The value, or that `field` is missing, or that it breaks `rule` (it is of another kind).
    fn get(self, field: &str, rule: &str) -> Result<T, BudgetError> {
        match self {
            Slot::Is(value) => Ok(value),
            Slot::Missing => fail(field, "is missing"),
            Slot::Other => fail(field, rule),
        }
    }
}

impl<T: Default> Slot<Fields<T>> {
    /// The fields of an object, or that `field` is missing. A value of another kind has no
    /// fields, so each of them is missing.
    fn fields(self, field: &str) -> Result<T, BudgetError> {
        match self {
            Slot::Is(Fields(fields)) => Ok(fields),
            Slot::Other => Ok(T::default()),
            Slot::Missing => fail(field, "is missing"),
        }
    }
}

/// The fields of a JSON object, read by `T`'s derived `Deserialize`; anything but an object is
/// refused (so that a [`Slot`] notes it as of another kind).
struct Fields<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Fields<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Object<T> {
            type Value = T;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(Object(PhantomData)).map(Fields)
    }
}

/// The raw fields of the input `text`; an input that is not an object has none.
fn read<T: Default + for<'de> Deserialize<'de>>(text: &str) -> Result<T, BudgetError> {
    let value: Value = serde_json::from_str(text).or_else(|e| fail("input", format!("is not JSON: {e}")))?;
    // Cannot fail: a slot takes any value, and a Value holds no repeated key.
    let input = Slot::<Fields<T>>::deserialize(&value).or_else(|e| fail("input", format!("cannot be read: {e}")))?;
    input.fields("input")
}

fn node_from(i: usize, raw: Slot<Fields<RawNode>>) -> Result<RetryNode, BudgetError> {
    let raw = raw.fields(&format!("nodes[{i}]"))?;
    let id = raw.id.get(&format!("nodes[{i}].id"), "must be a string")?;
    let at = |name: &str| format!("{id}.{name}");
    let failure_rate = number(raw.failure_rate, &at("failureRate"))?;
    let attempt_cost_micros = integer(raw.attempt_cost_micros, &at("attemptCostMicros"), 0)?;
    let latency_ms = number(raw.latency_ms, &at("latencyMs"))?;
    let max_retries = small(raw.max_retries, &at("maxRetries"), 0)?;
    let required = raw.required.get(&at("required"), "must be true or false")?;
    Ok(RetryNode { id, failure_rate, attempt_cost_micros, latency_ms, max_retries, required })
}

fn policy_from(raw: RawPolicy) -> Result<BudgetPolicy, BudgetError> {
    Ok(BudgetPolicy {
        global_retry_budget: small(raw.global_retry_budget, "globalRetryBudget", 0)?,
        consecutive_failure_threshold: threshold(
            raw.consecutive_failure_threshold,
            "consecutiveFailureThreshold",
            "must be an integer >= 1 or Infinity",
        )?,
        half_open_after_calls: small(raw.half_open_after_calls, "halfOpenAfterCalls", 1)?,
    })
}

fn number(slot: Slot<f64>, field: &str) -> Result<f64, BudgetError> {
    slot.get(field, "must be a number")
}

/// An integer ≥ `min`, as the reference's `integer()` checks it.
fn integer(slot: Slot<f64>, field: &str, min: u64) -> Result<u64, BudgetError> {
    let n = number(slot, field)?;
    if n.fract() != 0.0 || n < min as f64 || n > 9.0e15 {
        return fail(field, format!("must be an integer >= {min}"));
    }
    Ok(n as u64)
}

fn small(slot: Slot<f64>, field: &str, min: u64) -> Result<u32, BudgetError> {
    u32::try_from(integer(slot, field, min)?).or_else(|_| fail(field, "is too large"))
}

fn threshold(slot: Slot<RawThreshold>, field: &str, rule: &str) -> Result<Threshold, BudgetError> {
    match slot.get(field, rule)? {
        RawThreshold::Name(name) if name == "Infinity" => Ok(Threshold::Infinite),
        RawThreshold::Count(n) => small(Slot::Is(n), field, 1).map(Threshold::Finite).or_else(|_| fail(field, rule)),
        RawThreshold::Name(_) => fail(field, rule),
    }
}
