//! `PacerGate` on the shared backend with local pacers behind it, their leases marked
//! [`LOCAL_LEASE`].

use super::ask::{Fresh, Shared, ask, look, record};
use super::{Backstop, LOCAL_LEASE, OnUnavailable};
use crate::MemoryPacer;
use async_trait::async_trait;
use gateway_core::aimd::{AccountReading, PacerParams};
use gateway_core::outcome::AimdEffect;
use gateway_core::ports::{BackendError, PaceDecision, PaceLease, PacerGate, SourceKey};
use gateway_core::request::RateSignal;
use std::sync::Arc;

/// `PacerGate` on a shared backend, with local pacers behind it.
pub struct BackstopPacer {
    shared: Arc<dyn PacerGate>,
    local: MemoryPacer,
    backstop: Arc<Backstop>,
    fresh: Fresh,
}

impl BackstopPacer {
    /// The pacers of `shared`, with local ones behind them as `backstop` says.
    pub fn new(shared: Arc<dyn PacerGate>, backstop: Arc<Backstop>) -> Self {
        let local = MemoryPacer::new(backstop.clock.clone());
        BackstopPacer { shared, local, backstop, fresh: Fresh::new() }
    }
}

#[async_trait]
impl PacerGate for BackstopPacer {
    async fn try_acquire(&self, key: &SourceKey, params: &PacerParams, tokens: u32) -> Result<PaceDecision, BackendError> {
        match ask(&self.backstop, self.shared.try_acquire(key, params, tokens)).await {
            Shared::Answer(answer) => answer,
            Shared::Local if self.backstop.mode == OnUnavailable::FailClosed => Err(self.backstop.refused_admission(key)),
            Shared::Local => {
                self.fresh.for_period(&self.backstop, || self.local.clear());
                Ok(match self.local.try_acquire(key, params, tokens).await? {
                    PaceDecision::Granted(mut lease) => {
                        lease.lease.id |= LOCAL_LEASE;
                        PaceDecision::Granted(lease)
                    }
                    paced => paced,
                })
            }
        }
    }

    async fn release(
        &self,
        lease: &PaceLease,
        effect: AimdEffect,
        rate: Option<&RateSignal>,
        params: &PacerParams,
    ) -> Result<f64, BackendError> {
        if lease.lease.id & LOCAL_LEASE != 0 {
            let mut local = lease.clone();
            local.lease.id &= !LOCAL_LEASE;
            return self.local.release(&local, effect, rate, params).await;
        }
        record(&self.backstop, &lease.key, || self.shared.release(lease, effect, rate, params)).await
    }

    async fn read(&self, key: &SourceKey, params: &PacerParams) -> Result<AccountReading, BackendError> {
        look(&self.backstop, key, self.shared.read(key, params), self.local.read(key, params)).await
    }
}
