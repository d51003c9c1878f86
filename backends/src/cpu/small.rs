//! Contractions with a small operand, applied in one pass over the large one.
//!
//! Owns: [`SmallLegs`], [`SmallPair`] and [`contract_small`], which computes one output block
//!
//! `C[f, j] = beta C[f, j] + sum_p s_p sum_k X_p[f, k] Y_p[k, j]`
//!
//! over the pairs `p` of blocks that write it, where each `Y_p` has few elements (a block of an
//! MPO, a gate, a small matrix). Neither `X` nor `C` is brought to a matrix form: both are
//! read or written once, in place, through their strides, so a contraction that would permute
//! the large operand and its product (two passes over memory each) costs one pass.
//!
//! How it runs: the output blocks of one call share X's free extents, so at each index of
//! X's outer free legs the call reads each distinct column of X it needs once and writes the
//! output columns in runs of four, each summed in registers (for `f64`, fused multiply-adds
//! on AVX2 or AVX-512 vectors) and stored once; an output larger than the last-level cache
//! is stored past it ([`Stores::Streaming`]).
//!
//! Invariant: every offset the kernel forms is a multi-index of its view with each index
//! below that axis's extent (the extents are checked against each other before anything is
//! written), so every read and write stays inside a view's checked extent, and each element
//! of `C` is written once per call.

use super::{Stores, fence_streams, store_streaming};
use crate::Scalar;
use std::collections::HashMap;
use tessera_core::{StridedMut, StridedRef};

/// Where the legs of a contraction with a small operand `Y` sit in the large operand `X`
/// and the output `C`, as axis numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmallLegs {
    /// The free leg of `X` the inner loop runs along: `(axis in X, axis in C)`. Best the one
    /// with stride 1 in both.
    pub inner: (usize, usize),
    /// The other free legs of `X`: `(axis in X, axis in C)`.
    pub outer: Vec<(usize, usize)>,
    /// The contracted legs: `(axis in X, axis in Y)`.
    pub contracted: Vec<(usize, usize)>,
    /// The free legs of `Y`: `(axis in Y, axis in C)`.
    pub free_y: Vec<(usize, usize)>,
}

/// One pair of blocks that writes the output block: `scale * X Y` (the scale carries
/// `alpha` and the pair's fermionic sign).
pub struct SmallPair<'v, 'a, T: Copy> {
    /// The block of the large operand.
    pub x: &'v StridedRef<'a, T>,
    /// The block of the small operand.
    pub y: &'v StridedRef<'a, T>,
    /// Its factor.
    pub scale: T,
}

/// The blocks of [`contract_small`] do not fit its legs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a small-operand contraction expected {what} {expected:?}, but was given {given:?}")]
pub struct SmallShapeMismatch {
    /// Which extents disagree.
    pub what: &'static str,
    /// What the legs (or the output block) require.
    pub expected: Vec<usize>,
    /// What the block has.
    pub given: Vec<usize>,
}

/// The extents of `axes` of a view with `dims`.
fn extents(dims: &[usize], axes: impl Iterator<Item = usize>) -> Vec<usize> {
    axes.map(|a| dims.get(a).copied().unwrap_or(usize::MAX))
        .collect()
}

/// Offsets of every multi-index over `dims` (first fastest), under each of `strides`: entry
/// `i` of the result holds offset `i` for every stride set, set by set.
fn offsets<const N: usize>(dims: &[usize], strides: [&[isize]; N]) -> [Vec<isize>; N] {
    let n: usize = dims.iter().product();
    let mut out: [Vec<isize>; N] = std::array::from_fn(|_| Vec::with_capacity(n));
    let mut idx = vec![0_usize; dims.len()];
    let mut at = [0_isize; N];
    for _ in 0..n {
        for (o, &a) in out.iter_mut().zip(&at) {
            o.push(a);
        }
        // Odometer step: the first axis fastest.
        for (d, i) in idx.iter_mut().enumerate() {
            *i += 1;
            for (a, s) in at.iter_mut().zip(&strides) {
                *a += s[d];
            }
            if *i < dims[d] {
                break;
            }
            for (a, s) in at.iter_mut().zip(&strides) {
                *a -= s[d] * dims[d] as isize;
            }
            *i = 0;
        }
    }
    out
}

/// The strides of `axes` of a view.
fn strides_of(strides: &[isize], axes: impl Iterator<Item = usize>) -> Vec<isize> {
    axes.map(|a| strides[a]).collect()
}

/// One output block of [`contract_small`] and the pairs that write it.
pub type SmallOutput<'o, 'v, 'a, T> = (&'o mut StridedMut<'a, T>, &'v [SmallPair<'v, 'a, T>]);

/// Checks one output block and its pairs against `legs`; returns the extents of X's free legs
/// (inner first) and of Y's free legs.
fn check<T: Copy>(
    legs: &SmallLegs,
    c: &StridedMut<'_, T>,
    pairs: &[SmallPair<'_, '_, T>],
) -> Result<(Vec<usize>, Vec<usize>), SmallShapeMismatch> {
    let cd = c.dims();
    let free_x = std::iter::once(legs.inner).chain(legs.outer.iter().copied());
    let want_free = extents(cd, free_x.clone().map(|(_, ca)| ca));
    let want_j = extents(cd, legs.free_y.iter().map(|&(_, ca)| ca));
    let rank_c = 1 + legs.outer.len() + legs.free_y.len();
    if cd.len() != rank_c || want_free.contains(&usize::MAX) || want_j.contains(&usize::MAX) {
        return Err(SmallShapeMismatch {
            what: "an output block of rank",
            expected: vec![rank_c],
            given: cd.to_vec(),
        });
    }
    for p in pairs {
        let (xd, yd) = (p.x.dims(), p.y.dims());
        let fits = [
            (
                "the large block's free extents",
                want_free.clone(),
                extents(xd, free_x.clone().map(|(xa, _)| xa)),
            ),
            (
                "the small block's free extents",
                want_j.clone(),
                extents(yd, legs.free_y.iter().map(|&(ya, _)| ya)),
            ),
            (
                "the small block's contracted extents",
                extents(xd, legs.contracted.iter().map(|&(xa, _)| xa)),
                extents(yd, legs.contracted.iter().map(|&(_, ya)| ya)),
            ),
            (
                "the ranks (large, small)",
                vec![
                    1 + legs.outer.len() + legs.contracted.len(),
                    legs.contracted.len() + legs.free_y.len(),
                ],
                vec![xd.len(), yd.len()],
            ),
        ];
        for (what, expected, given) in fits {
            if expected != given || given.contains(&usize::MAX) {
                return Err(SmallShapeMismatch {
                    what,
                    expected,
                    given,
                });
            }
        }
    }
    Ok((want_free, want_j))
}

/// The columns of the large operand one call reads, the output columns it writes, and the
/// coefficients between them, resolved from the views once per call (they do not change
/// along the outer legs): the distinct blocks of X, each distinct column of X (a block and
/// a multi-index of the contracted legs) once however many output blocks read it.
struct Tables<T> {
    /// Per distinct X block: its data, its inner stride and the offsets of the outer legs.
    blocks: Vec<(*const T, isize, Vec<isize>)>,
    /// Per distinct column of X: its block and the offset of its contracted multi-index.
    sources: Vec<(usize, isize)>,
    /// Per output column: its block's data and the offsets of the outer legs (shared by
    /// the columns of one block), the offset of Y's free multi-index, and its stride.
    targets: Vec<(usize, isize, isize)>,
    outputs: Vec<(*mut T, Vec<isize>)>,
    /// Runs of at most [`BLOCK_COLUMNS`] consecutive output columns of one stride.
    runs: Vec<ColumnRun>,
    /// The sources with a nonzero coefficient for a run, run by run.
    live: Vec<usize>,
    /// `scale * op(Y)[k, j]` for each entry of `live` and each column `j` of its run.
    coefs: Vec<T>,
}

impl<T: Scalar> Tables<T> {
    fn new(
        legs: &SmallLegs,
        conj_y: bool,
        outputs: &mut [SmallOutput<'_, '_, '_, T>],
        outer_dims: &[usize],
        j_dims: &[Vec<usize>],
    ) -> Self {
        let mut blocks: Vec<(*const T, isize, Vec<isize>)> = Vec::new();
        let mut block_of: HashMap<(*const T, &[isize]), usize> = HashMap::new();
        let mut sources: Vec<(usize, isize)> = Vec::new();
        let mut source_of: HashMap<(usize, isize), usize> = HashMap::new();
        let mut targets = Vec::new();
        let mut outs = Vec::with_capacity(outputs.len());
        // Per output column, its sources and their coefficients.
        let mut by_target: Vec<Vec<(usize, T)>> = Vec::new();
        for ((c, pairs), j_dims) in outputs.iter_mut().zip(j_dims) {
            let cs = c.strides();
            let [c_j] = offsets(j_dims, [&strides_of(cs, legs.free_y.iter().map(|l| l.1))]);
            let [c_outer] = offsets(
                outer_dims,
                [&strides_of(cs, legs.outer.iter().map(|l| l.1))],
            );
            let first = targets.len();
            let sc = cs[legs.inner.1];
            targets.extend(c_j.iter().map(|&oj| (outs.len(), oj, sc)));
            by_target.resize_with(targets.len(), Vec::new);
            outs.push((c.as_mut_ptr(), c_outer));
            for p in pairs.iter() {
                let (xs, ys) = (p.x.strides(), p.y.strides());
                let b = *block_of.entry((p.x.as_ptr(), xs)).or_insert_with(|| {
                    let [x_outer] = offsets(
                        outer_dims,
                        [&strides_of(xs, legs.outer.iter().map(|l| l.0))],
                    );
                    blocks.push((p.x.as_ptr(), xs[legs.inner.0], x_outer));
                    blocks.len() - 1
                });
                let kd = extents(p.x.dims(), legs.contracted.iter().map(|l| l.0));
                let [x_k, y_k] = offsets(
                    &kd,
                    [
                        &strides_of(xs, legs.contracted.iter().map(|l| l.0)),
                        &strides_of(ys, legs.contracted.iter().map(|l| l.1)),
                    ],
                );
                let [y_j] = offsets(j_dims, [&strides_of(ys, legs.free_y.iter().map(|l| l.0))]);
                for (&ok, &yk) in x_k.iter().zip(&y_k) {
                    let s = *source_of.entry((b, ok)).or_insert_with(|| {
                        sources.push((b, ok));
                        sources.len() - 1
                    });
                    for (j, &oj) in y_j.iter().enumerate() {
                        // SAFETY: `yk + oj` is the offset of an in-range multi-index of the
                        // small block (its extents were checked), inside its checked extent.
                        let v = unsafe { *p.y.as_ptr().offset(yk + oj) };
                        let v = p.scale * if conj_y { v.conj() } else { v };
                        by_target[first + j].push((s, v));
                    }
                }
            }
        }
        // The runs of output columns, and per run the sources that meet it, in source order.
        let mut runs = Vec::new();
        let (mut live, mut coefs) = (Vec::new(), Vec::new());
        let mut meets: Vec<(usize, usize, T)> = Vec::new();
        let mut start = 0;
        while start < targets.len() {
            let sc = targets[start].2;
            let mut end = start + 1;
            while end < targets.len() && end - start < BLOCK_COLUMNS && targets[end].2 == sc {
                end += 1;
            }
            meets.clear();
            for (j, row) in by_target[start..end].iter().enumerate() {
                meets.extend(row.iter().map(|&(s, v)| (s, j, v)));
            }
            meets.sort_unstable_by_key(|&(s, j, _)| (s, j));
            let (from, first_coef) = (live.len(), coefs.len());
            for group in meets.chunk_by(|a, b| a.0 == b.0) {
                let mut c = [T::ZERO; BLOCK_COLUMNS];
                for &(_, j, v) in group {
                    c[j] += v;
                }
                if c.iter().any(|&v| v != T::ZERO) {
                    live.push(group[0].0);
                    coefs.extend_from_slice(&c[..end - start]);
                }
            }
            runs.push(ColumnRun {
                targets: start..end,
                live: from..live.len(),
                coefs: first_coef..coefs.len(),
            });
            start = end;
        }
        Self {
            blocks,
            sources,
            targets,
            outputs: outs,
            runs,
            live,
            coefs,
        }
    }
}

/// Output columns one register block of [`columns`] accumulates at once.
const BLOCK_COLUMNS: usize = 4;

/// A run of output columns of [`Tables`]: its columns, the sources with a nonzero
/// coefficient for one of them (a range of `live`), and their coefficients (a range of
/// `coefs`, one per source and column, the columns contiguous).
struct ColumnRun {
    targets: std::ops::Range<usize>,
    live: std::ops::Range<usize>,
    coefs: std::ops::Range<usize>,
}

/// One outer index of a call: for each run of output columns of `tables`,
/// `out[t][i * sc] <- beta out[t][i * sc] + sum_e coefs[e, t] cols[live[e]][i]` for `i < m`
/// (`beta = None`: overwrite, with non-temporal stores when `stream` and the stride is 1,
/// which the caller fences before the outputs are published). Each column is read once per
/// run, each output element written once, straight from the registers that summed it.
struct Step<'s, T> {
    tables: &'s Tables<T>,
    /// Where each source column starts at this outer index (`m` elements, stride 1).
    cols: &'s [*const T],
    /// Where each output column starts at this outer index.
    out: &'s [*mut T],
    m: usize,
    beta: Option<T>,
    stream: bool,
}

/// Runs one [`Step`].
///
/// # Safety
///
/// Each `cols[s]` points at `m` readable elements (stride 1); each `out[t]` at `m` elements
/// of its target's stride apart that are writable, not aliased by anything read or by
/// another `out[t]`.
///
/// Compiled three times: for AVX-512, for AVX2 with FMA, and for the baseline target (where
/// the accumulators would be 128-bit vectors), and chosen at run time by what the CPU has;
/// each build sums `L` rows at a time, as many as its registers hold for [`BLOCK_COLUMNS`]
/// outputs.
unsafe fn columns<T: Scalar>(step: &Step<'_, T>) {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        #[cfg(feature = "avx512")]
        if avx2 && std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the caller's; the CPU has AVX-512F, AVX2 and FMA.
            return unsafe { columns_avx512(step) };
        }
        if avx2 {
            // SAFETY: the caller's; the CPU has AVX2 and FMA.
            return unsafe { columns_avx2(step) };
        }
    }
    // SAFETY: the caller's.
    unsafe { step.run::<4, BASELINE>() }
}

/// [`columns`] for AVX-512: 16 rows (two vectors of f64) per register block, a column's
/// last rows in blocks of 8 (one AVX-512 vector) and 4 (one AVX2 vector).
///
/// # Safety
///
/// As [`columns`], on a CPU with AVX-512F, AVX2 and FMA.
#[cfg(all(target_arch = "x86_64", feature = "avx512"))]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn columns_avx512<T: Scalar>(step: &Step<'_, T>) {
    // SAFETY: the caller's.
    unsafe { step.run::<16, AVX512>() }
}

/// [`columns`] for AVX2 with FMA: 8 rows (two vectors of f64) per register block, a column's
/// last rows in a block of 4 (one vector).
///
/// # Safety
///
/// As [`columns`], on a CPU with AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn columns_avx2<T: Scalar>(step: &Step<'_, T>) {
    // SAFETY: the caller's.
    unsafe { step.run::<8, AVX2>() }
}

impl<T: Scalar> Step<'_, T> {
    /// Every run of the step, inlined into each build of [`columns`].
    ///
    /// # Safety
    ///
    /// As [`columns`].
    #[inline(always)]
    unsafe fn run<const L: usize, const ISA: u8>(&self) {
        for run in &self.tables.runs {
            let out = &self.out[run.targets.clone()];
            let sc = self.tables.targets[run.targets.start].2;
            let live = &self.tables.live[run.live.clone()];
            let coefs = &self.tables.coefs[run.coefs.clone()];
            // SAFETY: the caller's, for the run's columns.
            unsafe {
                match out.len() {
                    1 => self.sum::<L, 1, ISA>(out, sc, live, coefs),
                    2 => self.sum::<L, 2, ISA>(out, sc, live, coefs),
                    3 => self.sum::<L, 3, ISA>(out, sc, live, coefs),
                    _ => self.sum::<L, BLOCK_COLUMNS, ISA>(out, sc, live, coefs),
                }
            }
        }
    }

    /// One run of `J` output columns of stride `sc`, from the sources `live` (whose
    /// coefficients are `coefs`, `J` per entry): register blocks of `L` rows, then the last
    /// rows (fewer than `L`) in blocks of 8 and 4 where the build has them (so the wide builds
    /// do not sum up to 15 rows of a short column one element at a time: the columns of a
    /// small DMRG bond are often shorter than 16), then one at a time. The register blocks
    /// index their accumulators by constants only, so these live in registers.
    ///
    /// # Safety
    ///
    /// As [`columns`].
    #[inline(always)]
    unsafe fn sum<const L: usize, const J: usize, const ISA: u8>(
        &self,
        out: &[*mut T],
        sc: isize,
        live: &[usize],
        coefs: &[T],
    ) {
        let m = self.m;
        let stream = self.stream && sc == 1 && self.beta.is_none();
        let full = m - m % L;
        for i in (0..full).step_by(L) {
            // SAFETY: rows `i..i + L`, all below `m`.
            unsafe { self.rows::<L, J, ISA>(out, sc, stream, live, coefs, i) };
        }
        let mut i = full;
        if ISA != BASELINE && L > 8 && m - i >= 8 {
            // SAFETY: rows `i..i + 8`, all below `m`.
            unsafe { self.rows::<8, J, ISA>(out, sc, stream, live, coefs, i) };
            i += 8;
        }
        if ISA != BASELINE && L > 4 && m - i >= 4 {
            // SAFETY: rows `i..i + 4`, all below `m`.
            unsafe { self.rows::<4, J, ISA>(out, sc, stream, live, coefs, i) };
            i += 4;
        }
        for i in i..m {
            for (j, &o) in out.iter().enumerate() {
                let mut v = T::ZERO;
                for (e, &s) in live.iter().enumerate() {
                    // SAFETY: row `i < m` of source `s`.
                    v += coefficients::<T, J>(coefs, e)[j] * unsafe { *self.cols[s].add(i) };
                }
                // SAFETY: element `i < m` of an output column, exclusive.
                unsafe { put(o.offset(i as isize * sc), v, self.beta, stream) };
            }
        }
    }

    /// One register block of [`sum`](Self::sum): rows `i..i + K` of its `J` output columns,
    /// summed and stored (straight to memory where the column is contiguous and cached).
    ///
    /// # Safety
    ///
    /// As [`columns`], with `i + K <= m`.
    #[inline(always)]
    unsafe fn rows<const K: usize, const J: usize, const ISA: u8>(
        &self,
        out: &[*mut T],
        sc: isize,
        stream: bool,
        live: &[usize],
        coefs: &[T],
        i: usize,
    ) {
        // SAFETY: rows `i..i + K` of each source, inside its `m` elements.
        let acc = unsafe { block::<T, K, J, ISA>(self.cols, live, coefs, i) };
        for (&o, acc) in out.iter().zip(&acc) {
            // SAFETY: elements `i..i + K` (all below `m`) of an output column, held
            // exclusively.
            unsafe {
                if sc == 1 && !stream {
                    let d = &mut *o.add(i).cast::<[T; K]>();
                    match self.beta {
                        None => *d = *acc,
                        Some(b) => {
                            for (d, &v) in d.iter_mut().zip(acc) {
                                *d = b * *d + v;
                            }
                        }
                    }
                } else {
                    for (l, &v) in acc.iter().enumerate() {
                        put(o.offset((i + l) as isize * sc), v, self.beta, stream);
                    }
                }
            }
        }
    }
}

/// The instruction sets a build of [`columns`] is compiled for.
const BASELINE: u8 = 0;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const AVX2: u8 = 1;
#[cfg_attr(not(all(target_arch = "x86_64", feature = "avx512")), allow(dead_code))]
const AVX512: u8 = 2;

/// One register block of a run: `acc[j][l] = sum_e coefs[e * J + j] cols[live[e]][i + l]`.
/// For `f64` in the AVX2 and AVX-512 builds, one or two vectors per output column (16 or 8
/// rows on AVX-512, 8 or 4 on AVX2, and 4 in AVX2 vectors on AVX-512) with fused
/// multiply-adds (written with intrinsics: the compiler does not vectorize the generic loop
/// reliably); elsewhere the generic loop.
///
/// # Safety
///
/// Rows `i..i + L` of each source `cols[live[e]]` are readable; `coefs` has `J` per entry
/// of `live`; the CPU has the instruction set `ISA` (with AVX2 and FMA for `AVX512`).
#[inline(always)]
unsafe fn block<T: Scalar + 'static, const L: usize, const J: usize, const ISA: u8>(
    cols: &[*const T],
    live: &[usize],
    coefs: &[T],
    i: usize,
) -> [[T; L]; J] {
    #[cfg(target_arch = "x86_64")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f64>() {
        let (cols, coefs) = (
            cols.as_ptr().cast::<*const f64>(),
            coefs.as_ptr().cast::<f64>(),
        );
        // SAFETY: `T` is `f64`, so the pointers and the result reinterpret exactly; the
        // rest is the caller's.
        unsafe {
            #[cfg(feature = "avx512")]
            if ISA == AVX512 && L == 16 {
                let acc = vector::block_avx512::<J, 2>(cols, live, coefs, i);
                return std::mem::transmute_copy(&acc);
            }
            #[cfg(feature = "avx512")]
            if ISA == AVX512 && L == 8 {
                let acc = vector::block_avx512::<J, 1>(cols, live, coefs, i);
                return std::mem::transmute_copy(&acc);
            }
            if ISA == AVX2 && L == 8 {
                let acc = vector::block_avx2::<J, 2>(cols, live, coefs, i);
                return std::mem::transmute_copy(&acc);
            }
            if (ISA == AVX2 || ISA == AVX512) && L == 4 {
                let acc = vector::block_avx2::<J, 1>(cols, live, coefs, i);
                return std::mem::transmute_copy(&acc);
            }
        }
    }
    let mut acc = [[T::ZERO; L]; J];
    for (e, &s) in live.iter().enumerate() {
        // SAFETY: the caller's; `[T; L]` has the alignment of `T`.
        let x = unsafe { &*cols[s].add(i).cast::<[T; L]>() };
        for (acc, &c) in acc.iter_mut().zip(coefficients::<T, J>(coefs, e)) {
            for (a, &x) in acc.iter_mut().zip(x) {
                *a += c * x;
            }
        }
    }
    acc
}

/// The `J` coefficients of entry `e` of a run's sources (`coefs` holds `J` per entry).
#[inline(always)]
fn coefficients<T, const J: usize>(coefs: &[T], e: usize) -> &[T; J] {
    coefs[e * J..(e + 1) * J]
        .try_into()
        .expect("J coefficients")
}

/// The `f64` register blocks of [`block`] for AVX2 and AVX-512.
#[cfg(target_arch = "x86_64")]
mod vector {
    use std::arch::x86_64::*;

    /// [`block`](super::block) with `8 V` rows in `V` AVX-512 vectors.
    ///
    /// # Safety
    ///
    /// As [`block`](super::block), for `L = 8 V`, on a CPU with AVX-512F.
    #[cfg(feature = "avx512")]
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn block_avx512<const J: usize, const V: usize>(
        cols: *const *const f64,
        live: &[usize],
        coefs: *const f64,
        i: usize,
    ) -> [[__m512d; V]; J] {
        let mut acc = [[_mm512_setzero_pd(); V]; J];
        for (e, &s) in live.iter().enumerate() {
            // SAFETY: the caller's: rows `i..i + 8 V` of the source, `J` coefficients per
            // entry.
            unsafe {
                let x = (*cols.add(s)).add(i);
                let mut xs = [_mm512_setzero_pd(); V];
                for (v, xv) in xs.iter_mut().enumerate() {
                    *xv = _mm512_loadu_pd(x.add(8 * v));
                }
                for (j, acc) in acc.iter_mut().enumerate() {
                    let c = _mm512_set1_pd(*coefs.add(e * J + j));
                    for (a, &xv) in acc.iter_mut().zip(&xs) {
                        *a = _mm512_fmadd_pd(c, xv, *a);
                    }
                }
            }
        }
        acc
    }

    /// [`block`](super::block) with `4 V` rows in `V` AVX2 vectors.
    ///
    /// # Safety
    ///
    /// As [`block`](super::block), for `L = 4 V`, on a CPU with AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) unsafe fn block_avx2<const J: usize, const V: usize>(
        cols: *const *const f64,
        live: &[usize],
        coefs: *const f64,
        i: usize,
    ) -> [[__m256d; V]; J] {
        let mut acc = [[_mm256_setzero_pd(); V]; J];
        for (e, &s) in live.iter().enumerate() {
            // SAFETY: the caller's: rows `i..i + 4 V` of the source, `J` coefficients per
            // entry.
            unsafe {
                let x = (*cols.add(s)).add(i);
                let mut xs = [_mm256_setzero_pd(); V];
                for (v, xv) in xs.iter_mut().enumerate() {
                    *xv = _mm256_loadu_pd(x.add(4 * v));
                }
                for (j, acc) in acc.iter_mut().enumerate() {
                    let c = _mm256_set1_pd(*coefs.add(e * J + j));
                    for (a, &xv) in acc.iter_mut().zip(&xs) {
                        *a = _mm256_fmadd_pd(c, xv, *a);
                    }
                }
            }
        }
        acc
    }
}

/// `*d <- v` (`beta = None`; a non-temporal store when `stream`) or `*d <- beta * *d + v`.
///
/// # Safety
///
/// `d` is valid for reads and writes and not aliased.
#[inline(always)]
unsafe fn put<T: Scalar>(d: *mut T, v: T, beta: Option<T>, stream: bool) {
    // SAFETY: the caller's.
    unsafe {
        match beta {
            None if stream => store_streaming(d, v),
            None => *d = v,
            Some(b) => *d = b * *d + v,
        }
    }
}

/// `C <- beta C + sum_p scale_p op(X_p) op(Y_p)` over the legs `legs` for each output block
/// and its pairs (`beta = None`: overwrite, the old `C` is not read), with `op` the
/// conjugate where `conj` says (`[X, Y]`); `stores` says how `C` is written when it is
/// overwritten (streamed past the cache for a result larger than it, see
/// [`STREAM_BYTES`](super::STREAM_BYTES)).
///
/// The output blocks must share the extents of X's free legs (blocks of one row of X's free
/// sectors): the loop over the outer legs runs once for all of them, and at each outer index
/// reads each column of X it needs once from memory, however many output blocks it serves.
///
/// # Errors
///
/// [`SmallShapeMismatch`] when a block's rank or extents do not fit `legs`, or the output
/// blocks do not share X's free extents; nothing is written then.
pub fn contract_small<T: Scalar>(
    legs: &SmallLegs,
    conj: [bool; 2],
    outputs: &mut [SmallOutput<'_, '_, '_, T>],
    beta: Option<T>,
    stores: Stores,
) -> Result<(), SmallShapeMismatch> {
    let mut shared: Option<Vec<usize>> = None;
    let mut j_dims = Vec::with_capacity(outputs.len());
    for (c, pairs) in outputs.iter() {
        let (free, j) = check(legs, c, pairs)?;
        match &shared {
            Some(f) if *f != free => {
                return Err(SmallShapeMismatch {
                    what: "output blocks sharing the large operand's free extents",
                    expected: f.clone(),
                    given: free,
                });
            }
            _ => shared = Some(free),
        }
        j_dims.push(j);
    }
    let Some(free) = shared else { return Ok(()) };
    let (m, outer_dims) = (free[0], &free[1..]);
    let tables = Tables::new(legs, conj[1], outputs, outer_dims, &j_dims);
    let n_outer: usize = outer_dims.iter().product();
    let conj_x = conj[0] && T::IS_COMPLEX;
    // Stride 1 along the inner leg in every block of X, nothing to conjugate: the kernel
    // reads X in place. Otherwise (a rare layout) each column is gathered first.
    let in_place = !conj_x && tables.blocks.iter().all(|b| b.1 == 1);
    let column = |(b, ok): (usize, isize), n: usize| -> *const T {
        let (ptr, _, outer) = &tables.blocks[b];
        ptr.wrapping_offset(outer[n] + ok)
    };
    let mut cols: Vec<*const T> = Vec::with_capacity(tables.sources.len());
    let mut out: Vec<*mut T> = Vec::with_capacity(tables.targets.len());
    let mut gathered: Vec<T> = Vec::new();
    for n in 0..n_outer {
        cols.clear();
        if in_place {
            // Each source's offset is an in-range multi-index of its block (inner index 0),
            // `m` elements of stride 1 inside its checked extent.
            cols.extend(tables.sources.iter().map(|&src| column(src, n)));
        } else {
            gathered.clear();
            for &src in &tables.sources {
                let (col, sx) = (column(src, n), tables.blocks[src.0].1);
                for i in 0..m {
                    // SAFETY: an in-range multi-index of the block (inner index `i < m`
                    // along the inner axis of stride `sx`), inside its checked extent.
                    let x = unsafe { *col.offset(i as isize * sx) };
                    gathered.push(if conj_x { x.conj() } else { x });
                }
            }
            cols.extend((0..tables.sources.len()).map(|s| gathered[s * m..].as_ptr()));
        }
        out.clear();
        out.extend(tables.targets.iter().map(|&(o, oj, _)| {
            let (ptr, outer) = &tables.outputs[o];
            // An in-range multi-index of the output block (inner index 0).
            ptr.wrapping_offset(outer[n] + oj)
        }));
        let step = Step {
            tables: &tables,
            cols: &cols,
            out: &out,
            m,
            beta,
            stream: stores == Stores::Streaming,
        };
        // SAFETY: every column pointer starts `m` in-range elements of stride 1 (a large
        // block's, or `gathered`'s, alive here); every output pointer starts `m` in-range
        // elements of the output block along its inner axis, distinct per output column
        // (distinct multi-indices, or distinct blocks), held exclusively by this call.
        unsafe { columns(&step) };
    }
    if stores == Stores::Streaming {
        fence_streams();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_complex::Complex;
    use tessera_core::SharedBuffer;

    /// `C[y, u, r, c] = beta C + s sum_{a,t} X[y, a, r, t] Y[t, c, a, u]` (the legs in mixed
    /// orders, an output with a gap between columns) against its definition, element by
    /// element, real and complex, conjugated and not.
    fn against_definition<T: Scalar>(make: impl Fn(f64, f64) -> T) {
        // 37 rows: two register blocks of 16 (8 on AVX2) and a tail (under Miri, which runs
        // the baseline build, 11: two blocks of 4 and a tail); 6 output columns per row of
        // X: a run of four and a run of two; every fourth coefficient zero.
        let (ny, na, nr, nt, nc, nu) = (if cfg!(miri) { 11 } else { 37 }, 2, 2, 2, 3, 2);
        let ld = ny + 3;
        let xb = SharedBuffer::from_fn(ny * na * nr * nt, |i| make(i as f64 * 0.5 - 3.0, 1.0));
        let yb = SharedBuffer::from_fn(nt * nc * na * nu, |i| {
            if i % 4 == 1 {
                T::ZERO
            } else {
                make(1.0 - i as f64, 0.25)
            }
        });
        // Output `(y, u, r, c)` column-major with ld `ny + 3` for the `(u, r, c)` columns:
        // the last three rows of each column are a gap.
        let cb = SharedBuffer::from_fn(ld * nu * nr * nc, |i| make(i as f64, -1.0));
        let x_strides = [1, ny as isize, (ny * na) as isize, (ny * na * nr) as isize];
        let y_strides = [1, nt as isize, (nt * nc) as isize, (nt * nc * na) as isize];
        let c_strides = [1, ld as isize, (ld * nu) as isize, (ld * nu * nr) as isize];
        let legs = SmallLegs {
            inner: (0, 0),
            outer: vec![(2, 2)],
            contracted: vec![(1, 2), (3, 0)],
            free_y: vec![(1, 3), (3, 1)],
        };
        let cases = [[false, false], [true, false], [false, true]]
            .into_iter()
            .flat_map(|conj| [None, Some(make(-0.5, 0.5))].map(|beta| (conj, beta)))
            .zip(
                [
                    Stores::Cached,
                    Stores::Cached,
                    Stores::Streaming,
                    Stores::Streaming,
                ]
                .into_iter()
                .cycle(),
            )
            .map(|((conj, beta), stores)| (conj, beta, stores));
        for (conj, beta, stores) in cases {
            {
                // SAFETY: full-extent views of fresh buffers; this test is their sole user.
                let (x, y) = unsafe {
                    (
                        xb.view(0, &[ny, na, nr, nt], &x_strides),
                        yb.view(0, &[nt, nc, na, nu], &y_strides),
                    )
                };
                // SAFETY: as above; the views above only read other buffers.
                let mut c = unsafe { cb.view_mut(0, &[ny, nu, nr, nc], &c_strides) };
                let before = c.as_ref().to_vec();
                let scale = make(2.0, -1.0);
                let op = |v: T, on: bool| if on { v.conj() } else { v };
                let pairs = [SmallPair {
                    x: &x,
                    y: &y,
                    scale,
                }];
                contract_small(&legs, conj, &mut [(&mut c, &pairs[..])], beta, stores).unwrap();
                let mut k = 0;
                for cc in 0..nc {
                    for r in 0..nr {
                        for u in 0..nu {
                            for yy in 0..ny {
                                let mut want = T::ZERO;
                                for a in 0..na {
                                    for t in 0..nt {
                                        want += op(x.get(&[yy, a, r, t]).unwrap(), conj[0])
                                            * op(y.get(&[t, cc, a, u]).unwrap(), conj[1]);
                                    }
                                }
                                want *= scale;
                                if let Some(b) = beta {
                                    want += b * before[k];
                                }
                                let got = c.get(&[yy, u, r, cc]).unwrap();
                                assert!((got - want).abs2().to_c64().re < 1e-20, "{conj:?}");
                                k += 1;
                            }
                        }
                    }
                }
                // The gap between columns is untouched.
                drop(c);
                // SAFETY: as above; the mutable view was dropped.
                let all = unsafe { cb.view(0, &[ld * nu * nr * nc], &[1]) };
                for gap in [ny, ld + ny + 2, ld * nu * nr * nc - 1] {
                    assert_eq!(all.get(&[gap]), Some(make(gap as f64, -1.0)));
                }
            }
        }
    }

    /// Every build of the column kernel (each register block length; the tails, runs of outputs, zero coefficients, strided and streamed outputs, with and
    /// without beta) against the plain sum, on the CPU at hand: `C[i, j] = sum_k X[i, k]
    /// Y[k, j]` with no outer leg.
    #[test]
    fn every_build_of_the_column_kernel_sums_the_same() {
        let mut builds: Vec<(&str, Build)> = vec![("baseline", |s| {
            // SAFETY: the caller's (the contract of `columns`).
            unsafe { s.run::<4, BASELINE>() }
        })];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            builds.push(("avx2", |s| {
                // SAFETY: the caller's; the CPU has AVX2 and FMA.
                unsafe { columns_avx2(s) }
            }));
        }
        #[cfg(all(target_arch = "x86_64", feature = "avx512"))]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            builds.push(("avx512", |s| {
                // SAFETY: the caller's; the CPU has AVX-512F, AVX2 and FMA.
                unsafe { columns_avx512(s) }
            }));
        }
        // Column lengths that take every mix of register blocks (16, 8, 4) and single rows
        // (under Miri, which runs the baseline build alone, two of them).
        let lengths: &[usize] = if cfg!(miri) {
            &[7, 35]
        } else {
            &[1, 4, 7, 12, 13, 15, 31, 35]
        };
        for &m in lengths {
            check_column_kernel(&builds, m);
        }
    }

    /// A build of the column kernel, as the tests call it.
    type Build = unsafe fn(&Step<'_, f64>);

    /// [`every_build_of_the_column_kernel_sums_the_same`] for columns of `m` rows.
    fn check_column_kernel(builds: &[(&str, Build)], m: usize) {
        let (q, nj) = (5, 7);
        let xb = SharedBuffer::from_fn(m * q, |i| ((i * 7) % 11) as f64 - 5.0);
        let yb = SharedBuffer::from_fn(q * nj, |k| {
            if k % 3 == 0 {
                0.0
            } else {
                k as f64 * 0.25 - 2.0
            }
        });
        let legs = SmallLegs {
            inner: (0, 0),
            outer: vec![],
            contracted: vec![(1, 0)],
            free_y: vec![(1, 1)],
        };
        for &(name, build) in builds {
            for (sc, beta, stream) in [
                (1, None, false),
                (1, None, true),
                (1, Some(0.5), true),
                (3, None, true),
                (3, Some(-2.0), false),
            ] {
                let len = m * sc * nj;
                let cb = SharedBuffer::from_fn(len, |i| (i / (m * sc)) as f64);
                // SAFETY: full-extent views of fresh buffers; this test is their sole user.
                let (x, y, mut c) = unsafe {
                    (
                        xb.view(0, &[m, q], &[1, m as isize]),
                        yb.view(0, &[q, nj], &[1, q as isize]),
                        cb.view_mut(0, &[m, nj], &[sc as isize, (m * sc) as isize]),
                    )
                };
                let pairs = [SmallPair {
                    x: &x,
                    y: &y,
                    scale: 1.0,
                }];
                let mut outputs = [(&mut c, &pairs[..])];
                let tables = Tables::new(&legs, false, &mut outputs, &[], &[vec![nj]]);
                let cols: Vec<*const f64> = tables
                    .sources
                    .iter()
                    .map(|&(b, ok)| tables.blocks[b].0.wrapping_offset(ok))
                    .collect();
                let out: Vec<*mut f64> = tables
                    .targets
                    .iter()
                    .map(|&(o, oj, _)| tables.outputs[o].0.wrapping_offset(oj))
                    .collect();
                let step = Step {
                    tables: &tables,
                    cols: &cols,
                    out: &out,
                    m,
                    beta,
                    stream,
                };
                // SAFETY: the columns and outputs are the views' (checked extents), the
                // outputs distinct columns of `c`, which nothing else reads.
                unsafe { build(&step) };
                let all = c.as_ref().to_vec();
                // SAFETY: as above; the mutable view is only read now.
                let whole = unsafe { cb.view(0, &[len], &[1]) };
                for j in 0..nj {
                    for i in 0..m {
                        let sum: f64 = (0..q)
                            .map(|k| y.get(&[k, j]).unwrap() * x.get(&[i, k]).unwrap())
                            .sum();
                        let want = beta.map_or(sum, |b| b * j as f64 + sum);
                        let got = all[i + j * m];
                        assert!(
                            (got - want).abs() < 1e-12,
                            "{name}, {m} rows: {sc} {beta:?} {stream}"
                        );
                    }
                    // Elements between the strided ones are untouched.
                    for k in (0..m * sc).filter(|k| k % sc != 0) {
                        assert_eq!(whole.get(&[j * m * sc + k]), Some(j as f64));
                    }
                }
            }
        }
    }

    #[test]
    fn small_operand_products_match_their_definition() {
        against_definition(|re, _| re);
        against_definition(Complex::new);
    }

    #[test]
    fn misfit_blocks_write_nothing() {
        let xb = SharedBuffer::from_fn(6, |i| i as f64);
        let yb = SharedBuffer::from_fn(4, |i| i as f64);
        let cb = SharedBuffer::from_fn(6, |_| 7.0);
        // SAFETY: full-extent views of fresh buffers; this test is their sole user.
        let (x, y, mut c) = unsafe {
            (
                xb.view(0, &[3, 2], &[1, 3]),
                yb.view(0, &[4, 1], &[1, 4]),
                cb.view_mut(0, &[3, 2], &[1, 3]),
            )
        };
        let legs = SmallLegs {
            inner: (0, 0),
            outer: vec![],
            contracted: vec![(1, 0)],
            free_y: vec![(1, 1)],
        };
        let pairs = [SmallPair {
            x: &x,
            y: &y,
            scale: 1.0,
        }];
        let err = contract_small(
            &legs,
            [false; 2],
            &mut [(&mut c, &pairs[..])],
            None,
            Stores::Cached,
        )
        .unwrap_err();
        assert_eq!(
            (err.what, err.expected, err.given),
            ("the small block's free extents", vec![2], vec![1])
        );
        assert!(c.as_ref().to_vec().iter().all(|&v| v == 7.0));
    }
}
