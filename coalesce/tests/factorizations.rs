//! Per-sector factorizations against faer's dense factorizations of the block-diagonal
//! matrix of the sector matrices, on seeded random structures over several sector kinds,
//! for `f64` and `Complex64`; and their misuse errors.

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
use tessera_coalesce::{Coalesce, Error, Truncation, eigh, lq, qr, svd};

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

fn re<T: Scalar>(x: T) -> f64 {
    x.to_c64().re
}

/// Checks one SVD of `a` with `t` against the dense SVD of the block-diagonal matrix;
/// returns how many values it kept.
fn check_svd<T: Field, S: AbelianSector>(a: &AsyncArray<T, S>, t: &Truncation) -> usize {
    let mats = sector_matrices(a);
    let r = svd(a, t).unwrap();
    let s = a.structure();
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
    for case in 0..25 {
        let s = Arc::new(random_structure::<S>(&mut rng));
        let a = AsyncArray::<T, S>::random(Arc::clone(&s), seed ^ case);
        let n: usize = s.sectors().iter().map(|c| c.rows().min(c.cols())).sum();
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
    for case in 0..25 {
        let s = Arc::new(random_structure::<S>(&mut rng));
        let a = AsyncArray::<T, S>::random(Arc::clone(&s), seed ^ case);
        let mats = sector_matrices(&a);
        let f = qr(&a).unwrap();
        let g = lq(&a).unwrap();
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
    for case in 0..25 {
        let s = Arc::new(random_endomorphism::<S>(&mut rng));
        let a = AsyncArray::<T, S>::random(Arc::clone(&s), seed ^ case);
        for c in 0..s.sectors().len() {
            a.sector(c)
                .unwrap()
                .with_mut(|mut m| {
                    let h = Mat::from_fn(m.nrows(), m.ncols(), |i, j| {
                        (m[(i, j)] + m[(j, i)].conj()) * T::from_f64(0.5)
                    });
                    m.copy_from(&h);
                })
                .unwrap();
        }
        let mats = sector_matrices(&a);
        let e = eigh(&a).unwrap();
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
    // A packed sector is not one matrix.
    let (masked, _) = (0..s.num_allowed())
        .find_map(|dropped| {
            let mut mask: BitVec = std::iter::repeat_n(true, s.num_allowed()).collect();
            mask.set(dropped, false);
            let m = s.with_present(&mask).unwrap();
            let packed = m.sectors().iter().position(|c| !c.is_dense());
            packed.map(|k| (m, k))
        })
        .unwrap();
    let p = AsyncArray::<f64, U1>::random(masked, 4);
    assert!(matches!(
        svd(&p, &Truncation::none()).unwrap_err(),
        Error::PackedSector { .. }
    ));
    assert!(matches!(qr(&p).unwrap_err(), Error::PackedSector { .. }));
    assert!(matches!(lq(&p).unwrap_err(), Error::PackedSector { .. }));
    assert!(matches!(eigh(&p).unwrap_err(), Error::PackedSector { .. }));
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
