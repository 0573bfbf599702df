//! The mock itself, over real loopback sockets: what it records, scripts in order per route,
//! streams with pauses, gates and cuts, holds a value while serving, hangs, and the blackhole;
//! and the scripted in-process upstream on a paused clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// Real loopback I/O: waits are bounded by the wall clock.
#![allow(clippy::disallowed_methods)]

use gateway_core::outcome::OutcomeClass;
use gateway_core::ports::Upstream;
use gateway_core::request::{Message, Request};
use gateway_mock::{Answer, Blackhole, Echo, Frame, Gate, MockServer, Script, ScriptedUpstream, Step, answering, openai, source_url};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn post(url: &str, body: &serde_json::Value) -> reqwest::RequestBuilder {
    reqwest::Client::new().post(url).header("x-probe", "p1").json(body)
}

#[tokio::test]
async fn every_request_is_recorded_as_it_arrived() {
    let mock = MockServer::answering(|_| Answer::json(200, &openai::completion("hi"))).await.unwrap();
    let body =
        json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]});
    let answer = post(&format!("{}/chat/completions", mock.base_url()), &body).send().await.unwrap();
    assert_eq!((answer.status().as_u16(), answer.headers()["content-type"].to_str().unwrap()), (200, "application/json"));
    assert_eq!(answer.json::<serde_json::Value>().await.unwrap()["choices"][0]["message"]["content"], "hi");
    reqwest::get(format!("{}/models?x=1", mock.base_url())).await.unwrap();
    let seen = mock.received();
    assert_eq!(seen.len(), 2);
    assert_eq!((seen[0].method.as_str(), seen[0].path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!((seen[0].headers["x-probe"].to_str().unwrap(), &seen[0].body), ("p1", &body));
    assert_eq!((seen[0].raw.clone(), seen[0].last_text()), (body.to_string(), "a b".to_owned()));
    assert_eq!((seen[1].method.as_str(), seen[1].path.as_str(), &seen[1].body), ("GET", "/v1/models", &serde_json::Value::Null));
    assert_eq!(mock.saying("a b").len(), 1);
    let quiet = MockServer::builder().unrecorded().answering(|_| Answer::new(204)).await.unwrap();
    assert_eq!(reqwest::get(quiet.root()).await.unwrap().status(), 204);
    assert!(quiet.recording().is_empty(), "an unrecorded server keeps nothing");
}

#[tokio::test]
async fn a_script_answers_in_order_per_route_then_falls_back() {
    let script = Arc::new(
        Script::new()
            .route("/a/", [Answer::json(500, &json!({})), Answer::json_text(200, "{").header("retry-after", "3")])
            .route("/b/", [Answer::new(429)]),
    );
    let mock = MockServer::start(script.clone()).await.unwrap();
    let status = |path: &'static str| {
        let url = format!("{}{path}", mock.root());
        async move { reqwest::get(url).await.unwrap() }
    };
    assert_eq!(status("/b/x").await.status(), 429);
    assert_eq!(status("/a/x").await.status(), 500);
    let second = status("/a/y").await;
    assert_eq!((second.status().as_u16(), second.headers()["retry-after"].to_str().unwrap()), (200, "3"));
    assert_eq!(second.text().await.unwrap(), "{", "the body as given");
    let spent = status("/a/z").await;
    assert_eq!(spent.status(), 404, "nothing left for /a/");
    assert_eq!(spent.json::<serde_json::Value>().await.unwrap()["error"]["code"], "not_scripted");
    assert_eq!((script.left("/a/"), script.left("/b/")), (0, 0));
    let fallback = MockServer::start(Script::new().otherwise(answering(|_| Answer::new(202)))).await.unwrap();
    assert_eq!(reqwest::get(fallback.root()).await.unwrap().status(), 202);
}

/// Reads `response` to its end: the text, and whether it ended cleanly.
async fn read_all(mut response: reqwest::Response) -> (String, bool) {
    let mut text = String::new();
    loop {
        match response.chunk().await {
            Ok(Some(bytes)) => text.push_str(&String::from_utf8_lossy(&bytes)),
            Ok(None) => return (text, true),
            Err(_) => return (text, false),
        }
    }
}

#[tokio::test]
async fn a_stream_pauses_waits_at_its_gate_and_can_be_cut() {
    let gate = Gate::new();
    let frames =
        [Frame::data(openai::chunk("a")), Frame::Hold(gate.clone()), Frame::Pause(Duration::from_millis(50)), Frame::data(openai::DONE)];
    let held = Arc::new(AtomicBool::new(false));
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let answer = std::sync::Mutex::new(Some(Answer::sse(frames).holding(Flag(held.clone()))));
    let mock = MockServer::answering(move |_| answer.lock().unwrap().take().unwrap_or_else(|| Answer::new(410))).await.unwrap();
    let mut response = post(&mock.base_url(), &json!({})).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let first = response.chunk().await.unwrap().unwrap();
    assert_eq!(String::from_utf8_lossy(&first), openai::chunk("a"));
    let waited = tokio::time::timeout(Duration::from_millis(200), response.chunk()).await;
    assert!(waited.is_err(), "held at the gate");
    assert!(!held.load(Ordering::SeqCst), "the held value lives while the stream does");
    let released = Instant::now();
    gate.release_one();
    let (rest, clean) = read_all(response).await;
    assert!(released.elapsed() >= Duration::from_millis(50), "then the pause");
    assert_eq!((rest.as_str(), clean), (openai::DONE, true));
    assert!(held.load(Ordering::SeqCst), "dropped when the stream ended");

    // The pause lets the head and the chunk reach the client before the break.
    let cut =
        MockServer::answering(|_| Answer::sse([Frame::data(openai::chunk("half")), Frame::Pause(Duration::from_millis(50)), Frame::Cut]))
            .await
            .unwrap();
    let (text, clean) = read_all(post(&cut.base_url(), &json!({})).send().await.unwrap()).await;
    assert_eq!((text, clean), (openai::chunk("half"), false), "what came before the cut, then a broken body");
}

#[tokio::test]
async fn a_gated_answer_waits_and_release_all_opens_the_gate_for_good() {
    let gate = Gate::new();
    let opened = gate.clone();
    let mock = MockServer::answering(move |_| Answer::new(200).body("late").gated(&opened)).await.unwrap();
    let url = mock.root();
    let pending = tokio::spawn(async move { reqwest::get(url).await.unwrap().text().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!pending.is_finished(), "held until released");
    gate.release_all();
    assert_eq!(pending.await.unwrap(), "late");
    assert_eq!(reqwest::get(mock.root()).await.unwrap().text().await.unwrap(), "late", "an open gate holds nothing");
}

#[tokio::test]
async fn a_delay_a_hang_and_a_blackhole_keep_the_client_waiting() {
    let mock =
        MockServer::answering(|r| if r.path == "/hang" { Answer::hang() } else { Answer::new(200).after(Duration::from_millis(150)) })
            .await
            .unwrap();
    let began = Instant::now();
    assert_eq!(reqwest::get(mock.root()).await.unwrap().status(), 200);
    assert!(began.elapsed() >= Duration::from_millis(150), "{:?}", began.elapsed());
    let http = reqwest::Client::builder().timeout(Duration::from_millis(200)).build().unwrap();
    assert!(http.get(format!("{}/hang", mock.root())).send().await.unwrap_err().is_timeout(), "read, never answered");
    assert_eq!(mock.received().len(), 2, "the hung request was read and recorded");
    let hole = Blackhole::start().await.unwrap();
    assert!(http.get(hole.base_url()).send().await.unwrap_err().is_timeout(), "accepted, never read");
    assert_eq!(source_url(&format!("{}/", hole.root()), "s1"), format!("{}/s1/v1", hole.root()));
}

#[tokio::test]
async fn the_echo_persona_echoes_and_answers_its_markers() {
    let echo = Echo::new();
    let mock = MockServer::start(echo).await.unwrap();
    let chat = |text: &str| json!({"model": "m", "messages": [{"role": "user", "content": text}]});
    let url = format!("{}/chat/completions", mock.base_url());
    let answer = post(&url, &chat("hello")).send().await.unwrap();
    assert_eq!(answer.headers()["x-request-id"], "req-mock-0");
    assert_eq!(answer.json::<serde_json::Value>().await.unwrap()["choices"][0]["message"]["content"], "echo: hello");
    let pushed = post(&url, &chat("PUSHBACK")).send().await.unwrap();
    assert_eq!((pushed.status().as_u16(), pushed.headers()["retry-after"].to_str().unwrap()), (429, "86400"));
    let dead = post(&format!("{}/dead/v1/chat/completions", mock.root()), &chat("hi")).send().await.unwrap();
    assert_eq!(dead.status(), 401);
    assert_eq!(mock.saying("PUSHBACK").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_scripted_upstream_answers_by_plan_and_records_every_attempt() {
    let upstream = ScriptedUpstream::new();
    upstream.script("s1", vec![Step::Fail(OutcomeClass::Transient), Step::RateLimited(Some(Duration::from_secs(2)))]);
    upstream.plan("s2", |n| (if n == 0 { Step::Ok } else { Step::Fail(OutcomeClass::SourceDead) }, Duration::from_secs(1)));
    let request = Request::chat(vec![Message::user("hi")]);
    let classes = [
        upstream.send("s1", &request).await.outcome().class,
        upstream.send("s1", &request).await.outcome().class,
        upstream.send("s1", &request).await.outcome().class,
    ];
    assert_eq!(classes, [OutcomeClass::Transient, OutcomeClass::RateLimited, OutcomeClass::Success]);
    let began = tokio::time::Instant::now();
    let ok = upstream.send("s2", &request).await;
    assert_eq!((ok.response().and_then(|r| r.content()), began.elapsed()), (Some("ok from s2"), Duration::from_secs(1)));
    assert_eq!(upstream.send("s2", &request).await.outcome().class, OutcomeClass::SourceDead);
    assert_eq!(upstream.sent(), ["s1", "s1", "s1", "s2", "s2"]);
}
