//! The configuration loaded again without a restart: `POST /v1/gateway/reload` (the admin key),
//! a change to the file (`watch_config`) and `SIGHUP` to the binary. A reload swaps in the new
//! sources (a removed one stops being picked, a new one is), a refused one changes nothing and
//! says why (the response, `/readyz`, the status data, `llm_config_reload_total`), and a reload
//! under load loses no call.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// Real loopback I/O: waits are bounded by the wall clock.
#![allow(clippy::disallowed_methods)]

#[path = "support/capped.rs"]
mod capped;
mod support;

use base64::Engine as _;
use capped::{Capped, Caps};
use gateway_mock::MockServer;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ADMIN: &str = "gw-admin-key-0123456789";
const KEY: &str = "gw-test-key-0123456789";

/// A config of `sources` (name, with the mock's root) in scope `chat`, with the admin key.
fn config(root: &str, sources: &[&str], extra_server: &str) -> String {
    let mut text = format!(
        "[server]\nkeepalive_s = 0.05\nshutdown_grace_s = 0.5\nadmin_key = \"{ADMIN}\"\n{extra_server}\n[server.api_keys.ops]\nkey = \"{KEY}\"\n\n[chat]\n[chat.breaker]\nfail_threshold = 5\ncooldown_s = 60\n"
    );
    for source in sources {
        text.push_str(&format!(
            "[chat.sources.{source}]\nbase_url = \"{root}/mock/v1\"\napi_key = \"sk-{source}-upstream\"\nmodel = \"m\"\n"
        ));
    }
    text
}

fn temp_file(text: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gateway-reload-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    path
}

struct Proxy {
    url: String,
    root: String,
    path: PathBuf,
    state: Arc<gateway_server::AppState>,
    /// The gate the provider's `GATED` streams wait at.
    gate: gateway_mock::Gate,
    _provider: MockServer,
}

/// The proxy built from a file, as the binary builds it, in front of the `Echo` mock.
async fn start(sources: &[&str], extra_server: &str) -> Proxy {
    start_from(|root| config(root, sources, extra_server)).await
}

/// The proxy built from the file `text` writes for the mock's root.
async fn start_from(text: impl FnOnce(&str) -> String) -> Proxy {
    let (provider, gate) = support::start_provider().await;
    let root = provider.root();
    let path = temp_file(&text(&root));
    let (server, backend, scopes) = gateway_server::config::load_all(&path).unwrap();
    let state = Arc::new(gateway_server::build_state(server, backend, scopes).await.unwrap().from_file(&path));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway_server::serve(listener, state.clone(), std::future::pending()));
    Proxy { url, root, path, state, gate, _provider: provider }
}

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

async fn reload(p: &Proxy, key: &str) -> (u16, Value) {
    let response = http().post(format!("{}/v1/gateway/reload", p.url)).bearer_auth(key).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn served_by(url: &str) -> String {
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]});
    let response = http().post(format!("{url}/v1/chat/completions")).bearer_auth(KEY).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.headers()["x-gateway-source"].to_str().unwrap().to_owned()
}

async fn text(url: &str, key: Option<&str>) -> String {
    let mut request = http().get(url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap().text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_swaps_the_sources_and_a_removed_one_stops_being_picked() {
    let p = start(&["old"], "").await;
    assert_eq!(served_by(&p.url).await, "old");
    std::fs::write(&p.path, config(&p.root, &["fresh"], "")).unwrap();
    let (status, body) = reload(&p, ADMIN).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"reloaded": true, "kept": [], "added": ["chat.fresh"], "changed": [], "removed": ["chat.old"], "not_forgotten": [], "restart_needed": []})
    );
    for _ in 0..5 {
        assert_eq!(served_by(&p.url).await, "fresh", "the removed source is never picked");
    }
    let metrics = text(&format!("{}/metrics", p.url), Some(KEY)).await;
    assert!(metrics.contains("llm_config_reload_total{result=\"ok\"} 1"), "{metrics}");
    let status: Value = http().get(format!("{}/v1/gateway/status", p.url)).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
    assert_eq!((status["config"]["reloads"].clone(), status["config"]["last_refused"].clone()), (json!(1), Value::Null));
    // A [server] or [telemetry] change is reported, not applied: it needs a restart.
    std::fs::write(&p.path, config(&p.root, &["fresh"], "max_body_bytes = 2048")).unwrap();
    let (status, body) = reload(&p, ADMIN).await;
    assert_eq!((status, body["restart_needed"].clone(), body["kept"].clone()), (200, json!(["server"]), json!(["chat.fresh"])));
    std::fs::write(&p.path, config(&p.root, &["fresh"], "") + "\n[telemetry]\nrecord_contents = true\n").unwrap();
    let (status, body) = reload(&p, ADMIN).await;
    assert_eq!((status, body["restart_needed"].clone()), (200, json!(["telemetry"])));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reload_changes_nothing_and_says_why() {
    let p = start(&["old"], "").await;
    for (bad, why) in [
        (config(&p.root, &["old"], "").replace("fail_threshold = 5", "fail_threshold = 0"), "chat.breaker.fail_threshold"),
        (config(&p.root, &["old"], "").replace("model = \"m\"", "model = \"m\"\nbase_url = \"twice\""), "chat.sources.old"),
        ("[server\n".to_owned(), "gateway.toml"),
        (
            config(&p.root, &["old"], "").replace(&format!("base_url = \"{}/mock/v1\"", p.root), "base_url = \"ftp://nowhere\""),
            "chat.sources.old.base_url",
        ),
        // The key's own line broken: the refusal may not quote it.
        (config(&p.root, &["old"], "").replace("api_key = \"sk-old-upstream\"", "api_key = \"sk-old-upstream"), "gateway.toml"),
        (
            config(&p.root, &["old"], "").replace("api_key = \"sk-old-upstream\"", "api_key = [\"sk-old-upstream\"]"),
            "chat.sources.old.api_key",
        ),
    ] {
        std::fs::write(&p.path, &bad).unwrap();
        let (status, body) = reload(&p, ADMIN).await;
        assert_eq!(status, 422, "{body}");
        let message = body["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(why), "the refusal names {why}: {message}");
        assert!(!message.contains("sk-old-upstream"), "secrets hidden: {message}");
        assert_eq!(served_by(&p.url).await, "old", "the old configuration serves on");
        let ready = text(&format!("{}/readyz", p.url), None).await;
        assert!(ready.starts_with("ready\nlast configuration reload refused at "), "{ready}");
        assert!(
            !ready.contains("ftp://nowhere") && !ready.contains("sk-old-upstream"),
            "the open /readyz names the key, never a value: {ready}"
        );
        let status: Value =
            http().get(format!("{}/v1/gateway/status", p.url)).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
        assert!(status["config"]["last_refused"]["reason"].as_str().unwrap().contains(why), "{status}");
    }
    let metrics = text(&format!("{}/metrics", p.url), Some(KEY)).await;
    assert!(metrics.contains("llm_config_reload_total{result=\"refused\"} 6"), "{metrics}");
    assert!(metrics.contains("llm_config_reload_total{result=\"ok\"} 0"), "{metrics}");
    // Fixed, it takes, and the refusal is gone from /readyz.
    std::fs::write(&p.path, config(&p.root, &["old"], "")).unwrap();
    assert_eq!(reload(&p, ADMIN).await.0, 200);
    assert_eq!(text(&format!("{}/readyz", p.url), None).await, "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_admin_key_reloads_and_only_a_server_from_a_file() {
    let p = start(&["old"], "metrics_key = \"gw-metrics-key-0123456789\"").await;
    for key in [KEY, "gw-metrics-key-0123456789", "wrong"] {
        let (status, body) = reload(&p, key).await;
        assert_eq!(status, 401, "{key}: {body}");
        assert_eq!(body["error"]["message"], "invalid key: /v1/gateway/reload needs the admin key");
    }
    // A browser's stored Basic login rides along with any request to the origin, a cross-site
    // form's POST too: the reload takes the admin key as a Bearer token only.
    let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("operator:{ADMIN}")));
    let response = http().post(format!("{}/v1/gateway/reload", p.url)).header("authorization", basic).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(p.state.config_log.state().reloads, 0);
    // A state built without a file has nothing to load again.
    let (r, _) = support::start_custom(&format!("admin_key = \"{ADMIN}\""), "", std::future::pending()).await;
    let response = http().post(format!("{}/v1/gateway/reload", r.url)).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(response.status(), 409);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["message"], "this server was not started from a config file: there is nothing to load again");
    // Without an admin key the route is closed, whatever key is given.
    let (r, _) = support::start_custom("", "", std::future::pending()).await;
    let response = http().post(format!("{}/v1/gateway/reload", r.url)).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["message"], "/v1/gateway/reload needs server.admin_key, which is not set (SIGHUP reloads without it)");
}

/// The config of `start`'s `a` source, its key capped at one named tenant, per-tenant
/// isolation with `tenant_idle_s` = `idle`.
fn capped_tenants(root: &str, idle: &str) -> String {
    config(root, &["a"], "")
        .replace(&format!("key = \"{KEY}\"\n"), &format!("key = \"{KEY}\"\nmax_tenants = 1\n"))
        .replace("[chat]\n", &format!("[chat]\nisolation = \"per_tenant\"\ntenant_idle_s = {idle}\n"))
}

async fn named(url: &str, tenant: &str) -> u16 {
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]});
    let request = http().post(format!("{url}/v1/chat/completions")).bearer_auth(KEY).header("x-tenant-id", tenant);
    request.json(&body).send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_how_long_a_named_tenant_counts_against_its_key() {
    let p = start_from(|root| capped_tenants(root, "600")).await;
    assert_eq!(named(&p.url, "acme").await, 200);
    assert_eq!(named(&p.url, "globex").await, 429, "one tenant a key, acme still counts");
    std::fs::write(&p.path, capped_tenants(&p.root, "0.05")).unwrap();
    assert_eq!(reload(&p, ADMIN).await.0, 200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(named(&p.url, "globex").await, 200, "acme went unnamed past the reloaded tenant_idle_s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_loses_no_call() {
    let p = start(&["a", "b"], "").await;
    let url = p.url.clone();
    // Four callers, so that calls are in flight on the old sources at each swap; every one of
    // their 300 calls must be answered 200 (`served_by` asserts it).
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let mut served = Vec::new();
                for _ in 0..75 {
                    served.push(served_by(&url).await);
                }
                served
            })
        })
        .collect();
    for sources in [&["a", "c"][..], &["c"], &["c", "d"], &["a", "b"]] {
        tokio::time::sleep(Duration::from_millis(20)).await;
        std::fs::write(&p.path, config(&p.root, sources, "")).unwrap();
        assert_eq!(reload(&p, ADMIN).await.0, 200);
    }
    let mut served = Vec::new();
    for caller in callers {
        served.extend(caller.await.expect("a caller's call was not answered 200"));
    }
    assert!(served.iter().any(|s| s == "c"), "calls moved to the new sources");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_in_flight_is_not_cut_by_a_reload_that_removes_its_source() {
    let p = start(&["old"], "").await;
    let body = json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "GATED"}]});
    let mut stream = http().post(format!("{}/v1/chat/completions", p.url)).bearer_auth(KEY).json(&body).send().await.unwrap();
    assert_eq!(stream.headers()["x-gateway-source"], "old");
    let mut seen = String::new();
    // Its first chunk is out; the provider holds the rest at the gate.
    while !seen.contains("echo: ") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.chunk()).await.unwrap().unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    std::fs::write(&p.path, config(&p.root, &["new"], "")).unwrap();
    let (status, body) = reload(&p, ADMIN).await;
    assert_eq!((status, body["removed"].clone()), (200, json!(["chat.old"])));
    assert_eq!(served_by(&p.url).await, "new", "new calls go to the new source");
    p.gate.release_one();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), stream.chunk()).await.unwrap().unwrap() {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.ends_with("data: [DONE]\n\n"), "the stream ended whole on the old configuration: {seen}");
    assert!(seen.contains("GATED"), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_to_the_file_reloads_it_when_watched() {
    let p = start(&["old"], "watch_config = true").await;
    let _watcher = gateway_server::reload::watch(p.state.clone()).unwrap();
    std::fs::write(&p.path, config(&p.root, &["new"], "watch_config = true")).unwrap();
    let began = Instant::now();
    while p.state.config_log.state().reloads == 0 {
        assert!(began.elapsed() < Duration::from_secs(10), "the change was seen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(served_by(&p.url).await, "new");
    // A file replaced by a rename (an editor, a ConfigMap) is seen too.
    let replacement = p.path.with_extension("tmp");
    std::fs::write(&replacement, config(&p.root, &["newer"], "watch_config = true")).unwrap();
    std::fs::rename(&replacement, &p.path).unwrap();
    while p.state.config_log.state().reloads < 2 {
        assert!(began.elapsed() < Duration::from_secs(20), "the rename was seen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(served_by(&p.url).await, "newer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_binary() {
    let (provider, _) = support::start_provider().await;
    let root = provider.root();
    let caps = Caps { memory_kib: 4 * 1024 * 1024, fds: None };
    let proxy =
        Capped::start(|port| config(&root, &["old"], &format!("listen = \"127.0.0.1:{port}\"")), &caps, std::process::Stdio::null()).await;
    assert_eq!(served_by(&proxy.base).await, "old");
    let port = proxy.base.rsplit(':').next().unwrap().to_owned();
    std::fs::write(proxy.config_path(), config(&root, &["new"], &format!("listen = \"127.0.0.1:{port}\""))).unwrap();
    let hup = std::process::Command::new("kill").args(["-HUP", &proxy.pid().to_string()]).status().unwrap();
    assert!(hup.success());
    let began = Instant::now();
    loop {
        let status: Value =
            http().get(format!("{}/v1/gateway/status", proxy.base)).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
        if status["config"]["reloads"] == 1 {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(10), "SIGHUP reloaded: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(served_by(&proxy.base).await, "new");
}
