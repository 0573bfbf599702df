//! `AttemptGate` on the shared backend with the local state behind it.
//! - An admission goes to the shared backend's one operation; while that cannot answer, part by
//!   part through the backstop's ports, each of which does what `on_unavailable` says
//!   (`fail_closed` refuses, `local` admits on the process's own state).
//! - An attempt the shared backend admitted has its records made there in one operation (asked
//!   again while it cannot answer, as every record is); an attempt any part of which a local
//!   gate, quota or pacer admitted (a degraded period's) has them made part by part through the
//!   backstop's ports, each of which sends its part where its admission was made.

use super::ask::{Shared, ask, record};
use super::{Backstop, BackstopGates, BackstopPacer, BackstopQuota, LOCAL_LEASE};
use async_trait::async_trait;
use gateway_core::combined::{Admission, Admit, AttemptGate, InOrder, Recorded, Records};
use gateway_core::ports::BackendError;
use std::sync::Arc;

/// `AttemptGate` on a shared backend, with the backstop's ports behind it.
pub struct BackstopAttempts {
    shared: Arc<dyn AttemptGate>,
    gates: Arc<BackstopGates>,
    quota: Arc<BackstopQuota>,
    backstop: Arc<Backstop>,
    /// The backstop's ports one by one.
    in_order: InOrder,
}

impl BackstopAttempts {
    /// The admissions and records of `shared`, with the backstop's `gates`, `quota` and `pacer`
    /// behind them.
    pub fn new(
        shared: Arc<dyn AttemptGate>,
        gates: Arc<BackstopGates>,
        quota: Arc<BackstopQuota>,
        pacer: Arc<BackstopPacer>,
        backstop: Arc<Backstop>,
    ) -> Self {
        let in_order = InOrder { gates: gates.clone(), quota: quota.clone(), pacer };
        BackstopAttempts { shared, gates, quota, backstop, in_order }
    }

    /// The gate's state the shared backend answered an admission of `asked` with, for a
    /// degraded period's local gate to start from.
    fn remember_admission(&self, asked: &Admit<'_>, answer: &Result<Admission, BackendError>) {
        if let Ok(Admission::Admitted { entry, .. } | Admission::Denied(entry) | Admission::Refused { entry, .. }) = answer {
            self.gates.remember(asked.gate.key, entry);
        }
    }

    /// The gate's state the shared backend answered `records` with (see `remember_admission`).
    fn remember_record(&self, records: &Records<'_>, answer: &Result<Recorded, BackendError>) {
        if let (Some(gate), Ok(Recorded { gate: Some(reply), .. })) = (records.gate, answer) {
            self.gates.remember(gate.key, reply);
        }
    }

    /// Whether a local admission made any part of `records`.
    fn any_local(&self, records: &Records<'_>) -> bool {
        records.pace.is_some_and(|p| p.lease.lease.id & LOCAL_LEASE != 0)
            || records.gate.is_some_and(|g| self.gates.is_local_record(g.key, g.op))
            || records.permit.is_some_and(|p| self.quota.is_local(p.permit))
    }
}

#[async_trait]
impl AttemptGate for BackstopAttempts {
    async fn admit(&self, asked: &Admit<'_>) -> Result<Admission, BackendError> {
        match ask(&self.backstop, self.shared.admit(asked)).await {
            Shared::Answer(answer) => {
                self.remember_admission(asked, &answer);
                answer
            }
            Shared::Local => self.in_order.admit(asked).await,
        }
    }

    async fn record(&self, records: &Records<'_>) -> Result<Recorded, BackendError> {
        let Some(key) = records.key() else { return Ok(Recorded::default()) };
        if self.any_local(records) {
            return self.in_order.record(records).await;
        }
        let recorded = record(&self.backstop, key, || self.shared.record(records)).await;
        self.remember_record(records, &recorded);
        recorded
    }

    /// In one operation of the shared backend, through the outage detector as `admit` asks it,
    /// when the records are of its own admission. While it cannot answer (a degraded period),
    /// the admission is made as `admit` makes it, and the records' error goes back at once to
    /// the caller, which makes them on their own (`record`, asked again until the backend
    /// answers), off the waiter's path.
    async fn record_then_admit(
        &self,
        records: &Records<'_>,
        asked: &Admit<'_>,
    ) -> (Result<Recorded, BackendError>, Result<Admission, BackendError>) {
        let Some(key) = records.key() else { return (Ok(Recorded::default()), self.admit(asked).await) };
        if self.any_local(records) {
            return (self.in_order.record(records).await, self.admit(asked).await);
        }
        // Both answers, or the first that says the backend could not answer.
        let both = async {
            let (recorded, admission) = self.shared.record_then_admit(records, asked).await;
            let errors = [recorded.as_ref().err(), admission.as_ref().err()];
            let unavailable = errors.into_iter().flatten().find(|e| matches!(e, BackendError::BackendUnavailable { .. })).cloned();
            match unavailable {
                Some(unavailable) => Err(unavailable),
                None => Ok((recorded, admission)),
            }
        };
        match ask(&self.backstop, both).await {
            Shared::Answer(Ok((recorded, admission))) => {
                self.remember_record(records, &recorded);
                self.remember_admission(asked, &admission);
                (recorded, admission)
            }
            Shared::Answer(Err(error)) => (Err(error.clone()), Err(error)),
            Shared::Local => (Err(self.backstop.unavailable(key)), self.admit(asked).await),
        }
    }

    fn carries_records(&self) -> bool {
        self.shared.carries_records()
    }

    fn stands_in_line(&self) -> bool {
        self.shared.stands_in_line()
    }
}
