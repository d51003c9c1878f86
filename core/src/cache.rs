//! A bounded, thread-safe cache that evicts the least recently used entry.
//!
//! Owns: [`LruCache`], the one cache type of the library (the contraction plan cache and the
//! permutation plans a block structure keeps are both one), and [`CacheStats`], its counters.
//! Invariants: the cache never holds more than its capacity; every lookup is counted exactly
//! once, as a hit or a miss; every entry removed to make room (by an insertion or by a
//! smaller capacity) is counted as an eviction, and it is always the least recently used
//! one, where a use is an insertion or a lookup that hit.
//!
//! # Design
//!
//! Entries live in one dense vector, linked into a doubly linked recency list by index; a
//! hash table (hashbrown's [`HashTable`]) maps a key's hash to the entry's index, and each
//! entry keeps its key's hash, so no key is stored or hashed twice. Every operation is O(1)
//! expected: a lookup is one probe and a relink; an eviction unlinks the list's tail and
//! moves the vector's last entry into its place (one table slot updated). Everything sits
//! behind one `parking_lot` mutex, held for those few steps only: values are cloned out
//! (callers keep `Arc`s) and evicted values are dropped after the lock is released.

use crate::primitive::lock;
use hashbrown::{DefaultHashBuilder, HashTable};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;

/// No entry (the end of the recency list).
const NIL: usize = usize::MAX;

/// The counters and size of an [`LruCache`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CacheStats {
    /// Lookups that found an entry (and accepted it).
    pub hits: u64,
    /// Lookups that found none (or refused the one found).
    pub misses: u64,
    /// Entries removed to make room: by an insertion into a full cache, or by a smaller
    /// capacity. Explicit removals and [`clear`](LruCache::clear) are not evictions.
    pub evictions: u64,
    /// Entries held.
    pub len: usize,
    /// The most entries the cache holds.
    pub capacity: usize,
}

struct Node<K, V> {
    key: K,
    value: V,
    hash: u64,
    /// Towards the most recently used end.
    prev: usize,
    /// Towards the least recently used end.
    next: usize,
}

struct Inner<K, V> {
    /// Indices into `nodes`, hashed by their node's key.
    table: HashTable<usize>,
    nodes: Vec<Node<K, V>>,
    /// The most recently used entry.
    head: usize,
    /// The least recently used entry: the next one evicted.
    tail: usize,
    capacity: usize,
    hits: u64,
    misses: u64,
    evictions: u64,
}

/// A map of at most `capacity` entries that evicts the least recently used one, counts hits,
/// misses and evictions, and can be shared between threads (`&self` methods, one internal
/// lock). See the module docs for the design; every operation is O(1) expected.
///
/// ```
/// use tessera_core::LruCache;
///
/// let cache = LruCache::new(2);
/// cache.insert("a", 1);
/// cache.insert("b", 2);
/// assert_eq!(cache.get("a"), Some(1)); // "a" is now the most recently used
/// cache.insert("c", 3);                // full: evicts "b", the least recently used
/// assert_eq!(cache.get("b"), None);
/// let stats = cache.stats();
/// assert_eq!((stats.hits, stats.misses, stats.evictions, stats.len), (1, 1, 1, 2));
/// ```
pub struct LruCache<K, V> {
    inner: Mutex<Inner<K, V>>,
    hasher: DefaultHashBuilder,
}

impl<K, V> std::fmt::Debug for LruCache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LruCache")
            .field("stats", &lock(&self.inner).stats())
            .finish_non_exhaustive()
    }
}

impl<K, V> Inner<K, V> {
    fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits,
            misses: self.misses,
            evictions: self.evictions,
            len: self.nodes.len(),
            capacity: self.capacity,
        }
    }

    /// Takes entry `i` out of the recency list (its links are left stale).
    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.nodes[i].prev, self.nodes[i].next);
        match prev {
            NIL => self.head = next,
            p => self.nodes[p].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n].prev = prev,
        }
    }

    /// Puts entry `i` (unlinked) at the most recently used end.
    fn push_front(&mut self, i: usize) {
        self.nodes[i].prev = NIL;
        self.nodes[i].next = self.head;
        match self.head {
            NIL => self.tail = i,
            h => self.nodes[h].prev = i,
        }
        self.head = i;
    }

    fn touch(&mut self, i: usize) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    /// Removes entry `i` from the list, the table and the vector (the last entry moves into
    /// its place), and returns it.
    fn remove_at(&mut self, i: usize) -> Node<K, V> {
        self.unlink(i);
        if let Ok(slot) = self.table.find_entry(self.nodes[i].hash, |&j| j == i) {
            slot.remove();
        }
        let last = self.nodes.len() - 1;
        let node = self.nodes.swap_remove(i);
        if i != last {
            // The entry that was last now sits at `i`: repoint its neighbours and its slot.
            let (prev, next, hash) = (self.nodes[i].prev, self.nodes[i].next, self.nodes[i].hash);
            match prev {
                NIL => self.head = i,
                p => self.nodes[p].next = i,
            }
            match next {
                NIL => self.tail = i,
                n => self.nodes[n].prev = i,
            }
            if let Some(slot) = self.table.find_mut(hash, |&j| j == last) {
                *slot = i;
            }
        }
        node
    }

    /// Evicts least recently used entries until at most `keep` remain; returns them.
    fn shrink(&mut self, keep: usize) -> Vec<Node<K, V>> {
        let mut out = Vec::new();
        while self.nodes.len() > keep {
            let tail = self.tail;
            out.push(self.remove_at(tail));
            self.evictions += 1;
        }
        out
    }
}

impl<K: Hash + Eq, V: Clone> LruCache<K, V> {
    /// An empty cache that holds at most `capacity` entries (0: it holds none, and every
    /// lookup misses).
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                table: HashTable::new(),
                nodes: Vec::new(),
                head: NIL,
                tail: NIL,
                capacity,
                hits: 0,
                misses: 0,
                evictions: 0,
            }),
            hasher: DefaultHashBuilder::default(),
        }
    }

    fn find<Q>(&self, inner: &Inner<K, V>, hash: u64, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        inner
            .table
            .find(hash, |&i| inner.nodes[i].key.borrow() == key)
            .copied()
    }

    /// The value of `key`, made the most recently used; counts a hit or a miss.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_if(key, |_| true)
    }

    /// The value of `key` if `accept` takes it (a hit, and it becomes the most recently
    /// used); otherwise `None`, counted as a miss, with the entry left where it was (for a
    /// key that cannot tell every case apart, like a hash confirmed by a comparison: the
    /// caller then makes the right value and [`insert`](Self::insert)s it over the entry).
    pub fn get_if<Q>(&self, key: &Q, accept: impl FnOnce(&V) -> bool) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut inner = lock(&self.inner);
        match self.find(&inner, hash, key) {
            Some(i) if accept(&inner.nodes[i].value) => {
                inner.hits += 1;
                inner.touch(i);
                Some(inner.nodes[i].value.clone())
            }
            _ => {
                inner.misses += 1;
                None
            }
        }
    }

    /// Whether `key` has an entry; neither a use nor a lookup (nothing is counted or moved).
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let inner = lock(&self.inner);
        self.find(&inner, hash, key).is_some()
    }

    /// Inserts (or replaces) the value of `key` as the most recently used entry, evicting the
    /// least recently used one when the cache is full. A cache of capacity 0 keeps nothing.
    /// Returns the value it replaced, if any.
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        let hash = self.hasher.hash_one(&key);
        let mut inner = lock(&self.inner);
        if let Some(i) = self.find(&inner, hash, &key) {
            inner.touch(i);
            let old = std::mem::replace(&mut inner.nodes[i].value, value);
            drop(inner);
            return Some(old);
        }
        if inner.capacity == 0 {
            drop(inner);
            drop(value);
            return None;
        }
        let keep = inner.capacity - 1;
        let evicted = inner.shrink(keep);
        let i = inner.nodes.len();
        inner.nodes.push(Node {
            key,
            value,
            hash,
            prev: NIL,
            next: NIL,
        });
        inner.push_front(i);
        let Inner { table, nodes, .. } = &mut *inner;
        table.insert_unique(hash, i, |&j| nodes[j].hash);
        drop(inner);
        // Dropped outside the lock: a value may own much (a plan's tables).
        drop(evicted);
        None
    }

    /// Removes the entry of `key` (not counted as an eviction) and returns its value.
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut inner = lock(&self.inner);
        let i = self.find(&inner, hash, key)?;
        let node = inner.remove_at(i);
        drop(inner);
        Some(node.value)
    }

    /// Sets the capacity, evicting least recently used entries until the cache fits.
    pub fn set_capacity(&self, capacity: usize) {
        let mut inner = lock(&self.inner);
        inner.capacity = capacity;
        let evicted = inner.shrink(capacity);
        drop(inner);
        drop(evicted);
    }

    /// The most entries the cache holds.
    pub fn capacity(&self) -> usize {
        lock(&self.inner).capacity
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        lock(&self.inner).nodes.len()
    }

    /// Whether the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every entry (not counted as evictions; the counters are kept).
    pub fn clear(&self) {
        let mut inner = lock(&self.inner);
        let nodes = std::mem::take(&mut inner.nodes);
        inner.table.clear();
        (inner.head, inner.tail) = (NIL, NIL);
        drop(inner);
        drop(nodes);
    }

    /// The counters, the number of entries and the capacity, read together.
    pub fn stats(&self) -> CacheStats {
        lock(&self.inner).stats()
    }

    /// Sets the hit, miss and eviction counters to zero.
    pub fn reset_stats(&self) {
        let mut inner = lock(&self.inner);
        (inner.hits, inner.misses, inner.evictions) = (0, 0, 0);
    }

    /// The keys, most recently used first (the last one is evicted next).
    pub fn keys_by_recency(&self) -> Vec<K>
    where
        K: Clone,
    {
        let inner = lock(&self.inner);
        let mut out = Vec::with_capacity(inner.nodes.len());
        let mut at = inner.head;
        while at != NIL {
            out.push(inner.nodes[at].key.clone());
            at = inner.nodes[at].next;
        }
        out
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::VecDeque;
    use std::sync::Arc;

    #[test]
    fn evicts_the_least_recently_used() {
        let c = LruCache::new(3);
        for k in 1..=3 {
            c.insert(k, k * 10);
        }
        assert_eq!(c.keys_by_recency(), vec![3, 2, 1]);
        // A hit makes 1 the most recent: 2 is now the oldest.
        assert_eq!(c.get(&1), Some(10));
        assert_eq!(c.keys_by_recency(), vec![1, 3, 2]);
        c.insert(4, 40);
        assert_eq!(c.keys_by_recency(), vec![4, 1, 3]);
        assert!(!c.contains_key(&2));
        // Replacing a value is a use too, and evicts nothing.
        assert_eq!(c.insert(3, 33), Some(30));
        assert_eq!(c.keys_by_recency(), vec![3, 4, 1]);
        // A miss and `contains_key` move nothing.
        assert_eq!(c.get(&2), None);
        assert!(c.contains_key(&1));
        assert_eq!(c.keys_by_recency(), vec![3, 4, 1]);
        c.insert(5, 50);
        assert_eq!(c.keys_by_recency(), vec![5, 3, 4]);
        assert_eq!(
            c.stats(),
            CacheStats {
                hits: 1,
                misses: 1,
                evictions: 2,
                len: 3,
                capacity: 3
            }
        );
    }

    #[test]
    fn capacity_is_settable_and_zero_keeps_nothing() {
        let c = LruCache::new(4);
        for k in 0..4 {
            c.insert(k, k);
        }
        c.get(&0);
        c.set_capacity(2);
        // 1 and 2 were the least recently used.
        assert_eq!(c.keys_by_recency(), vec![0, 3]);
        assert_eq!(c.stats().evictions, 2);
        c.set_capacity(0);
        assert!(c.is_empty());
        c.insert(9, 9);
        assert_eq!((c.len(), c.get(&9)), (0, None));
        assert_eq!(c.stats().evictions, 4);
        c.set_capacity(1);
        c.insert(1, 1);
        assert_eq!(c.remove(&1), Some(1));
        assert_eq!(c.remove(&1), None);
        c.insert(2, 2);
        c.clear();
        let s = c.stats();
        assert_eq!((s.len, s.capacity, s.evictions), (0, 1, 4));
        c.reset_stats();
        assert_eq!(
            c.stats(),
            CacheStats {
                capacity: 1,
                ..CacheStats::default()
            }
        );
    }

    #[test]
    fn rejected_entries_count_as_misses_and_stay() {
        let c = LruCache::new(2);
        c.insert("k".to_owned(), 1);
        c.insert("j".to_owned(), 2);
        assert_eq!(c.get_if("k", |&v| v == 2), None);
        assert_eq!(c.keys_by_recency(), vec!["j".to_owned(), "k".to_owned()]);
        assert_eq!(c.get_if("k", |&v| v == 1), Some(1));
        let s = c.stats();
        assert_eq!((s.hits, s.misses), (1, 1));
    }

    /// Against a plain model (a deque, most recent first), over seeded random operations.
    #[test]
    fn matches_a_model_under_random_operations() {
        let mut rng = ChaCha8Rng::seed_from_u64(24);
        for capacity in [0, 1, 2, 5, 17] {
            let c = LruCache::new(capacity);
            let mut model: VecDeque<(u32, u32)> = VecDeque::new();
            let (mut hits, mut misses, mut evictions) = (0, 0, 0);
            for step in 0..if cfg!(miri) { 200u32 } else { 4000 } {
                let key = rng.gen_range(0..24u32);
                match rng.gen_range(0..10) {
                    0..=4 => {
                        let want = model.iter().position(|e| e.0 == key).map(|at| {
                            let e = model.remove(at).expect("found");
                            model.push_front(e);
                            e.1
                        });
                        if want.is_some() {
                            hits += 1;
                        } else {
                            misses += 1;
                        }
                        assert_eq!(c.get(&key), want);
                    }
                    5..=8 => {
                        let old = model
                            .iter()
                            .position(|e| e.0 == key)
                            .map(|at| model.remove(at).expect("found").1);
                        if capacity > 0 || old.is_some() {
                            model.push_front((key, step));
                        }
                        if model.len() > capacity {
                            model.pop_back();
                            evictions += 1;
                        }
                        assert_eq!(c.insert(key, step), old);
                    }
                    _ => {
                        let old = model
                            .iter()
                            .position(|e| e.0 == key)
                            .map(|at| model.remove(at).expect("found").1);
                        assert_eq!(c.remove(&key), old);
                    }
                }
                let keys: Vec<u32> = model.iter().map(|e| e.0).collect();
                assert_eq!(c.keys_by_recency(), keys);
            }
            assert_eq!(
                c.stats(),
                CacheStats {
                    hits,
                    misses,
                    evictions,
                    len: model.len(),
                    capacity
                }
            );
        }
    }

    #[test]
    fn shared_between_threads_it_stays_within_capacity() {
        let c = Arc::new(LruCache::new(8));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for k in 0..2000u64 {
                        let key = (k * 7 + t) % 20;
                        if c.get(&key).is_none() {
                            c.insert(key, key);
                        }
                        assert!(c.len() <= 8);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no panic");
        }
        let s = c.stats();
        assert_eq!(s.hits + s.misses, 8000);
        assert!(s.len <= 8);
        // Every miss inserted one entry; each either is still held, was evicted, or was
        // another thread's insertion of the same key (a replacement).
        assert!(s.evictions + s.len as u64 <= s.misses);
    }

    /// A large cache stays O(1) per operation: a full cache of 10^5 entries churns 10^6
    /// insertions (an O(n) scan per insertion would be 10^11 steps).
    #[test]
    #[cfg_attr(miri, ignore)] // 10^6 operations: far too slow to interpret
    fn large_capacities_take_constant_time_per_operation() {
        let c = LruCache::new(100_000);
        for k in 0..1_000_000u64 {
            c.insert(k, k);
            if k % 3 == 0 {
                assert_eq!(c.get(&k), Some(k));
            }
        }
        let s = c.stats();
        assert_eq!((s.len, s.evictions, s.hits), (100_000, 900_000, 333_334));
        // The oldest 900,000 keys went, the newest 100,000 stayed.
        assert!(!c.contains_key(&899_999) && c.contains_key(&900_000));
    }
}
