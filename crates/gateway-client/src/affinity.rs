//! Conversation state stays where it lives (SPEC §13): a call whose request refers to state a
//! provider keeps (a previous response, a conversation, an uploaded file, a batch's input) goes
//! to the source holding it and nowhere else; the ids of state an answer makes are remembered
//! with the source that made them. The map is the client's `AffinityMap` (in memory, or shared
//! through the backend), each id kept for the client's affinity time to live.

use crate::error::{CallError, Unroutable};
use gateway_core::affinity::{kept_ids, references};
use gateway_core::policy::ScopePolicy;
use gateway_core::ports::{Affinity, AffinityMap};
use gateway_core::request::{Request, Response};
use gateway_core::stream::{Chunk, assemble};
use std::sync::Arc;
use std::time::Duration;

/// How long an id is remembered by default: 30 days, as long as OpenAI keeps a stored response.
pub const AFFINITY_TTL: Duration = Duration::from_secs(30 * 86_400);

/// The client's affinity map and how long it remembers.
pub(crate) struct Affinities {
    pub(crate) map: Arc<dyn AffinityMap>,
    pub(crate) ttl: Duration,
}

impl Affinities {
    /// The index of the one source of `policy` a call of `request` may use, and why (`source s1
    /// holds previous_response_id resp_1`), if it is pinned: by
    /// the request itself (a stored object's route, resolved by its caller), or by the state its
    /// fields refer to. An id the request needs that no source is known to hold, held in another
    /// scope, or held apart from another id it names, refuses the call.
    pub(crate) async fn pin(&self, policy: &ScopePolicy, request: &Request) -> Result<Option<(usize, String)>, CallError> {
        let scope = policy.name.as_str();
        let refused = |id: &str, field: &str, reason| CallError::Unroutable {
            scope: scope.to_owned(),
            id: crate::echoed(id),
            field: field.to_owned(),
            reason,
        };
        // The source, and the field and id that pin the call there.
        let mut pinned: Option<(Arc<str>, &str, &str)> = request.pinned().map(|(source, id)| (Arc::from(source), "id", id));
        for reference in references(request) {
            // No source holds what cannot be an id.
            if gateway_core::affinity::check_id(reference.id).is_err() {
                if reference.required {
                    return Err(refused(reference.id, reference.field, Unroutable::Unknown));
                }
                continue;
            }
            let found = self.map.find(reference.id).await.map_err(|e| refused(reference.id, reference.field, Unroutable::Backend(e)))?;
            let Some(at) = found else {
                if reference.required {
                    return Err(refused(reference.id, reference.field, Unroutable::Unknown));
                }
                continue;
            };
            if &*at.scope != scope {
                let reason = Unroutable::OtherScope { scope: at.scope.to_string(), source_name: at.source.to_string() };
                return Err(refused(reference.id, reference.field, reason));
            }
            match &pinned {
                Some((source, field, id)) if *source != at.source => {
                    let other = format!("{field} {id}");
                    let reason = Unroutable::Split { source_name: at.source.to_string(), other, other_source: source.to_string() };
                    return Err(refused(reference.id, reference.field, reason));
                }
                Some(_) => {}
                None => pinned = Some((at.source, reference.field, reference.id)),
            }
        }
        let Some((source, field, id)) = pinned else { return Ok(None) };
        match policy.sources.iter().position(|s| *s.name == *source) {
            Some(index) => Ok(Some((index, format!("source {source} holds {field} {id}")))),
            None => Err(refused(id, field, Unroutable::SourceGone { source_name: source.to_string() })),
        }
    }

    /// Remembers the ids of the state `response` (the answer to `request`, served by `source` in
    /// `scope`) made. A map that cannot answer loses the ids (logged): the answer is good.
    pub(crate) async fn remember(&self, scope: &str, source: &str, request: &Request, response: &Response) {
        let ids = kept_ids(request, response);
        if ids.is_empty() {
            return;
        }
        let at = Affinity { scope: scope.into(), source: source.into() };
        for id in ids {
            // The map refuses an id that cannot be one (logged here, as an outage would be).
            if let Err(error) = self.map.remember(id, &at, self.ttl).await {
                tracing::warn!(scope, source, %error, "the affinity map could not remember an id; a request referring to it will be refused");
            }
        }
    }

    /// Remembers the ids a stream's chunks up to its commit point made (a Responses stream's
    /// `response.created` names its response).
    pub(crate) async fn remember_streamed(&self, scope: &str, source: &str, request: &Request, preamble: &[Chunk]) {
        if request.kind() == gateway_core::request::Kind::Responses {
            self.remember(scope, source, request, &assemble(request.kind(), preamble)).await;
        }
    }
}
