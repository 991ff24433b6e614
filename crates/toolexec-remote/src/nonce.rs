//! The bounded cache of nonces seen within the timestamp window.

use std::collections::{HashSet, VecDeque};

use parking_lot::Mutex;

/// Why a nonce was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceRejection {
    /// Seen before, within the window.
    Replayed,
    /// The cache holds `capacity` nonces that are all still inside the
    /// window: the server refuses new requests rather than forget one.
    Full,
}

/// Remembers each nonce until its request's timestamp leaves the window,
/// so a captured request cannot be replayed while its timestamp is still
/// accepted. Bounded: when full of live nonces it refuses (fails closed).
#[derive(Debug)]
pub struct NonceCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    seen: HashSet<String>,
    /// `(expires at, unix seconds; nonce)`, in insertion order.
    order: VecDeque<(u64, String)>,
}

impl NonceCache {
    /// A cache of at most `capacity` nonces.
    pub fn new(capacity: usize) -> Self {
        NonceCache {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Records `nonce`, valid until `expires` (unix seconds), at time `now`.
    pub fn check_and_insert(
        &self,
        nonce: &str,
        expires: u64,
        now: u64,
    ) -> Result<(), NonceRejection> {
        let mut inner = self.inner.lock();
        // Expiry times are not monotonic in insertion order (timestamps
        // may be skewed), so evict every expired entry, not just a prefix.
        if inner.order.front().is_some_and(|(e, _)| *e < now) || inner.seen.len() >= self.capacity {
            let Inner { seen, order } = &mut *inner;
            order.retain(|(e, n)| {
                let keep = *e >= now;
                if !keep {
                    seen.remove(n);
                }
                keep
            });
        }
        if inner.seen.contains(nonce) {
            return Err(NonceRejection::Replayed);
        }
        if inner.seen.len() >= self.capacity {
            return Err(NonceRejection::Full);
        }
        inner.seen.insert(nonce.to_owned());
        inner.order.push_back((expires, nonce.to_owned()));
        Ok(())
    }

    /// Nonces held.
    pub fn len(&self) -> usize {
        self.inner.lock().seen.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_expiry_and_bound() {
        let cache = NonceCache::new(2);
        assert_eq!(cache.check_and_insert("a", 10, 0), Ok(()));
        assert_eq!(
            cache.check_and_insert("a", 10, 5),
            Err(NonceRejection::Replayed)
        );
        assert_eq!(cache.check_and_insert("b", 20, 5), Ok(()));
        assert_eq!(
            cache.check_and_insert("c", 20, 5),
            Err(NonceRejection::Full)
        );
        // "a" expired at 10: evicted, "c" fits, and "a" could be reused
        // (its request's timestamp is outside the window by then).
        assert_eq!(cache.check_and_insert("c", 20, 11), Ok(()));
        assert_eq!(cache.len(), 2);
        assert_eq!(
            cache.check_and_insert("b", 20, 11),
            Err(NonceRejection::Replayed)
        );
    }
}
