//! Source selection (SPEC §5): the order in which a call tries its scope's sources, and the
//! in-call demotion of a source that already failed twice in this call.
//!
//! Sources are named by their index in the scope. Orders are written into a caller-owned `Vec`
//! so a hot call loop does not allocate.

use crate::random::below;
use rand_core::Rng;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

/// Health floor in the score: a little exploration so a recovered source earns its way back.
pub(crate) const EXPLORATION_FLOOR: f64 = 0.05;

/// The selectors of SPEC §5.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectorKind {
    /// Power of two choices over `max(ewma, 0.05) / (1 + inflight)` (default).
    #[default]
    HealthAware,
    /// A rotating start, then declaration order (the old library).
    RoundRobin,
    /// Fewest attempts in flight first.
    LeastInflight,
}

/// What a selector knows of one source at pick time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SourceView {
    /// Health EWMA in `[0, 1]`.
    pub health: f64,
    /// Attempts in flight from this process.
    pub inflight: u32,
}

/// `max(health, 0.05) / (1 + inflight)`.
pub fn score(view: &SourceView) -> f64 {
    view.health.max(EXPLORATION_FLOOR) / (1.0 + f64::from(view.inflight))
}

/// A selector of one scope. Shared by the scope's concurrent calls (`&self`).
#[derive(Debug, Default)]
pub struct Selector {
    kind: SelectorKind,
    cursor: AtomicUsize,
}

impl Selector {
    /// A selector of the given kind.
    pub fn new(kind: SelectorKind) -> Self {
        Selector { kind, cursor: AtomicUsize::new(0) }
    }

    /// Its kind.
    pub fn kind(&self) -> SelectorKind {
        self.kind
    }

    /// Whether the selector ranks by health (and so demotion needs a trusted alternative).
    pub fn uses_health(&self) -> bool {
        self.kind == SelectorKind::HealthAware
    }

    /// Writes the full order of `sources` (indices into `sources`) into `out`.
    pub fn order<R: Rng + ?Sized>(&self, sources: &[SourceView], rng: &mut R, out: &mut Vec<usize>) {
        out.clear();
        out.extend(0..sources.len());
        match self.kind {
            SelectorKind::HealthAware => p2c(sources, rng, out),
            SelectorKind::RoundRobin => {
                if !out.is_empty() {
                    let start = self.cursor.fetch_add(1, AtomicOrdering::Relaxed) % out.len();
                    out.rotate_left(start);
                }
            }
            SelectorKind::LeastInflight => out.sort_by_key(|&i| sources[i].inflight),
        }
    }
}

/// Two distinct random sources, the higher score first (the first drawn on a tie), then the
/// rest by score descending (index order on ties).
fn p2c<R: Rng + ?Sized>(sources: &[SourceView], rng: &mut R, out: &mut [usize]) {
    let n = sources.len();
    if n < 2 {
        return;
    }
    let a = below(rng, n);
    let b = (a + 1 + below(rng, n - 1)) % n;
    let first = if score(&sources[b]) > score(&sources[a]) { b } else { a };
    out.swap(0, first);
    // The comparison is a total order (index breaks ties), so an unstable sort is deterministic
    // and needs no allocation.
    out[1..].sort_unstable_by(|&x, &y| by_score_desc(sources, x, y));
}

fn by_score_desc(sources: &[SourceView], x: usize, y: usize) -> Ordering {
    score(&sources[y]).total_cmp(&score(&sources[x])).then(x.cmp(&y))
}

/// Failures per source within one call (never shared between calls).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttemptFails {
    counts: Vec<u32>,
}

impl AttemptFails {
    /// No failures over `sources` sources.
    pub fn new(sources: usize) -> Self {
        AttemptFails { counts: vec![0; sources] }
    }

    /// One more failure of `source` in this call.
    pub fn record(&mut self, source: usize) {
        if let Some(c) = self.counts.get_mut(source) {
            *c += 1;
        }
    }

    /// Failures of `source` in this call.
    pub fn get(&self, source: usize) -> u32 {
        self.counts.get(source).copied().unwrap_or(0)
    }
}

/// Failures in a call after which a source yields to a trusted alternative.
pub(crate) const DEMOTE_AFTER: u32 = 2;

/// In-call demotion (SPEC §5): a source that failed ≥ 2 times in this call moves to the tail,
/// keeping relative order. With `health` (health-aware selectors) it moves only if a trusted
/// alternative exists: a source with no failure in this call and health ≥ 0.5 × its own.
/// Without `health` it moves unconditionally.
pub fn demote(order: &mut [usize], fails: &AttemptFails, health: Option<&[f64]>) {
    let trusted_alternative = |failed: usize| match health {
        None => true,
        Some(h) => {
            let bar = 0.5 * h.get(failed).copied().unwrap_or(0.0);
            order.iter().any(|&j| fails.get(j) == 0 && h.get(j).is_some_and(|&hj| hj >= bar))
        }
    };
    let demoted: Vec<bool> = order.iter().map(|&i| fails.get(i) >= DEMOTE_AFTER && trusted_alternative(i)).collect();
    if !demoted.contains(&true) {
        return;
    }
    let mut keyed: Vec<(bool, usize)> = demoted.into_iter().zip(order.iter().copied()).collect();
    keyed.sort_by_key(|&(d, _)| d); // stable: relative order kept on both sides
    for (slot, (_, i)) in order.iter_mut().zip(keyed) {
        *slot = i;
    }
}
