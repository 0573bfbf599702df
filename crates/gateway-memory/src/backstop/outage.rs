//! The outage detector the three ports share: when a degraded period starts and ends, when a
//! degraded process asks the shared backend again, and what the backstop counted.

use super::OnUnavailable;
use gateway_core::ports::{BackendError, SourceKey};
use gateway_core::time::{Clock, Timestamp};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Degraded periods kept for [`BackstopStats::periods`].
const PERIODS_KEPT: usize = 64;
/// What the backstop counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackstopStats {
    /// Degraded periods: start and (once the backend answered again) end, on the backstop's
    /// clock; the last 64.
    pub periods: Vec<(Timestamp, Option<Timestamp>)>,
    /// Degraded periods in all.
    pub outages: u64,
    /// Admissions granted by the local state (gates: TryEnter admitted).
    pub local_admissions: u64,
    /// Admission questions refused because the backend could not answer (`fail_closed`).
    pub failed_closed: u64,
    /// Records and releases of the shared backend's admissions dropped while it could not
    /// answer.
    pub dropped_records: u64,
}

#[derive(Default)]
struct Outage {
    /// The current degraded period's start.
    since: Option<Timestamp>,
    /// When a degraded process asks the backend again.
    next_try: Timestamp,
    /// Increments at the start of each degraded period.
    period: u64,
    periods: Vec<(Timestamp, Option<Timestamp>)>,
}

/// The outage detector and counters the three ports share.
pub struct Backstop {
    pub(super) mode: OnUnavailable,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) retry_every: Duration,
    /// A degraded period is on (read without the lock on every operation).
    degraded: AtomicBool,
    /// The local state was used (until then, no record can be a local one's).
    pub(super) used_local: AtomicBool,
    outage: Mutex<Outage>,
    outages: AtomicU64,
    pub(super) local_admissions: AtomicU64,
    failed_closed: AtomicU64,
    dropped_records: AtomicU64,
}

impl Backstop {
    /// A backstop in `mode` on `clock`, asking a degraded backend again every `retry_every`.
    pub fn new(mode: OnUnavailable, clock: Arc<dyn Clock>, retry_every: Duration) -> Arc<Self> {
        Arc::new(Backstop {
            mode,
            clock,
            retry_every,
            degraded: AtomicBool::new(false),
            used_local: AtomicBool::new(false),
            outage: Mutex::default(),
            outages: AtomicU64::new(0),
            local_admissions: AtomicU64::new(0),
            failed_closed: AtomicU64::new(0),
            dropped_records: AtomicU64::new(0),
        })
    }

    /// The mode.
    pub fn mode(&self) -> OnUnavailable {
        self.mode
    }

    /// What it counted so far.
    pub fn stats(&self) -> BackstopStats {
        BackstopStats {
            periods: self.lock().periods.clone(),
            outages: self.outages.load(Ordering::Relaxed),
            local_admissions: self.local_admissions.load(Ordering::Relaxed),
            failed_closed: self.failed_closed.load(Ordering::Relaxed),
            dropped_records: self.dropped_records.load(Ordering::Relaxed),
        }
    }

    /// Whether a degraded period is on.
    pub fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Outage> {
        self.outage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this operation asks the shared backend: always unless degraded, then once per
    /// `retry_every`.
    pub(super) fn asks_shared(&self) -> bool {
        if !self.is_degraded() {
            return true;
        }
        let mut outage = self.lock();
        if outage.since.is_none() {
            return true;
        }
        let now = self.clock.now();
        if now < outage.next_try {
            return false;
        }
        outage.next_try = now.saturating_add(self.retry_every);
        true
    }

    /// The shared backend answered: ends a degraded period.
    pub(super) fn answered(&self) {
        if !self.is_degraded() {
            return;
        }
        let mut outage = self.lock();
        self.degraded.store(false, Ordering::Release);
        if let Some(since) = outage.since.take() {
            let now = self.clock.now();
            if let Some(last) = outage.periods.last_mut() {
                last.1 = Some(now);
            }
            tracing::info!(
                after_ms = now.saturating_since(since).as_millis() as u64,
                "gate backend answers again; back on the shared state"
            );
        }
    }

    /// The shared backend could not answer: starts a degraded period. The period, for the ports
    /// to start their local state afresh.
    pub(super) fn failed(&self, error: &BackendError) -> u64 {
        let mut outage = self.lock();
        if outage.since.is_none() {
            let now = self.clock.now();
            self.degraded.store(true, Ordering::Release);
            outage.since = Some(now);
            outage.next_try = now.saturating_add(self.retry_every);
            outage.period += 1;
            if outage.periods.len() == PERIODS_KEPT {
                outage.periods.remove(0);
            }
            outage.periods.push((now, None));
            self.outages.fetch_add(1, Ordering::Relaxed);
            match self.mode {
                OnUnavailable::Local => {
                    tracing::warn!(%error, "gate backend unavailable; admitting on this process's own state until it answers")
                }
                OnUnavailable::FailClosed => tracing::warn!(%error, "gate backend unavailable; admission fails closed until it answers"),
            }
        }
        outage.period
    }

    pub(super) fn period(&self) -> u64 {
        self.lock().period
    }

    /// The error of a question not put to the degraded backend.
    pub(super) fn unavailable(&self, key: &SourceKey) -> BackendError {
        let since = self.lock().since.map_or(0, |since| self.clock.now().saturating_since(since).as_millis() as u64);
        BackendError::BackendUnavailable {
            backend: "shared",
            key: key.to_string(),
            detail: format!("unavailable for {since} ms; asked again shortly"),
        }
    }

    pub(super) fn refused_admission(&self, key: &SourceKey) -> BackendError {
        self.failed_closed.fetch_add(1, Ordering::Relaxed);
        self.unavailable(key)
    }

    pub(super) fn dropped(&self, key: &SourceKey) -> BackendError {
        self.dropped_records.fetch_add(1, Ordering::Relaxed);
        self.unavailable(key)
    }
}
