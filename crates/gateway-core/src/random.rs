//! Draws from an injected RNG, defined here once so that every backend and simulation turns the
//! same seed into the same numbers whatever `rand` version sits elsewhere in the tree.

use rand_core::Rng;

/// A uniform float in `[0, 1)` with 53 random bits.
pub fn unit<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    // The top 53 bits of a u64 fill an f64 mantissa exactly.
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A uniform index in `0..n` (Lemire's multiply-shift; the bias is below 2^-64 · n).
/// Returns 0 when `n` is 0 so that callers never divide by zero.
pub(crate) fn below<R: Rng + ?Sized>(rng: &mut R, n: usize) -> usize {
    let wide = u128::from(rng.next_u64()) * n as u128;
    // The high half of a 64×64 product is < n, so it fits back into usize.
    usize::try_from(wide >> 64).unwrap_or(0)
}

/// Incarnation ids (see [`crate::breaker::Fence`]): distinct, non-zero, below 2^63 (so that a
/// backend takes one as an integer, with no text to build) and spread over those bits, from a seed the backend draws at start (so two processes, or a process before and
/// after a restart, never draw the same ones). SplitMix64 over a shared counter: lock-free.
#[derive(Debug)]
pub struct Incarnations {
    next: std::sync::atomic::AtomicU64,
}

impl Incarnations {
    /// The ids of `seed`.
    pub fn seeded(seed: u64) -> Self {
        Incarnations { next: std::sync::atomic::AtomicU64::new(seed) }
    }

    /// The next id.
    pub fn draw(&self) -> u64 {
        let mut z = self.next.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 1).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    #[test]
    fn unit_stays_in_range_and_below_covers_every_index() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut seen = [0u32; 5];
        for _ in 0..5000 {
            let u = unit(&mut rng);
            assert!((0.0..1.0).contains(&u));
            seen[below(&mut rng, 5)] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
        assert_eq!(below(&mut rng, 0), 0);
    }

    #[test]
    fn incarnations_are_distinct_and_never_zero() {
        let ids = Incarnations::seeded(0);
        let drawn: std::collections::HashSet<u64> = (0..10_000).map(|_| ids.draw()).collect();
        assert_eq!(drawn.len(), 10_000);
        assert!(!drawn.contains(&0) && drawn.iter().all(|&id| id < 1 << 63));
        assert_ne!(Incarnations::seeded(1).draw(), Incarnations::seeded(2).draw());
    }
}
