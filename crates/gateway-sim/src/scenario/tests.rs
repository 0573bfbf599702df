//! The scenarios: the built-in ones load and scale, and a bad file names what is wrong.

use super::*;
use std::time::Duration;

#[test]
fn built_in_scenarios_load_and_p6_has_the_seed_ceiling() {
    let p6 = Scenario::load("p6").unwrap();
    assert_eq!((p6.calls, p6.workers), (8000, 100));
    assert!((p6.ceiling() - 0.994).abs() < 0.001, "{}", p6.ceiling());
    Scenario::load("single-relay").unwrap();
    let tenants = Scenario::load("tenants").unwrap();
    assert_eq!(tenants.tenant_ceiling("gold"), Some(1.0));
    assert!(tenants.tenant_ceiling("bronze").unwrap() < 1.0);
}

#[test]
fn scaling_shrinks_every_duration_and_widens_per_minute_limits() {
    let p6 = Scenario::load("p6").unwrap().scaled(0.05);
    let scope = p6.scope().unwrap();
    assert_eq!(scope.breaker.cooldown, Duration::from_secs(3));
    assert_eq!(scope.breaker.window, Duration::from_secs(3));
    assert_eq!(scope.stall_window, Duration::from_secs(15));
    assert_eq!(scope.sources[0].timeout, Duration::from_millis(1500));
    assert_eq!(scope.sources[3].quota.rpm, Some(120));
    assert_eq!(p6.minute_s(), 3.0);
    assert!((p6.providers["s1"].latency_median_s - 0.075).abs() < 1e-12);
}

/// A scenario of one source whose gateway section is `gateway` (keys of `[gateway]` and its
/// tables, a `gold` tier among them).
fn with_gateway(gateway: &str) -> Scenario {
    let text = format!(
        "name = \"d\"\ndescription = \"d\"\ncalls = 1\nworkers = 1\n\n{gateway}\n\n[gateway.tenants]\nacme = \"gold\"\n\n[providers.s1]\n"
    );
    Scenario::parse("d", &text).unwrap()
}

/// `d` scaled as a run at `scale` scales it: in whole milliseconds.
fn times(d: Duration, scale: f64) -> Duration {
    Duration::from_millis((d.as_millis() as f64 * scale).round() as u64)
}

/// Every duration of `scaled` is that of `unscaled` times `scale`, in the scope, its tiers and
/// its sources; per-minute limits are divided by it.
fn check_scaled(unscaled: &ScopePolicy, scaled: &ScopePolicy, scale: f64) {
    let t = |d: Duration| times(d, scale);
    let breakers = std::iter::once(("scope", &unscaled.breaker, &scaled.breaker))
        .chain(unscaled.tiers.iter().map(|(tier, b)| (tier.as_str(), b, &scaled.tiers[tier])));
    for (at, a, b) in breakers {
        assert_eq!(b.cooldown, t(a.cooldown), "{at}: cooldown");
        assert_eq!(b.window, t(a.window), "{at}: window");
        assert_eq!(b.max_cooldown, t(a.max_cooldown), "{at}: max_cooldown");
        assert_eq!(b.probe_ttl, a.probe_ttl.map(t), "{at}: probe_ttl");
        assert_eq!(b.slow_call, a.slow_call.map(t), "{at}: slow_call");
        assert_eq!(b.sla_cooldown, a.sla_cooldown.map(|(min, max)| (t(min), t(max))), "{at}: sla_cooldown");
        assert_eq!((b.fail_threshold, b.fail_rate, b.slow_rate), (a.fail_threshold, a.fail_rate, a.slow_rate), "{at}: not durations");
    }
    assert_eq!(scaled.tiers.len(), unscaled.tiers.len());
    assert_eq!(scaled.stall_window, t(unscaled.stall_window), "stall_window");
    assert_eq!(scaled.poll_interval, t(unscaled.poll_interval), "poll_interval");
    assert_eq!(scaled.nap_jitter, t(unscaled.nap_jitter), "nap_jitter");
    assert_eq!((scaled.backoff.base, scaled.backoff.cap), (t(unscaled.backoff.base), t(unscaled.backoff.cap)), "backoff");
    assert_eq!(scaled.tenant_idle, t(unscaled.tenant_idle), "tenant_idle");
    for (a, b) in unscaled.sources.iter().zip(&scaled.sources) {
        assert_eq!(b.timeout, t(a.timeout), "{}: timeout", a.name);
        assert_eq!(b.watchdog, a.watchdog.map(t), "{}: watchdog", a.name);
        assert_eq!(b.quota.permit_ttl, t(a.quota.permit_ttl), "{}: permit_ttl", a.name);
        let per_minute = |v: Option<u32>| v.map(|v| (f64::from(v) / scale).ceil() as u32);
        assert_eq!((b.quota.rpm, b.quota.tpm), (per_minute(a.quota.rpm), per_minute(a.quota.tpm)), "{}: per minute", a.name);
    }
}

#[test]
fn scaling_scales_every_duration_key_of_the_scope_and_its_tiers() {
    let scenario = with_gateway(
        "[gateway]\nisolation = \"per_tenant\"\nstall_window_s = 200\npoll_interval_s = 0.2\nbackoff_base_s = 0.4\n\
         backoff_cap_s = 10\ntenant_idle_s = 400\n\n\
         [gateway.breaker]\nfail_threshold = 5\ncooldown_s = 20\nwindow_s = 40\nmax_cooldown_s = 400\nprobe_ttl_s = 60\n\
         slow_call_s = 8\nsla_adaptive = true\nsla_min_cooldown_s = 30\nsla_max_cooldown_s = 200\n\n\
         [gateway.tiers.gold.breaker]\ncooldown_s = 10\nwindow_s = 20\nmax_cooldown_s = 100\nprobe_ttl_s = 40\n\
         slow_call_s = 4\nsla_min_cooldown_s = 16\nsla_max_cooldown_s = 80\n\n\
         [gateway.sources.s1]\ntimeout_s = 20\nwatchdog_s = 6\nrpm = 60\ntpm = 6000",
    );
    let unscaled = scenario.scope().unwrap();
    let scaled = scenario.scaled(0.05).scope().unwrap();
    check_scaled(&unscaled, &scaled, 0.05);
    // the values as written, to be sure the check compares what was set
    let gold = &scaled.tiers["gold"];
    assert_eq!(
        (gold.slow_call, gold.sla_cooldown),
        (Some(Duration::from_millis(200)), Some((Duration::from_millis(800), Duration::from_secs(4))))
    );
    assert_eq!((scaled.tenant_idle, scaled.breaker.slow_call), (Duration::from_secs(20), Some(Duration::from_millis(400))));
    assert_eq!(scaled.breaker.sla_cooldown, Some((Duration::from_millis(1500), Duration::from_secs(10))));
}

#[test]
fn scaling_scales_the_defaults_gateway_core_resolves_for_unset_keys() {
    let scenario = with_gateway(
        "[gateway]\nisolation = \"per_tenant\"\n\n[gateway.breaker]\nfail_threshold = 5\ncooldown_s = 20\n\n\
         [gateway.tiers.gold.breaker]\nsla_adaptive = true\nslow_call_s = 4\n\n[gateway.sources.s1]",
    );
    let unscaled = scenario.scope().unwrap();
    let scaled = scenario.scaled(0.5).scope().unwrap();
    check_scaled(&unscaled, &scaled, 0.5);
    // tenant_idle_s defaults to 600 s; the tier's SLA bounds to its cooldown and max_cooldown
    assert_eq!(scaled.tenant_idle, Duration::from_secs(300));
    assert_eq!(scaled.tiers["gold"].sla_cooldown, Some((Duration::from_secs(10), Duration::from_secs(150))));
}

#[test]
fn set_overrides_a_key_and_names_a_bad_one() {
    let sets = |s: &[&str]| s.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let p6 = Scenario::load_with("p6", &sets(&["accounts.k1.background_429=0.05", "accounts.k1.rate_limit_headers=false", "calls = 300"]))
        .unwrap();
    let k1 = &p6.accounts["k1"];
    assert_eq!((k1.background_429, k1.rate_limit_headers, p6.calls), (0.05, false, 300));
    assert_eq!(p6.overrides.len(), 3, "kept for the worker processes");
    assert!(Scenario::load("p6").unwrap().accounts["k1"].rate_limit_headers, "headers are on by default");
    let error = |s: &[&str]| Scenario::load_with("p6", &sets(s)).unwrap_err().to_string();
    assert!(error(&["accounts.k1.bogus=1"]).contains("bogus"), "an unknown key is named");
    assert!(error(&["accounts.k1.max_inflight"]).contains("expected KEY=VALUE"));
    assert!(error(&["accounts..max_inflight=3"]).contains("not a dotted key"));
    assert!(error(&["calls.x=3"]).contains("calls is not a table"));
    assert!(error(&["accounts.k1.max_inflight=many"]).contains("max_inflight"), "a value of the wrong type names its key");
}

#[test]
fn bad_scenarios_are_named() {
    let e = Scenario::load("p7").unwrap_err().to_string();
    assert!(e.starts_with("unknown scenario \"p7\" (built in: p6, p6-rpm, mixed, single-relay"), "{e}");
    let text = include_str!("../../scenarios/p6.toml").replace("[providers.s3]\nkind = \"blackhole\"", "");
    assert!(Scenario::parse("x", &text).unwrap_err().to_string().contains("providers.s3: required key is missing"));
    let text = include_str!("../../scenarios/p6.toml").replace("fail_threshold = 5", "fail_threshold = 0");
    assert!(Scenario::parse("x", &text).unwrap_err().to_string().contains("gateway.soak.breaker.fail_threshold"));
    let text = include_str!("../../scenarios/tenants.toml").replace("share = 0.4", "share = 0.5");
    assert!(Scenario::parse("x", &text).unwrap_err().to_string().contains("tenants: the shares sum to 1.1, not 1"));
    let text = include_str!("../../scenarios/tenants.toml").replace("share = 0.4", "share = 0");
    assert!(Scenario::parse("x", &text).unwrap_err().to_string().contains("tenants.gold.share: a share is within (0, 1]"));
    let text = include_str!("../../scenarios/p6.toml").replace("calls = 8000", "calls = 8000\ncals = 1");
    assert!(Scenario::parse("x", &text).unwrap_err().to_string().contains("unknown field `cals`"));
}

#[test]
fn the_flood_runs_its_tenant_alone_with_its_share_and_names_what_is_wrong() {
    let flood = Scenario::load("tenants").unwrap().flood.expect("the tenants soak has a flood line");
    let flooded = flood.load().unwrap();
    let alone = flooded.alone(&flood.tenant).unwrap();
    assert_eq!((alone.calls, alone.workers), (1280, 16), "gold's share of 4000 calls and 50 callers");
    assert_eq!(alone.tenants.keys().collect::<Vec<_>>(), ["gold"]);
    assert!((alone.tenants["gold"].share - 1.0).abs() < 1e-12 && alone.flood.is_none());
    assert!(flooded.alone("platinum").is_none());
    let bad = |flood: Flood| flood.load().unwrap_err().to_string();
    let unknown = Flood { tenant: "platinum".into(), ..flood.clone() };
    assert!(bad(unknown).contains("flood.tenant: \"platinum\" is not one of two or more tenants (tenants: bronze, gold)"));
    assert!(bad(Flood { max_ratio: 0.5, ..flood.clone() }).contains("flood.max_ratio: 0.5 is not a number of at least 1"));
    assert!(bad(Flood { max_ratio: f64::NAN, ..flood.clone() }).contains("flood.max_ratio"));
    assert!(bad(Flood { scenario: "nowhere".into(), ..flood }).contains("unknown scenario \"nowhere\""));
}
