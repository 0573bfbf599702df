//! The soak's line on tenants sharing one account (a scenario's `[flood]`): the flood's
//! scenario runs with its tenant's load alone, then with every tenant's, on each seed, and the
//! tenant's p95 wait beside the others may be at most `max_ratio` × its p95 alone (waits under
//! one poll count as one poll). The runs are checked as the main ones are (invariants,
//! `--min-success`) and reported under the policies `alone` and `flooded`.

use super::args::Options;
use super::{Runs, failures_of, run_one};
use gateway_client::Preset;
use gateway_sim::scenario::Flood;

/// Runs `flood` on every seed, adds its runs to `runs` and a failure for each seed past its
/// ratio. Its scenarios run as written: `--calls` and `--callers` are for the main scenario.
pub(super) fn run_flood(o: &Options, flood: &Flood, runs: &mut Runs, failures: &mut Vec<String>) -> Result<(), String> {
    let flooded = flood.load().map_err(|e| e.to_string())?;
    let alone = flooded.alone(&flood.tenant).ok_or_else(|| format!("flood.tenant: no tenant {:?}", flood.tenant))?;
    let own = Options { calls: None, callers: None, isolation: None, ..o.clone() };
    let wait = |summary: &gateway_sim::report::Summary| summary.tenants.get(&flood.tenant).map_or(0.0, |t| t.wait_p95_s);
    // Waits shorter than a nap's spread are no wait to compare (a ratio of two near-zeros is
    // noise).
    let floor = flooded.scope().map_err(|e| e.to_string())?.nap_jitter.as_secs_f64();
    for &seed in &o.seeds {
        let mut pair = Vec::new();
        for (label, scenario) in [("alone", &alone), ("flooded", &flooded)] {
            let summary = run_one(&own, scenario, None, (label, Preset::Default), None, seed, label)?;
            failures.extend(failures_of(label, &summary, o.min_success));
            pair.push((label.to_owned(), summary));
        }
        let (a, b) = (wait(&pair[0].1), wait(&pair[1].1));
        let ratio = b.max(floor) / a.max(floor);
        println!(
            "{:>8} seed {seed:<3} {}: {}'s p95 wait {a:.2} s alone, {b:.2} s beside the others ({ratio:.2}×; at most {:.2}×)",
            "flood", flooded.name, flood.tenant, flood.max_ratio
        );
        if ratio > flood.max_ratio {
            failures.push(format!(
                "flood seed {seed}: {}'s p95 wait beside the others is {ratio:.2} × alone, past {:.2} ×",
                flood.tenant, flood.max_ratio
            ));
        }
        runs.extend(pair);
    }
    Ok(())
}
