//! The proxy binary in its own process, as deployed, for the benches that read what it costs
//! (`hostile`, `wait`): started on a free port with a configuration of the bench's, its CPU time,
//! peak resident set and context switches read from `/proc`, killed when dropped.

// Each bench reads the part of the usage it reports.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Proxy {
    child: Child,
    pub base: String,
    config: std::path::PathBuf,
}

impl Proxy {
    /// The binary listening on a free port, configured by `tables` (TOML after the `[server]`
    /// table's `listen` line, which may go on with more `[server]` keys); `name` keeps the
    /// config files of several proxies apart. Returns once it answers `/healthz`; panics if it
    /// exits first (a configuration it refused).
    pub async fn start(name: &str, tables: &str) -> Proxy {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = std::env::temp_dir().join(format!("gateway-bench-{name}-{}.toml", std::process::id()));
        std::fs::write(&config, format!("[server]\nlisten = \"127.0.0.1:{port}\"\n{tables}")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_gateway-server"))
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut proxy = Proxy { child, base: format!("http://127.0.0.1:{port}"), config };
        while reqwest::get(format!("{}/healthz", proxy.base)).await.is_err() {
            if let Some(status) = proxy.child.try_wait().unwrap() {
                panic!("the proxy exited ({status}) before it answered; its configuration:\n{tables}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        proxy
    }

    /// What the proxy has used so far.
    pub fn usage(&self) -> Usage {
        let pid = self.child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let peak = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().split_whitespace().next().unwrap().parse().unwrap();
        // Every thread's own (a process's status counts its first thread's only).
        let switches = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("status")).ok())
            .map(|status| {
                status
                    .lines()
                    .filter_map(|l| l.strip_prefix("voluntary_ctxt_switches:").or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:")))
                    .map(|n| n.trim().parse::<u64>().unwrap())
                    .sum::<u64>()
            })
            .sum();
        Usage { cpu: Duration::from_millis(ticks * 10), peak_kib: peak, switches }
    }
}

/// A proxy's use of the machine so far.
pub struct Usage {
    /// CPU time, user and system (10 ms ticks).
    pub cpu: Duration,
    /// Peak resident set, KiB.
    pub peak_kib: u64,
    /// Context switches of its threads alive now, voluntary and not: a count, where the CPU time
    /// of a few hundred microseconds a call moves with whatever else the machine does.
    pub switches: u64,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}
