//! `gateway-redis`: `BreakerGate`, `QuotaGate`, `PacerGate` and `AffinityMap` on Redis, shared
//! by every worker process of a deployment.
//!
//! - Lua scripts (`lua/`), loaded once, called with EVALSHA, reloaded on NOSCRIPT (after a
//!   restart, a failover or SCRIPT FLUSH): `gate.lua` is every breaker operation and mirrors
//!   `gateway_core::breaker::Gate::apply`, the quota scripts `gateway_core::quota` and the pacer
//!   scripts `gateway_core::aimd`, rule for rule; the contract suite replays random sequences
//!   on both sides. `settle.lua` makes an attempt's records (`RedisAttempts`: the pacer release,
//!   the gate's record, the permit's settle and release) in one round trip, each part its own
//!   script run as a function.
//! - Every gate and quota account has an incarnation, chosen when the script creates it; a record
//!   (or a permit's settle and release) names the incarnation it was admitted under, so a gate
//!   Redis lost (restart without persistence, flush, failover, eviction) refuses the records of
//!   attempts its predecessor admitted, although its epochs start again at 0.
//! - One HASH per gate with the field names of SPEC §3, under `gw:{<scope>}:…` so every key of a
//!   scope shares one Redis Cluster slot; a change beyond the current bucket's counts refreshes
//!   the key's TTL (`Gate::keeps_longer_than`, the memory gates' rule too).
//! - Time is the Redis server's (`TIME`, read inside the scripts) unless a clock is injected.
//! - Every command has a timeout and fails at once while disconnected; the pool reconnects with
//!   back-off. Admission operations then return `BackendError::BackendUnavailable`; record
//!   operations log a warning, count it ([`RedisConnection::degraded_records`]) and return the
//!   same error for the caller to ignore. A script that could not do its work (a `MALFORMED`
//!   reply, a Lua error, a key of the wrong type) is `BackendError::Malformed`, never an outage; a
//!   record that meets it is logged as an error and counted the same way.

mod affinity;
mod combined;
mod connection;
mod freed;
mod gates;
mod keys;
mod pacer;
mod quota;
mod redact;
mod scripts;

pub use connection::{RedisConfig, RedisConnection};
pub use freed::watch_freed;

/// Incarnation ids (a gate's and a quota account's, chosen when Redis creates them) seeded from
/// the process's hash keys, random per process: two processes never offer the same ones.
fn incarnations() -> gateway_core::random::Incarnations {
    use std::hash::BuildHasher;
    gateway_core::random::Incarnations::seeded(std::collections::hash_map::RandomState::new().hash_one(std::process::id()))
}
pub use affinity::RedisAffinity;
pub use combined::RedisAttempts;
pub use gates::RedisGates;
pub use pacer::RedisPacer;
pub use quota::RedisQuota;
