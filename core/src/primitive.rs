//! Synchronisation primitives, swapped for loom's under `cfg(loom)`.
//!
//! Owns: the one place where the runtime's atomics, `Arc`, mutexes and the wake-up latch are
//! chosen. Invariant: every shared-state access in the hazard and task modules goes through
//! these types, so a loom model explores every interleaving of that state.
//!
//! The locks are the standard library's (futex-based on Linux), not parking_lot's: Miri
//! interprets the standard library's parking, while parking_lot_core 0.9's futex call passes
//! an `&AtomicI32` where the variadic `syscall` reads a `*mut u32`, which Miri reports as
//! undefined behaviour in every test whose threads park. Poisoning is not a state these
//! locks have: no code panics while holding one (kernels run outside every lock), and a lock
//! is taken back from a poisoned state as it is.

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
pub(crate) type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;

/// A mutex with an infallible `lock` (the standard library's, or loom's under `cfg(loom)`).
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(not(loom))]
    inner: std::sync::Mutex<T>,
}

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
            #[cfg(not(loom))]
            inner: std::sync::Mutex::new(value),
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
            lock(&self.inner)
        }
    }
}

/// Locks a standard mutex that is never modelled under loom (the caches, the trace, the
/// buffer pool: state outside the hazard and task modules), taking it back from a poisoned
/// state as it is (see the module's note on poisoning).
pub(crate) fn lock<T: ?Sized>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long a host wait polls its latch before it parks. A task that ends within this
/// wakes the host without a system call on either side, and without the scheduler's
/// wake-up latency, which on a virtual machine is ten or more microseconds: a host waiting
/// on microsecond tasks (a permutation of blocks in cache takes about fifty) would pay it
/// at every wait. Measured on a 2-core VM (the `block_ops` in-cache case, traced): from a
/// permutation's last task to the return of its wait, 14-20 -> 1-3 µs (medians); the
/// permutation with its wait, 69-74 -> 55-57 µs. The poll yields the core between short
/// spins, so a worker that shares it runs; it is bounded, so a long wait costs at most this
/// much of a core before it sleeps.
#[cfg(not(loom))]
const POLL_BEFORE_PARK: std::time::Duration = std::time::Duration::from_micros(20);

/// A one-shot latch: `set` once, `wait` until set. Used by host waits, which poll it for
/// [`POLL_BEFORE_PARK`] before they park.
#[derive(Debug, Default)]
pub(crate) struct Latch {
    #[cfg(loom)]
    state: loom::sync::Mutex<bool>,
    #[cfg(loom)]
    cond: loom::sync::Condvar,
    /// Guards `set` for the condvar: a waiter checks `set` and parks under it, a setter
    /// stores `set` and notifies under it, so no wake-up is lost.
    #[cfg(not(loom))]
    parking: std::sync::Mutex<()>,
    #[cfg(not(loom))]
    cond: std::sync::Condvar,
    /// Whether the latch is set: stored (with release) under `parking`, read (with acquire)
    /// by polls without it.
    #[cfg(not(loom))]
    set: std::sync::atomic::AtomicBool,
}

impl Latch {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Sets the latch and wakes every waiter. Memory ordering: the release store of `set`
    /// (under the loom model, the mutex release) synchronises with the acquire that sees it,
    /// so everything written before `set` is visible after `wait` returns or `is_set` says
    /// so.
    pub(crate) fn set(&self) {
        #[cfg(loom)]
        {
            *self.state.lock().expect("latch lock") = true;
            self.cond.notify_all();
        }
        #[cfg(not(loom))]
        {
            let _parking = lock(&self.parking);
            self.set.store(true, std::sync::atomic::Ordering::Release);
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
            self.set.load(std::sync::atomic::Ordering::Acquire)
        }
    }

    /// Blocks the calling thread until the latch is set: polls it for [`POLL_BEFORE_PARK`]
    /// (short spins, each followed by a yield of the core), then parks.
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
            let start = std::time::Instant::now();
            while !self.is_set() {
                if start.elapsed() >= POLL_BEFORE_PARK {
                    let mut parking = lock(&self.parking);
                    while !self.is_set() {
                        parking = self
                            .cond
                            .wait(parking)
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                    }
                    return;
                }
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Latch, POLL_BEFORE_PARK};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A wait returns once the latch is set, and not before, whether the set comes while the
    /// waiter polls or long after it parked; what the setter wrote before is visible.
    #[test]
    fn a_latch_wait_returns_when_set_during_its_poll_or_after_it_parked() {
        for delay in [Duration::ZERO, 50 * POLL_BEFORE_PARK] {
            let latch = std::sync::Arc::new(Latch::new());
            let written = std::sync::Arc::new(AtomicUsize::new(0));
            let setter = {
                let (latch, written) = (latch.clone(), written.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    written.store(7, Ordering::Relaxed);
                    latch.set();
                })
            };
            latch.wait();
            assert!(latch.is_set());
            assert_eq!(written.load(Ordering::Relaxed), 7, "delay {delay:?}");
            setter.join().unwrap();
            // A set latch stays set: a second wait returns at once.
            latch.wait();
        }
    }
}
