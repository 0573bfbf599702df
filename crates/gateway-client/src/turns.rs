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
//! queues. A head that picked passes the turn on at once only when its admission left room for
//! another (`aimd::Lease::room`) or a release came while it picked; otherwise the next release
//! wakes the new head, which is not woken to be refused (on Redis a refusal is a round trip).
//! Capacity freed by another process reaches the head through `freed_elsewhere` when a shared
//! backend tells of it (Redis: a message), or through its poll.

use gateway_core::time::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;

/// A call's place within its tenant's lane: its start and id.
type Order = (Timestamp, u64);

/// A tenant's lane (`None`: calls made for no tenant).
pub(crate) type Tenant = Option<Arc<str>>;

/// One tenant's waiters, oldest first, and its standing between tenants.
struct Lane {
    waiting: BTreeMap<Order, Arc<Notify>>,
    /// The virtual time at which the lane is next served.
    pass: f64,
    weight: f64,
    /// Its first waiter last found only its tenant's own limits full (a quota of its own, not
    /// the account): the lane does not hold the others back, and its first waiter may pick
    /// whenever it likes (its own quota is nobody else's capacity).
    own_block: bool,
}

impl Lane {
    /// Wakes its first waiter if it waits for its tenant's own limits only (a freed place may
    /// be its quota's).
    fn wake_own_block(&self) {
        if self.own_block
            && let Some((_, wake)) = self.waiting.first_key_value()
        {
            wake.notify_one();
        }
    }
}

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
    /// The releases heard so far (each wakes the head): a head that picked while one came may
    /// not have seen the room it made.
    frees: u64,
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
            .filter_map(|(tenant, lane)| lane.waiting.first_key_value().map(|(order, wake)| (self.pass(lane), tenant, *order, wake)))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.2.cmp(&b.2)))
            .map(|(_, tenant, order, wake)| (tenant, order, wake))
    }

    fn head_key(&self) -> Option<Head> {
        self.head().map(|(tenant, order, _)| (tenant.clone(), order))
    }

    fn first_of(&self, tenant: &Tenant) -> Option<Order> {
        self.lanes.get(tenant).and_then(|lane| lane.waiting.first_key_value().map(|(order, _)| *order))
    }

    /// Whether the waiter of `tenant` at `order` may pick: it heads the line, or it is the first
    /// of a lane that waits for its own limits only.
    fn may_go(&self, tenant: &Tenant, order: Order) -> bool {
        let own = self.lanes.get(tenant).is_some_and(|lane| lane.own_block);
        (own && self.first_of(tenant) == Some(order)) || self.head().is_some_and(|(t, o, _)| t == tenant && o == order)
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
        let lane =
            self.lanes.entry(tenant.clone()).or_insert_with(|| Lane { waiting: BTreeMap::new(), pass: clock, weight, own_block: false });
        let pass = lane.pass.max(clock);
        lane.pass = pass + 1.0 / lane.weight;
        lane.own_block = false;
        self.clock = pass.min(lowest.max(clock));
    }

    /// The call of `tenant` at `order` leaves the line, as `left` says: one served is charged
    /// for its slot. If the head changed, the new head is woken (the turn passes on), unless the
    /// leaver took the last room there was. Lanes with nobody waiting and no pass ahead of the
    /// clock are forgotten.
    fn leave(&mut self, tenant: &Tenant, order: Order, left: Left) {
        let before = self.head_key();
        let was_present = self.lanes.get_mut(tenant).is_some_and(|lane| lane.waiting.remove(&order).is_some());
        if matches!(left, Left::Served { .. }) && was_present {
            let weight = self.lanes.get(tenant).map_or(1.0, |lane| lane.weight);
            self.charge(tenant, weight);
        }
        self.forget_idle();
        if !matches!(left, Left::Served { room: false }) {
            self.wake_if_new_head(before);
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
    /// `Line::frees` when it last was let pick.
    picked_at: AtomicU64,
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

    /// Whether any call waits in the line now.
    pub(crate) fn anyone_waits(&self) -> bool {
        self.lock().lanes.values().any(|lane| !lane.waiting.is_empty())
    }

    /// Capacity was freed in another process (its release said so, not whose): the head of the
    /// line tries again, and so does the first of every lane that waits for its own limits (the
    /// place may be its tenant's quota). Answers whether anyone was woken.
    pub(crate) fn freed_elsewhere(&self) -> bool {
        let mut line = self.lock();
        line.frees += 1;
        line.wake_head();
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
                let lane = line.lanes.entry(tenant.clone()).or_insert_with(|| Lane {
                    waiting: BTreeMap::new(),
                    pass: clock,
                    weight: 1.0,
                    own_block: false,
                });
                lane.weight = f64::from(weight.max(1));
                lane.waiting.insert(order, wake.clone());
                Place { turns: self.clone(), tenant: tenant.clone(), order, wake, picked_at: AtomicU64::new(0) }
            }
        };
        // What the lane waits for is what its first waiter last found.
        if line.first_of(tenant) == Some(order)
            && let Some(lane) = line.lanes.get_mut(tenant)
        {
            lane.own_block = own_block;
        }
        line.wake_if_new_head(before);
        place
    }

    /// A slot of `tenant`'s was freed: the head of the line tries again (`head`: unless the
    /// shared backend handed the place to an older waiter of another process), and so does the
    /// first of `tenant`'s lane if it waits for its own limits (the slot may be its quota's).
    pub(crate) fn freed(&self, tenant: &Tenant, head: bool) {
        let mut line = self.lock();
        if head {
            line.frees += 1;
            line.wake_head();
        }
        if let Some(lane) = line.lanes.get(tenant) {
            lane.wake_own_block();
        }
    }
}

impl Place {
    /// Whether this call may pick: it heads the line (or its lane waits for its own limits
    /// only, and it is the lane's first). If so, the releases heard so far are noted: one heard
    /// while it picks may have made room its admission did not see.
    pub(crate) fn is_first(&self) -> bool {
        let line = self.turns.lock();
        let go = line.may_go(&self.tenant, self.order);
        if go {
            self.picked_at.store(line.frees, Ordering::Relaxed);
        }
        go
    }

    /// Resolves when the call is woken (a freed slot, or its turn came).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// The call picked a source: it leaves the line, its lane charged for the slot; `room`: its
    /// admission left room for another, and the next head is woken to try. So is it when a
    /// release woke this call while it was picking (a wake it did not use: the room that release
    /// made may have come after its admission).
    fn served(self, room: bool) {
        let mut line = self.turns.lock();
        let freed_meanwhile = line.frees != self.picked_at.load(Ordering::Relaxed);
        line.leave(&self.tenant, self.order, Left::Served { room: room || freed_meanwhile });
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
        self.turns.lock().leave(&self.tenant, self.order, Left::Unserved);
    }
}

/// One call's standing in its scope's line: who it is, and its place while it has one.
pub(crate) struct Turn {
    tenant: Tenant,
    weight: u32,
    place: Option<Place>,
    /// Its last pick found only its tenant's own limits full (no account refused it).
    own_block: bool,
}

impl Turn {
    /// The standing of a call in `tenant`'s lane, whose tier weighs `weight`.
    pub(crate) fn new(tenant: Tenant, weight: u32) -> Self {
        Turn { tenant, weight, place: None, own_block: false }
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
        let Some(waiting) = self.place.as_ref().filter(|place| !place.is_first()) else { return true };
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

#[cfg(test)]
mod tests;
