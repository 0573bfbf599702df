//! The pure parts of admission (SPEC §6): the reasons a candidate is skipped, what a call does
//! when no candidate is runnable, and how long it naps. The async admission unit that walks the
//! candidates (`SourceAdmission`, in `gateway-client`) is built on these, once for every call kind.

use crate::policy::WaitMode;
use crate::random::unit;
use rand_core::Rng;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Why a candidate source was skipped, in the order the checks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// 1. The memo says skip until a known time (a gate rejection).
    Cooldown,
    /// 2. AIMD in-flight ≥ limit (not a gate rejection).
    AdaptivePaced,
    /// 3. `try_enter` denied (a gate rejection).
    CircuitOpen,
    /// 4. The quota permit was refused (not a gate rejection).
    RateLimited,
}

impl SkipReason {
    /// Whether the breaker side refused the source (memo or gate), as opposed to quota or AIMD.
    pub const fn is_gate_rejection(self) -> bool {
        matches!(self, SkipReason::Cooldown | SkipReason::CircuitOpen)
    }

    /// The snake_case name used in reasons and telemetry.
    pub const fn as_str(self) -> &'static str {
        match self {
            SkipReason::Cooldown => "cooldown",
            SkipReason::AdaptivePaced => "adaptive_paced",
            SkipReason::CircuitOpen => "circuit_open",
            SkipReason::RateLimited => "rate_limited",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a call does when no candidate was runnable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// End with `CircuitOpen`, carrying `retry_after(all sources)`.
    FailCircuitOpen,
    /// End with `RateLimited`: every source the breaker did not refuse asked the call, by a
    /// 429's Retry-After, to wait longer than its stall budget allows.
    FailRateLimited,
    /// End with `AllSourcesExhausted("quota_exhausted")`.
    FailQuotaExhausted,
    /// End with `AllSourcesExhausted("stalled")`.
    FailStalled,
    /// Nap and pick again. With `gate_hint` the nap is based on `retry_after` of the sources
    /// the breaker refused; with `pushback` on the end of the shortest 429 pushback (a certain
    /// time within the stall budget: the wait is for it, not for capacity); with neither the
    /// hint is 0 (some source is only quota- or AIMD-blocked: the call waits in line).
    Wait {
        /// Whether to ask the gates for the hint.
        gate_hint: bool,
        /// Whether the end of a pushback bounds the hint.
        pushback: bool,
    },
}

/// SPEC §6 "No candidate runnable", in its exact order: the breaker side first, then the
/// quota side, then the stall check. Of the sources a 429 asked to be left alone, `pushed_past`
/// asked for longer than the call's stall budget: waiting for them cannot end in time, so when
/// they and the breaker's refusals are all there is, the call ends now (unless the breaker side
/// may be waited for: `circuit_open = wait`). `pushed_within` asked for less: their pushback
/// ends at a known time, which the call waits for like an open gate's retry moment (out of
/// line, and never ended as a quota refusal: it is the provider's pushback, not capacity).
pub(crate) fn when_blocked(
    gate_rejections: usize,
    (pushed_past, pushed_within): (usize, usize),
    sources: usize,
    circuit_open: WaitMode,
    quota_full: WaitMode,
    stalled: bool,
) -> Blocked {
    let all_gate_rejected = gate_rejections >= sources;
    if all_gate_rejected && circuit_open == WaitMode::FailFast {
        return Blocked::FailCircuitOpen;
    }
    if pushed_past > 0 && gate_rejections + pushed_past >= sources && (gate_rejections == 0 || circuit_open == WaitMode::FailFast) {
        return Blocked::FailRateLimited;
    }
    let capacity_blocked = sources.saturating_sub(gate_rejections + pushed_past + pushed_within) > 0;
    if capacity_blocked && quota_full == WaitMode::FailFast {
        return Blocked::FailQuotaExhausted;
    }
    if stalled {
        return Blocked::FailStalled;
    }
    if capacity_blocked {
        return Blocked::Wait { gate_hint: false, pushback: false };
    }
    // Gate-refused and pushed-back sources only: wait for the first of them to free.
    Blocked::Wait { gate_hint: gate_rejections > 0 || pushed_within == 0, pushback: pushed_within > 0 }
}

/// The nap of a waiting call: `hint + poll·(0.5 + 0.5·u)` (just the jittered poll when the hint
/// is 0), never longer than `remaining_stall + poll`.
pub(crate) fn nap<R: Rng + ?Sized>(hint: Duration, poll: Duration, remaining_stall: Duration, rng: &mut R) -> Duration {
    let jittered_poll = poll.mul_f64(0.5 + 0.5 * unit(rng));
    (hint + jittered_poll).min(remaining_stall + poll)
}

#[cfg(test)]
mod tests {
    use super::*;
    use WaitMode::{FailFast, Wait};
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    #[test]
    fn only_the_breaker_side_counts_as_gate_rejection() {
        let gate: Vec<_> = [SkipReason::Cooldown, SkipReason::AdaptivePaced, SkipReason::CircuitOpen, SkipReason::RateLimited]
            .into_iter()
            .filter(|r| r.is_gate_rejection())
            .collect();
        assert_eq!(gate, [SkipReason::Cooldown, SkipReason::CircuitOpen]);
    }

    #[test]
    fn decision_table() {
        let cases = [
            // (gate_rejections, (pushed past, within), sources, circuit_open, quota_full, stalled) → decision
            ((3, (0, 0), 3, FailFast, Wait, false), Blocked::FailCircuitOpen),
            ((3, (0, 0), 3, FailFast, Wait, true), Blocked::FailCircuitOpen),
            ((3, (0, 0), 3, Wait, FailFast, false), Blocked::Wait { gate_hint: true, pushback: false }),
            ((3, (0, 0), 3, Wait, Wait, true), Blocked::FailStalled),
            ((2, (0, 0), 3, FailFast, Wait, false), Blocked::Wait { gate_hint: false, pushback: false }),
            ((2, (0, 0), 3, FailFast, FailFast, false), Blocked::FailQuotaExhausted),
            ((0, (0, 0), 1, Wait, Wait, true), Blocked::FailStalled),
            // a single-source scope follows the same rule as any other
            ((1, (0, 0), 1, FailFast, Wait, false), Blocked::FailCircuitOpen),
            ((1, (0, 0), 1, Wait, Wait, false), Blocked::Wait { gate_hint: true, pushback: false }),
            // a Retry-After past the stall budget: end now, unless an open gate may be waited for
            ((0, (1, 0), 1, FailFast, Wait, false), Blocked::FailRateLimited),
            ((0, (1, 0), 1, Wait, Wait, false), Blocked::FailRateLimited),
            ((1, (1, 0), 2, FailFast, Wait, false), Blocked::FailRateLimited),
            ((1, (1, 0), 2, Wait, Wait, false), Blocked::Wait { gate_hint: true, pushback: false }),
            ((0, (1, 0), 2, FailFast, Wait, false), Blocked::Wait { gate_hint: false, pushback: false }),
            // a Retry-After within the stall budget: wait for its end, whatever quota_full says
            ((0, (0, 1), 1, FailFast, FailFast, false), Blocked::Wait { gate_hint: false, pushback: true }),
            ((1, (0, 1), 2, FailFast, FailFast, false), Blocked::Wait { gate_hint: true, pushback: true }),
            ((0, (1, 1), 2, FailFast, FailFast, false), Blocked::Wait { gate_hint: false, pushback: true }),
            ((0, (0, 1), 1, Wait, Wait, true), Blocked::FailStalled),
            // …but a source only quota-blocked beside it is a capacity wait, in line
            ((0, (0, 1), 2, FailFast, Wait, false), Blocked::Wait { gate_hint: false, pushback: false }),
            ((0, (0, 1), 2, FailFast, FailFast, false), Blocked::FailQuotaExhausted),
        ];
        for ((g, p, n, co, qf, stalled), expected) in cases {
            assert_eq!(when_blocked(g, p, n, co, qf, stalled), expected, "{g}+{p:?}/{n} {co:?} {qf:?} stalled={stalled}");
        }
    }

    #[test]
    fn nap_adds_a_jittered_poll_and_respects_the_stall_budget() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let poll = Duration::from_millis(50);
        for _ in 0..100 {
            let n = nap(Duration::ZERO, poll, Duration::from_secs(300), &mut rng);
            assert!(n >= poll / 2 && n <= poll, "{n:?}");
            let n = nap(Duration::from_secs(20), poll, Duration::from_secs(300), &mut rng);
            assert!(n >= Duration::from_millis(20_025) && n <= Duration::from_millis(20_050), "{n:?}");
        }
        let n = nap(Duration::from_secs(20), poll, Duration::from_secs(1), &mut rng);
        assert_eq!(n, Duration::from_millis(1050));
    }
}
