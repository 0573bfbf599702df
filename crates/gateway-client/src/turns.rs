//! First come, first served (SPEC §6): the calls of a partition that wait for capacity (a quota
//! or an account's learned limit, not the breaker) queue by the time they started. Only the
//! oldest waiter picks; a freed slot (a release, a permit returned, a limit raised) wakes it; a
//! call younger than every waiter may not take a slot a waiter can use, so it queues behind
//! them. Per process: capacity freed by another process reaches a waiter through its poll.

use gateway_core::time::Timestamp;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
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
