//! The CPU backend's elementwise kernels and reductions over strided views.
//!
//! Owns: scale, axpy, scaled (conjugating, permuting) copies, dot products and squared norms
//! over [`StridedRef`] / [`StridedMut`]; the copy planner and the vector transposes under the
//! permuting copies ([`CopyPlan`], [`assign`], module `permute`); GEMM on faer and the faer
//! matrix views of strided views; contractions with a small operand in one pass over the large
//! one ([`contract_small`]). Invariant: every kernel either checks that its
//! operands have equal dims and returns [`ShapeMismatch`] before writing anything, or writes
//! the whole destination; all loops run over contiguous runs where the layout has them, so the
//! compiler vectorises the inner loop.

mod gemm;
mod matrix;
mod permute;
mod placement;
mod small;

pub use gemm::{
    GEMM_PARALLEL_MIN_FLOPS, GemmShapeMismatch, gemm, gemm_parallelism, gemm_parallelism_alone,
    gemm_with,
};
pub use matrix::{matrix_mut, matrix_ref};
pub use permute::{
    CopyPlan, Stores, assign, assign_flipped, assign_map, permute_copy, permute_copy_planned,
};
pub use placement::{Host, PARALLEL_BLOCK_ELEMS, Parts, fans_out, over_parts, try_over_parts};
pub use small::{SmallLegs, SmallOutput, SmallPair, SmallShapeMismatch, contract_small};

use crate::Scalar;
use tessera_core::{StridedMut, StridedRef, zip_runs, zip_runs_ref};

/// The bytes a kernel's result takes from which it streams its stores ([`Stores::Streaming`]):
/// with source and destination together beyond a last-level cache of 32 MiB, the first
/// blocks written are evicted before the kernel ends, so reading the destination into cache
/// first (what an ordinary store does) only costs memory traffic. Smaller results stay in
/// cache for whatever reads them next (usually a contraction).
pub const STREAM_BYTES: usize = 16 << 20;

/// `*d = v` with a non-temporal store (`movnti`, one 8-byte word at a time) for element
/// types whose size is a multiple of 8 bytes and alignment at least 8 (f64 and complex
/// f64); an ordinary store for the rest, off x86-64 and under Miri. The caller fences the
/// stores ([`fence_streams`]) before the result is published.
///
/// # Safety
///
/// `d` is valid for writes, aligned, and not accessed by anything else until the fence.
#[inline(always)]
pub(crate) unsafe fn store_streaming<T: Copy>(d: *mut T, v: T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if size_of::<T>().is_multiple_of(8) && align_of::<T>() >= 8 {
        let from = (&raw const v).cast::<i64>();
        let to = d.cast::<i64>();
        for w in 0..size_of::<T>() / 8 {
            // SAFETY: `to.add(w)` is inside `*d` (the caller's) and 8-byte aligned (`T`
            // is); `from.add(w)` is inside the local `v`. `movnti` is SSE2, part of the
            // x86-64 baseline.
            unsafe { std::arch::x86_64::_mm_stream_si64(to.add(w), from.add(w).read()) };
        }
        return;
    }
    // SAFETY: the caller's.
    unsafe { d.write(v) };
}

/// Orders the non-temporal stores of [`store_streaming`] before whatever publishes the
/// result to another thread (a release store does not order them).
#[inline(always)]
pub(crate) fn fence_streams() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `sfence` only orders stores; SSE is part of the x86-64 baseline.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Two operands of one kernel have different dims.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "expected operands of equal dims, but the destination has {expected:?} and the source {given:?}"
)]
pub struct ShapeMismatch {
    /// The destination's dims.
    pub expected: Vec<usize>,
    /// The source's dims.
    pub given: Vec<usize>,
}

fn mismatch<T: Copy, U: Copy>(dst: &StridedMut<'_, T>, src: &StridedRef<'_, U>) -> ShapeMismatch {
    ShapeMismatch {
        expected: dst.dims().to_vec(),
        given: src.dims().to_vec(),
    }
}

/// `y <- alpha * y`.
pub fn scale<T: Scalar>(y: &mut StridedMut<'_, T>, alpha: T) {
    y.for_each_run_mut(|_, run| run.iter_mut().for_each(|v| *v *= alpha));
}

/// `y <- alpha * x + y`.
pub fn axpy<T: Scalar>(
    alpha: T,
    x: &StridedRef<'_, T>,
    y: &mut StridedMut<'_, T>,
) -> Result<(), ShapeMismatch> {
    if zip_runs(y, x, |_, y, x| {
        for (y, &x) in y.iter_mut().zip(x) {
            *y += alpha * x;
        }
    }) {
        Ok(())
    } else {
        Err(mismatch(y, x))
    }
}

/// `y <- alpha * op(x) + beta * y` elementwise, with `op` the conjugate when `conj`; `x` may be
/// any strided (for example axis-permuted) view of `y`'s dims. With `beta == 0` the old `y` is
/// not read (so NaNs in it do not leak).
pub fn copy_scaled<T: Scalar>(
    alpha: T,
    x: &StridedRef<'_, T>,
    conj: bool,
    beta: T,
    y: &mut StridedMut<'_, T>,
) -> Result<(), ShapeMismatch> {
    if x.dims() != y.dims() {
        return Err(mismatch(y, x));
    }
    let op = |v: T| if conj { v.conj() } else { v };
    if beta == T::ZERO {
        assign_map(y, x, |v| alpha * op(v));
    } else {
        let ok = zip_runs(y, x, |_, y, x| {
            for (y, &x) in y.iter_mut().zip(x) {
                *y = alpha * op(x) + beta * *y;
            }
        });
        debug_assert!(ok);
    }
    Ok(())
}

/// Independent partial sums a reduction keeps: a sum into one accumulator waits for each
/// add's latency (about 4 cycles) per element; eight independent ones let the adds overlap
/// (and vectorise), so the reductions run at memory speed rather than at one element per add
/// latency.
const LANES: usize = 8;

/// `sum(f(x_i, y_i))` over two equal-length runs, in [`LANES`] interleaved partial sums
/// added pairwise at the end (a fixed order: the result depends only on the data).
#[inline]
fn lane_sum<T: Copy, U: Copy, R: Copy + std::ops::Add<Output = R>>(
    zero: R,
    x: &[T],
    y: &[U],
    f: impl Fn(T, U) -> R,
) -> R {
    let mut lanes = [zero; LANES];
    let (xc, yc) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (xt, yt) = (xc.remainder(), yc.remainder());
    for (xs, ys) in xc.zip(yc) {
        for k in 0..LANES {
            lanes[k] = lanes[k] + f(xs[k], ys[k]);
        }
    }
    for (k, (&a, &b)) in xt.iter().zip(yt).enumerate() {
        lanes[k] = lanes[k] + f(a, b);
    }
    let [a, b, c, d, e, g, h, i] = lanes;
    ((a + b) + (c + d)) + ((e + g) + (h + i))
}

/// `sum(conj(x) * y)`.
pub fn dot<T: Scalar>(x: &StridedRef<'_, T>, y: &StridedRef<'_, T>) -> Result<T, ShapeMismatch> {
    let mut acc = T::ZERO;
    if zip_runs_ref(x, y, |_, x, y| {
        acc += lane_sum(T::ZERO, x, y, |x: T, y: T| x.conj() * y);
    }) {
        Ok(acc)
    } else {
        Err(ShapeMismatch {
            expected: x.dims().to_vec(),
            given: y.dims().to_vec(),
        })
    }
}

/// `sum(|x|^2)`.
pub fn norm_sqr<T: Scalar>(x: &StridedRef<'_, T>) -> T::Real {
    let mut acc = T::Real::ZERO;
    x.for_each_run(|_, run| {
        acc += lane_sum(T::Real::ZERO, run, run, |v: T, _| v.abs2());
    });
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_complex::Complex;
    use tessera_core::SharedBuffer;

    #[test]
    fn kernels_equal_their_elementwise_definitions() {
        let dims = [3_usize, 4];
        let a = SharedBuffer::<Complex<f64>>::zeroed(12);
        let b = SharedBuffer::<Complex<f64>>::zeroed(12);
        // SAFETY: full-extent views of fresh buffers; this test is their sole user.
        let (mut x, mut y) =
            unsafe { (a.view_mut(0, &dims, &[1, 3]), b.view_mut(0, &dims, &[1, 3])) };
        x.update(|k, _| Complex::new(k as f64, 1.0));
        y.update(|k, _| Complex::new(1.0, -(k as f64)));
        let (x0, y0) = (x.to_vec(), y.to_vec());
        let alpha = Complex::new(0.5, 2.0);
        axpy(alpha, &x.as_ref(), &mut y).unwrap();
        for k in 0..12 {
            assert_eq!(y.to_vec()[k], alpha * x0[k] + y0[k]);
        }
        let d = dot(&x.as_ref(), &x.as_ref()).unwrap();
        assert_eq!(d.re, norm_sqr(&x.as_ref()));
        assert_eq!(d.im, 0.0);
        scale(&mut x, Complex::new(0.0, 1.0));
        assert_eq!(x.to_vec()[5], Complex::new(0.0, 1.0) * x0[5]);
        // A transposed, conjugated copy into a 4 x 3 destination.
        let c = SharedBuffer::<Complex<f64>>::zeroed(12);
        // SAFETY: as above.
        let mut t = unsafe { c.view_mut(0, &[4, 3], &[1, 4]) };
        let xt = x.as_ref();
        copy_scaled(
            Complex::new(2.0, 0.0),
            &xt.permute_axes(&[1, 0]).unwrap(),
            true,
            Complex::new(0.0, 0.0),
            &mut t,
        )
        .unwrap();
        assert_eq!(t.get(&[3, 1]), x.get(&[1, 3]).map(|v| v.conj() * 2.0));
        let err = axpy(alpha, &t.as_ref(), &mut x).unwrap_err();
        assert_eq!((err.expected, err.given), (vec![3, 4], vec![4, 3]));
    }

    /// The lane sums equal the plain sum on integers (exact in f64) for every remainder.
    #[test]
    fn lane_sums_add_every_element_once() {
        for n in 0..40 {
            let x: Vec<f64> = (0..n).map(|i| (i * 7 % 11) as f64).collect();
            let y: Vec<f64> = (0..n).map(|i| (i % 5) as f64 - 2.0).collect();
            let want: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
            assert_eq!(lane_sum(0.0, &x, &y, |a, b| a * b), want, "n = {n}");
        }
    }
}
