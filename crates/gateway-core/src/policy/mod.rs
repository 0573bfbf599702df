//! Policies: the validated values every state machine and loop runs on (SPEC §3–§9), and the
//! raw, all-optional `*Config` shapes the config loader deserializes into them.
//!
//! Validation lives here, once: [`ScopeConfig::resolve`] fills defaults, rejects missing required
//! keys and out-of-range values, and names the key at fault (`chat.breaker.fail_threshold`).
//! The loader adds the layer (default, file, environment) the value came from.

mod breaker;
mod error;
mod scope;
mod source;
mod tenancy;
#[cfg(test)]
mod tests;

pub use breaker::{BreakerConfig, BreakerPolicy};
pub use error::{PolicyError, Problem};
pub use scope::{OneOrMany, ScopeConfig, ScopePolicy, WaitMode};
pub use source::{QuotaLimits, Secret, SourceConfig, SourcePolicy};
pub use tenancy::{Isolation, TierConfig, UnknownTenant};
