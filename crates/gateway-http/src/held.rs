//! What the adapter holds of upstream answers, in bytes: each attempt's share under its budget
//! (`max_response_bytes`: a whole body being read, an assembled stream, the text kept for a
//! structured check, the events before a stream's commit point), and the sum over every attempt
//! in flight ([`HeldBytes`], which a proxy reads to refuse new calls before memory runs out).

use gateway_core::request::Outcome;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The bytes held by every attempt in flight of the upstreams that share it.
#[derive(Debug, Default)]
pub struct HeldBytes(AtomicUsize);

impl HeldBytes {
    /// The bytes held now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// One attempt's share of what is held, at most `limit` bytes; clones share it (the stream
/// reader and the structured check of one attempt). Everything it holds is handed back when
/// the last clone is dropped.
#[derive(Clone, Debug)]
pub(crate) struct Held(Arc<Share>);

#[derive(Debug)]
struct Share {
    all: Arc<HeldBytes>,
    held: AtomicUsize,
    limit: usize,
}

impl Held {
    /// A share of `all` of at most `limit` bytes.
    pub(crate) fn new(all: &Arc<HeldBytes>, limit: usize) -> Self {
        Held(Arc::new(Share { all: all.clone(), held: AtomicUsize::new(0), limit }))
    }

    /// Holds `bytes` more; past the limit nothing more is held and the attempt ends
    /// `Transient(body_too_large)`, its source not asked again in the call.
    pub(crate) fn take(&self, bytes: usize) -> Result<(), Outcome> {
        // One step, so that clones taking at once cannot pass the limit together.
        let limit = self.0.limit;
        let taken = self.0.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| held.checked_add(bytes).filter(|&h| h <= limit));
        if taken.is_err() {
            return Err(too_large());
        }
        self.0.all.0.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Whether `bytes` more would fit (as [`take`](Held::take) answers), holding nothing.
    pub(crate) fn fits(&self, bytes: usize) -> Result<(), Outcome> {
        let held = self.0.held.load(Ordering::Relaxed);
        if held.saturating_add(bytes) > self.0.limit {
            return Err(too_large());
        }
        Ok(())
    }

    /// Hands back `bytes` of what it holds (what they were held for has gone on).
    pub(crate) fn give_back(&self, bytes: usize) {
        let given = self.0.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| Some(held.saturating_sub(bytes)));
        let given = given.map_or(0, |before| before.min(bytes));
        self.0.all.0.fetch_sub(given, Ordering::Relaxed);
    }

    /// The bytes this attempt holds.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.0.held.load(Ordering::Relaxed)
    }
}

fn too_large() -> Outcome {
    Outcome::too_large("body_too_large")
}

impl Drop for Share {
    fn drop(&mut self) {
        self.all.0.fetch_sub(*self.held.get_mut(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::{Held, HeldBytes};
    use std::sync::Arc;

    #[test]
    fn a_share_holds_up_to_its_limit_and_hands_everything_back() {
        let all = Arc::new(HeldBytes::default());
        let one = Held::new(&all, 100);
        let other = Held::new(&all, 100);
        one.take(60).unwrap();
        one.clone().take(40).unwrap();
        other.take(10).unwrap();
        assert_eq!((one.held(), all.get()), (100, 110));
        let past = one.take(1).unwrap_err();
        assert_eq!((past.detail.as_str(), past.source_spent, one.held()), ("body_too_large", true, 100), "nothing more is held");
        assert!(one.fits(0).is_ok() && one.fits(1).is_err(), "fits holds nothing");
        one.give_back(70);
        assert_eq!((one.held(), all.get()), (30, 40));
        one.give_back(1000);
        assert_eq!((one.held(), all.get()), (0, 10), "no more is given back than was held");
        one.take(5).unwrap();
        drop(one);
        assert_eq!(all.get(), 10, "a dropped share hands back what it held");
        drop(other);
        assert_eq!(all.get(), 0);
    }
}
