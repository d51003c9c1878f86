//! One shared, 64-byte-aligned backing allocation, and the strided views into it.
//!
//! Owns: [`SharedBuffer`] (the owner token of an array's storage: one allocation, its length
//! and its [`Domain`]), [`StridedRef`] / [`StridedMut`] (the resolved views a block kernel
//! gets), and the index arithmetic that walks them ([`for_each_offset`],
//! [`for_each_common_run`], [`zip_runs`]). Copies between layouts (the copy planner and the
//! vector transposes) are CPU kernels and live in the CPU backend
//! (`tessera_backends::cpu::CopyPlan`), which reaches a view's elements through its base
//! pointer, dims and strides. Invariants:
//!
//! - Every view's pointer is derived from the allocation's own base pointer (so it has
//!   provenance over the whole allocation), and every element a view can index lies inside
//!   the allocation: checked once, when the view's descriptor is made
//!   ([`SharedBuffer::check_extent`]).
//! - A view never outlives the grant that allowed it: views borrow from the region that
//!   resolved them, with an invariant lifetime, and are not `Send`.

use crate::domain::Domain;
use smallvec::SmallVec;
use std::alloc::Layout;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// The alignment of every backing allocation, in bytes (one cache line, one AVX-512 vector).
pub const ALIGN: usize = 64;

/// Axes a view keeps inline (dims, strides, index counters): tensors of up to six legs need
/// no heap allocation per view.
const AXES: usize = 6;

/// Element types a buffer can hold: plain data for which the all-zero bit pattern is zero.
///
/// # Safety
///
/// The all-zero bit pattern must be a valid value of `Self` (it is what a new buffer holds),
/// and `Self` must have no drop glue.
pub unsafe trait Zeroable: Copy + Send + Sync + 'static {}

// SAFETY: plain numbers; all-zero is 0 (or 0.0).
unsafe impl Zeroable for f32 {}
// SAFETY: as above.
unsafe impl Zeroable for f64 {}
// SAFETY: as above.
unsafe impl Zeroable for u64 {}
// SAFETY: as above.
unsafe impl Zeroable for i64 {}
// SAFETY: as above.
unsafe impl Zeroable for u32 {}
// SAFETY: as above.
unsafe impl Zeroable for i32 {}
// SAFETY: two `f32`s; all-zero is 0 + 0i.
unsafe impl Zeroable for num_complex::Complex<f32> {}
// SAFETY: two `f64`s; all-zero is 0 + 0i.
unsafe impl Zeroable for num_complex::Complex<f64> {}

/// Element types for which every initialized bit pattern is a valid value (plain numbers),
/// so a buffer may start with whatever bytes an earlier buffer left
/// ([`SharedBuffer::recycled`]).
///
/// # Safety
///
/// Every initialized bit pattern of `size_of::<Self>()` bytes must be a valid `Self`.
pub unsafe trait AnyBits: Zeroable {}

// SAFETY: every bit pattern is some float (possibly a NaN).
unsafe impl AnyBits for f32 {}
// SAFETY: as above.
unsafe impl AnyBits for f64 {}
// SAFETY: every bit pattern is an integer.
unsafe impl AnyBits for u64 {}
// SAFETY: as above.
unsafe impl AnyBits for i64 {}
// SAFETY: as above.
unsafe impl AnyBits for u32 {}
// SAFETY: as above.
unsafe impl AnyBits for i32 {}
// SAFETY: two `f32`s.
unsafe impl AnyBits for num_complex::Complex<f32> {}
// SAFETY: two `f64`s.
unsafe impl AnyBits for num_complex::Complex<f64> {}

/// One backing allocation of `len` elements, zeroed at creation (or, from
/// [`recycled`](SharedBuffer::recycled), holding unspecified values). Large allocations go
/// back to a pool when the buffer is dropped, and new buffers of the same size reuse them
/// (see [`trim_buffer_pool`](crate::trim_buffer_pool)).
pub struct SharedBuffer<T> {
    ptr: NonNull<T>,
    len: usize,
    domain: Domain,
}

// SAFETY: the buffer is plain memory of `T: Send + Sync`; who may touch which element when is
// decided by the hazard records that accompany every view's region, not by the buffer.
unsafe impl<T: Zeroable> Send for SharedBuffer<T> {}
// SAFETY: as above; shared references only hand out raw access through `unsafe` methods.
unsafe impl<T: Zeroable> Sync for SharedBuffer<T> {}

impl<T> std::fmt::Debug for SharedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBuffer")
            .field("len", &self.len)
            .field("domain", &self.domain)
            .finish()
    }
}

/// Why a buffer could not be allocated (see [`SharedBuffer::try_zeroed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// The byte size of the buffer does not fit in `isize::MAX` (Rust's limit for one
    /// allocation), or overflows `usize`.
    #[error(
        "a buffer of {len} elements of {elem_bytes} bytes each: its byte size overflows; \
         expected at most isize::MAX bytes"
    )]
    TooLarge {
        /// The number of elements asked for.
        len: usize,
        /// The size of one element.
        elem_bytes: usize,
    },
    /// The allocator (the operating system) refused the allocation.
    #[error("the allocator refused {bytes} bytes; expected an allocation the system can provide")]
    Refused {
        /// The size asked for.
        bytes: usize,
    },
}

/// The layout of a buffer of `len` elements: at least one byte, rounded up to its pool size
/// class ([`crate::pool`]), aligned to [`ALIGN`]; an error when its size overflows
/// `isize::MAX` bytes. The one definition both allocation and deallocation use.
pub(crate) fn try_layout_of<T>(len: usize) -> Result<Layout, AllocError> {
    let too_large = AllocError::TooLarge {
        len,
        elem_bytes: size_of::<T>(),
    };
    let bytes = len
        .max(1)
        .checked_mul(size_of::<T>().max(1))
        .and_then(crate::pool::size_class)
        .ok_or(too_large)?;
    // Fails exactly when `bytes`, rounded up to the alignment, exceeds `isize::MAX`.
    Layout::from_size_align(bytes, ALIGN.max(align_of::<T>())).map_err(|_| too_large)
}

/// [`try_layout_of`] for a buffer that exists (so its layout was valid when it was made).
pub(crate) fn layout_of<T>(len: usize) -> Layout {
    try_layout_of::<T>(len).expect("a buffer's layout was checked when it was made")
}

impl<T: Zeroable> SharedBuffer<T> {
    /// A zeroed host allocation of `len` elements, aligned to [`ALIGN`] bytes.
    ///
    /// # Panics
    ///
    /// When the byte size overflows `isize::MAX`; aborts (as `Vec` does) when the allocator
    /// refuses it. [`try_zeroed`](Self::try_zeroed) returns either as an error.
    pub fn zeroed(len: usize) -> Self {
        match Self::try_zeroed(len) {
            Ok(buf) => buf,
            Err(AllocError::Refused { .. }) => std::alloc::handle_alloc_error(layout_of::<T>(len)),
            Err(e) => panic!("SharedBuffer::zeroed: {e}"),
        }
    }

    /// A zeroed host allocation of `len` elements, or the reason there is none: the byte
    /// size overflows `isize::MAX` ([`AllocError::TooLarge`], nothing is asked of the
    /// allocator), or the allocator refused it ([`AllocError::Refused`]). Nothing aborts.
    pub fn try_zeroed(len: usize) -> Result<Self, AllocError> {
        let layout = try_layout_of::<T>(len)?;
        if let Some(raw) = crate::pool::take(layout) {
            // SAFETY: the pool hands out an allocation of exactly `layout` (at least `len`
            // elements), owned by nobody else; zeroing the elements' bytes makes every
            // element zero (`T: Zeroable`); the bytes past them stay initialized.
            unsafe { raw.as_ptr().write_bytes(0, len * size_of::<T>()) };
            return Ok(Self::from_raw(raw.cast(), len));
        }
        Self::fresh(len, layout)
    }

    fn fresh(len: usize, layout: Layout) -> Result<Self, AllocError> {
        // SAFETY: the layout has a non-zero size (at least one element, at least one byte).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw.cast::<T>()).ok_or(AllocError::Refused {
            bytes: layout.size(),
        })?;
        Ok(Self::from_raw(ptr, len))
    }

    fn from_raw(ptr: NonNull<T>, len: usize) -> Self {
        Self {
            ptr,
            len,
            domain: Domain::Cpu,
        }
    }

    /// A host allocation of `len` elements holding unspecified (but valid) values: a
    /// recycled allocation as its last buffer left it, or zeros. For a temporary that is
    /// written in full before it is read; skips zeroing.
    ///
    /// # Panics
    ///
    /// As [`zeroed`](Self::zeroed); [`try_recycled`](Self::try_recycled) returns an error.
    pub fn recycled(len: usize) -> Self
    where
        T: AnyBits,
    {
        match Self::try_recycled(len) {
            Ok(buf) => buf,
            Err(AllocError::Refused { .. }) => std::alloc::handle_alloc_error(layout_of::<T>(len)),
            Err(e) => panic!("SharedBuffer::recycled: {e}"),
        }
    }

    /// [`recycled`](Self::recycled), or the reason there is no allocation (as
    /// [`try_zeroed`](Self::try_zeroed)).
    pub fn try_recycled(len: usize) -> Result<Self, AllocError>
    where
        T: AnyBits,
    {
        let layout = try_layout_of::<T>(len)?;
        let buf = match crate::pool::take(layout) {
            // The pool's bytes are initialized (its invariant), and any initialized bytes are
            // valid elements (`T: AnyBits`).
            Some(raw) => Self::from_raw(raw.cast(), len),
            None => Self::fresh(len, layout)?,
        };
        // Debug builds (the tests) fill it with all-ones bytes (NaN for floats), so a read
        // of an element nobody wrote shows up instead of passing as a stale zero.
        #[cfg(debug_assertions)]
        // SAFETY: the allocation spans `layout.size()` bytes and nothing else references it
        // yet; any bytes are valid elements (`T: AnyBits`).
        unsafe {
            buf.ptr
                .as_ptr()
                .cast::<u8>()
                .write_bytes(0xff, layout.size())
        };
        Ok(buf)
    }

    /// A host allocation of `len` elements, element `i` set to `f(i)`.
    ///
    /// # Panics
    ///
    /// As [`zeroed`](Self::zeroed); [`try_zeroed`](Self::try_zeroed) and
    /// [`as_mut_slice`](Self::as_mut_slice) fill one without a panic.
    pub fn from_fn(len: usize, mut f: impl FnMut(usize) -> T) -> Self {
        let mut buf = Self::zeroed(len);
        for (i, x) in buf.as_mut_slice().iter_mut().enumerate() {
            *x = f(i);
        }
        buf
    }

    /// Every element, to fill a buffer before it is shared: `&mut self` proves that no view
    /// or region of it exists (views borrow the buffer, regions hold it in an `Arc`).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: the allocation holds `len` initialized elements (zeroed or recycled at
        // creation, `T: Zeroable`), is aligned for `T`, and the exclusive borrow of the
        // buffer excludes every other access for the slice's lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the bytes live.
    pub fn domain(&self) -> Domain {
        self.domain
    }

    /// The base address, carrying the allocation's provenance: for alignment checks, and
    /// for views made by hand (a region that resolves to a faer matrix), which need the same
    /// extent check and grants as [`view`](SharedBuffer::view) / [`view_mut`](SharedBuffer::view_mut).
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    /// Whether a strided view at `offset` with `dims` and `strides` stays inside the buffer.
    pub fn check_extent(&self, offset: usize, dims: &[usize], strides: &[isize]) -> bool {
        if dims.len() != strides.len() {
            return false;
        }
        if dims.contains(&0) {
            return offset <= self.len;
        }
        let (mut lo, mut hi) = (offset as i128, offset as i128);
        for (&d, &s) in dims.iter().zip(strides) {
            let reach = (d as i128 - 1) * s as i128;
            if reach < 0 {
                lo += reach;
            } else {
                hi += reach;
            }
        }
        lo >= 0 && hi < self.len as i128
    }

    /// A shared strided view.
    ///
    /// # Safety
    ///
    /// `check_extent(offset, dims, strides)` holds, and the caller holds a granted read of
    /// every hazard record covering those elements while the view lives.
    pub unsafe fn view(
        &self,
        offset: usize,
        dims: &[usize],
        strides: &[isize],
    ) -> StridedRef<'_, T> {
        debug_assert!(self.check_extent(offset, dims, strides));
        StridedRef {
            // SAFETY: `offset <= len` by the extent check, so the pointer stays in bounds.
            ptr: unsafe { self.ptr.as_ptr().add(offset) },
            dims: dims.into(),
            strides: strides.into(),
            _life: PhantomData,
        }
    }

    /// An exclusive strided view.
    ///
    /// # Safety
    ///
    /// `check_extent(offset, dims, strides)` holds, no two elements of the view alias (the
    /// strides map distinct indices to distinct elements), and the caller holds a granted
    /// write of every hazard record covering those elements while the view lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn view_mut(
        &self,
        offset: usize,
        dims: &[usize],
        strides: &[isize],
    ) -> StridedMut<'_, T> {
        debug_assert!(self.check_extent(offset, dims, strides));
        StridedMut {
            // SAFETY: `offset <= len` by the extent check, so the pointer stays in bounds.
            ptr: unsafe { self.ptr.as_ptr().add(offset) },
            dims: dims.into(),
            strides: strides.into(),
            _life: PhantomData,
        }
    }
}

impl<T> Drop for SharedBuffer<T> {
    fn drop(&mut self) {
        let layout = layout_of::<T>(self.len);
        // SAFETY: allocated (by the global allocator, or taken from the pool, which holds
        // only such allocations) with this very layout; nothing references it now (every view
        // borrows from a region that holds this buffer alive); its bytes are initialized.
        unsafe { crate::pool::give(layout, self.ptr.cast()) }
    }
}

/// A shared strided view: `dims.len()` axes, element `(i0, i1, ..)` at
/// `ptr + sum(i_k * strides[k])`.
pub struct StridedRef<'a, T> {
    ptr: *const T,
    dims: SmallVec<[usize; AXES]>,
    strides: SmallVec<[isize; AXES]>,
    _life: PhantomData<&'a [T]>,
}

/// An exclusive strided view.
pub struct StridedMut<'a, T> {
    ptr: *mut T,
    dims: SmallVec<[usize; AXES]>,
    strides: SmallVec<[isize; AXES]>,
    _life: PhantomData<&'a mut [T]>,
}

// SAFETY: a `StridedRef` is a shared borrow of elements of `T` for `'a`, as `&'a [T]` is:
// moving or sharing it across threads only lets other threads read those elements, which is
// sound when `T: Sync`.
unsafe impl<T: Sync> Send for StridedRef<'_, T> {}
// SAFETY: as for `Send`: shared access through `&StridedRef` only reads.
unsafe impl<T: Sync> Sync for StridedRef<'_, T> {}
// SAFETY: a `StridedMut` is an exclusive borrow of distinct elements of `T` for `'a`, as
// `&'a mut [T]` is: moving it to another thread moves that exclusive access, which is sound
// when `T: Send`.
unsafe impl<T: Send> Send for StridedMut<'_, T> {}

/// The index ranges of `parts` consecutive pieces of an axis of extent `n`, as equal as can
/// be (the earlier ones one longer where `parts` does not divide `n`), none empty: at most
/// `n` pieces, and one (empty) when `n` is 0.
fn axis_pieces(n: usize, parts: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let parts = parts.clamp(1, n.max(1));
    let (base, extra) = (n / parts, n % parts);
    (0..parts).map(move |i| {
        let start = i * base + i.min(extra);
        start..start + base + usize::from(i < extra)
    })
}

/// The parts of a view of `dims` and `strides` cut along `axis` (see
/// [`StridedRef::split_axis`]), each made by `make` from its base's offset from the view's
/// base (in elements) and its dims; the view itself (offset 0) when it has no element.
/// `None` when `axis` is out of range.
fn split_parts<V>(
    dims: &[usize],
    strides: &[isize],
    axis: usize,
    parts: usize,
    make: impl Fn(isize, SmallVec<[usize; AXES]>) -> V,
) -> Option<Vec<V>> {
    let (n, step) = (*dims.get(axis)?, *strides.get(axis)?);
    if dims.contains(&0) {
        return Some(vec![make(0, dims.into())]);
    }
    Some(
        axis_pieces(n, parts)
            .map(|r| {
                let mut d: SmallVec<[usize; AXES]> = dims.into();
                d[axis] = r.len();
                make(r.start as isize * step, d)
            })
            .collect(),
    )
}

/// The dims and strides of a view with axis `axis` unfolded into the axes `parts` (first
/// fastest): axis `axis` of extent `prod(parts)` and stride `s` becomes axes of extents
/// `parts[0], parts[1], ...` and strides `s, s * parts[0], ...`. An empty `parts` removes an
/// axis of extent 1. `None` when `axis` is out of range or the extents do not multiply up.
#[allow(clippy::type_complexity)]
fn unfold(
    dims: &[usize],
    strides: &[isize],
    axis: usize,
    parts: &[usize],
) -> Option<(SmallVec<[usize; AXES]>, SmallVec<[isize; AXES]>)> {
    let (&n, &s) = (dims.get(axis)?, strides.get(axis)?);
    let mut total = 1_usize;
    for &p in parts {
        total = total.checked_mul(p)?;
    }
    if total != n {
        return None;
    }
    let mut d: SmallVec<[usize; AXES]> = dims[..axis].into();
    let mut st: SmallVec<[isize; AXES]> = strides[..axis].into();
    let mut step = s;
    for &p in parts {
        d.push(p);
        st.push(step);
        step = step.wrapping_mul(p as isize);
    }
    d.extend_from_slice(&dims[axis + 1..]);
    st.extend_from_slice(&strides[axis + 1..]);
    Some((d, st))
}

fn linear(dims: &[usize], strides: &[isize], index: &[usize]) -> Option<isize> {
    if index.len() != dims.len() {
        return None;
    }
    let mut at = 0_isize;
    for ((&i, &d), &s) in index.iter().zip(dims).zip(strides) {
        if i >= d {
            return None;
        }
        at += i as isize * s;
    }
    Some(at)
}

/// The offset of the first element of the box of extents `sub` starting at `start` inside a
/// view of `dims`, or `None` unless the box is non-empty and inside the view.
fn box_offset(dims: &[usize], strides: &[isize], start: &[usize], sub: &[usize]) -> Option<isize> {
    if sub.len() != dims.len() || sub.contains(&0) {
        return None;
    }
    let inside = start
        .iter()
        .zip(sub)
        .zip(dims)
        .all(|((&s, &n), &d)| s.checked_add(n).is_some_and(|e| e <= d));
    if !inside {
        return None;
    }
    linear(dims, strides, start)
}

/// Calls `f(k, offset)` for every multi-index of `dims` in column-major order (first axis
/// fastest): `k` counts the elements, `offset` is `sum(index[a] * strides[a])`. Pure index
/// arithmetic: nothing is read or written.
pub fn for_each_offset(dims: &[usize], strides: &[isize], mut f: impl FnMut(usize, isize)) {
    if dims.contains(&0) {
        return;
    }
    let n: usize = dims.iter().product();
    let mut index: SmallVec<[usize; AXES]> = smallvec::smallvec![0; dims.len()];
    let mut at = 0_isize;
    for k in 0..n {
        f(k, at);
        for axis in 0..dims.len() {
            index[axis] += 1;
            at += strides[axis];
            if index[axis] < dims[axis] {
                break;
            }
            at -= strides[axis] * dims[axis] as isize;
            index[axis] = 0;
        }
    }
}

/// How many leading axes are laid out densely (column-major, unit stride first), and the
/// number of elements they span: one contiguous run.
fn dense_prefix(dims: &[usize], strides: &[isize]) -> (usize, usize) {
    let mut run = 1_usize;
    for (axis, (&d, &s)) in dims.iter().zip(strides).enumerate() {
        if d != 1 && s != run as isize {
            return (axis, run);
        }
        run *= d;
    }
    (dims.len(), run)
}

/// Calls `f(k, offsets)` for every contiguous run shared by several views of the same shape:
/// `k` is the column-major position of the run's first element, `offsets[v]` its offset in
/// view `v`, and every run has `run` elements. Views of equal dims and equal dense prefixes
/// get long runs; otherwise runs shrink (to single elements at worst), never wrong. Pure
/// index arithmetic: nothing is read or written (the CPU backend's copy planner walks its
/// contiguous runs with it).
pub fn for_each_common_run<const V: usize>(
    dims: &[usize],
    strides: [&[isize]; V],
    mut f: impl FnMut(usize, usize, [isize; V]),
) {
    if dims.contains(&0) {
        return;
    }
    let axes = strides
        .iter()
        .map(|s| dense_prefix(dims, s).0)
        .min()
        .unwrap_or(dims.len());
    let run: usize = dims[..axes].iter().product();
    let outer = &dims[axes..];
    let n_outer: usize = outer.iter().product();
    let mut index: SmallVec<[usize; AXES]> = smallvec::smallvec![0; outer.len()];
    let mut at = [0_isize; V];
    for j in 0..n_outer {
        f(j * run, run, at);
        for (axis, i) in index.iter_mut().enumerate() {
            *i += 1;
            for (v, s) in strides.iter().enumerate() {
                at[v] += s[axes + axis];
            }
            if *i < outer[axis] {
                break;
            }
            for (v, s) in strides.iter().enumerate() {
                at[v] -= s[axes + axis] * outer[axis] as isize;
            }
            *i = 0;
        }
    }
}

/// Applies `f` to the contiguous runs of an exclusive view and a shared view of the same
/// dims, pairwise, in column-major order: `f(k, dst_run, src_run)` with `k` the position of
/// the runs' first element. Returns `false` (and calls nothing) when the dims differ.
pub fn zip_runs<T: Copy, U: Copy>(
    dst: &mut StridedMut<'_, T>,
    src: &StridedRef<'_, U>,
    mut f: impl FnMut(usize, &mut [T], &[U]),
) -> bool {
    if dst.dims != src.dims {
        return false;
    }
    let (pd, ps) = (dst.ptr, src.ptr);
    for_each_common_run(
        &dst.dims,
        [&dst.strides, &src.strides],
        |k, run, [od, os]| {
            // SAFETY: each run lies inside its view's checked extent; `dst` is exclusive and
            // its runs are disjoint, `src` is shared; the two views are distinct grants (an
            // output never shares a record with an input), so the slices do not overlap.
            let (d, s) = unsafe {
                (
                    std::slice::from_raw_parts_mut(pd.offset(od), run),
                    std::slice::from_raw_parts(ps.offset(os), run),
                )
            };
            f(k, d, s);
        },
    );
    true
}

/// Applies `f` to the contiguous runs of two shared views of the same dims, pairwise:
/// `f(k, a_run, b_run)`. Returns `false` (and calls nothing) when the dims differ.
pub fn zip_runs_ref<T: Copy, U: Copy>(
    a: &StridedRef<'_, T>,
    b: &StridedRef<'_, U>,
    mut f: impl FnMut(usize, &[T], &[U]),
) -> bool {
    if a.dims != b.dims {
        return false;
    }
    let (pa, pb) = (a.ptr, b.ptr);
    for_each_common_run(&a.dims, [&a.strides, &b.strides], |k, run, [oa, ob]| {
        // SAFETY: each run lies inside its view's checked extent; both grants allow reads.
        let (x, y) = unsafe {
            (
                std::slice::from_raw_parts(pa.offset(oa), run),
                std::slice::from_raw_parts(pb.offset(ob), run),
            )
        };
        f(k, x, y);
    });
    true
}

macro_rules! shared_view_methods {
    () => {
        /// The extent of each axis.
        pub fn dims(&self) -> &[usize] {
            &self.dims
        }

        /// The stride of each axis, in elements.
        pub fn strides(&self) -> &[isize] {
            &self.strides
        }

        /// The number of elements.
        pub fn len(&self) -> usize {
            self.dims.iter().product()
        }

        /// Whether the view holds no element.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// The element at a multi-index, or `None` when it is out of range.
        pub fn get(&self, index: &[usize]) -> Option<T> {
            let at = linear(&self.dims, &self.strides, index)?;
            // SAFETY: the index is in range, so the element lies inside the view's extent,
            // which the constructor checked against the allocation; the grant allows reads.
            Some(unsafe { *self.ptr.offset(at) })
        }

        /// Calls `f` on every element in column-major order (first axis fastest).
        pub fn for_each(&self, mut f: impl FnMut(T)) {
            for_each_offset(&self.dims, &self.strides, |_, at| {
                // SAFETY: every offset visited is an in-range index of the view, inside the
                // checked extent; the grant allows reads.
                let value = unsafe { *self.ptr.offset(at) };
                f(value)
            });
        }

        /// The elements in column-major order.
        pub fn to_vec(&self) -> Vec<T> {
            let mut out = Vec::with_capacity(self.len());
            self.for_each_run(|_, run| out.extend_from_slice(run));
            out
        }

        /// The base pointer, for backends that take raw strided operands (faer, cuBLAS).
        pub fn as_ptr(&self) -> *const T {
            self.ptr
        }

        /// Calls `f(k, run)` on every maximal contiguous run of elements, in column-major
        /// order; `k` is the position of the run's first element.
        pub fn for_each_run(&self, mut f: impl FnMut(usize, &[T])) {
            let p = self.ptr;
            for_each_common_run(&self.dims, [&self.strides], |k, run, [o]| {
                // SAFETY: the run lies inside the view's checked extent; the grant allows
                // reads and no exclusive reference to it exists while `&self` is borrowed.
                f(k, unsafe { std::slice::from_raw_parts(p.offset(o), run) })
            });
        }
    };
}

impl<'a, T: Copy> StridedRef<'a, T> {
    shared_view_methods!();

    /// The box of extents `dims` starting at index `start`, as a view of the same elements;
    /// `None` unless the box is non-empty and inside the view.
    ///
    /// ```
    /// use tessera_core::SharedBuffer;
    /// let b = SharedBuffer::from_fn(12, |i| i as f64);
    /// // SAFETY: the extent is inside the buffer, and nothing writes it.
    /// let v = unsafe { b.view(0, &[3, 4], &[1, 3]) };
    /// let s = v.sub_box(&[1, 2], &[2, 2]).unwrap();
    /// assert_eq!(s.to_vec(), [7.0, 8.0, 10.0, 11.0]);
    /// assert!(v.sub_box(&[2, 0], &[2, 1]).is_none()); // past the first axis
    /// ```
    pub fn sub_box(&self, start: &[usize], dims: &[usize]) -> Option<StridedRef<'a, T>> {
        let at = box_offset(&self.dims, &self.strides, start, dims)?;
        Some(StridedRef {
            // SAFETY: `at` is the offset of the in-range index `start`, inside the checked
            // extent; every index of the box is an index of this view.
            ptr: unsafe { self.ptr.offset(at) },
            dims: dims.into(),
            strides: self.strides.clone(),
            _life: PhantomData,
        })
    }

    /// The same elements with the axes reordered: axis `k` of the result is axis `perm[k]`
    /// of `self`. `None` when `perm` is not a permutation of the axes.
    pub fn permute_axes(&self, perm: &[usize]) -> Option<StridedRef<'a, T>> {
        if perm.len() != self.dims.len() {
            return None;
        }
        let mut seen: SmallVec<[bool; 4]> = smallvec::smallvec![false; perm.len()];
        for &p in perm {
            if p >= perm.len() || std::mem::replace(&mut seen[p], true) {
                return None;
            }
        }
        Some(StridedRef {
            ptr: self.ptr,
            dims: perm.iter().map(|&p| self.dims[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            _life: PhantomData,
        })
    }

    /// The same elements with axis `axis` unfolded into several: an axis of extent
    /// `prod(parts)` becomes axes of extents `parts` (the first fastest, as a column-major
    /// reshape); an empty `parts` drops an axis of extent 1. `None` when `axis` is out of
    /// range or `parts` does not multiply to its extent.
    ///
    /// ```
    /// use tessera_core::SharedBuffer;
    /// let b = SharedBuffer::from_fn(12, |i| i as f64);
    /// // SAFETY: the extent is inside the buffer, and nothing writes it.
    /// let v = unsafe { b.view(0, &[6, 2], &[1, 6]) };
    /// let u = v.unfold_axis(0, &[2, 3]).unwrap();
    /// assert_eq!(u.dims(), &[2, 3, 2]);
    /// assert_eq!(u.get(&[1, 2, 1]), Some(11.0));
    /// ```
    pub fn unfold_axis(&self, axis: usize, parts: &[usize]) -> Option<StridedRef<'a, T>> {
        let (dims, strides) = unfold(&self.dims, &self.strides, axis, parts)?;
        Some(StridedRef {
            ptr: self.ptr,
            dims,
            strides,
            _life: PhantomData,
        })
    }

    /// The view cut along `axis` into `parts` views of consecutive index ranges, in order,
    /// as equal as can be (the earlier ones one index longer where `parts` does not divide
    /// the axis), none empty: fewer parts when the axis is shorter, and the view itself when
    /// it is empty. Views of equal dims cut alike, so their parts pair up element for
    /// element (what an elementwise kernel spread over threads needs). `None` when `axis`
    /// is out of range.
    ///
    /// ```
    /// use tessera_core::SharedBuffer;
    /// let b = SharedBuffer::from_fn(12, |i| i as f64);
    /// // SAFETY: the extent is inside the buffer, and nothing writes it.
    /// let v = unsafe { b.view(0, &[3, 4], &[1, 3]) };
    /// let parts = v.split_axis(1, 3).unwrap();
    /// let dims: Vec<&[usize]> = parts.iter().map(|p| p.dims()).collect();
    /// assert_eq!(dims, [&[3, 2][..], &[3, 1], &[3, 1]]);
    /// assert_eq!(parts[1].to_vec(), [6.0, 7.0, 8.0]);
    /// ```
    pub fn split_axis(&self, axis: usize, parts: usize) -> Option<Vec<StridedRef<'a, T>>> {
        // Wrapping offsets: each base is an element of the view (or the view's own base).
        split_parts(&self.dims, &self.strides, axis, parts, |at, dims| {
            StridedRef {
                ptr: self.ptr.wrapping_offset(at),
                dims,
                strides: self.strides.clone(),
                _life: PhantomData,
            }
        })
    }
}

impl<'a, T: Copy> StridedMut<'a, T> {
    /// The same elements with axis `axis` unfolded, as [`StridedRef::unfold_axis`] does;
    /// `Err(self)` when the extents do not fit.
    pub fn unfold_axis(self, axis: usize, parts: &[usize]) -> Result<StridedMut<'a, T>, Self> {
        match unfold(&self.dims, &self.strides, axis, parts) {
            // A reshape of the same axis: distinct indices still map to distinct elements.
            Some((dims, strides)) => Ok(StridedMut {
                ptr: self.ptr,
                dims,
                strides,
                _life: PhantomData,
            }),
            None => Err(self),
        }
    }

    /// The view cut along `axis` as [`StridedRef::split_axis`] cuts it, into exclusive views
    /// of disjoint elements (the parts hold disjoint index ranges, and a view's layout maps
    /// distinct indices to distinct elements), which may be written on different threads.
    pub fn split_axis(self, axis: usize, parts: usize) -> Option<Vec<StridedMut<'a, T>>> {
        // As for `StridedRef::split_axis`.
        split_parts(&self.dims, &self.strides, axis, parts, |at, dims| {
            StridedMut {
                ptr: self.ptr.wrapping_offset(at),
                dims,
                strides: self.strides.clone(),
                _life: PhantomData,
            }
        })
    }
}

impl<T: Copy> StridedMut<'_, T> {
    shared_view_methods!();

    /// The box of extents `dims` starting at index `start`, as an exclusive view borrowing
    /// this one; `None` unless the box is non-empty and inside the view.
    pub fn sub_box_mut(&mut self, start: &[usize], dims: &[usize]) -> Option<StridedMut<'_, T>> {
        let at = box_offset(&self.dims, &self.strides, start, dims)?;
        Some(StridedMut {
            // SAFETY: `at` is the offset of the in-range index `start`, inside the checked
            // extent, and every index of the box is an index of this view, so the box's
            // elements are this view's (distinct, exclusive: the borrow of `self` keeps
            // them from being reached through `self` meanwhile).
            ptr: unsafe { self.ptr.offset(at) },
            dims: dims.into(),
            strides: self.strides.clone(),
            _life: PhantomData,
        })
    }

    /// Sets the element at a multi-index; returns `false` (and writes nothing) when it is out
    /// of range.
    pub fn set(&mut self, index: &[usize], value: T) -> bool {
        match linear(&self.dims, &self.strides, index) {
            Some(at) => {
                // SAFETY: in range, inside the checked extent; the grant is exclusive.
                unsafe { *self.ptr.offset(at) = value };
                true
            }
            None => false,
        }
    }

    /// Replaces every element `x` (column-major order, with its position `k`) by `f(k, x)`.
    pub fn update(&mut self, mut f: impl FnMut(usize, T) -> T) {
        let ptr = self.ptr;
        for_each_offset(&self.dims, &self.strides, |k, at| {
            // SAFETY: every offset visited is an in-range index of the view, which holds the
            // exclusive grant; indices map to distinct elements (constructor's duty).
            unsafe {
                let p = ptr.offset(at);
                *p = f(k, *p);
            }
        });
    }

    /// Calls `f(k, run)` on every maximal contiguous run of elements, mutably.
    pub fn for_each_run_mut(&mut self, mut f: impl FnMut(usize, &mut [T])) {
        let p = self.ptr;
        for_each_common_run(&self.dims, [&self.strides], |k, run, [o]| {
            // SAFETY: the run lies inside the checked extent, the view's grant is exclusive,
            // and runs are disjoint (distinct indices map to distinct elements).
            f(k, unsafe {
                std::slice::from_raw_parts_mut(p.offset(o), run)
            })
        });
    }

    /// The mutable base pointer, for backends.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// A shared view of the same elements, borrowing this one.
    pub fn as_ref(&self) -> StridedRef<'_, T> {
        StridedRef {
            ptr: self.ptr,
            dims: self.dims.clone(),
            strides: self.strides.clone(),
            _life: PhantomData,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_testing::column_major_strides;

    #[test]
    fn allocation_is_aligned_zeroed_and_views_stay_inside() {
        let buf = SharedBuffer::<f64>::zeroed(24);
        assert_eq!(buf.as_ptr() as usize % ALIGN, 0);
        assert!(buf.check_extent(0, &[4, 6], &[1, 4]));
        assert!(!buf.check_extent(1, &[4, 6], &[1, 4]));
        assert!(buf.check_extent(23, &[4, 6], &[-1, -4]));
        assert!(!buf.check_extent(0, &[2], &[1, 1]));
        // SAFETY: the extent was checked; this test is the only user of the buffer.
        let mut m = unsafe { buf.view_mut(0, &[4, 6], &[1, 4]) };
        m.update(|k, _| k as f64);
        assert!(m.set(&[3, 5], -1.0));
        assert!(!m.set(&[4, 0], 9.0), "out of range writes nothing");
        // A transposed view of the same memory (a read, after the write above ended).
        drop(m);
        // SAFETY: as above.
        let t = unsafe { buf.view(0, &[6, 4], &[4, 1]) };
        assert_eq!(t.get(&[1, 2]), Some(6.0));
        assert_eq!(t.get(&[5, 3]), Some(-1.0));
        assert_eq!(t.get(&[6, 0]), None);
        assert_eq!(t.to_vec().len(), 24);
        let mut sum = 0.0;
        t.for_each(|v| sum += v);
        assert_eq!(sum, (0..23).sum::<usize>() as f64 - 1.0);
    }

    /// A size past `isize::MAX` bytes is refused before the allocator is asked; a size the
    /// allocator refuses (2^60 bytes: more than any address space) is an error, not an
    /// abort; and what fits is filled through `as_mut_slice`.
    #[test]
    #[cfg_attr(miri, ignore)] // Miri reports the 2^60-byte request instead of refusing it
    fn too_large_or_refused_allocations_are_errors() {
        let elem_bytes = size_of::<f64>();
        for len in [usize::MAX, usize::MAX / 8 + 1, isize::MAX as usize / 8 + 1] {
            assert_eq!(
                SharedBuffer::<f64>::try_zeroed(len).unwrap_err(),
                AllocError::TooLarge { len, elem_bytes }
            );
        }
        let len = 1usize << 57;
        assert_eq!(
            SharedBuffer::<f64>::try_zeroed(len).unwrap_err(),
            AllocError::Refused { bytes: 1 << 60 }
        );
        assert_eq!(
            SharedBuffer::<f64>::try_recycled(len).unwrap_err(),
            AllocError::Refused { bytes: 1 << 60 }
        );
        let msg = AllocError::TooLarge { len, elem_bytes }.to_string();
        assert!(
            msg.contains("isize::MAX") && msg.contains(&len.to_string()),
            "{msg}"
        );
        let mut ok = SharedBuffer::<f64>::try_zeroed(5).unwrap();
        assert_eq!(ok.as_mut_slice(), &[0.0; 5]);
        ok.as_mut_slice()[4] = 2.0;
        // SAFETY: the extent is the whole buffer; no other view exists.
        assert_eq!(unsafe { ok.view(0, &[5], &[1]) }.get(&[4]), Some(2.0));
        assert!(SharedBuffer::<f64>::try_zeroed(0).unwrap().is_empty());
    }

    /// A box of a view (permuted and negative strides included) holds the elements of its
    /// index range, and an exclusive box writes exactly those; empty boxes, boxes past an
    /// axis and boxes of the wrong rank are refused.
    #[test]
    fn a_sub_box_holds_the_elements_of_its_index_range() {
        let dims = [3_usize, 4, 5];
        let n: usize = dims.iter().product();
        let cm = column_major_strides(&dims);
        let layouts: [(usize, Vec<isize>); 2] =
            [(0, cm.clone()), (n - 12, vec![cm[0], cm[1], -cm[2]])];
        for (offset, strides) in &layouts {
            let buf = SharedBuffer::<u64>::from_fn(n, |k| k as u64);
            // SAFETY: the layouts lie inside the buffer; no other view writes it.
            let mut whole = unsafe { buf.view_mut(*offset, &dims, strides) };
            let (start, sub) = ([1, 2, 1], [2, 2, 3]);
            let b = whole.as_ref().sub_box(&start, &sub).unwrap().to_vec();
            let mut k = 0;
            for c in 0..3 {
                for j in 0..2 {
                    for i in 0..2 {
                        let at = [start[0] + i, start[1] + j, start[2] + c];
                        assert_eq!(Some(b[k]), whole.get(&at));
                        k += 1;
                    }
                }
            }
            whole
                .sub_box_mut(&start, &sub)
                .unwrap()
                .update(|_, _| u64::MAX);
            let written = (0..n)
                .filter(|&k| {
                    let at = [k % 3, k / 3 % 4, k / 12];
                    whole.get(&at) == Some(u64::MAX)
                })
                .count();
            assert_eq!(written, 12);
            assert!(whole.as_ref().sub_box(&[0, 0, 0], &[3, 4, 0]).is_none());
            assert!(whole.as_ref().sub_box(&[2, 0, 0], &[2, 1, 1]).is_none());
            assert!(whole.sub_box_mut(&[0, 0], &[1, 1]).is_none());
        }
    }

    /// A view cut along any axis, into any number of parts: the parts are non-empty, their
    /// extents along the axis add up, each holds the elements of its index range of the
    /// whole view (permuted and negative strides included); exclusive parts written on
    /// threads of their own write every element of the view once.
    #[test]
    fn the_parts_of_a_split_view_hold_its_elements_once() {
        let dims = [3_usize, 4, 5];
        let n: usize = dims.iter().product();
        let buf = SharedBuffer::<u64>::from_fn(n, |k| k as u64);
        // Column-major, its axes reordered, and its last axis reversed (base at the far end).
        let cm = column_major_strides(&dims);
        let layouts: [(usize, Vec<usize>, Vec<isize>); 3] = [
            (0, dims.to_vec(), cm.clone()),
            (0, vec![4, 5, 3], vec![cm[1], cm[2], cm[0]]),
            (n - 12, dims.to_vec(), vec![cm[0], cm[1], -cm[2]]),
        ];
        for (offset, dims, strides) in &layouts {
            // SAFETY: every layout lies inside the buffer (reversed: its base is the last
            // slab); nothing writes the buffer while the view lives.
            let whole = unsafe { buf.view(*offset, dims, strides) };
            for axis in 0..3 {
                for parts in [1, 2, 3, 7] {
                    let cut = whole.split_axis(axis, parts).unwrap();
                    assert_eq!(cut.len(), parts.min(dims[axis]));
                    assert!(cut.iter().all(|p| !p.is_empty()));
                    let mut start = 0;
                    for part in &cut {
                        for_each_offset(part.dims(), part.strides(), |k, _| {
                            let mut index = vec![0; 3];
                            let mut rest = k;
                            for (i, &d) in index.iter_mut().zip(part.dims()) {
                                (*i, rest) = (rest % d, rest / d);
                            }
                            let value = part.get(&index).unwrap();
                            index[axis] += start;
                            assert_eq!(Some(value), whole.get(&index), "{dims:?} axis {axis}");
                        });
                        start += part.dims()[axis];
                    }
                    assert_eq!(start, dims[axis]);
                }
            }
            assert!(whole.split_axis(3, 2).is_none());
        }
        // Exclusive parts, each written on a thread of its own.
        let out = SharedBuffer::<u64>::zeroed(n);
        // SAFETY: the full extent of a fresh buffer, which only this view reaches.
        let view = unsafe { out.view_mut(0, &dims, &column_major_strides(&dims)) };
        std::thread::scope(|scope| {
            for (i, mut part) in view.split_axis(1, 3).unwrap().into_iter().enumerate() {
                scope.spawn(move || part.update(|_, v| v + i as u64 + 1));
            }
        });
        // SAFETY: the writers are done; nothing writes the buffer any more.
        let written = unsafe { out.view(0, &[n], &[1]) }.to_vec();
        let expected: Vec<u64> = (0..n).map(|k| [1, 1, 2, 3][k / 3 % 4]).collect();
        assert_eq!(written, expected);
        // An empty view is one part, itself.
        // SAFETY: an empty view at the buffer's start.
        let empty = unsafe { buf.view(0, &[0, 4], &[1, 1]) };
        assert_eq!(empty.split_axis(1, 3).unwrap().len(), 1);
    }

    #[test]
    fn runs_cover_every_element_once_in_order() {
        let buf = SharedBuffer::<u64>::zeroed(5 * 7 * 3);
        // A 2 x 3 x 2 sub-block of a 5 x 7 x 3 column-major tensor, starting at (1, 2, 1).
        let (dims, strides) = ([2, 3, 2], [1_isize, 5, 35]);
        let offset = 1 + 2 * 5 + 35;
        assert!(buf.check_extent(offset, &dims, &strides));
        // SAFETY: checked extent, sole user.
        let mut v = unsafe { buf.view_mut(offset, &dims, &strides) };
        v.update(|k, _| k as u64 + 1);
        let mut seen = Vec::new();
        let mut runs = 0;
        v.for_each_run_mut(|k, run| {
            runs += 1;
            assert_eq!(run.len(), 2);
            seen.extend(run.iter().copied());
            assert_eq!(run[0], k as u64 + 1);
        });
        assert_eq!(runs, 6);
        assert_eq!(seen, (1..=12).collect::<Vec<u64>>());
        // A dense destination zipped with the strided source: one run per source run.
        let dst_buf = SharedBuffer::<u64>::zeroed(12);
        // SAFETY: checked extents, distinct buffers, sole user.
        let mut d = unsafe { dst_buf.view_mut(0, &dims, &[1, 2, 6]) };
        assert!(zip_runs(&mut d, &v.as_ref(), |_, d, s| d.copy_from_slice(s)));
        assert_eq!(d.to_vec(), (1..=12).collect::<Vec<u64>>());
        let flat_buf = SharedBuffer::<u64>::zeroed(12);
        // SAFETY: checked extent, sole user.
        let flat = unsafe { flat_buf.view(0, &[12], &[1]) };
        assert!(
            !zip_runs(&mut d, &flat, |_, _, _| {}),
            "dims differ: nothing is called"
        );
    }
}
