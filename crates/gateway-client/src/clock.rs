//! The client's clock: tokio's monotonic time, so that tests on a paused runtime run the whole
//! pipeline (gates, back-off, naps, stall bound) in virtual time.

use gateway_core::time::{Clock, Timestamp};

/// `Clock` on `tokio::time::Instant`, counted from the clock's creation.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose time line starts now.
    pub fn new() -> Self {
        TokioClock { origin: tokio::time::Instant::now() }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX))
    }
}
