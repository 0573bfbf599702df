//! The line across processes (Redis only; in one process the client's own line orders its
//! waiters): what a release frees goes to the process whose refused waiter started first, that
//! process alone is told, an admission ends its standing, and a standing not renewed lapses.

#![allow(clippy::unwrap_used)]

use crate::support::{Backend, params, redis_connection, seed_breaker};
use gateway_core::aimd::PacerParams;
use gateway_core::breaker::GateParams;
use gateway_core::combined::{Admission, Admit, AttemptGate, Freed, GateAsk, InLine, PaceAsk, PaceRecord, PermitAsk, Records};
use gateway_core::outcome::AimdEffect;
use gateway_core::policy::QuotaLimits;
use gateway_core::ports::{PaceLease, SourceKey};
use gateway_redis::{RedisAttempts, RedisGates, RedisPacer, RedisQuota, watch_freed};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One process: its attempts, the scopes its watch was told of, and whether it has nobody to
/// wake (then what it is told is passed on).
struct Process {
    attempts: RedisAttempts,
    told: Arc<Mutex<Vec<String>>>,
    nobody: Arc<AtomicBool>,
}

async fn process(b: &Backend) -> Process {
    let conn = redis_connection(b.redis_url().unwrap(), Some(b.clock.clone())).await;
    let (told, nobody) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
    let (heard, empty) = (told.clone(), nobody.clone());
    drop(watch_freed(&conn, move |scope| {
        heard.lock().unwrap().push(scope.to_owned());
        !empty.load(Ordering::Relaxed)
    }));
    let attempts = RedisAttempts::new(RedisGates::new(conn.clone()), RedisQuota::new(conn.clone()), RedisPacer::new(conn));
    Process { attempts, told, nobody }
}

/// Waits (real time: a message) until `who` has been told `n` times, at most 5 s.
async fn told(who: &Process, n: usize) -> Vec<String> {
    for _ in 0..500 {
        if who.told.lock().unwrap().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    who.told.lock().unwrap().clone()
}

/// The one account both processes ask.
struct Account<'a> {
    gate: &'a SourceKey,
    account: &'a SourceKey,
    gate_params: &'a GateParams,
    pacer: &'a PacerParams,
}

impl Account<'_> {
    /// `who`'s call that has waited `waited_s` asks for the place.
    async fn admit(&self, who: &Process, waited_s: f64) -> Admission {
        let ask = Admit {
            pace: Some(PaceAsk { key: self.account, params: self.pacer, tokens: 1 }),
            gate: GateAsk { key: self.gate, params: self.gate_params },
            permit: None,
            line: Some(InLine { waited: Duration::from_secs_f64(waited_s), others: None, lasts: Duration::from_secs(3) }),
        };
        who.attempts.admit(&ask).await.unwrap()
    }

    /// `who` releases `lease`; whether it went to another process's waiter.
    async fn release(&self, who: &Process, lease: PaceLease, waiting_here: bool) -> bool {
        let pace = PaceRecord { lease: &lease, effect: AimdEffect::Nothing, rate: None, params: self.pacer };
        let freed = Freed { waiting_here, grace: Duration::from_millis(500) };
        let records = Records { pace: Some(pace), freed: Some(freed), ..Records::default() };
        who.attempts.record(&records).await.unwrap().elsewhere
    }
}

pub async fn freed_capacity_goes_to_the_process_whose_waiter_is_oldest(b: Backend) {
    let (one, two) = (process(&b).await, process(&b).await);
    // Both watches subscribe before anything is told (a subscription takes a round trip).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (gate, account, p) = (b.key("s"), b.key("k"), params(seed_breaker(), 1));
    // One place on the account.
    let pacer = PacerParams { ceiling: 1.0, lease_ttl: Duration::from_secs(30), limit_window: Duration::from_secs(60) };
    let the = Account { gate: &gate, account: &account, gate_params: &p, pacer: &pacer };
    let place = |admission: Admission| match admission {
        Admission::Admitted { lease: Some(lease), .. } => lease,
        other => panic!("the account's one place was not granted: {other:?}"),
    };
    b.at(100.0);
    // 1. One takes the place (its process stands in no line: nobody else waits there); two's call (waiting 5 s) and then one's own (1 s) are refused.
    let held = place(the.admit(&one, 0.0).await);
    assert!(matches!(the.admit(&two, 5.0).await, Admission::Paced(_)));
    assert!(matches!(the.admit(&one, 1.0).await, Admission::Paced(_)));
    // 2. One releases with its own call waiting: two's waiter started first, so two is told
    // and one wakes nobody.
    assert!(the.release(&one, held, true).await, "the place went to this process, not to the older waiter of the other");
    assert_eq!(told(&two, 1).await, std::slice::from_ref(&b.scope));
    // 3. Two's waiter takes the place (its process no longer stands in line) and releases it
    // with nobody waiting there: one, still standing, is told.
    let held = place(the.admit(&two, 5.0).await);
    assert!(the.release(&two, held, false).await, "one's refused waiter was not handed the place");
    assert_eq!(told(&one, 1).await, std::slice::from_ref(&b.scope));
    // 4. Two's own older waiter keeps what two frees, and nobody is told: two takes the place,
    // its call of 3 s is refused, one's of 1 s too; two releases.
    let held = place(the.admit(&two, 0.0).await);
    assert!(matches!(the.admit(&two, 3.0).await, Admission::Paced(_)));
    assert!(matches!(the.admit(&one, 1.0).await, Admission::Paced(_)));
    assert!(!the.release(&two, held, true).await, "the place left the process whose waiter is oldest");
    // 5. Two's waiter takes it; one's, now the oldest, is handed what two frees next.
    let held = place(the.admit(&two, 3.0).await);
    assert!(the.release(&two, held, true).await);
    assert_eq!(told(&one, 2).await.len(), 2);
    // 6. Waiters that started within the grace (0.5 s) of each other are as good as tied: the
    // place stays where it was freed. One takes it; its call of 1 s and two's of 1.3 s wait.
    let held = place(the.admit(&one, 0.0).await);
    assert!(matches!(the.admit(&one, 1.0).await, Admission::Paced(_)));
    assert!(matches!(the.admit(&two, 1.3).await, Admission::Paced(_)));
    assert!(!the.release(&one, held, true).await, "a waiter only 0.3 s older elsewhere was handed the place");
    // 7. A standing not renewed lapses: past `lasts` nobody stands in line, and a release
    // with nobody waiting in its process tells nobody. One still stands (since step 6).
    let held = place(the.admit(&two, 0.0).await);
    b.at(110.0);
    let before = (one.told.lock().unwrap().len(), two.told.lock().unwrap().len());
    assert!(!the.release(&two, held, false).await, "a lapsed standing was handed the place");
    // One's next refusal stands it in line again, and the next release is handed to it: the
    // message it hears is that one (messages on one connection arrive in order).
    let held = place(the.admit(&two, 0.0).await);
    assert!(matches!(the.admit(&one, 1.0).await, Admission::Paced(_)));
    assert!(the.release(&two, held, false).await);
    assert_eq!(told(&one, before.0 + 1).await.len(), before.0 + 1, "a release with nobody in line told one");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(two.told.lock().unwrap().len(), before.1, "a release with nobody in line told two");
    // 8. A process told of capacity it has nobody for leaves the line and passes it on: one
    // (standing since 109 s) hears of two's release, has nobody, and two (since 109.8 s) is told.
    one.nobody.store(true, Ordering::Relaxed);
    let held = place(the.admit(&two, 0.0).await);
    assert!(matches!(the.admit(&two, 0.2).await, Admission::Paced(_)));
    let heard = two.told.lock().unwrap().len();
    assert!(the.release(&two, held, true).await);
    assert_eq!(told(&two, heard + 1).await.len(), heard + 1, "what one had nobody for was not passed on");
    // 9. A call refused by a quota its tenant has to itself does not stand its process in line
    // (it is nobody else's capacity): one's gold call is refused its own permit, and what two
    // frees next is handed to nobody.
    one.nobody.store(false, Ordering::Relaxed);
    let gold = b.key("q").with_tenant("gold");
    let limits = QuotaLimits { max_concurrency: Some(1), rpm: None, tpm: None, permit_ttl: Duration::from_secs(30) };
    let own = |waited_s: u64| Admit {
        pace: None,
        gate: GateAsk { key: &gold, params: &p },
        permit: Some(PermitAsk { key: &gold, limits: &limits, tokens: 1 }),
        line: Some(InLine { waited: Duration::from_secs(waited_s), others: None, lasts: Duration::from_secs(3) }),
    };
    assert!(matches!(one.attempts.admit(&own(0)).await.unwrap(), Admission::Admitted { permit: Some(_), .. }));
    assert!(matches!(one.attempts.admit(&own(5)).await.unwrap(), Admission::Refused { .. }));
    let held = place(the.admit(&two, 0.0).await);
    assert!(!the.release(&two, held, false).await, "a refusal by the tenant's own quota stood its process in line");
}
