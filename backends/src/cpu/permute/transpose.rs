//! The vector transposes of the CPU backend: register transposes of 8 x 8 squares of plain-bits
//! elements (AVX2 for 4-, 8- and 16-byte elements, AVX-512F for 8-byte ones with the `avx512`
//! feature), chosen at run time, and the portable square transpose that stands in for them.
//!
//! Owns: the tile sizes of a transposing copy, [`Stores`] (how a kernel stores the
//! destination), the kernel type and its selection ([`transpose_kernel`]). Invariants: a
//! kernel computes bit for bit what the portable path computes (`dst[r + c * ld_dst] =
//! src[c + r * ld_src] ^ mask`); a kernel is chosen only for the plain-bits types of its
//! element size and only where the CPU has its instructions, and never under Miri (which
//! interprets the portable path); streaming stores are fenced before a kernel returns.

/// The tiles of a transposing copy: `TILE_FAST` elements along the source's contiguous axis
/// (one 64-byte line of `f64`s) by `TILE_DST` along the destination's. Each pass down the
/// destination's axis touches `TILE_DST` source lines at once, independent loads the core
/// overlaps; the next `TILE_FAST - 1` passes find those lines in L1.
pub(super) const TILE_FAST: usize = 8;
/// See [`TILE_FAST`].
pub(super) const TILE_DST: usize = 64;
/// The square a full tile is moved through: 8 x 8 elements, which the compiler keeps in
/// vector registers.
pub(super) const MICRO: usize = 8;
/// The sub-rectangles a vector transpose is handed: at most this many rows and columns, so
/// that the source rows and destination columns one call touches stay within reach of the
/// TLB and the prefetchers, however large the block.
pub(super) const KERNEL_TILE: usize = 64;
const _: () = assert!(KERNEL_TILE.is_multiple_of(MICRO));

/// Hints the cache to fetch the line holding `p`. A hint only: it never faults, whatever
/// `p` is, and does nothing on targets without the instruction.
#[inline(always)]
pub(super) fn prefetch<U>(p: *const U) {
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
pub(super) unsafe fn micro_transpose<T: Copy, U: Copy>(
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
pub(super) type TransposeKernel =
    unsafe fn(*mut u8, isize, *const u8, isize, usize, usize, u128, bool);

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

impl Stores {
    /// The stores for a result of `bytes` bytes: streaming from
    /// [`STREAM_BYTES`](crate::cpu::STREAM_BYTES) on, cached below.
    pub fn for_result(bytes: usize) -> Self {
        if bytes >= crate::cpu::STREAM_BYTES {
            Stores::Streaming
        } else {
            Stores::Cached
        }
    }
}

/// The register transpose for `T`, when `T` is one of the plain-bits element types of a
/// size with a vector kernel and the CPU has the instructions (detected once by std and
/// cached). `None` elsewhere, and always under Miri, which runs the portable path.
pub(super) fn transpose_kernel<T: 'static>() -> Option<TransposeKernel> {
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
pub(super) fn flipping_kernel<T: 'static>(
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

#[cfg(test)]
mod tests {
    use super::*;
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
}
