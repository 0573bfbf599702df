//! Redis faults, on a Redis server of the test's own (started on a free loopback port, so the
//! shared one is never disturbed): stopped → admission fails at once with `BackendUnavailable`
//! and records degrade quietly; back → the same client works again (its scripts reloaded on
//! NOSCRIPT); SCRIPT FLUSH between calls → recovers; a hung server → bounded by the command
//! timeout; a gate key holding something the script cannot read → `Malformed`, never an outage.
//! Where `redis-server` is not installed the cases are reported ignored, with the reason (never
//! `ok`), or failed with `GATEWAY_REDIS_REQUIRED=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fred::prelude::ClientLike;
use gateway_core::breaker::{GateOp, GateParams, SuccessKind, Verdict};
use gateway_core::policy::BreakerConfig;
use gateway_core::ports::{BreakerGate, GateError, GateKey, QuotaGate};
use gateway_redis::{RedisConfig, RedisConnection, RedisGates};
use libtest_mimic::Trial;
use std::process::{Child, Command, ExitCode, Stdio};
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

/// Whether `redis-server` can be run here.
fn installed() -> Result<(), String> {
    match Command::new("redis-server").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("redis-server --version exited with {status}")),
        Err(e) => Err(format!("redis-server is not installed ({e})")),
    }
}

fn own_server() -> OwnServer {
    OwnServer::start().expect("redis-server did not start on a free loopback port")
}

type Case = (&'static str, fn() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>);

fn main() -> ExitCode {
    let cases: &[Case] = &[
        ("stopped_redis_fails_admission_at_once_degrades_records_and_recovers", || {
            Box::pin(stopped_redis_fails_admission_at_once_degrades_records_and_recovers())
        }),
        ("script_flush_between_calls_recovers", || Box::pin(script_flush_between_calls_recovers())),
        ("a_hung_redis_is_bounded_by_the_command_timeout", || Box::pin(a_hung_redis_is_bounded_by_the_command_timeout())),
        ("what_the_script_cannot_read_is_malformed_not_an_outage", || Box::pin(what_the_script_cannot_read_is_malformed_not_an_outage())),
        ("records_from_before_a_flushall_are_refused_by_the_new_gate_and_account", || {
            Box::pin(records_from_before_a_flushall_are_refused_by_the_new_gate_and_account())
        }),
    ];
    let runs: Vec<(String, Box<dyn FnOnce() + Send>)> = cases
        .iter()
        .map(|&(name, case)| {
            let body: Box<dyn FnOnce() + Send> = Box::new(move || {
                let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
                rt.block_on(case());
            });
            (name.to_owned(), body)
        })
        .collect();
    let unreachable = Trial::test("an_unreachable_redis_is_a_typed_error_at_connect", || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(an_unreachable_redis_is_a_typed_error_at_connect());
        Ok(())
    });
    let missing = installed().err();
    gateway_tests::redis_cases::run_gated(vec![unreachable], runs, missing.as_deref(), "install redis-server", |count| {
        format!("SKIPPED {count} Redis fault cases: {}", missing.as_deref().unwrap_or_default())
    })
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

async fn stopped_redis_fails_admission_at_once_degrades_records_and_recovers() {
    let mut server = own_server();
    let gates = RedisGates::new(connect(server.url()).await);
    let (key, p) = (GateKey::new("faults", "s1"), params());
    let entry = gates.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    assert_eq!(entry.verdict, Some(Verdict::Allowed));

    server.stop();
    let bound = COMMAND_TIMEOUT * 4;
    let admission = within(bound, gates.apply(&key, &p, GateOp::TryEnter)).await;
    assert!(unavailable(&admission), "admission must fail closed with a typed error: {admission:?}");
    let retry_after = within(bound, gates.retry_after(&[(key.clone(), p.clone())])).await;
    assert!(unavailable(&retry_after), "{retry_after:?}");
    let record = within(bound, gates.apply(&key, &p, GateOp::Failure { fence: entry.fence() })).await;
    assert!(unavailable(&record), "{record:?}");
    let record = within(bound, gates.apply(&key, &p, GateOp::Success { fence: entry.fence(), kind: SuccessKind::Real })).await;
    assert!(unavailable(&record), "{record:?}");
    assert_eq!(gates.connection().degraded_records(), 2, "each dropped record is counted");

    // Back on the same port, empty (no scripts, no state): the same client reconnects and
    // reloads its scripts on NOSCRIPT.
    assert!(server.spawn(), "redis-server restarts");
    let recovered = within(Duration::from_secs(15), async {
        loop {
            match gates.apply(&key, &p, GateOp::TryEnter).await {
                Ok(entry) => break entry,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    assert_eq!(recovered.verdict, Some(Verdict::Allowed));
    gates.apply(&key, &p, GateOp::Failure { fence: recovered.fence() }).await.unwrap();
    assert_eq!(gates.snapshot(&key).await.unwrap().failures, 1);
}

async fn script_flush_between_calls_recovers() {
    let server = own_server();
    let conn = connect(server.url()).await;
    let gates = RedisGates::new(conn.clone());
    let (key, p) = (GateKey::new("faults", "flush"), params());
    let entry = gates.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    let _: String = conn.pool().custom(fred::cmd!("SCRIPT"), vec!["FLUSH"]).await.unwrap();
    gates.apply(&key, &p, GateOp::Failure { fence: entry.fence() }).await.unwrap();
    let _: String = conn.pool().custom(fred::cmd!("SCRIPT"), vec!["FLUSH"]).await.unwrap();
    assert_eq!(gates.apply(&key, &p, GateOp::TryEnter).await.unwrap().verdict, Some(Verdict::Allowed));
    assert_eq!(gates.snapshot(&key).await.unwrap().failures, 1);
    assert_eq!(conn.degraded_records(), 0);
}

async fn a_hung_redis_is_bounded_by_the_command_timeout() {
    let server = own_server();
    let conn = connect(server.url()).await;
    let gates = RedisGates::new(conn.clone());
    let (key, p) = (GateKey::new("faults", "hung"), params());
    gates.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    // Another client freezes the server for two seconds.
    let pauser = connect(server.url()).await;
    let _: String = pauser.pool().custom(fred::cmd!("CLIENT"), vec!["PAUSE", "2000", "ALL"]).await.unwrap();
    let admission = within(COMMAND_TIMEOUT * 4, gates.apply(&key, &p, GateOp::TryEnter)).await;
    assert!(unavailable(&admission), "{admission:?}");
    let record = within(COMMAND_TIMEOUT * 4, gates.apply(&key, &p, GateOp::ForceOpen)).await;
    assert!(unavailable(&record), "{record:?}");
    assert_eq!(conn.degraded_records(), 1);
}

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

async fn what_the_script_cannot_read_is_malformed_not_an_outage() {
    let server = own_server();
    let conn = connect(server.url()).await;
    let gates = RedisGates::new(conn.clone());
    let p = params();
    let malformed = |result: &Result<gateway_core::Reply, GateError>| matches!(result, Err(GateError::Malformed { backend: "redis", .. }));
    // A gate key that holds a string: the script's HMGET fails (WRONGTYPE).
    let wrong_type = GateKey::new("faults", "wrongtype");
    let _: () = conn.pool().custom(fred::cmd!("SET"), vec!["gw:{faults}:gate:wrongtype", "x"]).await.unwrap();
    let admission = gates.apply(&wrong_type, &p, GateOp::TryEnter).await;
    assert!(malformed(&admission), "{admission:?}");
    // A state this build does not know: the script answers it, the reply's decoder refuses it.
    let unknown = GateKey::new("faults", "unknown");
    let _: i64 = conn.pool().custom(fred::cmd!("HSET"), vec!["gw:{faults}:gate:unknown", "state", "AJAR"]).await.unwrap();
    let admission = gates.apply(&unknown, &p, GateOp::TryEnter).await;
    assert!(malformed(&admission) && format!("{admission:?}").contains("AJAR"), "{admission:?}");
    // Neither is an unavailable Redis; a record Redis did not take is still counted as dropped
    // (and logged as the script's fault), as one it could not answer is.
    assert_eq!(conn.degraded_records(), 0, "admission is not a record");
    let record = gates.apply(&wrong_type, &p, GateOp::Failure { fence: gateway_core::breaker::Fence { incarnation: 1, epoch: 0 } }).await;
    assert!(malformed(&record), "{record:?}");
    assert_eq!(conn.degraded_records(), 1);
}

/// FLUSHALL empties Redis under a running gateway (as a restart without persistence, or a
/// failover to a replica that missed the writes, would): the gate and the quota account are
/// created again, epochs and permit ids starting afresh, and what was admitted before is fenced
/// by its incarnation although its epoch (0) and permit id (1) are the new ones'.
async fn records_from_before_a_flushall_are_refused_by_the_new_gate_and_account() {
    let server = own_server();
    let conn = connect(server.url()).await;
    let (gates, quota) = (RedisGates::new(conn.clone()), gateway_redis::RedisQuota::new(conn.clone()));
    let (key, p) = (GateKey::new("flush", "s1"), params());
    let limits = gateway_core::policy::QuotaLimits { max_concurrency: Some(4), rpm: None, tpm: None, permit_ttl: Duration::from_secs(60) };
    let before = gates.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    let granted = |d| match d {
        gateway_core::ports::QuotaDecision::Granted(permit) => permit,
        refused => panic!("refused: {refused:?}"),
    };
    let old_permit = granted(quota.acquire(&key, &limits, 10).await.unwrap());
    let _: () = conn.pool().flushall(false).await.unwrap();
    let after = gates.apply(&key, &p, GateOp::TryEnter).await.unwrap();
    assert_eq!((before.epoch, after.epoch), (0, 0), "epochs start again");
    assert_ne!(before.incarnation, after.incarnation, "the new gate is another incarnation");
    let new_permit = granted(quota.acquire(&key, &limits, 10).await.unwrap());
    assert_eq!((old_permit.id, new_permit.id), (1, 1), "permit ids start again");
    assert_ne!(old_permit.incarnation, new_permit.incarnation);
    // The records of the attempt admitted before the flush change nothing.
    for op in [GateOp::Failure { fence: before.fence() }, GateOp::Success { fence: before.fence(), kind: SuccessKind::Real }] {
        assert!(gates.apply(&key, &p, op).await.unwrap().fenced, "{op:?} was not fenced");
    }
    let gate = gates.snapshot(&key).await.unwrap();
    assert_eq!((gate.failures, gate.a0), (0, 0), "a stale record counted: {gate:?}");
    quota.release(&old_permit).await.unwrap();
    assert_eq!(quota.in_flight(&key).await.unwrap(), 1, "the old permit's release freed the new permit 1");
    // The new admission's records count.
    gates.apply(&key, &p, GateOp::Failure { fence: after.fence() }).await.unwrap();
    assert_eq!(gates.snapshot(&key).await.unwrap().failures, 1);
    quota.release(&new_permit).await.unwrap();
    assert_eq!(quota.in_flight(&key).await.unwrap(), 0);
}
