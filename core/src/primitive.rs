//! Synchronisation primitives, swapped for loom's under `cfg(loom)`.
//!
//! Owns: the one place where the runtime's atomics, `Arc`, mutexes and the wake-up latch are
//! chosen. Invariant: every shared-state access in the hazard and task modules goes through
//! these types, so a loom model explores every interleaving of that state.

#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::Arc;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The guard of a locked [`Mutex`].
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;
/// The guard of a locked [`Mutex`].
#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

/// A mutex with an infallible `lock` (parking_lot's, or loom's under `cfg(loom)`).
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
}

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(value),
        }
    }

    /// Locks the mutex. Poisoning cannot occur: no code panics while holding one of these
    /// locks (the kernels run outside every lock).
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(loom)]
        {
            self.inner.lock().expect("runtime locks are never poisoned")
        }
        #[cfg(not(loom))]
        {
            self.inner.lock()
        }
    }
}

/// A one-shot latch: `set` once, `wait` until set. Used by host waits.
#[derive(Debug, Default)]
pub(crate) struct Latch {
    #[cfg(loom)]
    state: loom::sync::Mutex<bool>,
    #[cfg(loom)]
    cond: loom::sync::Condvar,
    #[cfg(not(loom))]
    state: parking_lot::Mutex<bool>,
    #[cfg(not(loom))]
    cond: parking_lot::Condvar,
}

impl Latch {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Sets the latch and wakes every waiter. Memory ordering: the mutex release here
    /// synchronises with the acquire in [`Latch::wait`], so everything written before `set`
    /// is visible after `wait` returns.
    pub(crate) fn set(&self) {
        #[cfg(loom)]
        {
            *self.state.lock().expect("latch lock") = true;
            self.cond.notify_all();
        }
        #[cfg(not(loom))]
        {
            *self.state.lock() = true;
            self.cond.notify_all();
        }
    }

    /// Whether the latch is set (with the same ordering as a [`Latch::wait`] that returns).
    pub(crate) fn is_set(&self) -> bool {
        #[cfg(loom)]
        {
            *self.state.lock().expect("latch lock")
        }
        #[cfg(not(loom))]
        {
            *self.state.lock()
        }
    }

    /// Blocks the calling thread until the latch is set.
    pub(crate) fn wait(&self) {
        #[cfg(loom)]
        {
            let mut set = self.state.lock().expect("latch lock");
            while !*set {
                set = self.cond.wait(set).expect("latch lock");
            }
        }
        #[cfg(not(loom))]
        {
            let mut set = self.state.lock();
            while !*set {
                self.cond.wait(&mut set);
            }
        }
    }
}
