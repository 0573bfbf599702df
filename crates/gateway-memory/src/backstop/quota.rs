//! `QuotaGate` on the shared backend with a local quota behind it.

use super::ask::{Fresh, Shared, ask, record};
use super::{Backstop, OnUnavailable};
use crate::MemoryQuota;
use async_trait::async_trait;
use gateway_core::policy::QuotaLimits;
use gateway_core::ports::{BackendError, Permit, QuotaDecision, QuotaGate, SourceKey};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// `QuotaGate` on a shared backend, with a local quota behind it.
pub struct BackstopQuota {
    shared: Arc<dyn QuotaGate>,
    local: MemoryQuota,
    backstop: Arc<Backstop>,
    fresh: Fresh,
}

impl BackstopQuota {
    /// The quota of `shared`, with a local one behind it as `backstop` says.
    pub fn new(shared: Arc<dyn QuotaGate>, backstop: Arc<Backstop>) -> Self {
        let local = MemoryQuota::new(backstop.clock.clone());
        BackstopQuota { shared, local, backstop, fresh: Fresh::new() }
    }

    pub(super) fn is_local(&self, permit: &Permit) -> bool {
        self.backstop.used_local.load(Ordering::Acquire) && self.local.incarnation(&permit.key) == Some(permit.incarnation)
    }
}

#[async_trait]
impl QuotaGate for BackstopQuota {
    async fn acquire(&self, key: &SourceKey, limits: &QuotaLimits, estimated_tokens: u32) -> Result<QuotaDecision, BackendError> {
        match ask(&self.backstop, self.shared.acquire(key, limits, estimated_tokens)).await {
            Shared::Answer(answer) => answer,
            Shared::Local if self.backstop.mode == OnUnavailable::FailClosed => Err(self.backstop.refused_admission(key)),
            Shared::Local => {
                self.fresh.for_period(&self.backstop, || self.local.clear());
                self.local.acquire(key, limits, estimated_tokens).await
            }
        }
    }

    async fn settle(&self, permit: &Permit, actual_tokens: u32) -> Result<(), BackendError> {
        if self.is_local(permit) {
            return self.local.settle(permit, actual_tokens).await;
        }
        record(&self.backstop, &permit.key, || self.shared.settle(permit, actual_tokens)).await
    }

    async fn release(&self, permit: &Permit) -> Result<(), BackendError> {
        if self.is_local(permit) {
            return self.local.release(permit).await;
        }
        record(&self.backstop, &permit.key, || self.shared.release(permit)).await
    }
}
