//! The exporter: a tracer provider that batches spans to an OTLP/HTTP collector, and the
//! `tracing` layer that feeds it.

use crate::config::TelemetryConfig;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Array, KeyValue, StringValue, Value};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider, Span, SpanData, SpanProcessor};
use std::time::Duration;

/// Why traces cannot be exported as configured.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    /// The exporter refused its settings (an endpoint variable that is not a URL, say).
    #[error("telemetry: cannot export traces: {0}")]
    Exporter(String),
}

/// The OTLP transport: the gateway's reqwest, each export run on the process's tokio runtime
/// (the SDK's batch thread has no reactor of its own).
#[derive(Debug, Clone)]
pub struct OtlpHttp {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl OtlpHttp {
    /// Exports on `runtime`, each within `timeout`.
    pub fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> Result<Self, TracesError> {
        let client = reqwest::Client::builder().timeout(timeout).build().map_err(|e| TracesError::Exporter(e.to_string()))?;
        Ok(OtlpHttp { client, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let task = self.runtime.spawn(async move {
            let response = client.execute(reqwest::Request::try_from(request)?).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            let mut out = Response::new(body);
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            Ok::<_, HttpError>(out)
        });
        task.await?
    }
}

/// The string attributes the client records comma-separated that the conventions type as
/// arrays (`gen_ai.response.finish_reasons`): made arrays before export.
const ARRAYS: [&str; 1] = ["gen_ai.response.finish_reasons"];

/// A processor that makes [`ARRAYS`] arrays, then hands the span on.
#[derive(Debug)]
struct Arrays<P>(P);

impl<P: SpanProcessor> SpanProcessor for Arrays<P> {
    fn on_start(&self, span: &mut Span, cx: &opentelemetry::Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        for attribute in &mut span.attributes {
            if ARRAYS.contains(&attribute.key.as_str())
                && let Value::String(text) = &attribute.value
            {
                let items: Vec<StringValue> = text.as_str().split(',').map(|s| StringValue::from(s.to_owned())).collect();
                *attribute = KeyValue::new(attribute.key.clone(), Value::Array(Array::String(items)));
            }
        }
        self.0.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// The tracer provider of `config`, exporting through `http`. `var` reads the process's
/// variables (`OTEL_SERVICE_NAME`). Shut it down (`shutdown`, blocking: not on a runtime
/// thread) before the runtime ends, so the last batch goes out.
pub fn provider(config: &TelemetryConfig, http: OtlpHttp, var: impl Fn(&str) -> Option<String>) -> Result<SdkTracerProvider, TracesError> {
    let mut exporter = SpanExporter::builder().with_http().with_protocol(Protocol::HttpBinary).with_http_client(http);
    if let Some(endpoint) = &config.endpoint {
        exporter = exporter.with_endpoint(endpoint.clone());
    }
    let exporter = exporter.build().map_err(|e| TracesError::Exporter(e.to_string()))?;
    let mut resource = Resource::builder();
    match (&config.service_name, var("OTEL_SERVICE_NAME")) {
        (Some(name), _) => resource = resource.with_service_name(name.clone()),
        (None, None) => resource = resource.with_service_name("llm-gateway"),
        (None, Some(_)) => {}
    }
    let batches = BatchSpanProcessor::builder(exporter).build();
    Ok(SdkTracerProvider::builder().with_resource(resource.build()).with_span_processor(Arrays(batches)).build())
}

/// The `tracing` layer that turns the client's spans into OpenTelemetry spans of `provider`.
pub fn layer<S>(provider: &SdkTracerProvider) -> tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::SdkTracer>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("gateway-server"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
}
