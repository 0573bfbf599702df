//! The last minute's attempts per scope, by outcome class, one bucket a second: what the status
//! page draws as a bar chart. Bounded: one ring of 60 buckets per configured scope.

use gateway_core::outcome::OutcomeClass;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Seconds kept.
pub const SECONDS: usize = 60;

/// Counts per outcome class, in [`OutcomeClass::ALL`]'s order.
pub type Counts = [u64; OutcomeClass::ALL.len()];

/// One scope's ring: bucket `s % SECONDS` holds second `s`'s counts while `second` says so.
#[derive(Clone)]
struct Ring {
    counts: [Counts; SECONDS],
    second: [u64; SECONDS],
}

impl Default for Ring {
    fn default() -> Self {
        Ring { counts: [[0; OutcomeClass::ALL.len()]; SECONDS], second: [u64::MAX; SECONDS] }
    }
}

/// The rings of every scope.
#[derive(Default)]
pub struct Recent {
    scopes: Mutex<HashMap<String, Ring>>,
}

impl Recent {
    /// An attempt of `scope` ended `class` in second `now_s` (seconds since the epoch).
    pub fn record(&self, scope: &str, class: OutcomeClass, now_s: u64) {
        let mut scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        let ring = match scopes.get_mut(scope) {
            Some(ring) => ring,
            None => scopes.entry(scope.to_owned()).or_default(),
        };
        let at = (now_s % SECONDS as u64) as usize;
        if ring.second[at] != now_s {
            ring.second[at] = now_s;
            ring.counts[at] = [0; OutcomeClass::ALL.len()];
        }
        // `ALL` is in the classes' order (the outcome table's).
        ring.counts[at][class as usize] += 1;
    }

    /// `scope`'s counts for each of the [`SECONDS`] seconds up to `now_s`, oldest first (zeros
    /// for seconds without attempts).
    pub fn last_minute(&self, scope: &str, now_s: u64) -> Vec<Counts> {
        let scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        let ring = scopes.get(scope);
        let empty = [0; OutcomeClass::ALL.len()];
        (0..SECONDS as u64)
            .rev()
            .map(|back| match now_s.checked_sub(back) {
                Some(second) => {
                    let at = (second % SECONDS as u64) as usize;
                    ring.filter(|r| r.second[at] == second).map_or(empty, |r| r.counts[at])
                }
                None => empty,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minute_is_kept_per_scope_and_older_seconds_are_forgotten() {
        let recent = Recent::default();
        recent.record("chat", OutcomeClass::Success, 1000);
        recent.record("chat", OutcomeClass::Success, 1000);
        recent.record("chat", OutcomeClass::RateLimited, 1030);
        recent.record("embed", OutcomeClass::Transient, 1030);
        let chat = recent.last_minute("chat", 1030);
        assert_eq!(chat.len(), SECONDS);
        assert_eq!(chat[SECONDS - 31][0], 2, "second 1000, 30 s before the last");
        assert_eq!(chat[SECONDS - 1][1], 1, "a 429 now");
        assert_eq!(chat.iter().flatten().sum::<u64>(), 3);
        assert_eq!(recent.last_minute("embed", 1030)[SECONDS - 1][2], 1, "scopes apart");
        // A minute on, second 1000's bucket is another second's: not counted.
        assert_eq!(recent.last_minute("chat", 1060).iter().flatten().sum::<u64>(), 1);
        recent.record("chat", OutcomeClass::Success, 1060);
        assert_eq!(recent.last_minute("chat", 1060)[SECONDS - 1], [1, 0, 0, 0, 0, 0], "the bucket is reused, emptied first");
        assert!(recent.last_minute("unknown", 5).iter().flatten().all(|n| *n == 0));
    }
}
