//! `gateway-redis`: `BreakerGate`, `QuotaGate` and `PacerGate` on Redis, shared by every
//! worker process of a deployment.
//!
//! - Lua scripts (`lua/`), loaded once, called with EVALSHA, reloaded on NOSCRIPT (after a
//!   restart, a failover or SCRIPT FLUSH): `gate.lua` is every breaker operation and mirrors
//!   `gateway_core::breaker::Gate::apply`, the quota scripts `gateway_core::quota` and the pacer
//!   scripts `gateway_core::aimd`, rule for rule; the contract suite replays random sequences
//!   on both sides.
//! - One HASH per gate with the field names of SPEC §3, under `gw:{<scope>}:…` so every key of a
//!   scope shares one Redis Cluster slot; a change beyond the current bucket's counts refreshes
//!   the key's TTL (`Gate::keeps_longer_than`, the memory gates' rule too).
//! - Time is the Redis server's (`TIME`, read inside the scripts) unless a clock is injected.
//! - Every command has a timeout and fails at once while disconnected; the pool reconnects with
//!   back-off. Admission operations then return `GateError::BackendUnavailable`; record
//!   operations log a warning, count it ([`RedisConnection::degraded_records`]) and return the
//!   same error for the caller to ignore. A script that could not do its work (a `MALFORMED`
//!   reply, a Lua error, a key of the wrong type) is `GateError::Malformed`, never an outage; a
//!   record that meets it is logged as an error and counted the same way.

mod connection;
mod gates;
mod keys;
mod pacer;
mod quota;
mod scripts;

pub use connection::{RedisConfig, RedisConnection};
pub use gates::RedisGates;
pub use pacer::RedisPacer;
pub use quota::RedisQuota;
