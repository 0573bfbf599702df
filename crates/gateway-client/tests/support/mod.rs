//! Test support: scope policies from JSON, and a client on gateway-mock's `ScriptedUpstream`
//! (per-source plans over virtual time), the memory gates, tokio's paused clock and a collector.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use gateway_client::{Collector, GatewayClient, Preset, TokioClock};
use gateway_core::breaker::{GateOp, GateParams};
use gateway_core::policy::{ScopeConfig, ScopePolicy};
use gateway_core::ports::{BreakerGate, QuotaGate, SourceKey};
use gateway_core::request::{Message, Request, Response};
use gateway_core::time::Clock;
use gateway_memory::{MemoryGates, MemoryQuota};
use gateway_mock::ScriptedUpstream;
use std::sync::Arc;

/// A scope named `chat` from JSON (the `[chat]` table of a config file).
pub fn scope(json: serde_json::Value) -> ScopePolicy {
    serde_json::from_value::<ScopeConfig>(json).unwrap().resolve("chat").unwrap()
}

/// `n` sources `s1..sn` with the seed's breaker, 30 s timeouts and `extra` scope keys.
pub fn sources(n: usize, extra: serde_json::Value) -> ScopePolicy {
    let mut config = serde_json::json!({
        "breaker": {"fail_threshold": 5, "cooldown_s": 60},
        "sources": {}
    });
    for i in 1..=n {
        config["sources"][format!("s{i}")] = serde_json::json!({"timeout_s": 30});
    }
    if let (Some(base), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if k == "sources" {
                for (name, s) in v.as_object().unwrap() {
                    base["sources"][name] = s.clone();
                }
            } else {
                base.insert(k.clone(), v.clone());
            }
        }
    }
    scope(config)
}

pub fn chat() -> Request {
    let mut request = Request::chat(vec![Message::user("hi")]);
    request.estimated_tokens = 100;
    request
}

/// A client with its shared parts exposed to the test.
pub struct Harness {
    pub client: GatewayClient,
    pub upstream: Arc<ScriptedUpstream>,
    pub gates: Arc<MemoryGates>,
    pub quota: Arc<MemoryQuota>,
    pub telemetry: Arc<Collector>,
    pub clock: Arc<TokioClock>,
    pub policy: ScopePolicy,
}

impl Harness {
    pub fn new(policy: ScopePolicy, preset: Preset) -> Harness {
        let clock = Arc::new(TokioClock::new());
        let gates = Arc::new(MemoryGates::new(clock.clone()));
        let quota = Arc::new(MemoryQuota::new(clock.clone()));
        let upstream = ScriptedUpstream::new();
        let telemetry = Arc::new(Collector::new());
        let client = GatewayClient::builder()
            .preset(preset)
            .scope(policy.clone())
            .gates(gates.clone())
            .quota(quota.clone())
            .upstream(upstream.clone())
            .telemetry(telemetry.clone())
            .clock(clock.clone())
            .seed(7)
            .build()
            .unwrap();
        Harness { client, upstream, gates, quota, telemetry, clock, policy }
    }

    pub fn key(&self, source: &str) -> SourceKey {
        SourceKey::new("chat", source)
    }

    pub fn params(&self, source: &str) -> GateParams {
        let index = self.policy.sources.iter().position(|s| s.name == source).unwrap();
        self.policy.gate_params(index).unwrap()
    }

    /// Opens `source`'s gate now (as a dead key would: streak 1, one cooldown).
    pub async fn open(&self, source: &str) {
        self.gates.apply(&self.key(source), &self.params(source), GateOp::ForceOpen).await.unwrap();
    }

    pub async fn call(&self) -> Result<Response, gateway_client::CallError> {
        self.client.call("chat", &chat()).await
    }

    /// Virtual seconds since the harness started.
    pub fn now_s(&self) -> f64 {
        self.clock.now().as_millis() as f64 / 1000.0
    }

    pub fn quota_gate(&self) -> Arc<dyn QuotaGate> {
        self.quota.clone()
    }
}

/// The memory pacer seen from a test: each release after `release_delay` (as a Redis round trip
/// takes), and a count of the places it refused.
pub struct SpyPacer {
    inner: gateway_memory::MemoryPacer,
    release_delay: std::time::Duration,
    /// How long an admission takes (a round trip, as on Redis).
    acquire_delay: std::time::Duration,
    refused: std::sync::atomic::AtomicUsize,
}

impl SpyPacer {
    pub fn new(clock: Arc<dyn Clock>, release_delay: std::time::Duration) -> Self {
        SpyPacer {
            inner: gateway_memory::MemoryPacer::new(clock),
            release_delay,
            acquire_delay: Default::default(),
            refused: Default::default(),
        }
    }

    /// Each admission takes `delay`.
    pub fn acquiring_in(self, delay: std::time::Duration) -> Self {
        SpyPacer { acquire_delay: delay, ..self }
    }

    pub fn refused(&self) -> usize {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[async_trait::async_trait]
impl gateway_core::ports::PacerGate for SpyPacer {
    async fn try_acquire(
        &self,
        key: &SourceKey,
        params: &gateway_core::aimd::PacerParams,
        tokens: u32,
    ) -> Result<gateway_core::ports::PaceDecision, gateway_core::ports::BackendError> {
        if !self.acquire_delay.is_zero() {
            tokio::time::sleep(self.acquire_delay).await;
        }
        let decision = self.inner.try_acquire(key, params, tokens).await?;
        if matches!(decision, gateway_core::ports::PaceDecision::Paced(_)) {
            self.refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(decision)
    }

    async fn release(
        &self,
        lease: &gateway_core::ports::PaceLease,
        effect: gateway_core::outcome::AimdEffect,
        rate: Option<&gateway_core::request::RateSignal>,
        params: &gateway_core::aimd::PacerParams,
    ) -> Result<f64, gateway_core::ports::BackendError> {
        if !self.release_delay.is_zero() {
            tokio::time::sleep(self.release_delay).await;
        }
        self.inner.release(lease, effect, rate, params).await
    }

    async fn read(
        &self,
        key: &SourceKey,
        params: &gateway_core::aimd::PacerParams,
    ) -> Result<gateway_core::aimd::AccountReading, gateway_core::ports::BackendError> {
        self.inner.read(key, params).await
    }
}
