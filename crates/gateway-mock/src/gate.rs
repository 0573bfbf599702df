//! [`Gate`]: answers (or points of a stream) held until the test lets them through.

use std::sync::Arc;
use tokio::sync::Semaphore;

/// A gate the test holds answers at: each [`release_one`](Gate::release_one) lets one waiting
/// answer (or the next to arrive) through; [`release_all`](Gate::release_all) opens it for good.
/// Clones are the same gate.
#[derive(Clone, Debug)]
pub struct Gate {
    passes: Arc<Semaphore>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate { passes: Arc::new(Semaphore::new(0)) }
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Lets one held answer through: the one waiting longest, or the next to arrive.
    pub fn release_one(&self) {
        self.passes.add_permits(1);
    }

    /// Lets every held answer through, and every later one without waiting.
    pub fn release_all(&self) {
        // A closed semaphore fails every acquire at once: that failure is the open gate.
        self.passes.close();
    }

    /// Waits until the gate lets the caller through.
    pub async fn pass(&self) {
        if let Ok(pass) = self.passes.acquire().await {
            pass.forget();
        }
    }
}
