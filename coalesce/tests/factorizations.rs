//! Per-sector factorizations against faer's dense factorizations of the block-diagonal
//! matrix of the sector matrices, on seeded random structures over several sector kinds
//! (fermionic ones included), half of them masked (absent blocks are zeros: the reference
//! is the zero-filled tensor, built from the dense tensor), for `f64` and `Complex64`;
//! non-finite input; and misuse errors.

mod common;

use common::epochs;
use faer::{Mat, MatRef};
use num_complex::Complex64;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use tessera_backends::{Field, Real, Scalar};
use tessera_blocks::testing::{self, Kind};
use tessera_blocks::{
    AbelianSector, AsyncArray, BitVec, BlockStructure, Direction, FermionParity, Leg, Product,
    Trivial, U1, Zn,
};
use tessera_coalesce::{
    Coalesce, Error, SingularValues, Truncation, eigh, lq, qr, svd, svd_layout, svd_sectors,
};

/// A random leg with at least one segment (the shared generator, which rarely gives none).
fn random_leg<S: Kind>(rng: &mut ChaCha8Rng) -> Leg<S> {
    loop {
        let leg = testing::random_leg::<S>(rng);
        if leg.num_segments() > 0 {
            return leg;
        }
    }
}

/// One to four legs split near the middle, with a flux some block conserves.
fn random_structure<S: Kind>(rng: &mut ChaCha8Rng) -> BlockStructure<S> {
    let n = rng.gen_range(1..=4);
    let legs: Vec<Leg<S>> = (0..n).map(|_| random_leg(rng)).collect();
    let n_codomain = (n / 2 + rng.gen_range(0..=n % 2)).min(n);
    let flux = legs.iter().fold(S::trivial(), |acc, l| {
        let i = rng.gen_range(0..l.num_segments());
        acc.fuse_abelian(&l.effective_sector(i).unwrap())
    });
    BlockStructure::from_legs(legs, n_codomain, flux).unwrap()
}

/// A structure from `make`, half the time with a random presence mask.
fn maybe_masked<S: Kind>(
    rng: &mut ChaCha8Rng,
    make: fn(&mut ChaCha8Rng) -> BlockStructure<S>,
) -> BlockStructure<S> {
    let s = make(rng);
    if rng.gen_bool(0.5) {
        s.with_present(&testing::random_mask(rng, s.num_allowed()))
            .unwrap()
    } else {
        s
    }
}

/// `a` with its absent blocks as zeros, on the structure with the same legs, split and flux
/// and every allowed block: built through the dense tensor, independently of the library's
/// own fill. For an unmasked `a`, a copy of it.
fn zero_filled<T: Field, S: AbelianSector>(a: &AsyncArray<T, S>) -> AsyncArray<T, S> {
    let s = a.structure();
    let full =
        BlockStructure::from_legs(s.legs().to_vec(), s.n_codomain(), s.flux().clone()).unwrap();
    AsyncArray::from_dense(full, &a.to_dense().unwrap()).unwrap()
}

/// A space to itself: random codomain legs, their duals as the domain, trivial flux.
fn random_endomorphism<S: Kind>(rng: &mut ChaCha8Rng) -> BlockStructure<S> {
    let n = rng.gen_range(1..=2);
    let legs: Vec<Leg<S>> = (0..n).map(|_| random_leg(rng)).collect();
    let duals: Vec<Leg<S>> = legs.iter().map(Leg::dual).collect();
    BlockStructure::new(legs, duals, S::trivial()).unwrap()
}

fn norm<T: Scalar>(m: MatRef<'_, T>) -> f64 {
    let mut s = 0.0;
    for j in 0..m.ncols() {
        for i in 0..m.nrows() {
            s += m[(i, j)].abs2().into();
        }
    }
    s.sqrt()
}

fn diff<T: Field>(a: MatRef<'_, T>, b: MatRef<'_, T>) -> f64 {
    assert_eq!((a.nrows(), a.ncols()), (b.nrows(), b.ncols()));
    norm((a - b).as_ref())
}

fn assert_close<T: Field>(a: MatRef<'_, T>, b: MatRef<'_, T>, what: &str) {
    let scale = 1.0 + norm(a).max(norm(b));
    let d = diff(a, b);
    assert!(d <= 1e-10 * scale, "{what}: off by {d:e} (scale {scale})");
}

fn identity<T: Field>(n: usize) -> Mat<T> {
    Mat::from_fn(n, n, |i, j| if i == j { T::ONE } else { T::ZERO })
}

/// The sector matrices of `a`, in sector order.
fn sector_matrices<T: Field, S: AbelianSector>(a: &AsyncArray<T, S>) -> Vec<Mat<T>> {
    (0..a.structure().sectors().len())
        .map(|c| a.sector(c).unwrap().with(|m| m.to_owned()).unwrap())
        .collect()
}

/// The sector matrix of `x` labelled `label`.
fn sector_of<T: Field, S: AbelianSector>(x: &AsyncArray<T, S>, label: &S) -> Mat<T> {
    let c = x.structure().sector_index(label).unwrap();
    x.sector(c).unwrap().with(|m| m.to_owned()).unwrap()
}

/// The sector matrix labelled `label` of a real tensor, as `f64`s.
fn real_sector_of<R: Scalar, S: AbelianSector>(x: &AsyncArray<R, S>, label: &S) -> Mat<f64>
where
    R::Real: Into<f64>,
{
    let c = x.structure().sector_index(label).unwrap();
    x.sector(c)
        .unwrap()
        .with(|m| Mat::from_fn(m.nrows(), m.ncols(), |i, j| m[(i, j)].to_c64().re))
        .unwrap()
}

fn block_diag<T: Field>(mats: &[Mat<T>]) -> Mat<T> {
    let (r, c) = mats
        .iter()
        .fold((0, 0), |(r, c), m| (r + m.nrows(), c + m.ncols()));
    let mut d = Mat::from_fn(r, c, |_, _| T::ZERO);
    let (mut r0, mut c0) = (0, 0);
    for m in mats {
        d.as_mut()
            .submatrix_mut(r0, c0, m.nrows(), m.ncols())
            .copy_from(m);
        r0 += m.nrows();
        c0 += m.ncols();
    }
    d
}

/// The Hermitian matrix whose lower triangle is `m`'s (what a Hermitian eigensolver that
/// reads the lower triangle decomposes).
fn lower_hermitian<T: Field>(m: &Mat<T>) -> Mat<T> {
    Mat::from_fn(m.nrows(), m.ncols(), |i, j| match i.cmp(&j) {
        std::cmp::Ordering::Greater => m[(i, j)],
        std::cmp::Ordering::Less => m[(j, i)].conj(),
        std::cmp::Ordering::Equal => T::from_f64(re(m[(i, i)])),
    })
}

fn re<T: Scalar>(x: T) -> f64 {
    x.to_c64().re
}

/// Checks one SVD of `a` with `t` against the dense SVD of the block-diagonal matrix;
/// returns how many values it kept.
fn check_svd<T: Field, S: AbelianSector>(a: &AsyncArray<T, S>, t: &Truncation) -> usize {
    let full = zero_filled(a);
    let mats = sector_matrices(&full);
    let r = svd(a, t).unwrap();
    let s = full.structure();
    // The factors never carry a mask.
    assert_eq!(r.u.num_blocks(), r.u.structure().num_allowed());
    assert_eq!(r.vt.num_blocks(), r.vt.structure().num_allowed());
    // Legs: U's codomain is A's, V†'s domain is A's, and the bond contracts through S.
    assert_eq!(r.u.structure().codomain(), s.codomain());
    assert_eq!(r.vt.structure().domain(), s.domain());
    assert_eq!(r.vt.structure().flux(), s.flux());
    assert_eq!(&r.u.structure().domain()[0], r.s.leg());
    let s_array = r.s.to_array().unwrap();
    Leg::check_contractible(
        &r.u.structure().domain()[0],
        &s_array.structure().codomain()[0],
    )
    .unwrap();
    Leg::check_contractible(
        &s_array.structure().domain()[0],
        &r.vt.structure().codomain()[0],
    )
    .unwrap();
    // Sector by sector: orthonormal factors, and the kept part of A.
    let mut ours: Vec<f64> = Vec::new();
    let mut approx = Vec::new();
    let kept: std::collections::HashMap<&S, &[Real<T>]> = r.s.iter().collect();
    for (c, m) in s.sectors().iter().zip(&mats) {
        let Some(values) = kept.get(c.sector()) else {
            approx.push(Mat::from_fn(m.nrows(), m.ncols(), |_, _| T::ZERO));
            continue;
        };
        let k = values.len();
        assert!(k <= m.nrows().min(m.ncols()));
        assert!(values.windows(2).all(|w| w[0] >= w[1]), "non-increasing");
        let (u, vt) = (sector_of(&r.u, c.sector()), sector_of(&r.vt, c.sector()));
        assert_eq!(
            (u.nrows(), u.ncols(), vt.nrows(), vt.ncols()),
            (m.nrows(), k, k, m.ncols())
        );
        assert_close(
            (u.adjoint() * &u).as_ref(),
            identity::<T>(k).as_ref(),
            "U†U",
        );
        assert_close(
            (&vt * vt.adjoint()).as_ref(),
            identity::<T>(k).as_ref(),
            "V†V",
        );
        let sd = real_sector_of(&s_array, c.sector());
        let want = Mat::from_fn(k, k, |i, j| if i == j { values[i].into() } else { 0.0 });
        assert_close(sd.as_ref(), want.as_ref(), "S as a diagonal tensor");
        let us = Mat::from_fn(m.nrows(), k, |i, j| u[(i, j)] * T::from_real(values[j]));
        approx.push(&us * &vt);
        ours.extend(values.iter().map(|&v| v.into()));
    }
    // Against the dense SVD of the block-diagonal matrix: the same largest values, the same
    // truncated matrix, and the discarded weight is the dense truncation error.
    let dense = block_diag(&mats);
    let dsvd = dense.thin_svd().unwrap();
    let dvals: Vec<f64> = dsvd.S().column_vector().iter().map(|&x| re(x)).collect();
    ours.sort_by(|a, b| b.total_cmp(a));
    let k = ours.len();
    assert_eq!(k, r.s.len());
    for (i, (&x, &y)) in ours.iter().zip(&dvals).enumerate() {
        assert!(
            (x - y).abs() <= 1e-10 * (1.0 + y),
            "value {i}: {x} vs dense {y}"
        );
    }
    let dense_discarded: f64 = dvals[k..].iter().map(|s| s * s).sum();
    let total: f64 = dvals.iter().map(|s| s * s).sum();
    assert!((r.discarded_weight - dense_discarded).abs() <= 1e-9 * (1.0 + total));
    assert!((r.total_weight - total).abs() <= 1e-9 * (1.0 + total));
    let dk = Mat::from_fn(dense.nrows(), k, |i, j| {
        dsvd.U()[(i, j)] * T::from_real(Real::<T>::from_f64(dvals[j]))
    });
    let dense_trunc = &dk * dsvd.V().subcols(0, k).adjoint();
    assert_close(
        block_diag(&approx).as_ref(),
        dense_trunc.as_ref(),
        "truncated matrix",
    );
    let err = diff(dense.as_ref(), block_diag(&approx).as_ref());
    assert!((err * err - r.discarded_weight).abs() <= 1e-9 * (1.0 + total));
    k
}

fn svd_cases<T: Field, S: Kind>(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for case in 0..40 {
        let s = Arc::new(maybe_masked(&mut rng, random_structure::<S>));
        let a = AsyncArray::<T, S>::random(Arc::clone(&s), seed ^ case);
        let full = Arc::clone(zero_filled(&a).structure());
        let n: usize = full.sectors().iter().map(|c| c.rows().min(c.cols())).sum();
        assert_eq!(check_svd(&a, &Truncation::none()), n);
        if n == 0 {
            continue;
        }
        let max_dim = rng.gen_range(1..=n + 1);
        assert_eq!(check_svd(&a, &Truncation::max_dim(max_dim)), max_dim.min(n));
        // A cutoff at one of the singular values, and a bound on the discarded weight.
        let all = svd(&a, &Truncation::none()).unwrap();
        let mut values: Vec<f64> = all
            .s
            .iter()
            .flat_map(|(_, v)| v.iter().map(|&x| x.into()))
            .collect();
        values.sort_by(|a, b| b.total_cmp(a));
        let cutoff = values[rng.gen_range(0..values.len())];
        let t = Truncation {
            cutoff: Some(cutoff),
            ..Truncation::none()
        };
        let want = values.iter().filter(|&&v| v >= cutoff).count();
        assert_eq!(check_svd(&a, &t), want);
        let fraction = rng.gen_range(0.0..0.5);
        let t = Truncation {
            max_discarded_weight: Some(fraction),
            max_dim: Some(n),
            ..Truncation::none()
        };
        let r = svd(&a, &t).unwrap();
        assert!(r.discarded_weight <= fraction * r.total_weight + 1e-12);
        if !r.s.is_empty() {
            let smallest: f64 = values[r.s.len() - 1];
            assert!(r.discarded_weight + smallest * smallest > fraction * r.total_weight);
        }
        check_svd(&a, &t);
    }
}

fn qr_cases<T: Field, S: Kind>(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for case in 0..40 {
        let masked = Arc::new(maybe_masked(&mut rng, random_structure::<S>));
        let a = AsyncArray::<T, S>::random(Arc::clone(&masked), seed ^ case);
        let full = zero_filled(&a);
        let s = Arc::clone(full.structure());
        let mats = sector_matrices(&full);
        let f = qr(&a).unwrap();
        let g = lq(&a).unwrap();
        for x in [&f.q, &f.r, &g.l, &g.q] {
            assert_eq!(x.num_blocks(), x.structure().num_allowed(), "no mask");
        }
        assert_eq!(f.q.structure().codomain(), s.codomain());
        assert_eq!(f.r.structure().domain(), s.domain());
        assert_eq!(g.q.structure().domain(), s.domain());
        if s.num_blocks() > 0 {
            Leg::check_contractible(&f.q.structure().domain()[0], &f.r.structure().codomain()[0])
                .unwrap();
            Leg::check_contractible(&g.l.structure().domain()[0], &g.q.structure().codomain()[0])
                .unwrap();
        }
        for (c, m) in s.sectors().iter().zip(&mats) {
            let k = m.nrows().min(m.ncols());
            let (q, r) = (sector_of(&f.q, c.sector()), sector_of(&f.r, c.sector()));
            assert_close((&q * &r).as_ref(), m.as_ref(), "QR");
            assert_close(
                (q.adjoint() * &q).as_ref(),
                identity::<T>(k).as_ref(),
                "Q†Q",
            );
            for j in 0..r.ncols() {
                for i in (j + 1)..r.nrows() {
                    assert_eq!(r[(i, j)], T::ZERO, "R is upper triangular");
                }
            }
            let (l, q) = (sector_of(&g.l, c.sector()), sector_of(&g.q, c.sector()));
            assert_close((&l * &q).as_ref(), m.as_ref(), "LQ");
            assert_close(
                (&q * q.adjoint()).as_ref(),
                identity::<T>(k).as_ref(),
                "QQ†",
            );
            for j in 0..l.ncols() {
                for i in 0..j.min(l.nrows()) {
                    assert_eq!(l[(i, j)], T::ZERO, "L is lower triangular");
                }
            }
        }
        // Against the dense QR of the block-diagonal matrix: both R factors give its Gram
        // matrix, R†R = A†A.
        let dense = block_diag(&mats);
        let dr = dense.qr().thin_R().to_owned();
        let r_all = block_diag(
            &s.sectors()
                .iter()
                .map(|c| sector_of(&f.r, c.sector()))
                .collect::<Vec<_>>(),
        );
        assert_close(
            (r_all.adjoint() * &r_all).as_ref(),
            (dr.adjoint() * &dr).as_ref(),
            "R†R",
        );
    }
}

fn eigh_cases<T: Field, S: Kind>(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for case in 0..40 {
        let masked = Arc::new(maybe_masked(&mut rng, random_endomorphism::<S>));
        // A Hermitian tensor on every allowed block; the input keeps its present blocks
        // (absent ones as zeros leave it Hermitian only for a symmetric mask: both are
        // decomposed from their lower triangles).
        let unmasked =
            BlockStructure::from_legs(masked.legs().to_vec(), masked.n_codomain(), S::trivial())
                .unwrap();
        let h = AsyncArray::<T, S>::random(unmasked, seed ^ case);
        for c in 0..h.structure().sectors().len() {
            h.sector(c)
                .unwrap()
                .with_mut(|mut m| {
                    let x = Mat::from_fn(m.nrows(), m.ncols(), |i, j| {
                        (m[(i, j)] + m[(j, i)].conj()) * T::from_f64(0.5)
                    });
                    m.copy_from(&x);
                })
                .unwrap();
        }
        let present: Vec<Vec<T>> = masked
            .blocks()
            .map(|b| {
                h.block(b.allowed_index())
                    .unwrap()
                    .with(|v| v.to_vec())
                    .unwrap()
            })
            .collect();
        let a = AsyncArray::from_blocks(Arc::clone(&masked), &present).unwrap();
        let full = zero_filled(&a);
        let s = Arc::clone(full.structure());
        let mats: Vec<Mat<T>> = sector_matrices(&full).iter().map(lower_hermitian).collect();
        let e = eigh(&a).unwrap();
        assert_eq!(e.vectors.num_blocks(), e.vectors.structure().num_allowed());
        assert_eq!(e.vectors.structure().codomain(), s.codomain());
        let mut ours = Vec::new();
        for (c, m) in s.sectors().iter().zip(&mats) {
            let (v, d) = (
                sector_of(&e.vectors, c.sector()),
                real_sector_of(&e.values, c.sector()),
            );
            let n = m.nrows();
            assert_close(
                (v.adjoint() * &v).as_ref(),
                identity::<T>(n).as_ref(),
                "V†V",
            );
            let dt = Mat::from_fn(n, n, |i, j| T::from_f64(d[(i, j)]));
            assert_close((&v * &dt * v.adjoint()).as_ref(), m.as_ref(), "V D V†");
            let vals: Vec<f64> = (0..n).map(|i| d[(i, i)]).collect();
            assert!(vals.windows(2).all(|w| w[0] <= w[1]), "non-decreasing");
            ours.extend(vals);
        }
        let dense = block_diag(&mats);
        let mut dvals: Vec<f64> = dense
            .self_adjoint_eigenvalues(faer::Side::Lower)
            .unwrap()
            .into_iter()
            .map(|x| x.into())
            .collect();
        ours.sort_by(f64::total_cmp);
        dvals.sort_by(f64::total_cmp);
        assert_eq!(ours.len(), dvals.len());
        for (x, y) in ours.iter().zip(&dvals) {
            assert!((x - y).abs() <= 1e-10 * (1.0 + y.abs()), "{x} vs dense {y}");
        }
    }
}

macro_rules! for_each_kind {
    ($check:ident) => {{
        $check::<Trivial>(0x11);
        $check::<U1>(0x22);
        $check::<Zn<3>>(0x33);
        $check::<Product<U1, U1>>(0x44);
        $check::<Product<U1, FermionParity>>(0x66);
    }};
    ($check:ident, $t:ty) => {{
        $check::<$t, Trivial>(0x11);
        $check::<$t, U1>(0x22);
        $check::<$t, Zn<3>>(0x33);
        $check::<$t, Product<U1, U1>>(0x44);
        $check::<$t, Product<U1, FermionParity>>(0x66);
    }};
}

#[test]
fn svd_equals_the_dense_truncated_svd_f64() {
    for_each_kind!(svd_cases, f64);
}

#[test]
fn svd_equals_the_dense_truncated_svd_c64() {
    for_each_kind!(svd_cases, Complex64);
}

/// The staged SVD of a tensor's present sectors ([`svd_sectors`], then
/// [`Truncation::select`], [`svd_layout`] and `keep`), as a distributed factorization runs
/// it: the values of each present sector are those [`svd`] finds for it, sectors without a
/// block are not factored, and with a `max_dim` within the present sectors' values the
/// factors are [`svd`]'s (whose extra sectors are zeros and rank last).
fn staged_svd_cases<T: Field, S: Kind>(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for case in 0..40 {
        let s = Arc::new(maybe_masked(&mut rng, random_structure::<S>));
        let a = AsyncArray::<T, S>::random(Arc::clone(&s), seed ^ case);
        let staged = svd_sectors(&a).unwrap();
        let all = svd(&a, &Truncation::none()).unwrap();
        let present: Vec<&S> = s
            .sectors()
            .iter()
            .filter(|c| !c.blocks().is_empty())
            .map(|c| c.sector())
            .collect();
        assert_eq!(staged.iter().map(|(l, _)| l).collect::<Vec<_>>(), present);
        let mut values = Vec::new();
        for (label, v) in staged.iter() {
            let want = all.s.values_of(label).unwrap_or(&[]);
            assert_eq!(v.len(), want.len());
            for (x, y) in v.iter().zip(want) {
                let y: f64 = (*y).into();
                assert!((x - y).abs() <= 1e-12 * (1.0 + y), "{x} vs {y}");
            }
            values.push(v.to_vec());
        }
        let n: usize = values.iter().map(Vec::len).sum();
        if n == 0 {
            continue;
        }
        let t = Truncation::max_dim(rng.gen_range(1..=n));
        let kept = t.select(&values).unwrap();
        let labels: Vec<S> = staged.iter().map(|(l, _)| l.clone()).collect();
        let layout = svd_layout(&s, labels.iter().cloned().zip(kept.per_sector.clone())).unwrap();
        let u = AsyncArray::<T, S>::zeros(layout.u);
        let vt = AsyncArray::<T, S>::zeros(layout.vt);
        let mut kept_values = Vec::new();
        for (label, &k) in labels.iter().zip(&kept.per_sector) {
            staged.keep(label, k, &u, &vt).unwrap();
            if k > 0 {
                let v = staged.values_of(label).unwrap();
                kept_values.push(v[..k].iter().map(|&x| Real::<T>::from_f64(x)).collect());
            }
        }
        let sv = SingularValues::new(layout.bond, kept_values).unwrap();
        let want = svd(&a, &t).unwrap();
        assert_eq!(sv.leg(), want.s.leg());
        assert_same(&u, &want.u, "staged U");
        assert_same(&vt, &want.vt, "staged V†");
        assert!((kept.total_weight - want.total_weight).abs() <= 1e-10 * want.total_weight);
        assert!((kept.discarded_weight - want.discarded_weight).abs() <= 1e-10 * want.total_weight);
    }
}

#[test]
fn staged_svd_of_the_present_sectors_is_the_svd_of_those_sectors() {
    for_each_kind!(staged_svd_cases, f64);
    for_each_kind!(staged_svd_cases, Complex64);
}

#[test]
fn staged_svd_misuse_is_refused_and_writes_nothing() {
    let s = u1_matrix();
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 5);
    let staged = svd_sectors(&a).unwrap();
    let labels: Vec<U1> = staged.iter().map(|(l, _)| *l).collect();
    let dims: Vec<usize> = staged.iter().map(|(_, v)| v.len()).collect();
    let layout = svd_layout(&s, labels.iter().copied().zip(dims.iter().copied())).unwrap();
    let u = AsyncArray::<f64, U1>::zeros(layout.u.clone());
    let vt = AsyncArray::<f64, U1>::zeros(layout.vt.clone());
    let (l, k) = (labels[0], dims[0]);
    // More values than the sector has; a sector not factored; factors of another width.
    let e = staged.keep(&l, k + 1, &u, &vt).unwrap_err();
    assert!(matches!(e, Error::BadValues { .. }), "{e}");
    let e = staged.keep(&U1(99), 1, &u, &vt).unwrap_err();
    assert!(
        matches!(e, Error::BadValues { .. }) && e.to_string().contains("99"),
        "{e}"
    );
    let e = staged.keep(&l, k - 1, &u, &vt).unwrap_err();
    assert!(matches!(e, Error::NotOnBond { .. }), "{e}");
    assert!(u.to_dense().unwrap().iter().all(|&x| x == 0.0));
    assert!(vt.to_dense().unwrap().iter().all(|&x| x == 0.0));
    // Values of the wrong shape for the bond; a selection of bad values.
    let e = SingularValues::<f64, U1>::new(layout.bond, vec![vec![1.0]]).unwrap_err();
    assert!(matches!(e, Error::BadValues { .. }), "{e}");
    let e = Truncation::none().select(&[vec![1.0, 2.0]]).unwrap_err();
    assert!(e.to_string().contains("non-increasing"), "{e}");
    let e = Truncation::none().select(&[vec![f64::NAN]]).unwrap_err();
    assert!(e.to_string().contains("NaN"), "{e}");
    let e = Truncation::max_dim(0).select(&[vec![1.0]]).unwrap_err();
    assert!(matches!(e, Error::InvalidTruncation { .. }), "{e}");
}

#[test]
fn qr_and_lq_reconstruct_with_orthonormal_triangular_factors() {
    for_each_kind!(qr_cases, f64);
    for_each_kind!(qr_cases, Complex64);
}

#[test]
fn eigh_equals_the_dense_eigendecomposition() {
    for_each_kind!(eigh_cases, f64);
    for_each_kind!(eigh_cases, Complex64);
}

fn u1_matrix() -> Arc<BlockStructure<U1>> {
    let a = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)]).unwrap();
    let b = Leg::new(Direction::In, [(U1(0), 1), (U1(1), 2)]).unwrap();
    Arc::new(BlockStructure::new([a.clone(), b.clone()], [a.dual(), b.dual()], U1(0)).unwrap())
}

#[test]
fn misuse_gives_typed_errors_and_enrolls_nothing() {
    let s = u1_matrix();
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 2);
    let before = (a.to_blocks().unwrap(), epochs(&a));
    let bad = Truncation {
        cutoff: Some(-1.0),
        ..Truncation::none()
    };
    assert!(matches!(
        svd(&a, &bad).unwrap_err(),
        Error::InvalidTruncation { what: "cutoff", .. }
    ));
    assert!(matches!(
        svd(&a, &Truncation::max_dim(0)).unwrap_err(),
        Error::InvalidTruncation {
            what: "max_dim",
            ..
        }
    ));
    // Not a map of a space to itself: flux, leg count, a leg that is not the dual.
    let legs = s.legs().to_vec();
    let shifted =
        AsyncArray::<f64, U1>::zeros(BlockStructure::from_legs(legs.clone(), 2, U1(1)).unwrap());
    let err = eigh(&shifted).unwrap_err();
    assert!(matches!(err, Error::NotEndomorphism { .. }) && err.to_string().contains("flux"));
    let split =
        AsyncArray::<f64, U1>::zeros(BlockStructure::from_legs(legs.clone(), 1, U1(0)).unwrap());
    assert!(matches!(
        eigh(&split).unwrap_err(),
        Error::NotEndomorphism { .. }
    ));
    let other = Leg::new(Direction::Out, [(U1(0), 2), (U1(1), 1)]).unwrap();
    let skew = AsyncArray::<f64, U1>::zeros(
        BlockStructure::new(
            [legs[0].clone(), legs[1].clone()],
            [other, legs[3].clone()],
            U1(0),
        )
        .unwrap(),
    );
    assert!(matches!(
        eigh(&skew).unwrap_err(),
        Error::NotEndomorphism { .. }
    ));
    assert_eq!((a.to_blocks().unwrap(), epochs(&a)), before);
}

#[test]
fn a_poisoned_input_poisons_the_factors() {
    let a = AsyncArray::<f64, U1>::random(u1_matrix(), 3);
    tessera_core::schedule(a.block(0).unwrap().write(), |_| Err("injected".into())).unwrap();
    let err = svd(&a, &Truncation::none()).unwrap_err();
    assert!(
        matches!(err, Error::Core(tessera_core::Error::Poisoned { .. })),
        "{err}"
    );
    let f = qr(&a).unwrap();
    let c = a.structure().block(0).unwrap().coupled_sector().sector();
    let poisoned = f.q.structure().sector_index(c).unwrap();
    assert!(f.q.sector(poisoned).unwrap().wait().is_err());
    // Sectors that do not depend on the failed block are computed.
    for k in (0..f.q.structure().sectors().len()).filter(|&k| k != poisoned) {
        f.q.sector(k).unwrap().wait().unwrap();
    }
}

/// The first mask of `s` dropping `k` allowed blocks whose structure satisfies `pick`.
fn mask_where(
    s: &BlockStructure<U1>,
    k: usize,
    pick: impl Fn(&BlockStructure<U1>) -> bool,
) -> BlockStructure<U1> {
    let n = s.num_allowed();
    (0..1usize << n)
        .filter(|m| m.count_ones() as usize == n - k)
        .map(|m| {
            let mask: BitVec = (0..n).map(|i| m >> i & 1 == 1).collect();
            s.with_present(&mask).unwrap()
        })
        .find(|m| pick(m))
        .expect("such a mask")
}

fn assert_same<T: Field, S: AbelianSector>(x: &AsyncArray<T, S>, y: &AsyncArray<T, S>, what: &str) {
    assert_eq!(x.structure(), y.structure(), "{what}: structure");
    let (x, y) = (x.to_dense().unwrap(), y.to_dense().unwrap());
    let n = x.len();
    let (x, y) = (
        Mat::from_fn(n, 1, |i, _| x[i]),
        Mat::from_fn(n, 1, |i, _| y[i]),
    );
    assert_close(x.as_ref(), y.as_ref(), what);
}

/// Pins the bug where a masked input whose sectors still formed matrices was factored from
/// its present rows and columns while the factors were built on the unmasked legs: `Ok`,
/// then the copy task panicked inside faer on the shapes, and every factor was poisoned by
/// that panic. Also the masks that were refused ([`Error::PackedSector`]): a hole in a
/// sector matrix, and a sector with no present block at all.
#[test]
fn masked_inputs_factor_as_their_zero_filled_tensor() {
    let s = u1_matrix();
    let full_rows = |m: &BlockStructure<U1>| {
        m.sectors()
            .iter()
            .map(|c| (c.rows(), c.cols()))
            .collect::<Vec<_>>()
    };
    let unmasked = full_rows(&s);
    let masks = [
        // Every sector dense and present, one smaller than its coupled sector's matrix.
        mask_where(&s, 2, |m| {
            m.sectors().iter().all(|c| c.is_dense())
                && m.sectors().len() == unmasked.len()
                && full_rows(m) != unmasked
        }),
        // A packed sector (a hole in its matrix).
        mask_where(&s, 1, |m| m.sectors().iter().any(|c| !c.is_dense())),
        // A coupled sector with no present block.
        mask_where(&s, 1, |m| m.sectors().len() < unmasked.len()),
    ];
    for (k, masked) in masks.into_iter().enumerate() {
        let a = AsyncArray::<Complex64, U1>::random(masked, 40 + k as u64);
        let full = zero_filled(&a);
        for t in [Truncation::none(), Truncation::max_dim(5)] {
            let (x, y) = (svd(&a, &t).unwrap(), svd(&full, &t).unwrap());
            assert_eq!(x.s.leg(), y.s.leg());
            for ((_, p), (_, q)) in x.s.iter().zip(y.s.iter()) {
                for (p, q) in p.iter().zip(q) {
                    assert!((p - q).abs() <= 1e-12 * (1.0 + q), "{p} vs {q}");
                }
            }
            assert_same(&x.u, &y.u, "U");
            assert_same(&x.vt, &y.vt, "V†");
            check_svd(&a, &t);
        }
        let (x, y) = (qr(&a).unwrap(), qr(&full).unwrap());
        assert_same(&x.q, &y.q, "QR Q");
        assert_same(&x.r, &y.r, "QR R");
        let (x, y) = (lq(&a).unwrap(), lq(&full).unwrap());
        assert_same(&x.l, &y.l, "LQ L");
        assert_same(&x.q, &y.q, "LQ Q");
        let (x, y) = (eigh(&a).unwrap(), eigh(&full).unwrap());
        assert_same(&x.vectors, &y.vectors, "eigenvectors");
        assert_same(&x.values, &y.values, "eigenvalues");
    }
}

/// `a` with `value` at element `at` of block `block` (for a complex type, in the imaginary
/// part when `imaginary`).
fn with_entry<T: Field, S: AbelianSector>(
    a: &AsyncArray<T, S>,
    (block, at): (usize, usize),
    value: f64,
    imaginary: bool,
) -> AsyncArray<T, S> {
    let mut blocks = a.to_blocks().unwrap();
    let z = if imaginary && T::IS_COMPLEX {
        Complex64::new(blocks[block][at].to_c64().re, value)
    } else {
        Complex64::new(value, 0.0)
    };
    blocks[block][at] = T::from_c64(z);
    AsyncArray::from_blocks(Arc::clone(a.structure()), &blocks).unwrap()
}

/// The typed error a factor's sector `label` was poisoned with.
fn poison_of<T: Scalar, S: AbelianSector>(x: &AsyncArray<T, S>, label: &S) -> Error {
    let c = x.structure().sector_index(label).unwrap();
    let e = x.sector(c).unwrap().wait().unwrap_err();
    Error::from_task_failure(&e)
        .unwrap_or_else(|| panic!("a typed task error, not {e}"))
        .clone()
}

/// Every sector of `x` but `label` is computed, with finite entries.
fn others_computed<T: Scalar, S: AbelianSector>(x: &AsyncArray<T, S>, label: &S) {
    for (c, sector) in x.structure().sectors().iter().enumerate() {
        if sector.sector() != label {
            let finite = x
                .sector(c)
                .unwrap()
                .with(|m| {
                    (0..m.ncols()).all(|j| {
                        (0..m.nrows()).all(|i| {
                            let z = m[(i, j)].to_c64();
                            z.re.is_finite() && z.im.is_finite()
                        })
                    })
                })
                .unwrap();
            assert!(finite, "sector {} of a factor", sector.sector());
        }
    }
}

fn assert_non_finite(e: &Error, operation: &str, label: &str) {
    match e {
        Error::NonFinite {
            operation: op,
            sector,
            value,
            ..
        } => {
            assert_eq!((*op, sector.as_str()), (operation, label), "{e}");
            assert!(value.contains("NaN") || value.contains("inf"), "{e}");
        }
        other => panic!("expected NonFinite from the {operation}, got {other}"),
    }
}

/// NaN, `+inf` and `-inf` anywhere (real or imaginary part, masked or not) give
/// [`Error::NonFinite`] naming the factorization and the sector: `svd` returns it (the
/// truncation never sees the value), `qr`, `lq` and `eigh` poison that sector of their
/// factors with it and compute the others.
fn non_finite_cases<T: Field, S: Kind>(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut done = 0;
    for case in 0..60 {
        let endo = case % 2 == 0;
        let make = if endo {
            random_endomorphism::<S>
        } else {
            random_structure::<S>
        };
        let s = Arc::new(maybe_masked(&mut rng, make));
        if s.num_blocks() == 0 {
            continue;
        }
        let clean = AsyncArray::<T, S>::random(Arc::clone(&s), seed ^ case);
        let block = rng.gen_range(0..s.num_blocks());
        let b = s.block(block).unwrap();
        let at = rng.gen_range(0..b.len());
        let value = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][case as usize % 3];
        let a = with_entry(&clean, (block, at), value, rng.gen_bool(0.5));
        let label = b.coupled_sector().sector().clone();
        let name = label.to_string();
        let t = Truncation {
            cutoff: Some(0.1),
            max_dim: Some(3),
            ..Truncation::none()
        };
        for t in [Truncation::none(), t] {
            assert_non_finite(&svd(&a, &t).unwrap_err(), "SVD", &name);
        }
        let f = qr(&a).unwrap();
        for x in [&f.q, &f.r] {
            assert_non_finite(&poison_of(x, &label), "QR", &name);
            others_computed(x, &label);
        }
        let g = lq(&a).unwrap();
        for x in [&g.l, &g.q] {
            assert_non_finite(&poison_of(x, &label), "LQ", &name);
            others_computed(x, &label);
        }
        if endo {
            let e = eigh(&a).unwrap();
            assert_non_finite(
                &poison_of(&e.vectors, &label),
                "Hermitian eigendecomposition",
                &name,
            );
            assert_non_finite(
                &poison_of(&e.values, &label),
                "Hermitian eigendecomposition",
                &name,
            );
            others_computed(&e.vectors, &label);
            others_computed(&e.values, &label);
        }
        // The clean tensor still factors.
        svd(&clean, &Truncation::none()).unwrap();
        done += 1;
    }
    assert!(done >= 40, "only {done} cases had a block");
}

#[test]
fn non_finite_input_gives_a_typed_error_not_nan_factors() {
    for_each_kind!(non_finite_cases, f64);
    for_each_kind!(non_finite_cases, Complex64);
}

/// Pins the bug where `qr` and `lq` of a matrix holding NaN gave NaN factors with no error.
#[test]
fn qr_of_a_nan_matrix_is_an_error_not_nan_factors() {
    let leg = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 2)]).unwrap();
    let s = BlockStructure::new([leg.clone()], [leg.dual()], U1(0)).unwrap();
    let a = AsyncArray::<f64, U1>::from_blocks(
        s,
        &[vec![1.0, f64::NAN, 0.0, 1.0], vec![2.0, 0.0, 0.0, 2.0]],
    )
    .unwrap();
    let f = qr(&a).unwrap();
    let Err(tessera_blocks::Error::Runtime(e)) = f.q.to_dense() else {
        panic!("Q of a NaN matrix was computed");
    };
    let e = Error::from_task_failure(&e).unwrap();
    assert_eq!(
        *e,
        Error::NonFinite {
            operation: "QR",
            sector: U1(0).to_string(),
            rows: 2,
            cols: 2,
            value: "NaN".to_owned(),
            place: "entry (1, 0) of the sector matrix".to_owned(),
        }
    );
    assert!(e.to_string().contains("NaN"), "{e}");
    // The same error read from the crate's own error type.
    let err = Error::from(f.r.sector(0).unwrap().wait().unwrap_err());
    assert_eq!(err.task_failure(), Some(e));
    // The other sector is computed.
    let r1 = f.r.sector(1).unwrap().with(|m| m.to_owned()).unwrap();
    assert!((r1[(0, 0)].abs() - 2.0).abs() < 1e-12);
    let g = lq(&a).unwrap();
    assert!(g.l.to_dense().is_err());
}

/// The kept values of `s` in the bond leg's dense order (segment by segment).
fn flat_values<S: AbelianSector>(s: &tessera_coalesce::SingularValues<f64, S>) -> Vec<f64> {
    s.iter().flat_map(|(_, v)| v.iter().copied()).collect()
}

/// Real singular values and eigenvalues meet complex tensors: `S` scales `U`'s columns
/// and `V†`'s rows (also of masked tensors on those legs, against the dense tensor scaled
/// along the bond axis), `S` made complex is the diagonal `diag(s)` and contracts sector by
/// sector to the same product, and complex-made eigenvalues rebuild `V D V†`.
fn real_values_with_complex_cases<S: Kind>(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for case in 0..25 {
        let s = Arc::new(maybe_masked(&mut rng, random_structure::<S>));
        let a = AsyncArray::<Complex64, S>::random(Arc::clone(&s), seed ^ case);
        let t = if rng.gen_bool(0.5) {
            Truncation::none()
        } else {
            Truncation::max_dim(rng.gen_range(1..=8))
        };
        let f = svd(&a, &t).unwrap();
        let us = f.s.scale_columns(&f.u).unwrap();
        let root = f.s.map(f64::sqrt);
        let rv = root.scale_rows(&f.vt).unwrap();
        let d = f.s.to_array().unwrap().to_complex().unwrap();
        for (label, values) in f.s.iter() {
            let (u, vt) = (sector_of(&f.u, label), sector_of(&f.vt, label));
            let k = values.len();
            let c = |x: f64| Complex64::new(x, 0.0);
            let want = Mat::from_fn(u.nrows(), k, |i, j| u[(i, j)] * c(values[j]));
            assert_close(sector_of(&us, label).as_ref(), want.as_ref(), "U·S");
            let want = Mat::from_fn(k, vt.ncols(), |i, j| c(values[i].sqrt()) * vt[(i, j)]);
            assert_close(sector_of(&rv, label).as_ref(), want.as_ref(), "√S·V†");
            let dc = sector_of(&d, label);
            let diag = Mat::from_fn(k, k, |i, j| if i == j { c(values[i]) } else { c(0.0) });
            assert_close(dc.as_ref(), diag.as_ref(), "S as a complex tensor");
            assert_close(
                (&u * &dc * &vt).as_ref(),
                (sector_of(&us, label) * &vt).as_ref(),
                "U·S·V† both ways",
            );
        }
        // Masked tensors on U's and V†'s legs, against the dense tensor scaled along the
        // bond axis (the last for columns, the first for rows).
        let flat = flat_values(&f.s);
        for (x_structure, rows) in [(f.u.structure(), false), (f.vt.structure(), true)] {
            let mask = testing::random_mask(&mut rng, x_structure.num_allowed());
            let x = AsyncArray::<Complex64, S>::random(
                x_structure.with_present(&mask).unwrap(),
                seed ^ case ^ 7,
            );
            let y = if rows {
                f.s.scale_rows(&x).unwrap()
            } else {
                f.s.scale_columns(&x).unwrap()
            };
            let (xd, yd) = (x.to_dense().unwrap(), y.to_dense().unwrap());
            let bond = flat.len();
            let inner = if rows { 1 } else { xd.len() / bond.max(1) };
            for (e, (xe, ye)) in xd.iter().zip(&yd).enumerate() {
                let want = xe * flat[(e / inner) % bond];
                assert!(
                    (ye - want).norm() <= 1e-14 * (1.0 + want.norm()),
                    "{ye} vs {want}"
                );
            }
        }
        // Eigenvalues, real, made complex: V D V† of a Hermitian complex tensor.
        let h = {
            let s = Arc::new(random_endomorphism::<S>(&mut rng));
            let x = AsyncArray::<Complex64, S>::random(Arc::clone(&s), seed ^ case ^ 3);
            for c in 0..s.sectors().len() {
                x.sector(c)
                    .unwrap()
                    .with_mut(|mut m| {
                        let y = Mat::from_fn(m.nrows(), m.ncols(), |i, j| {
                            (m[(i, j)] + m[(j, i)].conj()) * 0.5
                        });
                        m.copy_from(&y);
                    })
                    .unwrap();
            }
            x
        };
        let e = eigh(&h).unwrap();
        let dc = e.values.to_complex().unwrap();
        assert_eq!(
            dc.to_real(0.0).unwrap().to_dense().unwrap(),
            e.values.to_dense().unwrap()
        );
        for c in h.structure().sectors() {
            let (v, d, m) = (
                sector_of(&e.vectors, c.sector()),
                sector_of(&dc, c.sector()),
                sector_of(&h, c.sector()),
            );
            assert_close((&v * &d * v.adjoint()).as_ref(), m.as_ref(), "V D V†");
        }
    }
}

#[test]
fn singular_values_and_eigenvalues_meet_complex_tensors() {
    for_each_kind!(real_values_with_complex_cases);
}

#[test]
fn scaling_off_the_bond_leg_is_refused_and_enrolls_nothing() {
    let a = AsyncArray::<Complex64, U1>::random(u1_matrix(), 9);
    let f = svd(&a, &Truncation::none()).unwrap();
    let before = f.u.to_blocks().unwrap();
    for err in [
        f.s.scale_rows(&f.u).unwrap_err(),
        f.s.scale_columns(&f.vt).unwrap_err(),
        f.s.scale_columns(&a).unwrap_err(),
    ] {
        assert!(matches!(err, Error::NotOnBond { .. }), "{err}");
        assert!(err.to_string().contains("bond leg"), "{err}");
    }
    // A tensor whose domain has the bond leg's segments but the other direction.
    let flipped = AsyncArray::<Complex64, U1>::zeros(
        BlockStructure::new([f.s.leg().clone()], [f.s.leg().dual()], U1(0)).unwrap(),
    );
    assert!(matches!(
        f.s.scale_columns(&flipped).unwrap_err(),
        Error::NotOnBond { .. }
    ));
    assert_eq!(f.u.to_blocks().unwrap(), before);
}

/// Finite input whose factorization overflows (entries near the largest `f64`): what the
/// kernels compute is not finite, and that is a typed error too, never handed on.
#[test]
fn a_finite_input_whose_factors_overflow_is_a_typed_error() {
    let leg = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 1)]).unwrap();
    let s = BlockStructure::new([leg.clone()], [leg.dual()], U1(0)).unwrap();
    let a = AsyncArray::<f64, U1>::from_blocks(s, &[vec![1.5e308; 4], vec![1.0]]).unwrap();
    let err = svd(&a, &Truncation::none()).unwrap_err();
    assert!(
        matches!(err, Error::NonFinite { .. } | Error::NoConvergence { .. }),
        "{err}"
    );
    let label = U1(0);
    let name = label.to_string();
    let f = qr(&a).unwrap();
    assert_non_finite(&poison_of(&f.r, &label), "QR", &name);
    let g = lq(&a).unwrap();
    assert_non_finite(&poison_of(&g.l, &label), "LQ", &name);
    let e = eigh(&a).unwrap();
    assert_non_finite(
        &poison_of(&e.values, &label),
        "Hermitian eigendecomposition",
        &name,
    );
    // The other sector is computed.
    assert_eq!(sector_of(&f.r, &U1(1))[(0, 0)].abs(), 1.0);
}

/// Singular values whose squares leave `f64` (near `1e200` or `1e-200`): the truncation by
/// discarded weight keeps what it keeps for the same tensor at unit scale.
#[test]
fn truncation_by_weight_does_not_depend_on_the_scale() {
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let s = random_structure::<U1>(&mut rng);
    let a = AsyncArray::<f64, U1>::random(s, 5);
    let t = Truncation {
        max_discarded_weight: Some(0.05),
        ..Truncation::none()
    };
    let unit = svd(&a, &t).unwrap();
    for factor in [1e200, 1e-200] {
        let b = a.duplicate();
        b.scale(factor);
        let r = svd(&b, &t).unwrap();
        assert_eq!(
            r.s.leg(),
            unit.s.leg(),
            "kept dimensions at scale {factor:e}"
        );
        for i in 0..unit.s.leg().num_segments() {
            let (x, y) = (r.s.values(i).unwrap(), unit.s.values(i).unwrap());
            for (x, y) in x.iter().zip(y) {
                assert!(
                    (x / factor - y).abs() <= 1e-12 * y,
                    "{x} vs {y} at {factor:e}"
                );
            }
        }
    }
}
