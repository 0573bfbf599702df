//! What endless upstream streams cost the other callers: the proxy binary (its own process, as
//! deployed) in front of a mock provider that streams as fast as loopback allows and never
//! ends. A healthy caller sends whole chat calls one after another, alone, then while eight
//! callers read endless relayed streams through the same proxy (each paced at `max_stream_bytes_per_s`
//! and reopened when the proxy ends it at `max_stream_bytes`); its median and p99 are compared, and the proxy's CPU time
//! and peak resident set are read from `/proc`. `cargo bench -p gateway-server --bench hostile`;
//! the figures go to docs/PERFORMANCE.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]
// A benchmark measures wall-clock time.
#![allow(clippy::disallowed_methods)]

use gateway_mock::{Answer, Frame, MockServer, Received, openai};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "support/binary.rs"]
mod binary;
use binary::{Proxy, Usage};

/// `ENDLESS` streams 16 KiB events forever; anything else is answered whole at once.
async fn provider() -> MockServer {
    MockServer::builder()
        .unrecorded()
        .answering(|received: &Received| {
            if received.raw.contains("ENDLESS") {
                let event = openai::chunk(&"x".repeat(16 << 10));
                Answer::sse(std::iter::repeat_with(move || Frame::data(event.clone())))
            } else {
                Answer::json(200, &openai::completion("ok"))
            }
        })
        .await
        .unwrap()
}

/// The proxy binary in front of `provider`.
async fn start_proxy(provider: &MockServer) -> Proxy {
    let tables = format!(
        "[chat.breaker]\nfail_threshold = 100000\ncooldown_s = 1\n\
         [chat.sources.relay]\nbase_url = \"{}\"\nmodel = \"m\"\ntimeout_s = 60\n",
        provider.base_url()
    );
    Proxy::start("hostile", &tables).await
}

/// Whole calls one after another for `span`: the median and p99.
async fn healthy(http: &reqwest::Client, base: &str, span: Duration) -> (Duration, Duration) {
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": "hello"}]});
    let mut all = Vec::new();
    let began = Instant::now();
    while began.elapsed() < span {
        let began = Instant::now();
        let answer = http.post(format!("{base}/v1/chat/completions")).json(&body).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        answer.bytes().await.unwrap();
        all.push(began.elapsed());
    }
    all.sort();
    (all[all.len() / 2], all[all.len() * 99 / 100])
}

/// Reads endless streams through the proxy until `stop`, reopening each as it ends; the bytes
/// read go to `read`, the streams ended to `ended`.
async fn endless(base: String, stop: Arc<AtomicBool>, read: Arc<AtomicU64>, ended: Arc<AtomicU64>) {
    let http = reqwest::Client::new();
    let body = json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "ENDLESS"}]});
    while !stop.load(Ordering::Relaxed) {
        let mut answer = http.post(format!("{base}/v1/chat/completions")).json(&body).send().await.unwrap();
        while let Ok(Some(bytes)) = answer.chunk().await {
            read.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            if stop.load(Ordering::Relaxed) {
                return;
            }
        }
        ended.fetch_add(1, Ordering::Relaxed);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    // `cargo test --benches` runs benches once with --test-free arguments; keep that quick.
    let quick = std::env::args().any(|a| a == "--test");
    // Long enough beside the streams for each to reach `max_stream_bytes` (64 MiB at the
    // default 8 MiB/s pace) and be reopened.
    let (alone, beside) =
        if quick { (Duration::from_millis(200), Duration::from_millis(500)) } else { (Duration::from_secs(3), Duration::from_secs(12)) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let provider = provider().await;
        let proxy = start_proxy(&provider).await;
        let http = reqwest::Client::new();
        healthy(&http, &proxy.base, Duration::from_millis(100)).await;
        let (idle_median, idle_p99) = healthy(&http, &proxy.base, alone).await;
        let cpu_before = proxy.usage().cpu;
        let (stop, read, ended) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let streams: Vec<_> =
            (0..8).map(|_| tokio::spawn(endless(proxy.base.clone(), stop.clone(), read.clone(), ended.clone()))).collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let began = Instant::now();
        let (busy_median, busy_p99) = healthy(&http, &proxy.base, beside).await;
        let elapsed = began.elapsed();
        stop.store(true, Ordering::Relaxed);
        for stream in streams {
            let _ = stream.await;
        }
        let Usage { cpu: cpu_after, peak_kib: peak, .. } = proxy.usage();
        println!("| healthy caller | median ms | p99 ms |");
        println!("|---|---|---|");
        println!("| alone | {:.3} | {:.3} |", ms(idle_median), ms(idle_p99));
        println!("| beside 8 endless streams | {:.3} | {:.3} |", ms(busy_median), ms(busy_p99));
        println!(
            "median {:.2} x alone; the endless streams read {} MiB in {:.1} s ({} ended at max_stream_bytes); proxy CPU {:.1} s; peak RSS {} MiB",
            busy_median.as_secs_f64() / idle_median.as_secs_f64(),
            read.load(Ordering::Relaxed) >> 20,
            elapsed.as_secs_f64(),
            ended.load(Ordering::Relaxed),
            (cpu_after - cpu_before).as_secs_f64(),
            peak >> 10
        );
    });
}
