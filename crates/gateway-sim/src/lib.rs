//! `gateway-sim`: the soak. Scenarios as data ([`scenario`]), simulated providers in virtual time
//! ([`upstream`]) or over loopback HTTP ([`serve`]), one run of the workload through a `GatewayClient` ([`run`]), the eight
//! invariants of SPEC §12 ([`invariants`]) and the report ([`report`]). `cargo xtask soak` drives
//! it.

pub mod invariants;
pub mod report;
pub mod run;
pub mod scenario;
pub mod serve;
pub mod upstream;
