//! `gateway-client`: what an application calls. [`GatewayClient::call`] runs one call through
//! admission ([`SourceAdmission`](admission) — memo, AIMD, gate, quota), selection (health-aware
//! P2C by default, with in-call demotion), the attempt and the outcome table, and backs off,
//! re-asks, waits or ends with a typed [`CallError`], for chat and embeddings alike.
//!
//! Config: [`config::load`] reads defaults ← a TOML file ← the environment (`{SCOPE}__…`).
//! Presets: [`Preset::Default`] and [`Preset::Baseline`] (the old library, for comparison).
//! Telemetry: [`TracingTelemetry`] and the in-memory [`Collector`].

mod accounts;
mod admission;
mod affinity;
mod builder;
mod call;
mod clock;
pub mod config;
mod delivery;
mod error;
mod overview;
mod partition;
mod preset;
mod reload;
mod slot;
mod stream;
mod telemetry;
mod trace;
mod turns;

pub use accounts::RateLimited;
pub use affinity::AFFINITY_TTL;
pub use builder::{BACKGROUND_RECORDS, BuildError, GatewayClientBuilder, RECORD_TIMEOUT};
pub use clock::TokioClock;
pub use error::{AttemptRecord, CallError, CallReport, Exhausted, TenantRefusal, Unroutable};
pub use overview::{AccountStatus, ScopeOverview, SourceStatus, TenantStatus};
pub use preset::Preset;
pub use reload::Reloaded;
pub use stream::{ChatStream, StreamError};
pub use telemetry::{Collector, TracingTelemetry};
pub use trace::{SpanKind, Traces};

use admission::SourceAdmission;
use call::{CallGuard, CallLoop, CallState};
use delivery::{Chunks, Delivered, Delivery, Whole};
use gateway_core::request::{Request, Response};
use gateway_core::telemetry::{CallEvent, CallResult};
use partition::Partitions;
pub use partition::tenant_name;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tracing::Instrument;

/// A caller-chosen value as an error message repeats it: at most 64 characters, then `…`.
pub fn echoed(value: &str) -> String {
    let mut shown: String = value.chars().take(64).collect();
    if shown.len() < value.len() {
        shown.push('…');
    }
    shown
}

/// A stream of the answer (a whole one replayed).
fn into_stream(answer: Delivered<ChatStream>) -> ChatStream {
    match answer {
        Delivered::Stream(stream) => stream,
        Delivered::Whole(response) => ChatStream::replay(response),
    }
}

/// The gateway: scopes of sources behind shared gates, one upstream transport, telemetry.
pub struct GatewayClient {
    /// The scopes and upstream a call starts on ([`reload`](Self::reload) swaps them).
    serving: arc_swap::ArcSwap<reload::Serving>,
    admission: Arc<SourceAdmission>,
    next_call: AtomicU64,
    affinity: affinity::Affinities,
    /// The preset of scopes a reload adds.
    preset: Preset,
    /// Tenants every `per_tenant` scope always admits.
    pinned: Vec<String>,
    /// One reload at a time.
    reloading: tokio::sync::Mutex<()>,
}

impl GatewayClient {
    /// A builder.
    pub fn builder() -> GatewayClientBuilder {
        GatewayClientBuilder::default()
    }

    /// Runs one call (chat or embeddings, by the request's kind) in `scope` and returns the
    /// provider's whole answer. The library owns every retry, back-off, source switch and wait;
    /// an error means the call-level budget is spent. Dropping the future at any point releases
    /// everything the call held.
    pub async fn call(&self, scope: &str, request: &Request) -> Result<Response, CallError> {
        let Delivered::Whole(response) = self.deliver::<Whole>(scope, None, request).await?;
        Ok(response)
    }

    /// [`call`](Self::call) on behalf of `tenant`. In a scope with `isolation = per_tenant` the
    /// call runs in the tenant's own partition: gates, memo, health and quota keyed by (tenant,
    /// source), so one tenant's failures never open a source for another; the account limit is
    /// the provider key's, shared, and waiting calls are served by tier weight between tenants.
    /// In a shared scope the tenant changes nothing.
    pub async fn call_as(&self, scope: &str, tenant: &str, request: &Request) -> Result<Response, CallError> {
        let Delivered::Whole(response) = self.deliver::<Whole>(scope, Some(tenant), request).await?;
        Ok(response)
    }

    /// The scopes that serve `kind` (their `kinds`), by name.
    pub fn scopes_serving(&self, kind: gateway_core::request::Kind) -> Vec<String> {
        let serving = self.serving.load();
        serving.scopes.iter().filter(|(_, p)| p.policy().kinds.contains(&kind)).map(|(name, _)| name.clone()).collect()
    }

    /// Where the state `id` names (a stored response, a conversation, a file, a batch) lives:
    /// its scope and source, if the gateway made it and it has not expired.
    pub async fn affinity_of(&self, id: &str) -> Result<Option<gateway_core::ports::Affinity>, gateway_core::ports::BackendError> {
        self.affinity.map.find(id).await
    }

    /// Forgets where `id` lives (its state was deleted).
    pub async fn forget(&self, id: &str) -> Result<(), gateway_core::ports::BackendError> {
        self.affinity.map.forget(id).await
    }

    /// Runs one call in `scope` as a stream (chat, responses, legacy completions): governed like any call up to its commit point
    /// (the first chunk with content, a tool-call delta or a refusal), so failures before it
    /// retry, switch source or wait unseen; from it on, the chunks as they arrive. The
    /// attempt's permit, AIMD place and probe lease are held until the stream ends, is dropped,
    /// or outlives the source's timeout.
    pub async fn stream(&self, scope: &str, request: &Request) -> Result<ChatStream, CallError> {
        Ok(into_stream(self.deliver::<Chunks>(scope, None, request).await?))
    }

    /// [`stream`](Self::stream) on behalf of `tenant` (see [`call_as`](Self::call_as)).
    pub async fn stream_as(&self, scope: &str, tenant: &str, request: &Request) -> Result<ChatStream, CallError> {
        Ok(into_stream(self.deliver::<Chunks>(scope, Some(tenant), request).await?))
    }

    /// The call in `scope`, then, if it ended `CircuitOpen`, `AllSourcesExhausted` or
    /// `RateLimited` and the scope names a fallback, once in the fallback scope (which does not
    /// fall back again). Either way it is one call, with one call event.
    async fn deliver<D: Delivery>(&self, scope: &str, tenant: Option<&str>, request: &Request) -> Result<Delivered<D::Stream>, CallError> {
        // The configuration the call runs on, whatever a reload swaps in meanwhile.
        let serving = self.serving.load_full();
        let fallback = serving.scopes.get(scope).and_then(|p| p.policy().fallback.clone());
        // One span for the call, over its fallback too (none unless traces are on).
        let span = match &self.admission.traces {
            Some(traces) => trace::call_span(traces, scope, request, D::STREAMS),
            None => tracing::Span::none(),
        };
        // The primary scope's part of the call, while a fallback is to follow.
        let mut prior = None;
        // Each part's future is boxed (~6 KB inline: every future that awaits the call would be
        // as large, and each move of one copies it all).
        let primary = Box::pin(self.run_in::<D>(&serving, scope, tenant, request, &mut prior, fallback.is_some()));
        let primary = match primary.instrument(span.clone()).await {
            Err(e) if falls_back_on(&e) => e,
            Err(refused) if refused.result().is_none() => {
                // Refused before it started: no guard ended it.
                trace::refused(&span, &refused);
                return Err(refused);
            }
            done => return done,
        };
        let Some(fallback) = fallback else { return Err(primary) };
        let second = Box::pin(self.run_in::<D>(&serving, &fallback, tenant, request, &mut prior, false)).instrument(span.clone()).await;
        if let Some(event) = prior {
            // The fallback refused the call before it started (a kind it does not serve, a
            // tenant it refuses): the primary's part is all of the call, its event and its error.
            self.admission.telemetry.call(&event);
            trace::call_ended(&span, event.result.as_str(), event.attempts, None);
            if let Err(refusal) = &second {
                tracing::warn!(scope, fallback, %refusal, "the fallback scope refused the call before it started");
            }
            return Err(primary);
        }
        second.map_err(|second| CallError::FallbackFailed {
            scope: scope.to_owned(),
            primary: Box::new(primary),
            fallback_scope: fallback,
            fallback: Box::new(second),
        })
    }

    /// The call in one scope. `prior` is the primary scope's part of a call that falls back to
    /// this scope (taken when the call starts here); `falls_back` says a fallback follows an
    /// error it falls back on, so this part is handed over into `prior` instead of ending.
    async fn run_in<D: Delivery>(
        &self,
        serving: &reload::Serving,
        scope: &str,
        tenant: Option<&str>,
        request: &Request,
        prior: &mut Option<CallEvent>,
        falls_back: bool,
    ) -> Result<Delivered<D::Stream>, CallError> {
        let Some(partitions) = serving.scopes.get(scope) else {
            return Err(CallError::UnknownScope {
                scope: scope.to_owned(),
                known: serving.scopes.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        };
        let kind = request.kind();
        if !partitions.policy().kinds.contains(&kind) {
            let served = partitions.policy().kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ");
            return Err(CallError::KindNotServed { scope: scope.to_owned(), kind, served });
        }
        // A source that cannot carry the request (another protocol, and a request the other
        // side cannot express) is passed by; with none left the call is refused, each named.
        let carried: Vec<Result<(), String>> =
            partitions.policy().sources.iter().map(|source| gateway_core::translate::carries(request, source.protocol)).collect();
        if carried.iter().all(Result::is_err) {
            let sources = &partitions.policy().sources;
            let reasons = sources
                .iter()
                .zip(&carried)
                .map(|(s, why)| format!("{} ({}): {}", s.name, s.protocol, why.clone().err().unwrap_or_default()));
            return Err(CallError::NoSourceCarries { scope: scope.to_owned(), kind, reasons: reasons.collect::<Vec<_>>().join("; ") });
        }
        if D::STREAMS && !(kind.streams() || kind.relays_bytes()) {
            return Err(CallError::NotStreamable { kind });
        }
        // The name as given reaches error messages (and the proxy's error bodies): cut it short.
        let refused = |reason| CallError::TenantRefused { scope: scope.to_owned(), tenant: echoed(tenant.unwrap_or_default()), reason };
        // Every tenant name is checked and normalised, whatever the isolation: it reaches
        // telemetry (metric labels) even from a shared scope.
        let tenant = tenant.map(tenant_name).transpose().map_err(refused)?;
        let scope = partitions.partition(tenant.as_deref(), self.admission.clock.now()).map_err(refused)?;
        // A fallback goes on with the call's id: its attempts belong to the one call event.
        let id = match prior {
            Some(primary) => primary.call_id,
            None => self.next_call.fetch_add(1, Ordering::Relaxed),
        };
        // A request referring to kept state goes to the source holding it, or nowhere.
        let pinned = self.affinity.pin(partitions.policy(), request).await?;
        let mut state = CallState::new(id, self.admission.clock.clone(), scope.rules);
        if let Some((source, why)) = pinned {
            state.machine.restrict_to(source);
            state.pinned = Some(why);
        }
        for (i, _) in carried.iter().enumerate().filter(|(_, carried)| carried.is_err()) {
            state.machine.leave_out(i);
        }
        state.tenant = tenant;
        if self.admission.traces.is_some() {
            // The call's span (`deliver`'s), which this part runs in.
            state.span = tracing::Span::current();
        }
        let mut guard = CallGuard::new(state, partitions.name().clone(), self.admission.telemetry.clone(), prior.take());
        let run = CallLoop { admission: &self.admission, upstream: &*serving.upstream };
        match run.run::<D>(&scope, request, &mut guard.state).await {
            Ok(Delivered::Whole(response)) => {
                if let Some(traces) = &self.admission.traces {
                    trace::answered(&guard.state.span, traces, &response);
                }
                self.affinity.remember(partitions.name(), response.source().unwrap_or_default(), request, &response).await;
                guard.end(CallResult::Ok);
                Ok(Delivered::Whole(response))
            }
            // The call goes on in the stream, which ends it.
            Ok(Delivered::Stream(committed)) => {
                let (source, preamble) = D::preamble(&committed);
                self.affinity.remember_streamed(partitions.name(), source, request, preamble).await;
                Ok(Delivered::Stream(D::open(committed, self.admission.clone(), scope, guard)))
            }
            Err(error) => {
                let result = error.result_of_started();
                if falls_back && falls_back_on(&error) {
                    *prior = Some(guard.hand_over(result));
                } else {
                    guard.end(result);
                }
                Err(error)
            }
        }
    }

    /// Attempts counted in flight by the AIMD pacers of `scope`, over every partition (0 when
    /// no call is running).
    pub fn inflight(&self, scope: &str) -> u32 {
        self.serving.load().scopes.get(scope).map_or(0, |p| p.all().iter().map(|s| s.inflight()).sum())
    }

    /// Capacity of `scope` was freed in another process sharing the backend (e.g. a message of
    /// `gateway_redis::watch_freed`): the head of its line of waiting calls tries again.
    /// Answers whether a waiter was woken (none: the capacity is nobody's here).
    pub fn capacity_freed(&self, scope: &str) -> bool {
        self.serving.load().scopes.get(scope).is_some_and(|partitions| partitions.shared().turns().freed_elsewhere())
    }

    /// Tenants of `scope` with a partition of their own in this process.
    pub fn tenants(&self, scope: &str) -> usize {
        self.serving.load().scopes.get(scope).map_or(0, Partitions::tenants)
    }

    /// The health EWMA of each source of `scope` (its shared partition), by name.
    pub fn health(&self, scope: &str) -> Vec<(String, f64)> {
        self.serving.load().scopes.get(scope).map_or_else(Vec::new, |p| {
            let local = p.shared().local();
            p.policy().sources.iter().zip(&local.health).map(|(src, h)| (src.name.clone(), h.value())).collect()
        })
    }

    /// Records dropped since the start: those that found no room in the background, or ran out
    /// of time there ([`GatewayClientBuilder::background_records`]).
    pub fn dropped_records(&self) -> u64 {
        self.admission.holders.dropped_records.load(Ordering::Relaxed)
    }

    /// Waits until every release that dropped calls spawned (probe leases, pacer leases and
    /// quota permits handed back on a task of their own), every record still in the
    /// background, and every stream's relay (it settles
    /// the attempt when the stream ends, is dropped, or outlives the source's timeout) has
    /// finished: for a shutdown that cut calls and must not exit with their leases still live
    /// in a shared backend. Calls may go on meanwhile.
    /// One caller at a time (a shutdown): a second concurrent caller may return early.
    pub async fn released(&self) {
        let releases = &self.admission.holders.releases;
        releases.close();
        releases.wait().await;
        releases.reopen();
    }

    /// The longest `tenant_idle_s` of the scopes that isolate tenants (10 minutes without any):
    /// how long a tenant keeps counting as live after its last call.
    pub fn longest_tenant_idle(&self) -> Duration {
        let serving = self.serving.load();
        let per_tenant =
            serving.scopes.values().map(Partitions::policy).filter(|p| p.isolation == gateway_core::policy::Isolation::PerTenant);
        per_tenant.map(|p| p.tenant_idle).max().unwrap_or(Duration::from_secs(600))
    }

    /// Whether the client has a scope of this name.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.serving.load().scopes.contains_key(scope)
    }

    /// The scopes, by name.
    pub fn scope_names(&self) -> Vec<String> {
        self.serving.load().scopes.keys().cloned().collect()
    }
}

/// The errors a scope's fallback takes over: the scope could not serve the call now.
fn falls_back_on(error: &CallError) -> bool {
    // A scope none of whose sources can carry the request may have a fallback that can.
    matches!(
        error,
        CallError::CircuitOpen { .. }
            | CallError::AllSourcesExhausted { .. }
            | CallError::RateLimited { .. }
            | CallError::NoSourceCarries { .. }
    )
}
