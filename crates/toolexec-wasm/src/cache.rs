//! A small bounded LRU of compiled code, keyed by content hash.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::code::CodeHash;

/// Least-recently-used map from code hash to compiled code. Eviction scans
/// the entries (the cache holds tens of modules, not thousands).
pub(crate) struct Lru<V> {
    capacity: usize,
    inner: Mutex<Inner<V>>,
}

struct Inner<V> {
    clock: u64,
    entries: HashMap<CodeHash, (Arc<V>, u64)>,
}

impl<V> Lru<V> {
    /// An empty cache holding at most `capacity` entries (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Lru {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner {
                clock: 0,
                entries: HashMap::new(),
            }),
        }
    }

    /// The entry for `key`, marked as most recently used.
    pub(crate) fn get(&self, key: &CodeHash) -> Option<Arc<V>> {
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let now = inner.clock;
        let (value, used) = inner.entries.get_mut(key)?;
        *used = now;
        Some(value.clone())
    }

    /// Inserts `value`, evicting the least recently used entry when full.
    pub(crate) fn insert(&self, key: CodeHash, value: Arc<V>) {
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let now = inner.clock;
        if !inner.entries.contains_key(&key) && inner.entries.len() >= self.capacity {
            let oldest = inner
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                inner.entries.remove(&oldest);
            }
        }
        inner.entries.insert(key, (value, now));
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> CodeHash {
        [n; 32]
    }

    #[test]
    fn evicts_the_least_recently_used() {
        let lru = Lru::new(2);
        lru.insert(key(1), Arc::new("one"));
        lru.insert(key(2), Arc::new("two"));
        assert!(lru.get(&key(1)).is_some()); // 2 is now the oldest
        lru.insert(key(3), Arc::new("three"));
        assert_eq!(lru.len(), 2);
        assert!(lru.get(&key(2)).is_none());
        assert_eq!(*lru.get(&key(1)).unwrap(), "one");
        assert_eq!(*lru.get(&key(3)).unwrap(), "three");
        lru.insert(key(3), Arc::new("again"));
        assert_eq!(lru.len(), 2);
    }
}
