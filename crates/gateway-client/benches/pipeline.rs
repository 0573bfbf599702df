//! The pipeline's own cost: one call through `GatewayClient` (memory gates, health-aware
//! selection over 3 sources, quota limits on, telemetry to a no-op sink) against an upstream
//! that answers at once, beside calling that upstream directly; and the same call with traces
//! on (its call and attempt spans made, turned into OpenTelemetry spans by
//! `tracing-opentelemetry` and batched to an exporter that drops them: the cost of tracing
//! itself, not of a collector's network).

#![allow(missing_docs, clippy::unwrap_used)]

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use gateway_client::GatewayClient;
use gateway_core::policy::ScopeConfig;
use gateway_core::ports::{Telemetry, Upstream};
use gateway_core::request::{Attempt, Message, Request, Response, Usage};
use gateway_core::telemetry::{AttemptEvent, CallEvent};
use std::hint::black_box;
use std::sync::Arc;

struct Instant;

#[async_trait]
impl Upstream for Instant {
    async fn send(&self, _source: &str, _request: &Request) -> Attempt {
        Attempt::success(Response::chat_text("ok", Some(Usage { prompt_tokens: 3, completion_tokens: 2 })), "ok")
    }
}

struct Silent;

impl Telemetry for Silent {
    fn attempt(&self, _: &AttemptEvent) {}
    fn call(&self, _: &CallEvent) {}
}

fn pipeline(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let scope: ScopeConfig = serde_json::from_value(serde_json::json!({
        "breaker": {"fail_threshold": 5, "cooldown_s": 60},
        "sources": {
            "s1": {"max_concurrency": 64, "rpm": 100000000},
            "s2": {"max_concurrency": 64},
            "s3": {}
        }
    }))
    .unwrap();
    let upstream = Arc::new(Instant);
    let client = rt.block_on(async {
        GatewayClient::builder()
            .scope(scope.resolve("chat").unwrap())
            .upstream(upstream.clone())
            .telemetry(Arc::new(Silent))
            .seed(1)
            .build()
            .unwrap()
    });
    let request = Request::chat(vec![Message::user("hi")]);
    let mut group = c.benchmark_group("pipeline");
    group.bench_function("direct_upstream_call", |b| b.iter(|| rt.block_on(async { black_box(upstream.send("s1", &request).await) })));
    group.bench_function("gateway_client_call", |b| {
        b.iter(|| rt.block_on(async { black_box(client.call("chat", &request).await.unwrap()) }))
    });
    // Traces on: the spans go through the OpenTelemetry SDK's batch processor to a sink.
    let traced = rt.block_on(async {
        GatewayClient::builder()
            .scope(scope.resolve("chat").unwrap())
            .upstream(upstream.clone())
            .telemetry(Arc::new(Silent))
            .traces(gateway_client::Traces::default())
            .seed(1)
            .build()
            .unwrap()
    });
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().with_batch_exporter(Discard).build();
    let subscriber = {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::layer::SubscriberExt;
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench")))
    };
    tracing::subscriber::with_default(subscriber, || {
        group.bench_function("gateway_client_call_traced", |b| {
            b.iter(|| rt.block_on(async { black_box(traced.call("chat", &request).await.unwrap()) }))
        });
    });
    group.finish();
    let _ = provider.shutdown();
}

/// An exporter that drops every batch.
#[derive(Debug)]
struct Discard;

impl opentelemetry_sdk::trace::SpanExporter for Discard {
    async fn export(&self, batch: Vec<opentelemetry_sdk::trace::SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        black_box(batch);
        Ok(())
    }
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
