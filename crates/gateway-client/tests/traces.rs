//! The calls' spans as a library makes them (`GatewayClientBuilder::traces`), read by a
//! `tracing` layer that records them: a call is one CLIENT span `{kind} {scope}` holding its
//! attempts (`attempt {source}`, each with its outcome) and its waits (`wait quota`, `wait
//! gate`, `wait turn`, `wait backoff`), and a failed call names its `error.type`. Without
//! `traces`, no span is made.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use gateway_client::{GatewayClient, Traces};
use gateway_core::outcome::OutcomeClass::Transient;
use gateway_mock::{ScriptedUpstream, Step};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{chat, sources};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span as recorded: its fields (as text) and its parent's `otel.name`.
#[derive(Clone, Debug, Default)]
struct Recorded {
    fields: BTreeMap<String, String>,
    parent: Option<String>,
}

impl Recorded {
    fn name(&self) -> &str {
        self.fields.get("otel.name").map_or("", String::as_str)
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Recorded>>>);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut recorded = Recorded::default();
        attrs.record(&mut Fields(&mut recorded.fields));
        let span = ctx.span(id).unwrap();
        recorded.parent = span.parent().and_then(|p| p.extensions().get::<Recorded>().map(|r| r.name().to_owned()));
        span.extensions_mut().insert(recorded);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        if let Some(recorded) = span.extensions_mut().get_mut::<Recorded>() {
            values.record(&mut Fields(&mut recorded.fields));
        }
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(recorded) = ctx.span(&id).unwrap().extensions().get::<Recorded>() {
            self.0.lock().unwrap().push(recorded.clone());
        }
    }
}

fn client(traced: bool, policy: gateway_core::policy::ScopePolicy, upstream: Arc<ScriptedUpstream>) -> GatewayClient {
    let mut builder = GatewayClient::builder().scope(policy).upstream(upstream).seed(5);
    if traced {
        builder = builder.traces(Traces::default());
    }
    builder.build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_call_is_one_client_span_holding_its_attempts_and_waits() {
    let spans = Spans::default();
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    // One source, one call at a time: the second call waits for the quota; a transient
    // failure makes a call back off and try again.
    let upstream = ScriptedUpstream::new();
    upstream.plan("s1", |n| (if n == 1 { Step::Fail(Transient) } else { Step::Ok }, Duration::from_millis(200)));
    let client = Arc::new(client(true, sources(1, json!({"sources": {"s1": {"max_concurrency": 1}}})), upstream.clone()));
    let (a, b) = (client.clone(), client.clone());
    let (first, second) = tokio::join!(async move { a.call("chat", &chat()).await }, async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        b.call("chat", &chat()).await
    });
    first.unwrap();
    second.unwrap();
    let all = spans.0.lock().unwrap().clone();
    let calls: Vec<&Recorded> = all.iter().filter(|s| s.name() == "chat chat").collect();
    assert_eq!(calls.len(), 2, "{all:#?}");
    for call in &calls {
        assert_eq!(call.fields["otel.kind"], "client", "a library's call is a CLIENT span");
        assert_eq!((call.fields["gateway.result"].as_str(), call.fields["otel.status_code"].as_str()), ("ok", "ok"));
        assert_eq!(call.fields["gen_ai.operation.name"], "chat");
        assert_eq!(call.parent, None);
    }
    let attempts: Vec<&Recorded> = all.iter().filter(|s| s.name() == "attempt s1").collect();
    assert_eq!(attempts.len(), 3, "one failed, two succeeded");
    assert!(attempts.iter().all(|a| a.parent.as_deref() == Some("chat chat")), "attempts are the calls' children");
    let outcomes: Vec<&str> = attempts.iter().map(|a| a.fields["gateway.outcome"].as_str()).collect();
    assert_eq!(outcomes.iter().filter(|o| **o == "transient").count(), 1, "{outcomes:?}");
    let failed = attempts.iter().find(|a| a.fields["gateway.outcome"] == "transient").unwrap();
    assert_eq!(
        (failed.fields["error.type"].as_str(), failed.fields["gateway.outcome.detail"].as_str()),
        ("transient", "scripted_transient")
    );
    let waits: Vec<&str> = all.iter().filter(|s| s.name().starts_with("wait ")).map(|s| s.fields["gateway.wait.for"].as_str()).collect();
    assert!(waits.contains(&"quota") || waits.contains(&"turn"), "the second call waited for the quota: {waits:?}");
    assert!(waits.contains(&"backoff"), "the failed call backed off: {waits:?}");
    assert!(all.iter().filter(|s| s.name().starts_with("wait ")).all(|s| s.parent.as_deref() == Some("chat chat")));
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_names_its_error_type_and_waits_for_a_gate() {
    let spans = Spans::default();
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let upstream = ScriptedUpstream::new();
    upstream.always("s1", Step::Fail(gateway_core::outcome::OutcomeClass::SourceDead));
    let policy = sources(1, json!({"breaker": {"fail_threshold": 5, "cooldown_s": 1}, "stall_window_s": 3}));
    let dead = client(true, policy, upstream);
    assert!(dead.call("chat", &chat()).await.is_err());
    let all = spans.0.lock().unwrap().clone();
    let call = all.iter().find(|s| s.name() == "chat chat").unwrap();
    assert_eq!((call.fields["error.type"].as_str(), call.fields["otel.status_code"].as_str()), ("source_dead", "error"), "{call:?}");
    // A source dead once, then back: the call waits for its gate's retry moment, then probes.
    let upstream = ScriptedUpstream::new();
    upstream.script("s1", vec![Step::Fail(gateway_core::outcome::OutcomeClass::SourceDead)]);
    let policy = sources(1, json!({"breaker": {"fail_threshold": 5, "cooldown_s": 1}, "stall_window_s": 30, "circuit_open": "wait"}));
    client(true, policy, upstream).call("chat", &chat()).await.unwrap();
    let all = spans.0.lock().unwrap().clone();
    assert!(
        all.iter().any(|s| s.fields.get("gateway.wait.for").map(String::as_str) == Some("gate")),
        "it waited for the open gate: {all:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn without_traces_no_span_is_made() {
    let spans = Spans::default();
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let client = client(false, sources(2, json!({})), ScriptedUpstream::new());
    client.call("chat", &chat()).await.unwrap();
    assert!(spans.0.lock().unwrap().is_empty());
}
