//! One shared, 64-byte-aligned backing allocation, and the strided views into it.
//!
//! Owns: [`SharedBuffer`] (the owner token of an array's storage: one allocation, its length
//! and its [`Domain`]), [`StridedRef`] / [`StridedMut`] (the resolved views a block kernel
//! gets) and [`CopyPlan`] (a copy between two strided layouts, planned once from the layouts
//! alone, which the views' copies run through). Invariants:
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

/// The layout of a buffer of `len` elements: at least one byte, aligned to [`ALIGN`]; an
/// error when its size overflows `isize::MAX` bytes. The one definition both allocation and
/// deallocation use.
pub(crate) fn try_layout_of<T>(len: usize) -> Result<Layout, AllocError> {
    let too_large = AllocError::TooLarge {
        len,
        elem_bytes: size_of::<T>(),
    };
    let bytes = len
        .max(1)
        .checked_mul(size_of::<T>().max(1))
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
            // SAFETY: the pool hands out an allocation of exactly `layout`, owned by nobody
            // else; zeroing its bytes makes every element zero (`T: Zeroable`).
            unsafe { raw.as_ptr().write_bytes(0, layout.size()) };
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
/// get long runs; otherwise runs shrink (to single elements at worst), never wrong.
fn for_each_common_run<const V: usize>(
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

/// The tiles of a transposing copy: `TILE_FAST` elements along the source's contiguous axis
/// (one 64-byte line of `f64`s) by `TILE_DST` along the destination's. Each pass down the
/// destination's axis touches `TILE_DST` source lines at once, independent loads the core
/// overlaps; the next `TILE_FAST - 1` passes find those lines in L1.
const TILE_FAST: usize = 8;
/// See [`TILE_FAST`].
const TILE_DST: usize = 64;
/// The square a full tile is moved through: 8 x 8 elements, which the compiler keeps in
/// vector registers.
const MICRO: usize = 8;
/// The sub-rectangles a vector transpose is handed: at most this many rows and columns, so
/// that the source rows and destination columns one call touches stay within reach of the
/// TLB and the prefetchers, however large the block.
const KERNEL_TILE: usize = 64;
const _: () = assert!(KERNEL_TILE.is_multiple_of(MICRO));

/// Hints the cache to fetch the line holding `p`. A hint only: it never faults, whatever
/// `p` is, and does nothing on targets without the instruction.
#[inline(always)]
fn prefetch<U>(p: *const U) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint; it does not access memory architecturally and cannot
    // fault, so any address is fine. SSE is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// `dst[r + c * ld_dst] = f(src[c + r * ld_src])` for `r, c < MICRO`.
///
/// # Safety
///
/// Every element named lies inside an allocation the caller may read (`src`) or write
/// exclusively (`dst`), and the two squares do not overlap.
#[inline(always)]
unsafe fn micro_transpose<T: Copy, U: Copy>(
    dst: *mut T,
    ld_dst: isize,
    src: *const U,
    ld_src: isize,
    f: &impl Fn(U) -> T,
) {
    // SAFETY: the caller's duty covers every offset used below.
    unsafe {
        let first = f(*src);
        let mut tile = [[first; MICRO]; MICRO];
        for (r, row) in tile.iter_mut().enumerate() {
            let line = src.offset(r as isize * ld_src);
            for (c, v) in row.iter_mut().enumerate() {
                *v = f(*line.add(c));
            }
        }
        for c in 0..MICRO {
            let line = dst.offset(c as isize * ld_dst);
            for (r, row) in tile.iter().enumerate() {
                *line.add(r) = row[c];
            }
        }
    }
}

/// A register transpose of the whole full-tile region of one 2-D transpose, for element
/// types that are plain bits of 4, 8 or 16 bytes: `dst[r + c * ld_dst] = src[c + r * ld_src]
/// ^ mask` for `r < rows`, `c < cols` (both multiples of [`MICRO`]), in elements of `T`, with
/// `mask` the element's bit pattern to flip (little-endian, as the element lies in memory;
/// bits past the element's size are ignored). One XOR per vector: a mask of zero is a plain
/// transpose, a mask of sign bits negates or conjugates exactly. The last argument asks for
/// streaming stores ([`Stores::Streaming`]); a kernel takes them only where the destination's
/// columns start on whole lines, and fences them before it returns.
type TransposeKernel = unsafe fn(*mut u8, isize, *const u8, isize, usize, usize, u128, bool);

/// How a copy's vector kernels store the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stores {
    /// Ordinary stores: the destination ends up in cache, ready for whatever reads it next.
    /// The choice for results that fit in the last-level cache.
    #[default]
    Cached,
    /// Non-temporal (streaming) stores where the layout allows (whole 64-byte lines): the
    /// destination goes to memory without first being read into cache (no read for
    /// ownership) and without evicting the cache's contents. The choice for results larger
    /// than the last-level cache, which would be evicted before their next use anyway: it
    /// saves a third of a copy's memory traffic. The stores are fenced before the copy
    /// returns, so the result is published like any other write.
    Streaming,
}

/// The register transpose for `T`, when `T` is one of the plain-bits element types of a
/// size with a vector kernel and the CPU has the instructions (detected once by std and
/// cached). `None` elsewhere, and always under Miri, which runs the portable path.
fn transpose_kernel<T: 'static>() -> Option<TransposeKernel> {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use num_complex::Complex;
        use std::any::TypeId;
        let t = TypeId::of::<T>();
        let bits8 = [
            TypeId::of::<f64>(),
            TypeId::of::<u64>(),
            TypeId::of::<i64>(),
            TypeId::of::<Complex<f32>>(),
        ];
        let bits4 = [
            TypeId::of::<f32>(),
            TypeId::of::<u32>(),
            TypeId::of::<i32>(),
        ];
        if !std::arch::is_x86_feature_detected!("avx2") {
            return None;
        }
        if bits8.contains(&t) {
            #[cfg(feature = "avx512")]
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Some(simd::transpose_b8_avx512);
            }
            return Some(simd::transpose_b8);
        }
        if t == TypeId::of::<Complex<f64>>() {
            return Some(simd::transpose_b16);
        }
        if bits4.contains(&t) {
            return Some(simd::transpose_b4);
        }
        None
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    None
}

/// The vector kernel for `T` (see [`transpose_kernel`]) with the bits it flips and whether
/// it streams its stores: what [`StridedMut::assign_flipped`] and
/// [`CopyPlan::copy_flipped`] hand their copy.
fn flipping_kernel<T: 'static>(
    mask: u128,
    stores: Stores,
) -> Option<(TransposeKernel, u128, bool)> {
    transpose_kernel::<T>().map(|k| (k, mask, stores == Stores::Streaming))
}

/// AVX2 register transposes of 8 x 8 squares of 4-, 8- and 16-byte elements, and (with the
/// `avx512` feature) an AVX-512 one for 8-byte elements, chosen where the CPU has AVX-512F.
///
/// Every kernel visits its squares in the order of `for_each_square`, and takes streaming
/// stores (see [`Stores`]) where `streams` allows.
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod simd {
    use super::MICRO;
    use std::arch::x86_64::*;

    /// Calls `square(k, j)` for the `MICRO x MICRO` squares at rows `k`, columns `j` of a
    /// `rows x cols` transpose (both multiples of `MICRO`): bands of `MICRO` columns outer,
    /// so the destination is written as `MICRO` sequential streams of whole lines (what
    /// streaming stores need to leave for memory as full lines in address order, and as
    /// fast as bands of rows for cached stores: measured on Zen 4). The source lines of the
    /// next column band are prefetched row by row, since a strided start gives the hardware
    /// prefetcher no hint. `elem` is the element size in bytes; a row of a square spans
    /// `MICRO * elem` bytes. `streaming`: the squares store with non-temporal stores, which
    /// are fenced here after the last one.
    #[inline(always)]
    pub(super) fn for_each_square(
        src: *const u8,
        ld_src: isize,
        elem: usize,
        (rows, cols): (usize, usize),
        streaming: bool,
        mut square: impl FnMut(usize, usize),
    ) {
        for j in (0..cols).step_by(MICRO) {
            for k in (0..rows).step_by(MICRO) {
                if j + MICRO < cols {
                    for r in k..k + MICRO {
                        let line = (r as isize * ld_src + (j + MICRO) as isize) * elem as isize;
                        for b in (0..MICRO * elem).step_by(64) {
                            super::prefetch(src.wrapping_offset(line).wrapping_add(b));
                        }
                    }
                }
                square(k, j);
            }
        }
        if streaming {
            // Streaming stores are weakly ordered: fence them before whatever publishes the
            // result to another thread (a release store does not order them).
            // SAFETY: `sfence` only orders stores; SSE is part of the x86-64 baseline.
            unsafe { _mm_sfence() };
        }
    }

    /// Whether stores of `elem`-byte elements at `dst` with leading dimension `ld_dst` (in
    /// elements) may stream: requested, and every destination column starts on a 64-byte
    /// line, so each square's column is written as whole lines (what the non-temporal store
    /// instructions need, alignment included).
    #[inline(always)]
    pub(super) fn streams(stream: bool, dst: *mut u8, ld_dst: isize, elem: usize) -> bool {
        stream && (dst as usize).is_multiple_of(64) && (ld_dst * elem as isize) % 64 == 0
    }

    /// 8-byte elements: each row of a square is two 4-lane vectors; four 4 x 4 transposes.
    ///
    /// # Safety
    ///
    /// The CPU supports AVX2; every element `src[c + r * ld_src]` and
    /// `dst[r + c * ld_dst]` for `r < rows`, `c < cols` lies inside an allocation the caller
    /// may read (`src`) or write exclusively (`dst`), and the two regions do not overlap.
    /// Offsets are in 8-byte elements; `rows` and `cols` are multiples of `MICRO`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose_b8(
        dst: *mut u8,
        ld_dst: isize,
        src: *const u8,
        ld_src: isize,
        rows: usize,
        cols: usize,
        mask: u128,
        stream: bool,
    ) {
        let nt = streams(stream, dst, ld_dst, 8);
        let (dst, src) = (dst.cast::<f64>(), src.cast::<f64>());
        let flip = _mm256_castsi256_pd(_mm256_set1_epi64x(mask as u64 as i64));
        for_each_square(src.cast(), ld_src, 8, (rows, cols), nt, |k, j| {
            // SAFETY: rows k..k + 8 <= rows and columns j..j + 8 <= cols: inside the regions
            // the caller vouches for. Unaligned loads and stores; the streaming stores only
            // where `streams` saw every column start on a line (k is a multiple of 8, so
            // each store is the first or second half of an aligned line). AVX2 is enabled
            // on this function, and the closure inherits it.
            unsafe {
                let s = src.offset(k as isize * ld_src + j as isize);
                let d = dst.offset(k as isize + j as isize * ld_dst);
                // rows[r][h]: row r, columns 4h..4h + 4.
                let mut m = [[_mm256_setzero_pd(); 2]; 8];
                for (r, row) in m.iter_mut().enumerate() {
                    let line = s.offset(r as isize * ld_src);
                    row[0] = _mm256_loadu_pd(line);
                    row[1] = _mm256_loadu_pd(line.add(4));
                }
                // Destination line c holds column c: rows 0..4 then rows 4..8.
                #[allow(clippy::needless_range_loop)] // h and q index rows and columns
                for h in 0..2 {
                    for q in 0..2 {
                        let (a, b, c, e) = (
                            m[4 * q][h],
                            m[4 * q + 1][h],
                            m[4 * q + 2][h],
                            m[4 * q + 3][h],
                        );
                        let t0 = _mm256_unpacklo_pd(a, b);
                        let t1 = _mm256_unpackhi_pd(a, b);
                        let t2 = _mm256_unpacklo_pd(c, e);
                        let t3 = _mm256_unpackhi_pd(c, e);
                        let cols4 = [
                            _mm256_permute2f128_pd::<0x20>(t0, t2),
                            _mm256_permute2f128_pd::<0x20>(t1, t3),
                            _mm256_permute2f128_pd::<0x31>(t0, t2),
                            _mm256_permute2f128_pd::<0x31>(t1, t3),
                        ];
                        for (i, v) in cols4.into_iter().enumerate() {
                            let at = d.offset((4 * h + i) as isize * ld_dst).add(4 * q);
                            let v = _mm256_xor_pd(v, flip);
                            if nt {
                                _mm256_stream_pd(at, v);
                            } else {
                                _mm256_storeu_pd(at, v);
                            }
                        }
                    }
                }
            }
        });
    }

    /// 8-byte elements with AVX-512: each row of a square is one 8-lane vector (one whole
    /// line when aligned); pairs, then quads, then halves are interleaved with two-source
    /// lane permutes, and each destination column is one 8-lane store.
    ///
    /// # Safety
    ///
    /// As [`transpose_b8`], with AVX-512F in place of AVX2.
    #[cfg(feature = "avx512")]
    #[clippy::msrv = "1.89"]
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose_b8_avx512(
        dst: *mut u8,
        ld_dst: isize,
        src: *const u8,
        ld_src: isize,
        rows: usize,
        cols: usize,
        mask: u128,
        stream: bool,
    ) {
        let nt = streams(stream, dst, ld_dst, 8);
        let (dst, src) = (dst.cast::<f64>(), src.cast::<f64>());
        // XOR in the integer domain (AVX-512F; the float XOR needs AVX-512DQ).
        let flip = _mm512_set1_epi64(mask as u64 as i64);
        // Lane indices of `_mm512_permutex2var_pd(a, idx, b)`: 0..8 pick from `a`, 8..16
        // from `b`. Quads: [a0 a1 b0 b1 a4 a5 b4 b5] and [a2 a3 b2 b3 a6 a7 b6 b7];
        // halves: the low and the high four lanes of `a` then of `b`.
        let quad_lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
        let quad_hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
        let half_lo = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11);
        let half_hi = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
        for_each_square(src.cast(), ld_src, 8, (rows, cols), nt, |k, j| {
            // SAFETY: rows k..k + 8 <= rows and columns j..j + 8 <= cols: inside the regions
            // the caller vouches for. Unaligned loads and stores; the streaming stores only
            // where `streams` saw every column start on a line (k is a multiple of 8, so
            // each store is one aligned line). AVX-512F is enabled on this function, and the
            // closure inherits it.
            unsafe {
                let s = src.offset(k as isize * ld_src + j as isize);
                let d = dst.offset(k as isize + j as isize * ld_dst);
                let mut r = [_mm512_setzero_pd(); 8];
                for (i, v) in r.iter_mut().enumerate() {
                    *v = _mm512_loadu_pd(s.offset(i as isize * ld_src));
                }
                // t[2p] holds (row 2p, row 2p + 1) at the even columns, t[2p + 1] at the
                // odd ones: [x0 y0 x2 y2 x4 y4 x6 y6], [x1 y1 x3 y3 ...].
                let mut t = [_mm512_setzero_pd(); 8];
                for p in 0..4 {
                    t[2 * p] = _mm512_unpacklo_pd(r[2 * p], r[2 * p + 1]);
                    t[2 * p + 1] = _mm512_unpackhi_pd(r[2 * p], r[2 * p + 1]);
                }
                // q[4h + c] (c < 4): rows 4h..4h + 4 of columns c (low half) and c + 4
                // (high half).
                let mut q = [_mm512_setzero_pd(); 8];
                for h in 0..2 {
                    let (e0, o0, e1, o1) = (t[4 * h], t[4 * h + 1], t[4 * h + 2], t[4 * h + 3]);
                    q[4 * h] = _mm512_permutex2var_pd(e0, quad_lo, e1);
                    q[4 * h + 1] = _mm512_permutex2var_pd(o0, quad_lo, o1);
                    q[4 * h + 2] = _mm512_permutex2var_pd(e0, quad_hi, e1);
                    q[4 * h + 3] = _mm512_permutex2var_pd(o0, quad_hi, o1);
                }
                for c in 0..4 {
                    let lo = _mm512_permutex2var_pd(q[c], half_lo, q[c + 4]);
                    let hi = _mm512_permutex2var_pd(q[c], half_hi, q[c + 4]);
                    for (col, v) in [(c, lo), (c + 4, hi)] {
                        let at = d.offset(col as isize * ld_dst);
                        let v = _mm512_castsi512_pd(_mm512_xor_epi64(_mm512_castpd_si512(v), flip));
                        if nt {
                            _mm512_stream_pd(at, v);
                        } else {
                            _mm512_storeu_pd(at, v);
                        }
                    }
                }
            }
        });
    }

    /// 16-byte elements: each row of a square is four 2-lane vectors; 2 x 2 transposes of
    /// 128-bit halves. A square's destination column is two lines, written before the next
    /// column's (so streaming stores fill whole lines one pair at a time).
    ///
    /// # Safety
    ///
    /// As [`transpose_b8`], with offsets in 16-byte elements.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose_b16(
        dst: *mut u8,
        ld_dst: isize,
        src: *const u8,
        ld_src: isize,
        rows: usize,
        cols: usize,
        mask: u128,
        stream: bool,
    ) {
        let nt = streams(stream, dst, ld_dst, 16);
        // Two f64 lanes per element: offsets double.
        let (dst, src) = (dst.cast::<f64>(), src.cast::<f64>());
        let (lo, hi) = (mask as u64 as i64, (mask >> 64) as u64 as i64);
        let flip = _mm256_castsi256_pd(_mm256_set_epi64x(hi, lo, hi, lo));
        for_each_square(src.cast(), ld_src, 16, (rows, cols), nt, |k, j| {
            // SAFETY: as in `transpose_b8`: the square lies inside the caller's regions; the
            // streaming stores only where every column starts on a line, and each store is
            // 32 bytes at a multiple of 32 bytes from its column's start.
            unsafe {
                let s = src.offset(2 * (k as isize * ld_src + j as isize));
                let d = dst.offset(2 * (k as isize + j as isize * ld_dst));
                for h in 0..MICRO / 2 {
                    // Columns 2h, 2h + 1 of the square: destination lines l0, l1.
                    let l0 = d.offset(2 * (2 * h as isize) * ld_dst);
                    let l1 = d.offset(2 * (2 * h as isize + 1) * ld_dst);
                    for p in 0..MICRO / 2 {
                        // Rows 2p, 2p + 1; element pairs (2h, 2h + 1) per vector.
                        let r0 = s.offset(2 * (2 * p as isize) * ld_src);
                        let r1 = s.offset(2 * (2 * p as isize + 1) * ld_src);
                        let a = _mm256_loadu_pd(r0.add(4 * h));
                        let b = _mm256_loadu_pd(r1.add(4 * h));
                        let c0 = _mm256_xor_pd(_mm256_permute2f128_pd::<0x20>(a, b), flip);
                        let c1 = _mm256_xor_pd(_mm256_permute2f128_pd::<0x31>(a, b), flip);
                        if nt {
                            _mm256_stream_pd(l0.add(4 * p), c0);
                            _mm256_stream_pd(l1.add(4 * p), c1);
                        } else {
                            _mm256_storeu_pd(l0.add(4 * p), c0);
                            _mm256_storeu_pd(l1.add(4 * p), c1);
                        }
                    }
                }
            }
        });
    }

    /// 4-byte elements: each row of a square is one 8-lane vector; an 8 x 8 transpose in
    /// registers. Its stores are always cached: a square's column is half a line, which
    /// streaming stores would send out as partial lines.
    ///
    /// # Safety
    ///
    /// As [`transpose_b8`], with offsets in 4-byte elements.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose_b4(
        dst: *mut u8,
        ld_dst: isize,
        src: *const u8,
        ld_src: isize,
        rows: usize,
        cols: usize,
        mask: u128,
        _stream: bool,
    ) {
        let (dst, src) = (dst.cast::<f32>(), src.cast::<f32>());
        let flip = _mm256_castsi256_ps(_mm256_set1_epi32(mask as u32 as i32));
        for_each_square(src.cast(), ld_src, 4, (rows, cols), false, |k, j| {
            // SAFETY: as in `transpose_b8`: the square lies inside the caller's regions.
            unsafe {
                let s = src.offset(k as isize * ld_src + j as isize);
                let d = dst.offset(k as isize + j as isize * ld_dst);
                let mut r = [_mm256_setzero_ps(); 8];
                for (i, v) in r.iter_mut().enumerate() {
                    *v = _mm256_loadu_ps(s.offset(i as isize * ld_src));
                }
                // Pairs, then quads within 128-bit lanes, then across lanes.
                let t = [
                    _mm256_unpacklo_ps(r[0], r[1]),
                    _mm256_unpackhi_ps(r[0], r[1]),
                    _mm256_unpacklo_ps(r[2], r[3]),
                    _mm256_unpackhi_ps(r[2], r[3]),
                    _mm256_unpacklo_ps(r[4], r[5]),
                    _mm256_unpackhi_ps(r[4], r[5]),
                    _mm256_unpacklo_ps(r[6], r[7]),
                    _mm256_unpackhi_ps(r[6], r[7]),
                ];
                let u = [
                    _mm256_shuffle_ps::<0x44>(t[0], t[2]),
                    _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
                    _mm256_shuffle_ps::<0x44>(t[1], t[3]),
                    _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
                    _mm256_shuffle_ps::<0x44>(t[4], t[6]),
                    _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
                    _mm256_shuffle_ps::<0x44>(t[5], t[7]),
                    _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
                ];
                // u[i] (i < 4) holds column i of rows 0..4 in its low lane and column i + 4
                // in its high lane; u[i + 4] the same for rows 4..8.
                for i in 0..4 {
                    let lo = _mm256_permute2f128_ps::<0x20>(u[i], u[i + 4]);
                    let hi = _mm256_permute2f128_ps::<0x31>(u[i], u[i + 4]);
                    _mm256_storeu_ps(d.offset(i as isize * ld_dst), _mm256_xor_ps(lo, flip));
                    _mm256_storeu_ps(d.offset((i + 4) as isize * ld_dst), _mm256_xor_ps(hi, flip));
                }
            }
        });
    }
}

/// Merges each pair of adjacent axes that is laid out in order on both sides (stride of the
/// next axis = stride times extent of this one, in both views): the same elements, fewer and
/// longer axes. Length-1 axes are dropped.
#[allow(clippy::type_complexity)]
fn merge_axes(
    dims: &[usize],
    a: &[isize],
    b: &[isize],
) -> (
    SmallVec<[usize; AXES]>,
    SmallVec<[isize; AXES]>,
    SmallVec<[isize; AXES]>,
) {
    let (mut d, mut sa, mut sb) = (SmallVec::new(), SmallVec::new(), SmallVec::new());
    for k in 0..dims.len() {
        if dims[k] == 1 {
            continue;
        }
        if let (Some(&ld), Some(&la), Some(&lb)) = (d.last(), sa.last(), sb.last()) {
            let ld: usize = ld;
            if a[k] == la * ld as isize && b[k] == lb * ld as isize {
                *d.last_mut().expect("nonempty") = ld * dims[k];
                continue;
            }
        }
        d.push(dims[k]);
        sa.push(a[k]);
        sb.push(b[k]);
    }
    if d.is_empty() {
        d.push(1);
        sa.push(1);
        sb.push(1);
    }
    (d, sa, sb)
}

/// Calls `f(offset_a, offset_b)` for every multi-index of `dims`, first axis fastest.
fn for_each_offset_pair(dims: &[usize], a: &[isize], b: &[isize], mut f: impl FnMut(isize, isize)) {
    let n: usize = dims.iter().product();
    let mut index: SmallVec<[usize; AXES]> = smallvec::smallvec![0; dims.len()];
    let (mut oa, mut ob) = (0_isize, 0_isize);
    for _ in 0..n {
        f(oa, ob);
        for axis in 0..dims.len() {
            index[axis] += 1;
            oa += a[axis];
            ob += b[axis];
            if index[axis] < dims[axis] {
                break;
            }
            oa -= a[axis] * dims[axis] as isize;
            ob -= b[axis] * dims[axis] as isize;
            index[axis] = 0;
        }
    }
}

/// A strided copy planned from its two layouts alone, for any pair of base pointers with
/// those layouts: the axes merged, the source's fastest axis found, the loops chosen. This
/// is what [`StridedMut::assign`] and its kin plan at every call; a caller that moves many
/// blocks of the same layouts again and again (a planned permutation keeps one per block)
/// plans once and runs the plan with [`CopyPlan::copy_flipped`].
///
/// ```
/// use tessera_core::{CopyPlan, SharedBuffer, Stores};
///
/// // A 3 x 2 column-major source, copied transposed into a 2 x 3 column-major destination.
/// let src = SharedBuffer::<f64>::from_fn(6, |i| i as f64);
/// let dst = SharedBuffer::<f64>::zeroed(6);
/// let plan = CopyPlan::new(&[2, 3], &[1, 2], &[3, 1]);
/// // SAFETY: both layouts lie inside their fresh buffers, which nothing else uses; the
/// // destination layout is one-to-one.
/// unsafe { plan.copy_flipped(dst.as_ptr().cast_mut(), src.as_ptr(), 0, |x| x, Stores::Cached) };
/// // SAFETY: the copy is done and nothing else uses the buffer.
/// let out = unsafe { dst.view(0, &[6], &[1]) }.to_vec();
/// assert_eq!(out, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
/// ```
#[derive(Clone, Debug)]
pub struct CopyPlan {
    /// The merged axes: their extents, then the destination's and the source's strides.
    dims: SmallVec<[usize; AXES]>,
    dst: SmallVec<[isize; AXES]>,
    src: SmallVec<[isize; AXES]>,
    walk: Walk,
}

/// How a [`CopyPlan`] visits its elements.
#[derive(Clone, Debug)]
enum Walk {
    /// There are none.
    Empty,
    /// Runs contiguous in both layouts, or element by element along the destination's first
    /// axis where that is also the source's fastest.
    Runs,
    /// Tiles over the destination's axis 0 and the source's fastest axis `fast`; the other
    /// axes are outer loops (their extents, destination and source strides).
    Tiles {
        fast: usize,
        outer_dims: SmallVec<[usize; AXES]>,
        outer_dst: SmallVec<[isize; AXES]>,
        outer_src: SmallVec<[isize; AXES]>,
    },
}

impl CopyPlan {
    /// The plan of `dst <- src` for layouts of extents `dims` with the given strides (in
    /// elements; negative ones allowed).
    ///
    /// # Panics
    ///
    /// If a stride list's length differs from the number of axes.
    pub fn new(dims: &[usize], dst_strides: &[isize], src_strides: &[isize]) -> Self {
        assert!(
            dst_strides.len() == dims.len() && src_strides.len() == dims.len(),
            "{} axes with {} destination and {} source strides",
            dims.len(),
            dst_strides.len(),
            src_strides.len()
        );
        if dims.contains(&0) {
            return Self {
                dims: dims.into(),
                dst: dst_strides.into(),
                src: src_strides.into(),
                walk: Walk::Empty,
            };
        }
        let (dims, dst, src) = merge_axes(dims, dst_strides, src_strides);
        // The source axis with the smallest stride (other than length-1 axes).
        let fast = (0..dims.len())
            .filter(|&a| dims[a] > 1)
            .min_by_key(|&a| src[a].unsigned_abs());
        let walk = match fast.filter(|&a| a != 0 && dims[0] > 1) {
            None => Walk::Runs,
            Some(fast) => {
                let outer: SmallVec<[usize; AXES]> =
                    (1..dims.len()).filter(|&a| a != fast).collect();
                Walk::Tiles {
                    fast,
                    outer_dims: outer.iter().map(|&a| dims[a]).collect(),
                    outer_dst: outer.iter().map(|&a| dst[a]).collect(),
                    outer_src: outer.iter().map(|&a| src[a]).collect(),
                }
            }
        };
        Self {
            dims,
            dst,
            src,
            walk,
        }
    }

    /// How many elements the plan copies.
    pub fn len(&self) -> usize {
        match self.walk {
            Walk::Empty => 0,
            _ => self.dims.iter().product(),
        }
    }

    /// Whether the plan copies nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The plan cut into at most `parts` plans over disjoint parts of the same layouts, each
    /// with the offsets (destination, source, in elements) of its base pointers from the
    /// whole plan's: running every part at `(dst + d, src + s)` does what running the plan
    /// at `(dst, src)` does, and no two parts write the same element, so they may run at
    /// the same time (for one large block on several threads).
    ///
    /// The cut runs along the longest axis other than the destination's contiguous one,
    /// in whole kernel tiles where it cuts a transposed axis, so each part keeps the vector
    /// kernels; a plan too small to cut is returned whole.
    ///
    /// ```
    /// use tessera_core::{CopyPlan, SharedBuffer, Stores};
    ///
    /// // A 100 x 300 transpose, in three parts.
    /// let src = SharedBuffer::<f64>::from_fn(30_000, |i| i as f64);
    /// let dst = SharedBuffer::<f64>::zeroed(30_000);
    /// let plan = CopyPlan::new(&[100, 300], &[1, 100], &[300, 1]);
    /// let parts = plan.split(3);
    /// assert!(parts.len() > 1 && parts.iter().map(|(p, _, _)| p.len()).sum::<usize>() == 30_000);
    /// for (part, d, s) in &parts {
    ///     // SAFETY: each part lies inside the whole plan's layouts, which lie inside the
    ///     // two buffers; nothing else uses them.
    ///     unsafe {
    ///         let (y, x) = (dst.as_ptr().cast_mut().offset(*d), src.as_ptr().offset(*s));
    ///         part.copy_flipped(y, x, 0, |v| v, Stores::Cached)
    ///     };
    /// }
    /// // SAFETY: the copies are done.
    /// let out = unsafe { dst.view(0, &[30_000], &[1]) }.to_vec();
    /// assert_eq!(out[1], 300.0); // element (1, 0) of the destination is source (0, 1)
    /// ```
    pub fn split(&self, parts: usize) -> Vec<(CopyPlan, isize, isize)> {
        let whole = || vec![(self.clone(), 0, 0)];
        if parts <= 1 || self.is_empty() {
            return whole();
        }
        // The longest axis other than the destination's contiguous one (axis 0), unless
        // there is no other.
        let axis = (1..self.dims.len())
            .max_by_key(|&a| self.dims[a])
            .unwrap_or(0);
        let fast = match &self.walk {
            Walk::Tiles { fast, .. } => Some(*fast),
            _ => None,
        };
        // Whole kernel tiles along a transposed axis (and along the contiguous axis).
        let align = if axis == 0 || Some(axis) == fast {
            KERNEL_TILE
        } else {
            1
        };
        let extent = self.dims[axis];
        let chunk = extent.div_ceil(parts).next_multiple_of(align);
        if chunk >= extent {
            return whole();
        }
        (0..extent)
            .step_by(chunk)
            .map(|start| {
                let mut dims = self.dims.clone();
                dims[axis] = chunk.min(extent - start);
                let at = start as isize;
                (
                    CopyPlan::new(&dims, &self.dst, &self.src),
                    at * self.dst[axis],
                    at * self.src[axis],
                )
            })
            .collect()
    }

    /// Runs the plan: `dst[i] = flip(src[i])` for every multi-index `i`, as
    /// [`StridedMut::assign_flipped`] does for views with the planned layouts (the same
    /// vector kernels for the full squares of a plain transpose, flipping the bits of `mask`;
    /// the same bits either way).
    ///
    /// # Safety
    ///
    /// Every element of the destination layout at `dst` lies inside an allocation the caller
    /// may write exclusively for the duration of the call, and its strides map distinct
    /// indices to distinct elements; every element of the source layout at `src` lies inside
    /// an allocation the caller may read; the two sets of elements do not overlap.
    pub unsafe fn copy_flipped<T: Copy + 'static>(
        &self,
        dst: *mut T,
        src: *const T,
        mask: u128,
        flip: impl Fn(T) -> T,
        stores: Stores,
    ) {
        // SAFETY: the caller's contract is `run`'s; the kernel is chosen for `T`.
        unsafe { self.run(dst, src, flip, flipping_kernel::<T>(mask, stores)) }
    }

    /// Runs the plan with `f` and, when given, `kernel` for the full squares of a plain
    /// transpose (which must then compute what `f` would).
    ///
    /// # Safety
    ///
    /// As [`CopyPlan::copy_flipped`]; and `kernel`, when given, was chosen by
    /// [`transpose_kernel`] for `T`, with `U` = `T`.
    unsafe fn run<T: Copy, U: Copy>(
        &self,
        pd: *mut T,
        ps: *const U,
        f: impl Fn(U) -> T,
        kernel: Option<(TransposeKernel, u128, bool)>,
    ) {
        let (dims, ds, ss) = (&self.dims, &self.dst, &self.src);
        let (fast, outer_dims, outer_d, outer_s) = match &self.walk {
            Walk::Empty => return,
            Walk::Runs => {
                for_each_common_run(dims, [ds, ss], |_, run, [od, os]| {
                    // SAFETY: the run lies inside both layouts (it is contiguous in both),
                    // which the caller vouches for; the destination is written exclusively.
                    let (d, s) = unsafe {
                        (
                            std::slice::from_raw_parts_mut(pd.offset(od), run),
                            std::slice::from_raw_parts(ps.offset(os), run),
                        )
                    };
                    for (d, &s) in d.iter_mut().zip(s) {
                        *d = f(s);
                    }
                });
                return;
            }
            Walk::Tiles {
                fast,
                outer_dims,
                outer_dst,
                outer_src,
            } => (*fast, outer_dims, outer_dst, outer_src),
        };
        // Tiles over destination axis 0 and axis `fast`; the other axes are outer loops.
        let (d0, df, s0, sf) = (ds[0], ds[fast], ss[0], ss[fast]);
        let (n0, nf) = (dims[0], dims[fast]);
        // One rectangle `rows x cols` of the 2-D problem (destination axis 0 by axis
        // `fast`), element by element, at outer offsets (bd, bs).
        let scalar =
            |bd: isize, bs: isize, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>| {
                if rows.is_empty() {
                    return; // its start may lie past the view
                }
                for i_f in cols {
                    let i_f = i_f as isize;
                    // SAFETY: rows < n0 and i_f < nf at an in-range outer index, so every offset
                    // lies in its layout, inside the allocations the caller vouches for (the
                    // destination's written exclusively, apart from the source).
                    unsafe {
                        let mut dp = pd.offset(bd + rows.start as isize * d0 + i_f * df);
                        let mut sp = ps.offset(bs + rows.start as isize * s0 + i_f * sf);
                        for _ in rows.clone() {
                            *dp = f(*sp);
                            // Wrapping: after the last element the pointers step past the view,
                            // and are never dereferenced there.
                            dp = dp.wrapping_offset(d0);
                            sp = sp.wrapping_offset(s0);
                        }
                    }
                }
            };
        for_each_offset_pair(outer_dims, outer_d, outer_s, |bd, bs| {
            if d0 == 1 && sf == 1 {
                // A plain transpose: bands of MICRO destination rows; along a band the source
                // is read as MICRO sequential streams (which the hardware prefetches) and the
                // destination written in whole lines, one register-sized square at a time.
                let (n0m, nfm) = (n0 - n0 % MICRO, nf - nf % MICRO);
                if let Some((kernel, mask, stream)) = kernel.filter(|_| n0m > 0 && nfm > 0) {
                    // SAFETY: each call's rectangle is rows kt..kt + h of 0..n0m and columns
                    // jt..jt + w of 0..nfm (h, w multiples of MICRO, as KERNEL_TILE is), so
                    // its squares span i0 < n0m <= n0 and f < nfm <= nf at an
                    // in-range outer index: inside both layouts, with d0 = sf = 1 and the
                    // leading dimensions df, s0 in elements; the caller vouches for the
                    // allocations (the destination's exclusive, apart from the source).
                    // `kernel` was chosen for `T` (= `U`) and this CPU by
                    // `transpose_kernel`.
                    unsafe {
                        for jt in (0..nfm).step_by(KERNEL_TILE) {
                            for kt in (0..n0m).step_by(KERNEL_TILE) {
                                kernel(
                                    pd.offset(bd + kt as isize + jt as isize * df).cast(),
                                    df,
                                    ps.offset(bs + kt as isize * s0 + jt as isize).cast(),
                                    s0,
                                    KERNEL_TILE.min(n0m - kt),
                                    KERNEL_TILE.min(nfm - jt),
                                    mask,
                                    stream,
                                )
                            }
                        }
                    };
                    scalar(bd, bs, 0..n0, nfm..nf);
                    scalar(bd, bs, n0m..n0, 0..nfm);
                    return;
                }
                for k in (0..n0m).step_by(MICRO) {
                    for jf in (0..nfm).step_by(MICRO) {
                        // The same lines of the next band: a strided band start gives the
                        // hardware no hint, so ask for them one band ahead.
                        for r in (k + MICRO)..(k + 2 * MICRO).min(n0) {
                            prefetch(ps.wrapping_offset(bs + r as isize * s0 + jf as isize));
                        }
                        // SAFETY: the square spans i0 in k..k + MICRO <= n0 and f in
                        // jf..jf + MICRO <= nf at an in-range outer index: inside both
                        // layouts, which the caller vouches for as above.
                        unsafe {
                            micro_transpose(
                                pd.offset(bd + k as isize + jf as isize * df),
                                df,
                                ps.offset(bs + k as isize * s0 + jf as isize),
                                s0,
                                &f,
                            )
                        };
                    }
                }
                scalar(bd, bs, 0..n0, nfm..nf);
                scalar(bd, bs, n0m..n0, 0..nfm);
                return;
            }
            // General strides: square-ish tiles, destination axis 0 innermost.
            for jf in (0..nf).step_by(TILE_FAST) {
                for j0 in (0..n0).step_by(TILE_DST) {
                    scalar(
                        bd,
                        bs,
                        j0..(j0 + TILE_DST).min(n0),
                        jf..(jf + TILE_FAST).min(nf),
                    );
                }
            }
        });
    }
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
            self.for_each(|v| out.push(v));
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

    /// Sets every element to `f(src element)`, for a source of the same dims with any strides
    /// (a permuted view, say). Axes that stay adjacent and in order on both sides are merged
    /// first; when the source's fastest axis is then not the destination's, the copy runs in
    /// square tiles over those two axes so both sides stream through cache. Returns `false`
    /// (and writes nothing) when the dims differ.
    pub fn assign_map<U: Copy>(&mut self, src: &StridedRef<'_, U>, f: impl Fn(U) -> T) -> bool {
        self.assign_with(src, f, None)
    }

    /// Sets every element to the source's (a plain copy, for a source of the same dims with
    /// any strides): [`assign_map`](Self::assign_map) with the identity, except that a plain
    /// 2-D transpose of `f32`, `f64`, `Complex<f32>`, `Complex<f64>` or 4- and 8-byte
    /// integers moves its full 8 x 8 squares through vector registers where the CPU allows
    /// (AVX2 on x86-64, and AVX-512F for 8-byte types with the `avx512` feature, detected at
    /// run time); the result is the same bits either way. Returns `false` (and writes nothing) when the dims differ.
    pub fn assign(&mut self, src: &StridedRef<'_, T>) -> bool
    where
        T: 'static,
    {
        self.assign_flipped(src, 0, |x| x, Stores::Cached)
    }

    /// Sets every element to the source's with the bits of `mask` flipped, `flip` being that
    /// same map on one element: a negation (the sign bits), a complex conjugation (the
    /// imaginary part's sign bit), or both, exactly. [`assign`](Self::assign) with the flip:
    /// the full squares of a plain 2-D transpose go through the same vector kernels, which
    /// flip with one XOR per vector; `flip` does the rest. `mask` is the element's bit
    /// pattern as it lies in memory (little-endian; bits past the element's size are
    /// ignored). If `flip` does not equal the XOR, which elements get which is unspecified
    /// (never undefined). `stores` says how the vector kernels store (the bits are the same
    /// either way). Returns `false` (and writes nothing) when the dims differ.
    pub fn assign_flipped(
        &mut self,
        src: &StridedRef<'_, T>,
        mask: u128,
        flip: impl Fn(T) -> T,
        stores: Stores,
    ) -> bool
    where
        T: 'static,
    {
        self.assign_with(src, flip, flipping_kernel::<T>(mask, stores))
    }

    /// [`assign_map`](Self::assign_map), with `kernel` (when given, with its mask) doing the
    /// full squares of a plain transpose; it must then compute what `f` would.
    fn assign_with<U: Copy>(
        &mut self,
        src: &StridedRef<'_, U>,
        f: impl Fn(U) -> T,
        kernel: Option<(TransposeKernel, u128, bool)>,
    ) -> bool {
        if self.dims != src.dims {
            return false;
        }
        let plan = CopyPlan::new(&self.dims, &self.strides, &src.strides);
        // SAFETY: the plan is of this view's dims and strides and of the source's, so every
        // element it reaches lies inside the views' checked extents, and distinct indices
        // of `self` are distinct elements; `self` holds an exclusive grant distinct from
        // `src`'s.
        unsafe { plan.run(self.ptr, src.ptr, f, kernel) };
        true
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

    /// One plan, run at several base pointers (blocks of one layout at different places),
    /// gives what `assign` gives through views there; a plan of no elements writes nothing.
    #[test]
    fn a_copy_plan_runs_anywhere_its_layouts_fit() {
        // A 5 x 3 x 4 source with negative strides on its last axis, read transposed into a
        // padded destination (leading dimension 6), at three destination and source bases.
        let dims = [4_usize, 5, 3];
        let (src_strides, dst_strides) = ([-15_isize, 1, 5], [1_isize, 6, 30]);
        let src_buf = SharedBuffer::<f64>::from_fn(3 * 60, |i| i as f64);
        let (a, b) = (
            SharedBuffer::<f64>::zeroed(3 * 90),
            SharedBuffer::<f64>::zeroed(3 * 90),
        );
        let plan = CopyPlan::new(&dims, &dst_strides, &src_strides);
        for k in 0..3 {
            let (so, d_o) = (60 * k + 45, 90 * k);
            assert!(src_buf.check_extent(so, &dims, &src_strides));
            assert!(a.check_extent(d_o, &dims, &dst_strides));
            // SAFETY: extents checked; this test is the buffers' only user, and `a` and
            // the source are distinct allocations.
            unsafe {
                plan.copy_flipped(
                    a.as_ptr().cast_mut().add(d_o),
                    src_buf.as_ptr().add(so),
                    0,
                    |x| x,
                    Stores::Cached,
                );
                let x = src_buf.view(so, &dims, &src_strides);
                assert!(b.view_mut(d_o, &dims, &dst_strides).assign(&x));
            }
        }
        // SAFETY: the copies are done; whole-buffer reads.
        let (a, b) = unsafe {
            (
                a.view(0, &[270], &[1]).to_vec(),
                b.view(0, &[270], &[1]).to_vec(),
            )
        };
        assert_eq!(a, b);
        assert_eq!(
            a.iter().filter(|&&v| v != 0.0).count(),
            3 * 60 - 1,
            "element 0 is 0.0"
        );
        let empty = CopyPlan::new(&[3, 0], &[1, 3], &[1, 3]);
        // SAFETY: a plan of no elements touches nothing.
        unsafe {
            empty.copy_flipped(
                std::ptr::null_mut::<f64>(),
                std::ptr::null(),
                0,
                |x| x,
                Stores::Cached,
            )
        };
    }

    #[test]
    fn permuted_assign_equals_the_elementwise_definition() {
        // Odd sizes (scalar edge tiles) and multiples of 8 (full micro-tiles, prefetch);
        // small ones under Miri, which interprets every element access.
        if cfg!(miri) {
            permuted_assign_case([3, 5, 2, 4]);
            permuted_assign_case([8, 3, 8, 2]);
        } else {
            permuted_assign_case([3, 17, 2, 20]);
            permuted_assign_case([16, 3, 24, 2]);
            permuted_assign_case([8, 8, 8, 8]);
        }
    }

    /// `dst.assign(src permuted by perm)`, element by element against `get`, for a source
    /// of `dims` laid out with strides `sign * dense(dims)` (so negative strides when
    /// `sign < 0`), and a destination padded to leading dimension `dims[perm[0]] + pad`.
    fn assign_case<T: Zeroable + PartialEq + std::fmt::Debug>(
        dims: &[usize],
        perm: &[usize],
        sign: isize,
        pad: usize,
        value: impl Fn(usize) -> T,
    ) {
        let n: usize = dims.iter().product();
        let dense = |d: &[usize], lead: usize| -> Vec<isize> {
            let mut acc = 1;
            d.iter()
                .enumerate()
                .map(|(i, &x)| {
                    let s = acc;
                    acc *= (if i == 0 { x + lead } else { x }) as isize;
                    s
                })
                .collect()
        };
        let src_buf = SharedBuffer::<T>::zeroed(n);
        let strides: Vec<isize> = dense(dims, 0).iter().map(|&s| s * sign).collect();
        let base = if sign < 0 { n - 1 } else { 0 };
        assert!(src_buf.check_extent(base, dims, &strides));
        // SAFETY: the extent was checked; this test is the buffer's sole user.
        let mut src = unsafe { src_buf.view_mut(base, dims, &strides) };
        src.update(|k, _| value(k));
        let pdims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
        let dst_strides = dense(&pdims, pad);
        let dst_len = (pdims[0] + pad) * pdims[1..].iter().product::<usize>();
        let dst_buf = SharedBuffer::<T>::zeroed(dst_len);
        assert!(dst_buf.check_extent(0, &pdims, &dst_strides));
        // SAFETY: as above.
        let mut dst = unsafe { dst_buf.view_mut(0, &pdims, &dst_strides) };
        let view = src.as_ref();
        let permuted = view.permute_axes(perm).unwrap();
        assert!(dst.assign(&permuted));
        let mut checked = 0;
        for_each_offset(&pdims, &dense(&pdims, 0), |k, _| {
            let mut rem = k;
            let idx: Vec<usize> = pdims
                .iter()
                .map(|&d| {
                    let i = rem % d;
                    rem /= d;
                    i
                })
                .collect();
            assert_eq!(
                dst.get(&idx),
                permuted.get(&idx),
                "dims {dims:?} perm {perm:?} sign {sign} pad {pad} at {idx:?}"
            );
            checked += 1;
        });
        assert_eq!(checked, n);
    }

    /// Every element size with a vector kernel, through full squares and odd tails, dense and
    /// padded destinations, and negative source strides (the general-strides fallback).
    #[test]
    fn assign_equals_the_elementwise_definition_for_every_element_type() {
        use num_complex::Complex;
        let shapes: &[&[usize]] = if cfg!(miri) {
            // Miri runs the portable path only: one odd square and one 3-D case.
            &[&[5, 3], &[2, 4, 3]]
        } else {
            &[
                &[8, 8],
                &[16, 24],
                &[9, 11],
                &[17, 40],
                &[64, 64],
                // Past one `KERNEL_TILE`, with partial tiles and scalar tails.
                &[72, 136],
                &[130, 67],
                &[4, 4, 8, 8],
                &[3, 8, 5, 9],
            ]
        };
        for &dims in shapes {
            let perms: Vec<Vec<usize>> = if dims.len() == 2 {
                vec![vec![1, 0], vec![0, 1]]
            } else if dims.len() == 3 {
                vec![vec![2, 1, 0], vec![1, 2, 0]]
            } else {
                vec![vec![2, 3, 0, 1], vec![1, 3, 0, 2], vec![3, 2, 1, 0]]
            };
            for perm in &perms {
                for sign in [1, -1] {
                    for pad in [0, 3] {
                        assign_case(dims, perm, sign, pad, |k| k as f32 * 0.5 - 7.0);
                        assign_case(dims, perm, sign, pad, |k| k as u32 ^ 0xdead_0000);
                        assign_case(dims, perm, sign, pad, |k| -(k as i32));
                        assign_case(dims, perm, sign, pad, |k| k as f64 * 0.25 + 1.0);
                        assign_case(dims, perm, sign, pad, |k| (k as u64) << 33 | k as u64);
                        assign_case(dims, perm, sign, pad, |k| -(k as i64) * 5);
                        assign_case(dims, perm, sign, pad, |k| {
                            Complex::new(k as f32, -(k as f32) - 0.5)
                        });
                        assign_case(dims, perm, sign, pad, |k| {
                            Complex::new(k as f64 + 0.125, -(k as f64))
                        });
                    }
                }
            }
        }
    }

    /// Each vector kernel, called directly (so the AVX2 ones are tested on machines that
    /// would pick AVX-512), against `dst[r + c * ld_dst] = src[c + r * ld_src]` on
    /// rectangles of several multiples of `MICRO`, with padded leading dimensions whose
    /// padding must stay untouched; with cached stores and with streaming ones, on
    /// destinations that start on a 64-byte line (where streaming stores are taken when the
    /// leading dimension allows) and on ones that do not.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[test]
    fn every_vector_kernel_equals_the_transpose_definition() {
        use num_complex::Complex;
        /// With `mask` 0 (a plain transpose) and with `mask`, whose flip of one element is
        /// `flip`.
        fn check<T: Copy + PartialEq + std::fmt::Debug>(
            name: &str,
            kernel: TransposeKernel,
            make: impl Fn(usize) -> T,
            fill: T,
            (mask, flip): (u128, impl Fn(T) -> T),
        ) {
            // Elements to skip from a vector's start to reach a 64-byte line.
            let to_line = |p: *const T| (64 - p as usize % 64) % 64 / size_of::<T>();
            for (masked, stream, misalign) in [
                (false, false, 0),
                (true, false, 0),
                (false, true, 0),
                (true, true, 0),
                (true, true, 1),
            ] {
                let mask = if masked { mask } else { 0 };
                let op = |v: T| if masked { flip(v) } else { v };
                for (rows, cols) in [(8, 8), (16, 8), (8, 24), (24, 40), (72, 16), (64, 136)] {
                    for (ps, pd) in [(0, 0), (1, 3), (5, 1), (2, 8)] {
                        let (ld_src, ld_dst) = (cols + ps, rows + pd);
                        let src: Vec<T> = (0..rows * ld_src).map(&make).collect();
                        let mut whole = vec![fill; cols * ld_dst + 64];
                        let at = to_line(whole.as_ptr()) + misalign;
                        let dst = &mut whole[at..at + cols * ld_dst];
                        // SAFETY: `src` holds rows x ld_src elements and `dst` cols x ld_dst, so
                        // every square the kernel touches lies inside them; they are distinct
                        // vectors; the CPU feature was checked by the caller.
                        unsafe {
                            kernel(
                                dst.as_mut_ptr().cast(),
                                ld_dst as isize,
                                src.as_ptr().cast(),
                                ld_src as isize,
                                rows,
                                cols,
                                mask,
                                stream,
                            )
                        };
                        for c in 0..cols {
                            for r in 0..ld_dst {
                                let want = if r < rows {
                                    op(src[c + r * ld_src])
                                } else {
                                    fill
                                };
                                assert_eq!(
                                    dst[r + c * ld_dst],
                                    want,
                                    "{name} mask {mask:#x} stream {stream} misalign {misalign}: \
                                     {rows}x{cols} pads ({ps}, {pd}) at r {r} c {c}"
                                );
                            }
                        }
                        let outside = whole[..at].iter().chain(&whole[at + cols * ld_dst..]);
                        assert!(
                            outside.into_iter().all(|v| *v == fill),
                            "{name}: wrote outside"
                        );
                    }
                }
            }
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            let neg64 = (1_u128 << 63, |v: f64| -v);
            check(
                "b8 avx2",
                simd::transpose_b8,
                |i| i as f64 + 0.5,
                -1.0,
                neg64,
            );
            let bits = 0x0123_4567_89ab_cdef_u64;
            check(
                "b8 avx2 u64",
                simd::transpose_b8,
                |i| i as u64 * 3 + 1,
                0,
                (u128::from(bits), |v: u64| v ^ bits),
            );
            check(
                "b16 avx2",
                simd::transpose_b16,
                |i| Complex::new(i as f64, -(i as f64) - 0.25),
                Complex::new(-1.0, -1.0),
                (1_u128 << 127, |v: Complex<f64>| v.conj()),
            );
            check(
                "b16 avx2 negated",
                simd::transpose_b16,
                |i| Complex::new(i as f64, 0.5),
                Complex::new(-1.0, -1.0),
                ((1_u128 << 127) | (1 << 63), |v: Complex<f64>| -v),
            );
            check(
                "b4 avx2",
                simd::transpose_b4,
                |i| i as f32 + 0.5,
                -1.0,
                (1_u128 << 31, |v: f32| -v),
            );
        }
        #[cfg(feature = "avx512")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            check(
                "b8 avx512",
                simd::transpose_b8_avx512,
                |i| i as f64 + 0.5,
                -1.0,
                (1_u128 << 63, |v: f64| -v),
            );
            check(
                "b8 avx512 c32",
                simd::transpose_b8_avx512,
                |i| Complex::new(i as f32, 0.5 - i as f32),
                Complex::new(-1.0, -1.0),
                (1_u128 << 63, |v: Complex<f32>| v.conj()),
            );
        }
    }

    /// Where the CPU has AVX2, the plain-bits types get a vector kernel (so the test above
    /// ran through it); under Miri, or without AVX2, none do.
    #[test]
    fn vector_kernels_are_chosen_for_plain_bits_types_only() {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        let avx2 = false;
        use num_complex::Complex;
        assert_eq!(transpose_kernel::<f32>().is_some(), avx2);
        assert_eq!(transpose_kernel::<f64>().is_some(), avx2);
        assert_eq!(transpose_kernel::<Complex<f32>>().is_some(), avx2);
        assert_eq!(transpose_kernel::<Complex<f64>>().is_some(), avx2);
        assert!(transpose_kernel::<(u32, u8)>().is_none());
        assert!(transpose_kernel::<u8>().is_none());
    }

    /// The strides of a dense column-major layout of `dims`.
    fn column_major(dims: &[usize]) -> Vec<isize> {
        let mut acc = 1;
        dims.iter()
            .map(|&d| {
                let s = acc;
                acc *= d as isize;
                s
            })
            .collect()
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
        let cm = column_major(&dims);
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
        let view = unsafe { out.view_mut(0, &dims, &column_major(&dims)) };
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

    /// A plan cut into parts: the parts cover every element once (their lengths add up,
    /// and run one after another they write exactly what the whole plan writes), for
    /// transposes, batched transposes and plain copies, along every kind of axis.
    #[test]
    fn the_parts_of_a_split_plan_copy_what_the_plan_copies() {
        // Small under Miri, which interprets every element (and has no vector kernels).
        let cases = if cfg!(miri) {
            [[9, 7, 1, 1], [3, 9, 2, 1], [2, 3, 4, 5], [9, 1, 1, 1]]
        } else {
            [
                [150, 70, 1, 1],
                [70, 150, 3, 1],
                [5, 6, 7, 40],
                [150, 1, 1, 1],
            ]
        };
        for dims in cases {
            let n: usize = dims.iter().product();
            let src = SharedBuffer::<u64>::from_fn(n, |k| k as u64 * 7 + 1);
            for perm in [[1, 0, 2, 3], [0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]] {
                let pdims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
                let sstrides = column_major(&dims);
                let pstrides: Vec<isize> = perm.iter().map(|&p| sstrides[p]).collect();
                let plan = CopyPlan::new(&pdims, &column_major(&pdims), &pstrides);
                let run = |parts: &[(CopyPlan, isize, isize)]| {
                    let dst = SharedBuffer::<u64>::zeroed(n);
                    for (part, d, s) in parts {
                        // SAFETY: each part lies inside the whole plan's layouts, which are
                        // full-extent layouts of the two fresh buffers; this test is their
                        // only user.
                        unsafe {
                            let (y, x) = (dst.as_ptr().cast_mut().offset(*d), src.as_ptr());
                            part.copy_flipped(y, x.offset(*s), 0, |v| v, Stores::Cached)
                        };
                    }
                    // SAFETY: the copies are done.
                    unsafe { dst.view(0, &[n], &[1]) }.to_vec()
                };
                let want = run(&[(plan.clone(), 0, 0)]);
                assert!(
                    want.iter().all(|&v| v != 0),
                    "the whole plan wrote everything"
                );
                for parts in [1, 2, 3, 5] {
                    let split = plan.split(parts);
                    assert!(split.len() <= parts.max(1));
                    if !cfg!(miri) && parts > 1 && n >= 10_000 {
                        assert!(split.len() > 1, "{dims:?} {perm:?} was cut");
                    }
                    let lens: usize = split.iter().map(|(p, _, _)| p.len()).sum();
                    assert_eq!(lens, n, "{dims:?} {perm:?} in {parts}");
                    assert_eq!(run(&split), want, "{dims:?} {perm:?} in {parts}");
                }
            }
        }
    }

    fn permuted_assign_case(dims: [usize; 4]) {
        let n: usize = dims.iter().product();
        let src_buf = SharedBuffer::<u64>::zeroed(n);
        // SAFETY: full-extent views of fresh buffers; this test is their sole user.
        let mut src = unsafe { src_buf.view_mut(0, &dims, &column_major(&dims)) };
        src.update(|k, _| k as u64 * 3 + 1);
        for perm in [
            [0, 1, 2, 3],
            [1, 0, 2, 3],
            [3, 2, 1, 0],
            [2, 3, 0, 1],
            [1, 3, 0, 2],
        ] {
            let pdims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
            let dst_buf = SharedBuffer::<u64>::zeroed(n);
            // SAFETY: as above.
            let mut dst = unsafe { dst_buf.view_mut(0, &pdims, &column_major(&pdims)) };
            let view = src.as_ref();
            let permuted = view.permute_axes(&perm).unwrap();
            assert!(dst.assign_map(&permuted, |x| x + 1));
            for k in 0..n {
                let mut rem = k;
                let idx: Vec<usize> = pdims
                    .iter()
                    .map(|&d| {
                        let i = rem % d;
                        rem /= d;
                        i
                    })
                    .collect();
                let mut sidx = [0; 4];
                for (axis, &p) in perm.iter().enumerate() {
                    sidx[p] = idx[axis];
                }
                assert_eq!(
                    dst.get(&idx),
                    view.get(&sidx).map(|x| x + 1),
                    "perm {perm:?} at {idx:?}"
                );
            }
        }
        assert!(src.as_ref().permute_axes(&[0, 0, 1, 2]).is_none());
        assert!(src.as_ref().permute_axes(&[0, 1]).is_none());
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
