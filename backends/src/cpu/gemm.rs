//! The CPU backend's GEMM: faer's matmul with conjugation, scaling and a parallelism chosen
//! from the product's size.
//!
//! Owns: [`gemm`], [`gemm_with`], [`gemm_parallelism`] and [`gemm_parallelism_alone`].
//! Invariant: `C` is written only after its dims
//! were checked against `op(A) op(B)`; a `beta` of zero never reads `C` (so an uninitialised
//! or NaN-filled destination is overwritten, as BLAS does).

use crate::Field;
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};

/// The dims of the operands of one GEMM do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "expected C ({m} x {n}) = A ({m} x k) B (k x {n}), but C is {c_rows} x {c_cols}, A is \
     {a_rows} x {a_cols} and B is {b_rows} x {b_cols}",
    m = .c_rows, n = .c_cols
)]
pub struct GemmShapeMismatch {
    /// Rows of C.
    pub c_rows: usize,
    /// Columns of C.
    pub c_cols: usize,
    /// Rows of op(A).
    pub a_rows: usize,
    /// Columns of op(A).
    pub a_cols: usize,
    /// Rows of op(B).
    pub b_rows: usize,
    /// Columns of op(B).
    pub b_cols: usize,
}

/// The parallelism for one `m x n x k` GEMM: faer's rayon parallelism pays only for large
/// products (measured on two cores: far slower than sequential at n <= 64, unstable at 128,
/// 1.8x faster at n >= 512), so smaller GEMMs run sequentially and rely on parallelism
/// across blocks instead.
pub fn gemm_parallelism(m: usize, n: usize, k: usize) -> Par {
    const PARALLEL_FLOPS: usize = 2 * 384 * 384 * 384;
    if 2 * m * n * k >= PARALLEL_FLOPS && m.min(n) >= 128 {
        Par::rayon(0)
    } else {
        Par::Seq
    }
}

/// The least flops (`2 m n k`) of a GEMM that [`gemm_parallelism`] or
/// [`gemm_parallelism_alone`] runs on more than one core: work with fewer flops in all runs
/// sequentially, so it may be run by a host thread that waits for it.
pub const GEMM_PARALLEL_MIN_FLOPS: usize = 2 * 128 * 128 * 128;

/// The parallelism for one `m x n x k` GEMM that has the other workers to itself (a
/// contraction with fewer GEMM tasks than workers): faer's rayon parallelism from 128^3 on
/// (measured on two cores beside one sequential call: 1.7x at n = 192 to 384).
pub fn gemm_parallelism_alone(m: usize, n: usize, k: usize) -> Par {
    if 2 * m * n * k >= GEMM_PARALLEL_MIN_FLOPS && m.min(n) >= 96 {
        Par::rayon(0)
    } else {
        gemm_parallelism(m, n, k)
    }
}

/// `C <- alpha * op(A) op(B) + beta * C`, where `op` conjugates when asked, with the
/// parallelism [`gemm_parallelism`] chooses.
///
/// # Errors
///
/// [`GemmShapeMismatch`] (and nothing written) when the dims do not fit.
pub fn gemm<T: Field>(
    c: MatMut<'_, T>,
    beta: T,
    a: MatRef<'_, T>,
    conj_a: bool,
    b: MatRef<'_, T>,
    conj_b: bool,
    alpha: T,
) -> Result<(), GemmShapeMismatch> {
    let par = gemm_parallelism(c.nrows(), c.ncols(), a.ncols());
    gemm_with(par, c, beta, a, conj_a, b, conj_b, alpha)
}

/// Like [`gemm`], with the parallelism given.
///
/// # Errors
///
/// As [`gemm`].
#[allow(clippy::too_many_arguments)]
pub fn gemm_with<T: Field>(
    par: Par,
    mut c: MatMut<'_, T>,
    beta: T,
    a: MatRef<'_, T>,
    conj_a: bool,
    b: MatRef<'_, T>,
    conj_b: bool,
    alpha: T,
) -> Result<(), GemmShapeMismatch> {
    if c.nrows() != a.nrows() || c.ncols() != b.ncols() || a.ncols() != b.nrows() {
        return Err(GemmShapeMismatch {
            c_rows: c.nrows(),
            c_cols: c.ncols(),
            a_rows: a.nrows(),
            a_cols: a.ncols(),
            b_rows: b.nrows(),
            b_cols: b.ncols(),
        });
    }
    let accum = if beta == T::ZERO {
        Accum::Replace
    } else {
        if beta != T::ONE {
            for j in 0..c.ncols() {
                c.as_mut().col_mut(j).iter_mut().for_each(|x| *x *= beta);
            }
        }
        Accum::Add
    };
    if a.ncols() == 0 {
        if accum == Accum::Replace {
            c.fill(T::ZERO);
        }
        return Ok(());
    }
    match (conj_a, conj_b) {
        (false, false) => matmul(c, accum, a, b, alpha, par),
        (true, false) => matmul(c, accum, a.conjugate(), b, alpha, par),
        (false, true) => matmul(c, accum, a, b.conjugate(), alpha, par),
        (true, true) => matmul(c, accum, a.conjugate(), b.conjugate(), alpha, par),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::Mat;
    use num_complex::Complex64;

    fn value(i: usize, j: usize, s: f64) -> Complex64 {
        Complex64::new(
            (i as f64 * 0.7 + j as f64 * s).sin(),
            (i as f64 - s * j as f64).cos(),
        )
    }

    #[test]
    fn matches_the_definition_for_every_conjugation_and_beta() {
        check_against_definition(5, 4, 3, None);
    }

    /// The parallel path a lone large GEMM takes (faer's rayon parallelism).
    #[test]
    fn the_parallel_path_matches_the_definition() {
        let (m, n, k) = (130, 140, 120);
        assert!(matches!(gemm_parallelism_alone(m, n, k), Par::Rayon(_)));
        assert!(matches!(gemm_parallelism(m, n, k), Par::Seq));
        check_against_definition(m, n, k, Some(Par::rayon(2)));
    }

    fn check_against_definition(m: usize, n: usize, k: usize, par: Option<Par>) {
        let a = Mat::from_fn(m, k, |i, j| value(i, j, 0.3));
        let b = Mat::from_fn(k, n, |i, j| value(i, j, 1.1));
        let c0 = Mat::from_fn(m, n, |i, j| value(i, j, 2.3));
        let alpha = Complex64::new(0.5, -1.5);
        for beta in [Complex64::ZERO, Complex64::ONE, Complex64::new(-2.0, 0.25)] {
            for (ca, cb) in [(false, false), (true, false), (false, true), (true, true)] {
                let mut c = c0.clone();
                match par {
                    None => gemm(c.as_mut(), beta, a.as_ref(), ca, b.as_ref(), cb, alpha),
                    Some(p) => {
                        gemm_with(p, c.as_mut(), beta, a.as_ref(), ca, b.as_ref(), cb, alpha)
                    }
                }
                .unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let mut want = beta * c0[(i, j)];
                        for l in 0..k {
                            let x = if ca { a[(i, l)].conj() } else { a[(i, l)] };
                            let y = if cb { b[(l, j)].conj() } else { b[(l, j)] };
                            want += alpha * x * y;
                        }
                        // The small case keeps the tight bound; a long sum gets its length.
                        let tol = if par.is_none() {
                            1e-12
                        } else {
                            1e-12 * (1.0 + want.norm()) * k as f64
                        };
                        assert!((c[(i, j)] - want).norm() < tol, "{ca} {cb} {beta}");
                    }
                }
            }
        }
    }

    #[test]
    fn beta_zero_overwrites_nan_and_empty_k_scales() {
        let a = Mat::<f64>::zeros(2, 0);
        let b = Mat::<f64>::zeros(0, 3);
        let mut c = Mat::from_fn(2, 3, |_, _| f64::NAN);
        gemm(c.as_mut(), 0.0, a.as_ref(), false, b.as_ref(), false, 1.0).unwrap();
        assert!(c.col_iter().all(|col| col.iter().all(|&x| x == 0.0)));
        let mut c = Mat::from_fn(2, 3, |i, j| (i + j) as f64);
        gemm(c.as_mut(), 2.0, a.as_ref(), false, b.as_ref(), false, 1.0).unwrap();
        assert_eq!(c[(1, 2)], 6.0);
    }

    #[test]
    fn mismatched_dims_write_nothing() {
        let a = Mat::<f64>::ones(2, 3);
        let b = Mat::<f64>::ones(4, 2);
        let mut c = Mat::<f64>::from_fn(2, 2, |_, _| 7.0);
        let e = gemm(c.as_mut(), 0.0, a.as_ref(), false, b.as_ref(), false, 1.0).unwrap_err();
        assert_eq!((e.a_cols, e.b_rows), (3, 4));
        assert!(e.to_string().contains("A is 2 x 3 and B is 4 x 2"), "{e}");
        assert!(c.col_iter().all(|col| col.iter().all(|&x| x == 7.0)));
    }
}
