//! Recycled host allocations: large backing allocations that a dropped buffer hands back, so
//! the next buffer of the same size skips the allocator and the operating system's page
//! clearing (contractions make and drop temporaries of the same sizes again and again).
//!
//! Owns: the process-wide pool, [`trim_buffer_pool`], its limits
//! ([`set_buffer_pool_limits`]) and counters ([`buffer_pool_stats`]). Invariants:
//!
//! - A pooled allocation is owned by the pool alone: it was taken from a buffer that was
//!   being dropped (so no view or region can reach it), and it leaves the pool only to
//!   become exactly one new buffer, or to be deallocated.
//! - It is filed under the very layout it was allocated with, and handed out only for that
//!   layout, so it is deallocated with it. Poolable layouts are rounded up to a size class
//!   ([`size_class`]: eight per doubling), so a buffer a little larger or smaller than the
//!   last one (a DMRG bond that grew by a few states) still finds its allocation.
//! - Its bytes are initialized: every buffer is zeroed or written in full at creation, and
//!   nothing writes uninitialized bytes into one.
//! - The pool holds at most its byte limit ([`POOL_BYTES`] unless set) in at most its entry
//!   limit ([`POOL_ENTRIES`] unless set) of allocations; handing back more, or lowering a
//!   limit, evicts the least recently given back (each pooled allocation is used once: it
//!   is given back, then taken), and counts each eviction.
//! - Every request of a poolable size counts as a hit (an allocation was handed out) or a
//!   miss (the caller allocates afresh).
//!
//! Under loom there is no pool (loom models the runtime only). Under Miri there is: the
//! buffers of the Miri tests are far below [`POOL_MIN_BYTES`], so they are freed as usual
//! (and a use after free is still seen), and the pool's own tests run its unsafe code.

use std::alloc::Layout;
use std::ptr::NonNull;

/// Allocations below this many bytes go straight back to the allocator, which serves them
/// cheaply from its own free lists (glibc maps larger ones afresh, page faults and all).
pub const POOL_MIN_BYTES: usize = 64 << 10;
/// Size classes per doubling of the byte size (a class wastes at most 1/8 of its size).
const CLASSES_PER_DOUBLING: u32 = 8;

/// The byte size a buffer of `bytes` is allocated with: `bytes` below [`POOL_MIN_BYTES`],
/// else rounded up to the next of [`CLASSES_PER_DOUBLING`] classes per power of two; `None`
/// when that overflows `usize`.
pub(crate) fn size_class(bytes: usize) -> Option<usize> {
    if bytes < POOL_MIN_BYTES {
        return Some(bytes);
    }
    let step = 1usize << (bytes.ilog2() - CLASSES_PER_DOUBLING.ilog2());
    bytes.checked_next_multiple_of(step)
}

/// The most bytes the pool keeps, unless [`set_buffer_pool_limits`] says otherwise.
pub const POOL_BYTES: usize = 512 << 20;
/// The most allocations the pool keeps, unless [`set_buffer_pool_limits`] says otherwise.
pub const POOL_ENTRIES: usize = 256;

/// The counters, contents and limits of the buffer pool at one moment
/// ([`buffer_pool_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BufferPoolStats {
    /// New buffers of a poolable size (at least [`POOL_MIN_BYTES`]) served from the pool.
    pub hits: u64,
    /// New buffers of a poolable size that found none of their size and were allocated.
    pub misses: u64,
    /// Pooled allocations freed to respect the limits.
    pub evictions: u64,
    /// Allocations held now.
    pub entries: usize,
    /// Bytes held now.
    pub bytes: usize,
    /// The most allocations held.
    pub max_entries: usize,
    /// The most bytes held (a larger allocation is never pooled).
    pub max_bytes: usize,
}

#[cfg(not(loom))]
mod imp {
    use super::{BufferPoolStats, Layout, NonNull, POOL_BYTES, POOL_ENTRIES, POOL_MIN_BYTES};
    use crate::primitive::lock;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// A pooled allocation: its address (owned by the pool, see the module invariants).
    struct Entry {
        layout: Layout,
        ptr: NonNull<u8>,
    }

    // SAFETY: an entry is plain memory that nothing else references; moving the ownership
    // of it between threads is what the pool is for.
    unsafe impl Send for Entry {}

    struct Pool {
        /// Oldest first.
        entries: VecDeque<Entry>,
        bytes: usize,
        max_bytes: usize,
        max_entries: usize,
        hits: u64,
        misses: u64,
        evictions: u64,
    }

    static POOL: Mutex<Pool> = Mutex::new(Pool {
        entries: VecDeque::new(),
        bytes: 0,
        max_bytes: POOL_BYTES,
        max_entries: POOL_ENTRIES,
        hits: 0,
        misses: 0,
        evictions: 0,
    });

    impl Pool {
        /// Removes the oldest entries until the limits hold; the caller frees them outside
        /// the lock.
        fn evict(&mut self) -> Vec<Entry> {
            let mut evicted = Vec::new();
            while self.bytes > self.max_bytes || self.entries.len() > self.max_entries {
                let old = self
                    .entries
                    .pop_front()
                    .expect("the pool is over its bounds");
                self.bytes -= old.layout.size();
                self.evictions += 1;
                evicted.push(old);
            }
            evicted
        }
    }

    fn free(entries: impl IntoIterator<Item = Entry>) {
        for e in entries {
            // SAFETY: pooled entries were allocated with their layout and are unreferenced.
            unsafe { std::alloc::dealloc(e.ptr.as_ptr(), e.layout) };
        }
    }

    pub(crate) fn take(layout: Layout) -> Option<NonNull<u8>> {
        if layout.size() < POOL_MIN_BYTES {
            return None;
        }
        let mut pool = lock(&POOL);
        // Newest first: the most recently freed allocation is the likeliest to be cached.
        let Some(at) = pool.entries.iter().rposition(|e| e.layout == layout) else {
            pool.misses += 1;
            return None;
        };
        let entry = pool.entries.remove(at).expect("a found position");
        pool.bytes -= layout.size();
        pool.hits += 1;
        Some(entry.ptr)
    }

    /// # Safety
    ///
    /// `ptr` was allocated with `layout` by the global allocator, its bytes are initialized,
    /// and nothing references it any more: ownership passes to the pool.
    pub(crate) unsafe fn give(layout: Layout, ptr: NonNull<u8>) {
        let entry = Entry { layout, ptr };
        if layout.size() < POOL_MIN_BYTES {
            free([entry]);
            return;
        }
        let evicted: Vec<Entry> = {
            let mut pool = lock(&POOL);
            if layout.size() > pool.max_bytes || pool.max_entries == 0 {
                drop(pool);
                free([entry]);
                return;
            }
            pool.entries.push_back(entry);
            pool.bytes += layout.size();
            pool.evict()
        };
        // Deallocated outside the lock.
        free(evicted);
    }

    pub(crate) fn set_limits(max_bytes: usize, max_entries: usize) {
        let evicted = {
            let mut pool = lock(&POOL);
            (pool.max_bytes, pool.max_entries) = (max_bytes, max_entries);
            pool.evict()
        };
        free(evicted);
    }

    pub(crate) fn stats() -> BufferPoolStats {
        let pool = lock(&POOL);
        BufferPoolStats {
            hits: pool.hits,
            misses: pool.misses,
            evictions: pool.evictions,
            entries: pool.entries.len(),
            bytes: pool.bytes,
            max_entries: pool.max_entries,
            max_bytes: pool.max_bytes,
        }
    }

    pub(crate) fn trim() -> usize {
        let (entries, bytes) = {
            let mut pool = lock(&POOL);
            (
                std::mem::take(&mut pool.entries),
                std::mem::take(&mut pool.bytes),
            )
        };
        free(entries);
        bytes
    }

    pub(crate) fn pooled_bytes() -> usize {
        lock(&POOL).bytes
    }
}

#[cfg(loom)]
mod imp {
    use super::{BufferPoolStats, Layout, NonNull};

    pub(crate) fn set_limits(_: usize, _: usize) {}

    pub(crate) fn stats() -> BufferPoolStats {
        BufferPoolStats::default()
    }

    pub(crate) fn take(_: Layout) -> Option<NonNull<u8>> {
        None
    }

    /// # Safety
    ///
    /// As the pooled version: `ptr` was allocated with `layout` and is unreferenced.
    pub(crate) unsafe fn give(layout: Layout, ptr: NonNull<u8>) {
        // SAFETY: the caller's contract.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
    }

    pub(crate) fn trim() -> usize {
        0
    }

    pub(crate) fn pooled_bytes() -> usize {
        0
    }
}

pub(crate) use imp::{give, take};

/// Frees every pooled allocation (for a program that is done with large tensors and wants
/// the memory back now); returns how many bytes were freed. The pool refills as buffers
/// are dropped.
pub fn trim_buffer_pool() -> usize {
    imp::trim()
}

/// How many bytes the pool holds now.
pub fn pooled_bytes() -> usize {
    imp::pooled_bytes()
}

/// Sets the most bytes and the most allocations the pool keeps (initially [`POOL_BYTES`]
/// and [`POOL_ENTRIES`]), freeing the least recently pooled allocations beyond them (counted
/// as evictions). `0` for either turns pooling off.
pub fn set_buffer_pool_limits(max_bytes: usize, max_entries: usize) {
    imp::set_limits(max_bytes, max_entries);
}

/// The pool's hits, misses and evictions since the process started, what it holds now and
/// its limits, read together.
pub fn buffer_pool_stats() -> BufferPoolStats {
    imp::stats()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::buffer::SharedBuffer;

    // Sizes no other test uses, so the pool's global state is this test's alone.
    const LEN: usize = 40_009;

    /// The tests that depend on the pool's limits run one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A sample of the elements (every 997th and the last): enough to see stale or
    /// unzeroed memory, cheap under Miri.
    fn sample(b: &SharedBuffer<f64>) -> Vec<f64> {
        (0..LEN)
            .step_by(997)
            .chain([LEN - 1])
            // SAFETY: `i < LEN`; the buffer is this test's alone and no view of it lives.
            .map(|i| unsafe { b.view(i, &[1], &[1]) }.to_vec()[0])
            .collect()
    }

    #[test]
    fn a_dropped_large_buffer_is_reused_and_zeroed_or_recycled_on_request() {
        let _serial = crate::primitive::lock(&SERIAL);
        const { assert!(LEN * 8 >= super::POOL_MIN_BYTES) };
        let a = SharedBuffer::<f64>::zeroed(LEN);
        let at = a.as_ptr();
        // SAFETY: as in `sample`; a write through the only view of a new buffer.
        unsafe { a.view_mut(LEN - 1, &[1], &[1]) }.set(&[0], 7.0);
        drop(a);
        assert!(super::pooled_bytes() >= LEN * 8);
        // Reused, and zeroed.
        let b = SharedBuffer::<f64>::zeroed(LEN);
        assert_eq!(b.as_ptr(), at);
        assert!(sample(&b).iter().all(|&x| x == 0.0));
        drop(b);
        // Recycled: the same allocation (the debug build fills it with NaN so that reads of
        // unwritten elements show).
        let c = SharedBuffer::<f64>::recycled(LEN);
        assert_eq!(c.as_ptr(), at);
        #[cfg(debug_assertions)]
        assert!(sample(&c).iter().all(|x| x.is_nan()));
        // A size of another class is a different allocation.
        let d = SharedBuffer::<f64>::zeroed(2 * LEN);
        assert_ne!(d.as_ptr(), at);
        drop((c, d));
        assert!(super::trim_buffer_pool() >= 2 * LEN * 8);
    }

    /// Sizes within one class share allocations; each size class is at most 1/8 larger
    /// than what it holds.
    #[test]
    fn a_nearby_size_reuses_the_allocation_of_its_class() {
        let _serial = crate::primitive::lock(&SERIAL);
        const N: usize = 70_001; // no other test's class
        let a = SharedBuffer::<f64>::zeroed(N);
        let at = a.as_ptr();
        drop(a);
        // A little smaller, in the same class: the same allocation, zeroed.
        let b = SharedBuffer::<f64>::zeroed(N - 1000);
        assert_eq!(b.as_ptr(), at);
        // SAFETY: in bounds; the buffer is this test's alone and no view of it lives.
        assert_eq!(unsafe { b.view(N - 1001, &[1], &[1]) }.to_vec(), [0.0]);
        drop(b);
        assert!(super::trim_buffer_pool() >= N * 8);
        for bytes in [
            super::POOL_MIN_BYTES,
            65_537 * 8,
            1 << 30,
            (1 << 30) + 1,
            3 << 40,
        ] {
            let class = super::size_class(bytes).unwrap();
            assert!(
                class >= bytes && class - bytes <= bytes / 8,
                "{bytes} -> {class}"
            );
        }
        assert_eq!(super::size_class(100), Some(100));
        assert_eq!(super::size_class(usize::MAX), None);
    }

    #[test]
    fn small_buffers_are_not_pooled() {
        let small = SharedBuffer::<f64>::zeroed(17);
        drop(small);
        const { assert!(super::POOL_MIN_BYTES > 17 * 8) };
        assert!(super::take(crate::buffer::layout_of::<f64>(17)).is_none());
    }

    /// Requests count as hits or misses, the limits are settable, and a lowered limit
    /// evicts the least recently pooled allocation first. Other tests of this binary may
    /// pool buffers at the same time, so counters are compared as lower bounds, and each
    /// check names a size only this test uses.
    #[test]
    fn limits_are_settable_and_hits_misses_and_evictions_are_counted() {
        use super::{buffer_pool_stats, set_buffer_pool_limits};
        use crate::buffer::layout_of;
        let _serial = crate::primitive::lock(&SERIAL);
        const L: usize = 50_021;
        let before = buffer_pool_stats();
        assert_eq!(
            (before.max_bytes, before.max_entries),
            (super::POOL_BYTES, super::POOL_ENTRIES)
        );
        let a = SharedBuffer::<f64>::zeroed(L); // a miss: no allocation of that size pooled
        let at = a.as_ptr();
        drop(a);
        let b = SharedBuffer::<f64>::zeroed(L); // a hit: the same allocation
        assert_eq!(b.as_ptr(), at);
        let s = buffer_pool_stats();
        assert!(s.hits > before.hits && s.misses > before.misses, "{s:?}");
        // One entry at most: pooling `c` after `b` evicts `b`, the least recently pooled.
        set_buffer_pool_limits(super::POOL_BYTES, 1);
        let c = SharedBuffer::<f64>::zeroed(2 * L);
        drop(b);
        drop(c);
        let s = buffer_pool_stats();
        assert!(s.entries <= 1 && s.evictions > before.evictions, "{s:?}");
        assert_eq!(s.max_entries, 1);
        assert!(super::take(layout_of::<f64>(L)).is_none(), "b was evicted");
        // Limits of 0: nothing is kept, and what was is freed.
        set_buffer_pool_limits(0, 0);
        drop(SharedBuffer::<f64>::zeroed(L));
        let s = buffer_pool_stats();
        assert_eq!((s.entries, s.bytes, s.max_bytes), (0, 0, 0));
        set_buffer_pool_limits(super::POOL_BYTES, super::POOL_ENTRIES);
    }
}
