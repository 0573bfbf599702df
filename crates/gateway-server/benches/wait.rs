//! What a governed call costs while it waits (issue "The cost of a governed call"): 100
//! closed-loop callers send chat calls through the proxy binary (its own process or processes,
//! as deployed) to one provider account of 16 slots whose answers take 100 ms, so that most
//! calls wait in line for the account's learned limit. Three times: one proxy on the in-process
//! backend, one on Redis (what Redis costs, apart from a second process), then two proxies
//! sharing Redis (the callers split between them). For each it reports the proxies' CPU time per
//! call and their threads' context switches per call (from `/proc`: a count, steadier than the
//! CPU time, which moves with whatever else this VM does), the Redis commands per attempt
//! (Redis's own `INFO commandstats`, every client's: the commands sent, scripts counted once, and
//! all the commands run, a script's own included), Redis's own CPU time per call (`INFO cpu`: the
//! shared server every process waits on), and the wake-up lag: how long after an answer
//! left the provider (its slot freed) the next attempt arrived there, the time a waiter takes to
//! notice, be admitted and send. Its tail is read beside the share of frees that came within 1 ms
//! of the one before: answers that all take 100 ms keep the slots freeing in bursts, and the last
//! of a burst's waiters waits for the others' work (each freed slot lets one waiter go: on
//! Redis their admissions overlap, in process they run one after another on a worker).
//! After the rows, the floor under the Redis ones (support/floor.rs): the CPU one round trip costs
//! a process that does nothing else at the rows' pace, through the proxy's own connection and on
//! a bare socket, beside what 1.5 × memory leaves for all that Redis adds to a call.
//! `cargo bench -p gateway-server --bench wait`; the figures go to docs/PERFORMANCE.md. Redis is
//! `GATEWAY_REDIS_URL` (default `redis://127.0.0.1:6379`); without it the Redis rows say they
//! were skipped and why.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]
// A benchmark measures wall-clock time.
#![allow(clippy::disallowed_methods)]

use gateway_mock::{Answer, MockServer, openai};
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "support/binary.rs"]
mod binary;
use binary::Proxy;
#[path = "support/floor.rs"]
mod floor;

const CALLERS: usize = 100;
const SLOTS: usize = 16;
const ANSWER: Duration = Duration::from_millis(100);

/// The provider account: 16 slots (a 17th attempt in flight is refused with 429), answers after
/// 100 ms, and the record of when slots were freed and attempts arrived.
#[derive(Default)]
struct Account {
    in_flight: AtomicUsize,
    arrivals: AtomicU64,
    refused: AtomicU64,
    freed: Mutex<Frees>,
    /// Each arrival's time since the oldest freed slot it took.
    lags: Mutex<Vec<Duration>>,
}

/// The slots freed.
#[derive(Default)]
struct Frees {
    /// When answers left and freed a slot, oldest first, not yet taken by an arrival.
    untaken: VecDeque<Instant>,
    /// The last free.
    last: Option<Instant>,
    count: u64,
    /// Those that came within 1 ms of the one before (a burst: the waiters they free queue
    /// behind each other's admissions).
    bunched: u64,
}

impl Account {
    /// Forgets what was recorded (the warm-up's ramp, where arrivals took slots nobody freed).
    fn reset(&self) {
        self.arrivals.store(0, Ordering::Relaxed);
        self.refused.store(0, Ordering::Relaxed);
        *self.freed.lock().unwrap() = Frees::default();
        self.lags.lock().unwrap().clear();
    }

    /// A slot was freed at `at`.
    fn free(&self, at: Instant) {
        let mut frees = self.freed.lock().unwrap();
        frees.untaken.push_back(at);
        frees.count += 1;
        if frees.last.is_some_and(|last| at.saturating_duration_since(last) < Duration::from_millis(1)) {
            frees.bunched += 1;
        }
        frees.last = Some(at);
    }

    /// The share of frees that came within 1 ms of the one before.
    fn bunched(&self) -> f64 {
        let frees = self.freed.lock().unwrap();
        frees.bunched as f64 / frees.count.max(1) as f64
    }
}

/// A slot taken: freed (and its time recorded) when the answer has left.
struct Taken(Arc<Account>);

impl Drop for Taken {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.free(Instant::now());
    }
}

async fn provider(account: Arc<Account>) -> MockServer {
    let answer = openai::completion("ok");
    let refusal = openai::error("rate_limit_exceeded", "16 in flight", "requests");
    MockServer::builder()
        .unrecorded()
        .answering(move |_| {
            let now = Instant::now();
            account.arrivals.fetch_add(1, Ordering::Relaxed);
            // One lock at a time: the report reads the lags, then the frees.
            let freed = account.freed.lock().unwrap().untaken.pop_front();
            if let Some(freed) = freed {
                account.lags.lock().unwrap().push(now.saturating_duration_since(freed));
            }
            if account.in_flight.fetch_add(1, Ordering::Relaxed) >= SLOTS {
                account.in_flight.fetch_sub(1, Ordering::Relaxed);
                account.refused.fetch_add(1, Ordering::Relaxed);
                return Answer::json(429, &refusal);
            }
            Answer::json(200, &answer).after(ANSWER).holding(Taken(account.clone()))
        })
        .await
        .unwrap()
}

/// One proxy binary in front of `provider`, with scope `scope` (concurrency 16: the account's
/// limit learns up to its 16 slots) and Redis at `redis` if given; `n` tells several apart.
async fn start_proxy(provider: &MockServer, scope: &str, redis: Option<&str>, n: usize) -> Proxy {
    let backend = redis.map(|url| format!("[backend]\nredis_url = \"{url}\"\n")).unwrap_or_default();
    let tables = format!(
        "{backend}[{scope}]\nconcurrency = {SLOTS}\n[{scope}.breaker]\nfail_threshold = 5\ncooldown_s = 60\n\
         [{scope}.sources.account]\nbase_url = \"{}\"\nmodel = \"m\"\ntimeout_s = 30\n",
        provider.base_url()
    );
    Proxy::start(&format!("wait-{n}"), &tables).await
}

/// The proxies' CPU time and context switches so far, together.
fn usage(proxies: &[Proxy]) -> (Duration, u64) {
    proxies.iter().map(Proxy::usage).fold((Duration::ZERO, 0), |(cpu, switches), u| (cpu + u.cpu, switches + u.switches))
}

/// The host:port of the Redis at `url` (`redis://host:port`).
fn address(url: &str) -> String {
    url.trim_start_matches("redis://").trim_end_matches('/').to_owned()
}

/// The section `section` of Redis's `INFO` at `addr`.
fn redis_info(addr: &str, section: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(format!("*2\r\n$4\r\nINFO\r\n${}\r\n{section}\r\n", section.len()).as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    reader.read_line(&mut head).unwrap();
    let length: usize = head.trim().strip_prefix('$').expect("a bulk string").parse().unwrap();
    let mut text = vec![0; length];
    reader.read_exact(&mut text).unwrap();
    String::from_utf8(text).unwrap()
}

/// The commands Redis at `addr` has run so far (every client's), by name, from `INFO
/// commandstats`; its own INFO not counted.
fn redis_commands(addr: &str) -> BTreeMap<String, u64> {
    // cmdstat_evalsha:calls=123,usec=…
    redis_info(addr, "commandstats")
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            Some((name.to_owned(), stats.split(',').next()?.parse::<u64>().ok()?))
        })
        .filter(|(name, _)| name != "info")
        .collect()
}

/// The CPU time Redis at `addr` has used so far (its main thread's and the others', user and
/// system), from `INFO cpu`.
fn redis_cpu(addr: &str) -> Duration {
    let seconds: f64 = redis_info(addr, "cpu")
        .lines()
        .filter_map(|line| line.strip_prefix("used_cpu_sys:").or_else(|| line.strip_prefix("used_cpu_user:")))
        .filter_map(|value| value.trim().parse::<f64>().ok())
        .sum();
    Duration::from_secs_f64(seconds)
}

/// Closed-loop callers through `bases` (split evenly) until `stop`; calls answered go to `calls`.
fn callers(bases: &[String], model: &str, stop: &Arc<AtomicBool>, calls: &Arc<AtomicU64>) -> Vec<tokio::task::JoinHandle<()>> {
    let body = Arc::new(json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}));
    (0..CALLERS)
        .map(|i| {
            let url = format!("{}/v1/chat/completions", bases[i % bases.len()]);
            let (body, stop, calls) = (body.clone(), stop.clone(), calls.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                while !stop.load(Ordering::Relaxed) {
                    let answer = http.post(url.as_str()).json(&*body).send().await.unwrap();
                    assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap_or_default());
                    answer.bytes().await.unwrap();
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

/// One run: `processes` proxies (on Redis at `redis` if given), warmed up, then measured for
/// `span`; its row of the table. Returns the proxies' CPU ms a call.
async fn run(name: &str, processes: usize, redis: Option<&str>, warm: Duration, span: Duration) -> f64 {
    let account = Arc::new(Account::default());
    let provider = provider(account.clone()).await;
    // A scope of this run's own: Redis keys of earlier runs do not meet it.
    let scope = format!("wait{}{}", std::process::id(), processes);
    let mut proxies = Vec::new();
    for n in 0..processes {
        proxies.push(start_proxy(&provider, &scope, redis, n).await);
    }
    let bases: Vec<String> = proxies.iter().map(|p| p.base.clone()).collect();
    let (stop, calls) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let tasks = callers(&bases, &scope, &stop, &calls);
    tokio::time::sleep(warm).await;
    let redis_addr = redis.map(address);
    let (used_before, calls_before) = (usage(&proxies), calls.load(Ordering::Relaxed));
    let commands_before = redis_addr.as_deref().map(redis_commands);
    let redis_cpu_before = redis_addr.as_deref().map(redis_cpu);
    account.reset();
    tokio::time::sleep(span).await;
    let used = usage(&proxies);
    let (cpu, switches) = (used.0 - used_before.0, used.1.saturating_sub(used_before.1));
    let redis_used = redis_addr.as_deref().map(redis_cpu).zip(redis_cpu_before).map(|(after, before)| after.saturating_sub(before));
    let commands = redis_addr.as_deref().map(redis_commands).zip(commands_before).map(|(after, before)| {
        after
            .into_iter()
            .map(|(name, calls)| (name.clone(), calls - before.get(&name).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect::<BTreeMap<_, _>>()
    });
    let answered = calls.load(Ordering::Relaxed) - calls_before;
    let (attempts, refused) = (account.arrivals.load(Ordering::Relaxed), account.refused.load(Ordering::Relaxed));
    let mut lags = account.lags.lock().unwrap().clone();
    let bunched = account.bunched();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    lags.sort();
    let at = |q: f64| lags.get(((lags.len() as f64 * q) as usize).min(lags.len().saturating_sub(1))).map_or(0.0, |d| d.as_secs_f64() * 1e3);
    let per_call = cpu.as_secs_f64() * 1e3 / answered.max(1) as f64;
    let switches_per_call = switches as f64 / answered.max(1) as f64;
    // What a client sends (INFO commandstats counts the commands a script runs too).
    let sent = |name: &str| name.starts_with("eval") || name.starts_with("script") || name.contains("publish") || name == "ping";
    let by_name = |c: &BTreeMap<String, u64>| {
        let each: Vec<String> =
            c.iter().filter(|(name, _)| sent(name)).map(|(name, n)| format!("{name} {:.2}", *n as f64 / attempts.max(1) as f64)).collect();
        let total: u64 = c.iter().filter(|(name, _)| sent(name)).map(|(_, n)| n).sum();
        let all: u64 = c.values().sum();
        format!(
            "{:.2} ({}; {:.1} with the scripts' own)",
            total as f64 / attempts.max(1) as f64,
            each.join(", "),
            all as f64 / attempts.max(1) as f64
        )
    };
    let commands = commands.as_ref().map_or("–".to_owned(), by_name);
    let redis_per_call = redis_used.map_or("–".to_owned(), |used| format!("{:.3}", used.as_secs_f64() * 1e3 / answered.max(1) as f64));
    println!(
        "| {name} | {:.1} | {:.0} | {refused} | {:.3} | {:.2} | {commands} | {redis_per_call} | {:.2} / {:.2} / {:.2} | {:.0} % |",
        answered as f64 / span.as_secs_f64(),
        attempts as f64 / span.as_secs_f64(),
        per_call,
        switches_per_call,
        at(0.5),
        at(0.99),
        at(1.0),
        bunched * 100.0,
    );
    per_call
}

fn main() {
    // `cargo test --benches` runs benches once with --test-free arguments; keep that quick.
    let quick = std::env::args().any(|a| a == "--test");
    let (warm, span) =
        if quick { (Duration::from_millis(500), Duration::from_secs(1)) } else { (Duration::from_secs(5), Duration::from_secs(20)) };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let redis = std::env::var("GATEWAY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    println!("{CALLERS} closed-loop callers, one account of {SLOTS} slots, answers after {} ms", ANSWER.as_millis());
    println!();
    println!(
        "| backend | calls/s | attempts/s | 429s | proxy CPU ms a call | proxy context switches a call | Redis commands an attempt | Redis CPU ms a call | wake-up lag ms p50 / p99 / max | frees within 1 ms of the last |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let memory = runtime.block_on(async {
        let memory = run("memory, one process", 1, None, warm, span).await;
        if std::net::TcpStream::connect(address(&redis)).is_ok() {
            run("Redis, one process", 1, Some(&redis), warm, span).await;
            run("Redis, two processes", 2, Some(&redis), warm, span).await;
            Some(memory)
        } else {
            println!("| Redis | skipped: nothing answers at {redis} (set GATEWAY_REDIS_URL) | | | | | | | | |");
            None
        }
    });
    if let Some(memory) = memory {
        // One round trip a slot's share of the pace, as the rows' calls come.
        let gap = ANSWER / SLOTS as u32;
        let floor = floor::measure(&redis, &address(&redis), gap, if quick { 20 } else { 800 });
        println!();
        println!(
            "The floor: a process doing nothing else, one round each {:.2} ms, used {:.3} ms of CPU a round for the timer \
             alone, {:.3} ms with a gate's enter through the proxy's connection to Redis ({:.3} ms a round trip) and {:.3} ms \
             with a bare command of the handover's shape on a socket of its own ({:.3} ms). Redis within 1.5 × memory's \
             {memory:.3} ms a call leaves {:.3} ms a call for all that Redis adds.",
            gap.as_secs_f64() * 1e3,
            floor.timer,
            floor.gate,
            floor.gate - floor.timer,
            floor.bare,
            floor.bare - floor.timer,
            memory / 2.0,
        );
    }
}
