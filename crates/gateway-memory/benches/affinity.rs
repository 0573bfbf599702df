//! What the affinity map holds under churn: 1 000 000 ids (30 characters, as OpenAI's are)
//! remembered one after another in a map bounded at `MAX_IDS` (the default) and in one bounded
//! at a million, with the process's resident set read from `/proc/self/status` before and after
//! each. `cargo bench -p gateway-memory --bench affinity`; the figures go to
//! docs/PERFORMANCE.md. (Not criterion: the question is memory, not time.)

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use gateway_core::ports::{Affinity, AffinityMap};
use gateway_core::time::{ManualClock, Timestamp};
use gateway_memory::MemoryAffinity;
use gateway_memory::affinity::MAX_IDS;
use std::sync::Arc;
use std::time::Duration;

/// The resident set, in MiB (0 where /proc is not there).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn main() {
    let ids = if std::env::args().any(|a| a == "--test") { 10_000 } else { 1_000_000 };
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    println!("| map bound | ids remembered | ids held | RSS before | RSS after | growth |");
    println!("|---|---|---|---|---|---|");
    for bound in [MAX_IDS, 1_000_000] {
        let before = rss_mib();
        let map = MemoryAffinity::new(Arc::new(ManualClock::new(Timestamp::from_secs(0))), bound);
        let at = Affinity { scope: "chat".into(), source: "openai-primary".into() };
        runtime.block_on(async {
            for i in 0..ids {
                map.remember(&format!("resp_68a1b2c3d4e5f6{i:014}"), &at, Duration::from_secs(30 * 86_400)).await.unwrap();
            }
        });
        let after = rss_mib();
        println!("| {bound} | {ids} | {} | {before:.1} MiB | {after:.1} MiB | {:.1} MiB |", map.len(), after - before);
        assert!(map.len() <= bound);
        drop(map);
    }
}
