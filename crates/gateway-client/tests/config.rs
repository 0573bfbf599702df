//! Configuration loading: defaults ← TOML file ← environment, and every error naming the key
//! and the layer it came from.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use gateway_client::config::{ConfigError, Loader};
use gateway_core::policy::WaitMode;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Writes `toml` to a file of its own in the temp folder.
fn file(toml: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!("gateway-config-{}-{}.toml", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, toml).unwrap();
    path
}

const BASE: &str = r#"
[chat.breaker]
fail_threshold = 5
cooldown_s = 60

[chat.sources.s1]
timeout_s = 30
"#;

fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
    vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn load_err(toml: &str, vars: &[(&str, &str)]) -> ConfigError {
    let path = file(toml);
    let error = Loader::new().file(&path).env_vars(env(vars)).load().unwrap_err();
    let _ = std::fs::remove_file(&path);
    error
}

#[test]
fn the_environment_overrides_the_file_and_defaults_fill_the_rest() {
    let path = file(BASE);
    let vars =
        env(&[("CHAT__BREAKER__FAIL_THRESHOLD", "7"), ("CHAT__SOURCES__S1__RPM", "60"), ("CHAT__CIRCUIT_OPEN", "wait"), ("PATH", "/bin")]);
    let scopes = Loader::new().file(&path).env_vars(vars).load().unwrap();
    let chat = &scopes[0];
    assert_eq!(chat.breaker.fail_threshold, 7);
    assert_eq!(chat.breaker.cooldown, Duration::from_secs(60));
    assert_eq!(chat.sources[0].quota.rpm, Some(60));
    assert_eq!(chat.circuit_open, WaitMode::Wait);
    assert_eq!(chat.max_retries, 3, "built-in default");
}

#[test]
fn text_keys_keep_digits_as_text() {
    let path = file(BASE);
    let vars = env(&[("CHAT__SOURCES__S1__API_KEY", "123456"), ("CHAT__SOURCES__S1__MODEL", "4")]);
    let scopes = Loader::new().file(&path).env_vars(vars).load().unwrap();
    assert_eq!(scopes[0].sources[0].api_key.as_ref().unwrap().expose(), "123456");
    assert_eq!(scopes[0].sources[0].model.as_deref(), Some("4"));
}

#[test]
fn a_scope_may_live_in_the_environment_alone_when_named() {
    let vars = env(&[
        ("EMBEDDING__BREAKER__FAIL_THRESHOLD", "3"),
        ("EMBEDDING__BREAKER__COOLDOWN_S", "30"),
        ("EMBEDDING__SOURCES__E1__TIMEOUT_S", "20"),
    ]);
    let scopes = Loader::new().scope("embedding").env_vars(vars).load().unwrap();
    assert_eq!((scopes[0].name.as_str(), scopes[0].sources[0].name.as_str()), ("embedding", "e1"));
}

#[test]
fn a_typo_in_the_file_names_the_key_and_the_file() {
    let e = load_err(&BASE.replace("cooldown_s = 60", "cooldown_s = 60\nfail_treshold = 3"), &[]);
    assert_eq!(e.key, "chat.breaker.fail_treshold");
    assert!(e.layer.starts_with("TOML file ") && e.layer.ends_with(".toml"), "{e}");
    assert_eq!(e.message, "unknown key \"fail_treshold\"");
}

#[test]
fn a_typo_in_the_environment_names_the_variable() {
    let e = load_err(BASE, &[("CHAT__BREAKER__FAIL_TRESHOLD", "3")]);
    assert_eq!(e.to_string(), "CHAT__BREAKER__FAIL_TRESHOLD (environment): unknown key \"fail_treshold\"");
}

#[test]
fn a_missing_required_key_is_named() {
    let e = load_err(&BASE.replace("cooldown_s = 60", ""), &[]);
    assert_eq!(e.to_string(), "chat.breaker.cooldown_s (no layer sets it): required key is missing");
}

#[test]
fn an_out_of_range_value_names_the_key_its_layer_and_the_value() {
    let e = load_err(BASE, &[("CHAT__BREAKER__FAIL_RATE", "1.5")]);
    assert!(e.to_string().starts_with("CHAT__BREAKER__FAIL_RATE (environment): value 1.5 is out of range"), "{e}");
    let e = load_err(&BASE.replace("timeout_s = 30", "timeout_s = -1"), &[]);
    assert_eq!(e.key, "chat.sources.s1.timeout_s");
    assert!(e.layer.starts_with("TOML file "), "{e}");
    assert!(e.message.starts_with("value -1 is out of range"), "{e}");
}

#[test]
fn a_value_of_the_wrong_type_or_variant_is_named() {
    let e = load_err(BASE, &[("CHAT__MAX_RETRIES", "lots")]);
    assert_eq!(e.key, "CHAT__MAX_RETRIES");
    assert!(e.message.starts_with("invalid type"), "{e}");
    let e = load_err(BASE, &[("CHAT__CIRCUIT_OPEN", "sometimes")]);
    assert_eq!(e.to_string(), "CHAT__CIRCUIT_OPEN (environment): unknown value \"sometimes\" (expected one of wait, fail_fast)");
}

#[test]
fn a_missing_file_and_a_malformed_variable_are_errors() {
    let e = Loader::new().file("/nonexistent/gateway.toml").env_vars(Vec::new()).load().unwrap_err();
    assert_eq!(e.to_string(), "/nonexistent/gateway.toml (TOML file): file not found");
    let e = load_err(BASE, &[("CHAT__BREAKER____COOLDOWN_S", "3")]);
    assert_eq!(e.key, "CHAT__BREAKER____COOLDOWN_S");
    let e = load_err("not = [valid", &[]);
    assert!(e.layer.starts_with("TOML file") && e.message.starts_with("not valid TOML"), "{e}");
}

#[test]
fn the_example_configuration_loads() {
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/gateway.toml");
    let scopes = Loader::new().file(&example).env_vars(Vec::new()).load().unwrap();
    let names: Vec<&str> = scopes.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["chat", "embedding"]);
    assert_eq!(scopes[1].circuit_open, WaitMode::Wait);
    assert!(!format!("{scopes:?}").contains("sk-replace-me"), "keys never reach Debug");
}

#[test]
fn tenant_isolation_keys_load_from_file_and_environment() {
    let path = file(&BASE.replace("[chat.breaker]", "[chat]\nmax_tenants = 50\n\n[chat.breaker]"));
    let vars = env(&[("CHAT__ISOLATION", "per_tenant"), ("CHAT__TENANT_IDLE_S", "120")]);
    let chat = Loader::new().file(&path).env_vars(vars).load().unwrap().remove(0);
    assert_eq!(chat.isolation, gateway_core::policy::Isolation::PerTenant);
    assert_eq!((chat.max_tenants, chat.tenant_idle), (50, Duration::from_secs(120)));
    let defaults = Loader::new().file(&path).env_vars(Vec::new()).load().unwrap().remove(0);
    assert_eq!((defaults.isolation, defaults.tenant_idle), (gateway_core::policy::Isolation::Shared, Duration::from_secs(600)));
    let e = load_err(BASE, &[("CHAT__ISOLATION", "per_user")]);
    assert_eq!(e.to_string(), "CHAT__ISOLATION (environment): unknown value \"per_user\" (expected one of shared, per_tenant)");
    let e = load_err(BASE, &[("CHAT__MAX_TENANTS", "0")]);
    assert!(e.to_string().starts_with("CHAT__MAX_TENANTS (environment): value 0 is out of range"), "{e}");
}

#[test]
fn slow_call_and_sla_keys_load_and_their_errors_are_named() {
    let path = file(BASE);
    let vars =
        env(&[("CHAT__BREAKER__SLOW_CALL_S", "20"), ("CHAT__BREAKER__SLA_ADAPTIVE", "true"), ("CHAT__BREAKER__SLA_MIN_COOLDOWN_S", "30")]);
    let chat = Loader::new().file(&path).env_vars(vars).load().unwrap().remove(0);
    assert_eq!((chat.breaker.slow_call, chat.breaker.slow_rate), (Some(Duration::from_secs(20)), 0.5));
    assert_eq!(chat.breaker.sla_cooldown, Some((Duration::from_secs(30), Duration::from_secs(300))));
    let e = load_err(BASE, &[("CHAT__BREAKER__SLA_ADAPTIVE", "true"), ("CHAT__BREAKER__SLA_MAX_COOLDOWN_S", "400")]);
    assert!(e.to_string().starts_with("CHAT__BREAKER__SLA_MAX_COOLDOWN_S (environment): value 400 is out of range"), "{e}");
    let e = load_err(BASE, &[("CHAT__BREAKER__SLOW_RATE", "0")]);
    assert!(e.to_string().starts_with("CHAT__BREAKER__SLOW_RATE (environment): value 0 is out of range"), "{e}");
    let e = load_err(BASE, &[("CHAT__BREAKER__SLOW_CALL_S", "-1")]);
    assert_eq!(e.key, "CHAT__BREAKER__SLOW_CALL_S");
}

const TIERED: &str = r#"
[chat]
isolation = "per_tenant"

[chat.breaker]
fail_threshold = 5
cooldown_s = 60

[chat.tiers.gold.breaker]
fail_rate = 0.05
cooldown_s = 30

[chat.tiers.bronze.breaker]
fail_rate = 0.15
cooldown_s = 120

[chat.tenants]
acme = "gold"

[chat.sources.s1]
timeout_s = 30
"#;

#[test]
fn tiers_overlay_the_scope_breaker_and_tenants_map_to_them_from_file_and_environment() {
    let path = file(TIERED);
    let vars =
        env(&[("CHAT__TENANTS__INITECH", "bronze"), ("CHAT__TIERS__GOLD__BREAKER__MIN_CALLS", "20"), ("CHAT__UNKNOWN_TENANT", "reject")]);
    let chat = Loader::new().file(&path).env_vars(vars).load().unwrap().remove(0);
    let gold = &chat.tiers["gold"];
    assert_eq!((gold.fail_rate, gold.cooldown, gold.min_calls, gold.fail_threshold), (0.05, Duration::from_secs(30), 20, 5));
    assert_eq!((chat.tiers["bronze"].fail_rate, chat.tiers["bronze"].cooldown), (0.15, Duration::from_secs(120)));
    assert_eq!(chat.tenant_tiers.get("initech").map(String::as_str), Some("bronze"));
    assert_eq!(chat.unknown_tenant, gateway_core::policy::UnknownTenant::Reject);
    assert_eq!(chat.breaker.fail_rate, 0.6, "the scope's own breaker is untouched");
}

#[test]
fn tier_errors_name_the_key() {
    let e = load_err(TIERED, &[("CHAT__TENANTS__INITECH", "platinum")]);
    assert_eq!(e.to_string(), "CHAT__TENANTS__INITECH (environment): value \"platinum\" is invalid (no such tier (tiers: bronze, gold))");
    let e = load_err(TIERED, &[("CHAT__TIERS__GOLD__BREAKER__FAIL_RATE", "2")]);
    assert!(e.to_string().starts_with("CHAT__TIERS__GOLD__BREAKER__FAIL_RATE (environment): value 2 is out of range"), "{e}");
    let e = load_err(&TIERED.replace("isolation = \"per_tenant\"", ""), &[]);
    assert_eq!(e.key, "chat.tiers");
    assert!(e.message.contains("set isolation = \"per_tenant\""), "{e}");
    let e = load_err(&TIERED.replace("[chat.tiers.gold.breaker]", "[chat.tiers.gold.breakers]"), &[]);
    assert!(e.to_string().starts_with("chat.tiers.gold.breakers (TOML file "), "{e}");
    assert!(e.to_string().ends_with("unknown key \"breakers\""), "{e}");
}

#[test]
fn a_secret_of_the_wrong_type_is_named_but_never_shown() {
    for (line, key) in [
        ("api_key = 9876543210123", "chat.sources.s1.api_key"),
        ("headers = { authorization = 4242424242 }", "chat.sources.s1.headers.authorization"),
    ] {
        let e = load_err(&format!("{BASE}{line}\n"), &[]);
        assert_eq!(e.key, key, "{e}");
        assert!(e.message.contains("the value is not shown"), "{e}");
        let shown = e.to_string();
        assert!(!shown.contains("9876543210123") && !shown.contains("4242424242"), "{shown}");
    }
}

#[test]
fn a_toml_syntax_error_names_the_line_without_quoting_it() {
    let e = load_err(&format!("{BASE}api_key = \"sk-live-secret-\\q\"\n"), &[]);
    assert!(e.message.starts_with("not valid TOML: TOML parse error at line"), "{e}");
    assert!(!e.to_string().contains("sk-live-secret"), "{e}");
}

#[test]
fn kinds_take_a_list_or_one_kind_from_either_layer() {
    let path = file(&format!("{BASE}\n"));
    let scopes = Loader::new().file(&path).env_vars(env(&[("CHAT__KINDS", "embeddings")])).load().unwrap();
    assert_eq!(scopes[0].kinds, [gateway_core::request::Kind::Embeddings]);
    let both = [gateway_core::request::Kind::Chat, gateway_core::request::Kind::Embeddings];
    let scopes = Loader::new().file(&path).env_vars(env(&[("CHAT__KINDS", "[embeddings, chat]")])).load().unwrap();
    assert_eq!(scopes[0].kinds, both);
    let path = file(&BASE.replace("[chat.breaker]", "[chat]\nkinds = [\"embeddings\", \"chat\"]\n[chat.breaker]"));
    assert_eq!(Loader::new().file(&path).env_vars(env(&[])).load().unwrap()[0].kinds, both);
    assert_eq!(
        Loader::new().file(file(&format!("{BASE}\n"))).env_vars(env(&[])).load().unwrap()[0].kinds,
        gateway_core::request::Kind::ALL,
        "every kind by default"
    );
    let e = load_err(&BASE.replace("[chat.breaker]", "[chat]\nkinds = [\"pictures\"]\n[chat.breaker]"), &[]);
    assert!(e.key.starts_with("chat.kinds"), "{e}");
    assert!(e.message.contains("\"pictures\"") && e.message.contains("chat, embeddings, responses"), "{e}");
}

/// A scope whose tier is named by a digit, the tenant's tier given by `tenants`.
fn tier_one(tenants: &str) -> String {
    format!("[chat]\nisolation = \"per_tenant\"\n\n[chat.tiers.1.breaker]\ncooldown_s = 30\n\n{tenants}\n{BASE}")
}

#[test]
fn a_text_key_reads_an_environment_value_as_the_file_would_whatever_it_looks_like() {
    let from_file = file(&format!("{}\naccount = \"42\"\n", tier_one("[chat.tenants]\nacme = \"1\"\n")));
    let from_env = file(&tier_one(""));
    let vars = env(&[("CHAT__TENANTS__ACME", "1"), ("CHAT__SOURCES__S1__ACCOUNT", "42"), ("CHAT__BREAKER__FAIL_THRESHOLD", "5")]);
    let expected = Loader::new().file(&from_file).env_vars(Vec::new()).load().unwrap();
    let loaded = Loader::new().file(&from_env).env_vars(vars).load().unwrap();
    assert_eq!(loaded, expected);
    assert_eq!(loaded[0].tenant_tiers.get("acme").map(String::as_str), Some("1"));
    assert_eq!((loaded[0].sources[0].account.as_str(), loaded[0].breaker.fail_threshold), ("42", 5));
}

#[test]
fn a_bad_environment_value_names_the_variable_and_what_its_key_takes() {
    let e = load_err(BASE, &[("CHAT__BREAKER__FAIL_THRESHOLD", "five")]);
    assert_eq!(e.to_string(), "CHAT__BREAKER__FAIL_THRESHOLD (environment): invalid type: string \"five\", expected u32");
    // the number is refused as a number, not as the text it was read from
    let e = load_err(BASE, &[("CHAT__BREAKER__FAIL_THRESHOLD", "2.5")]);
    assert_eq!(e.to_string(), "CHAT__BREAKER__FAIL_THRESHOLD (environment): invalid type: float `2.5`, expected u32");
    let e = load_err(BASE, &[("CHAT__BREAKER__SLA_ADAPTIVE", "1")]);
    assert_eq!(e.to_string(), "CHAT__BREAKER__SLA_ADAPTIVE (environment): invalid type: unsigned int `1`, expected a boolean");
    let e = load_err(BASE, &[("CHAT__TENANTS", "5")]);
    assert_eq!(e.key, "CHAT__TENANTS", "{e}");
    assert!(e.message.starts_with("invalid type: unsigned int `5`, expected a map"), "{e}");
    // a refusal of the text itself is the text's: the kinds are named
    let e = load_err(BASE, &[("CHAT__KINDS", "1")]);
    assert_eq!(
        e.to_string(),
        "CHAT__KINDS (environment): unknown value \"1\" (expected one of chat, embeddings, responses, completions, moderations, images, image_edits, transcriptions, translations, speech, files, batches, messages, count_tokens)"
    );
    let e = load_err(BASE, &[("CHAT__SOURCES__S1__HEADERS", "4242424242")]);
    assert_eq!(e.key, "CHAT__SOURCES__S1__HEADERS", "{e}");
    assert!(e.message.contains("the value is not shown") && !e.to_string().contains("4242424242"), "{e}");
}

#[test]
fn the_file_keeps_its_types() {
    let e = load_err(&BASE.replace("fail_threshold = 5", "fail_threshold = \"5\""), &[]);
    assert_eq!(e.key, "chat.breaker.fail_threshold", "{e}");
    assert_eq!(e.message, "invalid type: string \"5\", expected u32", "{e}");
}
