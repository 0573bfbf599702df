//! When a release lets the next waiter go (SPEC §6), on a shared backend as the client meets
//! Redis: each operation is made when it is sent, in the order sent, and answered a round trip
//! later. The next waiter goes as soon as a release is on its way (its admission, sent after it,
//! finds what it freed), not a round trip later; once a release went to another process's
//! waiter, the next one waits for its answer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use async_trait::async_trait;
use gateway_client::{Collector, GatewayClient, Preset, TokioClock};
use gateway_core::combined::{Admission, Admit, AttemptGate, InOrder, Recorded, Records};
use gateway_core::ports::BackendError;
use gateway_core::time::Clock;
use gateway_memory::{MemoryGates, MemoryPacer, MemoryQuota};
use gateway_mock::{ScriptedUpstream, Step};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{chat, sources};

/// A round trip to the shared backend.
const TRIP: Duration = Duration::from_millis(50);

/// How long the client lets a record take.
const RECORD_TIMEOUT: Duration = Duration::from_millis(100);

/// The memory backend reached as Redis is: each operation made when sent, an admission answered
/// `TRIP` later and a release `answered` later; the first `elsewhere` releases answer that what
/// they freed went to another process.
struct RoundTrips {
    made: InOrder,
    clock: Arc<dyn Clock>,
    answered: Duration,
    elsewhere: AtomicUsize,
    /// When each admission was asked, in virtual ms.
    asked: Mutex<Vec<u64>>,
    /// Whether a release is carried by the next waiter's admission (`carries_records`).
    carries: bool,
    /// When records were made on their own, and carried by an admission, in virtual ms.
    alone: Mutex<Vec<u64>>,
    carried: Mutex<Vec<u64>>,
    /// When records made on their own held the gate's record of the attempt (not only what a
    /// dropped attempt hands back), in virtual ms.
    alone_gate: Mutex<Vec<u64>>,
    /// The carried records the backend answers it could not take (not made), first ones first.
    unavailable: AtomicUsize,
}

#[async_trait]
impl AttemptGate for RoundTrips {
    async fn admit(&self, ask: &Admit<'_>) -> Result<Admission, BackendError> {
        self.asked.lock().unwrap().push(self.clock.now().as_millis());
        let admission = self.made.admit(ask).await;
        tokio::time::sleep(TRIP).await;
        admission
    }

    async fn record(&self, records: &Records<'_>) -> Result<Recorded, BackendError> {
        self.alone.lock().unwrap().push(self.clock.now().as_millis());
        if records.gate.is_some() {
            self.alone_gate.lock().unwrap().push(self.clock.now().as_millis());
        }
        let mut recorded = self.made.record(records).await?;
        recorded.elsewhere = self.elsewhere.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok();
        tokio::time::sleep(self.answered).await;
        Ok(recorded)
    }

    /// Both made when sent, answered one round trip later.
    async fn record_then_admit(
        &self,
        records: &Records<'_>,
        ask: &Admit<'_>,
    ) -> (Result<Recorded, BackendError>, Result<Admission, BackendError>) {
        let now = self.clock.now().as_millis();
        self.carried.lock().unwrap().push(now);
        self.asked.lock().unwrap().push(now);
        if self.unavailable.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
            // Both made, the records' answer lost (as a command timeout after the script ran).
            let _ = self.made.record(records).await;
            let admission = self.made.admit(ask).await;
            tokio::time::sleep(TRIP).await;
            let lost = BackendError::BackendUnavailable { backend: "test", key: "s1".into(), detail: "timed out".into() };
            return (Err(lost), admission);
        }
        let recorded = self.made.record(records).await.map(|mut recorded| {
            recorded.elsewhere = self.elsewhere.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok();
            recorded
        });
        let answers = (recorded, self.made.admit(ask).await);
        tokio::time::sleep(TRIP).await;
        answers
    }

    fn carries_records(&self) -> bool {
        self.carries
    }

    fn stands_in_line(&self) -> bool {
        true
    }
}

/// A client on one source of one place (`max_concurrency` 1) whose answers take 500 ms, on
/// `RoundTrips` answering releases `answered` later and `elsewhere` of them as handed to another
/// process; waiters poll every 5 s, so that only a release wakes one within the test.
fn client(elsewhere: usize, answered: Duration) -> (GatewayClient, Arc<RoundTrips>) {
    let extra = json!({"poll_interval_s": 5, "sources": {"s1": {"max_concurrency": 1, "timeout_s": 30}}});
    client_carrying(elsewhere, answered, false, extra)
}

/// [`client`], on a backend that carries a release with the next waiter's admission when
/// `carries`, with the scope's policy `extra`.
fn client_carrying(elsewhere: usize, answered: Duration, carries: bool, extra: serde_json::Value) -> (GatewayClient, Arc<RoundTrips>) {
    let clock = Arc::new(TokioClock::new());
    let (gates, quota, pacer) =
        (Arc::new(MemoryGates::new(clock.clone())), Arc::new(MemoryQuota::new(clock.clone())), Arc::new(MemoryPacer::new(clock.clone())));
    let attempts = Arc::new(RoundTrips {
        made: InOrder { gates: gates.clone(), quota: quota.clone(), pacer: pacer.clone() },
        clock: clock.clone(),
        answered,
        elsewhere: AtomicUsize::new(elsewhere),
        asked: Mutex::default(),
        carries,
        alone: Mutex::default(),
        carried: Mutex::default(),
        alone_gate: Mutex::default(),
        unavailable: AtomicUsize::new(0),
    });
    let upstream = ScriptedUpstream::new();
    upstream.plan("s1", |_| (Step::Ok, Duration::from_millis(500)));
    let policy = sources(1, extra);
    let client = GatewayClient::builder()
        .preset(Preset::Default)
        .scope(policy)
        .gates(gates)
        .quota(quota)
        .pacer(pacer)
        .attempts(attempts.clone())
        .upstream(upstream)
        .telemetry(Arc::new(Collector::new()))
        .background_records(64, RECORD_TIMEOUT)
        .clock(clock)
        .seed(7)
        .build()
        .unwrap();
    (client, attempts)
}

/// Calls started at each of `starts` (ms), all answered.
async fn calls(client: &GatewayClient, starts: &[u64]) {
    let calls = starts.iter().map(|&start| async move {
        tokio::time::sleep(Duration::from_millis(start)).await;
        client.call("chat", &chat()).await.unwrap();
    });
    futures_util::future::join_all(calls).await;
}

#[tokio::test(start_paused = true)]
async fn the_next_waiter_goes_as_soon_as_the_release_is_on_its_way() {
    let (client, backend) = client(0, TRIP);
    calls(&client, &[0, 10]).await;
    // The first call is admitted at 0 (answered at 50), served until 550, and releases its
    // place then; the second, refused at 10, asks again the moment the release is sent.
    assert_eq!(*backend.asked.lock().unwrap(), [0, 10, 550]);
}

#[tokio::test(start_paused = true)]
async fn after_a_release_went_to_another_process_the_next_waits_for_its_answer() {
    let (client, backend) = client(1, TRIP);
    calls(&client, &[0, 10, 20]).await;
    // The first release (550) goes out before the client knows where it will go: the second
    // call asks at once, and gets the place (nobody else took it). Its admission, answered at
    // 600, lets the third try (a scope that does not pace cannot tell whether room is left; it
    // is refused). The first release's answer (600) says it went to another process's waiter,
    // so the second call's own release (1 100) lets the third ask again only when it is
    // answered (1 150), and stayed here.
    assert_eq!(*backend.asked.lock().unwrap(), [0, 10, 20, 550, 600, 1150]);
}

#[tokio::test(start_paused = true)]
async fn a_release_dropped_before_its_answer_lets_nobody_else_go_for_its_place() {
    // Releases are never answered; the client drops each after the 100 ms a record may take.
    let (client, backend) = client(0, Duration::from_secs(3600));
    calls(&client, &[0, 10, 20]).await;
    // The first release (550) lets the second call go; its admission, answered at 600, lets the
    // third try. The release, dropped at 650, hands back what it still holds and lets nobody
    // else go for the place: the third asks again when the second call's release is sent.
    assert_eq!(*backend.asked.lock().unwrap(), [0, 10, 20, 550, 600, 1100]);
}

#[tokio::test(start_paused = true)]
async fn a_release_goes_with_the_admission_of_the_waiter_it_lets_go() {
    // A quota of the source's own (the waiter's lane waits for it alone), then an account's
    // learned limit of one place (the line's next waiter is let go; its first refusal, answered
    // at 60, has it ask once more before it waits in line).
    let own = json!({"poll_interval_s": 5, "sources": {"s1": {"max_concurrency": 1, "timeout_s": 30}}});
    let account = json!({"poll_interval_s": 5, "concurrency": 1, "sources": {"s1": {"timeout_s": 30}}});
    for (extra, asked) in [(own, vec![0, 10, 550]), (account, vec![0, 10, 60, 550])] {
        let (client, backend) = client_carrying(0, TRIP, true, extra.clone());
        calls(&client, &[0, 10]).await;
        // The first call's release (550) is not sent on its own: the second call, let go for
        // its place, sends it with its admission, in one operation; the second call's own
        // release (1 100) finds nobody waiting and goes alone.
        assert_eq!(*backend.asked.lock().unwrap(), asked, "{extra}");
        assert_eq!(*backend.carried.lock().unwrap(), [550], "{extra}");
        assert_eq!(*backend.alone.lock().unwrap(), [1100], "{extra}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_release_goes_alone_after_one_went_to_another_process() {
    let extra = json!({"poll_interval_s": 5, "concurrency": 1, "sources": {"s1": {"timeout_s": 30}}});
    let (client, backend) = client_carrying(1, TRIP, true, extra);
    calls(&client, &[0, 10, 20]).await;
    // The first release (550) is carried by the second call's admission, and answers that what
    // it freed went to another process (the backend says so; the second call is admitted all
    // the same, nobody else took it). The second call's own release (1 100) is then sent
    // alone, and the third asks again only when it is answered (1 150), as without carrying;
    // its own release (1 700) finds nobody waiting.
    assert_eq!(*backend.carried.lock().unwrap(), [550]);
    assert_eq!(*backend.alone.lock().unwrap(), [1100, 1700]);
    assert_eq!(*backend.asked.lock().unwrap(), [0, 10, 20, 60, 550, 1150]);
}

#[tokio::test(start_paused = true)]
async fn records_handed_to_a_call_that_ends_before_it_picks_are_made_on_their_own() {
    let own = json!({"poll_interval_s": 5, "sources": {"s1": {"max_concurrency": 1, "timeout_s": 30}}});
    let (client, backend) = client_carrying(0, TRIP, true, own);
    let request = chat();
    let first = client.call("chat", &request);
    let second = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        client.call("chat", &chat()).await
    };
    // The first call ends at 550 and hands its records to the second, which is dropped before
    // it is polled again: they are made on their own, at once.
    tokio::select! {
        biased;
        answer = first => drop(answer.unwrap()),
        _ = second => panic!("the second call waits for the first's place"),
    }
    tokio::task::yield_now().await;
    assert_eq!(*backend.asked.lock().unwrap(), [0, 10]);
    assert!(backend.carried.lock().unwrap().is_empty());
    assert_eq!(*backend.alone.lock().unwrap(), [550]);
}

#[tokio::test(start_paused = true)]
async fn carried_records_the_backend_could_not_take_are_made_on_their_own() {
    let own = json!({"poll_interval_s": 5, "sources": {"s1": {"max_concurrency": 1, "timeout_s": 30}}});
    let (client, backend) = client_carrying(0, TRIP, true, own);
    backend.unavailable.store(1, Ordering::Relaxed);
    calls(&client, &[0, 10]).await;
    // The first release, carried at 550, is answered as not known to be taken (600): the
    // second call, its admission made, makes it again on its own then, off its path (a second
    // release of one lease or permit changes nothing; its answer still comes at 1 100).
    assert_eq!(*backend.carried.lock().unwrap(), [550]);
    assert_eq!(*backend.alone.lock().unwrap(), [600, 1100]);
    assert_eq!(*backend.alone_gate.lock().unwrap(), [600, 1100], "the records made again lost the gate's record");
}

#[test]
fn records_held_by_a_waiter_when_the_runtime_shuts_down_end_with_it() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    let own = json!({"poll_interval_s": 5, "sources": {"s1": {"max_concurrency": 1, "timeout_s": 30}}});
    let (client, backend) = runtime.block_on(async { client_carrying(0, TRIP, true, own) });
    let client = Arc::new(client);
    runtime.block_on(async {
        let waiter = client.clone();
        drop(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let _ = waiter.call("chat", &chat()).await;
        }));
        // The first call ends at 550 and hands its records to the second, whose task is not
        // polled again: the runtime shuts down with them in its line.
        client.call("chat", &chat()).await.unwrap();
    });
    drop(runtime);
    assert!(backend.carried.lock().unwrap().is_empty(), "the waiter carried them");
}

#[tokio::test(start_paused = true)]
async fn a_carried_release_lets_nobody_else_go_for_its_place() {
    // An account's limit of one place: an admission that took the last place lets nobody go.
    let account = json!({"poll_interval_s": 5, "concurrency": 1, "sources": {"s1": {"timeout_s": 30}}});
    let (client, backend) = client_carrying(0, TRIP, true, account);
    calls(&client, &[0, 10, 20]).await;
    // Each release goes with the admission of the one waiter it lets go (550, 1 100); the third
    // call is not woken to be refused when the second's admission and the release it carried
    // are answered (600).
    assert_eq!(*backend.asked.lock().unwrap(), [0, 10, 20, 60, 550, 1100]);
    assert_eq!(*backend.carried.lock().unwrap(), [550, 1100]);
    assert_eq!(*backend.alone.lock().unwrap(), [1650]);
}
