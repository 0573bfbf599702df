//! `gateway-redis`: `BreakerGate`, `QuotaGate` and `PacerGate` on Redis, shared by every
//! worker process of a deployment.
//!
//! - One Lua script per operation (`lua/`), loaded once, called with EVALSHA, reloaded on
//!   NOSCRIPT (after a restart, a failover or SCRIPT FLUSH). The breaker scripts mirror
//!   `gateway_core::breaker`, the quota scripts `gateway_core::quota` and the pacer scripts
//!   `gateway_core::aimd`, rule for rule.
//! - One HASH per gate with the field names of SPEC §3, under `gw:{<scope>}:…` so every key of a
//!   scope shares one Redis Cluster slot; every write refreshes the key's TTL.
//! - Time is the Redis server's (`TIME`, read inside the scripts) unless a clock is injected.
//! - Every command has a timeout and fails at once while disconnected; the pool reconnects with
//!   back-off. Admission operations then return `GateError::BackendUnavailable`; record
//!   operations log a warning, count it ([`RedisConnection::degraded_records`]) and return the
//!   same error for the caller to ignore.

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
