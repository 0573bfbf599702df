//! Redis faults, on a Redis server of the test's own (started on a free loopback port, so the
//! shared one is never disturbed): stopped → admission fails at once with `BackendUnavailable`
//! and records degrade quietly; back → the same client works again (its scripts reloaded on
//! NOSCRIPT); SCRIPT FLUSH between calls → recovers; a hung server → bounded by the command
//! timeout. Skipped, with the reason, where `redis-server` is not installed, unless
//! `GATEWAY_REDIS_REQUIRED=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fred::prelude::ClientLike;
use gateway_core::breaker::{GateParams, Verdict};
use gateway_core::policy::BreakerConfig;
use gateway_core::ports::{BreakerGate, GateError, GateKey};
use gateway_redis::{RedisConfig, RedisConnection, RedisGates};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const COMMAND_TIMEOUT: Duration = Duration::from_millis(250);

/// A redis-server child process on a fixed loopback port; killed on drop.
struct OwnServer {
    port: u16,
    child: Option<Child>,
}

impl OwnServer {
    fn start() -> Option<OwnServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let mut server = OwnServer { port, child: None };
        server.spawn().then_some(server)
    }

    fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(child) = child else { return false };
        self.child = Some(child);
        // Wait (bounded) until it accepts connections.
        (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
        })
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn own_server(case: &str) -> Option<OwnServer> {
    match OwnServer::start() {
        Some(server) => Some(server),
        None if std::env::var("GATEWAY_REDIS_REQUIRED").is_ok_and(|v| v == "1" || v == "true") => {
            panic!("redis-server could not be started on a loopback port and GATEWAY_REDIS_REQUIRED=1")
        }
        None => {
            let _ = writeln!(std::io::stderr(), "SKIPPED redis_faults::{case}: redis-server is not installed or did not start");
            None
        }
    }
}

async fn connect(url: String) -> Arc<RedisConnection> {
    let config = RedisConfig { url, pool_size: 2, command_timeout: COMMAND_TIMEOUT, ..RedisConfig::default() };
    RedisConnection::connect(config).await.unwrap()
}

fn params() -> GateParams {
    let policy =
        BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() }.resolve("faults.breaker").unwrap();
    GateParams::new(&policy, 1, Duration::from_secs(30), Duration::from_secs(30))
}

fn unavailable(result: &Result<impl std::fmt::Debug, GateError>) -> bool {
    matches!(result, Err(GateError::BackendUnavailable { backend: "redis", .. }))
}

/// Runs `op` and asserts it ends within `bound` (real time: this is about not hanging).
async fn within<T>(bound: Duration, op: impl Future<Output = T>) -> T {
    tokio::time::timeout(bound, op).await.expect("the operation hung past its bound")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_redis_fails_admission_at_once_degrades_records_and_recovers() {
    let Some(mut server) = own_server("stopped_redis_fails_admission_at_once_degrades_records_and_recovers") else { return };
    let gates = RedisGates::new(connect(server.url()).await);
    let (key, p) = (GateKey::new("faults", "s1"), params());
    let entry = gates.try_enter(&key, &p).await.unwrap();
    assert_eq!(entry.verdict, Verdict::Allowed);

    server.stop();
    let bound = COMMAND_TIMEOUT * 4;
    let admission = within(bound, gates.try_enter(&key, &p)).await;
    assert!(unavailable(&admission), "admission must fail closed with a typed error: {admission:?}");
    let retry_after = within(bound, gates.retry_after(&[(key.clone(), p.clone())])).await;
    assert!(unavailable(&retry_after), "{retry_after:?}");
    let record = within(bound, gates.record_failure(&key, &p, entry.reply.epoch)).await;
    assert!(unavailable(&record), "{record:?}");
    let record = within(bound, gates.record_success(&key, &p, entry.reply.epoch, true)).await;
    assert!(unavailable(&record), "{record:?}");
    assert_eq!(gates.connection().degraded_records(), 2, "each dropped record is counted");

    // Back on the same port, empty (no scripts, no state): the same client reconnects and
    // reloads its scripts on NOSCRIPT.
    assert!(server.spawn(), "redis-server restarts");
    let recovered = within(Duration::from_secs(15), async {
        loop {
            match gates.try_enter(&key, &p).await {
                Ok(entry) => break entry,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    assert_eq!(recovered.verdict, Verdict::Allowed);
    gates.record_failure(&key, &p, recovered.reply.epoch).await.unwrap();
    assert_eq!(gates.snapshot(&key).await.unwrap().failures, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_between_calls_recovers() {
    let Some(server) = own_server("script_flush_between_calls_recovers") else { return };
    let conn = connect(server.url()).await;
    let gates = RedisGates::new(conn.clone());
    let (key, p) = (GateKey::new("faults", "flush"), params());
    let entry = gates.try_enter(&key, &p).await.unwrap();
    let _: String = conn.pool().custom(fred::cmd!("SCRIPT"), vec!["FLUSH"]).await.unwrap();
    gates.record_failure(&key, &p, entry.reply.epoch).await.unwrap();
    let _: String = conn.pool().custom(fred::cmd!("SCRIPT"), vec!["FLUSH"]).await.unwrap();
    assert_eq!(gates.try_enter(&key, &p).await.unwrap().verdict, Verdict::Allowed);
    assert_eq!(gates.snapshot(&key).await.unwrap().failures, 1);
    assert_eq!(conn.degraded_records(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_is_bounded_by_the_command_timeout() {
    let Some(server) = own_server("a_hung_redis_is_bounded_by_the_command_timeout") else { return };
    let conn = connect(server.url()).await;
    let gates = RedisGates::new(conn.clone());
    let (key, p) = (GateKey::new("faults", "hung"), params());
    gates.try_enter(&key, &p).await.unwrap();
    // Another client freezes the server for two seconds.
    let pauser = connect(server.url()).await;
    let _: String = pauser.pool().custom(fred::cmd!("CLIENT"), vec!["PAUSE", "2000", "ALL"]).await.unwrap();
    let admission = within(COMMAND_TIMEOUT * 4, gates.try_enter(&key, &p)).await;
    assert!(unavailable(&admission), "{admission:?}");
    let record = within(COMMAND_TIMEOUT * 4, gates.force_open(&key, &p)).await;
    assert!(unavailable(&record), "{record:?}");
    assert_eq!(conn.degraded_records(), 1);
}

#[tokio::test]
async fn an_unreachable_redis_is_a_typed_error_at_connect() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = RedisConfig {
        url: format!("redis://user:secret@127.0.0.1:{port}"),
        connect_timeout: Duration::from_millis(500),
        ..RedisConfig::default()
    };
    let error = within(Duration::from_secs(5), RedisConnection::connect(config)).await.err().expect("nothing listens there");
    let text = error.to_string();
    assert!(matches!(error, GateError::BackendUnavailable { backend: "redis", .. }), "{text}");
    assert!(text.contains(&format!("redis://127.0.0.1:{port}")) && !text.contains("secret"), "{text}");
}
