//! `gateway-core`: the pure state machines of the LLM gateway and the ports its adapters
//! implement.
//!
//! - [`outcome`]: the outcome classes and the one table of what each does (SPEC §2);
//! - [`breaker`]: the per-(scope, source) circuit breaker (SPEC §3);
//! - [`memo`], [`health`], [`aimd`], [`stall`], [`backoff`]: the process-local helpers (§4, §7);
//! - [`select`]: health-aware P2C, round-robin, least-in-flight, in-call demotion (§5);
//! - [`affinity`]: the ids of state a provider keeps, which a later request must follow;
//! - [`admission`]: the pure decisions of admission: skip reasons, "no candidate runnable", naps (§6);
//! - [`call`]: one call as a sans-io state machine, `CallMachine`: budget, re-asks, back-off, the
//!   stall bound, the waits and a stream's commit point (§5–§8, §13);
//! - [`quota`]: the local quota of a source account (concurrency, rpm, tpm with leases);
//! - [`responses`]: the Responses API's answers: usable, failed, the state a provider keeps;
//! - [`stream`]: streamed answers in each dialect: commit points, assembly, replay;
//! - [`policy`]: validated policies and the raw config shapes they come from (§9);
//! - [`ports`]: `BreakerGate`, `QuotaGate`, `Upstream`, `Telemetry`; [`time`]: `Clock`, `WallClock`.
//!
//! # Determinism contract
//!
//! Nothing here performs I/O, reads a clock or draws from an ambient RNG: every state change
//! takes `now` as a [`time::Timestamp`], and every random choice takes `&mut impl rand_core::Rng`.
//! The same sequence of calls with the same arguments (and the same seeded RNG) yields the same
//! states and results, on every platform. `clippy.toml` enforces the clock and RNG bans, and CI
//! checks that this crate depends on no async runtime, Redis or HTTP crate.

pub mod admission;
pub mod affinity;
pub mod aimd;
pub mod backoff;
pub mod breaker;
pub mod call;
pub mod combined;
pub mod health;
pub mod memo;
pub mod messages;
pub mod outcome;
pub mod policy;
pub mod ports;
pub mod quota;
pub mod random;
pub mod request;
pub mod responses;
pub mod select;
pub mod stall;
pub mod stream;
pub mod telemetry;
pub mod time;
pub mod translate;

pub use breaker::{CircuitState, Gate, GateOp, GateParams, Reply, SuccessKind, Verdict};
pub use outcome::{Effects, OutcomeClass};
pub use policy::{BreakerPolicy, PolicyError, ScopeConfig, ScopePolicy};
pub use ports::{BackendError, BreakerGate, QuotaGate, SourceKey, Telemetry, Upstream};
pub use time::{Clock, ManualClock, Timestamp};
