//! The soak's line on tenants sharing one account (a scenario's `[flood]`): the flood's
//! scenario runs with its tenant's load alone, then with every tenant's, on each seed, and the
//! tenant's p95 wait beside the others may be at most `max_ratio` × its p95 alone.

use super::args::Options;
use super::{Runs, run_one};
use gateway_client::Preset;
use gateway_sim::scenario::Flood;

/// Runs `flood` on every seed, adds its runs to `runs` and a failure for each seed past its
/// ratio. Its scenarios run as written: `--calls` and `--callers` are for the main scenario.
pub(super) fn run_flood(o: &Options, flood: &Flood, runs: &mut Runs, failures: &mut Vec<String>) -> Result<(), String> {
    let flooded = flood.load().map_err(|e| e.to_string())?;
    let alone = flooded.alone(&flood.tenant).ok_or_else(|| format!("flood.tenant: no tenant {:?}", flood.tenant))?;
    let own = Options { calls: None, callers: None, isolation: None, ..o.clone() };
    let wait = |summary: &gateway_sim::report::Summary| summary.tenants.get(&flood.tenant).map_or(0.0, |t| t.wait_p95_s);
    for &seed in &o.seeds {
        let by_itself = run_one(&own, &alone, None, ("default", Preset::Default), None, seed, "alone")?;
        let beside = run_one(&own, &flooded, None, ("default", Preset::Default), None, seed, "flooded")?;
        let (a, b) = (wait(&by_itself), wait(&beside));
        let ratio = if b <= a {
            1.0_f64.min(if a > 0.0 { b / a } else { 1.0 })
        } else if a > 0.0 {
            b / a
        } else {
            f64::INFINITY
        };
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
        runs.push(("alone".to_owned(), by_itself));
        runs.push(("flooded".to_owned(), beside));
    }
    Ok(())
}
