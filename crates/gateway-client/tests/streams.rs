//! `GatewayClient::stream` on tokio's paused clock: before the commit point a failure is
//! retried unseen (an error status, a stream that breaks before content, one that ends empty);
//! after it, chunks come as the source sends them and a break ends the stream with a
//! `StreamError`, recorded on the gate; a structure failure before the commit point is
//! re-asked unseen; the slot is held until the stream ends or is dropped;
//! an upstream that cannot stream is replayed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use async_trait::async_trait;
use gateway_client::{Collector, GatewayClient, TokioClock};
use gateway_core::outcome::OutcomeClass;
use gateway_core::ports::{ChunkSource, SourceKey, Streamed, Upstream};
use gateway_core::request::{Attempt, Message, Outcome, Request};
use gateway_core::stream::Chunk;
use gateway_core::telemetry::CallResult;
use gateway_memory::{MemoryGates, MemoryQuota};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::sources;

/// One scripted event of a stream: a chunk after a delay, or a break.
#[derive(Clone)]
enum Event {
    Text(&'static str, Duration),
    /// The last content of the choice, with its finish reason.
    Finish(&'static str),
    /// A wait before whatever comes next (the end, if nothing).
    Hold(Duration),
    Empty,
    Break(&'static str),
}

/// One attempt's plan: the events of its stream, or the class it ends with before any.
type Plan = Result<Vec<Event>, OutcomeClass>;

/// What each source streams, attempt after attempt (the last plan repeats).
#[derive(Default)]
struct Scripted {
    plans: Mutex<std::collections::HashMap<String, VecDeque<Plan>>>,
}

impl Scripted {
    fn plan(&self, source: &str, plans: Vec<Plan>) {
        self.plans.lock().unwrap().insert(source.to_owned(), plans.into());
    }
}

struct Chunks(VecDeque<Event>);

fn text_chunk(text: &str) -> Chunk {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}).as_object().cloned().unwrap()
}

#[async_trait]
impl ChunkSource for Chunks {
    async fn next_chunk(&mut self) -> Option<Result<Chunk, Outcome>> {
        while let Some(Event::Hold(wait)) = self.0.front() {
            tokio::time::sleep(*wait).await;
            self.0.pop_front();
        }
        match self.0.pop_front()? {
            Event::Text(text, after) => {
                tokio::time::sleep(after).await;
                Some(Ok(text_chunk(text)))
            }
            Event::Finish(text) => {
                let chunk = json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]});
                Some(Ok(chunk.as_object().cloned().unwrap()))
            }
            Event::Hold(_) => None,
            Event::Empty => {
                Some(Ok(json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}).as_object().cloned().unwrap()))
            }
            Event::Break(detail) => Some(Err(Outcome::new(OutcomeClass::Transient, detail))),
        }
    }
}

#[async_trait]
impl Upstream for Scripted {
    async fn send(&self, _source: &str, _request: &Request) -> Attempt {
        Attempt::failure(OutcomeClass::Transient, "this upstream only streams", None)
    }

    async fn stream(&self, source: &str, _request: &Request) -> Streamed {
        let plan = {
            let mut plans = self.plans.lock().unwrap();
            let queue = plans.get_mut(source).unwrap();
            if queue.len() > 1 { queue.pop_front().unwrap() } else { queue.front().cloned().unwrap() }
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        match plan {
            Ok(events) => Streamed::Chunks(Box::new(Chunks(events.into()))),
            Err(class) => Streamed::Ended(Attempt::failure(class, "scripted", None)),
        }
    }
}

struct Setup {
    client: GatewayClient,
    gates: Arc<MemoryGates>,
    quota: Arc<MemoryQuota>,
    telemetry: Arc<Collector>,
}

fn setup(n: usize, upstream: Arc<dyn Upstream>, extra: serde_json::Value) -> Setup {
    let clock = Arc::new(TokioClock::new());
    let gates = Arc::new(MemoryGates::new(clock.clone()));
    let quota = Arc::new(MemoryQuota::new(clock.clone()));
    let telemetry = Arc::new(Collector::new());
    let client = GatewayClient::builder()
        .scope(sources(n, extra))
        .gates(gates.clone())
        .quota(quota.clone())
        .upstream(upstream)
        .telemetry(telemetry.clone())
        .clock(clock)
        .seed(5)
        .build()
        .unwrap();
    Setup { client, gates, quota, telemetry }
}

fn ask() -> Request {
    Request::chat(vec![Message::user("hi")])
}

fn text(chunk: &Chunk) -> &str {
    chunk["choices"][0]["delta"]["content"].as_str().unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn failures_before_the_commit_point_are_retried_unseen() {
    let upstream = Arc::new(Scripted::default());
    upstream.plan(
        "s1",
        vec![
            Err(OutcomeClass::Transient),
            Ok(vec![Event::Empty, Event::Break("truncated_stream")]),
            Ok(vec![Event::Empty]),
            Ok(vec![Event::Empty, Event::Text("Hel", Duration::ZERO), Event::Text("lo", Duration::from_secs(1))]),
        ],
    );
    let s = setup(1, upstream, json!({"max_retries": 5}));
    let mut stream = s.client.stream("chat", &ask()).await.unwrap();
    assert_eq!((stream.source(), stream.attempts()), ("s1", 4), "three failed attempts, then the stream");
    let mut seen = Vec::new();
    while let Some(chunk) = stream.next().await {
        seen.push(text(&chunk.unwrap()).to_owned());
    }
    assert_eq!(seen, ["", "Hel", "lo"], "the caller sees the one good stream, from its first chunk");
    let call = &s.telemetry.calls()[0];
    assert_eq!((call.result, call.attempts), (CallResult::Ok, 4));
    let outcomes: Vec<_> = s.telemetry.attempts().iter().map(|a| (a.class, a.detail.clone())).collect();
    assert_eq!(
        outcomes,
        [
            (OutcomeClass::Transient, "scripted".into()),
            (OutcomeClass::Transient, "truncated_stream".into()),
            (OutcomeClass::Transient, "empty".into()),
            (OutcomeClass::Success, "http_200".into()),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_structure_failure_before_the_commit_point_is_reasked_unseen_without_spending_the_budget() {
    // A stream that must be JSON and opens with prose ends `ResultInvalid` at its first content
    // chunk, the commit point, unseen: the call loop re-asks it like a whole answer.
    let upstream = Arc::new(Scripted::default());
    upstream.plan(
        "s1",
        vec![
            Ok(vec![Event::Empty, Event::Text("Sure! Here is the JSON: {", Duration::ZERO), Event::Finish("}")]),
            Ok(vec![Event::Text("{\"a\":", Duration::ZERO), Event::Finish(" 1}")]),
        ],
    );
    let s = setup(1, upstream, json!({"max_retries": 0}));
    let mut stream = s.client.stream("chat", &ask().json_object()).await.unwrap();
    assert_eq!(stream.attempts(), 2, "re-asked, though the retry budget is 0");
    let mut seen = String::new();
    while let Some(chunk) = stream.next().await {
        seen += text(&chunk.unwrap());
    }
    assert_eq!(seen, "{\"a\": 1}", "the caller sees only the second answer");
    let outcomes: Vec<_> = s.telemetry.attempts().iter().map(|a| (a.class, a.detail.clone())).collect();
    assert_eq!(outcomes, [(OutcomeClass::ResultInvalid, "not_json".into()), (OutcomeClass::Success, "http_200".into())]);
    assert_eq!(s.telemetry.calls()[0].result, CallResult::Ok);
}

#[tokio::test(start_paused = true)]
async fn a_break_after_the_commit_point_ends_the_stream_with_an_error_recorded_on_the_gate() {
    let upstream = Arc::new(Scripted::default());
    upstream.plan("s1", vec![Ok(vec![Event::Text("par", Duration::ZERO), Event::Break("watchdog")])]);
    let s = setup(1, upstream, json!({}));
    let mut stream = s.client.stream("chat", &ask()).await.unwrap();
    assert_eq!(text(&stream.next().await.unwrap().unwrap()), "par");
    let error = stream.next().await.unwrap().unwrap_err();
    assert_eq!(error.to_string(), "the stream from s1 broke off after it began: transient(watchdog)");
    assert!(stream.next().await.is_none(), "nothing after the error");
    let gate = s.gates.snapshot(&SourceKey::new("chat", "s1")).unwrap();
    assert_eq!((gate.failures, gate.f0 + gate.f1), (1, 1), "recorded like any transient failure");
    assert_eq!(s.telemetry.calls()[0].result, CallResult::StreamBroken);
}

#[tokio::test(start_paused = true)]
async fn the_stream_holds_its_slot_until_it_ends_or_is_dropped() {
    let upstream = Arc::new(Scripted::default());
    upstream.plan("s1", vec![Ok(vec![Event::Text("a", Duration::ZERO), Event::Text("b", Duration::from_secs(60))])]);
    let s = setup(1, upstream, json!({"sources": {"s1": {"timeout_s": 30, "max_concurrency": 4}}}));
    let key = SourceKey::new("chat", "s1");
    let mut stream = s.client.stream("chat", &ask()).await.unwrap();
    stream.next().await.unwrap().unwrap();
    assert_eq!((s.quota.in_flight(&key), s.client.inflight("chat")), (1, 1));
    drop(stream);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!((s.quota.in_flight(&key), s.client.inflight("chat")), (0, 0), "dropping the stream released everything");
    assert_eq!(s.telemetry.calls()[0].result, CallResult::Cancelled);
    let mut ended = s.client.stream("chat", &ask()).await.unwrap();
    while ended.next().await.is_some() {}
    assert_eq!((s.quota.in_flight(&key), s.client.inflight("chat")), (0, 0), "and so did its end");
}

#[tokio::test(start_paused = true)]
async fn an_upstream_that_cannot_stream_is_replayed_and_embeddings_cannot_be_streamed() {
    let fake = gateway_mock::ScriptedUpstream::new();
    let s = setup(1, fake, json!({}));
    let stream = s.client.stream("chat", &ask()).await.unwrap();
    let whole = stream.completion().await.unwrap();
    assert_eq!((whole.content(), whole.source()), (Some("ok from s1"), Some("s1")));
    let error = s.client.stream("chat", &Request::embeddings(vec!["a".into()])).await.unwrap_err();
    assert_eq!(error.to_string(), "embeddings requests cannot be streamed");
}

#[tokio::test(start_paused = true)]
async fn a_stream_dropped_once_every_choice_finished_counts_as_the_success_it_was() {
    let upstream = Arc::new(Scripted::default());
    // The answer is whole; the provider is slow to send its usage and [DONE].
    upstream.plan("s1", vec![Ok(vec![Event::Text("an", Duration::ZERO), Event::Finish("swer"), Event::Hold(Duration::from_secs(20))])]);
    let s = setup(1, upstream, json!({}));
    let mut stream = s.client.stream("chat", &ask()).await.unwrap();
    assert_eq!(text(&stream.next().await.unwrap().unwrap()), "an");
    assert_eq!(text(&stream.next().await.unwrap().unwrap()), "swer");
    drop(stream);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(s.client.inflight("chat"), 0);
    assert_eq!(s.telemetry.calls()[0].result, CallResult::Ok);
    let attempt = &s.telemetry.attempts()[0];
    assert_eq!(attempt.class, OutcomeClass::Success);
    let gate = s.gates.snapshot(&SourceKey::new("chat", "s1")).unwrap();
    assert_eq!((gate.a0 + gate.a1, gate.f0 + gate.f1), (1, 0), "the success reached the rate window");
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_stops_reading_holds_the_attempt_no_longer_than_the_source_timeout() {
    let upstream = Arc::new(Scripted::default());
    let events: Vec<Event> = (0..100).map(|_| Event::Text("x", Duration::ZERO)).collect();
    upstream.plan("s1", vec![Ok(events)]);
    let s = setup(1, upstream, json!({"sources": {"s1": {"timeout_s": 30, "max_concurrency": 4}}}));
    let key = SourceKey::new("chat", "s1");
    let mut stream = s.client.stream("chat", &ask()).await.unwrap();
    stream.next().await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!((s.quota.in_flight(&key), s.client.inflight("chat")), (1, 1), "held while the source's timeout runs");
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!((s.quota.in_flight(&key), s.client.inflight("chat")), (0, 0), "released at the attempt's deadline");
    assert_eq!(s.telemetry.calls()[0].result, CallResult::Cancelled);
    assert!(s.telemetry.attempts().is_empty(), "nothing recorded: the provider was not at fault");
    let gate = s.gates.snapshot(&SourceKey::new("chat", "s1")).unwrap_or_default();
    assert_eq!(gate.failures, 0);
    let mut read = 1;
    let end = loop {
        match stream.next().await {
            Some(Ok(_)) => read += 1,
            other => break other,
        }
    };
    assert!(read > 1 && read < 100, "what was read ahead, then the end: {read}");
    assert_eq!(end.unwrap().unwrap_err().detail, "timeout", "never a clean-looking end");
    assert!(stream.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_long_stream_is_judged_slow_by_its_first_token_not_its_length() {
    let upstream = Arc::new(Scripted::default());
    upstream.plan("s1", vec![Ok(vec![Event::Text("a", Duration::ZERO), Event::Text("b", Duration::from_secs(5)), Event::Finish("c")])]);
    let s = setup(1, upstream, json!({"breaker": {"fail_threshold": 5, "cooldown_s": 60, "slow_call_s": 1}}));
    let mut stream = s.client.stream("chat", &ask()).await.unwrap();
    while stream.next().await.is_some() {}
    let gate = s.gates.snapshot(&SourceKey::new("chat", "s1")).unwrap();
    assert_eq!((gate.a0 + gate.a1, gate.s0 + gate.s1), (1, 0), "a 5 s generation after a 10 ms first token is no slow call");
    assert!(s.telemetry.attempts()[0].latency >= Duration::from_secs(5), "the attempt event keeps the whole length");
}
