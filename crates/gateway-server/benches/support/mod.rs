//! What the proxy benchmarks share: the proxy on loopback in front of a mock provider (each
//! bench serves its own with gateway-mock).

/// The allocator the `gateway-server` binary runs with: a bench in this process measures the
/// proxy as deployed (both paths of a row share it).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A gateway-server with one scope `chat` whose one source `mock` is `provider` (plus the
/// source keys of `extra`, TOML lines); its root URL.
pub async fn proxy(provider: &str, extra: &str) -> String {
    let path = std::env::temp_dir().join(format!("gateway-bench-{}-{}.toml", std::process::id(), extra.len()));
    let config = format!(
        "[chat.breaker]\nfail_threshold = 5\ncooldown_s = 60\n[chat.sources.mock]\nbase_url = \"{provider}/v1\"\nmodel = \"m\"\ntimeout_s = 30\n{extra}"
    );
    std::fs::write(&path, config).unwrap();
    let (server, scopes) = gateway_server::config::load(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let state = gateway_server::build(server, scopes).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let root = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway_server::serve(listener, state, std::future::pending()));
    root
}
