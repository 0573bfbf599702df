//! Time as the core sees it: a caller-supplied monotonic [`Timestamp`] in milliseconds.
//!
//! Nothing in `gateway-core` reads a clock. Every operation that changes state takes `now`;
//! adapters own the clock (tokio's paused clock in tests, Redis `TIME` for shared gates).
//! Milliseconds keep the arithmetic in integers, so the Redis Lua scripts reproduce it exactly
//! (Lua numbers are doubles, exact for integers below 2^53).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A point on a monotonic time line, in whole milliseconds since an origin chosen by the clock
/// that produced it. Only differences between timestamps from one clock are meaningful.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The origin of the time line.
    pub const ZERO: Timestamp = Timestamp(0);

    /// A timestamp `ms` milliseconds after the origin.
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// A timestamp `secs` whole seconds after the origin (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Timestamp(secs.saturating_mul(1000))
    }

    /// Milliseconds since the origin.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at the end of the time line.
    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(millis(d)))
    }

    /// `self - earlier`, or zero when `earlier` is later (a clock that stepped back).
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

/// Whole milliseconds of `d`, saturating at `u64::MAX`. Sub-millisecond parts are dropped:
/// policies are validated to whole-millisecond resolution.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Monotonic time source. Implemented by adapters (tokio clock, Redis `TIME`, a manual clock in
/// tests), never by the core.
pub trait Clock: Send + Sync {
    /// The current monotonic time.
    fn now(&self) -> Timestamp;
}

/// Wall-clock time, kept apart from monotonic time: it is only needed to turn an HTTP-date
/// `Retry-After` into a delay.
pub trait WallClock: Send + Sync {
    /// Seconds since the Unix epoch.
    fn unix_now(&self) -> Duration;
}

const _: fn(&dyn Clock, &dyn WallClock) = |_, _| {};

/// A clock that moves only when told: the virtual time of tests and simulations. Shared by
/// reference (`Arc<ManualClock>`), so a test and the adapter it drives see one time line.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: std::sync::atomic::AtomicU64,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock { now_ms: std::sync::atomic::AtomicU64::new(start.as_millis()) }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let _ = self.now_ms.fetch_update(std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst, |ms| {
            Some(ms.saturating_add(millis(d)))
        });
    }

    /// Sets the clock to `t` (forward or back: tests of a clock that stepped back use it).
    pub fn set(&self, t: Timestamp) {
        self.now_ms.store(t.as_millis(), std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now_ms.load(std::sync::atomic::Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        let late = Timestamp::from_millis(u64::MAX - 1);
        assert_eq!(late.saturating_add(Duration::from_secs(10)).as_millis(), u64::MAX);
        assert_eq!(Timestamp::ZERO.saturating_since(late), Duration::ZERO);
        assert_eq!(Timestamp::from_secs(3).saturating_since(Timestamp::from_millis(500)), Duration::from_millis(2500));
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp::from_secs(5));
        assert_eq!(clock.now(), Timestamp::from_secs(5));
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now(), Timestamp::from_millis(6500));
        clock.set(Timestamp::from_secs(1));
        assert_eq!(clock.now(), Timestamp::from_secs(1));
        clock.set(Timestamp::from_millis(u64::MAX));
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now().as_millis(), u64::MAX);
    }
}
