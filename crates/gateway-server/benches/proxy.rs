//! What the proxy costs: requests/s and latency (median, p99) of chat completions sent straight
//! to a mock provider and through gateway-server in front of it, at 1 and 64 concurrent
//! clients, all on loopback in this process. Two loads: closed loop (each client sends its next
//! request when the last returns: the saturation throughput, where latency is queueing, by
//! Little's law 64 / throughput) and paced (each of the 64 clients sends 40 requests a second:
//! the latency a request sees below saturation). `cargo bench -p gateway-server --bench proxy`;
//! the figures go to docs/PERFORMANCE.md. (Not criterion: the question is latency percentiles
//! under concurrency, which criterion's sampling does not measure.) The latency rows (one
//! client, and 64 paced) run on one thread, the saturation row on two workers (see `main`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]
// A benchmark measures wall-clock time.
#![allow(clippy::disallowed_methods)]

mod support;

use gateway_mock::{Answer, MockServer};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A provider answering every request at once; unrecorded, so the direct path pays for no record.
async fn mock_provider() -> MockServer {
    let answer = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}).to_string();
    MockServer::builder().unrecorded().answering(move |_| Answer::json_text(200, answer.clone())).await.unwrap()
}

struct Figures {
    per_s: f64,
    median: Duration,
    p99: Duration,
}

/// `total` requests from `clients` concurrent loops against `url`; each loop sends one request
/// per `pace` (none: back to back).
async fn measure(url: &str, clients: usize, total: usize, pace: Option<Duration>) -> Figures {
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build().unwrap();
    let body = Arc::new(json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}));
    let url = Arc::new(format!("{url}/v1/chat/completions"));
    // warm the pools
    for _ in 0..clients.min(8) {
        http.post(url.as_str()).json(&*body).send().await.unwrap().bytes().await.unwrap();
    }
    let began = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (http, body, url) = (http.clone(), body.clone(), url.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(total / clients);
                // paced clients are spread over the period, not synchronised on its ticks
                if let Some(p) = pace {
                    tokio::time::sleep(p.mul_f64(i as f64 / clients as f64)).await;
                }
                let mut ticker = pace.map(|p| {
                    let mut t = tokio::time::interval(p);
                    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    t
                });
                for _ in 0..total / clients {
                    if let Some(t) = ticker.as_mut() {
                        t.tick().await;
                    }
                    let start = Instant::now();
                    let response = http.post(url.as_str()).json(&*body).send().await.unwrap();
                    assert!(response.status().is_success(), "{}", response.status());
                    response.bytes().await.unwrap();
                    latencies.push(start.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::with_capacity(total);
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let elapsed = began.elapsed();
    all.sort();
    Figures { per_s: all.len() as f64 / elapsed.as_secs_f64(), median: all[all.len() / 2], p99: all[all.len() * 99 / 100] }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One row of the table: `clients` on `runtime` (a fresh mock and proxy served there), direct
/// and through the proxy, in the same run.
fn row(runtime: &tokio::runtime::Runtime, clients: usize, load: &str, pace: Option<Duration>, total: usize) {
    runtime.block_on(async {
        let mock = mock_provider().await;
        let provider = mock.root();
        let gateway = support::proxy(&provider, "").await;
        let direct = measure(&provider, clients, total, pace).await;
        let through = measure(&gateway, clients, total, pace).await;
        for (name, f) in [("direct", &direct), ("proxy", &through)] {
            println!("| {clients} | {load} | {name} | {:.0} | {:.3} | {:.3} |", f.per_s, ms(f.median), ms(f.p99));
        }
        println!(
            "| {clients} | {load} | **added** | | **{:+.3}** | **{:+.3}** |",
            ms(through.median) - ms(direct.median),
            ms(through.p99) - ms(direct.p99)
        );
    });
}

fn main() {
    // `cargo test --benches` runs benches once with --test-free arguments; keep that quick.
    let quick = std::env::args().any(|a| a == "--test");
    // The latency rows run the clients, the mock and the proxy on one thread: a request then
    // costs what its path computes, not how long this VM takes to wake another thread (30-60 µs
    // a hop here, and whether the client's task and the server's share a worker is chance). The
    // saturation row runs on two workers, as a loaded proxy does.
    let one_thread = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let two_workers = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("| clients | load | path | requests/s | median ms | p99 ms |");
    println!("|---|---|---|---|---|---|");
    let paced = Duration::from_millis(25);
    let n = |full: usize, clients: usize| if quick { clients * 2 } else { full };
    row(&one_thread, 1, "closed loop", None, n(5_000, 1));
    row(&two_workers, 64, "closed loop", None, n(40_000, 64));
    row(&one_thread, 64, "paced 40/s each", Some(paced), n(64 * 200, 64));
}
