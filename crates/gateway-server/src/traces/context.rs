//! The caller's trace context: a request's W3C `traceparent` (and `tracestate`) is kept for
//! the whole of its handling — the handler and, for a stream, its body, where the call goes on
//! — so that the call's span continues the caller's trace (traces on), and each attempt is sent
//! with the right `traceparent`: its own span's (traces on) or the caller's as it came (off).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http_body::Frame;
use opentelemetry::context::FutureExt as _;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The trace context a request came with.
#[derive(Clone)]
struct Caller {
    traceparent: HeaderValue,
    tracestate: Option<HeaderValue>,
    /// The parent of the call's span (traces on).
    parent: Option<opentelemetry::Context>,
}

tokio::task_local! {
    static CALLER: Caller;
}

/// Middleware: a request with a `traceparent` is handled, body included, inside its context.
/// `traces`: whether the calls' spans are made (they then continue it). A request without one
/// passes untouched.
pub async fn continue_trace(State(traces): State<bool>, request: Request, next: Next) -> Response {
    let Some(traceparent) = request.headers().get("traceparent").cloned() else { return next.run(request).await };
    let parent = traces.then(|| TraceContextPropagator::new().extract(&HeaderExtractor(request.headers())));
    let caller = Caller { traceparent, tracestate: request.headers().get("tracestate").cloned(), parent };
    let handled = next.run(request);
    let response = match caller.parent.clone() {
        Some(parent) => CALLER.scope(caller.clone(), handled.with_context(parent)).await,
        None => CALLER.scope(caller.clone(), handled).await,
    };
    response.map(|body| Body::new(InContext { caller, body }))
}

/// A response body polled inside the caller's context (a stream's call goes on in it).
struct InContext {
    caller: Caller,
    body: Body,
}

impl http_body::Body for InContext {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let _attached = this.caller.parent.clone().map(opentelemetry::Context::attach);
        let body = &mut this.body;
        CALLER.sync_scope(this.caller.clone(), || Pin::new(body).poll_frame(cx))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// What an attempt is sent with: the `traceparent` of its span when traces are on and it is
/// recorded in one; otherwise the caller's, as it came.
pub fn propagation(traces: bool) -> gateway_http::Propagate {
    Arc::new(move |headers: &mut HeaderMap| {
        if traces {
            let context = tracing::Span::current().context();
            if context.span().span_context().is_valid() {
                TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
                return;
            }
        }
        let _ = CALLER.try_with(|caller| {
            headers.insert("traceparent", caller.traceparent.clone());
            if let Some(state) = &caller.tracestate {
                headers.insert("tracestate", state.clone());
            }
        });
    })
}
