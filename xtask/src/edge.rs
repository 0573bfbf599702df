//! `cargo xtask edge`: measures the proxy against the hostile inputs of issue 13 as a real
//! process: builds `gateway-server` (release), starts it on a free port, sends each schema bomb
//! (20 times, so the refusal cache is exercised too) and a 60-level nested schema, and prints
//! how long each answer took and how the process's resident memory grew (`/proc/<pid>/status`).
//! It fails when a bomb is not refused with 400, a refusal takes 50 ms or more, or the resident
//! set grows by 20 MiB or more. Plain TCP and hand-written HTTP/1.1: xtask takes no HTTP crate.

// A measurement of a real process: wall-clock time is what is measured.
#![allow(clippy::disallowed_methods)]

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MAX_REFUSAL: Duration = Duration::from_millis(50);
const MAX_GROWTH_KIB: u64 = 20 << 10;
const ROUNDS: usize = 20;

pub fn run() -> Result<(), String> {
    let binary = build_proxy()?;
    let proxy = Proxy::start(&binary)?;
    // Warm up: the first compile initializes the validator's meta-schemas.
    proxy.post(&with_schema(json!({"type": "object"})))?;
    let before = proxy.memory()?;
    println!("edge: {} at {}, {} rounds each", binary.display(), proxy.address, ROUNDS);
    println!("{:<40} {:>7} {:>10} {:>10}", "input", "status", "first ms", "worst ms");
    let mut failures = Vec::new();
    for (name, schema, want) in bombs() {
        let (status, first, worst) = measure(&proxy, &with_schema(schema))?;
        println!("{name:<40} {status:>7} {:>10.2} {:>10.2}", ms(first), ms(worst));
        if want == 400 && status != 400 {
            failures.push(format!("{name}: status {status}, want 400"));
        }
        if want == 400 && worst >= MAX_REFUSAL {
            failures.push(format!("{name}: a refusal took {:.1} ms (limit {} ms)", ms(worst), MAX_REFUSAL.as_millis()));
        }
        if want == 0 && status == 400 {
            failures.push(format!("{name}: refused, but it is a plain schema"));
        }
    }
    let after = proxy.memory()?;
    let growth = after.rss_kib.saturating_sub(before.rss_kib);
    println!("resident memory: {} KiB before, {} KiB after (+{} KiB); peak {} KiB", before.rss_kib, after.rss_kib, growth, after.peak_kib);
    if growth >= MAX_GROWTH_KIB {
        failures.push(format!("the resident set grew by {growth} KiB (limit {MAX_GROWTH_KIB} KiB)"));
    }
    if failures.is_empty() {
        println!("edge: every bomb refused with 400 in under {} ms; RSS grew {} KiB", MAX_REFUSAL.as_millis(), growth);
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}

/// Builds `gateway-server` (release) and returns the binary's path.
fn build_proxy() -> Result<std::path::PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let built = Command::new(&cargo)
        .args(["build", "--release", "--quiet", "--package", "gateway-server", "--message-format", "short"])
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !built.success() {
        return Err("cargo build --release -p gateway-server failed".into());
    }
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".to_owned());
    Ok(std::path::Path::new(&target).join("release/gateway-server"))
}

/// The inputs, each with the status it must get (0: anything but 400).
fn bombs() -> [(&'static str, Value, u16); 4] {
    let nested = {
        let mut schema = json!({"type": "string"});
        for _ in 0..60 {
            schema = json!({"type": "object", "properties": {"a": schema}});
        }
        schema
    };
    [
        ("allOf of $ref # (in-place cycle)", json!({"allOf": [{"$ref": "#"}]}), 400),
        ("$defs cycle", json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}), 400),
        ("doubling $ref chain, n = 20", doubling_chain(20), 400),
        ("60-level nested properties (accepted)", nested, 0),
    ]
}

/// Posts `body` [`ROUNDS`] times: the last status, the first answer's time and the worst.
fn measure(proxy: &Proxy, body: &Value) -> Result<(u16, Duration, Duration), String> {
    let (mut first, mut worst, mut status) = (Duration::ZERO, Duration::ZERO, 0);
    for round in 0..ROUNDS {
        let began = Instant::now();
        status = proxy.post(body)?;
        let took = began.elapsed();
        if round == 0 {
            first = took;
        }
        worst = worst.max(took);
    }
    Ok((status, first, worst))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn with_schema(schema: Value) -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}})
}

fn doubling_chain(n: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        let next = json!({"$ref": format!("#/$defs/d{}", i + 1)});
        defs.insert(format!("d{i}"), json!({"allOf": [next, next]}));
    }
    defs.insert(format!("d{n}"), json!({"type": "string"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

struct Memory {
    rss_kib: u64,
    peak_kib: u64,
}

/// The proxy process; killed when dropped.
struct Proxy {
    child: Child,
    address: String,
    config: std::path::PathBuf,
}

impl Proxy {
    fn start(binary: &std::path::Path) -> Result<Proxy, String> {
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| format!("no free port: {e}"))?.port();
        let address = format!("127.0.0.1:{port}");
        let config = std::env::temp_dir().join(format!("gateway-edge-{}.toml", std::process::id()));
        let text = format!(
            "[server]\nlisten = \"{address}\"\nmax_body_bytes = 1048576\n\
             [chat.breaker]\nfail_threshold = 100000\ncooldown_s = 1\n\
             [chat.sources.nowhere]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\ntimeout_s = 2\n"
        );
        std::fs::write(&config, text).map_err(|e| format!("cannot write {}: {e}", config.display()))?;
        let child = Command::new(binary)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let proxy = Proxy { child, address, config };
        let began = Instant::now();
        while TcpStream::connect(&proxy.address).is_err() {
            if began.elapsed() > Duration::from_secs(20) {
                return Err("the proxy did not start listening within 20 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(proxy)
    }

    /// POSTs `body` to the chat route and returns the status.
    fn post(&self, body: &Value) -> Result<u16, String> {
        let body = body.to_string();
        let mut stream = TcpStream::connect(&self.address).map_err(|e| format!("connect: {e}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            self.address,
            body.len()
        );
        stream.write_all(request.as_bytes()).map_err(|e| format!("send: {e}"))?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).map_err(|e| format!("read: {e}"))?;
        answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("not an HTTP answer: {answer:.200}"))
    }

    fn memory(&self) -> Result<Memory, String> {
        let path = format!("/proc/{}/status", self.child.id());
        let status = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| format!("{path} has no {name}"))
        };
        Ok(Memory { rss_kib: field("VmRSS:")?, peak_kib: field("VmHWM:")? })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}
