//! Raw pointers that cross threads.
//!
//! Owns [`SendPtr`]: a raw pointer a task hands to the threads it fans out to (the parts of
//! one large copy, say), in place of its address as a `usize`. Invariant: the pointer keeps
//! its provenance: it is never cast to an integer and back, so Miri checks its uses against
//! the allocation it came from, and the code needs no exposed provenance. Carrying the
//! pointer is always sound; every dereference is `unsafe` at the use site, whose `SAFETY:`
//! comment says why the threads touch disjoint elements or only read.

/// A raw pointer that may move to, and be shared with, other threads. It adds no right to
/// dereference: reading or writing through [`SendPtr::get`] is the caller's `unsafe` duty, as
/// for any raw pointer.
///
/// ```
/// use tessera_core::SendPtr;
///
/// let mut data = [0_u64; 4];
/// let p = SendPtr::new(data.as_mut_ptr());
/// std::thread::scope(|s| {
///     for i in 0..4 {
///         // SAFETY: each thread writes its own element of `data`, which outlives the scope.
///         s.spawn(move || unsafe { *p.get().add(i) = i as u64 });
///     }
/// });
/// assert_eq!(data, [0, 1, 2, 3]);
/// ```
#[derive(Debug)]
pub struct SendPtr<T>(*mut T);

impl<T> SendPtr<T> {
    /// Wraps `ptr`, keeping its provenance.
    pub fn new(ptr: *mut T) -> Self {
        Self(ptr)
    }

    /// Wraps a pointer that will only be read through (`ptr.cast_mut()`: the provenance is
    /// kept, and writing through it stays as undefined as it was).
    pub fn new_const(ptr: *const T) -> Self {
        Self(ptr.cast_mut())
    }

    /// The pointer, with the provenance it was made with.
    pub fn get(self) -> *mut T {
        self.0
    }

    /// The pointer as a `*const T`, for reads.
    pub fn get_const(self) -> *const T {
        self.0.cast_const()
    }
}

impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SendPtr<T> {}

// SAFETY: a `SendPtr` is a plain address with provenance; holding or moving it on another
// thread accesses nothing. Every access through it is an `unsafe` dereference of the raw
// pointer, whose caller vouches for exclusivity; the bounds are those of moving the `T`s it
// reaches (`Send`) and of sharing them (`Sync`) between threads.
unsafe impl<T: Send + Sync> Send for SendPtr<T> {}
// SAFETY: as for `Send`: `&SendPtr` only yields copies of the pointer.
unsafe impl<T: Send + Sync> Sync for SendPtr<T> {}
