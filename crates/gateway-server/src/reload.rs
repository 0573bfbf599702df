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
    Ok(Reload { sources, restart_needed })
}

/// Reloads on every `SIGHUP` until the process ends.
#[cfg(unix)]
pub fn on_hangup(state: Arc<AppState>) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
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

/// Reloads when the config file changes (`server.watch_config`): its directory is watched, so a
/// file replaced by a rename (as editors and Kubernetes' ConfigMaps do) is seen. Keep the
/// watcher: dropping it stops the watch.
pub fn watch(state: Arc<AppState>) -> Result<notify::RecommendedWatcher, ReloadError> {
    use notify::Watcher;
    let path = state.config_path.clone().ok_or(ReloadError::NoFile)?;
    let name = path.file_name().map(ToOwned::to_owned);
    let directory = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new(".")).to_owned();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && event.paths.iter().any(|p| p.file_name() == name.as_deref())
            && !matches!(event.kind, notify::EventKind::Access(_))
        {
            let _ = tx.send(());
        }
    })
    .map_err(|e| watch_error(&path, &e))?;
    watcher.watch(&directory, notify::RecursiveMode::NonRecursive).map_err(|e| watch_error(&path, &e))?;
    tokio::spawn(async move {
        while rx.recv().await.is_some() {
            // Quiet for SETTLE first: one reload for an editor's several writes.
            while let Ok(Some(())) = tokio::time::timeout(SETTLE, rx.recv()).await {}
            tracing::info!("the config file changed: loading it again");
            let _ = reload(&state).await;
        }
    });
    Ok(watcher)
}

fn watch_error(path: &std::path::Path, e: &notify::Error) -> ReloadError {
    ReloadError::Config(ConfigError::Watch { path: path.display().to_string(), reason: e.to_string() })
}
