//! The calls' spans, for OpenTelemetry (off unless [`GatewayClientBuilder::traces`] asks; then
//! a `tracing-opentelemetry` layer exports them). Each is a `tracing` span whose `otel.*`
//! fields name it and set its kind and status:
//!
//! - one per call, `{kind} {scope}` (`chat support`), CLIENT in a library and SERVER in a proxy
//!   ([`SpanKind`]), with the GenAI semantic conventions' attributes: `gen_ai.operation.name`,
//!   `gen_ai.provider.name` (the serving source's protocol), `gen_ai.request.model` (the
//!   scope), `gen_ai.request.stream`, `gen_ai.response.model`, `gen_ai.response.id`,
//!   `gen_ai.response.finish_reasons` (comma-separated: an exporter may make it an array),
//!   `gen_ai.usage.input_tokens` (cached tokens included, as the provider counts them) and
//!   `output_tokens`, and `error.type`: the outcome class of the last attempt of a call that
//!   failed (its result when it made none, or why it was refused before it started). A
//!   streamed call's span has the usage of its stream's end but not the answer's id, model or
//!   finish reasons, which come in its chunks;
//! - one per attempt, `attempt {source}`, CLIENT: the source, its outcome class and detail, the
//!   gate's state, epoch and incarnation it was admitted in, whether it held the probe, the account's
//!   learned limit after it, the provider's `retry_after`;
//! - one per wait, `wait {for}`: for its turn in line (`turn`), for a gate (`gate`), for an
//!   account's limit or pushback (`account`), for a quota (`quota`), or backing off (`backoff`).
//!
//! Prompts and answers appear only with [`Traces::contents`] (`gen_ai.input.messages`,
//! `gen_ai.output.messages`, each cut at 16 KiB); keys and headers never do.
//!
//! [`GatewayClientBuilder::traces`]: crate::GatewayClientBuilder::traces

use gateway_core::outcome::{NextStep, OutcomeClass};
use gateway_core::request::{Kind, Request, Response, Usage};
use gateway_core::telemetry::AttemptEvent;
use tracing::Span;
use tracing::field::Empty;

/// The kind of a call's span: a library's call is a CLIENT of the providers, a proxy's the
/// SERVER side of its caller's request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpanKind {
    /// A library's call.
    #[default]
    Client,
    /// A proxy's call, continuing its caller's trace.
    Server,
}

/// What the calls' spans are made of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traces {
    /// The call span's kind.
    pub kind: SpanKind,
    /// Record prompts and answers (off by default: they may hold personal data).
    pub contents: bool,
}

/// The longest content recorded, in bytes.
const MAX_CONTENT: usize = 16 * 1024;

/// The GenAI operation of a kind.
fn operation(kind: Kind) -> &'static str {
    match kind {
        Kind::Chat | Kind::Responses | Kind::Messages => "chat",
        Kind::Embeddings => "embeddings",
        Kind::Completions => "text_completion",
        Kind::Images | Kind::ImageEdits | Kind::Speech | Kind::Transcriptions | Kind::Translations => "generate_content",
        other => other.as_str(),
    }
}

fn cut(text: &str) -> &str {
    if text.len() <= MAX_CONTENT {
        return text;
    }
    let mut end = MAX_CONTENT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The span of a call of `request` in `scope` (`streamed`: asked for as a stream).
pub(crate) fn call_span(traces: &Traces, scope: &str, request: &Request, streamed: bool) -> Span {
    let kind = request.kind();
    let name = format!("{} {scope}", kind.as_str());
    let span = tracing::info_span!(
        target: "gateway_client::call",
        "call",
        otel.name = name.as_str(),
        otel.kind = if traces.kind == SpanKind::Server { "server" } else { "client" },
        otel.status_code = Empty,
        gen_ai.operation.name = operation(kind),
        gen_ai.provider.name = Empty,
        gen_ai.request.model = scope,
        gen_ai.request.stream = streamed,
        gen_ai.response.model = Empty,
        gen_ai.response.id = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        gateway.result = Empty,
        gateway.attempts = Empty,
        "error.type" = Empty,
    );
    if traces.contents && !span.is_disabled() {
        let input = request.body().get("messages").or_else(|| request.body().get("input")).or_else(|| request.body().get("prompt"));
        if let Some(input) = input {
            span.record("gen_ai.input.messages", cut(&input.to_string()));
        }
    }
    span
}

/// The span of one attempt at `source` (`protocol` its dialect, `model` the model it is sent).
pub(crate) fn attempt_span(source: &str, protocol: &str, model: Option<&str>, gate: (&str, u64, u64), probe: bool) -> Span {
    let (admitted_in, epoch, incarnation) = gate;
    let name = format!("attempt {source}");
    tracing::info_span!(
        target: "gateway_client::attempt",
        "attempt",
        otel.name = name.as_str(),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.provider.name = protocol,
        gen_ai.request.model = model,
        gateway.source = source,
        gateway.gate.state = admitted_in,
        gateway.gate.epoch = i64::try_from(epoch).unwrap_or(i64::MAX),
        gateway.gate.incarnation = i64::try_from(incarnation).unwrap_or(i64::MAX),
        gateway.probe = probe,
        gateway.outcome = Empty,
        gateway.outcome.detail = Empty,
        gateway.account.limit = Empty,
        gateway.retry_after_s = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        "error.type" = Empty,
    )
}

/// The span of a wait for `what` (`turn`, `gate`, `account`, `quota`, `backoff`).
pub(crate) fn wait_span(what: &'static str) -> Span {
    let name = format!("wait {what}");
    tracing::info_span!(target: "gateway_client::wait", "wait", otel.name = name.as_str(), otel.kind = "internal", gateway.wait.for = what)
}

fn record_usage(span: &Span, usage: Usage) {
    span.record("gen_ai.usage.input_tokens", i64::from(usage.prompt_tokens));
    span.record("gen_ai.usage.output_tokens", i64::from(usage.completion_tokens));
}

/// How an attempt ended, on its span (and its source and usage on the call's).
pub(crate) fn attempt_ended(attempt: &Span, call: &Span, event: &AttemptEvent, protocol: &str) {
    let class = event.class;
    attempt.record("gateway.outcome", class.as_str());
    attempt.record("gateway.outcome.detail", event.detail.as_str());
    if let Some(limit) = event.aimd_limit {
        attempt.record("gateway.account.limit", limit);
    }
    if let Some(wait) = event.retry_after {
        attempt.record("gateway.retry_after_s", wait.as_secs_f64());
    }
    // An answer the call returns (the outcome table's `Return`) is the attempt's success.
    if class.effects().next == NextStep::Return {
        attempt.record("otel.status_code", "ok");
        call.record("gen_ai.provider.name", protocol);
        if let Some(usage) = event.usage {
            record_usage(attempt, usage);
            record_usage(call, usage);
        }
    } else {
        attempt.record("error.type", class.as_str());
        attempt.record("otel.status_code", "error");
    }
}

/// A whole answer's id, model, finish reasons and (with contents) text, on the call's span.
pub(crate) fn answered(span: &Span, traces: &Traces, response: &Response) {
    let body = response.body();
    if let Some(id) = body.get("id").and_then(|v| v.as_str()) {
        span.record("gen_ai.response.id", id);
    }
    if let Some(model) = body.get("model").and_then(|v| v.as_str()) {
        span.record("gen_ai.response.model", model);
    }
    let mut reasons: Vec<&str> = response.choices().iter().filter_map(|c| c.get("finish_reason").and_then(|r| r.as_str())).collect();
    if reasons.is_empty() {
        reasons.extend(body.get("stop_reason").or_else(|| body.get("status")).and_then(|r| r.as_str()));
    }
    if !reasons.is_empty() {
        span.record("gen_ai.response.finish_reasons", reasons.join(",").as_str());
    }
    if traces.contents {
        let text: Vec<&str> = response.text_answers().collect();
        if !text.is_empty() {
            span.record("gen_ai.output.messages", cut(&text.join("\n")));
        }
    }
}

/// A call refused before it started (no scope of that name, a kind it does not serve, a tenant
/// it refuses, no source that can carry the request), on its span.
pub(crate) fn refused(span: &Span, error: &crate::CallError) {
    use crate::CallError;
    let why = match error {
        CallError::UnknownScope { .. } => "unknown_scope",
        CallError::KindNotServed { .. } => "kind_not_served",
        CallError::NoSourceCarries { .. } => "no_source_carries",
        CallError::NotStreamable { .. } => "not_streamable",
        CallError::Unroutable { .. } => "unroutable",
        CallError::TenantRefused { .. } => "tenant_refused",
        _ => "refused",
    };
    call_ended(span, why, 0, None);
}

/// How the call ended, on its span: its result, attempts, and for a failure the `error.type`.
pub(crate) fn call_ended(span: &Span, result: &'static str, attempts: u32, last_class: Option<OutcomeClass>) {
    span.record("gateway.result", result);
    span.record("gateway.attempts", i64::from(attempts));
    if result == "ok" {
        span.record("otel.status_code", "ok");
    } else {
        span.record("error.type", last_class.filter(|c| c.effects().next != NextStep::Return).map_or(result, |class| class.as_str()));
        span.record("otel.status_code", "error");
    }
}
