//! The `gateway-server` binary in its own process under `ulimit` caps (address space, and file
//! descriptors when asked), for the tests of hostile input: a regression then fails the test
//! against the cap instead of taking the machine down. The process is killed when dropped.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The caps a proxy runs under.
pub struct Caps {
    /// Address space it may map, in KiB (`ulimit -v`).
    pub memory_kib: u64,
    /// Open file descriptors (`ulimit -n`), when capped.
    pub fds: Option<u32>,
}

/// The proxy binary, running under its caps.
pub struct Capped {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    config: std::path::PathBuf,
}

impl Capped {
    /// Starts the binary on a free port with the config `text(port)` under `caps`, its stderr
    /// to `stderr`, and waits (at most 20 s) until it answers `/healthz`.
    pub async fn start(text: impl FnOnce(u16) -> String, caps: &Caps, stderr: Stdio) -> Capped {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = std::env::temp_dir().join(format!("gateway-capped-{}-{port}.toml", std::process::id()));
        std::fs::write(&config, text(port)).unwrap();
        let fds = caps.fds.map(|n| format!("ulimit -n {n} && ")).unwrap_or_default();
        let script = format!("ulimit -v {} && {fds}exec \"$0\" --config \"$1\"", caps.memory_kib);
        let child = Command::new("sh")
            .args(["-c", &script, env!("CARGO_BIN_EXE_gateway-server")])
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let capped = Capped { child, base: format!("http://127.0.0.1:{port}"), config };
        let began = Instant::now();
        while reqwest::get(format!("{}/healthz", capped.base)).await.is_err() {
            assert!(began.elapsed() < Duration::from_secs(20), "the proxy did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        capped
    }

    /// The config file it was started with.
    pub fn config_path(&self) -> &std::path::Path {
        &self.config
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit code, once the process has ended.
    pub fn exit_code(&mut self) -> Option<i32> {
        self.child.wait().unwrap().code()
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// `VmRSS` and `VmHWM` (the peak) in KiB.
    pub fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| -> u64 {
            let line = status.lines().find_map(|l| l.strip_prefix(name)).unwrap();
            line.split_whitespace().next().unwrap().parse().unwrap()
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Capped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}
