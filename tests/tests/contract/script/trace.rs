//! How a trace shows a reply and a gate's stored state, one line each.

use crate::support::START;
use gateway_core::breaker::{Gate, GateParams, Reply};
use gateway_core::time::Timestamp;
use std::fmt::Write;

/// One reply: `verdict state <incarnation> e<epoch> [retry <ms>ms] [from→to cause] [fenced]`.
pub(super) fn reply(r: &Reply, incarnation: &str) -> String {
    let mut out = match r.verdict {
        Some(v) => format!("{v:?} ").to_lowercase(),
        None => String::new(),
    };
    let _ = write!(out, "{} {incarnation} e{}", r.state, r.epoch);
    if !r.retry_after.is_zero() {
        let _ = write!(out, " retry {}ms", r.retry_after.as_millis());
    }
    if let Some(t) = r.transition {
        let _ = write!(out, " {}→{} {:?}", t.from, t.to, t.cause);
    }
    if r.fenced {
        out.push_str(" fenced");
    }
    out
}

/// A gate's stored state, times as offsets from the suite's start and the window id as buckets
/// since it.
pub(super) fn show(g: &Gate, p: &GateParams, incarnation: &str) -> String {
    let at = |t: Timestamp| format!("+{}ms", t.as_millis().saturating_sub(START.as_millis()));
    let opt = |t: Option<Timestamp>| t.map_or_else(|| "-".to_owned(), at);
    let win = g.win_id.saturating_sub(START.as_millis() / p.bucket_ms());
    format!(
        "{} {incarnation} e{} open_until {} probe_until {} failures {} window {win}:[{} {} {} | {} {} {}] streak {} closed_since {} probe_ok {}",
        g.state,
        g.epoch,
        if g.open_until == Timestamp::default() { "-".to_owned() } else { at(g.open_until) },
        opt(g.probe_until),
        g.failures,
        g.a0,
        g.f0,
        g.s0,
        g.a1,
        g.f1,
        g.s1,
        g.streak,
        opt(g.closed_since),
        g.probe_ok
    )
}
