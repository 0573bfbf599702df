//! The floor under the wait bench's Redis rows: what one script round trip costs a process that
//! does nothing else, at the bench's pace. A runtime of its own (two workers, as the proxy's)
//! waits one slot's share of the pace (1/160 s) and then, or not, asks a gate's enter
//! (`gate.lua`, through the proxy's own `RedisConnection` and `RedisGates`); its threads' CPU
//! time (`/proc/self/task/*/schedstat`, nanoseconds) with the round trip, less without it, is
//! the round trip's own. Beside it, the least such a round trip can cost: a command of the
//! handover's shape (an EVALSHA of 10 keys and 80 arguments, ~650 bytes, as `MONITOR` shows
//! `handover.lua`'s) of a script that only answers 1, written and read on a socket of its own by
//! the waiting task itself (no client library, no hand-off between tasks). One round trip a call
//! costs the proxy at least about that here, so memory's CPU a call against it says how near
//! 1.5 × memory Redis can come.

use gateway_core::breaker::GateOp;
use gateway_core::policy::BreakerConfig;
use gateway_core::ports::{BreakerGate, SourceKey};
use gateway_redis::{RedisConfig, RedisConnection, RedisGates};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The name of the floor runtime's threads, by which their CPU time is found.
const THREADS: &str = "wait-floor";

/// The CPU time the floor runtime's threads have used so far (threads that ended not counted:
/// the runtime keeps its workers for its life).
fn threads_cpu() -> Duration {
    let nanos: u64 = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| {
            let path = task.ok()?.path();
            let name = std::fs::read_to_string(path.join("comm")).ok()?;
            if !name.trim().starts_with(THREADS) {
                return None;
            }
            std::fs::read_to_string(path.join("schedstat")).ok()?.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum();
    Duration::from_nanos(nanos)
}

/// The floor's figures, in ms of CPU a round.
pub struct Floor {
    /// The pace's timer alone.
    pub timer: f64,
    /// The timer and a gate's enter through the proxy's own connection.
    pub gate: f64,
    /// The timer and a command of the handover's shape on a socket of its own.
    pub bare: f64,
}

/// The floor on Redis at `url` (host:port `addr`), `rounds` each, one each `gap`.
pub fn measure(url: &str, addr: &str, gap: Duration, rounds: usize) -> Floor {
    std::thread::spawn({
        let (url, addr) = (url.to_owned(), addr.to_owned());
        move || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name(THREADS).enable_all().build().unwrap();
            // On a worker, as the proxy's tasks run: the thread that blocks on it is not counted.
            runtime.block_on(async move { tokio::spawn(async move { rounds_on(&url, &addr, gap, rounds).await }).await.unwrap() })
        }
    })
    .join()
    .unwrap()
}

/// What a round asks of Redis after its timer.
#[derive(Clone, Copy)]
enum Asks {
    Nothing,
    /// A gate's enter through the proxy's own connection.
    Gate,
    /// A command of the handover's shape on a socket of its own.
    Bare,
}

async fn rounds_on(url: &str, addr: &str, gap: Duration, rounds: usize) -> Floor {
    let conn = RedisConnection::connect(RedisConfig { url: url.to_owned(), ..RedisConfig::default() }).await.unwrap();
    let gates = RedisGates::new(conn);
    let policy = BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() }.resolve("floor").unwrap();
    let params = gateway_core::breaker::GateParams::new(&policy, 0, Duration::from_secs(30), Duration::from_secs(30));
    let key = SourceKey::new(format!("floor{}", std::process::id()), "account");
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.set_nodelay(true).unwrap();
    let bare = bare_command(&mut socket).await;
    let mut round = async |asks: Asks| {
        tokio::time::sleep(gap).await;
        match asks {
            Asks::Nothing => {}
            Asks::Gate => drop(gates.apply(&key, &params, GateOp::TryEnter).await.unwrap()),
            Asks::Bare => {
                socket.write_all(&bare).await.unwrap();
                let mut one = [0; 4];
                socket.read_exact(&mut one).await.unwrap();
                assert_eq!(&one, b":1\r\n");
            }
        }
    };
    for _ in 0..rounds.min(50) {
        round(Asks::Gate).await;
        round(Asks::Bare).await;
    }
    // In alternate blocks, so that a machine that slows down meanwhile weighs on each alike.
    let (blocks, mut used) = (4_u32, [Duration::ZERO; 3]);
    let each = rounds / blocks as usize;
    for _ in 0..blocks {
        for (asks, used) in [Asks::Nothing, Asks::Gate, Asks::Bare].into_iter().zip(&mut used) {
            let before = threads_cpu();
            for _ in 0..each {
                round(asks).await;
            }
            *used += threads_cpu() - before;
        }
    }
    gates.forget(&key).await.unwrap();
    let per_round = |used: Duration| used.as_secs_f64() * 1e3 / (each.max(1) as f64 * f64::from(blocks));
    Floor { timer: per_round(used[0]), gate: per_round(used[1]), bare: per_round(used[2]) }
}

/// A command of the handover's shape, in RESP, for a script loaded on `socket` that answers 1.
async fn bare_command(socket: &mut tokio::net::TcpStream) -> Vec<u8> {
    let bulk = |s: &str| format!("${}\r\n{s}\r\n", s.len());
    let script = "return 1";
    socket.write_all(format!("*3\r\n{}{}{}", bulk("SCRIPT"), bulk("LOAD"), bulk(script)).as_bytes()).await.unwrap();
    let mut loaded = [0; 47];
    socket.read_exact(&mut loaded).await.unwrap();
    let sha = std::str::from_utf8(&loaded[5..45]).unwrap().to_owned();
    let keys: Vec<String> = (0..10).map(|i| format!("gw:{{floor}}:key:{i}")).collect();
    let args: Vec<String> = (0..80).map(|i| format!("arg{i:04}")).collect();
    let mut command = format!("*{}\r\n{}{}{}", 3 + keys.len() + args.len(), bulk("EVALSHA"), bulk(&sha), bulk(&keys.len().to_string()));
    for part in keys.iter().chain(&args) {
        command.push_str(&bulk(part));
    }
    command.into_bytes()
}
