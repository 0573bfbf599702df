//! The reference's JSON answers as it prints them (`JSON.stringify`): its field names, in its
//! order (the derived `Serialize` of [`BudgetPlan`], [`WorstCase`] and [`BreakerTrace`] writes the
//! fields in their declared order), and its numbers ([`js_number`]).

use crate::{BreakerTrace, BudgetPlan, WorstCase};
use serde::{Serialize, Serializer};

/// The answer to `plan`: `{"plan": …, "worstCase": …}`.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanAnswer<'a> {
    /// The plan.
    pub plan: &'a BudgetPlan,
    /// Its tail bound.
    pub worst_case: &'a WorstCase,
}

/// The plan and worst case in the reference's JSON shape (an infinite cost is `null`).
pub fn plan_to_json(plan: &BudgetPlan, worst: &WorstCase) -> String {
    write(&PlanAnswer { plan, worst_case: worst })
}

/// A trace in the reference's JSON shape.
pub fn trace_to_json(trace: &BreakerTrace) -> String {
    write(trace)
}

fn write(answer: &impl Serialize) -> String {
    // serde_json fails only on a map whose keys are not strings or on a Serialize impl that
    // fails; the answers have neither.
    serde_json::to_string(answer).unwrap_or_else(|e| unreachable!("a budget answer always serialises: {e}"))
}

/// A number as JavaScript prints it: a whole one without a fraction (`2`, where serde_json
/// prints `2.0`), any other in shortest form, a non-finite one as `null`.
pub(crate) fn js_number<S: Serializer>(x: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    if x.fract() == 0.0 && x.abs() < 9.0e15 { serializer.serialize_i64(*x as i64) } else { serializer.serialize_f64(*x) }
}

/// [`js_number`], and `null` for none.
pub(crate) fn js_number_or_null<S: Serializer>(x: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(x) => js_number(x, serializer),
        None => serializer.serialize_none(),
    }
}
