//! The rate-limit headers of an answer (SPEC §4.5), read into the account's [`RateSignal`]:
//! - OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, resets as Go durations
//!   (`1s`, `6m0s`, `12ms`, `1h2m3.5s`);
//! - Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`,
//!   resets as RFC 3339 times (read against the wall clock); of its token budgets, the one with
//!   the fewest left.
//!
//! A value that cannot be believed (not a number, negative, more left than the limit, a limit
//! of zero, a count past [`MAX_COUNT`], a reset past [`MAX_RESET`]) is ignored with the budget
//! it belongs to, and counted; nothing here panics.

use gateway_core::request::{RateReport, RateSignal};
use gateway_core::time::WallClock;
use reqwest::header::{HeaderMap, HeaderName};
use std::time::Duration;

/// The longest reset believed: a day (as for Retry-After).
pub const MAX_RESET: Duration = crate::classify::MAX_RETRY_AFTER;

/// The largest count believed (requests or tokens per minute).
pub const MAX_COUNT: u64 = 1_000_000_000_000;

/// What an answer's rate-limit headers said, and how many of their values were not believed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateRead {
    /// The signal, when a budget was reported and believed.
    pub signal: Option<RateSignal>,
    /// Values that could not be believed.
    pub unreadable: u32,
}

/// Reads `headers` (Anthropic resets against `wall`).
pub fn read(headers: &HeaderMap, wall: &dyn WallClock) -> RateRead {
    // Most answers carry none (relays, self-hosted models): one pass over the names, not a
    // lookup of each of the eighteen.
    let rated = |name: &HeaderName| name.as_str().starts_with("x-ratelimit-") || name.as_str().starts_with("anthropic-ratelimit-");
    if !headers.keys().any(rated) {
        return RateRead::default();
    }
    read_with(|name| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}")), wall)
}

/// One budget's header names: limit, remaining, reset.
type Names = [&'static str; 3];

const OPENAI_REQUESTS: Names = ["x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"];
const OPENAI_TOKENS: Names = ["x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"];
const ANTHROPIC_REQUESTS: Names =
    ["anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"];
const ANTHROPIC_TOKENS: [Names; 3] = [
    ["anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset"],
    ["anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset"],
    ["anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset"],
];

/// Reads the headers `header` looks up by (lower-case) name. The names are constants: an
/// answer's head is read on every attempt, without building a string.
pub fn read_with<'a>(header: impl Fn(&str) -> Option<&'a str>, wall: &dyn WallClock) -> RateRead {
    let mut unreadable = 0;
    let mut count = |read: Result<Option<RateReport>, ()>| {
        unreadable += u32::from(read.is_err());
        read.ok().flatten()
    };
    let openai =
        |[limit, remaining, reset]: Names| believe(header(limit), header(remaining), header(reset).map(|text| go_duration(text).ok_or(())));
    let now = wall.unix_now();
    let anthropic = |[limit, remaining, reset]: Names| believe(header(limit), header(remaining), header(reset).map(|at| until(at, now)));
    let requests = count(openai(OPENAI_REQUESTS)).or_else(|| count(anthropic(ANTHROPIC_REQUESTS)));
    let tokens = count(openai(OPENAI_TOKENS)).or_else(|| {
        let budgets = ANTHROPIC_TOKENS.map(|names| count(anthropic(names)));
        budgets.into_iter().flatten().min_by_key(|r| (r.remaining, std::cmp::Reverse(r.reset)))
    });
    let signal = RateSignal { requests, tokens };
    RateRead { signal: (!signal.is_empty()).then_some(signal), unreadable }
}

/// One budget: absent (`Ok(None)`) without a remaining count, unbelievable (`Err`) when any of
/// its values is.
fn believe(limit: Option<&str>, remaining: Option<&str>, reset: Option<Result<Duration, ()>>) -> Result<Option<RateReport>, ()> {
    let count = |text: &str| text.trim().parse::<u64>().ok().filter(|n| *n <= MAX_COUNT).ok_or(());
    let limit = limit.map(count).transpose()?;
    let reset = reset.transpose()?;
    let Some(remaining) = remaining else { return Ok(None) };
    let remaining = count(remaining)?;
    if limit.is_some_and(|limit| limit == 0 || remaining > limit) {
        return Err(());
    }
    Ok(Some(RateReport { limit, remaining, reset: reset.unwrap_or(Duration::ZERO) }))
}

/// A Go duration (`1h2m3.5s`, `6m0s`, `12ms`, `250us`, `0s`) of at most [`MAX_RESET`].
pub fn go_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let mut rest = text;
    let mut total = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let seconds = match &rest[..unit] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" | "μs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit..];
        total += value * seconds;
    }
    Duration::try_from_secs_f64(total).ok().filter(|d| *d <= MAX_RESET)
}

/// `d` as a Go duration, as OpenAI writes its resets (`12ms`, `1s`, `6m0s`, `1m2.5s`): whole
/// milliseconds, read back exactly by [`go_duration`].
pub fn go_duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (minutes, rest_ms) = (ms / 60_000, ms % 60_000);
    let seconds = format!("{}", rest_ms as f64 / 1000.0);
    if minutes > 0 { format!("{minutes}m{seconds}s") } else { format!("{seconds}s") }
}

/// The time from `now` (since the Unix epoch) to the RFC 3339 instant `at`: zero when it is past.
fn until(at: &str, now: Duration) -> Result<Duration, ()> {
    let at = chrono::DateTime::parse_from_rfc3339(at.trim()).map_err(|_| ())?;
    let at_ms = at.timestamp_millis();
    let now_ms = i64::try_from(now.as_millis()).map_err(|_| ())?;
    let wait = Duration::from_millis(u64::try_from(at_ms.saturating_sub(now_ms)).unwrap_or(0));
    if wait > MAX_RESET { Err(()) } else { Ok(wait) }
}

#[cfg(test)]
mod tests;
