//! The closed-loop workload of one process: its share of the calls (by tenant), the requests
//! (poisoned and long ones as the scenario says), and the workers that make them.

use super::{Progress, RunError};
use crate::scenario::{Scenario, Tenant};
use crate::upstream::{LONG, POISON};
use gateway_client::GatewayClient;
use gateway_core::breaker::CircuitState;
use gateway_core::policy::{Isolation, ScopePolicy};
use gateway_core::ports::SourceKey;
use gateway_core::random::unit;
use gateway_core::request::{Kind, Message, Request, Structured};
use gateway_core::time::Clock;
use gateway_memory::MemoryGates;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The calls of a scenario without tenants.
const UNTENANTED: Tenant = Tenant { share: 1.0, long_prompts: false, think_s: 0.0 };

/// One closed-loop share of the workload: a tenant's (or the untenanted) calls and workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Load {
    /// The tenant the calls are made for.
    pub tenant: Option<String>,
    /// The calls (indices into the run's calls).
    pub calls: std::ops::Range<u32>,
    /// Its closed-loop workers.
    pub workers: u32,
    /// Whether its prompts are long.
    pub long: bool,
    /// A worker's pause between calls.
    pub think: Duration,
}

/// The run's loads: one per tenant by share (calls and workers), or one untenanted load; the
/// `part`-th of `parts` processes takes its share of each.
pub fn loads(scenario: &Scenario, calls: u32, workers: u32, part: u32, parts: u32) -> Vec<Load> {
    let split = |n: u32, i: u32, of: u32| u32::try_from(u64::from(n) * u64::from(i) / u64::from(of.max(1))).unwrap_or(n);
    let whole: Vec<(Option<String>, std::ops::Range<u32>, u32, &Tenant)> = if scenario.tenants.is_empty() {
        vec![(None, 0..calls, workers, &UNTENANTED)]
    } else {
        let mut start = 0u32;
        let mut cumulative = 0.0;
        let count = scenario.tenants.len();
        scenario
            .tenants
            .iter()
            .enumerate()
            .map(|(i, (name, t))| {
                cumulative += t.share;
                let end = if i + 1 == count { calls } else { ((f64::from(calls) * cumulative).round() as u32).min(calls) };
                let range = start..end;
                start = end;
                (Some(name.clone()), range, ((f64::from(workers) * t.share).round() as u32).max(1), t)
            })
            .collect()
    };
    whole
        .into_iter()
        .map(|(tenant, range, w, t)| {
            let n = range.end - range.start;
            let calls = range.start + split(n, part, parts)..range.start + split(n, part + 1, parts);
            let workers = (split(w, part + 1, parts) - split(w, part, parts)).max(1);
            Load { tenant, calls, workers, long: t.long_prompts, think: Duration::from_secs_f64(t.think_s) }
        })
        .collect()
}

/// Which calls carry the poison payload: a function of the seed alone, so every process of a
/// run agrees.
pub(super) fn poison_marks(seed: u64, calls: u32, rate: f64) -> Vec<bool> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5EED);
    (0..calls).map(|_| unit(&mut rng) < rate).collect()
}

/// The closed-loop workload of one process: `workers` tasks take the calls `calls` one by one.
pub(super) struct Workload {
    pub(super) client: Arc<GatewayClient>,
    pub(super) scope: String,
    pub(super) loads: Vec<Load>,
    pub(super) poison: Arc<Vec<bool>>,
    pub(super) structured: bool,
    pub(super) stream: bool,
    pub(super) api: super::Api,
    /// With the memory gates in virtual time: read the cooldown left when a CircuitOpen returns.
    pub(super) exact: Option<ExactGates>,
}

impl Workload {
    /// Runs every call; returns the CircuitOpen errors seen (when `exact`).
    pub(super) async fn drive(self, progress: Progress) -> Result<Vec<(u64, Duration, Duration)>, RunError> {
        let done = Arc::new(AtomicU32::new(0));
        let circuit_open: Arc<Mutex<Vec<(u64, Duration, Duration)>>> = Arc::default();
        let this = Arc::new(self);
        let mut handles = Vec::new();
        for load in 0..this.loads.len() {
            let next = Arc::new(AtomicU32::new(this.loads[load].calls.start));
            for _ in 0..this.loads[load].workers.max(1) {
                let (this, next, done, progress, circuit_open) =
                    (this.clone(), next.clone(), done.clone(), progress.clone(), circuit_open.clone());
                handles.push(tokio::spawn(async move {
                    let load = &this.loads[load];
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= load.calls.end {
                            break;
                        }
                        let request = this.request(index, load.long);
                        let result = this.call(&request, load.tenant.as_deref()).await;
                        if let (Err(gateway_client::CallError::CircuitOpen { retry_after, .. }), Some(exact)) = (result, &this.exact) {
                            let remaining = exact.cooldown_left(load.tenant.as_deref());
                            circuit_open.lock().unwrap_or_else(PoisonError::into_inner).push((u64::from(index), retry_after, remaining));
                        }
                        progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                        if !load.think.is_zero() {
                            tokio::time::sleep(load.think).await;
                        }
                    }
                }));
            }
        }
        for handle in handles {
            handle.await.map_err(RunError::Task)?;
        }
        let seen = std::mem::take(&mut *circuit_open.lock().unwrap_or_else(PoisonError::into_inner));
        Ok(seen)
    }

    /// One call, whole or streamed (a stream read to its end; a break is a failed call).
    async fn call(&self, request: &Request, tenant: Option<&str>) -> Result<(), gateway_client::CallError> {
        if !self.stream {
            let called = match tenant {
                Some(tenant) => self.client.call_as(&self.scope, tenant, request).await,
                None => self.client.call(&self.scope, request).await,
            };
            return called.map(drop);
        }
        let mut stream = match tenant {
            Some(tenant) => self.client.stream_as(&self.scope, tenant, request).await?,
            None => self.client.stream(&self.scope, request).await?,
        };
        while let Some(chunk) = stream.next().await {
            if chunk.is_err() {
                break;
            }
        }
        Ok(())
    }

    fn request(&self, index: u32, long: bool) -> Request {
        let poisoned = self.poison.get(index as usize).copied().unwrap_or(false);
        let content = match (poisoned, long) {
            (true, _) => POISON.to_owned(),
            (false, true) => format!("{LONG}call {index}"),
            (false, false) => format!("call {index}"),
        };
        let mut request = asking(self.api, self.structured, content);
        request.estimated_tokens = if long { 6000 } else { 450 };
        request
    }
}

/// A request saying `content` through `api`, asking for the scenario's JSON when `structured`:
/// chat's `response_format`, or a Responses call's `text.format`, checked locally alike.
pub(super) fn asking(api: super::Api, structured: bool, content: String) -> Request {
    let schema = serde_json::json!({"type": "object", "required": ["answer"]});
    match api {
        super::Api::Chat => {
            let request = Request::chat(vec![Message::user(content)]).max_completion_tokens(256);
            if structured { request.json_schema("answer", schema, false) } else { request }
        }
        super::Api::Responses => {
            let mut body = serde_json::json!({"input": content, "max_output_tokens": 256});
            if structured {
                body["text"] = serde_json::json!({"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": false}});
            }
            let mut request = Request::native(Kind::Responses, body.as_object().cloned().unwrap_or_default());
            request.structured = structured.then(|| Structured::JsonSchema(schema));
            request
        }
    }
}

/// The memory gates of a virtual-time run, their clock and the scope's policy: the cooldown
/// left when a CircuitOpen returns is known exactly.
pub(super) struct ExactGates {
    pub(super) gates: Arc<MemoryGates>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) policy: ScopePolicy,
}

impl ExactGates {
    /// Time until the earliest gate of the call's partition could be probed.
    pub(super) fn cooldown_left(&self, tenant: Option<&str>) -> Duration {
        let now = self.clock.now();
        self.policy
            .sources
            .iter()
            .map(|s| {
                let key = SourceKey::new(self.policy.name.as_str(), s.name.as_str());
                match tenant.filter(|_| self.policy.isolation == Isolation::PerTenant) {
                    Some(tenant) => key.with_tenant(tenant),
                    None => key,
                }
            })
            .filter_map(|key| self.gates.snapshot(&key))
            .map(|gate| if gate.state == CircuitState::Open { gate.open_until.saturating_since(now) } else { Duration::ZERO })
            .min()
            .unwrap_or(Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::asking;
    use crate::run::Api;
    use gateway_core::request::Kind;

    #[test]
    fn each_api_asks_in_its_own_dialect_for_the_same_json() {
        let chat = asking(Api::Chat, true, "call 1".into());
        assert_eq!((chat.kind(), chat.body()["response_format"]["type"].as_str()), (Kind::Chat, Some("json_schema")));
        let responses = asking(Api::Responses, true, "call 1".into());
        assert_eq!(responses.kind(), Kind::Responses);
        assert_eq!(responses.body()["input"], "call 1");
        assert_eq!(responses.body()["text"]["format"]["schema"], chat.body()["response_format"]["json_schema"]["schema"]);
        assert!(responses.structured.is_some() && chat.structured.is_some(), "both checked locally");
        assert!(asking(Api::Responses, false, "x".into()).body().get("text").is_none());
    }
}
