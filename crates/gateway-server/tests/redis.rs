//! The proxy's cases that need a live Redis: a shutdown that cuts a call holding leases in
//! Redis. `gateway_tests::redis_cases` runs them as `redis::<case>` where Redis answers at
//! `GATEWAY_REDIS_URL`, and otherwise reports them ignored (or failed, with
//! `GATEWAY_REDIS_REQUIRED=1`), never `ok`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// The real-socket tests bound their waits by the wall clock.
#![allow(clippy::disallowed_methods)]

mod support;

use gateway_core::breaker::GateOp;
use gateway_core::ports::{BreakerGate, SourceKey};
use gateway_tests::redis_cases;
use serde_json::json;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use support::KEY;

fn main() -> ExitCode {
    redis_cases::run(&[("a_shutdown_cut_leaves_no_lease_in_redis", |url| {
        multi_thread(2).block_on(a_shutdown_cut_leaves_no_lease_in_redis(url))
    })])
}

/// The runtime `#[tokio::test(flavor = "multi_thread", worker_threads = N)]` builds.
fn multi_thread(worker_threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(worker_threads).enable_all().build().expect("Failed building the Runtime")
}

async fn a_shutdown_cut_leaves_no_lease_in_redis(url: String) {
    let conn = gateway_redis::RedisConnection::connect(gateway_redis::RedisConfig { url, ..Default::default() }).await.unwrap();
    let scope = format!("cut{}", std::process::id());
    let (provider, _gate) = support::start_provider().await;
    let root = provider.root();
    let scopes = format!(
        "[{scope}.breaker]\nfail_threshold = 5\ncooldown_s = 0.05\n[{scope}.sources.cutmock]\nbase_url = \"{root}/mock/v1\"\nmodel = \"m\"\ntimeout_s = 30\nmax_concurrency = 4\n"
    );
    let (server, policies) = support::load_text(&support::custom_config(&root, "", &scopes));
    let policy = policies.iter().find(|p| p.name == scope).unwrap().clone();
    let gates = Arc::new(gateway_redis::RedisGates::new(conn.clone()));
    let quota = Arc::new(gateway_redis::RedisQuota::new(conn));
    let upstream = Arc::new(gateway_http::HttpUpstream::new(&policies).unwrap());
    let state = support::state_on(server, policies, gates.clone(), quota.clone(), upstream, Arc::new(gateway_client::TokioClock::new()));
    // Open the gate with a 50 ms cooldown, so that the slow call below holds the probe lease.
    let key = SourceKey::new(scope.as_str(), "cutmock");
    gates.apply(&key, &policy.gate_params(0).unwrap(), GateOp::ForceOpen).await.unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(gateway_server::serve(listener, state, async move {
        let _ = stopped.await;
    }));
    let body = json!({"model": scope, "messages": [{"role": "user", "content": "slow"}]});
    let call = tokio::spawn(async move {
        reqwest::Client::new().post(format!("{base}/v1/chat/completions")).bearer_auth(KEY).json(&body).send().await
    });
    let began = std::time::Instant::now();
    while quota.in_flight(&key).await.unwrap() == 0 && began.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(quota.in_flight(&key).await.unwrap(), 1, "the slow call holds a permit lease in Redis");
    assert!(gates.snapshot(&key).await.unwrap().probe_until.is_some(), "and the probe lease");
    stop.send(()).unwrap();
    let served = served.await.unwrap().unwrap();
    assert_eq!(served.cut, 1);
    assert_eq!(call.await.unwrap().unwrap().status(), 503);
    assert_eq!(quota.in_flight(&key).await.unwrap(), 0, "no permit lease left");
    assert!(gates.snapshot(&key).await.unwrap().probe_until.is_none(), "no probe lease left");
}
