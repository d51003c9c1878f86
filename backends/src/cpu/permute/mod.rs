//! Permuting copies: `y <- ±op(x)` for a source that is an axis-permuted view of the
//! destination's dims, with `op` the identity or the complex conjugate.
//!
//! Owns [`permute_copy`] and its planned form [`permute_copy_planned`], over the copy planner
//! (module `plan`: [`CopyPlan`] and the view copies [`assign`], [`assign_map`],
//! [`assign_flipped`]) and the vector transposes (module `transpose`), which moved here from
//! the core's buffer: they are CPU kernels. Invariants: the result is bit for bit what the
//! elementwise definition gives (a sign change and a conjugation are exact: they flip sign bits); the
//! destination is written in full or, on a shape mismatch, not at all.
//!
//! A permutation of block legs is, after merging the axes that stay adjacent, almost always
//! a batch of 2-D transposes, and the fermionic sign and the adjoint's conjugation ride along
//! for free in the register transposes ([`assign_flipped`]: one XOR per
//! vector), so a signed or conjugated permutation moves as fast as a plain one. A
//! permutation whose output outgrows the last-level cache asks for streaming stores
//! ([`Stores::Streaming`]), which write the destination without reading it first.

mod plan;
mod transpose;

pub use plan::{CopyPlan, assign, assign_flipped, assign_map};
pub use transpose::Stores;

use super::{ShapeMismatch, mismatch};
use crate::Scalar;
use tessera_core::{StridedMut, StridedRef};

/// `y <- s * op(x)` elementwise, with `s = -1` when `negate` (else `+1`) and `op` the complex
/// conjugate when `conj` (the identity for real types); `x` is any strided view (typically
/// axis-permuted) of `y`'s dims. `stores` says how the vector kernels store `y` (the result
/// is the same bits either way).
///
/// # Errors
///
/// [`ShapeMismatch`] (and nothing is written) when the dims differ.
pub fn permute_copy<T: Scalar>(
    negate: bool,
    conj: bool,
    x: &StridedRef<'_, T>,
    y: &mut StridedMut<'_, T>,
    stores: Stores,
) -> Result<(), ShapeMismatch> {
    if x.dims() != y.dims() {
        return Err(mismatch(y, x));
    }
    let (mask, op) = flip::<T>(negate, conj);
    let done = assign_flipped(y, x, mask, op, stores);
    debug_assert!(done, "dims were checked");
    Ok(())
}

/// [`permute_copy`] through a plan of the two layouts made once ([`CopyPlan::new`] with the
/// destination's dims and strides and the permuted source's strides), for a caller that
/// moves the same blocks again and again: `y <- s * op(x)` at base pointers `y` and `x`.
///
/// # Safety
///
/// As [`CopyPlan::copy_flipped`]: the planned layouts at `y` and `x` lie inside allocations
/// the caller may write exclusively and read, the destination's is one-to-one, and the two
/// do not overlap.
pub unsafe fn permute_copy_planned<T: Scalar>(
    negate: bool,
    conj: bool,
    plan: &CopyPlan,
    y: *mut T,
    x: *const T,
    stores: Stores,
) {
    let (mask, op) = flip::<T>(negate, conj);
    // SAFETY: the caller's contract.
    unsafe { plan.copy_flipped(y, x, mask, op, stores) }
}

/// The XOR mask and the elementwise map of `v -> s * op(v)` (see [`permute_copy`]).
fn flip<T: Scalar>(negate: bool, conj: bool) -> (u128, impl Fn(T) -> T) {
    let conj = conj && T::IS_COMPLEX;
    let op = move |v: T| {
        let v = if conj { v.conj() } else { v };
        if negate { -v } else { v }
    };
    (xor_mask::<T>(negate, conj), op)
}

/// The XOR pattern (one element's worth, little-endian lanes as in memory) that turns `v`
/// into `±op(v)`: the sign bit of every float lane when negating, the sign bit of the
/// imaginary part when conjugating (both: the real part's only). Floats negate exactly by
/// flipping the sign bit, which is what `Neg` does, so this equals the elementwise
/// definition bit for bit.
fn xor_mask<T: Scalar>(negate: bool, conj: bool) -> u128 {
    let lane_bits = 8 * size_of::<T::Real>();
    let sign = 1_u128 << (lane_bits - 1);
    let (re, im) = (
        if negate { sign } else { 0 },
        if negate != conj { sign } else { 0 },
    );
    if T::IS_COMPLEX {
        re | (im << lane_bits)
    } else {
        re
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_complex::Complex;
    use tessera_core::SharedBuffer;
    use tessera_testing::{column_major_strides, unravel};

    /// A seeded xorshift generator (the backends have no random-number dependency).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn value(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1_u64 << 53) as f64 * 4.0 - 2.0
        }
        fn perm(&mut self, n: usize) -> Vec<usize> {
            let mut p: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                p.swap(i, self.below(i + 1));
            }
            p
        }
    }

    /// The bits of every lane of a value, for exact comparison (signed zeros included).
    fn bits<T: Scalar>(v: T) -> (u64, u64) {
        let z = v.to_c64();
        (z.re.to_bits(), z.im.to_bits())
    }

    /// A block view (`dims`, at a random corner) inside a larger column-major parent, as a
    /// block sits inside its sector matrix: the offset and strides of the sub-box.
    fn sub_box(rng: &mut Rng, dims: &[usize]) -> (usize, Vec<usize>, Vec<isize>) {
        let parent: Vec<usize> = dims
            .iter()
            .map(|&d| d + if rng.below(2) == 0 { 0 } else { rng.below(9) })
            .collect();
        let strides = column_major_strides(&parent);
        let offset = dims
            .iter()
            .zip(&parent)
            .zip(&strides)
            .map(|((&d, &p), &s)| rng.below(p - d + 1) * s as usize)
            .sum();
        let len = parent.iter().product();
        (offset, vec![len], strides)
    }

    fn case<T: Scalar>(rng: &mut Rng, dims: &[usize]) {
        let n = dims.len();
        let perm = rng.perm(n);
        let (negate, conj) = (rng.below(2) == 1, rng.below(2) == 1);
        let stores = [Stores::Cached, Stores::Streaming][rng.below(2)];
        // The source: a block of `dims`; the destination: a block of the permuted dims.
        let new: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
        let (xo, xl, xs) = sub_box(rng, dims);
        let (yo, yl, ys) = sub_box(rng, &new);
        let a = SharedBuffer::<T>::from_fn(xl[0], |_| {
            T::from_c64(Complex::new(rng.value(), rng.value()))
        });
        let b = SharedBuffer::<T>::from_fn(yl[0], |_| T::from_f64(7.0));
        // SAFETY: both views are sub-boxes of their fresh buffers (checked below), and this
        // test is the buffers' only user.
        let (x, mut y) = unsafe {
            assert!(a.check_extent(xo, dims, &xs) && b.check_extent(yo, &new, &ys));
            (a.view(xo, dims, &xs), b.view_mut(yo, &new, &ys))
        };
        let xp = x.permute_axes(&perm).unwrap();
        let planned = rng.below(2) == 1;
        if planned {
            // The same copy through a plan of the two layouts.
            let plan = CopyPlan::new(&new, &ys, xp.strides());
            // SAFETY: the plan's layouts are the two views', checked above; the views are
            // not used during the call.
            unsafe {
                permute_copy_planned(negate, conj, &plan, y.as_mut_ptr(), xp.as_ptr(), stores)
            };
        } else {
            permute_copy(negate, conj, &xp, &mut y, stores).unwrap();
        }
        let total: usize = new.iter().product();
        for k in 0..total {
            let idx = unravel(k, &new);
            let v = xp.get(&idx).unwrap();
            let v = if conj { v.conj() } else { v };
            let want = if negate { -v } else { v };
            assert_eq!(
                bits(y.get(&idx).unwrap()),
                bits(want),
                "{} dims {dims:?} perm {perm:?} negate {negate} conj {conj} {stores:?} \
                 planned {planned} at {idx:?}",
                T::NAME
            );
        }
        // Nothing outside the destination block was written.
        let inside: usize = (0..total)
            .map(|k| {
                let idx = unravel(k, &new);
                let at: isize = idx.iter().zip(&ys).map(|(&i, &s)| i as isize * s).sum();
                yo + at as usize
            })
            .max()
            .unwrap_or(0);
        // SAFETY: the whole buffer, read after the exclusive view's last use.
        let whole = unsafe { b.view(0, &yl, &[1]) }.to_vec();
        let mut mine = vec![false; whole.len()];
        for k in 0..total {
            let idx = unravel(k, &new);
            let at: isize = idx.iter().zip(&ys).map(|(&i, &s)| i as isize * s).sum();
            mine[yo + at as usize] = true;
        }
        assert!(inside < whole.len());
        for (v, m) in whole.iter().zip(&mine) {
            if !m {
                assert_eq!(bits(*v), bits(T::from_f64(7.0)), "wrote outside the block");
            }
        }
    }

    fn random_dims(rng: &mut Rng) -> Vec<usize> {
        let n = 1 + rng.below(if cfg!(miri) { 3 } else { 5 });
        let big = if cfg!(miri) { 10 } else { 24 };
        (0..n)
            .map(|_| match rng.below(4) {
                0 => 1 + rng.below(3),
                1 => 8 * (1 + rng.below(2)),
                _ => 1 + rng.below(big),
            })
            .collect()
    }

    /// Every element type, random ranks, dims (multiples of the kernels' squares and not),
    /// permutations, signs and conjugations, blocks inside larger parents, through views and
    /// through a plan of the layouts: the result equals the elementwise definition bit for
    /// bit, and nothing outside the block is written.
    #[test]
    fn permuting_copies_equal_the_elementwise_definition() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let cases = if cfg!(miri) { 6 } else { 300 };
        for _ in 0..cases {
            let dims = random_dims(&mut rng);
            case::<f64>(&mut rng, &dims);
            case::<f32>(&mut rng, &dims);
            case::<Complex<f64>>(&mut rng, &dims);
            case::<Complex<f32>>(&mut rng, &dims);
        }
        // Large 2-D and 4-D transposes: several kernel tiles, and edges on both sides.
        if !cfg!(miri) {
            for dims in [
                [131_usize, 77, 1, 1],
                [64, 64, 1, 1],
                [8, 8, 8, 8],
                [9, 16, 7, 16],
            ] {
                for _ in 0..4 {
                    case::<f64>(&mut rng, &dims);
                    case::<Complex<f64>>(&mut rng, &dims);
                    case::<Complex<f32>>(&mut rng, &dims);
                }
            }
        }
    }

    #[test]
    fn masks_flip_exactly_the_sign_bits_of_the_operation() {
        assert_eq!(xor_mask::<f64>(false, true), 0);
        assert_eq!(xor_mask::<f64>(true, false), 1 << 63);
        assert_eq!(xor_mask::<f32>(true, true), 1 << 31);
        assert_eq!(xor_mask::<Complex<f32>>(false, true), 1 << 63);
        assert_eq!(xor_mask::<Complex<f32>>(true, false), (1 << 63) | (1 << 31));
        assert_eq!(xor_mask::<Complex<f32>>(true, true), 1 << 31);
        assert_eq!(xor_mask::<Complex<f64>>(true, true), 1 << 63);
        assert_eq!(xor_mask::<Complex<f64>>(false, true), 1 << 127);
    }
}
