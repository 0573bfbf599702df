//! What the status page shows besides the client's own view: the last minute's outcomes per
//! scope ([`recent`]) and the configuration's history ([`ConfigLog`]: when it was loaded, how
//! many reloads took, the last one refused). The page itself (`index.html`, `status.css`,
//! `status.js`) is served from the binary by `routes::status`.

pub mod recent;

use serde::Serialize;
use std::sync::{Mutex, PoisonError};

/// Milliseconds since the Unix epoch, now (the wall clock: what a person reads on the page).
pub fn unix_ms() -> u64 {
    use gateway_core::time::WallClock;
    u64::try_from(gateway_http::SystemWallClock.unix_now().as_millis()).unwrap_or(u64::MAX)
}

/// A reload that was refused: when, and why (the key named, secrets hidden).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// Why.
    pub reason: String,
}

/// The configuration's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigState {
    /// When the configuration now serving was loaded (ms since the epoch).
    pub loaded_at_ms: u64,
    /// Reloads that took since the start.
    pub reloads: u64,
    /// Reloads refused since the start.
    pub refused: u64,
    /// The last refused reload, until one takes.
    pub last_refused: Option<Refused>,
}

/// The configuration's history, shared by the handlers.
pub struct ConfigLog(Mutex<ConfigState>);

impl Default for ConfigLog {
    fn default() -> Self {
        ConfigLog(Mutex::new(ConfigState { loaded_at_ms: unix_ms(), reloads: 0, refused: 0, last_refused: None }))
    }
}

impl ConfigLog {
    /// The history now.
    pub fn state(&self) -> ConfigState {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A reload took.
    pub fn reloaded(&self) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.loaded_at_ms = unix_ms();
        state.reloads += 1;
        state.last_refused = None;
    }

    /// A reload was refused for `reason`.
    pub fn refused(&self, reason: String) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.refused += 1;
        state.last_refused = Some(Refused { at_ms: unix_ms(), reason });
    }
}
