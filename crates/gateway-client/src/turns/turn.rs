//! A call's standing in its scope's line (see [`super`]): it queues, waits to be woken or its
//! patience, picks when it may, and leaves the line served or not.

use super::{Order, Place, Tenant, Turns};
use crate::slot::Carried;
use std::sync::Arc;
use std::time::Duration;

/// One call's standing in its scope's line: who it is, and its place while it has one.
pub(crate) struct Turn {
    tenant: Tenant,
    weight: u32,
    place: Option<Place>,
    /// Its last pick found only its tenant's own limits full (no account refused it).
    own_block: bool,
    /// The records it was let go with, which its next pick's admission makes.
    carried: Option<Carried>,
}

impl Turn {
    /// The standing of a call in `tenant`'s lane, whose tier weighs `weight`.
    pub(crate) fn new(tenant: Tenant, weight: u32) -> Self {
        Turn { tenant, weight, place: None, own_block: false, carried: None }
    }

    /// Whether the call of `order` may pick now. A call that would not head the line queues;
    /// a waiter that is not the head waits until woken, at most `patience`, and is told no (the
    /// machine is asked again: its stall bound may have passed).
    pub(crate) async fn may_pick(
        &mut self,
        turns: &Arc<Turns>,
        order: Order,
        patience: Duration,
        span: impl FnOnce() -> tracing::Span,
    ) -> bool {
        use tracing::Instrument;
        if self.place.is_none() && !turns.may_pick(&self.tenant, order) {
            self.place = Some(turns.join(&self.tenant, self.weight, order, None, self.own_block));
        }
        let Some(waiting) = self.place.as_ref() else { return true };
        if waiting.is_first() {
            self.carried = waiting.carried();
            return true;
        }
        let wait = async {
            tokio::select! {
                biased;
                () = waiting.woken() => {}
                () = tokio::time::sleep(patience) => {}
            }
        };
        wait.instrument(span()).await;
        false
    }

    /// The records the call was let go with (see [`Carried`]), for its pick to make.
    pub(crate) fn carried(&mut self) -> Option<Carried> {
        self.carried.take()
    }

    /// The call's pick found no source: `account_bound`, an account's limit refused one (the
    /// shared capacity the line orders); otherwise only the tenant's own limits (a quota of its
    /// own) or the breaker did.
    pub(crate) fn blocked(&mut self, account_bound: bool) {
        self.own_block = !account_bound;
    }

    /// The call picked a source: a waiter's lane is charged for it, and the turn passes on to
    /// the next head, which tries at once if the admission left `room` for it (else the next
    /// release wakes it).
    pub(crate) fn leave(&mut self, turns: &Turns, room: bool) {
        match self.place.take() {
            Some(place) => place.served(room),
            None => turns.picked_directly(&self.tenant, self.weight, room),
        }
    }

    /// Sleeps `duration`. `in_line`: the call waits for capacity, keeping (or taking) its place
    /// and woken early when a slot frees; otherwise (the breaker side, a back-off, a 429's
    /// pushback) it waits out of line, which is no turn for capacity.
    pub(crate) async fn sleep(&mut self, turns: &Arc<Turns>, order: Order, duration: Duration, in_line: bool) {
        if !in_line {
            self.place = None;
            tokio::time::sleep(duration).await;
            return;
        }
        let waiting = turns.join(&self.tenant, self.weight, order, self.place.take(), self.own_block);
        tokio::select! {
            biased;
            () = waiting.woken() => {}
            () = tokio::time::sleep(duration) => {}
        }
        self.place = Some(waiting);
    }
}
