//! First come, first served (SPEC §6): the calls of a partition that wait for capacity (a quota
//! or an account's learned limit, not the breaker) queue by the time they started. Only the
//! oldest waiter picks; a freed slot (a release, a permit returned, a limit raised) wakes it; a
//! call younger than every waiter may not take a slot a waiter can use, so it queues behind
//! them. Per process: capacity freed by another process reaches a waiter through its poll.

use gateway_core::time::Timestamp;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;

/// Where a call stands: its start and id (the order), and its wake-up.
#[derive(Clone)]
struct Waiter {
    order: (Timestamp, u64),
    wake: Arc<Notify>,
}

/// The waiters of one partition, oldest first.
#[derive(Default)]
pub(crate) struct Turns {
    queue: Mutex<Vec<Waiter>>,
}

/// A call's place in the queue; dropping it leaves the queue (and passes the turn on when it
/// was the oldest).
pub(crate) struct Place {
    turns: Arc<Turns>,
    order: (Timestamp, u64),
    wake: Arc<Notify>,
}

impl Turns {
    fn lock(&self) -> MutexGuard<'_, Vec<Waiter>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a call that started at `order` may pick now: nobody waits, or it is older than
    /// (or is) the oldest waiter.
    pub(crate) fn may_pick(&self, order: (Timestamp, u64)) -> bool {
        self.lock().first().is_none_or(|oldest| order <= oldest.order)
    }

    /// Takes (or keeps) a place for the call of `order`.
    pub(crate) fn join(self: &Arc<Self>, order: (Timestamp, u64), held: Option<Place>) -> Place {
        if let Some(place) = held {
            return place;
        }
        let wake = Arc::new(Notify::new());
        let mut queue = self.lock();
        let at = queue.partition_point(|w| w.order < order);
        queue.insert(at, Waiter { order, wake: wake.clone() });
        Place { turns: self.clone(), order, wake }
    }

    /// A slot was freed: the oldest waiter tries again.
    pub(crate) fn freed(&self) {
        if let Some(oldest) = self.lock().first() {
            oldest.wake.notify_one();
        }
    }
}

impl Place {
    /// Whether this call is the oldest waiter.
    pub(crate) fn is_first(&self) -> bool {
        self.turns.lock().first().is_some_and(|w| w.order == self.order)
    }

    /// Resolves when the call is woken (a freed slot, or its turn came).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut queue = self.turns.lock();
        let was_first = queue.first().is_some_and(|w| w.order == self.order);
        queue.retain(|w| w.order != self.order);
        if was_first && let Some(next) = queue.first() {
            next.wake.notify_one();
        }
    }
}

/// One call's standing among its partition's waiters: its place while it has one.
#[derive(Default)]
pub(crate) struct Turn(Option<Place>);

impl Turn {
    /// Whether the call of `order` may pick now. A call younger than a waiter queues behind
    /// it; a waiter that is not the oldest waits until woken, at most `patience`, and is told
    /// no (the machine is asked again: its stall bound may have passed).
    pub(crate) async fn may_pick(&mut self, turns: &Arc<Turns>, order: (Timestamp, u64), patience: Duration) -> bool {
        if self.0.is_none() && !turns.may_pick(order) {
            self.0 = Some(turns.join(order, None));
        }
        let Some(waiting) = self.0.as_ref().filter(|place| !place.is_first()) else { return true };
        tokio::select! {
            biased;
            () = waiting.woken() => {}
            () = tokio::time::sleep(patience) => {}
        }
        false
    }

    /// The call picked a source: the turn passes on to the next waiter, which may find room too.
    pub(crate) fn leave(&mut self) {
        self.0 = None;
    }

    /// Sleeps `duration`. `in_line`: the call waits for capacity, keeping (or taking) its place
    /// and woken early when a slot frees; otherwise (the breaker side, a back-off) it waits out
    /// of line, which is no turn for capacity.
    pub(crate) async fn sleep(&mut self, turns: &Arc<Turns>, order: (Timestamp, u64), duration: Duration, in_line: bool) {
        if !in_line {
            self.0 = None;
            tokio::time::sleep(duration).await;
            return;
        }
        let waiting = turns.join(order, self.0.take());
        tokio::select! {
            biased;
            () = waiting.woken() => {}
            () = tokio::time::sleep(duration) => {}
        }
        self.0 = Some(waiting);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64, id: u64) -> (Timestamp, u64) {
        (Timestamp::from_millis(ms), id)
    }

    #[test]
    fn the_oldest_waiter_picks_and_a_younger_call_queues_behind() {
        let turns = Arc::new(Turns::default());
        assert!(turns.may_pick(at(5, 1)), "nobody waits");
        let second = turns.join(at(20, 2), None);
        let first = turns.join(at(10, 1), None);
        assert!(first.is_first() && !second.is_first(), "ordered by start, not by arrival in the queue");
        assert!(!turns.may_pick(at(30, 3)), "a younger call may not take a waiter's slot");
        assert!(turns.may_pick(at(1, 0)), "an older call (a retry of an early call) goes first");
        drop(first);
        assert!(second.is_first(), "the turn passes on");
        drop(second);
        assert!(turns.may_pick(at(99, 9)), "nobody waits any more");
    }

    #[tokio::test]
    async fn a_freed_slot_wakes_the_oldest_and_a_leaving_oldest_wakes_the_next() {
        let turns = Arc::new(Turns::default());
        let first = turns.join(at(1, 1), None);
        let second = turns.join(at(2, 2), None);
        turns.freed();
        first.woken().await; // a stored wake-up: returns at once
        drop(first);
        second.woken().await; // woken by the first leaving
    }
}
