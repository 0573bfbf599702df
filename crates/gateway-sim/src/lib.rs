//! `gateway-sim`: the soak. Scenarios as data ([`scenario`]) with the pool's capacity computed
//! from them, simulated providers in virtual time ([`upstream`]) or over loopback HTTP (`http`:
//! the providers as gateway-mock's responder, `Providers::serve`), one run of the workload through a `GatewayClient` ([`run`]), the nine invariants
//! of SPEC §12 ([`invariants`]), Redis faults on a Redis of the run's own ([`fault`]) and the
//! report ([`report`]). `cargo xtask soak` drives it.

mod capacity;
pub mod fault;
mod http;
pub mod invariants;
pub mod ledger;
pub mod report;
pub mod run;
pub mod scenario;
pub mod upstream;
