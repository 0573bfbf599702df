//! The `gateway-server` binary under a memory cap (`ulimit -v`, 1 GiB of address space) and a
//! time cap (every test is bounded, the process killed when the test ends): hostile inputs that
//! once made the proxy allocate without bound or hold connections forever must be refused while
//! it keeps serving (schema bombs, a slowloris flood, a descriptor flood; on Anthropic's route a
//! 400 000-deep body, a 10 MB `anthropic-beta` and malformed bodies). A regression then fails the test against the cap instead of taking the
//! machine down. (The time and memory figures themselves are measured by `cargo xtask edge`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]
// Real processes and sockets: waits are bounded by the wall clock.
#![allow(clippy::disallowed_methods)]

use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "support/capped.rs"]
mod capped;

use capped::{Capped, Caps};

/// Address space the proxy may map (it maps about 170 MiB idle).
const MEMORY_CAP_KIB: u64 = 1 << 20;
/// No test here may take longer.
const TIME_CAP: Duration = Duration::from_secs(60);

/// The proxy with `server` lines, at most `fds` open descriptors when given, and its stderr to
/// `stderr`, in front of a source nothing answers.
async fn start_with(server: &str, fds: Option<u32>, stderr: Stdio) -> Capped {
    let config = |port| {
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nshutdown_grace_s = 1\n{server}\n\
             [chat.breaker]\nfail_threshold = 1000\ncooldown_s = 1\n\
             [chat.sources.nowhere]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\ntimeout_s = 2\n"
        )
    };
    Capped::start(config, &Caps { memory_kib: MEMORY_CAP_KIB, fds }, stderr).await
}

async fn start(server: &str) -> Capped {
    start_with(server, None, Stdio::null()).await
}

fn with_schema(schema: Value) -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}})
}

/// `$defs` d0..dn, each referring to the next twice: 2^n subschemas once written out.
fn doubling_chain(n: usize, form: fn(Value) -> Value) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        defs.insert(format!("d{i}"), form(json!({"$ref": format!("#/$defs/d{}", i + 1)})));
    }
    defs.insert(format!("d{n}"), json!({"type": "string"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_bombs_are_refused_and_sigterm_stops_the_proxy_under_the_memory_cap() {
    tokio::time::timeout(TIME_CAP, async {
        let mut proxy = start("").await;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
        let bombs = [
            json!({"allOf": [{"$ref": "#"}]}),
            json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}),
            doubling_chain(20, |r| json!({"allOf": [r, r]})),
            doubling_chain(40, |r| json!({"type": "object", "properties": {"a": {"anyOf": [r, r]}}})),
        ];
        for _ in 0..20 {
            for bomb in &bombs {
                let answer =
                    http.post(format!("{}/v1/chat/completions", proxy.base)).json(&with_schema(bomb.clone())).send().await.unwrap();
                assert_eq!(answer.status(), 400);
                let body: Value = answer.json().await.unwrap();
                assert_eq!(body["error"]["param"], "response_format.json_schema.schema", "{body}");
            }
        }
        let mut nested = json!({"type": "string"});
        for _ in 0..60 {
            nested = json!({"type": "object", "properties": {"a": nested}});
        }
        let answer = http.post(format!("{}/v1/chat/completions", proxy.base)).json(&with_schema(nested)).send().await.unwrap();
        assert_ne!(answer.status(), 400, "a deep plain schema is accepted (the unreachable source then fails the call)");
        assert!(proxy.alive(), "the proxy survived every bomb within the memory cap");
        let term = Command::new("kill").args(["-TERM", &proxy.pid().to_string()]).status().unwrap();
        assert!(term.success());
        let began = Instant::now();
        while proxy.alive() {
            assert!(began.elapsed() < Duration::from_secs(10), "SIGTERM stops the proxy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(proxy.exit_code(), Some(0), "nothing was in flight, nothing cut");
    })
    .await
    .expect("within the time cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_flood_is_shed_while_the_proxy_keeps_serving() {
    tokio::time::timeout(TIME_CAP, async {
        let mut proxy = start("header_timeout_s = 1\nmax_connections = 400").await;
        let address = proxy.base.trim_start_matches("http://").to_owned();
        let mut loris = Vec::new();
        for _ in 0..300 {
            let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            stream.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n").await.unwrap();
            loris.push(stream);
        }
        let served = reqwest::get(format!("{}/healthz", proxy.base)).await.unwrap();
        assert_eq!(served.status(), 200, "a normal client is served during the flood");
        let began = Instant::now();
        for stream in &mut loris {
            let mut rest = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await.expect("closed at the header timeout").ok();
        }
        assert!(began.elapsed() < Duration::from_secs(5), "all 300 were closed about a second after their first byte");
        assert!(proxy.alive());
    })
    .await
    .expect("within the time cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_past_the_connection_cap_never_runs_accept_out_of_file_descriptors() {
    tokio::time::timeout(TIME_CAP, async {
        let log = std::env::temp_dir().join(format!("gateway-capped-fds-{}.log", std::process::id()));
        let stderr = std::fs::File::create(&log).unwrap();
        // 1 024 descriptors: the cap is 768 connections, a quarter is kept for the rest.
        let mut proxy = start_with("header_timeout_s = 5", Some(1024), stderr.into()).await;
        let address = proxy.base.trim_start_matches("http://").to_owned();
        // Each sends half a request and stalls: none is idle, so none can make room, and every
        // connection past the cap waits for its 503 (or, past the newcomers the proxy holds at
        // once, is closed unanswered).
        let mut flood = Vec::new();
        for _ in 0..1200 {
            if let Ok(mut stream) = tokio::net::TcpStream::connect(&address).await {
                let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\n").await;
                flood.push(stream);
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(proxy.alive());
        drop(flood);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let served = reqwest::get(format!("{}/healthz", proxy.base)).await.unwrap();
        assert_eq!(served.status(), 200, "a newcomer is served after the flood");
        let warnings = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_file(&log);
        assert!(!warnings.contains("Too many open files"), "the proxy ran out of descriptors: {warnings:.500}");
    })
    .await
    .expect("within the time cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_messages_bodies_and_headers_are_refused_under_the_memory_cap() {
    tokio::time::timeout(TIME_CAP, async {
        let mut proxy = start("max_body_bytes = 8388608").await;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
        for _ in 0..5 {
            // A 400 000-deep `content`: refused by the parser's depth, naming the body.
            let depth = 400_000;
            let body = format!(
                r#"{{"model":"chat","max_tokens":1,"messages":[{{"role":"user","content":{}{}}}]}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            );
            let answer = http
                .post(format!("{}/v1/messages", proxy.base))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 400);
            let error: Value = answer.json().await.unwrap();
            assert!(error["error"]["message"].as_str().is_some_and(|m| m.starts_with("body: ")), "{error}");
            // A 10 MB `anthropic-beta`: refused at the head's limit.
            let mut stream = tokio::net::TcpStream::connect(proxy.base.trim_start_matches("http://")).await.unwrap();
            stream.write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nanthropic-beta: ").await.unwrap();
            let _ = tokio::time::timeout(Duration::from_secs(10), stream.write_all(&vec![b'b'; 10 << 20])).await;
            let mut answer = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
            let answer = String::from_utf8_lossy(&answer);
            assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 431"), "{answer}");
        }
        // Fuzzed Messages bodies of every shape get a 4xx naming the field, never a 5xx.
        for body in [
            json!(null),
            json!([]),
            json!({"model": 7}),
            json!({"model": "chat"}),
            json!({"model": "chat", "messages": {}}),
            json!({"model": "chat", "messages": [], "stream": "x"}),
        ] {
            let answer = http.post(format!("{}/v1/messages", proxy.base)).json(&body).send().await.unwrap();
            assert!(answer.status().is_client_error(), "{body}: {}", answer.status());
            let error: Value = answer.json().await.unwrap();
            assert_eq!(error["type"], "error", "{error}");
        }
        assert!(proxy.alive(), "the proxy survived within the memory cap");
    })
    .await
    .expect("within the time cap");
}
