//! What a script runs on: the `Target` port, the pure gates, and the memory and Redis gates of
//! a `Backend`.

use crate::support::Backend;
use gateway_core::breaker::{Gate, GateOp, GateParams, Reply};
use gateway_core::ports::SourceKey;
use gateway_core::random::Incarnations;
use gateway_core::time::Timestamp;
use std::collections::HashMap;
use std::time::Duration;

/// The backend key of a script source: `name@tenant` is `name` in `tenant`'s partition.
fn script_key(b: &Backend, source: &str) -> SourceKey {
    match source.split_once('@') {
        Some((name, tenant)) => b.key(name).with_tenant(tenant),
        None => b.key(source),
    }
}
/// What a script runs on.
#[async_trait::async_trait]
pub trait Target: Send {
    fn set_time(&mut self, now: Timestamp);
    async fn apply(&mut self, source: &str, p: &GateParams, op: GateOp) -> Reply;
    async fn snapshot(&mut self, source: &str) -> Gate;
    async fn retry_after(&mut self, gates: &[(String, GateParams)]) -> Duration;
    /// Loses the gates of `sources`, as a backend that restarts empty does.
    async fn lose(&mut self, sources: &[String]);
}

/// The pure state machine: one `Gate` per source (a backend's stored gates), the script's
/// clock, and the incarnations it draws.
pub struct Pure {
    gates: HashMap<String, Gate>,
    now: Timestamp,
    incarnations: Incarnations,
}

impl Default for Pure {
    fn default() -> Self {
        Pure { gates: HashMap::new(), now: Timestamp::default(), incarnations: Incarnations::seeded(0) }
    }
}

#[async_trait::async_trait]
impl Target for Pure {
    fn set_time(&mut self, now: Timestamp) {
        self.now = now;
    }
    async fn apply(&mut self, source: &str, p: &GateParams, op: GateOp) -> Reply {
        let incarnations = &self.incarnations;
        self.gates.entry(source.to_owned()).or_default().apply_stored(p, op, self.now, || incarnations.draw())
    }
    async fn snapshot(&mut self, source: &str) -> Gate {
        self.gates.get(source).cloned().unwrap_or_default()
    }
    async fn retry_after(&mut self, gates: &[(String, GateParams)]) -> Duration {
        let fresh = Gate::new();
        gateway_core::breaker::min_retry_after(gates.iter().map(|(s, p)| (self.gates.get(s).unwrap_or(&fresh), p)), self.now)
    }
    async fn lose(&mut self, _sources: &[String]) {
        self.gates.clear();
    }
}

#[async_trait::async_trait]
impl Target for Backend {
    fn set_time(&mut self, now: Timestamp) {
        self.clock.set(now);
    }
    async fn apply(&mut self, source: &str, p: &GateParams, op: GateOp) -> Reply {
        self.gates.apply(&script_key(self, source), p, op).await.unwrap_or_else(|e| panic!("{op:?} on {source}: {e}"))
    }
    async fn snapshot(&mut self, source: &str) -> Gate {
        Backend::snapshot(self, &script_key(self, source)).await
    }
    async fn retry_after(&mut self, gates: &[(String, GateParams)]) -> Duration {
        let keyed: Vec<(SourceKey, GateParams)> = gates.iter().map(|(s, p)| (script_key(self, s), p.clone())).collect();
        self.gates.retry_after(&keyed).await.unwrap()
    }
    async fn lose(&mut self, sources: &[String]) {
        let keys: Vec<SourceKey> = sources.iter().map(|s| script_key(self, s)).collect();
        Backend::lose(self, &keys).await;
    }
}
