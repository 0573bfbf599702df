//! What a provider's rate-limit headers say of an account (SPEC §4.5): for requests and for
//! tokens, the advertised limit per minute, what is left and how long until the budget is full
//! again. The HTTP adapter reads them from OpenAI's `x-ratelimit-*` and Anthropic's
//! `anthropic-ratelimit-*` headers; the account's pacer keeps the freshest.

use std::time::Duration;

/// One of a provider's rate budgets as one answer reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateReport {
    /// The advertised limit per minute, when the provider gave one.
    pub limit: Option<u64>,
    /// Left when the provider counted this request (itself included).
    pub remaining: u64,
    /// Until the budget is full again (OpenAI's `reset`; zero when it is full).
    pub reset: Duration,
}

/// The rate signal of one answer: its request and token budgets, each when reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateSignal {
    /// Requests.
    pub requests: Option<RateReport>,
    /// Tokens (the tightest of the token budgets a provider reports).
    pub tokens: Option<RateReport>,
}

impl RateSignal {
    /// Whether it reports nothing.
    pub fn is_empty(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none()
    }
}
