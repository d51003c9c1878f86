//! Permuting copies: `y <- ±op(x)` for a source that is an axis-permuted view of the
//! destination's dims, with `op` the identity or the complex conjugate.
//!
//! Owns [`permute_copy`]. Invariants: the result is bit for bit what the elementwise
//! definition gives (a sign change and a conjugation are exact: they flip sign bits, which
//! the vector kernels do with one XOR per vector); the destination is written in full or,
//! on a shape mismatch, not at all.
//!
//! Why here and not only in core's `StridedMut::assign`: a permutation of block legs is,
//! after merging the axes that stay adjacent, almost always a batch of 2-D transposes, and
//! the fermionic sign and the adjoint's conjugation ride along for free in the register
//! transpose. Core's `assign` has register transposes for plain copies only (AVX2, and
//! AVX-512 for 8-byte elements); a signed or conjugated permutation went through the
//! element-at-a-time path. Here 8- and 16-byte elements (`f64`, `Complex<f32>`,
//! `Complex<f64>`) get AVX-512 kernels that take the sign and the conjugation; everything
//! else falls back to core (`assign` for plain copies, which keeps its AVX2 kernels for
//! 4-byte elements).

use super::{ShapeMismatch, copy_scaled, mismatch};
use crate::Scalar;
use tessera_core::{StridedMut, StridedRef};

/// The most axes the 2-D transpose planner handles; views with more take core's path.
const MAX_AXES: usize = 8;

/// The side of the tiles the transpose kernels are handed, so that the source rows and
/// destination columns one call touches stay within reach of the TLB and the prefetchers
/// however large the block.
const TILE: usize = 64;

/// `y <- s * op(x)` elementwise, with `s = -1` when `negate` (else `+1`) and `op` the complex
/// conjugate when `conj` (the identity for real types); `x` is any strided view (typically
/// axis-permuted) of `y`'s dims.
///
/// # Errors
///
/// [`ShapeMismatch`] (and nothing is written) when the dims differ.
pub fn permute_copy<T: Scalar>(
    negate: bool,
    conj: bool,
    x: &StridedRef<'_, T>,
    y: &mut StridedMut<'_, T>,
) -> Result<(), ShapeMismatch> {
    if x.dims() != y.dims() {
        return Err(mismatch(y, x));
    }
    let conj = conj && T::IS_COMPLEX;
    if let Some(kernel) = kernel_for::<T>()
        && let Some(plan) = Plan::new(y.dims(), y.strides(), x.strides())
    {
        let op = |v: T| {
            let v = if conj { v.conj() } else { v };
            if negate { -v } else { v }
        };
        let mask = xor_mask::<T>(negate, conj);
        // SAFETY: `x` and `y` are valid views of the same dims (checked above): every
        // element the plan names lies inside their extents; `y` is exclusive and distinct
        // from `x` (its grant is a write, `x`'s a read of other records, or the views were
        // handed out as distinct by their owner). `kernel` was chosen for `T`'s size and this
        // CPU by `kernel_for`, and `mask` is the bit pattern that turns `v` into `op(v)`
        // (see `xor_mask`).
        unsafe { plan.run(y.as_mut_ptr(), x.as_ptr(), kernel, mask, &op) };
        return Ok(());
    }
    if !negate && !conj {
        let ok = y.assign(x);
        debug_assert!(ok, "dims were checked");
        Ok(())
    } else {
        let sign = if negate { -T::ONE } else { T::ONE };
        copy_scaled(sign, x, conj, T::ZERO, y)
    }
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

/// `dst[r + c * ld_dst] = src[c + r * ld_src] ^ mask` for `r < rows`, `c < cols`, with
/// offsets in elements of the kernel's size and `rows`, `cols` multiples of its square.
type Kernel = unsafe fn(*mut u8, isize, *const u8, isize, usize, usize, u128);

/// A register transpose for `T`'s size: the square it moves and the function.
#[derive(Clone, Copy)]
struct KernelFor {
    square: usize,
    run: Kernel,
}

/// The kernel for `T` on this CPU: AVX-512F for 8- and 16-byte elements; the portable one
/// under Miri (so that the planner and the edges are checked there); none elsewhere (core's
/// path is as fast there).
fn kernel_for<T: Scalar>() -> Option<KernelFor> {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            match size_of::<T>() {
                8 => {
                    return Some(KernelFor {
                        square: 8,
                        run: simd::transpose_b8,
                    });
                }
                16 => {
                    return Some(KernelFor {
                        square: 4,
                        run: simd::transpose_b16,
                    });
                }
                _ => {}
            }
        }
        None
    }
    #[cfg(miri)]
    {
        match size_of::<T>() {
            8 => Some(KernelFor {
                square: 4,
                run: portable::transpose::<u64>,
            }),
            16 => Some(KernelFor {
                square: 2,
                run: portable::transpose::<u128>,
            }),
            4 => Some(KernelFor {
                square: 4,
                run: portable::transpose::<u32>,
            }),
            _ => None,
        }
    }
    #[cfg(all(not(target_arch = "x86_64"), not(miri)))]
    {
        None
    }
}

/// A batch of 2-D transposes: after merging axes that stay adjacent and in order on both
/// sides, the destination's first axis has unit stride and some other axis `fast` has unit
/// stride in the source. Each outer multi-index (the remaining axes) is one transpose of
/// `rows = dims[0]` by `cols = dims[fast]`.
struct Plan {
    rows: usize,
    cols: usize,
    /// Source stride along destination axis 0 (the source's leading dimension).
    ld_src: isize,
    /// Destination stride along axis `fast` (the destination's leading dimension).
    ld_dst: isize,
    n_outer: usize,
    outer_dims: [usize; MAX_AXES],
    outer_dst: [isize; MAX_AXES],
    outer_src: [isize; MAX_AXES],
}

impl Plan {
    /// The plan for destination strides `ds` and source strides `ss` over `dims`, when the
    /// copy is a batch of transposes (else `None`: a plain or general strided copy).
    fn new(dims: &[usize], ds: &[isize], ss: &[isize]) -> Option<Self> {
        if dims.len() > MAX_AXES || dims.contains(&0) {
            return None;
        }
        // Merge adjacent axes that are in order on both sides; drop length-1 axes.
        let (mut d, mut a, mut b) = (
            [0_usize; MAX_AXES],
            [0_isize; MAX_AXES],
            [0_isize; MAX_AXES],
        );
        let mut n = 0;
        for k in 0..dims.len() {
            if dims[k] == 1 {
                continue;
            }
            if n > 0
                && ds[k] == a[n - 1] * d[n - 1] as isize
                && ss[k] == b[n - 1] * d[n - 1] as isize
            {
                d[n - 1] *= dims[k];
                continue;
            }
            (d[n], a[n], b[n]) = (dims[k], ds[k], ss[k]);
            n += 1;
        }
        // The destination's first axis must be its contiguous one, and the source's first
        // axis not (else the copy streams on both sides and core's runs are as fast).
        if n < 2 || a[0] != 1 || b[0] == 1 {
            return None;
        }
        let fast = (1..n).find(|&k| b[k] == 1)?;
        if b[0] == 0 || a[fast] == 0 {
            return None;
        }
        let mut plan = Plan {
            rows: d[0],
            cols: d[fast],
            ld_src: b[0],
            ld_dst: a[fast],
            n_outer: 0,
            outer_dims: [0; MAX_AXES],
            outer_dst: [0; MAX_AXES],
            outer_src: [0; MAX_AXES],
        };
        for k in (1..n).filter(|&k| k != fast) {
            plan.outer_dims[plan.n_outer] = d[k];
            plan.outer_dst[plan.n_outer] = a[k];
            plan.outer_src[plan.n_outer] = b[k];
            plan.n_outer += 1;
        }
        Some(plan)
    }

    /// Runs the transposes: full squares through `kernel` in tiles of [`TILE`], the edges
    /// (rows or columns past the last full square) element by element through `op`.
    ///
    /// # Safety
    ///
    /// `dst` and `src` are the base pointers of an exclusive and a shared view for which the
    /// plan was made (every element the plan names lies inside them, and the two do not
    /// overlap); `kernel` suits `T`'s size and this CPU; `v ^ mask` (bits) equals `op(v)`.
    unsafe fn run<T: Copy>(
        &self,
        dst: *mut T,
        src: *const T,
        kernel: KernelFor,
        mask: u128,
        op: &impl Fn(T) -> T,
    ) {
        let (rows, cols) = (self.rows, self.cols);
        let (rm, cm) = (rows - rows % kernel.square, cols - cols % kernel.square);
        let (lds, ldd) = (self.ld_src, self.ld_dst);
        let outer = &self.outer_dims[..self.n_outer];
        let n: usize = outer.iter().product();
        let mut index = [0_usize; MAX_AXES];
        let (mut bd, mut bs) = (0_isize, 0_isize);
        for _ in 0..n {
            // SAFETY: at this in-range outer index, element (r, c) of the
            // transpose lies at `bd + r + c * ldd` in `dst` and `bs + r * lds + c` in `src`,
            // inside the views for r < rows, c < cols (the caller's duty); each kernel call
            // covers rows kt..kt + h <= rm and columns jt..jt + w <= cm, whole squares.
            unsafe {
                let (d, s) = (dst.offset(bd), src.offset(bs));
                for jt in (0..cm).step_by(TILE) {
                    for kt in (0..rm).step_by(TILE) {
                        (kernel.run)(
                            d.offset(kt as isize + jt as isize * ldd).cast(),
                            ldd,
                            s.offset(kt as isize * lds + jt as isize).cast(),
                            lds,
                            TILE.min(rm - kt),
                            TILE.min(cm - jt),
                            mask,
                        );
                    }
                }
                // Edges: the columns past cm (all rows), then the rows past rm.
                for c in cm..cols {
                    for r in 0..rows {
                        *d.offset(r as isize + c as isize * ldd) =
                            op(*s.offset(r as isize * lds + c as isize));
                    }
                }
                for c in 0..cm {
                    for r in rm..rows {
                        *d.offset(r as isize + c as isize * ldd) =
                            op(*s.offset(r as isize * lds + c as isize));
                    }
                }
            }
            for (k, i) in index[..outer.len()].iter_mut().enumerate() {
                *i += 1;
                bd += self.outer_dst[k];
                bs += self.outer_src[k];
                if *i < outer[k] {
                    break;
                }
                bd -= self.outer_dst[k] * outer[k] as isize;
                bs -= self.outer_src[k] * outer[k] as isize;
                *i = 0;
            }
        }
    }
}

/// The portable kernel: what the vector kernels compute, element by element, on unsigned
/// integers of the element's size. Used under Miri, which checks the planner and the edges.
#[cfg(miri)]
mod portable {
    /// # Safety
    ///
    /// As [`super::Kernel`]: every element named lies inside an allocation the caller may
    /// read (`src`) or write exclusively (`dst`), and the regions do not overlap.
    pub(super) unsafe fn transpose<U: Copy + std::ops::BitXor<Output = U> + TryFrom<u128>>(
        dst: *mut u8,
        ld_dst: isize,
        src: *const u8,
        ld_src: isize,
        rows: usize,
        cols: usize,
        mask: u128,
    ) {
        let mask: U = U::try_from(mask).ok().expect("the mask fits the element");
        let (dst, src) = (dst.cast::<U>(), src.cast::<U>());
        for c in 0..cols {
            for r in 0..rows {
                // SAFETY: r < rows, c < cols: inside the caller's regions.
                unsafe {
                    *dst.offset(r as isize + c as isize * ld_dst) =
                        *src.offset(c as isize + r as isize * ld_src) ^ mask;
                }
            }
        }
    }
}

/// AVX-512F register transposes with a sign mask: 8 x 8 squares of 8-byte elements and
/// 4 x 4 squares of 16-byte elements (one 64-byte vector per square row, so one line per
/// row when aligned).
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod simd {
    use std::arch::x86_64::*;

    /// Hints the cache to fetch the line holding `p` (for reading); never faults.
    #[inline(always)]
    fn prefetch(p: *const u8) {
        // SAFETY: a prefetch is a hint and does not access memory architecturally.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
    }

    /// Hints the cache to fetch the line holding `p` for writing (an RFO ahead of the
    /// stores); never faults.
    #[inline(always)]
    fn prefetch_write(p: *const u8) {
        // SAFETY: as above.
        unsafe { _mm_prefetch::<_MM_HINT_ET0>(p.cast()) }
    }

    /// 8-byte elements, 8 x 8 squares: each square row is one 8-lane vector; pairs, quads
    /// and halves are interleaved with two-source lane permutes, the mask is XORed in, and
    /// each destination column is one 8-lane store. Columns of squares outer, so that the
    /// destination is written as 8 sequential streams; the source lines of the next column
    /// of squares and the destination lines of the next square are prefetched.
    ///
    /// # Safety
    ///
    /// The CPU supports AVX-512F; every element `src[c + r * ld_src]` and
    /// `dst[r + c * ld_dst]` for `r < rows`, `c < cols` lies inside an allocation the caller
    /// may read (`src`) or write exclusively (`dst`), and the two regions do not overlap.
    /// Offsets are in 8-byte elements; `rows` and `cols` are multiples of 8.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose_b8(
        dst: *mut u8,
        ld_dst: isize,
        src: *const u8,
        ld_src: isize,
        rows: usize,
        cols: usize,
        mask: u128,
    ) {
        let (dst, src) = (dst.cast::<f64>(), src.cast::<f64>());
        let m = _mm512_set1_epi64(mask as u64 as i64);
        // Lane indices of `_mm512_permutex2var_epi64(a, idx, b)`: 0..8 pick from `a`,
        // 8..16 from `b`.
        let quad_lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
        let quad_hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
        let half_lo = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11);
        let half_hi = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
        for j in (0..cols).step_by(8) {
            for k in (0..rows).step_by(8) {
                let s = src.wrapping_offset(k as isize * ld_src + j as isize);
                let d = dst.wrapping_offset(k as isize + j as isize * ld_dst);
                if j + 8 < cols {
                    for r in 0..8_isize {
                        prefetch(s.wrapping_offset(r * ld_src + 8).cast());
                    }
                }
                if k + 8 < rows {
                    for c in 0..8_isize {
                        prefetch_write(d.wrapping_offset(c * ld_dst + 8).cast());
                    }
                }
                // SAFETY: rows k..k + 8 <= rows and columns j..j + 8 <= cols: inside the
                // regions the caller vouches for. Unaligned loads and stores; AVX-512F is
                // enabled on this function.
                unsafe {
                    let mut r = [_mm512_setzero_si512(); 8];
                    for (i, v) in r.iter_mut().enumerate() {
                        *v = _mm512_loadu_si512(s.offset(i as isize * ld_src).cast());
                    }
                    // t[2p]: (row 2p, row 2p + 1) at the even columns, t[2p + 1] the odd.
                    let mut t = [_mm512_setzero_si512(); 8];
                    for p in 0..4 {
                        t[2 * p] = _mm512_unpacklo_epi64(r[2 * p], r[2 * p + 1]);
                        t[2 * p + 1] = _mm512_unpackhi_epi64(r[2 * p], r[2 * p + 1]);
                    }
                    // q[4h + c] (c < 4): rows 4h..4h + 4 of columns c (low half) and c + 4
                    // (high half).
                    let mut q = [_mm512_setzero_si512(); 8];
                    for h in 0..2 {
                        let (e0, o0, e1, o1) = (t[4 * h], t[4 * h + 1], t[4 * h + 2], t[4 * h + 3]);
                        q[4 * h] = _mm512_permutex2var_epi64(e0, quad_lo, e1);
                        q[4 * h + 1] = _mm512_permutex2var_epi64(o0, quad_lo, o1);
                        q[4 * h + 2] = _mm512_permutex2var_epi64(e0, quad_hi, e1);
                        q[4 * h + 3] = _mm512_permutex2var_epi64(o0, quad_hi, o1);
                    }
                    for c in 0..4 {
                        let lo = _mm512_permutex2var_epi64(q[c], half_lo, q[c + 4]);
                        let hi = _mm512_permutex2var_epi64(q[c], half_hi, q[c + 4]);
                        _mm512_storeu_si512(
                            d.offset(c as isize * ld_dst).cast(),
                            _mm512_xor_si512(lo, m),
                        );
                        _mm512_storeu_si512(
                            d.offset((c + 4) as isize * ld_dst).cast(),
                            _mm512_xor_si512(hi, m),
                        );
                    }
                }
            }
        }
    }

    /// 16-byte elements, 4 x 4 squares: each square row is one vector of four 128-bit
    /// lanes; two rounds of lane shuffles transpose it; the mask is XORed into each lane.
    /// Loop order and prefetches as in [`transpose_b8`].
    ///
    /// # Safety
    ///
    /// As [`transpose_b8`], with offsets in 16-byte elements and `rows`, `cols` multiples
    /// of 4.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose_b16(
        dst: *mut u8,
        ld_dst: isize,
        src: *const u8,
        ld_src: isize,
        rows: usize,
        cols: usize,
        mask: u128,
    ) {
        // Two 8-byte halves per element: offsets double.
        let (dst, src) = (dst.cast::<u64>(), src.cast::<u64>());
        let (lo, hi) = (mask as u64 as i64, (mask >> 64) as u64 as i64);
        let m = _mm512_setr_epi64(lo, hi, lo, hi, lo, hi, lo, hi);
        for j in (0..cols).step_by(4) {
            for k in (0..rows).step_by(4) {
                let s = src.wrapping_offset(2 * (k as isize * ld_src + j as isize));
                let d = dst.wrapping_offset(2 * (k as isize + j as isize * ld_dst));
                if j + 4 < cols {
                    for r in 0..4_isize {
                        prefetch(s.wrapping_offset(2 * (r * ld_src + 4)).cast());
                    }
                }
                if k + 4 < rows {
                    for c in 0..4_isize {
                        prefetch_write(d.wrapping_offset(2 * (c * ld_dst + 4)).cast());
                    }
                }
                // SAFETY: rows k..k + 4 <= rows and columns j..j + 4 <= cols: inside the
                // regions the caller vouches for. Unaligned loads and stores; AVX-512F is
                // enabled on this function.
                unsafe {
                    let mut r = [_mm512_setzero_si512(); 4];
                    for (i, v) in r.iter_mut().enumerate() {
                        *v = _mm512_loadu_si512(s.offset(2 * i as isize * ld_src).cast());
                    }
                    // Lanes [a0 a2 b0 b2] and [a1 a3 b1 b3], then the same across pairs.
                    let t0 = _mm512_shuffle_i64x2::<0x88>(r[0], r[1]);
                    let t1 = _mm512_shuffle_i64x2::<0xDD>(r[0], r[1]);
                    let t2 = _mm512_shuffle_i64x2::<0x88>(r[2], r[3]);
                    let t3 = _mm512_shuffle_i64x2::<0xDD>(r[2], r[3]);
                    let c = [
                        _mm512_shuffle_i64x2::<0x88>(t0, t2),
                        _mm512_shuffle_i64x2::<0x88>(t1, t3),
                        _mm512_shuffle_i64x2::<0xDD>(t0, t2),
                        _mm512_shuffle_i64x2::<0xDD>(t1, t3),
                    ];
                    for (i, v) in c.into_iter().enumerate() {
                        _mm512_storeu_si512(
                            d.offset(2 * i as isize * ld_dst).cast(),
                            _mm512_xor_si512(v, m),
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_complex::Complex;
    use tessera_core::SharedBuffer;

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

    /// Column-major strides of `dims`.
    fn column_major(dims: &[usize]) -> Vec<isize> {
        let mut s = Vec::with_capacity(dims.len());
        let mut acc = 1_isize;
        for &d in dims {
            s.push(acc);
            acc *= d as isize;
        }
        s
    }

    fn unravel(mut k: usize, dims: &[usize]) -> Vec<usize> {
        dims.iter()
            .map(|&d| {
                let i = k % d;
                k /= d;
                i
            })
            .collect()
    }

    /// A block view (`dims`, at a random corner) inside a larger column-major parent, as a
    /// block sits inside its sector matrix: the offset and strides of the sub-box.
    fn sub_box(rng: &mut Rng, dims: &[usize]) -> (usize, Vec<usize>, Vec<isize>) {
        let parent: Vec<usize> = dims
            .iter()
            .map(|&d| d + if rng.below(2) == 0 { 0 } else { rng.below(9) })
            .collect();
        let strides = column_major(&parent);
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
        permute_copy(negate, conj, &xp, &mut y).unwrap();
        let total: usize = new.iter().product();
        for k in 0..total {
            let idx = unravel(k, &new);
            let v = xp.get(&idx).unwrap();
            let v = if conj { v.conj() } else { v };
            let want = if negate { -v } else { v };
            assert_eq!(
                bits(y.get(&idx).unwrap()),
                bits(want),
                "{} dims {dims:?} perm {perm:?} negate {negate} conj {conj} at {idx:?}",
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
    /// permutations, signs and conjugations, blocks inside larger parents: the result equals
    /// the elementwise definition bit for bit, and nothing outside the block is written.
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
    fn the_planner_finds_batches_of_transposes_only() {
        // A 64 x 64 transpose of blocks inside sector matrices: merged to one 2-D problem.
        let p = Plan::new(&[8, 8, 8, 8], &[1, 8, 320, 2560], &[512, 4096, 1, 8]).unwrap();
        assert_eq!(
            (p.rows, p.cols, p.ld_src, p.ld_dst, p.n_outer),
            (64, 64, 512, 320, 0)
        );
        // With an outer axis that stays in place.
        let p = Plan::new(&[4, 3, 5], &[1, 4, 12], &[5, 60, 1]).unwrap();
        assert_eq!(
            (p.rows, p.cols, p.ld_src, p.ld_dst, p.n_outer),
            (4, 5, 5, 12, 1)
        );
        assert_eq!(
            (p.outer_dims[0], p.outer_dst[0], p.outer_src[0]),
            (3, 4, 60)
        );
        // A plain copy (unit stride first on both sides) and a destination whose first axis
        // is not contiguous are not transposes.
        assert!(Plan::new(&[4, 5], &[1, 4], &[1, 4]).is_none());
        assert!(Plan::new(&[4, 5], &[5, 1], &[1, 4]).is_none());
        // No source axis of unit stride: a general gather.
        assert!(Plan::new(&[4, 5], &[1, 4], &[10, 2]).is_none());
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
