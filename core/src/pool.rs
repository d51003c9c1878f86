//! Recycled host allocations: large backing allocations that a dropped buffer hands back, so
//! the next buffer of the same size skips the allocator and the operating system's page
//! clearing (contractions make and drop temporaries of the same sizes again and again).
//!
//! Owns: the process-wide pool and [`trim_buffer_pool`]. Invariants:
//!
//! - A pooled allocation is owned by the pool alone: it was taken from a buffer that was
//!   being dropped (so no view or region can reach it), and it leaves the pool only to
//!   become exactly one new buffer, or to be deallocated.
//! - It is filed under the very layout it was allocated with, and handed out only for that
//!   layout, so it is deallocated with it.
//! - Its bytes are initialized: every buffer is zeroed or written in full at creation, and
//!   nothing writes uninitialized bytes into one.
//! - The pool holds at most [`POOL_BYTES`] bytes in at most [`POOL_ENTRIES`] allocations;
//!   handing back more evicts the oldest.
//!
//! Under loom there is no pool (loom models the runtime only). Under Miri there is: the
//! buffers of the Miri tests are far below [`POOL_MIN_BYTES`], so they are freed as usual
//! (and a use after free is still seen), and the pool's own tests run its unsafe code.

use std::alloc::Layout;
use std::ptr::NonNull;

/// Allocations below this many bytes go straight back to the allocator, which serves them
/// cheaply from its own free lists (glibc maps larger ones afresh, page faults and all).
pub const POOL_MIN_BYTES: usize = 64 << 10;
/// The most bytes the pool keeps.
pub const POOL_BYTES: usize = 512 << 20;
/// The most allocations the pool keeps.
pub const POOL_ENTRIES: usize = 256;

#[cfg(not(loom))]
mod imp {
    use super::{Layout, NonNull, POOL_BYTES, POOL_ENTRIES, POOL_MIN_BYTES};
    use parking_lot::Mutex;
    use std::collections::VecDeque;

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
    }

    static POOL: Mutex<Pool> = Mutex::new(Pool {
        entries: VecDeque::new(),
        bytes: 0,
    });

    pub(crate) fn take(layout: Layout) -> Option<NonNull<u8>> {
        if layout.size() < POOL_MIN_BYTES {
            return None;
        }
        let mut pool = POOL.lock();
        // Newest first: the most recently freed allocation is the likeliest to be cached.
        let at = pool.entries.iter().rposition(|e| e.layout == layout)?;
        let entry = pool.entries.remove(at).expect("a found position");
        pool.bytes -= layout.size();
        Some(entry.ptr)
    }

    /// # Safety
    ///
    /// `ptr` was allocated with `layout` by the global allocator, its bytes are initialized,
    /// and nothing references it any more: ownership passes to the pool.
    pub(crate) unsafe fn give(layout: Layout, ptr: NonNull<u8>) {
        if layout.size() < POOL_MIN_BYTES || layout.size() > POOL_BYTES {
            // SAFETY: the caller's contract: allocated with `layout`, unreferenced.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
            return;
        }
        let evicted: Vec<Entry> = {
            let mut pool = POOL.lock();
            pool.entries.push_back(Entry { layout, ptr });
            pool.bytes += layout.size();
            let mut evicted = Vec::new();
            while pool.bytes > POOL_BYTES || pool.entries.len() > POOL_ENTRIES {
                let old = pool
                    .entries
                    .pop_front()
                    .expect("the pool is over its bounds");
                pool.bytes -= old.layout.size();
                evicted.push(old);
            }
            evicted
        };
        // Deallocated outside the lock.
        for e in evicted {
            // SAFETY: pooled entries were allocated with their layout and are unreferenced.
            unsafe { std::alloc::dealloc(e.ptr.as_ptr(), e.layout) };
        }
    }

    pub(crate) fn trim() -> usize {
        let (entries, bytes) = {
            let mut pool = POOL.lock();
            (
                std::mem::take(&mut pool.entries),
                std::mem::take(&mut pool.bytes),
            )
        };
        for e in entries {
            // SAFETY: as in `give`.
            unsafe { std::alloc::dealloc(e.ptr.as_ptr(), e.layout) };
        }
        bytes
    }

    pub(crate) fn pooled_bytes() -> usize {
        POOL.lock().bytes
    }
}

#[cfg(loom)]
mod imp {
    use super::{Layout, NonNull};

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

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::buffer::SharedBuffer;

    // Sizes no other test uses, so the pool's global state is this test's alone.
    const LEN: usize = 40_009;

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
        // A different size is a different allocation.
        let d = SharedBuffer::<f64>::zeroed(LEN + 1);
        assert_ne!(d.as_ptr(), at);
        drop((c, d));
        assert!(super::trim_buffer_pool() >= 2 * LEN * 8);
    }

    #[test]
    fn small_buffers_are_not_pooled() {
        let small = SharedBuffer::<f64>::zeroed(17);
        drop(small);
        const { assert!(super::POOL_MIN_BYTES > 17 * 8) };
        assert!(super::take(crate::buffer::layout_of::<f64>(17)).is_none());
    }
}
