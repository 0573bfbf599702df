//! The pool's capacity: how many calls per second the scenario's providers and accounts can
//! serve at best, computed from the scenario alone (SPEC §12's report prints it beside the
//! ceiling, so a run's throughput can be read against what was there to take).
//!
//! The estimate, per serving group:
//! - a group is a provider account (every provider naming it) or a provider of its own;
//! - an account holds `max_inflight` in flight, or during the external peak (`peak_len_s` of
//!   every `peak_every_s`) `peak_inflight`;
//! - through one of its providers that capacity is further bounded by the source's local quota
//!   (`max_concurrency`, or the scope's concurrency, the AIMD ceiling, when it sets none) and by
//!   the request rates (`rpm` of the account and of the source), phase by phase: the attempts a
//!   second are the time-weighted mean, over the peak cycle, of each phase's least bound (a
//!   minute of the account's rpm cannot be spent twice, so a peak's unused rate is lost);
//! - an attempt lasts the provider's mean latency (lognormal: median · e^{σ²/2}; cut at the
//!   source's watchdog; long prompts that time out last the source's timeout);
//! - a call takes 1 / P(an attempt ends it) attempts: empty answers, 5xx, watchdog cuts and
//!   timeouts are retried, and answers failing the structure are re-asked (streamed ones too:
//!   the simulated invalid answer opens with prose and fails before its commit point);
//! - the group serves at the rate of its best provider (the others only add crumbs).
//!
//! The pool's capacity is the sum over groups, bounded by the closed-loop workload: `workers`
//! each need one call time of the best provider plus their think time per call. Poison payloads,
//! back-off and the 429s of other tenants are left out: the figure is an upper bound to read a
//! run against, not a prediction.

use crate::scenario::{Kind, Provider, Scenario};
use gateway_core::policy::SourcePolicy;

/// How one provider serves calls of the scenario's workload.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Service {
    /// Mean time of one attempt, seconds.
    attempt_s: f64,
    /// Attempts per call.
    attempts: f64,
    /// Attempts per second through it at its group's bounds.
    attempts_per_s: f64,
}

impl Service {
    fn calls_per_s(&self) -> f64 {
        self.attempts_per_s / self.attempts
    }
}

/// Φ, the standard normal distribution function (Abramowitz and Stegun 7.1.26 for erf,
/// absolute error below 1.5e-7: far finer than the estimate needs).
fn normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-z * z).exp();
    if x >= 0.0 { 0.5 * (1.0 + erf) } else { 0.5 * (1.0 - erf) }
}

/// The mean of `min(T, cut)` for a lognormal T, and the share of T above `cut`.
fn lognormal_cut(median: f64, sigma: f64, cut: Option<f64>) -> (f64, f64) {
    let mean = median * (sigma * sigma / 2.0).exp();
    let Some(cut) = cut.filter(|c| *c > 0.0 && median > 0.0) else { return (mean, 0.0) };
    if sigma <= 0.0 {
        return if median > cut { (cut, 1.0) } else { (median, 0.0) };
    }
    let z = (cut.ln() - median.ln()) / sigma;
    let above = 1.0 - normal_cdf(z);
    (mean * normal_cdf(z - sigma) + cut * above, above)
}

impl Scenario {
    /// The pool's capacity in calls per second (the module's estimate); 0 when nothing can
    /// answer.
    pub fn capacity(&self) -> f64 {
        let Ok(scope) = self.scope() else { return 0.0 };
        let long_share: f64 = self.tenants.values().filter(|t| t.long_prompts).map(|t| t.share).sum();
        let think_s: f64 = self.tenants.values().map(|t| t.share * t.think_s).sum();
        let service = |source: &SourcePolicy, provider: &Provider| -> Option<Service> {
            if provider.kind != Kind::Answers {
                return None;
            }
            let (answer_s, cut) =
                lognormal_cut(provider.latency_median_s, provider.latency_sigma, source.watchdog.map(|w| w.as_secs_f64()));
            let timeouts = long_share * provider.long_timeout_rate;
            let attempt_s = timeouts * source.timeout.as_secs_f64() + (1.0 - timeouts) * answer_s;
            let answered = (1.0 - timeouts) * (1.0 - cut) * (1.0 - provider.empty_rate - provider.error_5xx_rate).max(0.0);
            let valid = if self.structured { 1.0 - provider.invalid_json_rate } else { 1.0 };
            let ends = answered * valid;
            if ends <= 0.0 || attempt_s <= 0.0 {
                return None;
            }
            let account = provider.account.as_ref().and_then(|a| self.accounts.get(a));
            let inflight = f64::from(source.quota.max_concurrency.unwrap_or(scope.concurrency).min(scope.concurrency));
            let mut per_s = source.quota.rpm.map_or(f64::INFINITY, |rpm| f64::from(rpm) / 60.0);
            let attempts_per_s = match account {
                Some(a) => {
                    per_s = per_s.min(f64::from(a.rpm) / self.minute_s());
                    let phase = |cap: u32| (inflight.min(f64::from(cap)) / attempt_s).min(per_s);
                    // No peaks without a period (`peak_every_s = 0`), as the accounts play them.
                    let peak_share =
                        if a.peak_every_s > 0.0 && a.peak_len_s > 0.0 { (a.peak_len_s / a.peak_every_s).min(1.0) } else { 0.0 };
                    peak_share * phase(a.peak_inflight) + (1.0 - peak_share) * phase(a.max_inflight)
                }
                None => (inflight / attempt_s).min(per_s),
            };
            Some(Service { attempt_s, attempts: 1.0 / ends, attempts_per_s })
        };
        let services: Vec<(Option<&String>, Service)> = scope
            .sources
            .iter()
            .filter_map(|s| self.providers.get(&s.name).and_then(|p| service(s, p).map(|v| (p.account.as_ref(), v))))
            .collect();
        let best = |group: &[Service]| group.iter().copied().max_by(|a, b| a.calls_per_s().total_cmp(&b.calls_per_s()));
        let mut groups: Vec<Service> = services.iter().filter(|(a, _)| a.is_none()).map(|(_, s)| *s).collect();
        for account in self.accounts.keys() {
            let members: Vec<Service> = services.iter().filter(|(a, _)| *a == Some(account)).map(|(_, s)| *s).collect();
            groups.extend(best(&members));
        }
        let Some(fastest) = groups.iter().copied().min_by(|a, b| (a.attempt_s * a.attempts).total_cmp(&(b.attempt_s * b.attempts))) else {
            return 0.0;
        };
        let workload = f64::from(self.workers) / (fastest.attempt_s * fastest.attempts + think_s);
        groups.iter().map(Service::calls_per_s).sum::<f64>().min(workload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_distribution_function_is_close_enough() {
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_cdf(1.0) - 0.841_344_746).abs() < 1e-6);
        assert!((normal_cdf(-1.96) - 0.024_997_895).abs() < 1e-6);
    }

    #[test]
    fn a_watchdog_cuts_the_lognormal_tail() {
        let (mean, above) = lognormal_cut(1.5, 0.5, None);
        assert!((mean - 1.5 * 0.125f64.exp()).abs() < 1e-12 && above == 0.0);
        // p6's s5: about 90 % of the times to first token are past a 0.5 s watchdog.
        let (mean, above) = lognormal_cut(1.5, 0.85, Some(0.5));
        assert!((above - 0.901).abs() < 0.002, "{above}");
        assert!(mean < 0.5 && mean > 0.45, "{mean}");
    }

    #[test]
    fn p6_is_the_accounts_in_flight_over_s1s_call_time() {
        // K1 holds (60·6 + 240·16)/300 = 14 in flight; s1's attempt lasts 1.5·e^0.125 = 1.70 s and
        // a call needs 1/(0.84·0.97) = 1.227 attempts: 14 / 1.70 / 1.227 = 6.71 calls/s.
        let p6 = Scenario::load("p6").expect("built in");
        let whole = p6.capacity();
        assert!((whole - 14.0 / (1.5 * 0.125f64.exp()) * 0.84 * 0.97).abs() < 1e-9, "{whole}");
        assert!((whole - 6.71).abs() < 0.01, "{whole}");
        // The same pool scaled to real time serves 1/scale as many calls a second.
        assert!((p6.scaled(0.05).capacity() / whole - 20.0).abs() < 0.01);
    }

    #[test]
    fn p6_rpm_spends_its_rpm_outside_the_peaks_only() {
        // K1's 600 rpm (10 attempts a second) binds outside the peaks (32 in flight would allow
        // 18.8); in the peaks 6 in flight allow 3.53. (240·10 + 60·3.53)/300 = 8.71 attempts a
        // second, not the 10 of the mean in flight.
        let attempt_s = 1.5 * 0.125f64.exp();
        let expected = (0.8 * 10.0 + 0.2 * 6.0 / attempt_s) * 0.84 * 0.97;
        let capacity = Scenario::load("p6-rpm").expect("built in").capacity();
        assert!((capacity - expected).abs() < 1e-9, "{capacity} against {expected}");
    }

    #[test]
    fn an_account_without_a_peak_period_has_no_peaks() {
        let text = include_str!("../scenarios/p6.toml").replace("peak_every_s = 300", "peak_every_s = 0");
        let flat = Scenario::parse("flat", &text).expect("valid").capacity();
        assert!((flat - 16.0 / (1.5 * 0.125f64.exp()) * 0.84 * 0.97).abs() < 1e-9, "{flat}");
    }

    #[test]
    fn an_unbounded_pool_is_bounded_by_its_workers() {
        // single-relay: 20 workers on one source with no limits: each call takes one attempt.
        let relay = Scenario::load("single-relay").expect("built in");
        let p = &relay.providers["relay"];
        let one_call = p.latency_median_s * (p.latency_sigma * p.latency_sigma / 2.0).exp();
        assert!((relay.capacity() - 20.0 / one_call).abs() < 1e-9, "{}", relay.capacity());
        // tenants: 50 workers, each thinking 2 s between calls.
        let tenants = Scenario::load("tenants").expect("built in");
        let capacity = tenants.capacity();
        assert!(capacity > 0.0 && capacity < 50.0 / 2.0, "{capacity}");
    }

    #[test]
    fn a_pool_that_cannot_answer_has_no_capacity() {
        let text = include_str!("../scenarios/single-relay.toml").replace("[providers.relay]", "[providers.relay]\nkind = \"blackhole\"");
        let dead = Scenario::parse("dead", &text).expect("valid");
        assert_eq!(dead.capacity(), 0.0);
    }
}
