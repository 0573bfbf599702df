//! How every way an OpenAI-compatible endpoint can answer — or not answer — maps onto an
//! outcome class, in one place. Each row has its own test (`tests/classification.rs`).
//!
//! | what happened | class | detail |
//! |---|---|---|
//! | 2xx with content | Success | `http_200` |
//! | 2xx with empty content or no choices / data | Transient | `empty` |
//! | 2xx with a body that is not the expected JSON, cut short, or too large | Transient | `malformed_json`, `truncated`, `body_too_large` |
//! | stream without `[DONE]`, malformed chunk, watchdog | Transient | `truncated_stream`, `malformed_sse`, `watchdog` |
//! | 429 with code `insufficient_quota` | SourceDead | `insufficient_quota` |
//! | 429 | RateLimited (+ Retry-After) | `http_429` |
//! | 401, 403, 402; error code `insufficient_quota`, `invalid_api_key`, `account_deactivated`, `billing_hard_limit_reached` (any status) | SourceDead | `http_401` …, or the code |
//! | 404 or error code `model_not_found`, at a source that serves one kind of call | SourceDead (its own model is gone) | `http_404`, `model_not_found` |
//! | 404 or error code `model_not_found`, at a source that serves several kinds | RequestRejected (the request chose an endpoint its model lacks) | `http_404`, `model_not_found` |
//! | error code `context_length_exceeded` or `previous_response_not_found` (any status, an error inside a 2xx or a stream too) | RequestRejected | the code |
//! | 404 on a stored object's route (`GET responses/{id}`…): the id the caller chose | RequestRejected | `http_404` |
//! | 2xx Responses answer with `status: "failed"` (whole, or `response.failed` in a stream) | Transient; RequestRejected for a code the request caused (`invalid_prompt`, `invalid_image…`); RateLimited for `rate_limit_exceeded` | `response_failed:<code>` |
//! | Anthropic's `error.type` (any status, an `error` event too): `overloaded_error` (529), `api_error` | Transient | the type |
//! | `rate_limit_error` | RateLimited (+ Retry-After) | `rate_limit_error` |
//! | `authentication_error`, `permission_error`, `billing_error` | SourceDead | the type |
//! | `invalid_request_error`, `request_too_large` | RequestRejected | the type |
//! | `not_found_error` | as a 404 | `not_found_error` |
//! | 400, 413, 422 | RequestRejected | `http_400` … |
//! | 408, 5xx, any other status | Transient | `http_503` … |
//! | timeout (header or total), connect refused, reset | Transient | `timeout`, `header_timeout`, `connect`, `reset` |
//!
//! Nothing a request causes reaches the breaker (SPEC §2): a rejected payload, an overlong
//! context, or a 404 for an endpoint the request chose is `RequestRejected`. A 404 blames the
//! source only where the request could not have chosen otherwise: the source serves a single
//! kind (its scopes' `kinds`), so every request it gets is one its model must serve.

use gateway_core::outcome::OutcomeClass;
use gateway_core::request::{Kind, Protocol};
use gateway_core::time::WallClock;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Error codes (OpenAI's `error.code` / `error.type`) that say the source cannot serve anyone.
const DEAD_CODES: &[&str] = &["insufficient_quota", "invalid_api_key", "account_deactivated", "billing_hard_limit_reached"];

/// Whom a 404 (or the error code `model_not_found`) blames, from the kinds the source serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotFound {
    /// The source serves one kind of call: its model is gone (`SourceDead`).
    Source,
    /// The source serves several kinds: the request may have chosen one its model lacks
    /// (`RequestRejected`, which never reaches the breaker).
    Request,
}

impl NotFound {
    /// The blame at a source serving `kinds`.
    pub fn for_kinds(kinds: &[Kind]) -> Self {
        if kinds.len() == 1 { NotFound::Source } else { NotFound::Request }
    }

    const fn class(self) -> OutcomeClass {
        match self {
            NotFound::Source => OutcomeClass::SourceDead,
            NotFound::Request => OutcomeClass::RequestRejected,
        }
    }
}

/// The class an error code decides whatever the status, if it decides one.
pub fn classify_code(error_code: &str, not_found: NotFound, protocol: Protocol) -> Option<OutcomeClass> {
    if protocol == Protocol::Anthropic {
        // Anthropic's error types (OpenAI's own `type`s overlap them, with other meanings).
        return match error_code {
            "not_found_error" => Some(not_found.class()),
            code => gateway_core::messages::error_class(code),
        };
    }
    match error_code {
        code if DEAD_CODES.contains(&code) => Some(OutcomeClass::SourceDead),
        "model_not_found" => Some(not_found.class()),
        // The request continued a response (or a conversation) this source does not hold.
        "context_length_exceeded" | "previous_response_not_found" => Some(OutcomeClass::RequestRejected),
        _ => None,
    }
}

/// The class and detail of a non-success HTTP status, given the error code of its body (if the
/// body carried one) and whom a 404 blames at this source.
pub fn classify_status(status: StatusCode, error_code: Option<&str>, not_found: NotFound, protocol: Protocol) -> (OutcomeClass, String) {
    let code = status.as_u16();
    if let Some(error_code) = error_code {
        // The code is the provider's own word on the cause, whatever status carries it (a relay
        // may wrap an overlong context in a 500): nothing the request caused reaches the breaker.
        if let Some(class) = classify_code(error_code, not_found, protocol) {
            return (class, error_code.to_owned());
        }
    }
    let class = match code {
        429 => OutcomeClass::RateLimited,
        401..=403 => OutcomeClass::SourceDead,
        404 => not_found.class(),
        400 | 413 | 422 => OutcomeClass::RequestRejected,
        _ => OutcomeClass::Transient,
    };
    (class, format!("http_{code}"))
}

/// The class and detail of a request that got no usable response.
pub fn classify_transport(error: &reqwest::Error) -> (OutcomeClass, &'static str) {
    let detail = if error.is_timeout() {
        "timeout"
    } else if error.is_connect() {
        "connect"
    } else if error.is_body() || error.is_decode() {
        "truncated"
    } else {
        "reset"
    };
    (OutcomeClass::Transient, detail)
}

/// The class and detail of a request on a source's pooled client (`wire::Direct`) that got no
/// response, in [`classify_transport`]'s words: a connect that timed out (the chain holds an
/// I/O `TimedOut`) is a `timeout`, as reqwest says it.
pub(crate) fn classify_pooled_transport(error: &(dyn std::error::Error + 'static)) -> (OutcomeClass, &'static str) {
    let detail =
        if error_chain(error).any(|e| e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)) {
            "timeout"
        } else if error.downcast_ref::<hyper_util::client::legacy::Error>().is_some_and(hyper_util::client::legacy::Error::is_connect) {
            "connect"
        } else {
            "reset"
        };
    (OutcomeClass::Transient, detail)
}

/// The errors of the chain from `error` down, `error` first.
pub(crate) fn error_chain<'e>(error: &'e (dyn std::error::Error + 'static)) -> impl Iterator<Item = &'e (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |e| e.source())
}

/// Provider headers the adapter could not believe, counted (a proxy shows them in `/metrics`).
#[derive(Debug, Default)]
pub struct IgnoredHeaders {
    retry_after: AtomicU64,
    rate_limit: AtomicU64,
}

impl IgnoredHeaders {
    /// `Retry-After` (or `retry-after-ms`) values that were [`RetryAfter::Unreadable`].
    pub fn retry_after(&self) -> u64 {
        self.retry_after.load(Ordering::Relaxed)
    }

    /// Rate-limit header values that could not be believed (`crate::ratelimit`).
    pub fn rate_limit(&self) -> u64 {
        self.rate_limit.load(Ordering::Relaxed)
    }

    /// Reads an answer's rate-limit headers, counting the values not believed.
    pub(crate) fn rate(&self, headers: &HeaderMap, wall: &dyn WallClock) -> Option<gateway_core::request::RateSignal> {
        let read = crate::ratelimit::read(headers, wall);
        self.rate_limit.fetch_add(u64::from(read.unreadable), Ordering::Relaxed);
        read.signal
    }

    /// Counts `read` if it was unreadable; the wait it gives.
    pub(crate) fn note(&self, read: RetryAfter) -> Option<Duration> {
        if read == RetryAfter::Unreadable {
            self.retry_after.fetch_add(1, Ordering::Relaxed);
        }
        read.wait()
    }
}

/// The longest Retry-After taken at its word: a day. A provider asking for longer (or for a
/// negative, non-finite or unparseable wait) is not believed: its value is unreadable.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// What a 429 says of when to come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// Nothing (or an HTTP-date already past): the normal back-off.
    Absent,
    /// This long.
    After(Duration),
    /// A value that cannot be read or is absurd (`garbage`, `-1`, `1e300`, more than
    /// [`MAX_RETRY_AFTER`]): treated as absent, and counted.
    Unreadable,
}

impl RetryAfter {
    /// The wait, if one was given that can be believed.
    pub fn wait(self) -> Option<Duration> {
        match self {
            RetryAfter::After(wait) => Some(wait),
            RetryAfter::Absent | RetryAfter::Unreadable => None,
        }
    }
}

/// A 429's Retry-After: `retry-after-ms` (milliseconds), else `retry-after` as seconds or as an
/// HTTP-date (read against the wall clock).
pub fn retry_after(headers: &HeaderMap, wall: &dyn WallClock) -> RetryAfter {
    let header = |name: &str| headers.get(name).map(|v| v.to_str().map(str::trim));
    // A count of `per_second` units, believed when it is a wait of at most a day.
    let wait = |n: f64, per_second: f64| {
        let wait = (n.is_finite() && n >= 0.0).then(|| Duration::try_from_secs_f64(n / per_second).ok()).flatten();
        wait.filter(|d| *d <= MAX_RETRY_AFTER).map_or(RetryAfter::Unreadable, RetryAfter::After)
    };
    if let Some(ms) = header("retry-after-ms") {
        return ms.ok().and_then(|ms| ms.parse::<f64>().ok()).map_or(RetryAfter::Unreadable, |n| wait(n, 1000.0));
    }
    let Some(value) = header("retry-after") else { return RetryAfter::Absent };
    let Ok(value) = value else { return RetryAfter::Unreadable };
    if let Ok(seconds) = value.parse::<f64>() {
        return wait(seconds, 1.0);
    }
    let Some(at) = httpdate::parse_http_date(value).ok().and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok()) else {
        return RetryAfter::Unreadable;
    };
    match at.checked_sub(wall.unix_now()) {
        None => RetryAfter::Absent,
        Some(wait) if wait <= MAX_RETRY_AFTER => RetryAfter::After(wait),
        Some(_) => RetryAfter::Unreadable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn a_pooled_request_without_a_response_is_named_as_reqwest_names_it() {
        let timed_out = std::io::Error::new(std::io::ErrorKind::TimedOut, "connecting took too long");
        assert_eq!(classify_pooled_transport(&timed_out), (OutcomeClass::Transient, "timeout"));
        assert_eq!(classify_pooled_transport(&std::io::Error::other("reset by peer")), (OutcomeClass::Transient, "reset"));
    }

    struct At(u64);

    impl WallClock for At {
        fn unix_now(&self) -> Duration {
            Duration::from_secs(self.0)
        }
    }

    #[test]
    fn the_status_table() {
        let rows: &[(u16, Option<&str>, OutcomeClass, &str)] = &[
            (429, None, OutcomeClass::RateLimited, "http_429"),
            (429, Some("insufficient_quota"), OutcomeClass::SourceDead, "insufficient_quota"),
            (401, None, OutcomeClass::SourceDead, "http_401"),
            (402, None, OutcomeClass::SourceDead, "http_402"),
            (403, None, OutcomeClass::SourceDead, "http_403"),
            (404, Some("model_not_found"), OutcomeClass::RequestRejected, "model_not_found"),
            (404, None, OutcomeClass::RequestRejected, "http_404"),
            (400, Some("model_not_found"), OutcomeClass::RequestRejected, "model_not_found"),
            (400, Some("context_length_exceeded"), OutcomeClass::RequestRejected, "context_length_exceeded"),
            (400, None, OutcomeClass::RequestRejected, "http_400"),
            (413, None, OutcomeClass::RequestRejected, "http_413"),
            (422, None, OutcomeClass::RequestRejected, "http_422"),
            (408, None, OutcomeClass::Transient, "http_408"),
            (409, None, OutcomeClass::Transient, "http_409"),
            (500, Some("context_length_exceeded"), OutcomeClass::RequestRejected, "context_length_exceeded"),
            (503, None, OutcomeClass::Transient, "http_503"),
        ];
        for &(code, error, class, detail) in rows {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            assert_eq!(classify_status(status, error, NotFound::Request, Protocol::OpenAi), (class, detail.to_owned()), "{code} {error:?}");
        }
    }

    #[test]
    fn a_404_blames_the_source_only_when_it_serves_one_kind() {
        assert_eq!(NotFound::for_kinds(&[Kind::Chat]), NotFound::Source);
        assert_eq!(NotFound::for_kinds(&Kind::ALL), NotFound::Request);
        for (status, code) in [(404, None), (404, Some("model_not_found")), (400, Some("model_not_found"))] {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::NOT_FOUND);
            assert_eq!(classify_status(status, code, NotFound::Source, Protocol::OpenAi).0, OutcomeClass::SourceDead, "{status} {code:?}");
            assert_eq!(
                classify_status(status, code, NotFound::Request, Protocol::OpenAi).0,
                OutcomeClass::RequestRejected,
                "{status} {code:?}"
            );
        }
        assert_eq!(classify_code("context_length_exceeded", NotFound::Source, Protocol::OpenAi), Some(OutcomeClass::RequestRejected));
        assert_eq!(classify_code("previous_response_not_found", NotFound::Source, Protocol::OpenAi), Some(OutcomeClass::RequestRejected));
        assert_eq!(classify_code("invalid_api_key", NotFound::Request, Protocol::OpenAi), Some(OutcomeClass::SourceDead));
        assert_eq!(classify_code("server_error", NotFound::Request, Protocol::OpenAi), None);
        // Anthropic's types decide at an Anthropic source only: OpenAI's `type` of a refused
        // key is `invalid_request_error` too, and its status decides there.
        assert_eq!(classify_code("invalid_request_error", NotFound::Request, Protocol::OpenAi), None);
        let anthropic = |code| {
            classify_status(StatusCode::from_u16(529).unwrap_or(StatusCode::OK), Some(code), NotFound::Source, Protocol::Anthropic).0
        };
        assert_eq!(anthropic("overloaded_error"), OutcomeClass::Transient);
        assert_eq!(anthropic("rate_limit_error"), OutcomeClass::RateLimited);
        assert_eq!(anthropic("authentication_error"), OutcomeClass::SourceDead);
        assert_eq!(anthropic("invalid_request_error"), OutcomeClass::RequestRejected);
        assert_eq!(anthropic("not_found_error"), OutcomeClass::SourceDead);
        assert_eq!(anthropic("something_new"), OutcomeClass::Transient);
    }

    #[test]
    fn retry_after_formats_and_junk() {
        use RetryAfter::{Absent, After, Unreadable};
        let wall = At(1_445_412_480); // 2015-10-21T07:28:00Z
        let read = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, HeaderValue::from_static(value));
            }
            retry_after(&headers, &wall)
        };
        assert_eq!(read(&[]), Absent);
        assert_eq!(read(&[("retry-after", "2.5")]), After(Duration::from_millis(2500)));
        assert_eq!(read(&[("retry-after", "86400")]), After(MAX_RETRY_AFTER), "a day is believed");
        assert_eq!(read(&[("retry-after", "Wed, 21 Oct 2015 07:29:00 GMT")]), After(Duration::from_secs(60)));
        assert_eq!(read(&[("retry-after", "Wed, 21 Oct 2015 07:27:00 GMT")]), Absent, "a date in the past");
        for junk in ["soon", "garbage", "-3", "1e300", "NaN", "inf", "86401", "99999999999", "Wed, 21 Oct 2035 07:28:00 GMT"] {
            assert_eq!(read(&[("retry-after", junk)]), Unreadable, "{junk}: absent, counted, no panic");
        }
        assert_eq!(read(&[("retry-after", "2.5"), ("retry-after-ms", "250")]), After(Duration::from_millis(250)), "retry-after-ms wins");
        assert_eq!(read(&[("retry-after-ms", "-1")]), Unreadable);
        assert_eq!(read(&[("retry-after-ms", "1e300")]), Unreadable);
        assert_eq!(Unreadable.wait(), None);
    }
}
