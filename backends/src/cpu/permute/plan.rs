//! The copy planner of the CPU backend: a copy between two strided layouts of the same dims,
//! planned once from the layouts alone ([`CopyPlan`]), and the copies of one resolved view into
//! another that run through it ([`assign`], [`assign_map`], [`assign_flipped`]).
//!
//! Owns: the merging of axes laid out in order on both sides, the choice of the loops (runs
//! contiguous on both sides, or tiles over the destination's contiguous axis and the source's
//! fastest), the cutting of a plan into parts for several threads, and the running of a plan
//! (through the vector transposes of `transpose` where the element type has one).
//! Invariants: a plan reaches exactly the elements of its two layouts, each once (so a copy
//! writes every element of the destination once, and parts of a split plan write disjoint
//! elements); the result is the same bits whichever loops, kernels or stores run it; a copy
//! between views of different dims writes nothing.

use super::transpose::{
    KERNEL_TILE, MICRO, Stores, TILE_DST, TILE_FAST, TransposeKernel, flipping_kernel,
    micro_transpose, prefetch,
};
use crate::cpu::{fence_streams, store_streaming};
use smallvec::SmallVec;
use tessera_core::{StridedMut, StridedRef, for_each_common_run};

/// Axes a plan keeps inline, as the core's views do: tensors of up to six legs need no heap
/// allocation per plan.
const AXES: usize = 6;

/// `d[i] = f(s[i])` with non-temporal stores (see [`Stores::Streaming`] and
/// [`store_streaming`]). The caller fences the stores ([`fence_streams`]) before the copy
/// returns.
#[inline(always)]
fn stream_run<T: Copy, U: Copy>(d: &mut [T], s: &[U], f: &impl Fn(U) -> T) {
    for (d, &s) in d.iter_mut().zip(s) {
        // SAFETY: `d` is an element of a slice this thread writes exclusively.
        unsafe { store_streaming(d, f(s)) };
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
/// is what [`assign`] and its kin plan at every call; a caller that moves many
/// blocks of the same layouts again and again (a planned permutation keeps one per block)
/// plans once and runs the plan with [`CopyPlan::copy_flipped`].
///
/// ```
/// use tessera_backends::cpu::{CopyPlan, Stores};
/// use tessera_core::SharedBuffer;
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
    /// use tessera_backends::cpu::{CopyPlan, Stores};
    /// use tessera_core::SharedBuffer;
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
    /// [`assign_flipped`] does for views with the planned layouts (the same
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
                let streaming = kernel.is_some_and(|(_, _, streams)| streams);
                for_each_common_run(dims, [ds, ss], |_, run, [od, os]| {
                    // SAFETY: the run lies inside both layouts (it is contiguous in both),
                    // which the caller vouches for; the destination is written exclusively.
                    let (d, s) = unsafe {
                        (
                            std::slice::from_raw_parts_mut(pd.offset(od), run),
                            std::slice::from_raw_parts(ps.offset(os), run),
                        )
                    };
                    if streaming {
                        stream_run(d, s, &f);
                    } else {
                        for (d, &s) in d.iter_mut().zip(s) {
                            *d = f(s);
                        }
                    }
                });
                if streaming {
                    fence_streams();
                }
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

/// Sets every element to `f(src element)`, for a source of the same dims with any strides
/// (a permuted view, say). Axes that stay adjacent and in order on both sides are merged
/// first; when the source's fastest axis is then not the destination's, the copy runs in
/// square tiles over those two axes so both sides stream through cache. Returns `false`
/// (and writes nothing) when the dims differ.
pub fn assign_map<T: Copy, U: Copy>(
    dst: &mut StridedMut<'_, T>,
    src: &StridedRef<'_, U>,
    f: impl Fn(U) -> T,
) -> bool {
    assign_with(dst, src, f, None)
}

/// Sets every element to the source's (a plain copy, for a source of the same dims with
/// any strides): [`assign_map`](assign_map) with the identity, except that a plain
/// 2-D transpose of `f32`, `f64`, `Complex<f32>`, `Complex<f64>` or 4- and 8-byte
/// integers moves its full 8 x 8 squares through vector registers where the CPU allows
/// (AVX2 on x86-64, and AVX-512F for 8-byte types with the `avx512` feature, detected at
/// run time); the result is the same bits either way. Returns `false` (and writes nothing) when the dims differ.
pub fn assign<T: Copy + 'static>(dst: &mut StridedMut<'_, T>, src: &StridedRef<'_, T>) -> bool {
    assign_flipped(dst, src, 0, |x| x, Stores::Cached)
}

/// Sets every element to the source's with the bits of `mask` flipped, `flip` being that
/// same map on one element: a negation (the sign bits), a complex conjugation (the
/// imaginary part's sign bit), or both, exactly. [`assign`](assign) with the flip:
/// the full squares of a plain 2-D transpose go through the same vector kernels, which
/// flip with one XOR per vector; `flip` does the rest. `mask` is the element's bit
/// pattern as it lies in memory (little-endian; bits past the element's size are
/// ignored). If `flip` does not equal the XOR, which elements get which is unspecified
/// (never undefined). `stores` says how the vector kernels store (the bits are the same
/// either way). Returns `false` (and writes nothing) when the dims differ.
pub fn assign_flipped<T: Copy + 'static>(
    dst: &mut StridedMut<'_, T>,
    src: &StridedRef<'_, T>,
    mask: u128,
    flip: impl Fn(T) -> T,
    stores: Stores,
) -> bool {
    assign_with(dst, src, flip, flipping_kernel::<T>(mask, stores))
}

/// [`assign_map`](assign_map), with `kernel` (when given, with its mask) doing the
/// full squares of a plain transpose; it must then compute what `f` would.
fn assign_with<T: Copy, U: Copy>(
    dst: &mut StridedMut<'_, T>,
    src: &StridedRef<'_, U>,
    f: impl Fn(U) -> T,
    kernel: Option<(TransposeKernel, u128, bool)>,
) -> bool {
    if dst.dims() != src.dims() {
        return false;
    }
    let plan = CopyPlan::new(dst.dims(), dst.strides(), src.strides());
    // SAFETY: the plan is of this view's dims and strides and of the source's, so every
    // element it reaches lies inside the views' checked extents, and distinct indices
    // of `dst` are distinct elements; `dst` holds an exclusive grant distinct from
    // `src`'s.
    unsafe { plan.run(dst.as_mut_ptr(), src.as_ptr(), f, kernel) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::{SharedBuffer, Zeroable, for_each_offset};
    use tessera_testing::column_major_strides;
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
                assert!(assign(&mut b.view_mut(d_o, &dims, &dst_strides), &x));
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
        assert!(assign(&mut dst, &permuted));
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
                let sstrides = column_major_strides(&dims);
                let pstrides: Vec<isize> = perm.iter().map(|&p| sstrides[p]).collect();
                let plan = CopyPlan::new(&pdims, &column_major_strides(&pdims), &pstrides);
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
        let mut src = unsafe { src_buf.view_mut(0, &dims, &column_major_strides(&dims)) };
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
            let mut dst = unsafe { dst_buf.view_mut(0, &pdims, &column_major_strides(&pdims)) };
            let view = src.as_ref();
            let permuted = view.permute_axes(&perm).unwrap();
            assert!(assign_map(&mut dst, &permuted, |x| x + 1));
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
}
