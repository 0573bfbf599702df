//! OpenTelemetry traces of the calls (`[telemetry]`, off by default): the client's spans
//! (`gateway_client`'s `trace.rs`: one per call of kind SERVER here, one per attempt, one per
//! wait) exported over OTLP/HTTP with protobuf through the workspace's own reqwest
//! ([`OtlpHttp`]: no second HTTP stack, no gRPC), in batches off the calls' path. The sampler is
//! the SDK's, from `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` (parent-based always-on
//! by default); the endpoint and service name come from `[telemetry]` or the standard
//! variables.
//!
//! The caller's W3C `traceparent` is continued ([`context`]): the call's span is its child, and
//! each attempt is sent with its own span's `traceparent`; with traces off the caller's is
//! passed on as it came ([`propagation`]).

pub mod context;
mod export;

pub use context::{continue_trace, propagation};
pub use export::{OtlpHttp, TracesError, layer, provider};
