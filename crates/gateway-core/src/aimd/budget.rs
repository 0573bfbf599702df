//! The provider's rate budgets as the account keeps them (SPEC §4.5): the freshest report of
//! each (requests, tokens), refilled as a token bucket and drawn down by every lease granted
//! since it was counted, so that the account grants nothing the provider would certainly refuse.
//!
//! A report counted at a lease's grant says `remaining` of a budget that is full again after
//! `reset`. Its refill is what was used over that time, (`limit` − `remaining`) / `reset` per ms
//! (OpenAI and Anthropic refill continuously); without an advertised limit it refills nothing
//! before the reset. After the reset the budget no longer binds. What the account spent since
//! (one per lease for requests, the call's estimate for tokens) is drawn from it.

use crate::request::RateReport;
use crate::time::Timestamp;
use std::time::Duration;

/// What an advertised request limit lets the account's limit reach: this many times the
/// requests per round trip it allows (Little's law, with room for the round trip's spread).
pub const ADVERTISED_HEADROOM: f64 = 2.0;

/// One rate budget as last reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Budget {
    /// Left when it was counted.
    pub(crate) remaining: f64,
    /// Refilled per ms.
    pub(crate) refill: f64,
    /// The most it holds (the advertised limit, or `remaining` when none was advertised).
    pub(crate) full: f64,
    /// The advertised limit per minute, if any.
    pub(crate) limit: Option<u64>,
    /// The reporting lease's id (a later lease's report replaces it).
    pub(crate) by: u64,
    /// When it was counted: the reporting lease's grant.
    pub(crate) at: Timestamp,
    /// The account's spend counter then (the reporting lease included).
    pub(crate) spent: u64,
    /// Full again from this instant: it no longer binds.
    pub(crate) until: Timestamp,
}

impl Budget {
    /// `report`, counted at the grant of lease `by` at `at` when the account had spent `spent`.
    pub(crate) fn of(report: &RateReport, by: u64, at: Timestamp, spent: u64) -> Budget {
        let remaining = report.remaining as f64;
        let reset = report.reset.as_millis() as f64;
        let (full, refill) = match report.limit {
            Some(limit) if reset > 0.0 && (limit as f64) > remaining => (limit as f64, (limit as f64 - remaining) / reset),
            Some(limit) => ((limit as f64).max(remaining), 0.0),
            None => (remaining, 0.0),
        };
        let until = Timestamp::from_millis(at.as_millis().saturating_add(u64::try_from(report.reset.as_millis()).unwrap_or(u64::MAX)));
        Budget { remaining, refill, full, limit: report.limit, by, at, spent, until }
    }

    /// What is left at `now` when the account has spent `spent` in all (infinite past the reset).
    pub(crate) fn left(&self, now: Timestamp, spent: u64) -> f64 {
        if now >= self.until {
            return f64::INFINITY;
        }
        let elapsed = now.saturating_since(self.at).as_millis() as f64;
        (self.remaining + self.refill * elapsed).min(self.full) - spent.saturating_sub(self.spent) as f64
    }

    /// When `need` is left again, if less is left at `now` (the account having spent `spent` in
    /// all): the refill's first whole millisecond that covers it, or the reset when the refill
    /// cannot (none, or more than the budget holds).
    pub(crate) fn ready_at(&self, now: Timestamp, spent: u64, need: f64) -> Option<Timestamp> {
        let short = need - self.left(now, spent);
        if short <= 0.0 {
            return None;
        }
        let drawn = spent.saturating_sub(self.spent) as f64;
        if self.refill > 0.0 && need + drawn <= self.full {
            let refilled = now.saturating_add(Duration::from_millis((short / self.refill).ceil() as u64));
            return Some(refilled.min(self.until));
        }
        Some(self.until)
    }
}

/// Replaces `slot` by `report` when it comes from a later lease than the one kept.
pub(crate) fn keep_freshest(slot: &mut Option<Budget>, report: Option<&RateReport>, by: u64, at: Timestamp, spent: u64) {
    if let Some(report) = report
        && slot.is_none_or(|kept| by > kept.by)
    {
        *slot = Some(Budget::of(report, by, at, spent));
    }
}
