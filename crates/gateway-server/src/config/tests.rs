//! The `[server]` and `[backend]` tables as loaded: defaults, variables, and each check naming its key.

use super::*;

const SCOPE: &str = "[chat.breaker]\nfail_threshold = 5\ncooldown_s = 60\n[chat.sources.s1]\n";

/// Loads `text` and a scope from a file of its own (tests run in parallel).
fn load_file(text: &str, vars: &[(&str, &str)]) -> Result<(ServerConfig, BackendConfig, Vec<ScopePolicy>), ConfigError> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("gateway-server-config-{}-{n}.toml", std::process::id()));
    std::fs::write(&path, format!("{text}\n{SCOPE}")).unwrap();
    let loaded = load_all_with(&path, vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    let _ = std::fs::remove_file(&path);
    loaded
}

fn load_text(text: &str, vars: &[(&str, &str)]) -> Result<ServerConfig, ConfigError> {
    load_file(text, vars).map(|(server, _, _)| server)
}

#[test]
fn server_variables_load_as_the_file_would_for_each_key() {
    let digits = "1234567890123456789";
    let vars = [("SERVER__METRICS_KEY", digits), ("SERVER__MAX_BODY_BYTES", "2048"), ("SERVER__API_KEYS__OPS__TENANT", "7")];
    let server = load_text("[server.api_keys.ops]\nkey = \"gw-secret-value-0123456789\"", &vars).unwrap();
    assert_eq!((server.metrics_key.as_deref(), server.max_body_bytes), (Some(digits), 2048));
    assert_eq!(server.api_keys["ops"].tenant.as_deref(), Some("7"));
    let from_file = load_text(
        &format!(
            "[server]\nmetrics_key = \"{digits}\"\nmax_body_bytes = 2048\n[server.api_keys.ops]\nkey = \"gw-secret-value-0123456789\"\ntenant = \"7\""
        ),
        &[],
    )
    .unwrap();
    assert_eq!(server, from_file);
}

fn load_backend(text: &str, vars: &[(&str, &str)]) -> Result<BackendConfig, ConfigError> {
    load_file(text, vars).map(|(_, backend, _)| backend)
}

#[test]
fn the_backend_table_says_what_happens_while_redis_cannot_answer() {
    use gateway_memory::backstop::OnUnavailable;
    assert_eq!(load_backend("", &[]).unwrap(), BackendConfig::default());
    assert_eq!(BackendConfig::default().on_unavailable, OnUnavailable::FailClosed);
    let local = load_backend("[backend]\nredis_url = \"redis://127.0.0.1:6379\"\non_unavailable = \"local\"", &[]).unwrap();
    assert_eq!((local.on_unavailable, local.redis_url.as_deref()), (OnUnavailable::Local, Some("redis://127.0.0.1:6379")));
    let from_env = load_backend("", &[("BACKEND__ON_UNAVAILABLE", "local"), ("BACKEND__COMMAND_TIMEOUT_MS", "400")]).unwrap();
    assert_eq!((from_env.on_unavailable, from_env.command_timeout_ms), (OnUnavailable::Local, 400));
    let older = load_backend("[server]\nredis_url = \"redis://10.0.0.1:6379\"", &[]).unwrap();
    assert_eq!(older.redis_url.as_deref(), Some("redis://10.0.0.1:6379"), "server.redis_url is still read");
}

#[test]
fn a_bad_backend_value_is_named() {
    let e = load_backend("[backend]\non_unavailable = \"open\"", &[]).unwrap_err().to_string();
    assert!(e.contains("backend.on_unavailable") && e.contains("fail_closed") && e.contains("local"), "{e}");
    let e = load_backend("[backend]\ncommand_timeout_ms = 0", &[]).unwrap_err().to_string();
    assert_eq!(e, "backend.command_timeout_ms: value 0 is out of range (expected 1 to 60000)");
    assert!(matches!(load_backend("[backend]\ncommand_timeout_ms = 60001", &[]), Err(ConfigError::CommandTimeout { value: 60_001 })));
    let e =
        load_backend("[server]\nredis_url = \"redis://a:6379\"\n[backend]\nredis_url = \"redis://b:6379\"", &[]).unwrap_err().to_string();
    assert_eq!(e, "backend.redis_url: also set as server.redis_url (its older place); keep one");
    assert!(!e.contains("redis://"), "the URL is a secret");
    assert!(matches!(
        load_backend("[server]\nredis_url = \"redis://a:6379\"\n[backend]\nredis_url = \"redis://c:6379\"", &[]),
        Err(ConfigError::RedisUrlTwice)
    ));
    let e = load_backend("", &[("BACKEND__ON_UNAVAILBLE", "local")]).unwrap_err().to_string();
    assert_eq!(e, "BACKEND__ON_UNAVAILBLE (environment): unknown key \"on_unavailble\"");
}

#[test]
fn each_check_of_the_server_table_names_its_key() {
    let key = "gw-secret-value-0123456789";
    let cases: &[(&str, &str)] = &[
        ("[server]\nmax_body_bytes = 0", "server.max_body_bytes: value 0 is out of range (expected at least 1)"),
        ("[server]\nmax_connections = 0", "server.max_connections: value 0 is out of range (expected at least 1)"),
        ("[server]\nmax_response_bytes = 0", "server.max_response_bytes: value 0 is out of range (expected at least 1)"),
        ("[server]\nmax_stream_bytes = 0", "server.max_stream_bytes: value 0 is out of range (expected at least 1)"),
        ("[server]\nmax_held_bytes = 0", "server.max_held_bytes: value 0 is out of range (expected at least 1)"),
        ("[server]\nmax_stream_bytes_per_s = 0", "server.max_stream_bytes_per_s: value 0 is out of range (expected at least 1)"),
        ("[server]\nidle_timeout_s = 90000.5", "server.idle_timeout_s: value 90000.5 is out of range (expected 0 < seconds <= 86400)"),
        ("[server]\nmetrics_key = \"short\"", "server.metrics_key: a metrics key has at least 16 characters"),
        ("[server]\nadmin_key = \"short\"", "server.admin_key: an admin key has at least 16 characters"),
        (
            &format!("[server.api_keys.ops]\nkey = \"{key}\"\nmax_tenants = 0"),
            "server.api_keys.ops.max_tenants: value 0 is out of range (expected at least 1)",
        ),
        (
            &format!("[server.api_keys.ops]\nkey = \"{key}\"\ntenant = \"acme\"\nmax_tenants = 2"),
            "server.api_keys.ops.max_tenants: a key bound to a tenant names no other; set it on unbound keys only",
        ),
    ];
    for (text, message) in cases {
        assert_eq!(load_text(text, &[]).unwrap_err().to_string(), *message, "{text}");
    }
    let e = load_text("[server]\nmax_schema_bytes = 0", &[]).unwrap_err();
    assert!(matches!(e, ConfigError::Zero { key: "max_schema_bytes" }), "{e:?}");
    let e = load_text(&format!("[server.api_keys.ops]\nkey = \"{key}\"\ntenant = \"a b\""), &[]).unwrap_err();
    assert!(matches!(&e, ConfigError::InvalidTenant { name, shown, .. } if name == "ops" && shown == "a b"), "{e:?}");
    assert!(!e.to_string().contains(key), "the key is a secret: {e}");
}

#[test]
fn a_missing_file_or_a_bad_scope_is_named_as_the_scopes_loader_names_it() {
    let missing = std::env::temp_dir().join(format!("gateway-server-no-such-file-{}.toml", std::process::id()));
    let e = load_with(&missing, Vec::new()).unwrap_err();
    assert!(matches!(e, ConfigError::Scopes(_)), "{e:?}");
    assert_eq!(e.to_string(), format!("{} (TOML file): file not found", missing.display()));
    let e = load_text("[chat.sources.s1.nope]\nx = 1", &[]).unwrap_err();
    assert!(matches!(e, ConfigError::Scopes(_)) && e.to_string().starts_with("chat.sources.s1.nope (TOML file "), "{e:?}");
    let e = load_text("", &[("SERVER____LISTEN", "x")]).unwrap_err();
    assert!(matches!(e, ConfigError::Environment(_)), "{e:?}");
    let e = load_text("", &[("SERVER__LISEN", "x")]).unwrap_err();
    assert!(matches!(e, ConfigError::Table(_)), "{e:?}");
}

#[test]
fn a_bad_server_variable_is_named_and_a_secret_never_shown() {
    let e = load_text("", &[("SERVER__MAX_BODY_BYTES", "big")]).unwrap_err().to_string();
    assert_eq!(e, "SERVER__MAX_BODY_BYTES (environment): invalid type: string \"big\", expected usize");
    let e = load_text("", &[("SERVER__LISEN", "x")]).unwrap_err().to_string();
    assert_eq!(e, "SERVER__LISEN (environment): unknown key \"lisen\"");
    let e = load_text("", &[("SERVER__API_KEYS__OPS", "4242424242424242")]).unwrap_err().to_string();
    assert!(e.starts_with("SERVER__API_KEYS__OPS (environment): invalid type (the value is not shown)") && !e.contains("4242"), "{e}");
    let e = load_text("", &[("SERVER____LISTEN", "x")]).unwrap_err().to_string();
    assert!(e.starts_with("SERVER____LISTEN (environment): empty key part"), "{e}");
}

#[test]
fn the_telemetry_table_is_read_checked_and_off_by_default() {
    // The file's own scope comes after (load_file adds it).
    let scope = "";
    let (server, _, scopes) = load_file(scope, &[]).unwrap();
    assert_eq!((server.telemetry.clone(), scopes.len()), (TelemetryConfig::default(), 1), "[telemetry] is not a scope");
    assert!(!server.telemetry.traces_on(|_| None), "off by default");
    assert!(
        server.telemetry.traces_on(|v| (v == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://c:4318".to_owned())),
        "on with the standard variable"
    );
    let text = format!(
        "[telemetry]\ntraces = false\nendpoint = \"https://collector:4318/v1/traces\"\nservice_name = \"gw\"\nrecord_contents = true\n{scope}"
    );
    let server = load_text(&text, &[]).unwrap();
    assert!(!server.telemetry.traces_on(|_| Some("http://c:4318".to_owned())), "traces = false wins over the variables");
    assert_eq!((server.telemetry.endpoint.as_deref(), server.telemetry.record_contents), (Some("https://collector:4318/v1/traces"), true));
    let server = load_text(scope, &[("TELEMETRY__TRACES", "true")]).unwrap();
    assert_eq!(server.telemetry.traces, Some(true), "TELEMETRY__* variables");
    for (table, message) in [
        (
            "[telemetry]\nendpoint = \"collector:4318\"",
            "telemetry.endpoint: \"collector:4318\" is not an http:// or https:// URL (e.g. http://collector:4318/v1/traces)",
        ),
        ("[telemetry]\nservice_name = \" \"", "telemetry.service_name: may not be empty"),
    ] {
        assert_eq!(load_text(&format!("{table}\n{scope}"), &[]).unwrap_err().to_string(), message, "{table}");
    }
    let e = load_text(&format!("[telemetry]\nsampler = \"always\"\n{scope}"), &[]).unwrap_err();
    assert!(matches!(e, ConfigError::Table(_)) && e.to_string().contains("telemetry.sampler"), "{e}");
}
