//! Anthropic's dialect on the wire (`protocol = "anthropic"`): what differs from OpenAI's for
//! the same request and answer machinery (`openai/`: the endpoint below the base URL, the
//! caller's body with the source's `model`, a whole answer read and checked, a stream of named
//! events read one `data:` line at a time).
//!
//! - **Auth and version.** The source's key goes in `x-api-key` (among the source's headers, made
//!   once when the source is built), never `Authorization`; every
//!   request carries `anthropic-version`: the caller's, or the source's `anthropic_version`.
//! - **The caller's headers.** `anthropic-*` headers (`anthropic-beta`, …) and Claude Code's
//!   `x-app` reach the provider as they came, but for the betas the source lists in
//!   `drop_betas`, which are left out of `anthropic-beta` (the header goes when none is left).
//! - **Errors.** `{"type": "error", "error": {"type": …, "message": …}}`, classified by
//!   [`gateway_core::messages::error_class`] (`overloaded_error` — 529 — is transient); a
//!   stream's `error` event ends it with that class.
//! - **Request id** in `request-id` (OpenAI's `x-request-id` is read first).

use crate::Source;
use gateway_core::request::Request;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

/// The caller's headers an Anthropic provider reads: `anthropic-*` and Claude Code's `x-app`.
pub fn is_passed_on(name: &str) -> bool {
    name.starts_with("anthropic-") || name == "x-app"
}

/// `anthropic-beta`'s value without the betas `drop` lists (`None` when none is left).
fn kept_betas(value: &str, drop: &[String]) -> Option<String> {
    let kept: Vec<&str> = value.split(',').map(str::trim).filter(|b| !b.is_empty() && !drop.iter().any(|d| d == b)).collect();
    (!kept.is_empty()).then(|| kept.join(","))
}

/// The headers of one attempt at an Anthropic source, with the version (the caller's, else the
/// source's) and the caller's headers passed on. (Its key is among the source's headers.) A
/// caller's header that is not a valid header here is left out.
pub(crate) fn pass_on(src: &Source, request: &Request, headers: &mut HeaderMap) {
    let passed = request.passed_headers();
    if !passed.iter().any(|(name, _)| name == "anthropic-version") {
        headers.append("anthropic-version", src.anthropic_version.clone());
    }
    for (name, value) in passed.iter().filter(|(name, _)| is_passed_on(name)) {
        let value = if name == "anthropic-beta" {
            match kept_betas(value, &src.drop_betas) {
                Some(kept) => kept,
                None => continue,
            }
        } else {
            value.clone()
        };
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value.as_bytes())) {
            headers.append(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_betas_leave_the_rest_and_the_header_goes_when_none_is_left() {
        let drop = vec!["context-1m-2025-08-07".to_owned()];
        assert_eq!(kept_betas("a,context-1m-2025-08-07, b", &drop).as_deref(), Some("a,b"));
        assert_eq!(kept_betas("context-1m-2025-08-07", &drop), None);
        assert_eq!(kept_betas("x", &[]).as_deref(), Some("x"));
        assert!(is_passed_on("anthropic-beta") && is_passed_on("x-app") && !is_passed_on("authorization") && !is_passed_on("x-api-key"));
    }
}
