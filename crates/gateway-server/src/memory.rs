//! The process-wide budget for what calls hold of upstream answers (`max_held_bytes`): its
//! default, a quarter of the memory the process may use (cgroup `memory.max`, `RLIMIT_AS`, else
//! the machine's), and the check that refuses a new call with 503 while the attempts in flight
//! hold that much, so that the process never nears its limit (it never aborts for it).

use crate::openai::ApiError;
use axum::http::StatusCode;
use gateway_http::HeldBytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Used when no limit can be read at all.
const FALLBACK_BYTES: u64 = 4 << 30;

/// The bytes held by the calls in flight, against the budget; new calls are refused at it.
#[derive(Debug)]
pub struct HeldBudget {
    held: Arc<HeldBytes>,
    max: usize,
    refused: AtomicU64,
}

impl HeldBudget {
    /// A budget of `max` bytes over what `held` counts.
    pub fn new(held: Arc<HeldBytes>, max: usize) -> Self {
        HeldBudget { held, max, refused: AtomicU64::new(0) }
    }

    /// The bytes held now.
    pub fn held(&self) -> usize {
        self.held.get()
    }

    /// The budget.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Calls refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// A new call may start unless the attempts in flight hold the budget: then 503 with
    /// `Retry-After: 1` (what they hold goes as they end), counted.
    pub fn admit(&self) -> Result<(), ApiError> {
        let held = self.held();
        if held < self.max {
            return Ok(());
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        let message =
            format!("the gateway holds {held} bytes of upstream answers, its max_held_bytes budget of {} bytes; retry shortly", self.max);
        Err(ApiError {
            retry_after: Some(1),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "max_held_bytes", message)
        })
    }
}

/// `max_held_bytes` when the config leaves it out: a quarter of [`memory_limit`].
pub fn default_max_held_bytes() -> usize {
    usize::try_from(memory_limit() / 4).unwrap_or(usize::MAX)
}

/// The memory the process may use: the least of its cgroup's `memory.max` (v2, or v1's
/// `memory.limit_in_bytes`) and `RLIMIT_AS`, where set; else the machine's memory; else 4 GiB.
pub fn memory_limit() -> u64 {
    let address_space = rustix::process::getrlimit(rustix::process::Resource::As).current;
    [cgroup_limit(), address_space].into_iter().flatten().min().or_else(machine_memory).unwrap_or(FALLBACK_BYTES)
}

/// The process's cgroup memory limit, if it has one.
fn cgroup_limit() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    // v2: one line `0::/path`; its limit is in the unified hierarchy.
    let v2 = cgroups.lines().find_map(|line| line.strip_prefix("0::")).map(|path| format!("/sys/fs/cgroup{}/memory.max", path.trim()));
    let v1 = cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "memory").then(|| format!("/sys/fs/cgroup/memory{}/memory.limit_in_bytes", path.trim()))
    });
    [v2, v1].into_iter().flatten().find_map(|file| limit_in(&std::fs::read_to_string(file).ok()?))
}

/// A cgroup limit file's value: a byte count, or none for `max` (and for v1's "unlimited",
/// a count near `i64::MAX`).
fn limit_in(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok().filter(|&bytes| bytes < 1 << 60)
}

/// The machine's memory (`MemTotal` in /proc/meminfo).
fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo.lines().find_map(|line| line.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse::<u64>().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::{HeldBudget, limit_in, memory_limit};
    use gateway_http::HeldBytes;
    use std::sync::Arc;

    #[test]
    fn a_cgroup_limit_is_a_count_and_max_is_none() {
        assert_eq!(limit_in("536870912\n"), Some(512 << 20));
        assert_eq!(limit_in("max\n"), None);
        assert_eq!(limit_in("9223372036854771712"), None, "v1's unlimited");
        assert_eq!(limit_in("garbage"), None);
        assert!(memory_limit() > 0);
    }

    #[test]
    fn a_call_is_refused_while_the_budget_is_held() {
        let budget = HeldBudget::new(Arc::new(HeldBytes::default()), 0);
        let refused = budget.admit().unwrap_err();
        assert_eq!((refused.status.as_u16(), refused.code.as_str(), refused.retry_after), (503, "max_held_bytes", Some(1)));
        assert!(refused.message.contains("max_held_bytes budget of 0 bytes"), "{}", refused.message);
        assert_eq!(budget.refused(), 1);
        assert!(HeldBudget::new(Arc::new(HeldBytes::default()), 1).admit().is_ok());
    }
}
