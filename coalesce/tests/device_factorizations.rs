//! Factorizations of device tensors against the host's, on a GPU (feature `cuda`): SVD with
//! the same global truncation, QR, LQ and eigh of random U(1) matrices (some with a
//! presence mask), brought back to the host and checked as dense matrices. Without a driver,
//! cuSOLVER or a device each test prints `skipped: ...` and returns.
#![cfg(feature = "cuda")]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use tessera_backends::Host;
use tessera_backends::cuda::{Cuda, probe_cusolver, probe_nvrtc};
use tessera_blocks::testing::{or_skip_without_cuda, random_mask};
use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, Tensor, U1};
use tessera_coalesce::{Truncation, eigh, lq, qr, svd};

/// Device 0 with cuSOLVER and NVRTC, or `None` having said why the test is skipped.
fn gpu() -> Option<Cuda> {
    let cuda = or_skip_without_cuda(Cuda::open(0), "opening CUDA device 0")?;
    or_skip_without_cuda(probe_cusolver(), "loading cuSOLVER")?;
    or_skip_without_cuda(probe_nvrtc(), "loading NVRTC")?;
    Some(cuda)
}

/// A random U(1) matrix structure (one leg each side), a third of them masked.
fn matrix(rng: &mut ChaCha8Rng, square: bool) -> BlockStructure<U1> {
    let leg = |rng: &mut ChaCha8Rng| {
        let n = rng.gen_range(1..4);
        Leg::new(
            Direction::In,
            (0..n)
                .map(|q| (U1(q), rng.gen_range(1..9)))
                .collect::<Vec<_>>(),
        )
        .unwrap()
    };
    let rows = leg(rng);
    let cols = if square { rows.clone() } else { leg(rng) };
    let s = BlockStructure::new([rows], [cols.dual()], U1(0)).unwrap();
    if !square && rng.gen_bool(0.3) && s.num_allowed() > 1 {
        return s.with_present(&random_mask(rng, s.num_allowed())).unwrap();
    }
    s
}

/// A 2-leg host tensor as a dense column-major matrix: (rows, cols, values).
fn dense(t: &AsyncArray<f64, U1>) -> (usize, usize, Vec<f64>) {
    let legs = t.structure().legs();
    (legs[0].dim(), legs[1].dim(), t.to_dense().unwrap())
}

/// `a b` of dense column-major matrices.
fn matmul(a: &(usize, usize, Vec<f64>), b: &(usize, usize, Vec<f64>)) -> (usize, usize, Vec<f64>) {
    assert_eq!(a.1, b.0);
    let mut c = vec![0.0; a.0 * b.1];
    for j in 0..b.1 {
        for k in 0..a.1 {
            let bkj = b.2[k + j * b.0];
            for i in 0..a.0 {
                c[i + j * a.0] += a.2[i + k * a.0] * bkj;
            }
        }
    }
    (a.0, b.1, c)
}

fn assert_close(got: &(usize, usize, Vec<f64>), want: &(usize, usize, Vec<f64>), what: &str) {
    assert_eq!((got.0, got.1), (want.0, want.1), "{what}: shape");
    let scale = want.2.iter().fold(1.0_f64, |m, x| m.max(x.abs()));
    for (k, (g, w)) in got.2.iter().zip(&want.2).enumerate() {
        assert!(
            (g - w).abs() <= 1e-10 * scale,
            "{what}: element {k}: {g} vs {w}"
        );
    }
}

fn back<P: tessera_backends::Placement<f64>>(t: &Tensor<f64, U1, P>) -> AsyncArray<f64, U1> {
    t.to_placement(&Host).unwrap()
}

/// SVD: the device keeps the same singular values as the host under the same truncation,
/// and `U S V†` on the device is the host's truncated product.
#[test]
fn device_svd_matches_the_host() {
    let Some(gpu) = gpu() else { return };
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    for case in 0..30 {
        let s = Arc::new(matrix(&mut rng, false));
        let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), rng.r#gen());
        let t = Truncation::max_dim(rng.gen_range(1..12));
        let host = svd(&a, &t).unwrap();
        let device = svd(&a.to_placement(&gpu).unwrap(), &t).unwrap();
        let (hv, dv): (Vec<_>, Vec<_>) = (
            host.s.iter().map(|(q, v)| (*q, v.to_vec())).collect(),
            device.s.iter().map(|(q, v)| (*q, v.to_vec())).collect(),
        );
        assert_eq!(hv.len(), dv.len(), "case {case}: kept sectors");
        for ((hq, h), (dq, d)) in hv.iter().zip(&dv) {
            assert_eq!((hq, h.len()), (dq, d.len()), "case {case}");
            for (x, y) in h.iter().zip(d) {
                assert!(
                    (x - y).abs() <= 1e-10 * h[0].max(1.0),
                    "case {case}: {x} vs {y}"
                );
            }
        }
        let product = |u: &AsyncArray<f64, U1>, vt: &AsyncArray<f64, U1>, s: &[Vec<f64>]| {
            let (mut u, vt) = (dense(u), dense(vt));
            let values: Vec<f64> = s.iter().flatten().copied().collect();
            for (j, x) in values.iter().enumerate() {
                for i in 0..u.0 {
                    u.2[i + j * u.0] *= x;
                }
            }
            matmul(&u, &vt)
        };
        let hs: Vec<Vec<f64>> = hv.into_iter().map(|(_, v)| v).collect();
        let want = product(&host.u, &host.vt, &hs);
        let got = product(&back(&device.u), &back(&device.vt), &hs);
        assert_close(&got, &want, &format!("case {case}: U S V†"));
        assert!((host.discarded_weight - device.discarded_weight).abs() <= 1e-9);
    }
}

/// QR and LQ: the device's factors multiply back to the input (a masked input's absent
/// blocks as zeros), with the host's shapes.
#[test]
fn device_qr_and_lq_reconstruct_the_input() {
    let Some(gpu) = gpu() else { return };
    let mut rng = ChaCha8Rng::seed_from_u64(22);
    for case in 0..30 {
        let s = Arc::new(matrix(&mut rng, false));
        let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), rng.r#gen());
        let want = dense(&a);
        let d = a.to_placement(&gpu).unwrap();
        let f = qr(&d).unwrap();
        let got = matmul(&dense(&back(&f.q)), &dense(&back(&f.r)));
        assert_close(&got, &want, &format!("case {case}: Q R"));
        let f = lq(&d).unwrap();
        let got = matmul(&dense(&back(&f.l)), &dense(&back(&f.q)));
        assert_close(&got, &want, &format!("case {case}: L Q"));
    }
}

/// eigh: the device's eigenvalues are the host's, and `A V = V D`.
#[test]
fn device_eigh_matches_the_host() {
    let Some(gpu) = gpu() else { return };
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    for case in 0..30 {
        let s = Arc::new(matrix(&mut rng, true));
        let x = AsyncArray::<f64, U1>::random(Arc::clone(&s), rng.r#gen());
        // A symmetric matrix: x + x^T, sector by sector.
        let a = x.add(&x.adjoint().unwrap()).unwrap();
        let host = eigh(&a).unwrap();
        let device = eigh(&a.to_placement(&gpu).unwrap()).unwrap();
        assert_close(
            &dense(&back(&device.values)),
            &dense(&host.values),
            &format!("case {case}: eigenvalues"),
        );
        let (v, dm) = (dense(&back(&device.vectors)), dense(&back(&device.values)));
        let av = matmul(&dense(&a), &v);
        let vd = matmul(&v, &dm);
        assert_close(&av, &vd, &format!("case {case}: A V = V D"));
    }
}
