//! What the proxy costs: requests/s and latency (median, p99) of chat completions sent straight
//! to a mock provider and through gateway-server in front of it, at 1 and 64 concurrent
//! clients, all on loopback in this process. Two loads: closed loop (each client sends its next
//! request when the last returns: the saturation throughput, where latency is queueing, by
//! Little's law 64 / throughput) and paced (each of the 64 clients sends 40 requests a second:
//! the latency a request sees below saturation). The paced load runs twice: spread (the 2 560
//! requests a second arrive evenly, one every 0.39 ms, as 64 clients offset over the period
//! send them: the row the target is read on) and on tokio's 1 ms timer tick (the same offsets,
//! which the tick gathers into bursts of two or three requests at once: what the bench measured
//! until 2026-12-04, kept to show the bursts' cost). `cargo bench -p gateway-server --bench proxy`
//! (`-- 64 closed`: only the rows whose label holds those words; a closed loop's two paths take
//! turns, four rounds each, so that both meet the machine's same moments); the figures go to
//! docs/PERFORMANCE.md. (Not criterion: the question is latency percentiles under concurrency,
//! which criterion's sampling does not measure.) The latency rows (one
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

/// What one path's clients saw: every request's latency, and the time they took together.
#[derive(Default)]
struct Sample {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Sample {
    fn add(&mut self, other: Sample) {
        self.latencies.extend(other.latencies);
        self.elapsed += other.elapsed;
    }

    fn figures(mut self) -> Figures {
        self.latencies.sort();
        let n = self.latencies.len();
        Figures { per_s: n as f64 / self.elapsed.as_secs_f64(), median: self.latencies[n / 2], p99: self.latencies[n * 99 / 100] }
    }
}

struct Figures {
    per_s: f64,
    median: Duration,
    p99: Duration,
}

/// The closed loop's rounds: its requests are sent in this many parts, the two paths taking
/// turns, so that a change in the machine's speed during the row (this VM's direct path swings
/// by half between runs) weighs on both paths alike and the ratio of their throughputs is that
/// of the same moments.
const CLOSED_ROUNDS: usize = 4;

/// How the clients send.
#[derive(Clone, Copy)]
enum Load {
    /// Each sends its next request when the last returns.
    ClosedLoop,
    /// Each sends one request per period on tokio's timer: the clients are offset over the
    /// period, but the timer fires on its 1 ms tick, so their requests arrive in bursts of
    /// about clients / period-in-ms at once.
    Ticked(Duration),
    /// Each sends one request per period, the clients' requests spaced evenly over it (every
    /// period / clients), as their offsets say: a thread of the bench's own sleeps to each
    /// start (the system's sleep, precise to tens of microseconds) and hands it to the client.
    Spread(Duration),
}

/// What a client waits for before each request.
enum Pacer {
    /// Nothing: the next request goes when the last returns.
    Free,
    /// Its tokio interval's next tick.
    Tick(tokio::time::Interval),
    /// Its next start from the spread load's thread (see [`spread_starts`]).
    Told(tokio::sync::mpsc::UnboundedReceiver<()>),
}

impl Pacer {
    async fn wait(&mut self) {
        match self {
            Pacer::Free => {}
            Pacer::Tick(interval) => {
                interval.tick().await;
            }
            Pacer::Told(starts) => starts.recv().await.expect("the starts thread sends every round"),
        }
    }
}

/// The starts of a spread load: a thread that, every `pace / clients`, tells the next client
/// (round robin) to send, `rounds` times each; a client behind its schedule finds its starts
/// queued.
fn spread_starts(clients: usize, rounds: usize, pace: Duration) -> Vec<tokio::sync::mpsc::UnboundedReceiver<()>> {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..clients).map(|_| tokio::sync::mpsc::unbounded_channel()).unzip();
    let step = pace.div_f64(clients as f64);
    std::thread::spawn(move || {
        let began = Instant::now();
        for k in 0..rounds * clients {
            let at = began + step.mul_f64(k as f64);
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            // A client gone (its task ended early) no longer listens.
            let _ = senders[k % clients].send(());
        }
    });
    receivers
}

/// `total` requests from `clients` concurrent loops against `url`, sent as `load` says.
async fn measure(url: &str, clients: usize, total: usize, load: Load) -> Sample {
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build().unwrap();
    let body = Arc::new(json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}));
    let url = Arc::new(format!("{url}/v1/chat/completions"));
    // warm the pools
    for _ in 0..clients.min(8) {
        http.post(url.as_str()).json(&*body).send().await.unwrap().bytes().await.unwrap();
    }
    let began = Instant::now();
    let mut told = match load {
        Load::Spread(pace) => spread_starts(clients, total / clients, pace).into_iter(),
        _ => Vec::new().into_iter(),
    };
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (http, body, url) = (http.clone(), body.clone(), url.clone());
            let starts = told.next();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(total / clients);
                let mut pacer = match (load, starts) {
                    (Load::Ticked(pace), _) => {
                        // offset over the period, as the spread load is (the tick undoes it)
                        tokio::time::sleep(pace.mul_f64(i as f64 / clients as f64)).await;
                        let mut interval = tokio::time::interval(pace);
                        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        Pacer::Tick(interval)
                    }
                    (_, Some(starts)) => Pacer::Told(starts),
                    _ => Pacer::Free,
                };
                for _ in 0..total / clients {
                    pacer.wait().await;
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
    Sample { latencies: all, elapsed: began.elapsed() }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One row of the table: `clients` on `runtime` (a fresh mock and proxy served there), direct
/// and through the proxy, in the same run (the closed loop in [`CLOSED_ROUNDS`] turns).
fn row(runtime: &tokio::runtime::Runtime, clients: usize, name: &str, load: Load, total: usize) {
    // `cargo bench --bench proxy -- WORD…`: only the rows whose "clients load" holds every word
    // (to profile one row).
    let label = format!("{clients} {name}");
    let words: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    if !words.iter().all(|word| label.contains(word.as_str())) {
        return;
    }
    runtime.block_on(async {
        let mock = mock_provider().await;
        let provider = mock.root();
        let gateway = support::proxy(&provider, "").await;
        // (`--test`'s few requests in one round.)
        let rounds = if matches!(load, Load::ClosedLoop) && total >= CLOSED_ROUNDS * clients { CLOSED_ROUNDS } else { 1 };
        let (mut direct, mut through) = (Sample::default(), Sample::default());
        for _ in 0..rounds {
            direct.add(measure(&provider, clients, total / rounds, load).await);
            through.add(measure(&gateway, clients, total / rounds, load).await);
        }
        let (direct, through) = (direct.figures(), through.figures());
        for (path, f) in [("direct", &direct), ("proxy", &through)] {
            println!("| {clients} | {name} | {path} | {:.0} | {:.3} | {:.3} |", f.per_s, ms(f.median), ms(f.p99));
        }
        println!(
            "| {clients} | {name} | **added** | | **{:+.3}** | **{:+.3}** |",
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
    row(&one_thread, 1, "closed loop", Load::ClosedLoop, n(5_000, 1));
    row(&two_workers, 64, "closed loop", Load::ClosedLoop, n(40_000, 64));
    row(&one_thread, 64, "paced 40/s each, spread", Load::Spread(paced), n(64 * 200, 64));
    row(&one_thread, 64, "paced 40/s each, on the 1 ms tick", Load::Ticked(paced), n(64 * 200, 64));
}
