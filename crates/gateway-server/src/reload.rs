//! The configuration loaded again without a restart: on `SIGHUP`, `POST /v1/gateway/reload`
//! (the admin key) or a change to the file (`server.watch_config`). The file is loaded and
//! checked whole, the new sources' upstream built, and only then is anything swapped
//! ([`GatewayClient::reload_with`](gateway_client::GatewayClient::reload_with): calls in flight
//! finish on the configuration they started with; each unchanged source keeps its gate, health
//! and account). A refused reload changes nothing: its reason (the key named, secrets hidden)
//! is logged, shown in `/readyz`'s detail and on the status page, and counted in
//! `llm_config_reload_total{result="refused"}`.
//!
//! The scopes reload; `[server]` and `[backend]` (the listener, keys, limits, Redis) are read at
//! the start: a reload that changes them applies its scopes and says which need a restart.

use crate::AppState;
use crate::config::{ConfigError, load_all};
use gateway_client::Reloaded;
use sha2::Digest;
use std::sync::Arc;
use std::time::Duration;

/// What a reload did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Reload {
    /// The sources kept, added, changed and removed.
    #[serde(flatten)]
    pub sources: Reloaded,
    /// Tables that changed but are read only at the start (`server`, `backend`).
    pub restart_needed: Vec<&'static str>,
}

/// Why a reload was refused; the configuration serving goes on.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The server was not started from a file.
    #[error("this server was not started from a config file: there is nothing to load again")]
    NoFile,
    /// The file does not load (its key named).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A source the HTTP upstream cannot call (its key named).
    #[error(transparent)]
    Upstream(#[from] gateway_http::HttpConfigError),
    /// The client refuses the scopes (a fallback naming no scope, no scope).
    #[error(transparent)]
    Client(#[from] gateway_client::BuildError),
}

/// Loads the config file again and swaps it in, or refuses it whole (see the module).
pub async fn reload(state: &AppState) -> Result<Reload, ReloadError> {
    // One at a time, file to swap: a later file is never overtaken by an earlier one.
    let _one = state.reloading.lock().await;
    let result = load_and_swap(state).await;
    match &result {
        Ok(reload) => {
            state.config_log.reloaded();
            state.metrics.config_reload(true);
            if !reload.restart_needed.is_empty() {
                tracing::warn!(tables = ?reload.restart_needed, "configuration reloaded; these tables changed and take effect at a restart");
            }
        }
        Err(error) => {
            state.config_log.refused(error.to_string());
            state.metrics.config_reload(false);
            tracing::warn!(reason = %error, "configuration reload refused; the configuration serving goes on");
        }
    }
    result
}

async fn load_and_swap(state: &AppState) -> Result<Reload, ReloadError> {
    let path = state.config_path.as_deref().ok_or(ReloadError::NoFile)?;
    let (mut server, backend, scopes) = load_all(path)?;
    // `--listen` overrides the file's address; it is not a change.
    server.listen.clone_from(&state.config.listen);
    let mut restart_needed = Vec::new();
    if server.telemetry != state.config.telemetry {
        restart_needed.push("telemetry");
    }
    server.telemetry.clone_from(&state.config.telemetry);
    if server != state.config {
        restart_needed.push("server");
    }
    if backend != state.backend {
        restart_needed.push("backend");
    }
    let sources = match state.http() {
        Some(http) => {
            let upstream = Arc::new(http.reconfigured(&scopes)?);
            let reloaded = state.client.reload_with(scopes, upstream.clone()).await?;
            state.set_http(upstream);
            reloaded
        }
        None => state.client.reload(scopes).await?,
    };
    state.keys.set_tenant_idle(state.client.longest_tenant_idle());
    Ok(Reload { sources, restart_needed })
}

/// Reloads on every `SIGHUP` until the process ends.
#[cfg(unix)]
pub fn on_hangup(state: Arc<AppState>) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen for SIGHUP (the reload signal): {e}")))?;
    Ok(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP: loading the configuration again");
            let _ = reload(&state).await;
        }
    }))
}

/// How long the file must be quiet after a change before it is loaded (an editor writes in
/// steps).
pub const SETTLE: Duration = Duration::from_millis(300);

/// Reloads when the config file's content changes (`server.watch_config`). Its directory is
/// watched and any change there checks the file, so a file replaced by a rename (editors) or
/// behind a swapped symlink (Kubernetes' ConfigMaps, whose events name `..data`, never the file)
/// is seen; a change that leaves the content as it was (a touch, a chmod) reloads nothing. Keep
/// the watcher: dropping it stops the watch.
pub fn watch(state: Arc<AppState>) -> Result<notify::RecommendedWatcher, ReloadError> {
    use notify::Watcher;
    let path = state.config_path.clone().ok_or(ReloadError::NoFile)?;
    let directory = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new(".")).to_owned();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|event| !matches!(event.kind, notify::EventKind::Access(_))) {
            let _ = tx.send(());
        }
    })
    .map_err(|e| watch_error(&path, &e))?;
    watcher.watch(&directory, notify::RecursiveMode::NonRecursive).map_err(|e| watch_error(&path, &e))?;
    let content = |path: &std::path::Path| std::fs::read(path).ok().map(sha2::Sha256::digest);
    let mut loaded = content(&path);
    tokio::spawn(async move {
        while rx.recv().await.is_some() {
            // Quiet for SETTLE first: one look for an editor's several writes.
            while let Ok(Some(())) = tokio::time::timeout(SETTLE, rx.recv()).await {}
            let now = content(&path);
            if now.is_none() || now == loaded {
                continue;
            }
            loaded = now;
            tracing::info!("the config file changed: loading it again");
            let _ = reload(&state).await;
        }
    });
    Ok(watcher)
}

fn watch_error(path: &std::path::Path, e: &notify::Error) -> ReloadError {
    ReloadError::Config(ConfigError::Watch { path: path.display().to_string(), reason: e.to_string() })
}
