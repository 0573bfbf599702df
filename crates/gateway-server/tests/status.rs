//! The operator's view: `GET /v1/gateway/status` and the page `GET /ui`, behind the admin or
//! metrics key (Bearer, or a browser's Basic password), naming each gate state, each account's
//! learned limit against its ceiling, tenants and the last minute's outcomes; and the page in a
//! real browser (Debian's `chromium`, headless), whose DOM must name every state and whose
//! screenshot is kept under `target/ui/`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// Real loopback I/O and a browser process: waits are bounded by the wall clock.
#![allow(clippy::disallowed_methods)]

mod support;

use base64::Engine;
use gateway_core::breaker::GateOp;
use gateway_core::ports::{BreakerGate, SourceKey};
use serde_json::{Value, json};
use std::time::Duration;
use support::{KEY, Running, start_text};

const ADMIN: &str = "gw-admin-key-0123456789";
const METRICS: &str = "gw-metrics-key-0123456789";

/// A pool of two sources (one to be opened for ten minutes) and a scope whose one source will be
/// half-open; `keys` goes into `[server]`.
fn config(server: &str) -> String {
    format!(
        r#"
[server]
keepalive_s = 0.05
shutdown_grace_s = 0.5
{server}

[pool]
isolation = "per_tenant"
[pool.tenants]
gold = "gold"
[pool.tiers.gold]
weight = 4
[pool.breaker]
fail_threshold = 5
cooldown_s = 600
[pool.sources.up]
base_url = "{{root}}/mock/v1"
api_key = "sk-upstream-a"
model = "m"
[pool.sources.down]
base_url = "{{root}}/mock/v1"
api_key = "sk-upstream-b"
model = "m"

[probe]
[probe.breaker]
fail_threshold = 5
cooldown_s = 0.05
[probe.sources.half]
base_url = "{{root}}/mock/v1"
api_key = "sk-upstream-c"
model = "m"
"#
    )
}

/// The proxy on `config(server)` with `pool.down` OPEN for ten minutes, `probe.half` HALF_OPEN
/// (its probe out) and one call served by `pool` for tenant gold.
async fn three_states(server: &str) -> Running {
    let text = config(server);
    let (r, _) = start_text(&text, std::future::pending()).await;
    let (_, scopes) = support::load_text(&text.replace("{root}", &r.provider.root()));
    let params = |scope: usize, source: usize| scopes[scope].gate_params(source).unwrap();
    let (pool, probe) = (scopes.iter().position(|s| s.name == "pool").unwrap(), scopes.iter().position(|s| s.name == "probe").unwrap());
    r.gates.apply(&SourceKey::new("pool", "down"), &params(pool, 1), GateOp::ForceOpen).await.unwrap();
    r.gates.apply(&SourceKey::new("probe", "half"), &params(probe, 0), GateOp::ForceOpen).await.unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    r.gates.apply(&SourceKey::new("probe", "half"), &params(probe, 0), GateOp::TryEnter).await.unwrap();
    let answered = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", r.url))
        .json(&json!({"model": "pool", "messages": [{"role": "user", "content": "hi"}]}))
        .header("x-tenant-id", "gold")
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200, "{}", answered.text().await.unwrap());
    r
}

fn basic(password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("operator:{password}")))
}

async fn get(r: &Running, path: &str, authorization: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(format!("{}{path}", r.url));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    request.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_names_each_state_account_tenant_and_the_last_minute() {
    let keys = format!("admin_key = \"{ADMIN}\"\nmetrics_key = \"{METRICS}\"\n[server.api_keys.ops]\nkey = \"{KEY}\"");
    let r = three_states(&keys).await;
    let status: Value = get(&r, "/v1/gateway/status", Some(&format!("Bearer {ADMIN}"))).await.json().await.unwrap();
    let scope = |name: &str| status["scopes"].as_array().unwrap().iter().find(|s| s["scope"] == name).unwrap().clone();
    let (pool, probe) = (scope("pool"), scope("probe"));
    let state_of = |scope: &Value, source: &str, tenant: Value| {
        let sources = scope["sources"].as_array().unwrap();
        sources.iter().find(|s| s["source"] == source && s["tenant"] == tenant).unwrap().clone()
    };
    let down = state_of(&pool, "down", Value::Null);
    assert_eq!(down["state"], "OPEN");
    assert!(down["retry_after_s"].as_f64().unwrap() > 590.0, "{down}");
    assert_eq!(state_of(&pool, "up", Value::Null)["state"], "CLOSED");
    assert_eq!(state_of(&pool, "up", json!("gold"))["state"], "CLOSED", "gold's own partition");
    assert_eq!(state_of(&probe, "half", Value::Null)["state"], "HALF_OPEN");
    // The accounts: the learned limit against the scope's ceiling, nothing refused yet.
    let accounts = pool["accounts"].as_array().unwrap();
    assert!(!accounts.is_empty(), "{pool}");
    for account in accounts {
        assert!(account["limit"].as_f64().unwrap() >= 1.0 && account["limit"].as_f64() <= account["ceiling"].as_f64(), "{account}");
        assert_eq!(
            (account["learned_ceiling"].clone(), account["rate_limited"].clone()),
            (Value::Null, json!({"background": 0, "own": 0}))
        );
    }
    assert_eq!(pool["tenants"], json!([{"tenant": "gold", "weight": 4, "waiting": 0}]), "{pool}");
    assert_eq!(pool["waiting"], 0);
    // The last minute: one success in pool, nothing in probe.
    let classes = pool["recent"]["classes"].as_array().unwrap();
    assert_eq!(classes[0], "success");
    let total = |scope: &Value, class: usize| {
        scope["recent"]["buckets"].as_array().unwrap().iter().map(|b| b[class].as_u64().unwrap()).sum::<u64>()
    };
    assert_eq!((total(&pool, 0), total(&probe, 0)), (1, 0));
    assert_eq!(pool["recent"]["buckets"].as_array().unwrap().len(), 60);
    assert_eq!((status["config"]["reloads"].clone(), status["config"]["last_refused"].clone()), (json!(0), Value::Null));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_data_take_the_admin_or_metrics_key_only() {
    let keys = format!("admin_key = \"{ADMIN}\"\nmetrics_key = \"{METRICS}\"\n[server.api_keys.ops]\nkey = \"{KEY}\"");
    let (r, _) = start_text(&config(&keys), std::future::pending()).await;
    for path in ["/ui", "/v1/gateway/status"] {
        let refused = get(&r, path, None).await;
        assert_eq!(refused.status(), 401, "{path}");
        assert_eq!(refused.headers()["www-authenticate"], "Basic realm=\"gateway\", charset=\"UTF-8\"", "a browser asks for the key");
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["message"], format!("{path} needs the admin or metrics key (Authorization: Bearer <key>)"));
        for wrong in [format!("Bearer {KEY}"), basic("not-the-key"), "Basic !!!".to_owned()] {
            let response = get(&r, path, Some(&wrong)).await;
            assert_eq!(response.status(), 401, "{path} with {wrong}: a gateway key is not an operator's");
        }
        for right in [format!("Bearer {ADMIN}"), basic(ADMIN), format!("Bearer {METRICS}"), basic(METRICS)] {
            assert_eq!(get(&r, path, Some(&right)).await.status(), 200, "{path} with {right}");
        }
    }
    let page = get(&r, "/ui", Some(&basic(ADMIN))).await;
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("default-src 'self'"));
    assert!(page.text().await.unwrap().contains("<title>Gateway status</title>"));
    // Its stylesheet and script hold nothing of the gateway's: anyone may load them.
    assert_eq!(get(&r, "/ui/status.js", None).await.headers()["content-type"], "text/javascript; charset=utf-8");
    assert_eq!(get(&r, "/ui/status.css", None).await.headers()["content-type"], "text/css; charset=utf-8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_operator_keys_the_page_takes_a_gateway_key_not_bound_to_a_tenant() {
    let keys =
        format!("[server.api_keys.ops]\nkey = \"{KEY}\"\n[server.api_keys.acme]\nkey = \"{}\"\ntenant = \"acme\"", support::ACME_KEY);
    let (r, _) = start_text(&config(&keys), std::future::pending()).await;
    assert_eq!(get(&r, "/ui", Some(&basic(KEY))).await.status(), 200);
    let bound = get(&r, "/v1/gateway/status", Some(&format!("Bearer {}", support::ACME_KEY))).await;
    assert_eq!(bound.status(), 403, "a tenant's key would see every tenant");
    let body: Value = bound.json().await.unwrap();
    assert_eq!(body["error"]["message"], "a key bound to a tenant may not use /v1/gateway/status (it shows every tenant)");
}

/// Debian's chromium, if installed (`CHROMIUM` names another).
fn chromium() -> Option<std::path::PathBuf> {
    let named = std::env::var_os("CHROMIUM").map(std::path::PathBuf::from);
    named.into_iter().chain(["/usr/bin/chromium", "/usr/bin/chromium-browser"].map(Into::into)).find(|p| p.exists())
}

/// Runs the browser headless on `url` with `args`, killed after 60 s.
async fn browse(browser: &std::path::Path, args: &[&str], url: &str) -> String {
    let profile = tempdir();
    let run = tokio::process::Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--window-size=390,1500", "--virtual-time-budget=5000"])
        .args(args)
        .arg(url)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run).await.expect("the browser ended within 60 s").unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    assert!(output.status.success(), "chromium {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn tempdir() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gateway-ui-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_in_a_real_browser_names_every_state() {
    let Some(browser) = chromium() else {
        assert!(std::env::var_os("GATEWAY_BROWSER_REQUIRED").is_none(), "GATEWAY_BROWSER_REQUIRED is set and chromium is not installed");
        eprintln!("skipped: the browser test needs Debian's chromium (apt-get install chromium), or CHROMIUM=/path");
        return;
    };
    // No keys: the page is open, as on a loopback-only deployment (the keys are tested above).
    let r = three_states("").await;
    let url = format!("{}/ui", r.url);
    let dom = browse(&browser, &["--dump-dom"], &url).await;
    for state in ["CLOSED", "OPEN", "HALF_OPEN"] {
        assert!(dom.contains(&format!("state-{state}\">{state}</span>")), "the page names {state}: {dom}");
    }
    for shown in ["data-scope=\"pool\"", "data-scope=\"probe\"", "data-source=\"down\"", "data-source=\"half\"", "gold", "1 success"] {
        assert!(dom.contains(shown), "the page shows {shown}: {dom}");
    }
    assert!(!dom.contains("status unavailable"), "the data loaded: {dom}");
    let shots = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ui");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join("status.png");
    let _ = std::fs::remove_file(&shot);
    browse(&browser, &[&format!("--screenshot={}", shot.display())], &url).await;
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "a screenshot of the page at {}: {size} bytes", shot.display());
    eprintln!("screenshot: {} ({size} bytes)", shot.display());
}
