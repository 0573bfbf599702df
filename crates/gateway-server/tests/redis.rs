//! The proxy's cases that need a live Redis: a shutdown that cuts a call holding leases in
//! Redis; two proxies sharing the affinity map, a chain's turns on either going to its first
//! turn's source. `gateway_tests::redis_cases` runs them as `redis::<case>` where Redis answers at
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
    redis_cases::run(&[
        ("a_shutdown_cut_leaves_no_lease_in_redis", |url| multi_thread(2).block_on(a_shutdown_cut_leaves_no_lease_in_redis(url))),
        ("two_proxies_on_redis_keep_a_chain_on_its_first_source", |url| {
            multi_thread(2).block_on(two_proxies_on_redis_keep_a_chain_on_its_first_source(url))
        }),
        ("a_place_freed_in_one_proxy_wakes_the_call_waiting_in_the_other", |url| {
            multi_thread(2).block_on(a_place_freed_in_one_proxy_wakes_the_call_waiting_in_the_other(url))
        }),
    ])
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

/// A proxy process on `url`'s Redis in front of `root`'s Surface (sources a, b, c), its root URL.
async fn proxy_on_redis(url: &str, root: &str) -> String {
    let scopes = support::surface_scope("chain", "", &[("a", "a"), ("b", "b"), ("c", "c")]).replace("{root}", root);
    let text =
        format!("[server]\naffinity_ttl_s = 300\n[server.api_keys.ops]\nkey = \"{KEY}\"\n[backend]\nredis_url = \"{url}\"\n{scopes}");
    let path = std::env::temp_dir().join(format!("gateway-redis-proxy-{}-{}.toml", std::process::id(), rand_suffix()));
    std::fs::write(&path, text).unwrap();
    let (server, backend, scopes) = gateway_server::config::load_all(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let state = gateway_server::build_with(server, backend, scopes).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway_server::serve(listener, state, std::future::pending()));
    base
}

fn rand_suffix() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::process::id())
}

async fn two_proxies_on_redis_keep_a_chain_on_its_first_source(url: String) {
    let surface = Arc::new(gateway_mock::Surface::tagged(&format!("t{:x}x", rand_suffix() & 0xffff_ffff)));
    let provider = gateway_mock::MockServer::start(surface).await.unwrap();
    let (one, two) = (proxy_on_redis(&url, &provider.root()).await, proxy_on_redis(&url, &provider.root()).await);
    let post = |base: String, body: serde_json::Value| async move {
        let response = reqwest::Client::new().post(format!("{base}/v1/responses")).bearer_auth(KEY).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let source = response.headers()["x-gateway-source"].to_str().unwrap().to_owned();
        (source, response.json::<serde_json::Value>().await.unwrap())
    };
    let (home, first) = post(one.clone(), json!({"model": "chain", "input": "one"})).await;
    let mut previous = first["id"].as_str().unwrap().to_owned();
    for (turn, base) in [(2, &two), (3, &one), (4, &two)] {
        let (source, next) = post(base.clone(), json!({"model": "chain", "input": "on", "previous_response_id": previous})).await;
        assert_eq!(source, home, "turn {turn}, through the other process too, on the first turn's source");
        let text = next["output"][0]["content"][0]["text"].as_str().unwrap().to_owned();
        assert_eq!(text, format!("echo: on (turn {turn})"));
        previous = next["id"].as_str().unwrap().to_owned();
    }
    let read = reqwest::Client::new().get(format!("{two}/v1/responses/{previous}")).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(read.status(), 200, "the other process finds a stored response's source");
}

/// Two proxies on one Redis share an account of one place (concurrency 1), whose answers take
/// 300 ms; their waiters poll only every 5 s. The first proxy's call takes the place; the second
/// proxy's call, sent 50 ms later, waits for it. When the first call ends, its proxy has nobody
/// waiting, so its settle tells the other: the waiting call is admitted at once, not at its
/// poll (5 s later).
async fn a_place_freed_in_one_proxy_wakes_the_call_waiting_in_the_other(url: String) {
    let provider = gateway_mock::MockServer::answering(|_| {
        gateway_mock::Answer::json(200, &gateway_mock::openai::completion("ok")).after(Duration::from_millis(300))
    })
    .await
    .unwrap();
    let scope = format!("woken{:x}", rand_suffix() & 0xffff_ffff);
    let text = format!(
        "[server.api_keys.ops]\nkey = \"{KEY}\"\n[backend]\nredis_url = \"{url}\"\n\
         [{scope}]\nconcurrency = 1\npoll_interval_s = 5\n[{scope}.breaker]\nfail_threshold = 5\ncooldown_s = 60\n\
         [{scope}.sources.one]\nbase_url = \"{}\"\nmodel = \"m\"\ntimeout_s = 30\n",
        provider.base_url()
    );
    let mut bases = Vec::new();
    for n in 0..2 {
        let path = std::env::temp_dir().join(format!("gateway-redis-woken-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, &text).unwrap();
        let (server, backend, scopes) = gateway_server::config::load_all(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let state = gateway_server::build_with(server, backend, scopes).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        bases.push(format!("http://{}", listener.local_addr().unwrap()));
        tokio::spawn(gateway_server::serve(listener, state, std::future::pending()));
    }
    // Let both subscribers subscribe.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let call = |base: String, scope: String| async move {
        let began = std::time::Instant::now();
        let body = json!({"model": scope, "messages": [{"role": "user", "content": "hi"}]});
        let response =
            reqwest::Client::new().post(format!("{base}/v1/chat/completions")).bearer_auth(KEY).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        began.elapsed()
    };
    let first = tokio::spawn(call(bases[0].clone(), scope.clone()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = call(bases[1].clone(), scope.clone()).await;
    let first = first.await.unwrap();
    assert!(first < Duration::from_millis(1_000), "the first call had the place at once: {first:?}");
    assert!(
        second < Duration::from_millis(1_500),
        "the second waited for the first's 300 ms and its own, not for its 5 s poll: {second:?}"
    );
}
