//! The cases of `budget_reference.rs`, drawn from a seeded RNG: chains and policies whose
//! numbers land on the reference's rounding ties, breaker scripts, and one broken rule in some.
//! The draws must never change: the committed outputs are fingerprinted by the case lines.
//! `unit` and `below` are gateway-core's `random::unit` and `random::below`, copied so that these
//! cases depend on no other crate's helpers.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use serde_json::{Value, json};

/// The RNG the cases are drawn from, and what each draw means.
pub struct Draw(ChaCha8Rng);

impl Draw {
    /// The draws of `seed`.
    pub fn seeded(seed: u64) -> Draw {
        Draw(ChaCha8Rng::seed_from_u64(seed))
    }

    /// A uniform float in `[0, 1)` from the top 53 bits of one `u64`.
    fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform index in `0..n` (Lemire's multiply-shift), 0 when `n` is 0.
    fn below(&mut self, n: usize) -> usize {
        usize::try_from((u128::from(self.0.next_u64()) * n as u128) >> 64).unwrap_or(0)
    }

    /// A uniform integer in `lo..=hi`.
    fn int(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(usize::try_from(hi - lo + 1).unwrap()) as u64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }

    /// Decimal rates with few digits matter most: their powers and products land exactly on the
    /// rounding ties of `toFixed(8)`, where the last bit of `Math.pow` decides.
    fn failure_rate(&mut self) -> f64 {
        match self.below(12) {
            0 => 0.0,
            1 | 2 => self.unit(),
            3 => self.int(0, 999) as f64 / 1000.0,
            4 => self.tie_rate(),
            5 => self.int(0, 99) as f64 / 100.0,
            6 => self.int(0, 19) as f64 / 20.0,
            7 => self.pick(&[0.5, 0.25, 0.75, 0.125, 0.375, 0.625, 0.875]),
            // log-uniform in [1e-8, 1e-1]
            8 => 10f64.powf(-1.0 - 7.0 * self.unit()),
            // close to one: 1 − 10^−[1, 16], or the largest double below one
            9 => (1.0 - 10f64.powf(-1.0 - 15.0 * self.unit())).min(1.0 - f64::EPSILON / 2.0),
            _ => self.pick(&[0.01, 0.02, 0.03, 0.1, 0.2, 0.3, 0.9, 0.99, 0.999_999, 1.0 - f64::EPSILON / 2.0, 5e-324, 1e-300]),
        }
    }

    fn cost(&mut self) -> u64 {
        match self.below(6) {
            0 => 0,
            1 | 2 => self.int(1, 5000),
            3 => self.int(1, 1_000_000),
            4 => self.int(1, 1_000_000_000),
            _ => self.pick(&[1, 1_055, 1_643, 1_088, 999_999_999_999, 1 << 40]),
        }
    }

    fn latency(&mut self) -> f64 {
        match self.below(6) {
            0 => 0.0,
            1 | 2 => self.int(0, 2000) as f64,
            3 => self.unit() * 1000.0,
            4 => self.unit() * 1e6,
            _ => self.pick(&[0.5, 1e-9, 160.0, 620.0, 1e9, 2.5]),
        }
    }

    fn max_retries(&mut self) -> u64 {
        match self.below(10) {
            0 => 0,
            1..=3 => self.int(1, 3),
            4..=7 => self.int(2, 8),
            8 => self.int(9, 12),
            _ => self.int(13, 20),
        }
    }

    fn threshold(&mut self) -> Value {
        match self.below(10) {
            0..=3 => json!("Infinity"),
            4 => json!(1),
            _ => json!(self.int(2, 10)),
        }
    }

    /// A rate `k/1000` with `k` an odd multiple of 5: its cube has nine decimals ending in 5, an
    /// exact tie for `toFixed(8)` but for the last bits of the input and of `Math.pow`.
    fn tie_rate(&mut self) -> f64 {
        (self.int(0, 99) * 10 + 5) as f64 / 1000.0
    }

    pub fn plan_input(&mut self) -> Value {
        // One case in ten spends two retries on every node, each failing at a tie rate.
        let ties = self.chance(0.1);
        let count = if self.chance(0.05) { self.int(6, 8) } else { self.int(1, 5) };
        let style = self.below(4);
        let nodes: Vec<Value> = (0..count)
            .map(|i| {
                let id = match style {
                    0 => format!("n{i}"),
                    1 => format!("search.rerank.{i}"),
                    2 => format!("检索{i}"),
                    _ => format!(" pad {i} "),
                };
                json!({
                    "id": id,
                    "failureRate": if ties { self.tie_rate() } else { self.failure_rate() },
                    "attemptCostMicros": self.cost(),
                    "latencyMs": self.latency(),
                    "maxRetries": if ties { self.int(2, 4) } else { self.max_retries() },
                    "required": self.chance(0.6),
                })
            })
            .collect();
        let budget = match self.below(10) {
            0 => 0,
            1..=3 => self.int(1, 6),
            4..=7 => self.int(7, 30),
            8 => self.int(31, 80),
            _ => self.pick(&[1000, u64::from(u32::MAX)]),
        };
        let (budget, threshold) = if ties { (2 * count, json!(3)) } else { (budget, self.threshold()) };
        let policy = json!({"globalRetryBudget": budget, "consecutiveFailureThreshold": threshold, "halfOpenAfterCalls": self.int(1, 5)});
        json!({"nodes": nodes, "policy": policy})
    }

    /// Breaks exactly one rule of the reference's validation.
    pub fn break_plan(&mut self, input: &mut Value) {
        let n = input["nodes"].as_array().unwrap().len();
        let k = self.below(n);
        let field = |input: &mut Value, name: &str, value: Value| input["nodes"][k][name] = value;
        match self.below(16) {
            0 => input["nodes"] = json!([]),
            1 => field(input, "id", json!(self.pick(&["", "  "]))),
            2 => {
                let copy = input["nodes"][0].clone();
                input["nodes"].as_array_mut().unwrap().push(copy);
            }
            3 | 4 => field(input, "failureRate", json!(self.pick(&[1.0, -0.1, 1.5, -5e-324]))),
            5 => field(input, "attemptCostMicros", json!(self.pick(&[1.5, -1.0, 0.001]))),
            6 => field(input, "latencyMs", json!(self.pick(&[-1.0, -0.001]))),
            7 | 8 => field(input, "maxRetries", json!(self.pick(&[0.5, -1.0, 2.25]))),
            9 | 10 => input["policy"]["globalRetryBudget"] = json!(self.pick(&[-1.0, 2.5])),
            11..=13 => input["policy"]["consecutiveFailureThreshold"] = self.pick(&[json!(0), json!(1.5), json!(-1), json!("lots")]),
            _ => input["policy"]["halfOpenAfterCalls"] = json!(self.pick(&[0.0, 1.5, -2.0])),
        }
    }

    pub fn trace_input(&mut self) -> Value {
        let threshold = if self.chance(0.9) { self.int(1, 6) } else { self.pick(&[10, 1000]) };
        let half_open = if self.chance(0.9) { self.int(1, 6) } else { self.pick(&[20, 50]) };
        let len = self.int(0, 40);
        let p = self.pick(&[0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]);
        let calls: Vec<bool> = (0..len).map(|_| self.chance(p)).collect();
        json!({"breaker": {"failureThreshold": threshold, "halfOpenAfterCalls": half_open}, "calls": calls})
    }

    pub fn break_trace(&mut self, input: &mut Value) {
        match self.below(2) {
            0 => input["breaker"]["failureThreshold"] = self.pick(&[json!(0), json!(1.5), json!("Infinity")]),
            _ => input["breaker"]["halfOpenAfterCalls"] = json!(self.pick(&[0.0, 2.5])),
        }
    }
}
