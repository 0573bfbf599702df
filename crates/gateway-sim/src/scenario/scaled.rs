//! A scope's policy as run at a time scale: every duration multiplied, per-minute limits
//! divided.

use gateway_core::backoff::Backoff;
use gateway_core::policy::{BreakerPolicy, QuotaLimits, ScopePolicy, SourcePolicy};
use std::time::Duration;

/// `policy` in a run at `scale`: every duration multiplied by it (in whole milliseconds, at least
/// one, as resolved durations are), per-minute limits divided by it (rounded up, at least 1).
/// Each policy struct is taken apart field by field, so a duration added to one cannot go
/// unscaled without this failing to compile.
pub(super) fn scaled_policy(policy: ScopePolicy, scale: f64) -> ScopePolicy {
    let ScopePolicy {
        name,
        breaker,
        circuit_open,
        quota_full,
        selector,
        max_retries,
        structured_max_retries,
        structured_stream,
        stall_window,
        poll_interval,
        nap_jitter,
        concurrency,
        rate_limit_window,
        backoff: Backoff { base, cap },
        isolation,
        max_tenants,
        tenant_idle,
        tiers,
        tier_weights,
        tenant_tiers,
        unknown_tenant,
        fallback,
        kinds,
        sources,
    } = policy;
    let time = |d: Duration| scaled_duration(d, scale);
    ScopePolicy {
        name,
        breaker: scaled_breaker(breaker, scale),
        circuit_open,
        quota_full,
        selector,
        max_retries,
        structured_max_retries,
        structured_stream,
        stall_window: time(stall_window),
        poll_interval: time(poll_interval),
        nap_jitter: time(nap_jitter),
        concurrency,
        rate_limit_window: time(rate_limit_window),
        backoff: Backoff { base: time(base), cap: time(cap) },
        isolation,
        max_tenants,
        tenant_idle: time(tenant_idle),
        tiers: tiers.into_iter().map(|(tier, breaker)| (tier, scaled_breaker(breaker, scale))).collect(),
        tier_weights,
        tenant_tiers,
        unknown_tenant,
        fallback,
        kinds,
        sources: sources.into_iter().map(|source| scaled_source(source, scale)).collect(),
    }
}

fn scaled_breaker(breaker: BreakerPolicy, scale: f64) -> BreakerPolicy {
    let BreakerPolicy {
        fail_threshold,
        cooldown,
        min_calls,
        fail_rate,
        window,
        max_cooldown,
        half_open_successes,
        probe_ttl,
        slow_call,
        slow_rate,
        sla_cooldown,
    } = breaker;
    let time = |d: Duration| scaled_duration(d, scale);
    BreakerPolicy {
        fail_threshold,
        cooldown: time(cooldown),
        min_calls,
        fail_rate,
        window: time(window),
        max_cooldown: time(max_cooldown),
        half_open_successes,
        probe_ttl: probe_ttl.map(time),
        slow_call: slow_call.map(time),
        slow_rate,
        sla_cooldown: sla_cooldown.map(|(floor, cap)| (time(floor), time(cap))),
    }
}

fn scaled_source(source: SourcePolicy, scale: f64) -> SourcePolicy {
    let SourcePolicy {
        name,
        base_url,
        api_key,
        account,
        model,
        timeout,
        watchdog,
        quota: QuotaLimits { max_concurrency, rpm, tpm, permit_ttl },
        headers,
        max_stream_bytes,
        stream_options,
        protocol,
        anthropic_version,
        drop_betas,
        max_tokens,
    } = source;
    let time = |d: Duration| scaled_duration(d, scale);
    let per_minute = |v: Option<u32>| v.map(|v| ((f64::from(v) / scale).ceil() as u32).max(1));
    SourcePolicy {
        name,
        base_url,
        api_key,
        account,
        model,
        timeout: time(timeout),
        watchdog: watchdog.map(time),
        quota: QuotaLimits { max_concurrency, rpm: per_minute(rpm), tpm: per_minute(tpm), permit_ttl: time(permit_ttl) },
        headers,
        max_stream_bytes,
        stream_options,
        protocol,
        anthropic_version,
        drop_betas,
        max_tokens,
    }
}

fn scaled_duration(d: Duration, scale: f64) -> Duration {
    Duration::from_millis(((d.as_millis() as f64 * scale).round() as u64).max(1))
}
