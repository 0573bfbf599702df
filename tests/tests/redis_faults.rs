//! Redis faults, on a Redis server of the test's own (started on a free loopback port, so the
//! shared one is never disturbed): stopped → admission fails at once with `BackendUnavailable`
//! and records degrade quietly; back → the same client works again (its scripts reloaded on
//! NOSCRIPT); SCRIPT FLUSH between calls → recovers; a hung server → bounded by the command
//! timeout; a gate key holding something the script cannot read → `Malformed`, never an outage;
//! FLUSHALL → the new gates and accounts refuse the old records; CLIENT PAUSE → a call whose
//! attempt succeeds waits for no record, and with `on_unavailable = "local"` for at most one
//! command timeout in all;
//! a `local` gateway started before its Redis serves locally, then on Redis.
//! Where `redis-server` is not installed the cases are reported ignored, with the reason (never
//! `ok`), or failed with `GATEWAY_REDIS_REQUIRED=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fred::prelude::ClientLike;
use gateway_core::breaker::{GateOp, GateParams, SuccessKind, Verdict};
use gateway_core::policy::BreakerConfig;
use gateway_core::ports::{BackendError, BreakerGate, QuotaGate, SourceKey};
use gateway_memory::backstop::{Backstop, BackstopGates, BackstopPacer, BackstopQuota, OnUnavailable};
use gateway_redis::{RedisConfig, RedisConnection, RedisGates};
use gateway_sim::fault::OwnRedis;
use libtest_mimic::Trial;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

const COMMAND_TIMEOUT: Duration = Duration::from_millis(250);

/// Whether `redis-server` can be run here.
fn installed() -> Result<(), String> {
    match Command::new("redis-server").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("redis-server --version exited with {status}")),
        Err(e) => Err(format!("redis-server is not installed ({e})")),
    }
}

/// A Redis of the test's own (the soak's, which injects its faults into one).
fn own_server() -> OwnRedis {
    OwnRedis::start().unwrap_or_else(|e| panic!("{e}"))
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
        ("a_pause_during_the_attempt_delays_no_answer_records_go_on_in_the_background", || {
            Box::pin(a_pause_during_the_attempt_delays_no_answer_records_go_on_in_the_background())
        }),
        ("during_a_pause_a_local_call_waits_one_command_timeout_at_most", || {
            Box::pin(during_a_pause_a_local_call_waits_one_command_timeout_at_most())
        }),
        ("a_local_gateway_started_before_its_redis_serves_locally_then_on_redis", || {
            Box::pin(a_local_gateway_started_before_its_redis_serves_locally_then_on_redis())
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

fn unavailable(result: &Result<impl std::fmt::Debug, BackendError>) -> bool {
    matches!(result, Err(BackendError::BackendUnavailable { backend: "redis", .. }))
}

/// Runs `op` and asserts it ends within `bound` (real time: this is about not hanging).
async fn within<T>(bound: Duration, op: impl Future<Output = T>) -> T {
    tokio::time::timeout(bound, op).await.expect("the operation hung past its bound")
}

async fn stopped_redis_fails_admission_at_once_degrades_records_and_recovers() {
    let mut server = own_server();
    let gates = RedisGates::new(connect(server.url()).await);
    let (key, p) = (SourceKey::new("faults", "s1"), params());
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
    server.spawn().expect("redis-server restarts");
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
    let (key, p) = (SourceKey::new("faults", "flush"), params());
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
    let (key, p) = (SourceKey::new("faults", "hung"), params());
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
    assert!(matches!(error, BackendError::BackendUnavailable { backend: "redis", .. }), "{text}");
    assert!(text.contains(&format!("redis://127.0.0.1:{port}")) && !text.contains("secret"), "{text}");
}

async fn what_the_script_cannot_read_is_malformed_not_an_outage() {
    let server = own_server();
    let conn = connect(server.url()).await;
    let gates = RedisGates::new(conn.clone());
    let p = params();
    let malformed =
        |result: &Result<gateway_core::Reply, BackendError>| matches!(result, Err(BackendError::Malformed { backend: "redis", .. }));
    // A gate key that holds a string: the script's HMGET fails (WRONGTYPE).
    let wrong_type = SourceKey::new("faults", "wrongtype");
    let _: () = conn.pool().custom(fred::cmd!("SET"), vec!["gw:{faults}:gate:wrongtype", "x"]).await.unwrap();
    let admission = gates.apply(&wrong_type, &p, GateOp::TryEnter).await;
    assert!(malformed(&admission), "{admission:?}");
    // A state this build does not know: the script answers it, the reply's decoder refuses it.
    let unknown = SourceKey::new("faults", "unknown");
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
    let (key, p) = (SourceKey::new("flush", "s1"), params());
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

/// The attempt of the pause cases: this long, answered with a usable chat answer.
const ATTEMPT: Duration = Duration::from_millis(100);

/// An upstream whose every attempt takes `ATTEMPT` and succeeds; with `pause`, it first pauses
/// the Redis of the test (`CLIENT PAUSE 3000`): the call's records meet a hung Redis.
struct Answering {
    pause: Option<u16>,
}

#[async_trait::async_trait]
impl gateway_core::ports::Upstream for Answering {
    async fn send(&self, _source: &str, _request: &gateway_core::request::Request) -> gateway_core::request::Attempt {
        if let Some(port) = self.pause {
            pause(port);
        }
        tokio::time::sleep(ATTEMPT).await;
        gateway_core::request::Attempt::success(gateway_core::request::Response::chat_text("ok", None), "ok")
    }
}

fn pause(port: u16) {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(b"*3\r\n$6\r\nCLIENT\r\n$5\r\nPAUSE\r\n$4\r\n3000\r\n").unwrap();
    let mut reply = [0u8; 16];
    let n = std::io::Read::read(&mut stream, &mut reply).unwrap();
    assert!(reply[..n].starts_with(b"+OK"), "CLIENT PAUSE: {:?}", String::from_utf8_lossy(&reply[..n]));
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// A client of one paced, quota-limited source on the Redis at `url`, behind a backstop in
/// `mode`; `pause`: its upstream pauses that Redis during the attempt.
async fn paused_client(url: &str, mode: OnUnavailable, pause: bool) -> (gateway_client::GatewayClient, Arc<Backstop>) {
    let scope = format!("pause{}", std::process::id());
    let toml = format!(
        "[{scope}.breaker]\nfail_threshold = 5\ncooldown_s = 60\n[{scope}.sources.s1]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\ntimeout_s = 30\nmax_concurrency = 4\nrpm = 1000\n"
    );
    let path = std::env::temp_dir().join(format!("gateway-pause-{scope}-{}.toml", u8::from(pause)));
    std::fs::write(&path, toml).unwrap();
    let policies = gateway_client::config::Loader::new().file(&path).load().unwrap();
    let _ = std::fs::remove_file(&path);
    let config = RedisConfig {
        url: url.to_owned(),
        command_timeout: COMMAND_TIMEOUT,
        connect_lazily: mode == OnUnavailable::Local,
        ..RedisConfig::default()
    };
    let conn = RedisConnection::connect(config).await.unwrap();
    let clock: Arc<dyn gateway_core::time::Clock> = Arc::new(gateway_client::TokioClock::new());
    let backstop = Backstop::new(mode, clock.clone(), gateway_memory::backstop::RETRY_EVERY);
    let client = gateway_client::GatewayClient::builder()
        .scopes(policies)
        .gates(Arc::new(BackstopGates::new(Arc::new(RedisGates::new(conn.clone())), backstop.clone())))
        .quota(Arc::new(BackstopQuota::new(Arc::new(gateway_redis::RedisQuota::new(conn.clone())), backstop.clone())))
        .pacer(Arc::new(BackstopPacer::new(Arc::new(gateway_redis::RedisPacer::new(conn)), backstop.clone())))
        .upstream(Arc::new(Answering { pause: pause.then(|| port_of(url)) }))
        .clock(clock)
        .build()
        .unwrap();
    (client, backstop)
}

async fn call(client: &gateway_client::GatewayClient) -> Result<gateway_core::request::Response, gateway_client::CallError> {
    let scope = client.scope_names().remove(0);
    client.call(&scope, &gateway_core::request::Request::chat(vec![gateway_core::request::Message::user("hi")])).await
}

// The pause cases bound real waits by the wall clock: they are about not waiting for Redis.
#[allow(clippy::disallowed_methods)]
async fn a_pause_during_the_attempt_delays_no_answer_records_go_on_in_the_background() {
    let server = own_server();
    let (client, _) = paused_client(&server.url(), OnUnavailable::FailClosed, true).await;
    let began = std::time::Instant::now();
    call(&client).await.expect("the attempt succeeds");
    let took = began.elapsed();
    // Before records went off the answer's path, its three records (the pacer's release, the
    // gate's success, the permit's release) each waited out the command timeout: 0.85 s.
    assert!(took < ATTEMPT + COMMAND_TIMEOUT, "the call took {took:?}: it waited for its records");
    // The records end in the background (they wait for Redis, at most RECORD_WAIT) within the
    // client's bound on a record's time.
    within(gateway_client::RECORD_TIMEOUT + Duration::from_secs(1), client.released()).await;
}

#[allow(clippy::disallowed_methods)]
async fn during_a_pause_a_local_call_waits_one_command_timeout_at_most() {
    let server = own_server();
    let (client, backstop) = paused_client(&server.url(), OnUnavailable::Local, false).await;
    call(&client).await.expect("Redis answers");
    pause(port_of(&server.url()));
    let began = std::time::Instant::now();
    call(&client).await.expect("served on the process's own state");
    let took = began.elapsed();
    // The first question Redis cannot answer waits out one command timeout; the backstop then
    // knows, and the rest of the call (the gate, the quota, its records) does not ask Redis.
    assert!(took < ATTEMPT + COMMAND_TIMEOUT + Duration::from_millis(100), "the call took {took:?}");
    assert!(backstop.is_degraded());
    let began = std::time::Instant::now();
    call(&client).await.expect("served on the process's own state");
    assert!(began.elapsed() < ATTEMPT + Duration::from_millis(100), "a later call waited {:?} for Redis", began.elapsed());
    assert!(backstop.stats().local_admissions >= 2);
}

#[allow(clippy::disallowed_methods)]
async fn a_local_gateway_started_before_its_redis_serves_locally_then_on_redis() {
    let mut server = own_server();
    let url = server.url();
    server.stop();
    let (client, backstop) = within(Duration::from_secs(5), paused_client(&url, OnUnavailable::Local, false)).await;
    call(&client).await.expect("served on the process's own state while Redis is away");
    assert!(backstop.is_degraded());
    server.spawn().expect("redis-server starts");
    // The pool connects in the background (its reconnection back-off: at most 2 s) and the
    // backstop asks again every 200 ms: the client is back on Redis within a few seconds.
    let began = std::time::Instant::now();
    while backstop.is_degraded() && began.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        call(&client).await.expect("served all along");
    }
    assert!(!backstop.is_degraded(), "still degraded 10 s after Redis started");
    call(&client).await.expect("served on Redis");
    let conn = connect(url).await;
    let keys: Vec<String> = conn.pool().custom(fred::cmd!("KEYS"), vec!["gw:*"]).await.unwrap();
    assert!(keys.iter().any(|k| k.contains(":gate:s1")), "the calls are recorded on Redis again: {keys:?}");
    // A fail-closed gateway does not start without its Redis.
    server.stop();
    let config = RedisConfig { url: server.url(), connect_timeout: Duration::from_millis(300), ..RedisConfig::default() };
    assert!(matches!(RedisConnection::connect(config).await, Err(BackendError::BackendUnavailable { .. })));
}
