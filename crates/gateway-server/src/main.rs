//! `gateway-server --config gateway.toml`: the OpenAI-compatible governing proxy. Logs go to
//! stderr (`RUST_LOG` filters them); SIGTERM or Ctrl-C stops accepting and lets in-flight calls
//! finish within `server.shutdown_grace_s`. Calls still running then end with 503 and hand back
//! what they hold; the exit code is 3 when any were cut, 1 on a start-up error.
//!
//! `SIGHUP` loads the config file again (so does `POST /v1/gateway/reload` with the admin key,
//! and a change to the file with `server.watch_config`): a refused one changes nothing.
//!
//! `gateway-server --healthcheck 127.0.0.1:8080` asks a running proxy's `/healthz` and exits 0
//! when it answers 200 within 3 s, else 1: a container's `HEALTHCHECK` without curl in the image.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// mimalloc, not glibc's malloc: a request's buffers are allocated on one worker and freed on
/// another, and glibc's arena locks made a fifth of the proxy's CPU at 64 clients (PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An OpenAI-compatible proxy in front of the gateway's scopes.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The gateway config file: a `[server]` table and one table per scope.
    #[arg(long, required_unless_present = "healthcheck")]
    config: Option<PathBuf>,
    /// Overrides `server.listen`.
    #[arg(long)]
    listen: Option<String>,
    /// Asks the proxy listening at this address (`host:port`) whether it is healthy, instead of
    /// serving: exit 0 when `/healthz` answers 200 within 3 s.
    #[arg(long, value_name = "ADDRESS")]
    healthcheck: Option<String>,
}

/// Whether the proxy at `address` answers `GET /healthz` with 200 within 3 s.
async fn healthy(address: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: healthcheck\r\nconnection: close\r\n\r\n").await.ok()?;
        let mut status = [0u8; 12];
        stream.read_exact(&mut status).await.ok()?;
        Some(&status == b"HTTP/1.1 200")
    };
    matches!(tokio::time::timeout(std::time::Duration::from_secs(3), ask).await, Ok(Some(true)))
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Why the proxy did not start, or stopped with an error.
#[derive(Debug, thiserror::Error)]
enum RunError {
    /// The config file (its key named).
    #[error(transparent)]
    Config(#[from] gateway_server::config::ConfigError),
    /// The state cannot be built from it (its key named).
    #[error(transparent)]
    Build(#[from] gateway_server::BuildError),
    /// `server.listen` (or `--listen`) cannot be listened on.
    #[error("server.listen: cannot listen on {address}: {source}")]
    Listen { address: String, source: std::io::Error },
    /// Serving failed (its message names the key when it is one).
    #[error(transparent)]
    Serve(std::io::Error),
    /// `server.watch_config` cannot watch the file.
    #[error(transparent)]
    Watch(#[from] gateway_server::reload::ReloadError),
}

async fn run(config: &std::path::Path, listen: Option<String>) -> Result<gateway_server::Served, RunError> {
    let (mut server, backend, scopes) = gateway_server::config::load_all(config)?;
    if let Some(listen) = listen {
        server.listen = listen;
    }
    if server.api_keys.is_empty() {
        tracing::warn!("no [server.api_keys]: every request is accepted without authentication");
    }
    let listen = server.listen.clone();
    let watch_config = server.watch_config;
    let state = Arc::new(gateway_server::build_state(server, backend, scopes).await?.from_file(config));
    // SIGHUP and a change to the file (with `watch_config`) load it again.
    #[cfg(unix)]
    gateway_server::reload::on_hangup(state.clone()).map_err(RunError::Serve)?;
    let _watcher = if watch_config { Some(gateway_server::reload::watch(state.clone())?) } else { None };
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(listener) => listener,
        Err(source) => return Err(RunError::Listen { address: listen, source }),
    };
    tracing::info!(listen = %listen, scopes = ?state.client.scope_names(), "gateway-server listening");
    gateway_server::serve(listener, state, shutdown_signal()).await.map_err(RunError::Serve)
}

/// Logs to stderr (`RUST_LOG`), and with traces on (`[telemetry]`, or the OTLP endpoint
/// variables) the calls' spans to the collector: the provider to shut down at the end.
fn logging(
    telemetry: &gateway_server::config::TelemetryConfig,
    runtime: &tokio::runtime::Handle,
) -> Result<Option<opentelemetry_sdk::trace::SdkTracerProvider>, gateway_server::traces::TracesError> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(filter);
    let var = |name: &str| std::env::var(name).ok();
    if !telemetry.traces_on(var) {
        tracing_subscriber::registry().with(log).init();
        return Ok(None);
    }
    let http = gateway_server::traces::OtlpHttp::new(runtime.clone(), std::time::Duration::from_secs(10))?;
    let provider = gateway_server::traces::provider(telemetry, http, var)?;
    // Only the calls' spans are exported (their `tracing` target is the client's).
    let spans = gateway_server::traces::layer(&provider)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| meta.is_span() && meta.target().starts_with("gateway_client")));
    tracing_subscriber::registry().with(log).with(spans).init();
    Ok(Some(provider))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(address) = &args.healthcheck {
        return if runtime.block_on(healthy(address)) { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    // Clap requires `--config` without `--healthcheck`.
    let Some(config) = args.config else { return ExitCode::FAILURE };
    // The traces' settings come before logging starts; a file that does not load is reported
    // by `run`, with logging on.
    let telemetry = gateway_server::config::load_all(&config).map(|(server, _, _)| server.telemetry).unwrap_or_default();
    let provider = match logging(&telemetry, runtime.handle()) {
        Ok(provider) => provider,
        Err(e) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("gateway-server: {e}");
            }
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(run(&config, args.listen));
    // The last spans go out before the runtime their exports run on ends.
    if let Some(provider) = provider
        && let Err(e) = provider.shutdown()
    {
        tracing::warn!("traces: the last batch was not exported: {e}");
    }
    match served {
        Ok(gateway_server::Served { cut: 0 }) => ExitCode::SUCCESS,
        Ok(gateway_server::Served { cut }) => {
            tracing::warn!(cut, "shut down; calls still running at the deadline were ended with 503");
            ExitCode::from(3)
        }
        Err(message) => {
            tracing::error!("{message}");
            #[allow(clippy::print_stderr)]
            {
                eprintln!("gateway-server: {message}");
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{RunError, healthy, run};

    #[tokio::test(flavor = "multi_thread")]
    async fn each_start_up_error_names_its_key_or_file() {
        let config = std::env::temp_dir().join(format!("gateway-server-main-{}.toml", std::process::id()));
        let _ = std::fs::remove_file(&config);
        let e = run(&config, None).await.err().unwrap();
        assert!(matches!(e, RunError::Config(_)) && e.to_string().ends_with("(TOML file): file not found"), "{e:?}");
        std::fs::write(&config, "[chat.breaker]\nfail_threshold = 5\ncooldown_s = 60\n[chat.sources.s1]\nmodel = \"m\"\n").unwrap();
        let e = run(&config, None).await.err().unwrap();
        assert!(matches!(e, RunError::Build(_)) && e.to_string() == "chat.sources.s1.base_url: required key is missing", "{e:?}");
        std::fs::write(
            &config,
            "[chat.breaker]\nfail_threshold = 5\ncooldown_s = 60\n[chat.sources.s1]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
        )
        .unwrap();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = taken.local_addr().unwrap().to_string();
        let e = run(&config, Some(address.clone())).await.err().unwrap();
        assert!(matches!(&e, RunError::Listen { address: a, .. } if *a == address), "{e:?}");
        assert!(e.to_string().starts_with(&format!("server.listen: cannot listen on {address}: ")), "{e}");
        std::fs::write(&config, format!("[server]\nmetrics_listen = \"{address}\"\n[chat.breaker]\nfail_threshold = 5\ncooldown_s = 60\n[chat.sources.s1]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n")).unwrap();
        let e = run(&config, Some("127.0.0.1:0".to_owned())).await.err().unwrap();
        assert!(matches!(e, RunError::Serve(_)), "{e:?}");
        assert!(e.to_string().starts_with(&format!("server.metrics_listen: cannot listen on {address}: ")), "{e}");
        let _ = std::fs::remove_file(&config);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_healthcheck_says_whether_healthz_answers_200() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let config = std::env::temp_dir().join(format!("gateway-server-health-{}.toml", std::process::id()));
        std::fs::write(
            &config,
            "[chat.breaker]\nfail_threshold = 5\ncooldown_s = 60\n[chat.sources.s1]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
        )
        .unwrap();
        let (server, backend, scopes) = gateway_server::config::load_all(&config).unwrap();
        let _ = std::fs::remove_file(&config);
        let state = gateway_server::build_with(server, backend, scopes).await.unwrap();
        tokio::spawn(gateway_server::serve(listener, state, std::future::pending()));
        assert!(healthy(&address).await, "a serving proxy is healthy");
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
        assert!(!healthy(&closed).await, "nothing listening is not healthy");
    }
}
