//! One tenant's lane of the line (see [`super`]): its waiters, oldest first, and its standing
//! between tenants.

use super::Order;
use crate::slot::Carried;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Notify;

/// A call in a lane: what wakes it, and whether it picks now (it headed the line, or a freed
/// slot let it go) until it is served or waits again.
pub(super) struct Waiter {
    pub(super) wake: Arc<Notify>,
    pub(super) picking: bool,
    /// The records of the attempt whose place it was let go for, which its admission makes.
    pub(super) carried: Option<Carried>,
}

impl Waiter {
    /// Wakes it, handing it `carried` (it holds none: see `Line::next_to_go`).
    pub(super) fn let_go(&mut self, carried: Option<Carried>) {
        self.carried = carried;
        self.wake.notify_one();
    }
}

/// One tenant's waiters, oldest first, and its standing between tenants.
pub(super) struct Lane {
    pub(super) waiting: BTreeMap<Order, Waiter>,
    /// Its waiters picking now (kept by `set_picking` and `remove`, the only writers of a
    /// waiter's `picking`).
    pub(super) picking: usize,
    /// The virtual time at which the lane is next served.
    pub(super) pass: f64,
    pub(super) weight: f64,
    /// Its first waiter last found only its tenant's own limits full (a quota of its own, not
    /// the account): the lane does not hold the others back, and its first waiter may pick
    /// whenever it likes (its own quota is nobody else's capacity).
    pub(super) own_block: bool,
}

impl Lane {
    /// A lane with nobody waiting yet, that competes from `pass`.
    pub(super) fn new(pass: f64, weight: f64) -> Self {
        Lane { waiting: BTreeMap::new(), picking: 0, pass, weight, own_block: false }
    }

    /// Marks its waiter at `order` picking or not; returns what wakes it.
    pub(super) fn set_picking(&mut self, order: Order, picking: bool) -> Option<&Notify> {
        let waiter = self.waiting.get_mut(&order)?;
        if waiter.picking != picking {
            waiter.picking = picking;
            self.picking = if picking { self.picking + 1 } else { self.picking - 1 };
        }
        Some(&waiter.wake)
    }

    /// Takes its waiter at `order` out.
    pub(super) fn remove(&mut self, order: Order) -> Option<Waiter> {
        let waiter = self.waiting.remove(&order)?;
        self.picking -= usize::from(waiter.picking);
        Some(waiter)
    }

    /// [`wake_own_block`](Self::wake_own_block), handing the waiter woken `carried` (the records
    /// of the attempt whose place it may take) unless it holds some already; what it does not
    /// take comes back.
    pub(super) fn wake_own_block_with(&mut self, carried: Option<Carried>) -> Option<Carried> {
        match self.waiting.first_entry() {
            // Not to one picking now: its admission may be on its way already.
            Some(mut first) if self.own_block && !first.get().picking && first.get().carried.is_none() => {
                first.get_mut().let_go(carried);
                None
            }
            _ => {
                self.wake_own_block();
                carried
            }
        }
    }

    /// Wakes its first waiter if it waits for its tenant's own limits only (a freed place may
    /// be its quota's).
    pub(super) fn wake_own_block(&self) {
        if self.own_block
            && let Some((_, waiter)) = self.waiting.first_key_value()
        {
            waiter.wake.notify_one();
        }
    }
}
