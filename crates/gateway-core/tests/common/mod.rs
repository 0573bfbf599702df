//! Helpers shared by the gateway-core integration tests: gate parameters from the seed's
//! numbers.

#![allow(dead_code, clippy::unwrap_used)]

use gateway_core::breaker::GateParams;
use gateway_core::policy::BreakerConfig;
use std::time::Duration;

/// The seed's breaker: fail_threshold 5, cooldown 60 s, defaults otherwise.
pub fn seed_breaker() -> BreakerConfig {
    BreakerConfig { fail_threshold: Some(5), cooldown_s: Some(60.0), ..BreakerConfig::default() }
}

/// Gate parameters for a source with the given `max_concurrency` and 30 s timeouts.
pub fn params(config: BreakerConfig, max_concurrency: u32) -> GateParams {
    GateParams::new(&config.resolve("test.breaker").unwrap(), max_concurrency, Duration::from_secs(30), Duration::from_secs(30))
}
