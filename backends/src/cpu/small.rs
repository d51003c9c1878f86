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
//! Invariant: every offset the kernel forms is a multi-index of its view with each index
//! below that axis's extent (the extents are checked against each other before anything is
//! written), so every read and write stays inside a view's checked extent, and each element
//! of `C` is written once per call.

use crate::Scalar;
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

/// What one output block's loop needs, resolved from the views once per call.
struct Prepared<T> {
    /// Offsets in C of each multi-index of Y's free legs, and of the outer legs.
    c_j: Vec<isize>,
    c_outer: Vec<isize>,
    /// Per pair: the K offsets in X, X's inner stride and X's outer offsets.
    pairs: Vec<(Vec<isize>, isize, Vec<isize>)>,
    /// The coefficients `scale * op(Y)[k, j]`, a row per K index of each pair in turn (J
    /// contiguous): one row per column the loop reads.
    coefs: Vec<T>,
}

fn prepare<T: Scalar>(
    legs: &SmallLegs,
    conj_y: bool,
    c: &StridedMut<'_, T>,
    pairs: &[SmallPair<'_, '_, T>],
    outer_dims: &[usize],
    j_dims: &[usize],
) -> Prepared<T> {
    let cs = c.strides();
    let [c_j] = offsets(j_dims, [&strides_of(cs, legs.free_y.iter().map(|l| l.1))]);
    let [c_outer] = offsets(
        outer_dims,
        [&strides_of(cs, legs.outer.iter().map(|l| l.1))],
    );
    let mut coefs = Vec::new();
    let pairs = pairs
        .iter()
        .map(|p| {
            let (xs, ys) = (p.x.strides(), p.y.strides());
            let kd = extents(p.x.dims(), legs.contracted.iter().map(|l| l.0));
            let [x_k, y_k] = offsets(
                &kd,
                [
                    &strides_of(xs, legs.contracted.iter().map(|l| l.0)),
                    &strides_of(ys, legs.contracted.iter().map(|l| l.1)),
                ],
            );
            let [y_j] = offsets(j_dims, [&strides_of(ys, legs.free_y.iter().map(|l| l.0))]);
            for &ok in &y_k {
                for &oj in &y_j {
                    // SAFETY: `ok + oj` is the offset of an in-range multi-index of the small
                    // block (its extents were checked), inside its checked extent.
                    let v = unsafe { *p.y.as_ptr().offset(ok + oj) };
                    coefs.push(p.scale * if conj_y { v.conj() } else { v });
                }
            }
            let [x_outer] = offsets(
                outer_dims,
                [&strides_of(xs, legs.outer.iter().map(|l| l.0))],
            );
            (x_k, xs[legs.inner.0], x_outer)
        })
        .collect();
    Prepared {
        c_j,
        c_outer,
        pairs,
        coefs,
    }
}

/// `out_j[i * sc] <- beta out_j[i * sc] + sum_q coefs[q * nj + j] cols[q][i]` for `i < m`
/// and `j < nj = out.len()` (`beta = None`: overwrite), through `acc` (`nj * m` sums, in L1
/// for the extents it serves): each column is read once, each output element written once.
///
/// # Safety
///
/// Each `cols[q]` points at `m` readable elements (stride 1); each `out[j]` at `m` elements
/// `sc` apart that are writable, not aliased by anything read or by another `out[j]`;
/// `coefs` holds `cols.len()` rows of `nj` coefficients.
///
/// Compiled three times: for AVX-512, for AVX2 with FMA, and for the baseline target, and
/// chosen at run time by what the CPU has (the crate is built for the baseline, where the
/// accumulators would be 128-bit vectors spilled to the stack).
#[allow(clippy::too_many_arguments)]
unsafe fn columns<T: Scalar>(
    cols: &[*const T],
    coefs: &[T],
    m: usize,
    out: &[*mut T],
    sc: isize,
    beta: Option<T>,
    acc: &mut Vec<T>,
) {
    #[cfg(target_arch = "x86_64")]
    {
        #[cfg(feature = "avx512")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the caller's; the CPU has AVX-512F.
            return unsafe { columns_avx512(cols, coefs, m, out, sc, beta, acc) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the caller's; the CPU has AVX2 and FMA.
            return unsafe { columns_avx2(cols, coefs, m, out, sc, beta, acc) };
        }
    }
    // SAFETY: the caller's.
    unsafe { columns_body(cols, coefs, m, out, sc, beta, acc) }
}

/// [`columns`] for AVX-512.
///
/// # Safety
///
/// As [`columns`], on a CPU with AVX-512F.
#[cfg(all(target_arch = "x86_64", feature = "avx512"))]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
unsafe fn columns_avx512<T: Scalar>(
    cols: &[*const T],
    coefs: &[T],
    m: usize,
    out: &[*mut T],
    sc: isize,
    beta: Option<T>,
    acc: &mut Vec<T>,
) {
    // SAFETY: the caller's.
    unsafe { columns_body(cols, coefs, m, out, sc, beta, acc) }
}

/// [`columns`] for AVX2 with FMA.
///
/// # Safety
///
/// As [`columns`], on a CPU with AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn columns_avx2<T: Scalar>(
    cols: &[*const T],
    coefs: &[T],
    m: usize,
    out: &[*mut T],
    sc: isize,
    beta: Option<T>,
    acc: &mut Vec<T>,
) {
    // SAFETY: the caller's.
    unsafe { columns_body(cols, coefs, m, out, sc, beta, acc) }
}

/// The body of [`columns`], inlined into each of its builds.
///
/// # Safety
///
/// As [`columns`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn columns_body<T: Scalar>(
    cols: &[*const T],
    coefs: &[T],
    m: usize,
    out: &[*mut T],
    sc: isize,
    beta: Option<T>,
    acc: &mut Vec<T>,
) {
    let nj = out.len();
    acc.clear();
    acc.resize(nj * m, T::ZERO);
    for (&col, row) in cols.iter().zip(coefs.chunks_exact(nj.max(1))) {
        // SAFETY: the caller's: `m` elements of stride 1.
        let x = unsafe { std::slice::from_raw_parts(col, m) };
        for (a, &c) in acc.chunks_exact_mut(m.max(1)).zip(row) {
            if c != T::ZERO {
                for (a, &x) in a.iter_mut().zip(x) {
                    *a += c * x;
                }
            }
        }
    }
    for (&o, sums) in out.iter().zip(acc.chunks_exact(m.max(1))) {
        if sc == 1 {
            // SAFETY: the caller's: `m` elements of stride 1, exclusive.
            let d = unsafe { std::slice::from_raw_parts_mut(o, m) };
            match beta {
                None => d.copy_from_slice(sums),
                Some(b) => d.iter_mut().zip(sums).for_each(|(d, &v)| *d = b * *d + v),
            }
        } else {
            for (i, &v) in sums.iter().enumerate() {
                // SAFETY: the caller's: element `i < m` of an output column.
                unsafe { store(o.offset(i as isize * sc), v, beta) };
            }
        }
    }
}

/// `*d <- beta * *d + v` (`beta = None`: `*d <- v`, the old value not read).
///
/// # Safety
///
/// `d` is valid for reads and writes and not aliased.
#[inline(always)]
unsafe fn store<T: Scalar>(d: *mut T, v: T, beta: Option<T>) {
    // SAFETY: the caller's.
    unsafe {
        *d = match beta {
            None => v,
            Some(b) => b * *d + v,
        };
    }
}

/// `C <- beta C + sum_p scale_p op(X_p) op(Y_p)` over the legs `legs` for each output block
/// and its pairs (`beta = None`: overwrite, the old `C` is not read), with `op` the
/// conjugate where `conj` says (`[X, Y]`).
///
/// The output blocks must share the extents of X's free legs (blocks of one row of X's free
/// sectors): the loop over the outer legs runs once for all of them, so the part of each X
/// block it reads at one outer index is read from memory once and reused from cache by every
/// output block it writes.
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
    let prepared: Vec<Prepared<T>> = outputs
        .iter()
        .zip(&j_dims)
        .map(|((c, pairs), j)| prepare(legs, conj[1], c, pairs, outer_dims, j))
        .collect();
    let n_outer: usize = outer_dims.iter().product();
    let conj_x = conj[0] && T::IS_COMPLEX;
    // Stride 1 along the inner leg in every block, nothing to conjugate: the register-blocked
    // kernel. Otherwise (a rare layout) the columns are gathered first.
    let contiguous = !conj_x
        && outputs.iter().zip(&prepared).all(|((c, _), prep)| {
            c.strides()[legs.inner.1] == 1 && prep.pairs.iter().all(|p| p.1 == 1)
        });
    let mut cols: Vec<*const T> = Vec::new();
    let mut dst: Vec<*mut T> = Vec::new();
    let mut gathered: Vec<T> = Vec::new();
    let mut acc: Vec<T> = Vec::new();
    for n in 0..n_outer {
        for ((c, pairs), prep) in outputs.iter_mut().zip(&prepared) {
            cols.clear();
            gathered.clear();
            for (p, (x_k, sx, x_outer)) in pairs.iter().zip(&prep.pairs) {
                for &ok in x_k {
                    let base = x_outer[n] + ok;
                    // SAFETY: `base` is the offset of an in-range multi-index of the large
                    // block (inner index 0), inside its checked extent.
                    let col = unsafe { p.x.as_ptr().offset(base) };
                    if contiguous {
                        cols.push(col);
                    } else {
                        for i in 0..m {
                            // SAFETY: as above, `i < m` along the inner axis of stride `sx`.
                            let x = unsafe { *col.offset(i as isize * sx) };
                            gathered.push(if conj_x { x.conj() } else { x });
                        }
                    }
                }
            }
            if !contiguous {
                cols.extend((0..gathered.len() / m.max(1)).map(|q| gathered[q * m..].as_ptr()));
            }
            let sc = c.strides()[legs.inner.1];
            let cp = c.as_mut_ptr();
            dst.clear();
            // SAFETY: `c_outer[n] + c_j[j]` is the offset of an in-range multi-index of the
            // output block (inner index 0).
            dst.extend(
                prep.c_j
                    .iter()
                    .map(|&oj| unsafe { cp.offset(prep.c_outer[n] + oj) }),
            );
            // SAFETY: every column pointer starts `m` in-range elements along an inner axis of
            // stride 1 (a large block's, or `gathered`'s, alive here); every output pointer
            // starts `m` in-range elements of the output block along an axis of stride `sc`,
            // distinct per `j` (distinct multi-indices), held exclusively by this call;
            // `coefs` has `cols.len()` rows of `nj`.
            unsafe { columns(&cols, &prep.coefs, m, &dst, sc, beta, &mut acc) };
        }
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
        let (ny, na, nr, nt, nc, nu) = (11, 2, 3, 2, 2, 1);
        let xb = SharedBuffer::from_fn(ny * na * nr * nt, |i| make(i as f64 * 0.5 - 3.0, 1.0));
        let yb = SharedBuffer::from_fn(nt * nc * na * nu, |i| make(1.0 - i as f64, 0.25));
        // Output `(y, u, r, c)` column-major with ld 13 for the `(r, c)` columns: rows 11 and
        // 12 of each column are a gap. (11 rows: a register block of 8 and a tail of 3.)
        let cb = SharedBuffer::from_fn(13 * nr * nc, |i| make(i as f64, -1.0));
        let x_strides = [1, ny as isize, (ny * na) as isize, (ny * na * nr) as isize];
        let y_strides = [1, nt as isize, (nt * nc) as isize, (nt * nc * na) as isize];
        let c_strides = [1, ny as isize, 13, 13 * nr as isize];
        let legs = SmallLegs {
            inner: (0, 0),
            outer: vec![(2, 2)],
            contracted: vec![(1, 2), (3, 0)],
            free_y: vec![(1, 3), (3, 1)],
        };
        for conj in [[false, false], [true, false], [false, true]] {
            for beta in [None, Some(make(-0.5, 0.5))] {
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
                contract_small(&legs, conj, &mut [(&mut c, &pairs[..])], beta).unwrap();
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
                let all = unsafe { cb.view(0, &[13 * nr * nc], &[1]) };
                assert_eq!(all.get(&[11]), Some(make(11.0, -1.0)));
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
        let err = contract_small(&legs, [false; 2], &mut [(&mut c, &pairs[..])], None).unwrap_err();
        assert_eq!(
            (err.what, err.expected, err.given),
            ("the small block's free extents", vec![2], vec![1])
        );
        assert!(c.as_ref().to_vec().iter().all(|&v| v == 7.0));
    }
}
