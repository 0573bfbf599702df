//! What the proxy adds to a stream: an upstream sends 20 chunks 100 ms apart; the client reads
//! them through gateway-server, and each chunk's arrival is compared with the moment the
//! upstream sent it. The first chunk (the commit point) and the last are reported, median and
//! worst over the runs. `cargo bench -p gateway-server --bench stream`; the row goes to
//! docs/PERFORMANCE.md. (Not criterion: the question is when bytes arrive, not how long a
//! function takes.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]
// A benchmark measures wall-clock time.
#![allow(clippy::disallowed_methods)]

mod support;

use gateway_mock::{Answer, Frame, MockServer};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CHUNKS: usize = 20;
const GAP: Duration = Duration::from_millis(100);

/// The mock's send instants of the stream it is serving.
type Sent = Arc<Mutex<Vec<Instant>>>;

async fn mock_provider(sent: Sent) -> MockServer {
    let answer = move |_: &gateway_mock::Received| {
        sent.lock().unwrap().clear();
        let sent = sent.clone();
        let frames = futures_util::stream::unfold(0usize, move |i| {
            let sent = sent.clone();
            async move {
                if i > CHUNKS {
                    return None;
                }
                if i > 0 {
                    tokio::time::sleep(GAP).await;
                }
                let event = if i == CHUNKS {
                    "data: [DONE]\n\n".to_owned()
                } else {
                    sent.lock().unwrap().push(Instant::now());
                    let chunk =
                        json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": format!("t{i} ")}}]});
                    format!("data: {chunk}\n\n")
                };
                Some((Frame::Data(event), i + 1))
            }
        });
        Answer::sse_stream(frames)
    };
    MockServer::builder().unrecorded().answering(answer).await.unwrap()
}

/// One streamed call through `url`: when each content chunk arrived.
async fn arrivals(http: &reqwest::Client, url: &str) -> Vec<Instant> {
    let body = json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let mut response = http.post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap();
    let (mut arrived, mut buffer) = (Vec::new(), String::new());
    while let Some(bytes) = response.chunk().await.unwrap() {
        let now = Instant::now();
        buffer.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            if event.contains("\"content\"") {
                arrived.push(now);
            }
        }
    }
    arrived
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let runs = if std::env::args().any(|a| a == "--test") { 1 } else { 10 };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let sent: Sent = Arc::default();
        let mock = mock_provider(sent.clone()).await;
        let gateway = support::proxy(&mock.root(), "watchdog_s = 1\n").await;
        let http = reqwest::Client::new();
        let (mut first, mut last) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let arrived = arrivals(&http, &gateway).await;
            let sent = sent.lock().unwrap().clone();
            assert_eq!((arrived.len(), sent.len()), (CHUNKS, CHUNKS), "every chunk came through");
            first.push(arrived[0].saturating_duration_since(sent[0]));
            last.push(arrived[CHUNKS - 1].saturating_duration_since(sent[CHUNKS - 1]));
        }
        first.sort();
        last.sort();
        println!("| stream of {CHUNKS} chunks {} ms apart, {runs} runs | median | worst |", GAP.as_millis());
        println!("|---|---|---|");
        println!("| first chunk: client after upstream | {:.2} ms | {:.2} ms |", ms(first[first.len() / 2]), ms(first[first.len() - 1]));
        println!("| last chunk: client after upstream | {:.2} ms | {:.2} ms |", ms(last[last.len() / 2]), ms(last[last.len() - 1]));
    });
}
