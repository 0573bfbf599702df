//! The account limit's rules (SPEC §4), one test a rule: noise against a burst, the burst
//! window, the refused ceiling held and forgotten, the generation, pacing below one, expiry.

use super::*;
use crate::request::{RateReport, RateSignal};
use AimdEffect::{Decrease, Increase, Nothing, RoundTrip};

const PARAMS: PacerParams = PacerParams { ceiling: 16.0, lease_ttl: Duration::from_secs(60), limit_window: Duration::from_secs(60) };

fn ms(t: u64) -> Timestamp {
    Timestamp::from_millis(t)
}

/// `k` leases taken at `at`.
fn take(p: &mut AccountPacer, k: usize, at: u64) -> Vec<Lease> {
    (0..k).map(|_| p.try_acquire(&PARAMS, 1, ms(at)).unwrap()).collect()
}

/// One attempt taken at `at` and ended with `effect` `took` ms later; the limit after.
fn round(p: &mut AccountPacer, at: u64, took: u64, effect: AimdEffect) -> f64 {
    let lease = p.try_acquire(&PARAMS, 1, ms(at)).unwrap();
    p.release(lease, effect, None, &PARAMS, ms(at + took))
}

#[test]
fn starts_at_eight_or_the_ceiling_and_grows_to_the_ceiling() {
    assert_eq!(AccountPacer::new(&PARAMS).limit(), 8.0);
    assert_eq!(AccountPacer::new(&PacerParams { ceiling: 3.0, ..PARAMS }).limit(), 3.0);
    let mut p = AccountPacer::new(&PARAMS);
    let mut limit = p.limit();
    for _ in 0..200 {
        let before = limit;
        limit = round(&mut p, 1, 10, Increase);
        assert!((limit - (before + 1.0 / before).min(16.0)).abs() < 1e-12, "+1/L per success");
    }
    assert_eq!(limit, 16.0);
}

#[test]
fn a_lease_says_whether_it_left_room_for_another() {
    let mut p = AccountPacer::new(&PacerParams { ceiling: 3.0, ..PARAMS });
    let leases = take(&mut p, 3, 1);
    assert_eq!(leases.iter().map(|l| l.room).collect::<Vec<_>>(), [true, true, false], "the third took the last place");
    p.release(leases[0], Nothing, None, &PARAMS, ms(2));
    assert!(!take(&mut p, 1, 3)[0].room, "the place a release freed was the only one");
}

#[test]
fn lone_429s_are_noise_and_a_burst_cuts_once() {
    let (mut p, mut quiet) = (AccountPacer::new(&PARAMS), AccountPacer::new(&PARAMS));
    // Other tenants' noise: a 429 now and then among successes never cuts.
    for i in 0..50 {
        let noisy = i % 5 == 0;
        round(&mut p, 1000 * i, 500, if noisy { Decrease } else { Increase });
        if !noisy {
            round(&mut quiet, 1000 * i, 500, Increase);
        }
    }
    assert_eq!((p.limit(), p.generation(), p.learned_ceiling()), (quiet.limit(), 0, None), "noise never cut");
    // Our own load past the account's limit: eight in flight answered 429 within 20 ms.
    let mut p = AccountPacer::new(&PARAMS);
    let burst = take(&mut p, 8, 100_000);
    let after: Vec<f64> = burst.iter().map(|lease| p.release(*lease, Decrease, None, &PARAMS, ms(100_020))).collect();
    assert_eq!(after[..2], [8.0, 8.0], "two 429s are not yet a burst");
    // The third cuts by 0.7 from the flight it met (six of the eight still out, itself included),
    // the rest are the same round trip.
    assert!(after[2..].iter().all(|l| (l - 4.2).abs() < 1e-12), "{after:?}");
    assert_eq!(p.generation(), 1);
    assert_eq!(p.learned_ceiling(), Some(LearnedCeiling { at: 2, held: false }), "the ceiling is the third's n");
}

#[test]
fn the_burst_window_is_four_429_latencies() {
    let mut p = AccountPacer::new(&PARAMS);
    // 429s answered after 20 ms: a window of 80 ms.
    round(&mut p, 0, 20, Decrease);
    round(&mut p, 50, 20, Decrease);
    assert_eq!(round(&mut p, 150, 20, Decrease), 8.0, "the others are 100 and 150 ms old: not a burst");
    assert_eq!(round(&mut p, 160, 20, Decrease), 8.0, "two within 80 ms");
    assert!((round(&mut p, 170, 20, Decrease) - 0.7).abs() < 1e-12, "three within 80 ms: a cut from the flight it met, one");
    // A rate-bound account's limit stands above its flight: a burst cuts from the flight.
    let mut p = AccountPacer { limit: 30.0, ..AccountPacer::new(&PacerParams { ceiling: 32.0, ..PARAMS }) };
    let ten = take(&mut p, 10, 1000);
    let after: Vec<f64> = ten.iter().map(|lease| p.release(*lease, Decrease, None, &PARAMS, ms(1020))).collect();
    assert!((after[2] - 0.7 * 8.0).abs() < 1e-12, "eight still out when the third came back: {after:?}");
    assert_eq!(p.generation(), 1);
}

#[test]
fn a_refused_probe_holds_the_ceiling_and_a_success_above_it_forgets_it() {
    let mut p = AccountPacer { limit: 10.0, learned: Some(LearnedCeiling { at: 10, held: false }), epoch: 1, ..AccountPacer::new(&PARAMS) };
    // Ten in flight: the eleventh (n = 10 ≥ W) is the probe; it is refused.
    let first = take(&mut p, 10, 0);
    p.limit = 11.0;
    let probe = p.try_acquire(&PARAMS, 1, ms(0)).unwrap();
    assert_eq!(probe.n, 10);
    assert_eq!(p.release(probe, Decrease, None, &PARAMS, ms(20)), 9.0, "L ← min(L, n − 1)");
    assert_eq!((p.learned_ceiling(), p.epoch, p.generation()), (Some(LearnedCeiling { at: 10, held: true }), 2, 0), "held; no cut");
    // Held and L ≥ W − 1: the limit grows by 1/(8L) a success.
    for lease in &first[..2] {
        p.release(*lease, Increase, None, &PARAMS, ms(1000));
    }
    assert!((p.limit() - (9.0 + 1.0 / 72.0 + 1.0 / (8.0 * (9.0 + 1.0 / 72.0)))).abs() < 1e-12);
    // A lease of an older epoch at n ≥ W succeeding says nothing; one of this epoch does.
    let stale = Lease { epoch: 1, n: 12, ..first[2] };
    p.release(stale, Increase, None, &PARAMS, ms(1000));
    assert!(p.learned_ceiling().is_some(), "a lease of the old epoch does not clear it");
    p.limit = 11.0;
    let above = take(&mut p, 4, 2000).pop().unwrap();
    assert!(above.n >= 10, "{above:?}");
    let before = p.limit();
    assert_eq!(p.release(above, Increase, None, &PARAMS, ms(3000)), before + 1.0 / before, "forgotten: +1/L again");
    assert_eq!(p.learned_ceiling(), None);
}

#[test]
fn a_429_that_meets_a_flight_above_the_ceiling_is_the_refused_probe() {
    // Held at W = 10 with L just past 11: a lease at n = 9, then the probe at n = 10. On the way
    // the probe overtakes the first, takes the account's last slot, and the first is refused.
    let held = AccountPacer { limit: 11.0, learned: Some(LearnedCeiling { at: 10, held: true }), epoch: 1, ..AccountPacer::new(&PARAMS) };
    let mut p = held.clone();
    take(&mut p, 9, 0);
    let (overtaken, probe) = (p.try_acquire(&PARAMS, 1, ms(0)).unwrap(), p.try_acquire(&PARAMS, 1, ms(0)).unwrap());
    assert_eq!((overtaken.n, probe.n), (9, 10));
    assert_eq!(p.release(overtaken, Decrease, None, &PARAMS, ms(20)), 9.0, "the flight it met is 10 ≥ W: L ← min(L, W − 1)");
    assert_eq!(
        (p.learned_ceiling(), p.epoch, p.generation()),
        (Some(LearnedCeiling { at: 10, held: true }), 2, 0),
        "W kept, held, a new epoch"
    );
    // The probe that overtook it succeeds, but of the old epoch: the ceiling stays.
    p.release(probe, Increase, None, &PARAMS, ms(1000));
    assert_eq!(p.learned_ceiling(), Some(LearnedCeiling { at: 10, held: true }));
    // A 429 below W while the flight is below W too is noise, as before.
    let mut p = held;
    let leases = take(&mut p, 9, 0);
    assert_eq!(p.release(leases[8], Decrease, None, &PARAMS, ms(20)), 11.0, "n = 8, eight still out: noise");
    assert_eq!((p.learned_ceiling(), p.epoch), (Some(LearnedCeiling { at: 10, held: true }), 1));
}

#[test]
fn a_429_of_an_older_generation_changes_nothing() {
    let mut p = AccountPacer::new(&PARAMS);
    let old = take(&mut p, 1, 0)[0];
    for t in [10, 20, 30] {
        round(&mut p, t, 5, Decrease);
    }
    let (limit, generation, ceiling) = (p.limit(), p.generation(), p.learned_ceiling());
    assert_eq!(generation, 1);
    assert_eq!(p.release(Lease { n: 20, ..old }, Decrease, None, &PARAMS, ms(40)), limit);
    assert_eq!((p.generation(), p.learned_ceiling()), (generation, ceiling));
}

#[test]
fn below_one_in_flight_the_account_is_paced_and_cut_without_a_burst() {
    let mut p = AccountPacer { limit: 1.0, ..AccountPacer::new(&PARAMS) };
    for t in [0, 10] {
        round(&mut p, t, 1000, RoundTrip);
    }
    assert_eq!(p.srtt, Some(1000.0), "an invalid answer times a round trip");
    round(&mut p, 3000, 20, Nothing);
    assert_eq!(p.srtt, Some(1000.0), "a timeout does not");
    // Three 429s at one in flight: a burst cuts to 0.7.
    for t in [4000, 4010] {
        round(&mut p, t, 5, Decrease);
    }
    assert_eq!(round(&mut p, 4020, 5, Decrease), 0.7);
    // One at a time, the next (1/0.7 − 1) × 1000 ms = 428 ms after the last ended.
    assert_eq!(p.ready_at, Some(ms(4025 + 428)));
    let spacing = Paced { limit: 0.7, inflight: 0, ready_in: Some(Duration::from_millis(1)) };
    assert_eq!(p.try_acquire(&PARAMS, 1, ms(4452)), Err(spacing), "time alone lifts the spacing: its end is told");
    let lease = p.try_acquire(&PARAMS, 1, ms(4453)).unwrap();
    assert!(p.try_acquire(&PARAMS, 1, ms(4453)).is_err(), "one at a time");
    // Below one a current 429 cuts alone, down to the floor.
    assert!((p.release(lease, Decrease, None, &PARAMS, ms(4500)) - 0.49).abs() < 1e-12);
    for k in 0..20u64 {
        let at = p.ready_at.unwrap().as_millis() + k;
        round(&mut p, at, 1, Decrease);
    }
    assert_eq!(p.limit(), FLOOR);
    // A success climbs back by +1/L: out of pacing at once.
    let at = p.ready_at.unwrap().as_millis();
    assert_eq!(round(&mut p, at, 1000, Increase), 16.0, "1/16 + 16, at the ceiling");
    assert_eq!(p.ready_at, None);
}

#[test]
fn a_lease_left_unreleased_expires() {
    let one = PacerParams { ceiling: 1.0, ..PARAMS };
    let mut p = AccountPacer::new(&one);
    let _lost = p.try_acquire(&one, 1, ms(0)).unwrap();
    let full = Paced { limit: 1.0, inflight: 1, ready_in: None };
    assert_eq!(p.try_acquire(&one, 1, ms(30_000)), Err(full), "a release frees the place: no time is told");
    assert_eq!(p.inflight(ms(59_999)), 1);
    assert!(p.try_acquire(&one, 1, ms(60_000)).is_ok(), "a crashed worker's lease ended by itself");
}

fn requests(limit: Option<u64>, remaining: u64, reset_ms: u64) -> RateSignal {
    RateSignal { requests: Some(RateReport { limit, remaining, reset: Duration::from_millis(reset_ms) }), tokens: None }
}

#[test]
fn no_requests_left_grants_nothing_until_the_reset() {
    let mut p = AccountPacer::new(&PARAMS);
    let lease = p.try_acquire(&PARAMS, 1, ms(0)).unwrap();
    // Counted at the grant (0 ms): none left, full again 2 s later; no limit advertised.
    p.release(lease, Increase, Some(&requests(None, 0, 2000)), &PARAMS, ms(500));
    let spent = Paced { limit: p.limit(), inflight: 0, ready_in: Some(Duration::from_millis(1)) };
    assert_eq!(p.try_acquire(&PARAMS, 1, ms(1999)), Err(spent), "a certain 429 is not sent; the reset is told");
    assert_eq!(p.try_acquire(&PARAMS, 1, ms(500)).unwrap_err().ready_in, Some(Duration::from_millis(1500)));
    assert!(p.try_acquire(&PARAMS, 1, ms(2000)).is_ok(), "at the reset the account grants again");
}

#[test]
fn what_is_left_refills_and_is_drawn_down_by_later_leases() {
    let mut p = AccountPacer::new(&PARAMS);
    let older = p.try_acquire(&PARAMS, 1, ms(0)).unwrap();
    let reporting = p.try_acquire(&PARAMS, 1, ms(0)).unwrap();
    let later = p.try_acquire(&PARAMS, 1, ms(0)).unwrap();
    // 6000 a minute, 2 left when `reporting` was counted, full again in 5998 s: one refills
    // every second.
    p.release(reporting, Increase, Some(&requests(Some(6000), 2, 5_998_000)), &PARAMS, ms(100));
    // `later`, granted after it was counted, spent one of the two.
    assert!(p.try_acquire(&PARAMS, 1, ms(100)).is_ok(), "the last one left");
    let none_left = p.try_acquire(&PARAMS, 1, ms(100)).unwrap_err();
    assert_eq!(none_left.ready_in, Some(Duration::from_millis(900)), "none left; the refill's next one is told");
    assert_eq!(p.try_acquire(&PARAMS, 1, ms(999)).unwrap_err().ready_in, Some(Duration::from_millis(1)));
    assert!(p.try_acquire(&PARAMS, 1, ms(1000)).is_ok(), "one refilled after a second");
    // A report counted before the one kept changes nothing.
    p.release(older, Increase, Some(&requests(Some(6000), 6000, 0)), &PARAMS, ms(1100));
    assert!(p.try_acquire(&PARAMS, 1, ms(1100)).is_err(), "the older report is not kept");
    p.release(later, Increase, None, &PARAMS, ms(1100));
}

#[test]
fn tokens_left_are_weighed_against_the_calls_estimate() {
    let mut p = AccountPacer::new(&PARAMS);
    let lease = p.try_acquire(&PARAMS, 100, ms(0)).unwrap();
    let tokens = RateSignal { requests: None, tokens: Some(RateReport { limit: None, remaining: 500, reset: Duration::from_secs(10) }) };
    p.release(lease, Increase, Some(&tokens), &PARAMS, ms(10));
    let too_many = p.try_acquire(&PARAMS, 600, ms(20)).unwrap_err();
    assert_eq!(too_many.ready_in, Some(Duration::from_millis(9980)), "600 estimated, 500 left: no refill, the reset is told");
    assert!(p.try_acquire(&PARAMS, 300, ms(20)).is_ok());
    assert!(p.try_acquire(&PARAMS, 300, ms(20)).is_err(), "the first 300 were drawn from it");
    assert!(p.try_acquire(&PARAMS, 200, ms(20)).is_ok());
}

#[test]
fn an_advertised_limit_caps_the_limit_and_the_learned_ceiling() {
    let mut p = AccountPacer::new(&PARAMS);
    // A 1 s round trip at 120 requests a minute: 2 per round trip, so L ≤ 2 × 2 = 4.
    for i in 0..200 {
        round(&mut p, 1000 * i, 1000, Increase);
    }
    assert_eq!(p.limit(), 16.0);
    let lease = p.try_acquire(&PARAMS, 1, ms(300_000)).unwrap();
    let limit = p.release(lease, Increase, Some(&requests(Some(120), 100, 10_000)), &PARAMS, ms(301_000));
    assert_eq!(limit, budget::ADVERTISED_HEADROOM * 2.0);
    p.learned = Some(LearnedCeiling { at: 12, held: true });
    round(&mut p, 400_000, 1000, Nothing);
    assert_eq!(p.learned_ceiling(), Some(LearnedCeiling { at: 4, held: true }), "W is capped too");
}
