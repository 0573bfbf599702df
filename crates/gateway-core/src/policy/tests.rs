//! The policies' validation: defaults, ranges, and the key every error names.

use super::*;
use crate::select::SelectorKind;
use std::collections::BTreeMap;
use std::time::Duration;

fn scope(toml_breaker: BreakerConfig) -> ScopeConfig {
    ScopeConfig { breaker: toml_breaker, sources: BTreeMap::from([("s1".to_owned(), SourceConfig::default())]), ..ScopeConfig::default() }
}

fn required() -> BreakerConfig {
    BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() }
}

fn err(config: &ScopeConfig) -> String {
    config.resolve("chat").unwrap_err().to_string()
}

#[test]
fn defaults_follow_the_spec() {
    let p = scope(required()).resolve("chat").unwrap();
    assert_eq!(p.breaker.min_calls, 10);
    assert_eq!(p.breaker.fail_rate, 0.6);
    assert_eq!(p.breaker.window, Duration::from_secs(60));
    assert_eq!(p.breaker.max_cooldown, Duration::from_secs(300));
    assert_eq!(p.breaker.half_open_successes, 1);
    assert_eq!((p.circuit_open, p.quota_full), (WaitMode::FailFast, WaitMode::Wait));
    assert_eq!((p.max_retries, p.structured_max_retries), (3, 2));
    assert_eq!(p.stall_window, Duration::from_secs(300));
    assert_eq!(p.poll_interval, Duration::from_secs(1));
    assert_eq!(p.nap_jitter, Duration::from_millis(50));
    assert_eq!(p.selector, SelectorKind::HealthAware);
    assert_eq!(p.sources[0].timeout, Duration::from_secs(60));
}

#[test]
fn max_cooldown_defaults_to_at_least_cooldown() {
    let p = scope(BreakerConfig { cooldown_s: Some(900.0), ..required() }).resolve("chat").unwrap();
    assert_eq!(p.breaker.max_cooldown, Duration::from_secs(900));
}

#[test]
fn missing_required_keys_are_named() {
    let no_threshold = scope(BreakerConfig { fail_threshold: None, ..required() });
    assert_eq!(err(&no_threshold), "chat.breaker.fail_threshold: required key is missing");
    let no_cooldown = scope(BreakerConfig { cooldown_s: None, ..required() });
    assert_eq!(err(&no_cooldown), "chat.breaker.cooldown_s: required key is missing");
    let no_sources = ScopeConfig { breaker: required(), ..ScopeConfig::default() };
    assert_eq!(err(&no_sources), "chat.sources: required key is missing");
}

#[test]
fn out_of_range_values_are_named_with_the_value() {
    let cases: Vec<(BreakerConfig, &str)> = vec![
        (BreakerConfig { fail_threshold: Some(0), ..required() }, "chat.breaker.fail_threshold: value 0 is out of range"),
        (BreakerConfig { cooldown_s: Some(-1.0), ..required() }, "chat.breaker.cooldown_s: value -1 is out of range"),
        (BreakerConfig { cooldown_s: Some(f64::NAN), ..required() }, "chat.breaker.cooldown_s: value NaN is out of range"),
        (BreakerConfig { fail_rate: Some(1.5), ..required() }, "chat.breaker.fail_rate: value 1.5 is out of range"),
        (BreakerConfig { fail_rate: Some(0.0), ..required() }, "chat.breaker.fail_rate: value 0 is out of range"),
        (BreakerConfig { min_calls: Some(0), ..required() }, "chat.breaker.min_calls: value 0 is out of range"),
        (BreakerConfig { window_s: Some(0.0), ..required() }, "chat.breaker.window_s: value 0 is out of range"),
        (
            BreakerConfig { max_cooldown_s: Some(30.0), ..required() },
            "chat.breaker.max_cooldown_s: value 30 is out of range (expected 60..=",
        ),
        (BreakerConfig { half_open_successes: Some(0), ..required() }, "chat.breaker.half_open_successes: value 0 is out of range"),
        (BreakerConfig { probe_ttl_s: Some(f64::INFINITY), ..required() }, "chat.breaker.probe_ttl_s: value inf is out of range"),
    ];
    for (breaker, expected) in cases {
        let message = err(&scope(breaker));
        assert!(message.starts_with(expected), "{message:?} does not start with {expected:?}");
    }
}

#[test]
fn scope_and_source_errors_are_named() {
    let mut bad_poll = scope(required());
    bad_poll.poll_interval_s = Some(400.0);
    assert!(err(&bad_poll).starts_with("chat.poll_interval_s: value 400 is out of range"));
    let mut bad_jitter = scope(required());
    bad_jitter.nap_jitter_s = Some(0.0);
    assert!(err(&bad_jitter).starts_with("chat.nap_jitter_s: value 0 is out of range"), "{}", err(&bad_jitter));
    let mut bad_backoff = scope(required());
    bad_backoff.backoff_cap_s = Some(0.1);
    assert!(err(&bad_backoff).starts_with("chat.backoff_cap_s: value 0.1 is out of range"));
    let mut bad_retries = scope(required());
    bad_retries.max_retries = Some(1000);
    assert!(err(&bad_retries).starts_with("chat.max_retries: value 1000 is out of range"));
    let mut bad_rpm = scope(required());
    bad_rpm.sources.insert("s2".into(), SourceConfig { rpm: Some(0), ..SourceConfig::default() });
    assert!(err(&bad_rpm).starts_with("chat.sources.s2.rpm: value 0 is out of range"));
    for (bytes, message) in [
        (100, "chat.sources.s2.max_stream_bytes: value 100 is out of range (expected 1024..=1099511627776 bytes)"),
        (1 << 41, "chat.sources.s2.max_stream_bytes: value 2199023255552 is out of range (expected 1024..=1099511627776 bytes)"),
    ] {
        let mut bad_stream = scope(required());
        bad_stream.sources.insert("s2".into(), SourceConfig { max_stream_bytes: Some(bytes), ..SourceConfig::default() });
        assert_eq!(err(&bad_stream), message);
    }
    let mut own_cap = scope(required());
    own_cap.sources.insert("s2".into(), SourceConfig { max_stream_bytes: Some(1 << 20), ..SourceConfig::default() });
    let resolved = own_cap.resolve("chat").unwrap();
    assert_eq!(resolved.sources.iter().find(|s| s.name == "s2").unwrap().max_stream_bytes, Some(1 << 20));
    let mut bad_name = scope(required());
    bad_name.sources.insert("s 3".into(), SourceConfig::default());
    assert!(err(&bad_name).starts_with("chat.sources.s 3: value \"s 3\" is invalid"));
    assert!(scope(required()).resolve("").unwrap_err().to_string().contains("is invalid"));
    let mut upper = scope(required());
    upper.sources.insert("OpenAI".into(), SourceConfig::default());
    assert!(err(&upper).contains("lower-case"), "{}", err(&upper));
}

#[test]
fn a_probe_lease_shorter_than_a_source_timeout_is_refused() {
    let mut config = scope(BreakerConfig { probe_ttl_s: Some(20.0), ..required() });
    config.sources.insert("s1".into(), SourceConfig { timeout_s: Some(30.0), ..SourceConfig::default() });
    assert_eq!(
        err(&config),
        "chat.breaker.probe_ttl_s: value 20 is out of range (expected at least the slowest source timeout, 30 seconds)"
    );
    config.breaker.probe_ttl_s = Some(30.0);
    assert_eq!(config.resolve("chat").unwrap().gate_params(0).unwrap().probe_ttl_ms(), 30_000);
}

#[test]
fn baseline_knobs_are_not_config_keys() {
    for key in ["rate_channel", "escalate_cooldown", "threshold_basis"] {
        let e = serde_json::from_str::<BreakerConfig>(&format!(r#"{{"{key}": false}}"#)).unwrap_err().to_string();
        assert!(e.contains(&format!("unknown field `{key}`")), "{e}");
    }
}

#[test]
fn defaults_follow_the_keys_they_depend_on() {
    let mut config = scope(required());
    config.backoff_base_s = Some(10.0);
    config.stall_window_s = Some(0.01);
    let p = config.resolve("chat").unwrap();
    assert_eq!(
        (p.backoff.cap, p.poll_interval, p.nap_jitter),
        (Duration::from_secs(10), Duration::from_millis(10), Duration::from_millis(10))
    );
}

#[test]
fn env_key_is_the_spec_form() {
    let e = scope(BreakerConfig { fail_threshold: None, ..required() }).resolve("chat").unwrap_err();
    assert_eq!(e.env_key(), "CHAT__BREAKER__FAIL_THRESHOLD");
}

#[test]
fn unknown_keys_are_refused_by_deserialization() {
    let e = serde_json::from_str::<BreakerConfig>(r#"{"fail_treshold": 5}"#).unwrap_err().to_string();
    assert!(e.contains("unknown field `fail_treshold`"), "{e}");
    let e = serde_json::from_str::<ScopeConfig>(r#"{"circuit_open": "sometimes"}"#).unwrap_err().to_string();
    assert!(e.contains("unknown variant `sometimes`"), "{e}");
}

#[test]
fn sources_of_one_key_share_an_account_unless_they_name_another() {
    let mut config = scope(required());
    let key = Some(Secret::new("sk-shared"));
    config.sources.insert("s1".into(), SourceConfig { api_key: key.clone(), ..SourceConfig::default() });
    config.sources.insert("s2".into(), SourceConfig { api_key: key.clone(), ..SourceConfig::default() });
    config.sources.insert("s3".into(), SourceConfig { api_key: key, account: Some("k9".into()), ..SourceConfig::default() });
    config.sources.insert("s4".into(), SourceConfig::default());
    let p = config.resolve("chat").unwrap();
    let accounts: Vec<&str> = p.sources.iter().map(|s| s.account.as_str()).collect();
    assert_eq!(accounts[0], accounts[1]);
    assert!(accounts[0].starts_with("key-") && accounts[0].len() == 20 && !accounts[0].contains("shared"), "{}", accounts[0]);
    assert_eq!(&accounts[2..], ["k9", "s4"]);
    config.sources.insert("s5".into(), SourceConfig { account: Some("K 1".into()), ..SourceConfig::default() });
    assert!(err(&config).starts_with("chat.sources.s5.account: value \"K 1\" is invalid"), "{}", err(&config));
}

#[test]
fn api_keys_never_reach_debug_output() {
    let source = SourceConfig { api_key: Some(Secret::new("sk-live-123")), ..SourceConfig::default() };
    let shown = format!("{:?}", source.resolve("s1", "chat.sources.s1").unwrap());
    assert!(!shown.contains("sk-live-123") && shown.contains("<redacted>"), "{shown}");
}

#[test]
fn api_keys_are_never_serialized() {
    let source = SourceConfig { api_key: Some(Secret::new("sk-live-123")), model: Some("m".into()), ..SourceConfig::default() };
    let scope = ScopeConfig { sources: BTreeMap::from([("s1".to_owned(), source.clone())]), ..ScopeConfig::default() };
    for written in [serde_json::to_string(&source).unwrap(), serde_json::to_string(&scope).unwrap()] {
        assert!(!written.contains("sk-live-123") && !written.contains("api_key"), "{written}");
        assert!(written.contains(r#""model":"m""#), "the other keys are written: {written}");
    }
}

#[test]
fn threshold_is_raised_by_the_source_concurrency_not_the_scope() {
    let mut config = scope(required());
    config.concurrency = Some(100);
    config.sources.insert("s1".into(), SourceConfig { max_concurrency: Some(16), ..SourceConfig::default() });
    config.sources.insert("s2".into(), SourceConfig { max_concurrency: Some(1), ..SourceConfig::default() });
    let p = config.resolve("chat").unwrap();
    assert_eq!(p.gate_params(0).unwrap().threshold(), 32);
    assert_eq!(p.gate_params(1).unwrap().threshold(), 5);
    assert!(p.gate_params(2).is_none());
}
