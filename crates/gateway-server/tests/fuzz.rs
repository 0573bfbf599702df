//! A fuzz test of the OpenAI and Anthropic body parsers, through the router (no sockets, an upstream that
//! answers everything): arbitrary JSON values, arbitrary bytes and valid bodies with one field
//! replaced by an arbitrary value, 10 240 cases in all. Every answer is a 2xx, or a 4xx whose
//! error names the field at fault; never a 5xx, never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use axum::body::Body;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use tower::ServiceExt;

const ROUTES: [&str; 4] = ["/v1/chat/completions", "/v1/embeddings", "/v1/messages", "/v1/messages/count_tokens"];

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "chat",
            "dead",
            "user",
            "system",
            "assistant",
            "tool",
            "json_schema",
            "json_object",
            "text",
            "base64",
            "float"
        ])
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((field_name(), inner), 0..6).prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Field names the parser knows, and others.
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "model",
            "messages",
            "role",
            "content",
            "type",
            "text",
            "input",
            "stream",
            "stream_options",
            "include_usage",
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "response_format",
            "json_schema",
            "schema",
            "encoding_format",
            "$ref",
            "allOf",
            "properties",
        ])
        .prop_map(str::to_owned),
        "[a-z_]{1,8}",
    ]
}

/// A valid body of `route` with one top-level field set to `value` (or added, for a new name).
fn mutated(route: &str, name: String, value: Value) -> Value {
    let mut body = if route.ends_with("embeddings") {
        json!({"model": "chat", "input": ["a", "b"], "encoding_format": "float"})
    } else if route.starts_with("/v1/messages") {
        json!({"model": "chat", "system": "be brief", "max_tokens": 16, "stream": false,
               "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
    } else {
        json!({"model": "chat", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
               "stream": false, "temperature": 0.2, "max_tokens": 16,
               "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}}})
    };
    body[name] = value;
    body
}

/// The one property every answer must have (an Anthropic route's error in Anthropic's shape,
/// which has no `param`: its message names the field).
fn check(route: &str, status: u16, body: &[u8]) -> Result<(), TestCaseError> {
    prop_assert!(status < 500, "a {} answer: {}", status, String::from_utf8_lossy(body));
    if (400..500).contains(&status) {
        let value: Value = serde_json::from_slice(body).map_err(|e| TestCaseError::fail(format!("{status} not JSON: {e}")))?;
        if route.starts_with("/v1/messages") {
            prop_assert_eq!(value.get("type").and_then(Value::as_str), Some("error"), "{}", value);
            let named = value.pointer("/error/message").and_then(Value::as_str).and_then(|m| m.split(':').next());
            prop_assert!(named.is_some_and(|n| !n.is_empty() && !n.contains(' ')), "a {} that names no field: {}", status, value);
        } else {
            let param = value.pointer("/error/param").and_then(Value::as_str);
            prop_assert!(param.is_some_and(|p| !p.is_empty()), "a {} that names no field: {}", status, value);
        }
    }
    Ok(())
}

struct Proxy {
    runtime: tokio::runtime::Runtime,
    state: Arc<gateway_server::AppState>,
}

impl Proxy {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let state = runtime.block_on(async { support::answering_state("", "") });
        Proxy { runtime, state }
    }

    fn answer(&self, route: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        let request = axum::http::Request::post(route)
            .header("authorization", format!("Bearer {}", support::KEY))
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        self.runtime.block_on(async {
            let response = gateway_server::router(self.state.clone()).oneshot(request).await.unwrap();
            let status = response.status().as_u16();
            let bytes = axum::body::to_bytes(response.into_body(), 16 << 20).await.unwrap();
            (status, bytes.to_vec())
        })
    }
}

/// A seeded runner: the same cases on every run, so a failure is repeatable.
fn runner(cases: u32) -> TestRunner {
    TestRunner::new_with_rng(
        Config { cases, failure_persistence: None, ..Config::default() },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    )
}

#[test]
fn arbitrary_json_bodies_get_a_2xx_or_a_4xx_naming_the_field() {
    let proxy = Proxy::new();
    runner(3072)
        .run(&(prop::sample::select(ROUTES.to_vec()), any_json()), |(route, body)| {
            let (status, answer) = proxy.answer(route, body.to_string().into_bytes());
            check(route, status, &answer)
        })
        .unwrap();
}

#[test]
fn arbitrary_bytes_get_a_4xx_naming_the_body() {
    let proxy = Proxy::new();
    runner(2048)
        .run(&(prop::sample::select(ROUTES.to_vec()), prop::collection::vec(any::<u8>(), 0..512)), |(route, bytes)| {
            let (status, answer) = proxy.answer(route, bytes);
            check(route, status, &answer)
        })
        .unwrap();
}

#[test]
fn valid_bodies_with_one_field_replaced_get_a_2xx_or_a_4xx_naming_the_field() {
    let proxy = Proxy::new();
    runner(5120)
        .run(&(prop::sample::select(ROUTES.to_vec()), field_name(), any_json()), |(route, name, value)| {
            let (status, answer) = proxy.answer(route, mutated(route, name, value).to_string().into_bytes());
            check(route, status, &answer)
        })
        .unwrap();
}
