//! An ended attempt's records carried by the next waiter's admission (SPEC §6). On a backend
//! where each operation is a round trip (Redis), a finished attempt does not make its records
//! itself when a waiter here can take its place: it hands them to that waiter
//! ([`Turns::hand_over`](crate::turns::Turns::hand_over)), whose admission makes them first and
//! then admits it, in one operation (`AttemptGate::record_then_admit`: one script, one reply,
//! where there were two, each waking a task). Whatever does not reach an admission (the waiter
//! picks nothing, waits again, or its call ends) is made on its own: a `Carried` dropped makes
//! its records in the background, as a slot's own would have been.

use super::{Ended, Slot};
use gateway_core::combined::{Admission, Admit, AttemptGate};
use gateway_core::ports::BackendError;

/// An ended attempt's slot and how it ended: its records, not made yet.
pub(crate) struct Carried {
    /// Taken when the records are made (or sent to be).
    slot: Option<Slot>,
    ended: Ended,
}

impl Carried {
    pub(super) fn new(slot: Slot, ended: Ended) -> Self {
        Carried { slot: Some(slot), ended }
    }

    /// Makes the records on their own: as far as they go without waiting, the rest in the
    /// background (`Holders::off_the_path`); with no room there, they are dropped and counted.
    pub(crate) async fn make(mut self) {
        let Some(mut slot) = self.slot.take() else { return };
        let (holders, scope, source) = (slot.holders.clone(), slot.scope.clone(), slot.source);
        match holders.room(&scope, source) {
            Some(room) => holders.off_the_path(room, &scope, source, Box::pin(slot.records(self.ended))).await,
            None => slot.forsake(),
        }
    }

    /// Makes the records, then admits `ask`, in one operation of `attempts`; records the backend
    /// could not take (it did not answer) are made on their own, off the waiter's path.
    pub(crate) async fn then_admit(mut self, attempts: &dyn AttemptGate, ask: &Admit<'_>) -> Result<Admission, BackendError> {
        let Some(mut slot) = self.slot.take() else { return attempts.admit(ask).await };
        let (ended, probe) = (self.ended, slot.probe);
        let op = slot.settles_probe(&ended);
        let (recorded, admission) = {
            let records = super::records_of(&slot.scope, slot.source, (slot.pace.as_ref(), slot.permit.as_ref()), op, &ended);
            let (recorded, admission) = attempts.record_then_admit(&records, ask).await;
            let recorded = match recorded {
                Err(unavailable @ BackendError::BackendUnavailable { .. }) => Err(unavailable),
                answered => Ok(crate::admission::answered(&slot.scope, &records, answered)),
            };
            (recorded, admission)
        };
        match recorded {
            // Made again on their own (dropped, as any records no admission made); what they
            // free, once the backend takes them, lets the next waiter go.
            Err(_) => {
                slot.probe = probe;
                drop(Carried::new(slot, ended));
            }
            Ok(recorded) => {
                slot.heard(recorded, ended.class);
                // The waiter that made them went for the place they freed: nobody else goes.
                slot.next_went = true;
            }
        }
        admission
    }
}

impl Drop for Carried {
    /// Records nobody carried are made on their own, in the background, and what they free lets
    /// the next waiter go once they are sent (the waiter they went with did not take it: the
    /// slot's `next_went` is set only by the admission that carries them).
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else { return };
        let (releases, ended) = (slot.holders.releases.clone(), self.ended);
        // The task owns the slot, not a `Carried`: a task dropped unpolled (a runtime shutting
        // down drops what it is handed) only drops the slot, which hands back what it holds.
        let make = async move { Carried::new(slot, ended).make().await };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(releases.spawn_on(make, &runtime)),
            // No runtime to make them on: the slot's own drop warns, and its leases expire.
            Err(_) => drop(make),
        }
    }
}
