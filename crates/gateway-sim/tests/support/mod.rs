//! The soak tests' run configs and worker launch, shared by the test targets `soak` and
//! `soak_redis`.

use gateway_client::Preset;
use gateway_sim::run::{Backend, RunConfig, Transport, WorkerSpec};

/// A virtual-time run on the memory gates and simulated providers (the embedded default).
pub fn virtual_time(seed: u64, calls: u32) -> RunConfig {
    RunConfig {
        backend: Backend::Memory,
        transport: Transport::Sim,
        time_scale: None,
        seed,
        preset: Preset::Default,
        calls: Some(calls),
        workers: None,
        circuit_open: None,
        isolation: None,
        stream: false,
        api: gateway_sim::run::Api::Chat,
        on_unavailable: Default::default(),
        fault: None,
        reload_at: None,
    }
}

pub fn real_time(backend: Backend, calls: u32) -> RunConfig {
    RunConfig { backend, transport: Transport::Http, time_scale: Some(0.02), ..virtual_time(3, calls) }
}

pub fn launch(_: &WorkerSpec) -> std::io::Result<std::process::Child> {
    std::process::Command::new(env!("CARGO_BIN_EXE_soak-worker"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
}
