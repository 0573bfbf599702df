//! How a port puts an operation to the shared backend through the outage detector (a question,
//! a status-page look, a record that waits for the backend), and its local state, started
//! afresh at each degraded period.

use super::{Backstop, OnUnavailable, RECORD_WAIT};
use gateway_core::ports::{BackendError, SourceKey};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};

/// What a shared operation came to: its answer, or the local state's turn.
pub(super) enum Shared<T> {
    Answer(Result<T, BackendError>),
    Local,
}

/// Asks the shared backend (unless a degraded period says not now) and sorts the answer.
pub(super) async fn ask<T>(backstop: &Backstop, asks: impl Future<Output = Result<T, BackendError>>) -> Shared<T> {
    if !backstop.asks_shared() {
        return Shared::Local;
    }
    match asks.await {
        Err(error @ BackendError::BackendUnavailable { .. }) => {
            backstop.failed(&error);
            Shared::Local
        }
        answer => {
            // An answer (a refusal that the key is malformed included) says the backend is up.
            backstop.answered();
            Shared::Answer(answer)
        }
    }
}

/// A question for a status page (a gate's state, `retry_after`, an account's limit): the shared
/// backend's answer, or while it cannot answer the local state's (`local`) or the error.
pub(super) async fn look<T>(
    backstop: &Backstop,
    key: &SourceKey,
    shared: impl Future<Output = Result<T, BackendError>>,
    local: impl Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    match ask(backstop, shared).await {
        Shared::Answer(answer) => answer,
        Shared::Local if backstop.mode == OnUnavailable::Local => local.await,
        Shared::Local => Err(backstop.unavailable(key)),
    }
}

/// A record or release of the shared backend's admission: asked now, or, while the backend
/// cannot answer, again at each `retry_every` until it answers or [`RECORD_WAIT`] has passed
/// (then dropped and counted).
pub(super) async fn record<T, F: Future<Output = Result<T, BackendError>>>(
    backstop: &Backstop,
    key: &SourceKey,
    op: impl Fn() -> F,
) -> Result<T, BackendError> {
    let give_up = tokio::time::Instant::now() + RECORD_WAIT;
    loop {
        if let Shared::Answer(answer) = ask(backstop, op()).await {
            return answer;
        }
        let now = tokio::time::Instant::now();
        if now >= give_up {
            return Err(backstop.dropped(key));
        }
        tokio::time::sleep(backstop.retry_every.min(give_up - now)).await;
    }
}

/// The local state of one port, started afresh at each degraded period.
pub(super) struct Fresh {
    period: Mutex<u64>,
}

impl Fresh {
    pub(super) fn new() -> Self {
        Fresh { period: Mutex::new(0) }
    }

    /// Runs `clear` once per degraded period, before the period's first local operation.
    pub(super) fn for_period(&self, backstop: &Backstop, clear: impl FnOnce()) {
        backstop.used_local.store(true, Ordering::Release);
        let period = backstop.period();
        let mut seen = self.period.lock().unwrap_or_else(PoisonError::into_inner);
        if *seen != period {
            clear();
            *seen = period;
        }
    }
}
