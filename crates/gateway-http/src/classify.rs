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
//! | error code `context_length_exceeded` (any status, an error inside a 2xx or a stream too) | RequestRejected | `context_length_exceeded` |
//! | 400, 413, 422 | RequestRejected | `http_400` … |
//! | 408, 5xx, any other status | Transient | `http_503` … |
//! | timeout (header or total), connect refused, reset | Transient | `timeout`, `header_timeout`, `connect`, `reset` |
//!
//! Nothing a request causes reaches the breaker (SPEC §2): a rejected payload, an overlong
//! context, or a 404 for an endpoint the request chose is `RequestRejected`. A 404 blames the
//! source only where the request could not have chosen otherwise: the source serves a single
//! kind (its scopes' `kinds`), so every request it gets is one its model must serve.

use gateway_core::outcome::OutcomeClass;
use gateway_core::request::Kind;
use gateway_core::time::WallClock;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
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
pub fn classify_code(error_code: &str, not_found: NotFound) -> Option<OutcomeClass> {
    match error_code {
        code if DEAD_CODES.contains(&code) => Some(OutcomeClass::SourceDead),
        "model_not_found" => Some(not_found.class()),
        "context_length_exceeded" => Some(OutcomeClass::RequestRejected),
        _ => None,
    }
}

/// The class and detail of a non-success HTTP status, given the error code of its body (if the
/// body carried one) and whom a 404 blames at this source.
pub fn classify_status(status: StatusCode, error_code: Option<&str>, not_found: NotFound) -> (OutcomeClass, String) {
    let code = status.as_u16();
    if let Some(error_code) = error_code {
        // The code is the provider's own word on the cause, whatever status carries it (a relay
        // may wrap an overlong context in a 500): nothing the request caused reaches the breaker.
        if let Some(class) = classify_code(error_code, not_found) {
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

/// A 429's Retry-After: `retry-after-ms` (milliseconds), else `retry-after` as seconds or as an
/// HTTP-date (read against the wall clock). Unparseable or past values give `None`.
pub fn retry_after(headers: &HeaderMap, wall: &dyn WallClock) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at = at.duration_since(std::time::UNIX_EPOCH).ok()?;
    at.checked_sub(wall.unix_now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

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
            assert_eq!(classify_status(status, error, NotFound::Request), (class, detail.to_owned()), "{code} {error:?}");
        }
    }

    #[test]
    fn a_404_blames_the_source_only_when_it_serves_one_kind() {
        assert_eq!(NotFound::for_kinds(&[Kind::Chat]), NotFound::Source);
        assert_eq!(NotFound::for_kinds(&Kind::ALL), NotFound::Request);
        for (status, code) in [(404, None), (404, Some("model_not_found")), (400, Some("model_not_found"))] {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::NOT_FOUND);
            assert_eq!(classify_status(status, code, NotFound::Source).0, OutcomeClass::SourceDead, "{status} {code:?}");
            assert_eq!(classify_status(status, code, NotFound::Request).0, OutcomeClass::RequestRejected, "{status} {code:?}");
        }
        assert_eq!(classify_code("context_length_exceeded", NotFound::Source), Some(OutcomeClass::RequestRejected));
        assert_eq!(classify_code("invalid_api_key", NotFound::Request), Some(OutcomeClass::SourceDead));
        assert_eq!(classify_code("server_error", NotFound::Request), None);
    }

    #[test]
    fn retry_after_formats_and_junk() {
        let mut headers = HeaderMap::new();
        let wall = At(1_445_412_480); // 2015-10-21T07:28:00Z
        assert_eq!(retry_after(&headers, &wall), None);
        headers.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&headers, &wall), None);
        headers.insert("retry-after", HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&headers, &wall), None);
        headers.insert("retry-after", HeaderValue::from_static("1e300"));
        assert_eq!(retry_after(&headers, &wall), None, "too large for a Duration: ignored, no panic");
        headers.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2015 07:27:00 GMT"));
        assert_eq!(retry_after(&headers, &wall), None, "a date in the past");
        headers.insert("retry-after", HeaderValue::from_static("2.5"));
        assert_eq!(retry_after(&headers, &wall), Some(Duration::from_millis(2500)));
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&headers, &wall), Some(Duration::from_millis(250)), "retry-after-ms wins");
    }
}
