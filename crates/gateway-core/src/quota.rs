//! The local quota of one source account (max_concurrency, rpm, tpm) as a pure state machine.
//! The memory quota gate runs it; the Redis quota scripts mirror it rule for rule.
//!
//! Rules, exactly:
//! - the rate window is the rolling minute `(now − 60 s, now]`; older starts are pruned first;
//! - a concurrency slot is a lease that ends at `granted + permit_ttl` unless released before,
//!   so a crashed worker never holds one for ever; expired leases are pruned first;
//! - checks: concurrency (in flight ≥ max), rpm (starts in window ≥ rpm), tpm (the window's
//!   tokens plus the estimate exceed tpm, unless the window holds no tokens: a request larger
//!   than the whole tpm runs alone rather than never). The refusal names the first failing limit in that order and
//!   carries the largest wait among the failing ones: 0 for concurrency (a slot frees when some
//!   attempt ends, which no one can predict), the time until enough starts leave the window for
//!   rpm and tpm;
//! - a grant takes the next id, a lease and a start charged with the estimate; `settle`
//!   replaces the charge with the actual count; `release` ends the lease;
//! - the account has an incarnation, chosen at random by the backend at its first grant; a
//!   permit names it, and a settle or release of a permit of another incarnation (one granted
//!   before the backend lost the account, whose ids start again) changes nothing.

use crate::policy::QuotaLimits;
use crate::time::Timestamp;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// The rolling window of rpm and tpm.
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(60);

/// Which limit refused a permit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuotaLimit {
    /// `max_concurrency`.
    Concurrency,
    /// `rpm`.
    RequestsPerMinute,
    /// `tpm`.
    TokensPerMinute,
}

impl QuotaLimit {
    /// The config key of the limit.
    pub const fn as_str(self) -> &'static str {
        match self {
            QuotaLimit::Concurrency => "max_concurrency",
            QuotaLimit::RequestsPerMinute => "rpm",
            QuotaLimit::TokensPerMinute => "tpm",
        }
    }
}

/// A refused permit: the first failing limit and the time until a permit could be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The first limit that refused.
    pub limit: QuotaLimit,
    /// The largest wait among the failing limits (0: unknown, poll).
    pub retry_after: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Start {
    at: Timestamp,
    id: u64,
}

/// One source account's quota state. Every operation is O(1) amortised (a refused tpm request
/// walks the window to find its wait), so an account with a large rpm stays cheap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaAccount {
    incarnation: u64,
    next_id: u64,
    leases: Vec<(u64, Timestamp)>,
    /// Starts in the rate window, oldest first.
    starts: VecDeque<Start>,
    /// Token charge of each start in the window, by permit id.
    charges: HashMap<u64, u32>,
    /// The sum of `charges`.
    tokens: u64,
}

impl QuotaAccount {
    /// An idle account.
    pub fn new() -> Self {
        QuotaAccount::default()
    }

    /// The account's incarnation (0 before its first grant).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Asks for a permit charging `estimated_tokens`; returns the account's incarnation (`fresh`,
    /// non-zero and drawn by the backend, when this is its first grant) and the permit id.
    pub fn acquire(&mut self, limits: &QuotaLimits, estimated_tokens: u32, now: Timestamp, fresh: u64) -> Result<(u64, u64), Refusal> {
        self.prune(now);
        let mut refusal: Option<Refusal> = None;
        let mut refuse = |limit, wait| {
            let r = refusal.get_or_insert(Refusal { limit, retry_after: wait });
            r.retry_after = r.retry_after.max(wait);
        };
        if limits.max_concurrency.is_some_and(|max| self.leases.len() >= max as usize) {
            refuse(QuotaLimit::Concurrency, Duration::ZERO);
        }
        match limits.rpm {
            Some(0) => refuse(QuotaLimit::RequestsPerMinute, RATE_WINDOW),
            Some(rpm) if self.starts.len() >= rpm as usize => {
                // The count drops below rpm once the (len − rpm)-th oldest start leaves.
                let leaving = self.starts[self.starts.len() - rpm as usize];
                refuse(QuotaLimit::RequestsPerMinute, self.leaves_window_in(leaving, now));
            }
            _ => {}
        }
        if let Some(tpm) = limits.tpm {
            let used: u64 = self.tokens_in_window();
            let need = u64::from(tpm).saturating_sub(u64::from(estimated_tokens));
            if used > 0 && used + u64::from(estimated_tokens) > u64::from(tpm) {
                // Wait until the oldest starts have left with enough tokens (all of them when
                // the estimate alone exceeds tpm).
                let mut left = used;
                let mut last = self.starts.back().copied();
                for start in &self.starts {
                    left -= u64::from(self.charge(start.id));
                    if left <= need && u64::from(estimated_tokens) <= u64::from(tpm) {
                        last = Some(*start);
                        break;
                    }
                }
                let wait = last.map_or(Duration::ZERO, |s| self.leaves_window_in(s, now));
                refuse(QuotaLimit::TokensPerMinute, wait);
            }
        }
        if let Some(refusal) = refusal {
            return Err(refusal);
        }
        if self.incarnation == 0 {
            self.incarnation = fresh;
        }
        self.next_id += 1;
        let id = self.next_id;
        self.leases.push((id, now.saturating_add(limits.permit_ttl)));
        // Kept in (time, id) order even when a clock steps back, so the oldest is in front.
        let start = Start { at: now, id };
        if self.starts.back().is_none_or(|last| (last.at, last.id) <= (now, id)) {
            self.starts.push_back(start);
        } else {
            let position = self.starts.partition_point(|s| (s.at, s.id) <= (now, id));
            self.starts.insert(position, start);
        }
        self.charges.insert(id, estimated_tokens);
        self.tokens += u64::from(estimated_tokens);
        Ok((self.incarnation, id))
    }

    /// Replaces the token charge of permit `id` of `incarnation` with `actual_tokens` (nothing
    /// once its start has left the window, or for another incarnation's permit).
    pub fn settle(&mut self, incarnation: u64, id: u64, actual_tokens: u32) {
        if incarnation != self.incarnation {
            return;
        }
        if let Some(charge) = self.charges.get_mut(&id) {
            self.tokens = self.tokens - u64::from(*charge) + u64::from(actual_tokens);
            *charge = actual_tokens;
        }
    }

    fn charge(&self, id: u64) -> u32 {
        self.charges.get(&id).copied().unwrap_or(0)
    }

    /// Ends the lease of permit `id` of `incarnation`; releasing twice, or a permit of another
    /// incarnation, is harmless.
    pub fn release(&mut self, incarnation: u64, id: u64) {
        if incarnation != self.incarnation {
            return;
        }
        self.leases.retain(|&(lease, _)| lease != id);
    }

    /// Permits holding a concurrency slot at `now`.
    pub fn in_flight(&self, now: Timestamp) -> usize {
        self.leases.iter().filter(|&&(_, until)| now < until).count()
    }

    /// Starts in the rate window at `now`.
    #[cfg(test)]
    fn starts_in_window(&self, now: Timestamp) -> usize {
        self.starts.iter().filter(|s| in_window(s.at, now)).count()
    }

    /// Tokens charged in the window (as of the last prune).
    pub(crate) fn tokens_in_window(&self) -> u64 {
        self.tokens
    }

    fn prune(&mut self, now: Timestamp) {
        self.leases.retain(|&(_, until)| now < until);
        while let Some(oldest) = self.starts.front().copied().filter(|s| !in_window(s.at, now)) {
            self.starts.pop_front();
            if let Some(charge) = self.charges.remove(&oldest.id) {
                self.tokens -= u64::from(charge);
            }
        }
    }

    fn leaves_window_in(&self, start: Start, now: Timestamp) -> Duration {
        start.at.saturating_add(RATE_WINDOW).saturating_since(now)
    }
}

fn in_window(at: Timestamp, now: Timestamp) -> bool {
    now.saturating_since(at) < RATE_WINDOW
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_concurrency: Option<u32>, rpm: Option<u32>, tpm: Option<u32>) -> QuotaLimits {
        QuotaLimits { max_concurrency, rpm, tpm, permit_ttl: Duration::from_secs(60) }
    }

    fn at(s: u64) -> Timestamp {
        Timestamp::from_secs(s)
    }

    #[test]
    fn concurrency_slots_free_on_release_or_lease_expiry() {
        let l = limits(Some(2), None, None);
        let mut q = QuotaAccount::new();
        let a = q.acquire(&l, 0, at(0), 1).unwrap();
        q.acquire(&l, 0, at(0), 1).unwrap();
        assert_eq!(q.acquire(&l, 0, at(1), 1), Err(Refusal { limit: QuotaLimit::Concurrency, retry_after: Duration::ZERO }));
        q.release(a.0, a.1);
        q.release(a.0, a.1);
        let c = q.acquire(&l, 0, at(1), 1).unwrap();
        assert_eq!(q.in_flight(at(1)), 2);
        // the first holder crashed: its lease ends at 60 s
        assert!(q.acquire(&l, 0, at(59), 1).is_err());
        assert!(q.acquire(&l, 0, at(60), 1).is_ok());
        assert!(c > a, "ids grow");
    }

    #[test]
    fn the_first_grant_names_the_incarnation_and_another_ones_permits_change_nothing() {
        let l = limits(Some(1), None, Some(1000));
        let mut q = QuotaAccount::new();
        assert_eq!(q.incarnation(), 0);
        let (incarnation, id) = q.acquire(&l, 600, at(0), 77).unwrap();
        assert_eq!((incarnation, q.incarnation()), (77, 77));
        assert_eq!(q.acquire(&l, 0, at(0), 78).unwrap_err().limit, QuotaLimit::Concurrency);
        // a permit of the account's last life, with the same id, frees nothing and settles nothing
        q.release(5, id);
        q.settle(5, id, 0);
        assert_eq!((q.in_flight(at(0)), q.tokens_in_window()), (1, 600));
        q.release(incarnation, id);
        assert_eq!(q.acquire(&l, 0, at(1), 79).unwrap().0, 77, "the incarnation is the first grant's");
    }

    #[test]
    fn rpm_refuses_until_the_oldest_start_leaves_the_window() {
        let l = limits(None, Some(2), None);
        let mut q = QuotaAccount::new();
        q.acquire(&l, 0, at(10), 1).unwrap();
        q.acquire(&l, 0, at(20), 1).unwrap();
        assert_eq!(
            q.acquire(&l, 0, at(30), 1),
            Err(Refusal { limit: QuotaLimit::RequestsPerMinute, retry_after: Duration::from_secs(40) })
        );
        assert!(q.acquire(&l, 0, at(69), 1).is_err());
        assert!(q.acquire(&l, 0, at(70), 1).is_ok());
        assert_eq!(q.starts_in_window(at(70)), 2);
    }

    #[test]
    fn tpm_charges_the_estimate_and_settle_corrects_it() {
        let l = limits(None, None, Some(1000));
        let mut q = QuotaAccount::new();
        let a = q.acquire(&l, 600, at(0), 1).unwrap();
        q.acquire(&l, 300, at(10), 1).unwrap();
        let refused = q.acquire(&l, 200, at(20), 1).unwrap_err();
        // 900 used; 200 more needs the 600 of t=0 to leave: at 60 s.
        assert_eq!(refused, Refusal { limit: QuotaLimit::TokensPerMinute, retry_after: Duration::from_secs(40) });
        q.settle(a.0, a.1, 100);
        assert_eq!(q.tokens_in_window(), 400);
        assert!(q.acquire(&l, 200, at(20), 1).is_ok());
    }

    #[test]
    fn a_request_larger_than_tpm_runs_alone() {
        let l = limits(None, None, Some(100));
        let mut q = QuotaAccount::new();
        q.acquire(&l, 10, at(0), 1).unwrap();
        q.acquire(&l, 10, at(5), 1).unwrap();
        let refused = q.acquire(&l, 500, at(6), 1).unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(59), "waits for the whole window to empty");
        assert!(q.acquire(&l, 500, at(65), 1).is_ok());
    }

    #[test]
    fn a_zero_limit_refuses_without_panicking() {
        let mut q = QuotaAccount::new();
        let refused = q.acquire(&limits(None, Some(0), None), 0, at(0), 1).unwrap_err();
        assert_eq!(refused, Refusal { limit: QuotaLimit::RequestsPerMinute, retry_after: RATE_WINDOW });
        assert_eq!(q.acquire(&limits(Some(0), None, None), 0, at(0), 1).unwrap_err().limit, QuotaLimit::Concurrency);
    }

    #[test]
    fn a_clock_that_steps_back_keeps_the_window_ordered() {
        let l = limits(None, Some(2), None);
        let mut q = QuotaAccount::new();
        q.acquire(&l, 0, at(100), 1).unwrap();
        q.acquire(&l, 0, at(50), 1).unwrap();
        // at 111 the start of t=50 has left; the one of t=100 has not
        assert!(q.acquire(&l, 0, at(111), 1).is_ok());
        assert_eq!(q.starts_in_window(at(111)), 2);
    }

    #[test]
    fn the_refusal_names_the_first_limit_and_the_longest_wait() {
        let l = limits(Some(1), Some(1), None);
        let mut q = QuotaAccount::new();
        q.acquire(&l, 0, at(0), 1).unwrap();
        assert_eq!(q.acquire(&l, 0, at(15), 1), Err(Refusal { limit: QuotaLimit::Concurrency, retry_after: Duration::from_secs(45) }));
    }
}
