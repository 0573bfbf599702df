//! The line's order: first come, first served within a tenant, weighted fair queuing between.

use super::*;
use std::time::Duration;

fn at(ms: u64, id: u64) -> Order {
    (Timestamp::from_millis(ms), id)
}

fn tenant(name: &str) -> Tenant {
    Some(Arc::from(name))
}

/// Every lane's count of waiters picking is what its waiters say.
fn counts_agree(turns: &Turns) {
    for lane in turns.lock().lanes.values() {
        assert_eq!(lane.picking, lane.waiting.values().filter(|w| w.picking).count());
    }
}

/// Whether `place` heads the line (asked without letting it pick, as `is_first` does).
fn heads(turns: &Turns, place: &Place) -> bool {
    turns.lock().head_key() == Some((place.tenant.clone(), place.order))
}

#[test]
fn the_oldest_waiter_picks_and_a_younger_call_queues_behind() {
    let turns = Arc::new(Turns::default());
    assert!(turns.may_pick(&None, at(5, 1)), "nobody waits");
    let second = turns.join(&None, 1, at(20, 2), None, false);
    let first = turns.join(&None, 1, at(10, 1), None, false);
    assert!(first.is_first() && !second.is_first(), "ordered by start, not by arrival in the line");
    assert!(!turns.may_pick(&None, at(30, 3)), "a younger call may not take a waiter's slot");
    assert!(turns.may_pick(&None, at(1, 0)), "an older call (a retry of an early call) goes first");
    drop(first);
    assert!(second.is_first(), "the turn passes on");
    drop(second);
    assert!(turns.may_pick(&None, at(99, 9)), "nobody waits any more");
}

#[tokio::test]
async fn a_freed_slot_wakes_the_head_and_a_leaving_head_wakes_the_next() {
    let turns = Arc::new(Turns::default());
    let first = turns.join(&None, 1, at(1, 1), None, false);
    let second = turns.join(&None, 1, at(2, 2), None, false);
    turns.freed(&None, true);
    first.woken().await; // a stored wake-up: returns at once
    drop(first);
    second.woken().await; // woken by the head leaving
}

#[tokio::test]
async fn a_served_head_passes_the_turn_on() {
    let turns = Arc::new(Turns::default());
    let first = turns.join(&tenant("a"), 1, at(1, 1), None, false);
    let second = turns.join(&tenant("b"), 1, at(2, 2), None, false);
    first.served(true);
    assert!(second.is_first());
    second.woken().await; // woken when the head picked
}

/// Serves the line `slots` times, each time the head (and re-queues a call of the same tenant
/// behind its lane, as a flood of closed-loop callers does); returns how many slots each got.
fn serve(turns: &Arc<Turns>, places: &mut Vec<Place>, slots: usize, next_id: &mut u64) -> HashMap<String, usize> {
    let mut got = HashMap::new();
    for _ in 0..slots {
        let at_head = places.iter().position(Place::is_first).expect("someone heads the line");
        let place = places.swap_remove(at_head);
        let (tenant, weight) = (place.tenant.clone(), turns.lock().lanes[&place.tenant].weight as u32);
        *got.entry(tenant.as_deref().unwrap_or("-").to_owned()).or_default() += 1;
        place.served(true);
        *next_id += 1;
        places.push(turns.join(&tenant, weight, at(1000 + *next_id, *next_id), None, false));
    }
    got
}

#[test]
fn tenants_are_served_by_weight_and_first_come_within_one() {
    let turns = Arc::new(Turns::default());
    let mut id = 0;
    let mut places = Vec::new();
    // A bronze flood that came first, then a few gold calls.
    for _ in 0..40 {
        id += 1;
        places.push(turns.join(&tenant("bronze"), 1, at(id, id), None, false));
    }
    for _ in 0..4 {
        id += 1;
        places.push(turns.join(&tenant("gold"), 4, at(100 + id, id), None, false));
    }
    let got = serve(&turns, &mut places, 500, &mut id);
    assert_eq!((got["gold"], got["bronze"]), (400, 100), "four slots to one");
    // Within a lane, the oldest first.
    let bronze: Vec<Order> = turns.lock().lanes[&tenant("bronze")].waiting.keys().copied().collect();
    assert!(bronze.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn a_lane_that_waited_for_nothing_earns_no_credit() {
    let turns = Arc::new(Turns::default());
    let mut id = 0;
    let mut places = Vec::new();
    for _ in 0..10 {
        id += 1;
        places.push(turns.join(&tenant("bronze"), 1, at(id, id), None, false));
    }
    // Bronze alone is served a long time: its pass runs far ahead of where gold's lane would be.
    serve(&turns, &mut places, 1000, &mut id);
    // Gold arrives now, with the same weight: it shares the slots from now on, one to one,
    // instead of taking the next thousand.
    for _ in 0..10 {
        id += 1;
        places.push(turns.join(&tenant("gold"), 1, at(5000 + id, id), None, false));
    }
    let got = serve(&turns, &mut places, 100, &mut id);
    assert!((49..=51).contains(&got["gold"]), "{got:?}");
}

#[test]
fn a_newcomer_of_a_lane_below_the_head_may_pick_and_one_behind_its_own_lane_may_not() {
    let turns = Arc::new(Turns::default());
    let mut id = 0;
    let mut places = Vec::new();
    for _ in 0..5 {
        id += 1;
        places.push(turns.join(&tenant("bronze"), 1, at(id, id), None, false));
    }
    serve(&turns, &mut places, 3, &mut id);
    assert!(turns.may_pick(&tenant("gold"), at(9000, 99)), "gold waits for nothing: it is below bronze's pass");
    assert!(!turns.may_pick(&tenant("bronze"), at(9000, 99)), "a new bronze call queues behind bronze's waiters");
    let gold = turns.join(&tenant("gold"), 1, at(9000, 99), None, false);
    assert!(gold.is_first());
    assert!(!turns.may_pick(&tenant("gold"), at(9001, 100)), "nor behind gold's");
}

#[test]
fn a_new_head_is_woken_when_a_direct_pick_or_a_leaver_hands_it_the_turn() {
    use futures_util::FutureExt;
    let turns = Arc::new(Turns::default());
    let a1 = turns.join(&tenant("a"), 1, at(10, 1), None, false);
    let b1 = turns.join(&tenant("b"), 1, at(20, 2), None, false);
    assert!(heads(&turns, &a1) && !b1.is_first());
    // An older call of a's picks without waiting (back from a back-off): a's lane is charged,
    // and b1 heads the line now. It must hear so, not wait out its patience.
    turns.picked_directly(&tenant("a"), 1, true);
    assert!(heads(&turns, &b1) && !a1.is_first());
    assert!(b1.woken().now_or_never().is_some(), "the new head was woken");
    // A served place that no longer headed the line is charged all the same.
    a1.served(true);
    assert!(turns.lock().lanes.get(&tenant("a")).is_some_and(|lane| lane.pass >= 2.0), "charged twice");
}

#[test]
fn a_lane_held_by_its_own_quota_holds_no_other_lane_back() {
    let turns = Arc::new(Turns::default());
    // Bronze's first waiter found only bronze's own quota full.
    let bronze = turns.join(&tenant("bronze"), 1, at(1, 1), None, true);
    let behind = turns.join(&tenant("bronze"), 1, at(2, 2), None, true);
    assert!(bronze.is_first(), "it may try again whenever it likes");
    assert!(!behind.is_first(), "first come, first served within the lane still");
    assert!(!turns.may_pick(&tenant("bronze"), at(3, 3)), "nor may a newcomer of the lane pass them");
    assert!(turns.may_pick(&tenant("gold"), at(9, 9)), "gold is not held back by bronze's quota");
    // Once the account is what bronze waits for, the lanes compete again.
    let bronze = turns.join(&tenant("bronze"), 1, at(1, 1), Some(bronze), false);
    assert!(bronze.is_first() && !turns.may_pick(&tenant("gold"), at(9, 9)));
}

#[tokio::test(start_paused = true)]
async fn a_place_freed_elsewhere_wakes_the_head_and_every_lane_held_by_its_own_quota() {
    let turns = Arc::new(Turns::default());
    let gold = turns.join(&tenant("gold"), 1, at(1, 1), None, false);
    let bronze = turns.join(&tenant("bronze"), 1, at(2, 2), None, true);
    let behind = turns.join(&tenant("bronze"), 1, at(3, 3), None, true);
    turns.freed_elsewhere();
    let woken = |place: &Place| {
        let wake = place.wake.clone();
        async move { tokio::time::timeout(Duration::from_millis(1), wake.notified()).await.is_ok() }
    };
    assert!(woken(&gold).await, "the head");
    assert!(woken(&bronze).await, "the message does not say whose place it was: it may be bronze's quota");
    assert!(!woken(&behind).await, "first come, first served within the lane");
}

#[test]
fn the_oldest_other_waiter_leaves_out_the_caller_and_lanes_waiting_for_their_own_limits() {
    let turns = Arc::new(Turns::default());
    assert_eq!(turns.oldest_other(&None, at(1, 1)), None, "nobody waits");
    let first = turns.join(&tenant("gold"), 1, at(10, 1), None, false);
    let _second = turns.join(&tenant("gold"), 1, at(20, 2), None, false);
    let _own = turns.join(&tenant("bronze"), 1, at(5, 3), None, true);
    assert_eq!(turns.oldest_other(&tenant("gold"), at(10, 1)), Some(Timestamp::from_millis(20)), "the caller is left out");
    assert_eq!(turns.oldest_other(&tenant("gold"), at(30, 9)), Some(Timestamp::from_millis(10)));
    drop(first);
    assert_eq!(turns.oldest_other(&tenant("gold"), at(20, 2)), None, "a lane waiting for its own quota is nobody's capacity");
    assert!(turns.freed_elsewhere(), "someone waits to be woken");
}

#[test]
fn a_call_that_took_the_last_room_wakes_nobody() {
    use futures_util::FutureExt;
    let turns = Arc::new(Turns::default());
    let first = turns.join(&None, 1, at(1, 1), None, false);
    let second = turns.join(&None, 1, at(2, 2), None, false);
    first.served(false);
    assert!(second.is_first(), "the turn is the second's");
    assert!(second.woken().now_or_never().is_none(), "but only a release can make room for it: it is not woken to be refused");
    // Its pick was refused (it tried on its own, at its patience's end): it waits again.
    let second = turns.join(&None, 1, at(2, 2), Some(second), false);
    turns.freed(&None, true);
    assert!(second.woken().now_or_never().is_some(), "the next release wakes it");
    // A release that came while the head was picking made room its admission did not see: it
    // lets the next waiter go at once, whatever the head's admission says.
    let third = turns.join(&None, 1, at(3, 3), None, false);
    assert!(second.is_first(), "it picks");
    turns.freed(&None, true);
    assert!(third.woken().now_or_never().is_some() && third.is_first(), "the release the second did not wait for is the third's");
    second.served(false);
    // A call that picked without waiting and left no room hands the turn on without a wake.
    let turns = Arc::new(Turns::default());
    let a1 = turns.join(&tenant("a"), 1, at(1, 1), None, false);
    let b1 = turns.join(&tenant("b"), 1, at(2, 2), None, false);
    assert!(heads(&turns, &a1));
    turns.picked_directly(&tenant("a"), 1, false);
    assert!(heads(&turns, &b1) && b1.woken().now_or_never().is_none());
    turns.freed(&None, true);
    assert!(b1.woken().now_or_never().is_some());
}

#[test]
fn each_freed_slot_lets_the_next_waiter_go_in_the_lines_order() {
    use futures_util::FutureExt;
    let turns = Arc::new(Turns::default());
    let a1 = turns.join(&tenant("a"), 1, at(1, 1), None, false);
    let a2 = turns.join(&tenant("a"), 1, at(2, 2), None, false);
    let b1 = turns.join(&tenant("b"), 1, at(3, 3), None, false);
    let a3 = turns.join(&tenant("a"), 1, at(4, 4), None, false);
    // A burst of three releases: the three next waiters go at once, not one pick after another,
    // and between tenants in the weighted order (a1 is a's slot, then b's turn, then a's again).
    for _ in 0..3 {
        turns.freed(&None, true);
    }
    for place in [&a1, &b1, &a2] {
        assert!(place.woken().now_or_never().is_some() && place.is_first());
    }
    counts_agree(&turns);
    assert!(a3.woken().now_or_never().is_none() && !a3.is_first(), "three slots, three waiters");
    // Served without room, they wake nobody; one that gives its place up passes its slot on.
    a1.served(false);
    b1.served(false);
    assert!(a3.woken().now_or_never().is_none());
    drop(a2);
    assert!(a3.woken().now_or_never().is_some() && a3.is_first(), "a2's slot is a3's");
    // One refused waits again, for the next release.
    let a3 = turns.join(&tenant("a"), 1, at(4, 4), Some(a3), false);
    let a4 = turns.join(&tenant("a"), 1, at(5, 5), None, false);
    assert!(heads(&turns, &a3) && !a4.is_first());
    turns.freed(&None, true);
    assert!(a3.woken().now_or_never().is_some() && a4.woken().now_or_never().is_none(), "the head's slot");
    turns.freed_elsewhere();
    assert!(a4.woken().now_or_never().is_some() && a4.is_first(), "one freed in another process goes to the next");
    counts_agree(&turns);
    drop((a3, a4));
    assert!(turns.lock().lanes.values().all(|lane| lane.picking == 0), "nobody left picks");
}

#[test]
fn room_left_while_others_pick_is_theirs_first() {
    use futures_util::FutureExt;
    let turns = Arc::new(Turns::default());
    let places: Vec<Place> = (1..=3).map(|n| turns.join(&None, 1, at(n, n), None, false)).collect();
    let [first, second, third] = <[Place; 3]>::try_from(places).ok().unwrap();
    turns.freed(&None, true);
    turns.freed(&None, true);
    assert!(first.is_first() && second.is_first());
    first.served(true);
    assert!(third.woken().now_or_never().is_none(), "the room the first saw may be the second's slot");
    second.served(true);
    assert!(third.woken().now_or_never().is_some() && third.is_first(), "room after both: the third goes");
    counts_agree(&turns);
}
