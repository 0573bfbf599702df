//! The time line every process of a several-process run shares.

use gateway_core::time::{Clock, Timestamp};

/// Milliseconds since a Unix-time origin shared by every process of a run: one time line for
/// their events.
#[derive(Clone, Copy, Debug)]
pub struct SharedClock {
    pub(super) origin_unix_ms: u64,
}

impl SharedClock {
    /// A clock whose zero is `origin_unix_ms`.
    pub fn at(origin_unix_ms: u64) -> Self {
        SharedClock { origin_unix_ms }
    }

    /// A clock whose zero is now.
    pub fn starting_now() -> Self {
        SharedClock { origin_unix_ms: unix_ms() }
    }
}

// The one wall-clock read of the soak: processes share no other time line.
#[allow(clippy::disallowed_methods)]
fn unix_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

impl Clock for SharedClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(unix_ms().saturating_sub(self.origin_unix_ms))
    }
}
