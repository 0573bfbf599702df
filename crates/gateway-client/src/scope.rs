//! One scope at run time: its policy and behaviours, the gate keys and parameters of its
//! sources, its selector, and the process-local state every call of the scope shares (memo,
//! health EWMA, AIMD pacers, progress) under one short, never-awaited lock.

use crate::preset::Behaviour;
use gateway_core::aimd::AimdPacer;
use gateway_core::breaker::GateParams;
use gateway_core::health::Ewma;
use gateway_core::memo::Memo;
use gateway_core::policy::ScopePolicy;
use gateway_core::ports::GateKey;
use gateway_core::select::{Selector, SourceView};
use gateway_core::stall::ScopeProgress;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Process-local state shared by a scope's calls.
pub(crate) struct Local {
    pub(crate) memo: Memo,
    pub(crate) health: Vec<Ewma>,
    pub(crate) aimd: Vec<AimdPacer>,
    pub(crate) progress: ScopeProgress,
}

pub(crate) struct Scope {
    pub(crate) policy: ScopePolicy,
    pub(crate) behaviour: Behaviour,
    pub(crate) gates: Vec<(GateKey, GateParams)>,
    pub(crate) selector: Selector,
    local: Mutex<Local>,
}

impl Scope {
    pub(crate) fn new(policy: ScopePolicy, behaviour: Behaviour) -> Self {
        let n = policy.sources.len();
        let gates = (0..n)
            .filter_map(|i| {
                let params = policy.gate_params(i)?;
                Some((GateKey::new(policy.name.as_str(), policy.sources[i].name.as_str()), params))
            })
            .collect();
        let local = Local {
            memo: Memo::new(n),
            health: vec![Ewma::new(); n],
            aimd: vec![if behaviour.aimd { AimdPacer::new(policy.concurrency) } else { AimdPacer::unlimited() }; n],
            progress: ScopeProgress::new(),
        };
        Scope { selector: Selector::new(policy.selector), policy, behaviour, gates, local: Mutex::new(local) }
    }

    /// The shared local state. The lock is held for a few field updates, never across an await.
    pub(crate) fn local(&self) -> MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn source_name(&self, source: usize) -> &str {
        self.policy.sources.get(source).map_or("?", |s| s.name.as_str())
    }

    /// What the selector sees of each source now.
    pub(crate) fn views(&self) -> Vec<SourceView> {
        let local = self.local();
        local.health.iter().zip(&local.aimd).map(|(h, a)| SourceView { health: h.value(), inflight: a.inflight() }).collect()
    }

    /// Attempts counted in flight by the AIMD pacers (zero once every call has ended).
    pub(crate) fn inflight(&self) -> u32 {
        self.local().aimd.iter().map(AimdPacer::inflight).sum()
    }
}
