//! [`Timer`]: how a mock waits out a provider's delay.

use std::time::Duration;

/// The last stretch of a [`Timer::Precise`] wait, slept on a blocking thread: more than the
/// tick tokio's timer may fire late by.
const PRECISE_TAIL: Duration = Duration::from_millis(2);

/// How a mock waits out a delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Timer {
    /// tokio's timer: it follows a paused (virtual) clock, and fires on its 1 ms tick, late by
    /// up to a tick (a zero delay waits for no timer at all).
    #[default]
    Tokio,
    /// Real time to a tenth of a millisecond: tokio's timer to [`PRECISE_TAIL`] short of the
    /// deadline, then the operating system's sleep on a blocking thread. For a run in real time
    /// at a small time scale, where tokio's late tick would be a provider's latency scaled up
    /// (at `--time-scale 0.05`, 1 ms late is 20 ms of scenario time on every answer). Never
    /// under a paused clock: it does not see the thread's sleep.
    Precise,
}

impl Timer {
    /// Waits `delay`.
    // `Precise` is a clock: it reads real time, which is its job.
    #[allow(clippy::disallowed_methods)]
    pub async fn wait(self, delay: Duration) {
        if delay.is_zero() {
            return;
        }
        match self {
            Timer::Tokio => tokio::time::sleep(delay).await,
            Timer::Precise => {
                let deadline = std::time::Instant::now() + delay;
                if let Some(coarse) = delay.checked_sub(PRECISE_TAIL) {
                    tokio::time::sleep(coarse).await;
                }
                let tail = deadline.saturating_duration_since(std::time::Instant::now());
                if !tail.is_zero() {
                    // A blocking pool that is shut down (the runtime is going away) only cuts
                    // the tail short.
                    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(tail)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_tokio_timer_follows_a_paused_clock() {
        let start = tokio::time::Instant::now();
        Timer::Tokio.wait(Duration::from_secs(3600)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(3600));
        Timer::Tokio.wait(Duration::ZERO).await;
        assert_eq!(start.elapsed(), Duration::from_secs(3600));
    }

    // Real time: the one test here that reads the wall clock, over a few milliseconds. It
    // asserts only the lower bound (a loaded machine may be late, never early).
    #[allow(clippy::disallowed_methods)]
    #[tokio::test]
    async fn the_precise_timer_is_never_early() {
        for ms in [0, 1, 3, 5] {
            let start = std::time::Instant::now();
            Timer::Precise.wait(Duration::from_millis(ms)).await;
            assert!(start.elapsed() >= Duration::from_millis(ms), "{ms} ms took {:?}", start.elapsed());
        }
    }
}
