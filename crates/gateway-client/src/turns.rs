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
//! The head of the line picks; each freed slot (a release, a permit returned, a limit raised)
//! lets the next waiter in the line's order that is not picking already go, and wakes it, so
//! that the slots a burst of releases frees are taken at once, not one pick after another (on
//! Redis a pick is a round trip); a call that would not be the head may not take a slot a waiter
//! can use, so it queues. A waiter that picked passes the turn on at once only when its
//! admission left room for another (`aimd::Lease::room`); otherwise the next release lets the
//! next waiter go, which is not woken to be refused (on Redis a refusal is a round trip).
//! Capacity freed by another process reaches the head through `freed_elsewhere` when a shared
//! backend tells of it (Redis: a message), or through its poll. On a backend where each
//! operation is a round trip, the records of the attempt that freed a slot go with the waiter
//! it lets go (`hand_over`), whose admission makes them (`crate::slot::Carried`).

use crate::slot::Carried;
use gateway_core::time::Timestamp;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;

/// A call's place within its tenant's lane: its start and id.
type Order = (Timestamp, u64);

/// A tenant's lane (`None`: calls made for no tenant).
pub(crate) type Tenant = Option<Arc<str>>;

/// How a call leaves the line.
#[derive(Clone, Copy)]
enum Left {
    /// It picked a source; `room`: its admission left room for another attempt.
    Served { room: bool },
    /// It gave up its place (it waits out of line, or the call ended).
    Unserved,
}

/// Who heads the line: a lane and its oldest waiter.
type Head = (Tenant, Order);

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

    /// The head of the line: the oldest waiter of the competing lane (not blocked by its own
    /// limits) with the lowest pass; ties: the oldest waiter.
    fn head(&self) -> Option<(&Tenant, Order, &Arc<Notify>)> {
        self.lanes
            .iter()
            .filter(|(_, lane)| !lane.own_block)
            .filter_map(|(tenant, lane)| lane.waiting.first_key_value().map(|(order, w)| (self.pass(lane), tenant, *order, &w.wake)))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.2.cmp(&b.2)))
            .map(|(_, tenant, order, wake)| (tenant, order, wake))
    }

    /// The first waiter in the line's order that is not picking: each lane competes with the
    /// pass it will have once its waiters picking now are served.
    fn next_to_go(&self) -> Option<(&Tenant, Order)> {
        self.lanes
            .iter()
            .filter(|(_, lane)| !lane.own_block)
            .filter_map(|(tenant, lane)| {
                // One that holds records already was let go for them, and will pick.
                let (order, _) = lane.waiting.iter().find(|(_, w)| !w.picking && w.carried.is_none())?;
                Some((self.pass(lane) + lane.picking as f64 / lane.weight, tenant, *order))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.2.cmp(&b.2)))
            .map(|(_, tenant, order)| (tenant, order))
    }

    /// A freed slot (or room a pick left) lets the next waiter that is not picking go, and
    /// wakes it, handing it `carried` (the records of the attempt that freed it); with nobody
    /// to let go, `carried` comes back.
    fn let_next_go(&mut self, carried: Option<Carried>) -> Option<Carried> {
        let Some((tenant, order)) = self.next_to_go().map(|(t, o)| (t.clone(), o)) else { return carried };
        let Some(waiter) = self.lanes.get_mut(&tenant).and_then(|lane| {
            lane.set_picking(order, true);
            lane.waiting.get_mut(&order)
        }) else {
            return carried;
        };
        waiter.let_go(carried);
        None
    }

    /// The records the waiter of `tenant` at `order` was handed, taken.
    fn take_carried(&mut self, tenant: &Tenant, order: Order) -> Option<Carried> {
        self.lanes.get_mut(tenant).and_then(|lane| lane.waiting.get_mut(&order)).and_then(|w| w.carried.take())
    }

    /// Marks the waiter of `tenant` at `order` picking or not; returns what wakes it.
    fn set_picking(&mut self, tenant: &Tenant, order: Order, picking: bool) -> Option<&Notify> {
        self.lanes.get_mut(tenant)?.set_picking(order, picking)
    }

    fn head_key(&self) -> Option<Head> {
        self.head().map(|(tenant, order, _)| (tenant.clone(), order))
    }

    fn first_of(&self, tenant: &Tenant) -> Option<Order> {
        self.lanes.get(tenant).and_then(|lane| lane.waiting.first_key_value().map(|(order, _)| *order))
    }

    /// Whether the waiter of `tenant` at `order` may pick: it heads the line, a freed slot let it
    /// go, or it is the first of a lane that waits for its own limits only.
    fn may_go(&self, tenant: &Tenant, order: Order) -> bool {
        let lane = self.lanes.get(tenant);
        let own = lane.is_some_and(|lane| lane.own_block);
        lane.and_then(|lane| lane.waiting.get(&order)).is_some_and(|w| w.picking)
            || (own && self.first_of(tenant) == Some(order))
            || self.head().is_some_and(|(t, o, _)| t == tenant && o == order)
    }

    fn wake_head(&self) {
        if let Some((_, _, wake)) = self.head() {
            wake.notify_one();
        }
    }

    /// After a change: the head, if it is another than `before`, is woken (its turn came).
    fn wake_if_new_head(&self, before: Option<Head>) {
        if self.head_key() != before {
            self.wake_head();
        }
    }

    /// Whether a call of `tenant` that started at `order`, not waiting, would head the line.
    fn would_head(&self, tenant: &Tenant, order: Order) -> bool {
        let (pass, oldest, own) = match self.lanes.get(tenant) {
            Some(lane) => (self.pass(lane), lane.waiting.first_key_value().map(|(o, _)| *o), lane.own_block),
            None => (self.clock, None, false),
        };
        if oldest.is_some_and(|oldest| oldest < order) {
            return false;
        }
        let Some((_, head_order, _)) = self.head() else { return true };
        let head_pass = self.head_pass();
        own || pass < head_pass || (pass == head_pass && order <= head_order)
    }

    /// The lowest pass of the competing lanes that have waiters.
    fn head_pass(&self) -> f64 {
        self.lanes.values().filter(|l| !l.waiting.is_empty() && !l.own_block).map(|l| self.pass(l)).fold(f64::INFINITY, f64::min)
    }

    /// Charges `tenant`'s lane (of `weight`) for a slot it took: its pass advances by 1/weight
    /// from where it competed, and the clock moves there (never past a waiting lane: a lane in
    /// debt that took a slot while nobody waited does not reorder those who came since).
    fn charge(&mut self, tenant: &Tenant, weight: f64) {
        let (clock, lowest) = (self.clock, self.head_pass());
        let lane = self.lanes.entry(tenant.clone()).or_insert_with(|| Lane::new(clock, weight));
        let pass = lane.pass.max(clock);
        lane.pass = pass + 1.0 / lane.weight;
        lane.own_block = false;
        self.clock = pass.min(lowest.max(clock));
    }

    /// The call of `tenant` at `order` leaves the line, as `left` says: one served is charged
    /// for its slot, and lets the next waiter go if it left room and nobody else picks (the
    /// room is theirs first, and their admissions will tell whether any is left); one unserved
    /// passes on the slot it was let go for, or the turn if it headed the line. Lanes with
    /// nobody waiting and no pass ahead of the clock are forgotten. Answers the records it was
    /// handed and did not carry (the caller drops them outside the lock: they are made on
    /// their own).
    fn leave(&mut self, tenant: &Tenant, order: Order, left: Left) -> Option<Carried> {
        let before = self.head_key();
        let mut waiter = self.lanes.get_mut(tenant).and_then(|lane| lane.remove(order))?;
        if matches!(left, Left::Served { .. }) {
            let weight = self.lanes.get(tenant).map_or(1.0, |lane| lane.weight);
            self.charge(tenant, weight);
        }
        self.forget_idle();
        match left {
            Left::Served { room: true } if !self.lanes.values().any(|lane| lane.picking > 0 && !lane.own_block) => {
                self.let_next_go(None);
            }
            Left::Served { .. } => {}
            Left::Unserved if waiter.picking => return self.let_next_go(waiter.carried.take()),
            Left::Unserved => self.wake_if_new_head(before),
        }
        waiter.carried.take()
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
    /// The last release answered in this scope handed what it freed to an older waiter of
    /// another process.
    released_elsewhere: AtomicBool,
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

    /// The calls waiting now, per tenant lane (lanes with none left out).
    pub(crate) fn waiting(&self) -> Vec<(Tenant, usize)> {
        let line = self.lock();
        line.lanes.iter().filter(|(_, lane)| !lane.waiting.is_empty()).map(|(tenant, lane)| (tenant.clone(), lane.waiting.len())).collect()
    }

    /// Whether the last release answered in this scope handed what it freed to an older waiter
    /// of another process: the next one lets a waiter here go only once it is answered.
    pub(crate) fn released_elsewhere(&self) -> bool {
        self.released_elsewhere.load(Ordering::Relaxed)
    }

    /// A release was answered: `elsewhere`, it handed what it freed to another process.
    pub(crate) fn heard_release(&self, elsewhere: bool) {
        self.released_elsewhere.store(elsewhere, Ordering::Relaxed);
    }

    /// Whether any call waits in the line now.
    pub(crate) fn anyone_waits(&self) -> bool {
        self.lock().lanes.values().any(|lane| !lane.waiting.is_empty())
    }

    /// Capacity was freed in another process (its release said so, not whose): the next waiter
    /// goes, and so does the first of every lane that waits for its own limits (the place may be
    /// its tenant's quota). Answers whether anyone was woken.
    pub(crate) fn freed_elsewhere(&self) -> bool {
        let mut line = self.lock();
        line.let_next_go(None);
        line.lanes.values().for_each(Lane::wake_own_block);
        line.lanes.values().any(|lane| !lane.waiting.is_empty())
    }

    /// The start of the oldest call waiting in line for shared capacity (lanes waiting for their
    /// own limits left out) other than the call of `tenant` at `order`.
    pub(crate) fn oldest_other(&self, tenant: &Tenant, order: Order) -> Option<Timestamp> {
        let line = self.lock();
        let firsts = line
            .lanes
            .iter()
            .filter(|(_, lane)| !lane.own_block)
            .filter_map(|(t, lane)| lane.waiting.keys().find(|&&o| !(t == tenant && o == order)).map(|o| o.0));
        firsts.min()
    }

    /// Whether a call of `tenant` that started at `order` may pick now: nobody waits, or it
    /// would head the line.
    pub(crate) fn may_pick(&self, tenant: &Tenant, order: Order) -> bool {
        self.lock().would_head(tenant, order)
    }

    /// Takes (or keeps) a place for the call of `tenant` (of `weight`) that started at `order`;
    /// `own_block`: its last pick found only its tenant's own limits full.
    pub(crate) fn join(self: &Arc<Self>, tenant: &Tenant, weight: u32, order: Order, held: Option<Place>, own_block: bool) -> Place {
        let mut line = self.lock();
        let before = line.head_key();
        let place = match held {
            Some(place) => place,
            None => {
                let wake = Arc::new(Notify::new());
                let clock = line.clock;
                let lane = line.lanes.entry(tenant.clone()).or_insert_with(|| Lane::new(clock, 1.0));
                lane.weight = f64::from(weight.max(1));
                lane.waiting.insert(order, Waiter { wake: wake.clone(), picking: false, carried: None });
                Place { turns: self.clone(), tenant: tenant.clone(), order, wake }
            }
        };
        // A call that waits again picks no more: the next freed slot may be its own again.
        line.set_picking(tenant, order, false);
        // What the lane waits for is what its first waiter last found.
        if line.first_of(tenant) == Some(order)
            && let Some(lane) = line.lanes.get_mut(tenant)
        {
            lane.own_block = own_block;
        }
        line.wake_if_new_head(before);
        // Records it was handed and did not carry go on with the slot they free (to this call
        // again, if it is next).
        let carried = line.take_carried(tenant, order);
        let uncarried = carried.and_then(|carried| line.let_next_go(Some(carried)));
        drop(line);
        drop(uncarried);
        place
    }

    /// A slot of `tenant`'s was freed: the next waiter goes (`head`: unless the shared backend
    /// handed the place to an older waiter of another process), and so does the first of
    /// `tenant`'s lane if it waits for its own limits (the slot may be its quota's).
    pub(crate) fn freed(&self, tenant: &Tenant, head: bool) {
        self.let_go(tenant, head, None);
    }

    /// A slot of `tenant`'s was freed by an attempt whose records are `carried`: the next waiter
    /// goes with them, its admission to make them (see [`freed`](Self::freed)). With nobody to
    /// let go they come back, to be made on their own.
    pub(crate) fn hand_over(&self, tenant: &Tenant, carried: Carried) -> Option<Carried> {
        self.let_go(tenant, true, Some(carried))
    }

    /// [`freed`](Self::freed), with `carried` handed to the waiter let go (or the first of
    /// `tenant`'s lane if it waits for its own limits and nobody else went); what nobody took
    /// comes back (dropped by the caller, outside the lock).
    fn let_go(&self, tenant: &Tenant, head: bool, carried: Option<Carried>) -> Option<Carried> {
        let mut line = self.lock();
        let back = if head { line.let_next_go(carried) } else { carried };
        match line.lanes.get_mut(tenant) {
            Some(lane) => lane.wake_own_block_with(back),
            None => back,
        }
    }
}

impl Place {
    /// Whether this call may pick: it heads the line, a freed slot let it go (or its lane waits
    /// for its own limits only, and it is the lane's first). If so it picks until it is served
    /// or waits again: a release meanwhile lets the next waiter go.
    pub(crate) fn is_first(&self) -> bool {
        let mut line = self.turns.lock();
        let go = line.may_go(&self.tenant, self.order);
        if go {
            line.set_picking(&self.tenant, self.order, true);
        }
        go
    }

    /// Resolves when the call is woken (a freed slot, or its turn came).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// The call picked a source: it leaves the line, its lane charged for the slot; `room`: its
    /// admission left room for another, and the next waiter is let go.
    fn served(self, room: bool) {
        let uncarried = self.turns.lock().leave(&self.tenant, self.order, Left::Served { room });
        drop(uncarried);
    }

    /// The records it was handed with its place, which its admission is to make (taken once).
    pub(crate) fn carried(&self) -> Option<Carried> {
        self.turns.lock().take_carried(&self.tenant, self.order)
    }
}

impl Turns {
    /// A call of `tenant` (of `weight`) picked without waiting, as the line's head would: while
    /// others wait its lane is charged as theirs are, so a tenant that rarely needs to queue
    /// gets no more than its weight's share either. A new head is woken if the pick left `room`.
    fn picked_directly(&self, tenant: &Tenant, weight: u32, room: bool) {
        let mut line = self.lock();
        if line.lanes.values().any(|lane| !lane.waiting.is_empty()) {
            let before = line.head_key();
            line.charge(tenant, f64::from(weight.max(1)));
            line.forget_idle();
            if room {
                line.wake_if_new_head(before);
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        // After `served` the place is gone from the line already, and this changes nothing.
        let uncarried = self.turns.lock().leave(&self.tenant, self.order, Left::Unserved);
        drop(uncarried);
    }
}

mod lane;
use lane::{Lane, Waiter};
mod turn;
pub(crate) use turn::Turn;

#[cfg(test)]
mod tests;
