//! The `[telemetry]` table: OpenTelemetry traces of the calls (`crate::traces`). The standard
//! variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`, `OTEL_EXPORTER_OTLP_HEADERS`)
//! are read too; a key set here wins over them.

use super::ConfigError;
use serde::Deserialize;

/// The `[telemetry]` table.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Export traces over OTLP/HTTP (default: when `OTEL_EXPORTER_OTLP_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set).
    #[serde(default)]
    pub traces: Option<bool>,
    /// Where traces go: the collector's OTLP/HTTP traces URL, as given (default: the variables,
    /// else `http://localhost:4318/v1/traces`).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The resource's `service.name` (default: `OTEL_SERVICE_NAME`, else `llm-gateway`).
    #[serde(default)]
    pub service_name: Option<String>,
    /// Record prompts and answers on the call spans (`gen_ai.input.messages`,
    /// `gen_ai.output.messages`, 16 KiB each at most). Off by default: they may hold personal
    /// data. Keys and headers are never recorded.
    #[serde(default)]
    pub record_contents: bool,
}

impl TelemetryConfig {
    /// Whether traces are exported, given the process's variables (`var`).
    pub fn traces_on(&self, var: impl Fn(&str) -> Option<String>) -> bool {
        self.traces
            .unwrap_or_else(|| ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"].iter().any(|v| var(v).is_some()))
    }

    /// Checks what a type cannot.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(endpoint) = &self.endpoint {
            let scheme_ok = endpoint.starts_with("http://") || endpoint.starts_with("https://");
            if !scheme_ok || endpoint.parse::<axum::http::Uri>().is_err() {
                return Err(ConfigError::TelemetryEndpoint { value: gateway_client::echoed(endpoint) });
            }
        }
        if self.service_name.as_ref().is_some_and(|s| s.trim().is_empty()) {
            return Err(ConfigError::Empty { key: "telemetry.service_name" });
        }
        Ok(())
    }
}
