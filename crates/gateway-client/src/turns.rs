//! The line of calls waiting for capacity (SPEC §6): the calls of a scope that wait for a quota
//! or an account's learned limit (not the breaker) queue in one line per scope, whatever their
//! tenant partition, since a provider limits per key. Within a tenant, first come, first served
//! by the time the calls started; between tenants, weighted fair queuing by tier weight (stride
//! scheduling): each tenant's lane has a virtual pass, the lane with the lowest pass is served
//! next, and serving one of its calls advances its pass by 1/weight. A lane that was empty starts
//! at the line's virtual clock (the pass last served), so waiting nothing earns no credit: gold
//! (weight 4) behind a bronze flood (weight 1) gets four freed slots to bronze's one, and a lone
//! tenant is served exactly first come, first served.
//!
//! Only the head of the line picks; a freed slot (a release, a permit returned, a limit raised)
//! wakes it; a call that would not be the head may not take a slot a waiter can use, so it
//! queues. Per process: capacity freed by another process reaches a waiter through its poll.

use gateway_core::time::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;

/// A call's place within its tenant's lane: its start and id.
type Order = (Timestamp, u64);

/// A tenant's lane (`None`: calls made for no tenant).
type Tenant = Option<Arc<str>>;

/// One tenant's waiters, oldest first, and its standing between tenants.
struct Lane {
    waiting: BTreeMap<Order, Arc<Notify>>,
    /// The virtual time at which the lane is next served.
    pass: f64,
    weight: f64,
}

#[derive(Default)]
struct Line {
    lanes: HashMap<Tenant, Lane>,
    /// The pass of the lane served last.
    clock: f64,
}

impl Line {
    /// The pass of `lane` as it competes now: an idle lane starts at the clock.
    fn pass(&self, lane: &Lane) -> f64 {
        lane.pass.max(self.clock)
    }

    /// The head of the line: the oldest waiter of the lane with the lowest pass (ties: the
    /// oldest waiter).
    fn head(&self) -> Option<(&Tenant, Order, &Arc<Notify>)> {
        self.lanes
            .iter()
            .filter_map(|(tenant, lane)| lane.waiting.first_key_value().map(|(order, wake)| (self.pass(lane), tenant, *order, wake)))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.2.cmp(&b.2)))
            .map(|(_, tenant, order, wake)| (tenant, order, wake))
    }

    fn is_head(&self, tenant: &Tenant, order: Order) -> bool {
        self.head().is_some_and(|(t, o, _)| t == tenant && o == order)
    }

    fn wake_head(&self) {
        if let Some((_, _, wake)) = self.head() {
            wake.notify_one();
        }
    }

    /// Whether a call of `tenant` that started at `order`, not waiting, would head the line.
    fn would_head(&self, tenant: &Tenant, order: Order) -> bool {
        let Some((_, head_order, _)) = self.head() else { return true };
        let (pass, oldest) = match self.lanes.get(tenant) {
            Some(lane) => (self.pass(lane), lane.waiting.first_key_value().map(|(o, _)| *o)),
            None => (self.clock, None),
        };
        if oldest.is_some_and(|oldest| oldest < order) {
            return false;
        }
        let head_pass = self.head_pass();
        pass < head_pass || (pass == head_pass && order <= head_order)
    }

    fn head_pass(&self) -> f64 {
        self.lanes.values().filter(|l| !l.waiting.is_empty()).map(|l| self.pass(l)).fold(f64::INFINITY, f64::min)
    }

    /// Charges `tenant`'s lane (of `weight`) for a slot it took: its pass advances by 1/weight
    /// from where it competed, and the clock moves there.
    fn charge(&mut self, tenant: &Tenant, weight: f64) {
        let clock = self.clock;
        let lane = self.lanes.entry(tenant.clone()).or_insert_with(|| Lane { waiting: BTreeMap::new(), pass: clock, weight });
        let pass = lane.pass.max(clock);
        lane.pass = pass + 1.0 / lane.weight;
        self.clock = pass;
    }

    /// The call of `tenant` at `order` leaves the line; `served`: it was the head and picked, so
    /// its lane is charged. The (new) head is woken when the leaver was the head: the turn
    /// passes on. Lanes with nobody waiting and no pass ahead of the clock are forgotten.
    fn leave(&mut self, tenant: &Tenant, order: Order, served: bool) {
        let was_head = self.is_head(tenant, order);
        if let Some(lane) = self.lanes.get_mut(tenant) {
            lane.waiting.remove(&order);
            let weight = lane.weight;
            if served && was_head {
                self.charge(tenant, weight);
            }
        }
        self.forget_idle();
        if was_head {
            self.wake_head();
        }
    }

    fn forget_idle(&mut self) {
        let clock = self.clock;
        self.lanes.retain(|_, lane| !lane.waiting.is_empty() || lane.pass > clock);
    }
}

/// The waiters of one scope.
#[derive(Default)]
pub(crate) struct Turns {
    line: Mutex<Line>,
}

/// A call's place in the line; dropping it leaves the line (and passes the turn on when it was
/// the head).
pub(crate) struct Place {
    turns: Arc<Turns>,
    tenant: Tenant,
    order: Order,
    wake: Arc<Notify>,
}

impl Turns {
    fn lock(&self) -> MutexGuard<'_, Line> {
        self.line.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a call of `tenant` that started at `order` may pick now: nobody waits, or it
    /// would head the line.
    pub(crate) fn may_pick(&self, tenant: &Tenant, order: Order) -> bool {
        self.lock().would_head(tenant, order)
    }

    /// Takes (or keeps) a place for the call of `tenant` (of `weight`) that started at `order`.
    pub(crate) fn join(self: &Arc<Self>, tenant: &Tenant, weight: u32, order: Order, held: Option<Place>) -> Place {
        if let Some(place) = held {
            return place;
        }
        let wake = Arc::new(Notify::new());
        let mut line = self.lock();
        let clock = line.clock;
        let lane = line.lanes.entry(tenant.clone()).or_insert_with(|| Lane { waiting: BTreeMap::new(), pass: clock, weight: 1.0 });
        lane.weight = f64::from(weight.max(1));
        lane.waiting.insert(order, wake.clone());
        Place { turns: self.clone(), tenant: tenant.clone(), order, wake }
    }

    /// A slot was freed: the head of the line tries again.
    pub(crate) fn freed(&self) {
        self.lock().wake_head();
    }
}

impl Place {
    /// Whether this call heads the line.
    pub(crate) fn is_first(&self) -> bool {
        self.turns.lock().is_head(&self.tenant, self.order)
    }

    /// Resolves when the call is woken (a freed slot, or its turn came).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// The call picked a source: it leaves the line, its lane charged for the slot.
    fn served(self) {
        self.turns.lock().leave(&self.tenant, self.order, true);
    }
}

impl Turns {
    /// A call of `tenant` (of `weight`) picked without waiting, as the line's head would: while
    /// others wait its lane is charged as theirs are, so a tenant that rarely needs to queue
    /// gets no more than its weight's share either.
    fn picked_directly(&self, tenant: &Tenant, weight: u32) {
        let mut line = self.lock();
        if line.lanes.values().any(|lane| !lane.waiting.is_empty()) {
            line.charge(tenant, f64::from(weight.max(1)));
            line.forget_idle();
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        // After `served` the place is gone from the line already, and this changes nothing.
        self.turns.lock().leave(&self.tenant, self.order, false);
    }
}

/// One call's standing in its scope's line: who it is, and its place while it has one.
pub(crate) struct Turn {
    tenant: Tenant,
    weight: u32,
    place: Option<Place>,
}

impl Turn {
    /// The standing of a call of `tenant`, whose tier weighs `weight`.
    pub(crate) fn new(tenant: Option<&str>, weight: u32) -> Self {
        Turn { tenant: tenant.map(Arc::from), weight, place: None }
    }

    /// Whether the call of `order` may pick now. A call that would not head the line queues;
    /// a waiter that is not the head waits until woken, at most `patience`, and is told no (the
    /// machine is asked again: its stall bound may have passed).
    pub(crate) async fn may_pick(&mut self, turns: &Arc<Turns>, order: Order, patience: Duration) -> bool {
        if self.place.is_none() && !turns.may_pick(&self.tenant, order) {
            self.place = Some(turns.join(&self.tenant, self.weight, order, None));
        }
        let Some(waiting) = self.place.as_ref().filter(|place| !place.is_first()) else { return true };
        tokio::select! {
            biased;
            () = waiting.woken() => {}
            () = tokio::time::sleep(patience) => {}
        }
        false
    }

    /// The call picked a source: a waiter's lane is charged for it, and the turn passes on to
    /// the next head, which may find room too.
    pub(crate) fn leave(&mut self, turns: &Turns) {
        match self.place.take() {
            Some(place) => place.served(),
            None => turns.picked_directly(&self.tenant, self.weight),
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
        let waiting = turns.join(&self.tenant, self.weight, order, self.place.take());
        tokio::select! {
            biased;
            () = waiting.woken() => {}
            () = tokio::time::sleep(duration) => {}
        }
        self.place = Some(waiting);
    }
}

#[cfg(test)]
mod tests;
