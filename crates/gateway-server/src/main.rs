//! `gateway-server --config gateway.toml`: the OpenAI-compatible governing proxy. Logs go to
//! stderr (`RUST_LOG` filters them); SIGTERM or Ctrl-C stops accepting and lets in-flight calls
//! finish within `server.shutdown_grace_s`. Calls still running then end with 503 and hand back
//! what they hold; the exit code is 3 when any were cut, 1 on a start-up error.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// An OpenAI-compatible proxy in front of the gateway's scopes.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The gateway config file: a `[server]` table and one table per scope.
    #[arg(long)]
    config: PathBuf,
    /// Overrides `server.listen`.
    #[arg(long)]
    listen: Option<String>,
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

async fn run(args: Args) -> Result<gateway_server::Served, String> {
    let (mut server, backend, scopes) = gateway_server::config::load_all(&args.config).map_err(|e| e.to_string())?;
    if let Some(listen) = args.listen {
        server.listen = listen;
    }
    if server.api_keys.is_empty() {
        tracing::warn!("no [server.api_keys]: every request is accepted without authentication");
    }
    let listen = server.listen.clone();
    let state = gateway_server::build_with(server, backend, scopes).await?;
    let listener = tokio::net::TcpListener::bind(&listen).await.map_err(|e| format!("server.listen: cannot listen on {listen}: {e}"))?;
    tracing::info!(listen = %listen, scopes = ?state.client.scope_names(), "gateway-server listening");
    gateway_server::serve(listener, state, shutdown_signal()).await.map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
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
