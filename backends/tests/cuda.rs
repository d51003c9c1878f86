//! The CUDA backend against plain triple-loop references, on seeded random inputs.
//!
//! Every test that needs a device opens device 0 first and, on a machine with no driver (or no
//! device), prints `skipped: ...` and returns. `open_without_a_driver_is_a_typed_error` runs
//! everywhere: with no driver it checks that opening a device is the typed `Unavailable` error,
//! not a panic.

#![cfg(feature = "cuda")]

use tessera_backends::cuda::{
    BatchBuffers, CudaDevice, CudaError, CudaScalar, DeviceBuffer, GemmEntry, GemmGroup,
    IndependentGemm, LANES, MatLayout, Op, PermuteMove, StridedBatch, StridedView, VecLayout,
    probe, probe_grouped, probe_nvrtc, skinny_shape,
};

/// Device 0, or `None` (having said why the test is skipped) when there is no driver or device.
fn device() -> Option<CudaDevice> {
    match CudaDevice::open(0) {
        Ok(dev) => Some(dev),
        Err(e @ (CudaError::Unavailable { .. } | CudaError::MissingSymbol { .. })) => {
            println!("skipped: no CUDA driver ({e})");
            None
        }
        Err(e @ CudaError::NoDevice { .. }) => {
            println!("skipped: no CUDA device ({e})");
            None
        }
        Err(e) => panic!("opening CUDA device 0 failed: {e}"),
    }
}

#[test]
fn open_without_a_driver_is_a_typed_error() {
    match probe() {
        Err(CudaError::Unavailable { library, searched }) => {
            let err = CudaDevice::open(0).unwrap_err();
            assert!(
                matches!(&err, CudaError::Unavailable { library: l, .. } if *l == library),
                "{err}"
            );
            assert_eq!(CudaDevice::count().unwrap_err(), err);
            assert!(!searched.is_empty());
            let message = err.to_string();
            assert!(message.starts_with("expected the "), "{message}");
            assert!(message.contains(&searched[0]), "{message}");
            println!("no CUDA driver here: open(0) gave `{message}`");
        }
        Err(e @ CudaError::MissingSymbol { .. }) => {
            assert_eq!(CudaDevice::open(0).unwrap_err(), e);
            println!("old CUDA libraries here: open(0) gave `{e}`");
        }
        Ok(()) => {
            // With a driver, an ordinal past the last device is the typed NoDevice.
            let count = CudaDevice::count().unwrap();
            let err = CudaDevice::open(count).unwrap_err();
            assert_eq!(
                err,
                CudaError::NoDevice {
                    ordinal: count,
                    count
                }
            );
            println!("{count} CUDA device(s); open({count}) gave `{err}`");
        }
        Err(e) => panic!("the probe gave an error it never makes: {e}"),
    }
}

/// splitmix64: seeded, reproducible inputs in [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

trait Real: CudaScalar {
    fn of(x: f64) -> Self;
    fn to(self) -> f64;
    /// Tolerance per unit of k.
    const TOL: f64;
}

impl Real for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn to(self) -> f64 {
        f64::from(self)
    }
    const TOL: f64 = 1e-5;
}

impl Real for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn to(self) -> f64 {
        self
    }
    const TOL: f64 = 1e-13;
}

fn random<T: Real>(rng: &mut Rng, len: usize) -> Vec<T> {
    (0..len).map(|_| T::of(rng.next())).collect()
}

/// Element (i, j) of `op(stored)`.
fn at<T: Real>(data: &[T], l: MatLayout, op: Op, i: usize, j: usize) -> f64 {
    let (r, c) = match op {
        Op::Identity => (i, j),
        Op::Transpose => (j, i),
    };
    data[l.offset + r + c * l.ld].to()
}

/// `C <- alpha op(A) op(B) + beta C` by the definition (beta = 0 does not read C).
#[allow(clippy::too_many_arguments)]
fn reference<T: Real>(
    c: &mut [f64],
    lc: MatLayout,
    beta: f64,
    a: &[T],
    la: MatLayout,
    op_a: Op,
    b: &[T],
    lb: MatLayout,
    op_b: Op,
    alpha: f64,
    k: usize,
) {
    for j in 0..lc.cols {
        for i in 0..lc.rows {
            let sum: f64 = (0..k)
                .map(|l| at(a, la, op_a, i, l) * at(b, lb, op_b, l, j))
                .sum();
            let cij = &mut c[lc.offset + i + j * lc.ld];
            *cij = if beta == 0.0 {
                alpha * sum
            } else {
                alpha * sum + beta * *cij
            };
        }
    }
}

fn stored(rows: usize, cols: usize, op: Op) -> (usize, usize) {
    match op {
        Op::Identity => (rows, cols),
        Op::Transpose => (cols, rows),
    }
}

/// A padded layout: a few elements of offset and a leading dim past the rows.
fn padded(rows: usize, cols: usize, seed: usize) -> MatLayout {
    MatLayout {
        offset: 1 + seed % 3,
        rows,
        cols,
        ld: rows + seed % 4,
    }
}

fn assert_close<T: Real>(got: &[T], want: &[f64], k: usize, what: &str) {
    let tol = T::TOL * (k.max(1) as f64) * 4.0;
    for (idx, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g = g.to();
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()),
            "{what}: element {idx} is {g}, expected {w} (tolerance {tol})"
        );
    }
}

fn check_gemm<T: Real>(dev: &CudaDevice, m: usize, n: usize, k: usize, seed: u64) {
    let mut rng = Rng(seed);
    for (case, (op_a, op_b)) in [
        (Op::Identity, Op::Identity),
        (Op::Transpose, Op::Identity),
        (Op::Identity, Op::Transpose),
        (Op::Transpose, Op::Transpose),
    ]
    .into_iter()
    .enumerate()
    {
        for beta in [0.0, 0.75] {
            let (ar, ac) = stored(m, k, op_a);
            let (br, bc) = stored(k, n, op_b);
            let (la, lb, lc) = (
                padded(ar, ac, case),
                padded(br, bc, case + 1),
                padded(m, n, case + 2),
            );
            let len = |l: MatLayout| l.offset + l.extent().unwrap() + 2;
            let a: Vec<T> = random(&mut rng, len(la));
            let b: Vec<T> = random(&mut rng, len(lb));
            let mut c: Vec<T> = random(&mut rng, len(lc));
            if beta == 0.0 {
                // beta = 0 must not read C.
                for j in 0..n {
                    for i in 0..m {
                        c[lc.offset + i + j * lc.ld] = T::of(f64::NAN);
                    }
                }
            }
            let alpha = 1.25;
            let mut want: Vec<f64> = c.iter().map(|&x| x.to()).collect();
            reference(&mut want, lc, beta, &a, la, op_a, &b, lb, op_b, alpha, k);

            let da = dev.upload(&a).unwrap();
            let db = dev.upload(&b).unwrap();
            let mut dc = dev.upload(&c).unwrap();
            dev.gemm(
                dc.mat_mut(lc),
                T::of(beta),
                da.mat(la),
                op_a,
                db.mat(lb),
                op_b,
                T::of(alpha),
            )
            .unwrap();
            let got = dev.download(&dc).unwrap();
            let what = format!("{} gemm {m}x{n}x{k} {op_a:?} {op_b:?} beta {beta}", T::NAME);
            assert_close(&got, &want, k, &what);
        }
    }
}

#[test]
fn gemm_matches_the_definition_for_every_transpose_and_beta() {
    let Some(dev) = device() else { return };
    println!("device 0: {}", dev.name().unwrap());
    for (m, n, k, seed) in [
        (5, 7, 3, 1),
        (1, 1, 1, 2),
        (64, 48, 80, 3),
        (130, 67, 129, 4),
    ] {
        check_gemm::<f32>(&dev, m, n, k, seed);
        check_gemm::<f64>(&dev, m, n, k, seed + 100);
    }
}

/// k = 0: C <- beta C (and 0 for beta = 0), as BLAS defines it.
#[test]
fn an_empty_inner_dim_scales_c() {
    let Some(dev) = device() else { return };
    let a = dev.alloc_zeros::<f64>(0).unwrap();
    let b = dev.alloc_zeros::<f64>(0).unwrap();
    let mut c = dev.upload(&[1.0, 2.0, 3.0, 4.0]).unwrap();
    let lc = MatLayout::contiguous(2, 2);
    let (la, lb) = (MatLayout::contiguous(2, 0), MatLayout::contiguous(0, 2));
    dev.gemm(
        c.mat_mut(lc),
        0.5,
        a.mat(la),
        Op::Identity,
        b.mat(lb),
        Op::Identity,
        1.0,
    )
    .unwrap();
    assert_eq!(dev.download(&c).unwrap(), vec![0.5, 1.0, 1.5, 2.0]);
    dev.gemm(
        c.mat_mut(lc),
        0.0,
        a.mat(la),
        Op::Identity,
        b.mat(lb),
        Op::Identity,
        1.0,
    )
    .unwrap();
    assert_eq!(dev.download(&c).unwrap(), vec![0.0; 4]);
}

fn check_batched<T: Real>(dev: &CudaDevice, m: usize, n: usize, k: usize, count: usize, seed: u64) {
    let mut rng = Rng(seed);
    for (op_a, op_b, share_b) in [
        (Op::Identity, Op::Identity, false),
        (Op::Transpose, Op::Identity, false),
        (Op::Identity, Op::Transpose, true),
        (Op::Transpose, Op::Transpose, false),
    ] {
        let (ar, ac) = stored(m, k, op_a);
        let (br, bc) = stored(k, n, op_b);
        let (la, lb, lc) = (padded(ar, ac, 1), padded(br, bc, 2), padded(m, n, 3));
        let stride = |l: MatLayout, pad: usize| l.extent().unwrap() + pad;
        let batch = StridedBatch {
            count,
            stride_a: stride(la, 3),
            stride_b: if share_b { 0 } else { stride(lb, 1) },
            stride_c: stride(lc, 2),
        };
        let len = |l: MatLayout, s: usize| l.offset + (count - 1) * s + l.extent().unwrap();
        let a: Vec<T> = random(&mut rng, len(la, batch.stride_a));
        let b: Vec<T> = random(&mut rng, len(lb, batch.stride_b));
        let c: Vec<T> = random(&mut rng, len(lc, batch.stride_c));
        let (alpha, beta) = (0.5, -1.5);
        let mut want: Vec<f64> = c.iter().map(|&x| x.to()).collect();
        for i in 0..count {
            let shift = |l: MatLayout, s: usize| MatLayout {
                offset: l.offset + i * s,
                ..l
            };
            reference(
                &mut want,
                shift(lc, batch.stride_c),
                beta,
                &a,
                shift(la, batch.stride_a),
                op_a,
                &b,
                shift(lb, batch.stride_b),
                op_b,
                alpha,
                k,
            );
        }
        let da = dev.upload(&a).unwrap();
        let db = dev.upload(&b).unwrap();
        let mut dc = dev.upload(&c).unwrap();
        dev.gemm_strided_batched(
            batch,
            dc.mat_mut(lc),
            T::of(beta),
            da.mat(la),
            op_a,
            db.mat(lb),
            op_b,
            T::of(alpha),
        )
        .unwrap();
        let got = dev.download(&dc).unwrap();
        let what = format!(
            "{} batched gemm {count} x {m}x{n}x{k} {op_a:?} {op_b:?}",
            T::NAME
        );
        assert_close(&got, &want, k, &what);
    }
}

#[test]
fn strided_batched_gemm_matches_one_gemm_per_member() {
    let Some(dev) = device() else { return };
    for (m, n, k, count, seed) in [(3, 4, 5, 1, 7), (8, 6, 7, 5, 8), (65, 33, 40, 9, 9)] {
        check_batched::<f32>(&dev, m, n, k, count, seed);
        check_batched::<f64>(&dev, m, n, k, count, seed + 100);
    }
}

#[test]
fn copies_round_trip_and_refuse_unequal_lengths() {
    let Some(dev) = device() else { return };
    let mut rng = Rng(11);
    let host: Vec<f32> = random(&mut rng, 1000);
    let mut buf: DeviceBuffer<f32> = dev.upload(&host).unwrap();
    assert_eq!((buf.len(), buf.ordinal()), (1000, 0));
    assert_eq!(dev.download(&buf).unwrap(), host);
    let twice: Vec<f32> = host.iter().map(|x| 2.0 * x).collect();
    dev.copy_to_device(&twice, &mut buf).unwrap();
    let mut back = vec![0.0_f32; 1000];
    dev.copy_to_host(&buf, &mut back).unwrap();
    assert_eq!(back, twice);
    assert_eq!(
        dev.copy_to_device(&twice[..999], &mut buf),
        Err(CudaError::LengthMismatch {
            what: "host to device",
            expected: 1000,
            given: 999
        })
    );
    assert!(matches!(
        dev.copy_to_host(&buf, &mut back[..10]),
        Err(CudaError::LengthMismatch { .. })
    ));
    let empty = dev.upload::<f64>(&[]).unwrap();
    assert!(empty.is_empty());
    assert_eq!(dev.download(&empty).unwrap(), Vec::<f64>::new());
    let zeros = dev.alloc_zeros::<f64>(17).unwrap();
    assert_eq!(dev.download(&zeros).unwrap(), vec![0.0; 17]);
}

#[test]
fn bad_layouts_are_refused_and_nothing_is_written() {
    let Some(dev) = device() else { return };
    let a = dev.upload(&[1.0_f64; 12]).unwrap();
    let b = dev.upload(&[1.0_f64; 12]).unwrap();
    let mut c = dev.upload(&[7.0_f64; 12]).unwrap();
    let l34 = MatLayout::contiguous(3, 4);
    let l43 = MatLayout::contiguous(4, 3);
    let l33 = MatLayout::contiguous(3, 3);
    // Shape: op(A) is 3 x 4 and op(B) 3 x 4.
    let err = dev
        .gemm(
            c.mat_mut(l33),
            0.0,
            a.mat(l34),
            Op::Identity,
            b.mat(l34),
            Op::Identity,
            1.0,
        )
        .unwrap_err();
    assert!(matches!(err, CudaError::Shape(_)), "{err}");
    // Out of bounds: A from offset 1 needs 13 elements.
    let err = dev
        .gemm(
            c.mat_mut(l33),
            0.0,
            a.mat(MatLayout { offset: 1, ..l34 }),
            Op::Identity,
            b.mat(l43),
            Op::Identity,
            1.0,
        )
        .unwrap_err();
    assert_eq!(
        err,
        CudaError::OutOfBounds {
            operand: "A",
            needed: 13,
            len: 12
        }
    );
    // Leading dim under the rows.
    let err = dev
        .gemm(
            c.mat_mut(MatLayout { ld: 2, ..l33 }),
            0.0,
            a.mat(l34),
            Op::Identity,
            b.mat(l43),
            Op::Identity,
            1.0,
        )
        .unwrap_err();
    assert!(
        matches!(err, CudaError::LeadingDim { operand: "C", .. }),
        "{err}"
    );
    // Batched C matrices that would overlap.
    let l22 = MatLayout::contiguous(2, 2);
    let batch = StridedBatch {
        count: 2,
        stride_a: 4,
        stride_b: 4,
        stride_c: 3,
    };
    let err = dev
        .gemm_strided_batched(
            batch,
            c.mat_mut(l22),
            0.0,
            a.mat(l22),
            Op::Identity,
            b.mat(l22),
            Op::Identity,
            1.0,
        )
        .unwrap_err();
    assert_eq!(
        err,
        CudaError::OverlappingBatch {
            stride: 3,
            extent: 4
        }
    );
    assert_eq!(dev.download(&c).unwrap(), vec![7.0; 12]);
}

/// The elements of a strided vector, as f64.
fn gather<T: Real>(data: &[T], l: VecLayout) -> Vec<f64> {
    (0..l.len)
        .map(|i| data[l.offset + i * l.inc].to())
        .collect()
}

fn check_level1<T: Real>(dev: &CudaDevice, n: usize, seed: u64) {
    let mut rng = Rng(seed);
    let lx = VecLayout {
        offset: 1,
        len: n,
        inc: 2,
    };
    let ly = VecLayout {
        offset: 3,
        len: n,
        inc: 3,
    };
    let len = |l: VecLayout| l.offset + l.extent().unwrap() + 2;
    let x: Vec<T> = random(&mut rng, len(lx));
    let y: Vec<T> = random(&mut rng, len(ly));
    let dx = dev.upload(&x).unwrap();
    let mut dy = dev.upload(&y).unwrap();
    let what = |op: &str| format!("{} {op} n = {n}", T::NAME);

    // nrm2 and dot against the definition, on the host and into device memory. Tolerances:
    // a few units of T::TOL (about 100 ulps) times the sum of the terms' magnitudes, which
    // bounds a tree reduction's rounding and is far below what a wrong element or stride
    // would change.
    let (gx, gy) = (gather(&x, lx), gather(&y, ly));
    let squares: f64 = gx.iter().map(|v| v * v).sum();
    let norm = squares.sqrt();
    let dot: f64 = gx.iter().zip(&gy).map(|(a, b)| a * b).sum();
    let dot_tol = 4.0 * T::TOL * gx.iter().zip(&gy).map(|(a, b)| (a * b).abs()).sum::<f64>();
    let norm_tol = 4.0 * T::TOL * norm;
    let close = |got: T, want: f64, tol: f64, op: &str| {
        let got = got.to();
        assert!(
            (got - want).abs() <= tol,
            "{}: {got}, expected {want} (tolerance {tol})",
            what(op)
        );
    };
    close(dev.nrm2(dx.vec(lx)).unwrap(), norm, norm_tol, "nrm2");
    close(
        dev.dot(dx.vec(lx), dy.vec(ly)).unwrap(),
        dot,
        dot_tol,
        "dot",
    );
    // Device results: several into one buffer with no host wait between, then one copy.
    let mut results = dev.upload(&[T::of(9.0); 4]).unwrap();
    dev.nrm2_into(dx.vec(lx), &mut results, 1).unwrap();
    dev.dot_into(dx.vec(lx), dy.vec(ly), &mut results, 3)
        .unwrap();
    dev.dot_into(dx.vec(lx), dx.vec(lx), &mut results, 0)
        .unwrap();
    let got = dev.download(&results).unwrap();
    close(got[0], squares, 4.0 * T::TOL * squares, "dot_into (x . x)");
    close(got[1], norm, norm_tol, "nrm2_into");
    assert_eq!(
        got[2].to(),
        9.0,
        "{}: an untouched slot changed",
        what("nrm2_into")
    );
    close(got[3], dot, dot_tol, "dot_into");

    // axpy then scal, stream-ordered, then one download.
    let (alpha, scale) = (-0.75, 1.5);
    dev.axpy(T::of(alpha), dx.vec(lx), dy.vec_mut(ly)).unwrap();
    dev.scal(T::of(scale), dy.vec_mut(ly)).unwrap();
    let mut want: Vec<f64> = y.iter().map(|&v| v.to()).collect();
    for i in 0..n {
        let yi = &mut want[ly.offset + i * ly.inc];
        *yi = scale * (*yi + alpha * x[lx.offset + i * lx.inc].to());
    }
    let got = dev.download(&dy).unwrap();
    assert_close(&got, &want, 2, &what("axpy then scal"));

    // Misuse: y one element short of x, y past its buffer: refused, y untouched.
    let short = VecLayout { len: n + 1, ..lx };
    let before = dev.download(&dy).unwrap();
    if short.offset + short.extent().unwrap() <= dx.len() {
        let err = dev
            .axpy(T::of(1.0), dx.vec(short), dy.vec_mut(ly))
            .unwrap_err();
        assert!(
            matches!(err, CudaError::VectorLengths { operand: "y", .. }),
            "{err}"
        );
    }
    let past = VecLayout {
        offset: dy.len(),
        ..ly
    };
    let err = dev
        .axpy(T::of(1.0), dx.vec(lx), dy.vec_mut(past))
        .unwrap_err();
    assert!(
        matches!(err, CudaError::OutOfBounds { operand: "y", .. }),
        "{err}"
    );
    let err = dev
        .scal(T::of(0.0), dy.vec_mut(VecLayout { inc: 0, ..ly }))
        .unwrap_err();
    assert_eq!(err, CudaError::ZeroIncrement { operand: "x" });
    assert_eq!(dev.download(&dy).unwrap(), before);
}

#[test]
fn level1_matches_host_references() {
    let Some(dev) = device() else { return };
    for (n, seed) in [(1, 21), (7, 22), (1000, 23), (100_003, 24)] {
        check_level1::<f32>(&dev, n, seed);
        check_level1::<f64>(&dev, n, seed + 100);
    }
}

/// Empty vectors: axpy and scal do nothing, the reductions give 0 (written, not skipped).
#[test]
fn level1_on_empty_vectors() {
    let Some(dev) = device() else { return };
    let x = dev.upload(&[1.0_f64, 2.0]).unwrap();
    let mut y = dev.upload(&[3.0_f64, 4.0]).unwrap();
    let empty = VecLayout::contiguous(0);
    dev.axpy(2.0, x.vec(empty), y.vec_mut(empty)).unwrap();
    dev.scal(0.0, y.vec_mut(empty)).unwrap();
    assert_eq!(dev.download(&y).unwrap(), vec![3.0, 4.0]);
    assert_eq!(dev.nrm2(x.vec(empty)).unwrap(), 0.0);
    assert_eq!(dev.dot(x.vec(empty), x.vec(empty)).unwrap(), 0.0);
    let mut r = dev.upload(&[5.0_f64, 6.0]).unwrap();
    dev.dot_into(x.vec(empty), x.vec(empty), &mut r, 1).unwrap();
    assert_eq!(dev.download(&r).unwrap(), vec![5.0, 0.0]);
}

/// With two devices, a vector of one used on the other is refused before any call.
#[test]
fn level1_refuses_a_buffer_of_another_device() {
    let Some(dev) = device() else { return };
    if CudaDevice::count().unwrap() < 2 {
        println!("skipped: one CUDA device (the pure check covers this everywhere)");
        return;
    }
    let other = CudaDevice::open(1).unwrap();
    let x = other.upload(&[1.0_f32; 4]).unwrap();
    let mut y = dev.upload(&[2.0_f32; 4]).unwrap();
    let err = dev.axpy(1.0, x.as_vec(), y.as_vec_mut()).unwrap_err();
    assert_eq!(
        err,
        CudaError::WrongDevice {
            operand: "x",
            expected: 0,
            given: 1
        }
    );
    assert_eq!(dev.download(&y).unwrap(), vec![2.0; 4]);
}

/// Places matrices one after another in a buffer, with a gap of `seed % 3` before each.
struct Packer {
    next: usize,
}

impl Packer {
    fn place(&mut self, rows: usize, cols: usize, ld_pad: usize, seed: usize) -> MatLayout {
        let l = MatLayout {
            offset: self.next + seed % 3,
            rows,
            cols,
            ld: rows.max(1) + ld_pad,
        };
        self.next = l.offset + l.extent().unwrap();
        l
    }
}

/// One group's description for the tests: shape, ops, scalars and member count.
#[derive(Clone, Copy)]
struct Spec {
    m: usize,
    n: usize,
    k: usize,
    op_a: Op,
    op_b: Op,
    alpha: f64,
    beta: f64,
    count: usize,
}

/// Entries for `specs`, group by group, with A and B packed (in reverse order of entries, so
/// offsets do not follow the entry order) and every C a block of one column-major matrix of
/// leading dim `c_ld`, blocks side by side: C's extents interleave while their elements do
/// not. Returns the entries per group and the lengths of the three buffers.
fn layout_groups(specs: &[Spec]) -> (Vec<Vec<GemmEntry>>, [usize; 3]) {
    let c_ld = specs.iter().map(|s| s.m).max().unwrap_or(1) + 1;
    let (mut pa, mut pb) = (Packer { next: 0 }, Packer { next: 0 });
    let mut col = 0;
    let mut groups = Vec::new();
    for (g, s) in specs.iter().enumerate().rev() {
        let mut entries = Vec::new();
        for i in (0..s.count).rev() {
            let seed = g + i;
            let (ar, ac) = stored(s.m, s.k, s.op_a);
            let (br, bc) = stored(s.k, s.n, s.op_b);
            // Leading dims vary between groups, never inside one (cuBLAS takes one per group).
            let a = pa.place(ar, ac, g % 2, seed);
            let b = pb.place(br, bc, (g + 1) % 2, seed + 1);
            // C: rows from (seed % 2), columns from `col` of the big matrix.
            let c = MatLayout {
                offset: seed % 2 + col * c_ld,
                rows: s.m,
                cols: s.n,
                ld: c_ld,
            };
            col += s.n + 1;
            entries.push(GemmEntry { a, b, c });
        }
        entries.reverse();
        groups.push(entries);
    }
    groups.reverse();
    (groups, [pa.next + 2, pb.next + 2, col * c_ld + 1])
}

fn reference_groups<T: Real>(
    want: &mut [f64],
    a: &[T],
    b: &[T],
    specs: &[Spec],
    groups: &[Vec<GemmEntry>],
) {
    for (s, entries) in specs.iter().zip(groups) {
        for e in entries {
            reference(
                want, e.c, s.beta, a, e.a, s.op_a, b, e.b, s.op_b, s.alpha, s.k,
            );
        }
    }
}

fn to_groups<'a, T: Real>(specs: &[Spec], groups: &'a [Vec<GemmEntry>]) -> Vec<GemmGroup<'a, T>> {
    specs
        .iter()
        .zip(groups)
        .map(|(s, entries)| GemmGroup {
            op_a: s.op_a,
            op_b: s.op_b,
            alpha: T::of(s.alpha),
            beta: T::of(s.beta),
            entries,
        })
        .collect()
}

fn check_pointer_batched<T: Real>(dev: &CudaDevice, m: usize, n: usize, k: usize, seed: u64) {
    let mut rng = Rng(seed);
    for (op_a, op_b) in [
        (Op::Identity, Op::Identity),
        (Op::Transpose, Op::Identity),
        (Op::Identity, Op::Transpose),
        (Op::Transpose, Op::Transpose),
    ] {
        let spec = Spec {
            m,
            n,
            k,
            op_a,
            op_b,
            alpha: 1.5,
            beta: -0.5,
            count: 7,
        };
        let (groups, [la, lb, lc]) = layout_groups(&[spec]);
        let a: Vec<T> = random(&mut rng, la);
        let b: Vec<T> = random(&mut rng, lb);
        let c: Vec<T> = random(&mut rng, lc);
        let mut want: Vec<f64> = c.iter().map(|&x| x.to()).collect();
        reference_groups(&mut want, &a, &b, &[spec], &groups);
        let (da, db) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
        let mut dc = dev.upload(&c).unwrap();
        let group = to_groups::<T>(&[spec], &groups)[0];
        dev.gemm_batched(
            BatchBuffers {
                c: &mut dc,
                a: &da,
                b: &db,
            },
            group,
        )
        .unwrap();
        let got = dev.download(&dc).unwrap();
        let what = format!(
            "{} pointer-array batch 7 x {m}x{n}x{k} {op_a:?} {op_b:?}",
            T::NAME
        );
        assert_close(&got, &want, k, &what);
    }
}

#[test]
fn pointer_array_batched_gemm_matches_the_definition() {
    let Some(dev) = device() else { return };
    for (m, n, k, seed) in [(1, 1, 1, 31), (5, 3, 4, 32), (40, 33, 65, 33)] {
        check_pointer_batched::<f32>(&dev, m, n, k, seed);
        check_pointer_batched::<f64>(&dev, m, n, k, seed + 100);
    }
}

/// Many batched calls back to back with no host wait: each call's pointer arrays are freed
/// (stream-ordered) when it returns, while the GEMMs may still be queued; the sums must come
/// out right.
#[test]
fn back_to_back_batched_calls_accumulate_in_stream_order() {
    let Some(dev) = device() else { return };
    let spec = Spec {
        m: 16,
        n: 12,
        k: 20,
        op_a: Op::Identity,
        op_b: Op::Transpose,
        alpha: 1.0,
        beta: 1.0,
        count: 33,
    };
    let (groups, [la, lb, lc]) = layout_groups(&[spec]);
    let mut rng = Rng(41);
    let a: Vec<f64> = random(&mut rng, la);
    let b: Vec<f64> = random(&mut rng, lb);
    let c: Vec<f64> = random(&mut rng, lc);
    let mut want = c.clone();
    let rounds = 25;
    for _ in 0..rounds {
        reference_groups(&mut want, &a, &b, &[spec], &groups);
    }
    let (da, db) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
    let mut dc = dev.upload(&c).unwrap();
    for _ in 0..rounds {
        let group = to_groups::<f64>(&[spec], &groups)[0];
        dev.gemm_batched(
            BatchBuffers {
                c: &mut dc,
                a: &da,
                b: &db,
            },
            group,
        )
        .unwrap();
    }
    let got = dev.download(&dc).unwrap();
    assert_close(&got, &want, spec.k * rounds, "25 batched calls, beta = 1");
}

#[test]
fn grouped_gemm_matches_the_definition() {
    let Some(dev) = device() else { return };
    if let Err(e) = probe_grouped() {
        println!("skipped: {e}");
        return;
    }
    let specs = grouped_specs();
    for seed in [51_u64, 52] {
        check_grouped::<f32>(&dev, &specs, seed);
        check_grouped::<f64>(&dev, &specs, seed + 100);
    }
}

/// Groups of varied shapes, ops and scalars, with an empty C, an empty inner dim, a group with
/// no entries, and a beta of zero (C not read).
fn grouped_specs() -> [Spec; 6] {
    [
        Spec {
            m: 7,
            n: 5,
            k: 3,
            op_a: Op::Identity,
            op_b: Op::Identity,
            alpha: 1.0,
            beta: 0.0,
            count: 4,
        },
        Spec {
            m: 0,
            n: 4,
            k: 2,
            op_a: Op::Identity,
            op_b: Op::Identity,
            alpha: 1.0,
            beta: 0.0,
            count: 2,
        },
        Spec {
            m: 64,
            n: 48,
            k: 33,
            op_a: Op::Transpose,
            op_b: Op::Identity,
            alpha: -2.0,
            beta: 0.25,
            count: 3,
        },
        Spec {
            m: 3,
            n: 9,
            k: 0,
            op_a: Op::Identity,
            op_b: Op::Transpose,
            alpha: 1.0,
            beta: 3.0,
            count: 2,
        },
        Spec {
            m: 20,
            n: 1,
            k: 100,
            op_a: Op::Transpose,
            op_b: Op::Transpose,
            alpha: 0.5,
            beta: 1.0,
            count: 0,
        },
        Spec {
            m: 1,
            n: 30,
            k: 17,
            op_a: Op::Identity,
            op_b: Op::Transpose,
            alpha: 0.75,
            beta: -1.0,
            count: 5,
        },
    ]
}

fn check_grouped<T: Real>(dev: &CudaDevice, specs: &[Spec], seed: u64) {
    let (groups, [la, lb, lc]) = layout_groups(specs);
    let mut rng = Rng(seed);
    let a: Vec<T> = random(&mut rng, la);
    let b: Vec<T> = random(&mut rng, lb);
    let mut c: Vec<T> = random(&mut rng, lc);
    // beta = 0 must not read C.
    for (s, entries) in specs.iter().zip(&groups) {
        if s.beta == 0.0 {
            for e in entries {
                for j in 0..e.c.cols {
                    for i in 0..e.c.rows {
                        c[e.c.offset + i + j * e.c.ld] = T::of(f64::NAN);
                    }
                }
            }
        }
    }
    let mut want: Vec<f64> = c.iter().map(|&x| x.to()).collect();
    reference_groups(&mut want, &a, &b, specs, &groups);
    let (da, db) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
    let mut dc = dev.upload(&c).unwrap();
    dev.gemm_grouped(
        BatchBuffers {
            c: &mut dc,
            a: &da,
            b: &db,
        },
        &to_groups::<T>(specs, &groups),
    )
    .unwrap();
    let got = dev.download(&dc).unwrap();
    let what = format!("{} grouped GEMM, seed {seed}", T::NAME);
    assert_close(&got, &want, 100, &what);
}

/// Independent GEMMs (every entry of the grouped specs, each a call of its own on a lane,
/// more of them than lanes) match the definition, and calls back to back with beta = 1
/// accumulate in stream order: each call's lanes start after the call before it and the
/// device's stream (the download) waits for all of them.
#[test]
fn independent_gemms_on_lanes_match_the_definition_in_stream_order() {
    let Some(dev) = device() else { return };
    fn run<T: Real>(dev: &CudaDevice, seed: u64) {
        let specs = grouped_specs();
        let (groups, [la, lb, lc]) = layout_groups(&specs);
        let gemms: Vec<IndependentGemm<T>> = specs
            .iter()
            .zip(&groups)
            .flat_map(|(s, entries)| {
                entries.iter().map(move |&entry| IndependentGemm {
                    entry,
                    batch: StridedBatch::ONE,
                    op_a: s.op_a,
                    op_b: s.op_b,
                    alpha: T::of(s.alpha),
                    beta: T::of(s.beta),
                })
            })
            .collect();
        // And a strided batch of 3 after everything else in each buffer.
        let (m, n, k) = (8, 6, 5);
        let at = |offset, rows, cols| MatLayout {
            offset,
            ..MatLayout::contiguous(rows, cols)
        };
        let strided = IndependentGemm {
            entry: GemmEntry {
                a: at(la, m, k),
                b: at(lb, k, n),
                c: at(lc, m, n),
            },
            batch: StridedBatch {
                count: 3,
                stride_a: m * k,
                stride_b: k * n,
                stride_c: m * n + 1,
            },
            op_a: Op::Identity,
            op_b: Op::Identity,
            alpha: T::of(0.5),
            beta: T::of(1.0),
        };
        let gemms = [gemms, vec![strided]].concat();
        assert!(gemms.len() > LANES);
        let (la, lb, lc) = (la + 3 * m * k, lb + 3 * k * n, lc + 3 * (m * n + 1));
        let mut rng = Rng(seed);
        let a: Vec<T> = random(&mut rng, la);
        let b: Vec<T> = random(&mut rng, lb);
        let c: Vec<T> = random(&mut rng, lc);
        let (da, db) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
        let mut dc = dev.upload(&c).unwrap();
        let mut want: Vec<f64> = c.iter().map(|&x| x.to()).collect();
        let rounds = 12;
        for _ in 0..rounds {
            reference_groups(&mut want, &a, &b, &specs, &groups);
            for i in 0..3 {
                let e = strided.entry;
                let step = |l: MatLayout, by: usize| at(l.offset + i * by, l.rows, l.cols);
                reference(
                    &mut want,
                    step(e.c, strided.batch.stride_c),
                    1.0,
                    &a,
                    step(e.a, strided.batch.stride_a),
                    Op::Identity,
                    &b,
                    step(e.b, strided.batch.stride_b),
                    Op::Identity,
                    0.5,
                    k,
                );
            }
            dev.gemm_independent(
                BatchBuffers {
                    c: &mut dc,
                    a: &da,
                    b: &db,
                },
                &gemms,
            )
            .unwrap();
        }
        let got = dev.download(&dc).unwrap();
        let what = format!("{} independent GEMMs, {rounds} rounds", T::NAME);
        assert_close(&got, &want, 100 * rounds, &what);
        // One C twice: refused, and nothing written.
        let clash = [gemms[0], gemms[0]];
        let bufs = BatchBuffers {
            c: &mut dc,
            a: &da,
            b: &db,
        };
        assert!(matches!(
            dev.gemm_independent(bufs, &clash),
            Err(CudaError::OverlappingOutputs { .. })
        ));
        let after = dev.download(&dc).unwrap();
        assert!(
            after
                .iter()
                .zip(&got)
                .all(|(x, y)| x.to().to_bits() == y.to().to_bits())
        );
    }
    for seed in [61_u64, 62] {
        run::<f32>(&dev, seed);
        run::<f64>(&dev, seed + 100);
    }
}

/// Skinny products (a few rows and inner dim against thousands of columns, or the transpose
/// of that) run through the skinny kernels: they match the definition, on lanes
/// (one call) and on the device's stream (a call each), beta = 0 never reads C, and the
/// padding between C's columns is left alone.
#[test]
fn skinny_products_match_the_definition() {
    let Some(dev) = device() else { return };
    fn run<T: Real>(dev: &CudaDevice, seed: u64) {
        // (m, n, k, beta)
        let shapes = [
            (5, 5000, 3, 0.0),
            (8, 4100, 8, 0.5),
            (6000, 7, 4, -1.0),
            (4097, 8, 8, 0.0),
            (3, 4096, 0, 2.0),
        ];
        let (mut pa, mut pb, mut pc) = (Packer { next: 0 }, Packer { next: 0 }, Packer { next: 0 });
        let gemms: Vec<IndependentGemm<T>> = (shapes.iter().enumerate())
            .map(|(i, &(m, n, k, beta))| {
                assert!(skinny_shape(m, n, k).is_some(), "{m} x {n} x {k}");
                IndependentGemm {
                    entry: GemmEntry {
                        a: pa.place(m, k, 1, i),
                        b: pb.place(k, n, 2, i),
                        c: pc.place(m, n, 1, i),
                    },
                    batch: StridedBatch::ONE,
                    op_a: Op::Identity,
                    op_b: Op::Identity,
                    alpha: T::of(1.5),
                    beta: T::of(beta),
                }
            })
            .collect();
        let mut rng = Rng(seed);
        let a: Vec<T> = random(&mut rng, pa.next);
        let b: Vec<T> = random(&mut rng, pb.next);
        let mut c: Vec<T> = random(&mut rng, pc.next);
        for (g, &(.., beta)) in gemms.iter().zip(&shapes) {
            if beta == 0.0 {
                let l = g.entry.c;
                for j in 0..l.cols {
                    for i in 0..l.rows {
                        c[l.offset + i + j * l.ld] = T::of(f64::NAN);
                    }
                }
            }
        }
        let mut want: Vec<f64> = c.iter().map(|&x| x.to()).collect();
        for (g, &(.., k, beta)) in gemms.iter().zip(&shapes) {
            let e = g.entry;
            reference(
                &mut want,
                e.c,
                beta,
                &a,
                e.a,
                Op::Identity,
                &b,
                e.b,
                Op::Identity,
                1.5,
                k,
            );
        }
        let (da, db) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
        for together in [true, false] {
            let mut dc = dev.upload(&c).unwrap();
            let calls: Vec<&[IndependentGemm<T>]> = if together {
                vec![&gemms]
            } else {
                gemms.chunks(1).collect()
            };
            for call in calls {
                let bufs = BatchBuffers {
                    c: &mut dc,
                    a: &da,
                    b: &db,
                };
                dev.gemm_independent(bufs, call).unwrap();
            }
            let got = dev.download(&dc).unwrap();
            let what = format!("{} skinny products, together: {together}", T::NAME);
            assert_close(&got, &want, 16, &what);
        }
    }
    run::<f32>(&dev, 71);
    run::<f64>(&dev, 171);
}

#[test]
fn batched_calls_refuse_bad_batches_and_write_nothing() {
    let Some(dev) = device() else { return };
    let a = dev.upload(&[1.0_f64; 32]).unwrap();
    let b = dev.upload(&[1.0_f64; 32]).unwrap();
    let mut c = dev.upload(&[7.0_f64; 32]).unwrap();
    let l22 = |offset| MatLayout {
        offset,
        ..MatLayout::contiguous(2, 2)
    };
    let entry = |c_offset| GemmEntry {
        a: l22(0),
        b: l22(4),
        c: l22(c_offset),
    };
    let group = |entries| GemmGroup {
        op_a: Op::Identity,
        op_b: Op::Identity,
        alpha: 1.0,
        beta: 0.0,
        entries,
    };
    // Two C matrices sharing elements 2 and 3.
    let overlapping = [entry(0), entry(2)];
    let err = dev
        .gemm_batched(
            BatchBuffers {
                c: &mut c,
                a: &a,
                b: &b,
            },
            group(&overlapping),
        )
        .unwrap_err();
    assert_eq!(
        err,
        CudaError::OverlappingOutputs {
            first: (0, 0),
            second: (0, 1)
        }
    );
    // A C past the end of its buffer.
    let past = [entry(0), entry(30)];
    let err = dev
        .gemm_batched(
            BatchBuffers {
                c: &mut c,
                a: &a,
                b: &b,
            },
            group(&past),
        )
        .unwrap_err();
    assert!(
        matches!(err, CudaError::OutOfBounds { operand: "C", .. }),
        "{err}"
    );
    // Across groups of a grouped call, too (checked before the grouped symbols are needed).
    let (g0, g1) = ([entry(0)], [entry(3)]);
    let err = dev
        .gemm_grouped(
            BatchBuffers {
                c: &mut c,
                a: &a,
                b: &b,
            },
            &[group(&g0), group(&g1)],
        )
        .unwrap_err();
    assert_eq!(
        err,
        CudaError::OverlappingOutputs {
            first: (0, 0),
            second: (1, 0)
        }
    );
    assert_eq!(dev.download(&c).unwrap(), vec![7.0; 32]);
}

/// `dst[k] = ±src(i)` for every index `i` of `dims` in column-major order, by the definition.
fn permute_reference<T: Real>(
    src: &[T],
    offset: usize,
    dims: &[usize],
    strides: &[isize],
    negate: bool,
) -> Vec<T> {
    let n: usize = dims.iter().product();
    (0..n)
        .map(|k| {
            let (mut rem, mut at) = (k, offset as isize);
            for (&d, &s) in dims.iter().zip(strides) {
                at += (rem % d) as isize * s;
                rem /= d;
            }
            let v = src[at as usize];
            if negate { T::of(-v.to()) } else { v }
        })
        .collect()
}

/// The strides of `perm` applied to a dense column-major tensor of `dims`: axis `a` of the
/// view is axis `perm[a]` of the tensor.
fn permuted(dims: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<isize>) {
    let mut dense = Vec::with_capacity(dims.len());
    let mut step = 1_isize;
    for &d in dims {
        dense.push(step);
        step *= d as isize;
    }
    (
        perm.iter().map(|&a| dims[a]).collect(),
        perm.iter().map(|&a| dense[a]).collect(),
    )
}

fn check_permute<T: Real>(dev: &CudaDevice, seed: u64) {
    let mut rng = Rng(seed);
    for (case, (vdims, vstrides, offset, src_len)) in permute_cases().into_iter().enumerate() {
        let n: usize = vdims.iter().product();
        let src: Vec<T> = random(&mut rng, src_len);
        let dsrc = dev.upload(&src).unwrap();
        for negate in [false, true] {
            let want = permute_reference(&src, offset, &vdims, &vstrides, negate);
            // Into a contiguous run, and into a block of a larger matrix (rows: the first
            // axis, columns 3 apart beyond them), from element 2 of a buffer of guards.
            let rows = vdims.first().copied().unwrap_or(1).max(1);
            let cols = n / rows;
            for ld in [rows, rows + 3] {
                let layout = MatLayout {
                    offset: 2,
                    rows,
                    cols,
                    ld,
                };
                let len = 2 + layout.extent().unwrap() + 2;
                let guard = T::of(123.0);
                let mut ddst = dev.upload(&vec![guard; len]).unwrap();
                dev.permute_copy(
                    negate,
                    StridedView {
                        buf: &dsrc,
                        offset,
                        dims: &vdims,
                        strides: &vstrides,
                    },
                    &mut ddst,
                    layout,
                )
                .unwrap();
                let got = dev.download(&ddst).unwrap();
                let mut expected = vec![guard; len];
                for (k, &w) in want.iter().enumerate() {
                    expected[2 + k % rows + (k / rows) * ld] = w;
                }
                // A copy and a sign flip are exact; guards and gaps untouched.
                assert!(
                    got == expected,
                    "{} permute case {case} {vdims:?} {vstrides:?} negate {negate} ld {ld}: \
                     differs",
                    T::NAME
                );
            }
        }
    }
}

/// The permute tests' views: axis permutations of dense column-major tensors (1 to 8 axes)
/// after 3 elements of padding, the first axis of the view reversed (a negative stride,
/// starting from its last element) in odd cases. Returns `(dims, strides, offset, src_len)`.
fn permute_cases() -> Vec<(Vec<usize>, Vec<isize>, usize, usize)> {
    let cases: &[(&[usize], &[usize])] = &[
        (&[7], &[0]),
        (&[5, 9], &[1, 0]),
        (&[3, 4, 5], &[2, 0, 1]),
        (&[6, 1, 4, 3], &[3, 1, 0, 2]),
        (&[2, 3, 2, 1, 3, 2, 2, 3], &[7, 0, 6, 1, 5, 2, 4, 3]),
        (&[33, 65, 17], &[1, 2, 0]),
    ];
    let pad = 3;
    (cases.iter().enumerate())
        .map(|(case, &(dims, perm))| {
            let (vdims, mut vstrides) = permuted(dims, perm);
            let n: usize = dims.iter().product();
            let mut offset = pad;
            if case % 2 == 1 {
                offset += (vdims[0] - 1) * vstrides[0] as usize;
                vstrides[0] = -vstrides[0];
            }
            (vdims, vstrides, offset, pad + n + 2)
        })
        .collect()
}

/// Runs everywhere: the GPU tests' own layouts and references are sound (so a GPU failure is
/// the backend's): every matrix of the batched and grouped tests has a leading dim of at least
/// max(1, rows) and lies in its buffer, no two C matrices share an element, and the permute
/// reference reads inside its source and transposes as a transpose does.
#[test]
fn the_gpu_tests_layouts_are_sound() {
    let batched = Spec {
        m: 5,
        n: 3,
        k: 4,
        op_a: Op::Transpose,
        op_b: Op::Identity,
        alpha: 1.0,
        beta: 0.0,
        count: 7,
    };
    for specs in [&grouped_specs()[..], &[batched]] {
        let (groups, lens) = layout_groups(specs);
        assert_eq!(groups.len(), specs.len());
        let mut written = std::collections::HashSet::new();
        for (s, entries) in specs.iter().zip(&groups) {
            assert_eq!(entries.len(), s.count);
            for e in entries {
                assert_eq!(stored(s.m, s.k, s.op_a), (e.a.rows, e.a.cols));
                assert_eq!(stored(s.k, s.n, s.op_b), (e.b.rows, e.b.cols));
                assert_eq!((s.m, s.n), (e.c.rows, e.c.cols));
                for (l, len) in [(e.a, lens[0]), (e.b, lens[1]), (e.c, lens[2])] {
                    assert!(l.ld >= l.rows.max(1), "{l:?}");
                    assert!(l.offset + l.extent().unwrap() <= len, "{l:?} in {len}");
                }
                for j in 0..e.c.cols {
                    for i in 0..e.c.rows {
                        assert!(written.insert(e.c.offset + i + j * e.c.ld), "{e:?}");
                    }
                }
            }
        }
    }
    for (dims, strides, offset, len) in permute_cases() {
        let src: Vec<f64> = (0..len).map(|i| i as f64).collect();
        let got = permute_reference(&src, offset, &dims, &strides, false);
        assert_eq!(got.len(), dims.iter().product::<usize>());
    }
    // The 2 x 3 matrix 0..6 read transposed, then negated.
    let src: Vec<f64> = (0..6).map(f64::from).collect();
    let (dims, strides) = permuted(&[2, 3], &[1, 0]);
    assert_eq!(
        (dims.as_slice(), strides.as_slice()),
        (&[3, 2][..], &[2, 1][..])
    );
    assert_eq!(
        permute_reference(&src, 0, &dims, &strides, true),
        vec![-0.0, -2.0, -4.0, -1.0, -3.0, -5.0]
    );
}

/// The device with NVRTC, or `None` having said why the test is skipped.
fn device_with_nvrtc() -> Option<CudaDevice> {
    let dev = device()?;
    match probe_nvrtc() {
        Ok(()) => Some(dev),
        Err(e) => {
            println!("skipped: no NVRTC ({e})");
            None
        }
    }
}

#[test]
fn permute_copy_matches_the_definition() {
    let Some(dev) = device_with_nvrtc() else {
        return;
    };
    check_permute::<f32>(&dev, 61);
    check_permute::<f64>(&dev, 62);
}

#[test]
fn permute_copy_refuses_bad_views_and_writes_nothing() {
    let Some(dev) = device_with_nvrtc() else {
        return;
    };
    let src = dev.upload(&[1.0_f32; 24]).unwrap();
    let mut dst = dev.upload(&[5.0_f32; 24]).unwrap();
    let view = |offset, dims, strides| StridedView {
        buf: &src,
        offset,
        dims,
        strides,
    };
    let run = |offset, len| MatLayout {
        offset,
        ..MatLayout::contiguous(len, 1)
    };
    let err = dev
        .permute_copy(
            false,
            view(1, &[2, 3, 4], &[12, 1, 3]),
            &mut dst,
            run(0, 24),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            CudaError::OutOfBounds {
                operand: "the source",
                ..
            }
        ),
        "{err}"
    );
    let err = dev
        .permute_copy(
            false,
            view(0, &[2, 3, 4], &[12, 1, 3]),
            &mut dst,
            run(1, 24),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            CudaError::OutOfBounds {
                operand: "the destination",
                ..
            }
        ),
        "{err}"
    );
    let err = dev
        .permute_copy(true, view(0, &[4, 2], &[-1, 4]), &mut dst, run(0, 8))
        .unwrap_err();
    assert!(
        matches!(err, CudaError::NegativeReach { below: 3, .. }),
        "{err}"
    );
    let err = dev
        .permute_copy(true, view(0, &[1; 9], &[0; 9]), &mut dst, run(0, 1))
        .unwrap_err();
    assert_eq!(err, CudaError::TooManyAxes { given: 9, max: 8 });
    assert_eq!(dev.download(&dst).unwrap(), vec![5.0; 24]);
    // Empty: nothing to do; then a good copy still runs after the refusals.
    dev.permute_copy(false, view(0, &[0, 4], &[1, 1]), &mut dst, run(24, 0))
        .unwrap();
    dev.permute_copy(true, view(0, &[2, 3, 4], &[12, 1, 3]), &mut dst, run(0, 24))
        .unwrap();
    assert_eq!(dev.download(&dst).unwrap(), vec![-1.0; 24]);
}

/// Every permute case in one batched launch (one source buffer holding all the cases'
/// sources, one destination with each case's matrix at its own place, columns 3 apart beyond
/// its rows, every other one negated; the largest case spans several chunks): exactly the
/// definition, and nothing written between the matrices.
fn check_permute_batch<T: Real>(dev: &CudaDevice, seed: u64) {
    let mut rng = Rng(seed);
    let cases = permute_cases();
    let (mut src, mut moves_at, mut dst_len) = (Vec::new(), Vec::new(), 5);
    for (vdims, _, offset, len) in &cases {
        let n: usize = vdims.iter().product();
        let rows = vdims.first().copied().unwrap_or(1).max(1);
        let layout = MatLayout {
            offset: dst_len,
            rows,
            cols: n / rows,
            ld: rows + 3,
        };
        moves_at.push((src.len() + offset, layout));
        src.extend(random::<T>(&mut rng, *len));
        dst_len += layout.extent().unwrap() + 4;
    }
    let guard = T::of(-7.0);
    let mut expected = vec![guard; dst_len];
    let moves: Vec<PermuteMove<'_>> = (cases.iter().zip(&moves_at).enumerate())
        .map(|(k, ((vdims, vstrides, ..), &(offset, dst)))| {
            let negate = k % 2 == 1;
            let want = permute_reference(&src, offset, vdims, vstrides, negate);
            for (i, &w) in want.iter().enumerate() {
                expected[dst.offset + i % dst.rows + (i / dst.rows) * dst.ld] = w;
            }
            PermuteMove {
                negate,
                offset,
                dims: vdims,
                strides: vstrides,
                dst,
            }
        })
        .collect();
    let dsrc = dev.upload(&src).unwrap();
    let mut ddst = dev.upload(&vec![guard; dst_len]).unwrap();
    dev.permute_copies(&dsrc, &mut ddst, &moves).unwrap();
    assert!(
        dev.download(&ddst).unwrap() == expected,
        "{}: a batch of {} permuting copies differs from the definition",
        T::NAME,
        moves.len()
    );
}

#[test]
fn batched_permute_copies_match_the_definition() {
    let Some(dev) = device_with_nvrtc() else {
        return;
    };
    check_permute_batch::<f32>(&dev, 63);
    check_permute_batch::<f64>(&dev, 64);
}

#[test]
fn batched_permute_copies_refuse_bad_batches_and_write_nothing() {
    let Some(dev) = device_with_nvrtc() else {
        return;
    };
    let src = dev.upload(&[1.0_f64; 24]).unwrap();
    let mut dst = dev.upload(&[5.0_f64; 24]).unwrap();
    let good = |offset| PermuteMove {
        negate: true,
        offset: 0,
        dims: &[2, 3],
        strides: &[3, 1],
        dst: MatLayout {
            offset,
            ..MatLayout::contiguous(2, 3)
        },
    };
    // Two destinations one element apart overlap; a copy reaching past the source is
    // refused after a good one: neither writes anything.
    let err = dev
        .permute_copies(&src, &mut dst, &[good(0), good(12), good(5)])
        .unwrap_err();
    assert_eq!(
        err,
        CudaError::OverlappingCopies {
            first: 0,
            second: 2
        }
    );
    let past = PermuteMove {
        offset: 20,
        ..good(6)
    };
    let err = dev
        .permute_copies(&src, &mut dst, &[good(0), past])
        .unwrap_err();
    assert!(
        matches!(
            err,
            CudaError::OutOfBounds {
                operand: "the source",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(dev.download(&dst).unwrap(), vec![5.0; 24]);
    // An empty batch does nothing; a good one runs after the refusals.
    dev.permute_copies(&src, &mut dst, &[]).unwrap();
    dev.permute_copies(&src, &mut dst, &[good(0), good(6), good(12), good(18)])
        .unwrap();
    assert_eq!(dev.download(&dst).unwrap(), vec![-1.0; 24]);
}
