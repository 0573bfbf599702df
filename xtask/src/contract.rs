//! `cargo xtask contract`: runs the backend contract suite (`tests/tests/contract`) and the Redis
//! fault tests, with Redis mandatory, and prints a table of cases × backends.
//!
//! Redis: `REDIS_URL` if set; else 127.0.0.1:6379 if it answers PING; else a `redis-server`
//! started here on a free loopback port (stopped at the end); else an error saying exactly what
//! is missing.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn run() -> Result<(), String> {
    let redis = Redis::find()?;
    println!("contract: redis at {} ({})", redis.url, redis.origin);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    // `--workspace` resolves features as `cargo test --workspace` does, and the variables `cargo
    // run` set for this binary are taken away (a build script that reads `CARGO_MANIFEST_DIR`,
    // ring's, would be built again, and again by the next plain `cargo test`): after the suite's
    // own build (CI's) nothing is built again.
    let mut test = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_run) {
            test.env_remove(name);
        }
    }
    let output = test
        .args(["test", "--workspace", "--test", "contract", "--test", "redis_faults", "--", "--test-threads", "8"])
        .env("GATEWAY_REDIS_URL", &redis.url)
        .env("GATEWAY_REDIS_REQUIRED", "1")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo test: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let table = Table::parse(&stdout);
    print!("{}", table.render());
    let verdict = table.verdict();
    drop(redis);
    match (output.status.success(), verdict) {
        (true, Ok(summary)) => {
            println!("{summary}");
            Ok(())
        }
        (_, Err(problem)) => Err(problem),
        (false, Ok(_)) => Err(format!("cargo test failed:\n{stdout}")),
    }
}

/// Whether `cargo run` sets the variable `name` for the binary it runs (beside `CARGO`, which
/// names the cargo to run again).
fn set_by_cargo_run(name: &str) -> bool {
    const SET: [&str; 5] = ["CARGO_MANIFEST_DIR", "CARGO_MANIFEST_PATH", "CARGO_CRATE_NAME", "CARGO_BIN_NAME", "CARGO_PRIMARY_PACKAGE"];
    SET.contains(&name) || name.starts_with("CARGO_PKG_")
}

/// Results by case, then by backend (`memory`, `redis`, or `redis_faults` for Redis-only tests),
/// and the suite's own tests (`suite::<test>`, the script parser's), which are no contract case:
/// they must pass, but have no backends.
#[derive(Default)]
struct Table {
    rows: BTreeMap<String, BTreeMap<String, bool>>,
    suite: BTreeMap<String, bool>,
}

impl Table {
    /// Reads libtest lines `test <backend>::<case> ... ok|FAILED` (and plain `test <case> ...`
    /// of the fault tests).
    fn parse(stdout: &str) -> Table {
        let mut table = Table::default();
        for line in stdout.lines() {
            let Some(rest) = line.strip_prefix("test ") else { continue };
            let Some((name, result)) = rest.rsplit_once(" ... ") else { continue };
            // libtest-mimic pads names to one width
            let name = name.trim_end();
            let passed = match result.trim() {
                "ok" => true,
                "FAILED" => false,
                _ => continue,
            };
            match name.split_once("::").unwrap_or(("redis_faults", name)) {
                ("suite", test) => _ = table.suite.insert(test.to_owned(), passed),
                (backend, case) => _ = table.rows.entry(case.to_owned()).or_default().insert(backend.to_owned(), passed),
            }
        }
        table
    }

    fn render(&self) -> String {
        let width = self.rows.keys().map(String::len).max().unwrap_or(4).max(4);
        let mut out = format!("{:<width$}  {:<7} {:<7} {:<7}\n", "case", "gate", "memory", "redis");
        for (case, results) in &self.rows {
            let cell = |backend: &str| match results.get(backend) {
                Some(true) => "ok",
                Some(false) => "FAILED",
                None => "-",
            };
            let redis = if results.contains_key("redis_faults") { cell("redis_faults") } else { cell("redis") };
            out += &format!("{case:<width$}  {:<7} {:<7} {:<7}\n", cell("script"), cell("memory"), redis);
        }
        out
    }

    /// Every case passed on every backend it belongs to: a script on the pure gate, the memory
    /// gates and Redis; a code case on memory and Redis; a Redis-only case on Redis.
    fn verdict(&self) -> Result<String, String> {
        let failed = self.rows.values().flat_map(|r| r.values()).chain(self.suite.values()).filter(|passed| !**passed).count();
        if self.rows.is_empty() {
            return Err("no contract case ran".to_owned());
        }
        if failed > 0 {
            return Err(format!("{failed} failed"));
        }
        let missing: Vec<&str> = self
            .rows
            .iter()
            .filter(|(_, r)| {
                let needs = |b: &str| r.get(b) != Some(&true);
                (r.contains_key("script") && needs("memory")) || (!r.contains_key("redis_faults") && needs("redis"))
            })
            .map(|(case, _)| case.as_str())
            .collect();
        if !missing.is_empty() {
            return Err(format!("every case must run on each of its backends; these did not: {}", missing.join(", ")));
        }
        let count = |backend: &str| self.rows.values().filter(|r| r.contains_key(backend)).count();
        Ok(format!(
            "contract: {} scripts on the gate, memory and redis, {} cases on memory and redis, {} on redis only, {} redis fault tests and {} of the suite's own tests passed, 0 skipped",
            count("script"),
            self.rows.values().filter(|r| !r.contains_key("script") && r.contains_key("memory")).count(),
            self.rows.values().filter(|r| r.contains_key("redis") && !r.contains_key("memory")).count(),
            count("redis_faults"),
            self.suite.len(),
        ))
    }
}

/// The Redis the suite runs against; a server started here is stopped on drop.
struct Redis {
    url: String,
    origin: &'static str,
    child: Option<Child>,
}

impl Redis {
    fn find() -> Result<Redis, String> {
        if let Ok(url) = std::env::var("REDIS_URL") {
            return Ok(Redis { url, origin: "REDIS_URL", child: None });
        }
        if answers_ping(6379) {
            return Ok(Redis { url: "redis://127.0.0.1:6379".to_owned(), origin: "already running", child: None });
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("cannot find a free loopback port: {e}"))?
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "no Redis to run the contract on: REDIS_URL is not set, nothing answers PING on 127.0.0.1:6379, \
                     and redis-server could not be started ({e}); install redis-server or set REDIS_URL"
                )
            })?;
        let redis = Redis { url: format!("redis://127.0.0.1:{port}"), origin: "started here", child: Some(child) };
        for _ in 0..100 {
            if answers_ping(port) {
                return Ok(redis);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!("redis-server started on port {port} but never answered PING"))
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn answers_ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok() && stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

#[cfg(test)]
mod tests {
    use super::Table;

    const SAMPLE: &str = "running 4 tests\n\
        test memory::case_a ... ok\n\
        test redis::case_a ... ok\n\
        test memory::case_b ... ok\n\
        test redis::case_b ... FAILED\n\
        test a_hung_redis_is_bounded ... ok\n\
        test result: FAILED. 4 passed; 1 failed\n";

    #[test]
    fn parses_cases_by_backend_and_fails_on_any_failure() {
        let table = Table::parse(SAMPLE);
        assert_eq!(table.rows.len(), 3);
        assert!(table.render().contains("case_b"));
        assert_eq!(table.verdict().unwrap_err(), "1 failed");
    }

    #[test]
    fn a_case_missing_on_one_backend_fails() {
        let table = Table::parse("test memory::case_a ... ok\ntest memory::case_b ... ok\ntest redis::case_a ... ok\n");
        assert!(table.verdict().unwrap_err().ends_with("these did not: case_b"));
        let table = Table::parse("test script::s ... ok\ntest redis::s ... ok\ntest redis::case_a ... ok\n");
        assert!(table.verdict().unwrap_err().ends_with("these did not: s"), "a script must run on memory too");
        let table = Table::parse("test redis::case_a ... ignored\ntest memory::case_a ... ok\n");
        assert!(table.verdict().unwrap_err().ends_with("these did not: case_a"), "an ignored case did not run");
        let all = "test script::s   ... ok\ntest memory::s ... ok\ntest redis::s ... ok\ntest memory::case_a ... ok\ntest redis::case_a ... ok\ntest redis::ttl ... ok\ntest fault ... ok\ntest suite::parser ... ok\n";
        assert_eq!(
            Table::parse(all).verdict().unwrap(),
            "contract: 1 scripts on the gate, memory and redis, 1 cases on memory and redis, 1 on redis only, 1 redis fault tests and 1 of the suite's own tests passed, 0 skipped"
        );
    }

    #[test]
    fn what_cargo_run_sets_is_not_passed_to_the_suites_build() {
        for name in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO_PKG_VERSION_MAJOR", "CARGO_PRIMARY_PACKAGE", "CARGO_BIN_NAME"] {
            assert!(super::set_by_cargo_run(name), "{name}");
        }
        for name in ["CARGO", "CARGO_HOME", "CARGO_TARGET_DIR", "CARGO_INCREMENTAL", "CARGO_TERM_COLOR", "PATH"] {
            assert!(!super::set_by_cargo_run(name), "{name}");
        }
    }

    #[test]
    fn the_suites_own_tests_need_no_backend_but_must_pass() {
        let cases = "test script::s ... ok\ntest memory::s ... ok\ntest redis::s ... ok\n";
        let passed = Table::parse(&format!("{cases}test suite::the_parser_names_the_line ... ok\n"));
        assert!(passed.verdict().is_ok(), "{:?}", passed.verdict());
        assert!(!passed.render().contains("the_parser"), "not a row of cases x backends");
        let failed = Table::parse(&format!("{cases}test suite::the_parser_names_the_line ... FAILED\n"));
        assert_eq!(failed.verdict().unwrap_err(), "1 failed");
        let missing = Table::parse("test suite::the_parser_names_the_line ... ok\ntest script::s ... ok\ntest redis::s ... ok\n");
        assert!(missing.verdict().unwrap_err().ends_with("these did not: s"), "a real case missing a backend still fails");
    }
}
