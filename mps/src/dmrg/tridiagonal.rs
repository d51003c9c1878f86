//! The lowest eigenpair of the symmetric tridiagonal matrix a Lanczos recurrence builds.
//!
//! Owns [`lowest_of_tridiagonal`]. Invariant: the eigenvalue is the lowest one to within a few
//! rounding errors of `||T||` (bisection on Sturm counts, which are exact in sign for a shift
//! away from the spectrum), and the eigenvector has unit norm and a residual
//! `||T y - value y||` of a few rounding errors of `||T||` (inverse iteration on a shift just
//! below the lowest eigenvalue, where `T - shift` is positive definite, so its `LDL^T`
//! factorisation needs no pivoting).
//!
//! Lanczos asks for this pair after every product, on matrices of 10 to 100 rows, while the
//! workers wait for the host: `O(n)` per bisection step and per solve, where a dense
//! eigensolver costs `O(n^3)` and tens of microseconds from 20 rows on (the host's share of
//! a small DMRG step).

use crate::{Error, Result};

/// The lowest eigenvalue of the symmetric tridiagonal matrix with diagonal `alpha` and
/// off-diagonal `beta` (`beta.len() + 1 == alpha.len()`), and its unit eigenvector (its sign
/// is arbitrary). The value is infinite only where the eigenvalue itself is beyond `f64`
/// (entries near `f64::MAX`).
///
/// # Errors
///
/// [`Error::Dmrg`] for an empty matrix, an off-diagonal of the wrong length, or an entry that
/// is not finite (a product that overflowed or produced NaN).
pub(crate) fn lowest_of_tridiagonal(alpha: &[f64], beta: &[f64]) -> Result<(f64, Vec<f64>)> {
    let n = alpha.len();
    let refuse = |expected: &str, found: String| Error::Dmrg {
        what: "Lanczos tridiagonal matrix".into(),
        expected: expected.into(),
        found,
    };
    if n == 0 || beta.len() + 1 != n {
        return Err(refuse(
            "a diagonal of n >= 1 entries and an off-diagonal of n - 1",
            format!("{n} and {}", beta.len()),
        ));
    }
    if let Some(x) = alpha.iter().chain(beta).find(|x| !x.is_finite()) {
        return Err(refuse("finite entries", format!("an entry {x}")));
    }
    // The pair of `T / scale`, whose entries are at most 1 in magnitude (so no sum or square
    // below overflows or underflows for any finite `T`); the value is scaled back at the end.
    let scale = alpha
        .iter()
        .chain(beta)
        .fold(0.0_f64, |m, x| m.max(x.abs()));
    if scale == 0.0 {
        let mut y = vec![0.0; n];
        y[0] = 1.0;
        return Ok((0.0, y));
    }
    let alpha: Vec<f64> = alpha.iter().map(|a| a / scale).collect();
    let beta: Vec<f64> = beta.iter().map(|b| b / scale).collect();
    let b = |i: usize| if i == 0 || i == n { 0.0 } else { beta[i - 1] };
    // Gershgorin: every eigenvalue lies in [lo, ..], and the lowest below the least
    // diagonal entry (a Rayleigh quotient); `norm` (at most 3) bounds ||T / scale||.
    let (mut lo, mut hi, mut norm) = (f64::INFINITY, f64::INFINITY, 0.0_f64);
    for (i, &a) in alpha.iter().enumerate() {
        let r = b(i).abs() + b(i + 1).abs();
        lo = lo.min(a - r);
        hi = hi.min(a);
        norm = norm.max(a.abs() + r);
    }
    // The least pivot magnitude a Sturm count lets through (LAPACK's `pivmin`, the squares
    // of the off-diagonal being at most 1): a zero pivot is taken as this, negative, so the
    // count stays exact in sign.
    let pivmin = f64::MIN_POSITIVE;
    let below = |x: f64| -> usize {
        let mut count = 0;
        let mut q = 1.0;
        for (i, &a) in alpha.iter().enumerate() {
            let b2 = b(i) * b(i);
            q = a - x - if i == 0 { 0.0 } else { b2 / q };
            if q.abs() < pivmin {
                q = -pivmin;
            }
            count += usize::from(q < 0.0);
        }
        count
    };
    // Bisection: `lo` has no eigenvalue below it, `hi` at least one at or below it.
    let tol = 2.0 * f64::EPSILON * norm;
    for _ in 0..256 {
        if hi - lo <= tol {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if below(mid) >= 1 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let value = 0.5 * (lo + hi);
    // Inverse iteration with a shift below the spectrum by a few rounding errors of ||T||:
    // `T - shift` is positive definite with its least eigenvalue about `delta`, so the solve
    // multiplies the lowest eigenvector's component by about `1 / delta` and the others by
    // at most `1 / gap`; two solves from a start that meets the lowest eigenspace (below)
    // suffice.
    let delta = 8.0 * (n as f64) * f64::EPSILON * norm;
    let shift = lo - delta;
    let mut d = vec![0.0; n];
    let mut l = vec![0.0; n];
    for i in 0..n {
        let mut p = alpha[i] - shift;
        if i > 0 {
            l[i] = b(i) / d[i - 1];
            p -= l[i] * b(i);
        }
        // Positive in exact arithmetic; a pivot rounded to nothing is floored.
        d[i] = p.max(delta * f64::EPSILON);
    }
    // The start: positive entries under the signs `s` with `s_i s_{i-1} b_i <= 0`. Then
    // `S T S` has no positive off-diagonal, so (Perron-Frobenius) its lowest eigenspace
    // holds a nonnegative vector, and the start meets the lowest eigenspace of `T`: no
    // start with fixed signs does for every `T` (for `[[2, 1, 0], [1, 1, 1], [0, 1, 2]]` the
    // lowest vector `(1, -2, 1)` is orthogonal to `(1, 1.5, 2)`).
    let mut sign = 1.0_f64;
    let mut y: Vec<f64> = (0..n)
        .map(|i| {
            if b(i) != 0.0 {
                sign = -sign * b(i).signum();
            }
            sign * (1.0 + 0.25 * ((i * 7) % 5) as f64)
        })
        .collect();
    for _ in 0..2 {
        // L D L^T y' = y.
        for i in 1..n {
            y[i] -= l[i] * y[i - 1];
        }
        for (v, p) in y.iter_mut().zip(&d) {
            *v /= p;
        }
        for i in (0..n - 1).rev() {
            y[i] -= l[i + 1] * y[i + 1];
        }
        let s = y.iter().map(|v| v * v).sum::<f64>().sqrt();
        y.iter_mut().for_each(|v| *v /= s);
    }
    Ok((value * scale, y))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `faer`'s dense eigensolver on the same matrix: the reference.
    fn dense(alpha: &[f64], beta: &[f64]) -> (f64, Vec<f64>) {
        let n = alpha.len();
        let t = faer::Mat::<f64>::from_fn(n, n, |i, j| match i.abs_diff(j) {
            0 => alpha[i],
            1 => beta[i.min(j)],
            _ => 0.0,
        });
        let eig = t.self_adjoint_eigen(faer::Side::Lower).unwrap();
        let y = (0..n).map(|i| eig.U()[(i, 0)]).collect();
        (eig.S().column_vector()[0], y)
    }

    fn residual(alpha: &[f64], beta: &[f64], value: f64, y: &[f64]) -> f64 {
        let n = alpha.len();
        (0..n)
            .map(|i| {
                let mut t = (alpha[i] - value) * y[i];
                if i > 0 {
                    t += beta[i - 1] * y[i - 1];
                }
                if i + 1 < n {
                    t += beta[i] * y[i + 1];
                }
                t * t
            })
            .sum::<f64>()
            .sqrt()
    }

    /// A seeded uniform value in `[-1, 1)` (SplitMix64).
    fn uniform(state: &mut u64) -> f64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    #[test]
    fn the_lowest_pair_is_the_dense_solvers() {
        let mut seed = 7_u64;
        for n in [1_usize, 2, 3, 5, 10, 20, 40, 90] {
            let alpha: Vec<f64> = (0..n).map(|_| uniform(&mut seed)).collect();
            // Lanczos gives non-negative off-diagonals; some here are tiny.
            let beta: Vec<f64> = (1..n)
                .map(|i| {
                    let b = uniform(&mut seed).abs();
                    if i % 7 == 3 { b * 1e-9 } else { b }
                })
                .collect();
            let (want, wy) = dense(&alpha, &beta);
            // The same matrix scaled, far from 1 too (the squares of its entries leave `f64`
            // at 1e-200 and 1e200): the same vector, the value scaled.
            for scale in [1e-200, 1e-3, 1.0, 1e4, 1e200] {
                let times = |v: &[f64]| v.iter().map(|x| x * scale).collect::<Vec<_>>();
                let (value, y) = lowest_of_tridiagonal(&times(&alpha), &times(&beta)).unwrap();
                let value = value / scale;
                assert!(
                    (value - want).abs() <= 3e-13,
                    "n = {n}, scale {scale}: {value} against {want}"
                );
                let unit = y.iter().map(|v| v * v).sum::<f64>().sqrt();
                assert!((unit - 1.0).abs() < 1e-14, "n = {n}: norm {unit}");
                let r = residual(&alpha, &beta, value, &y);
                assert!(r <= 3e-12, "n = {n}, scale {scale}: residual {r}");
                // The same vector up to its sign, where the lowest eigenvalue stands apart.
                let overlap = y.iter().zip(&wy).map(|(a, b)| a * b).sum::<f64>().abs();
                assert!((overlap - 1.0).abs() < 1e-8, "n = {n}: overlap {overlap}");
            }
        }
    }

    #[test]
    fn degenerate_and_split_matrices_give_an_eigenvector() {
        // A zero off-diagonal splits the matrix: the lowest pair lies in one part.
        let (alpha, beta) = ([3.0, 1.0, -2.0, 5.0], [1.0, 0.0, 0.5]);
        let (value, y) = lowest_of_tridiagonal(&alpha, &beta).unwrap();
        assert!((value - dense(&alpha, &beta).0).abs() < 1e-14);
        assert!(residual(&alpha, &beta, value, &y) < 1e-13);
        // A double lowest eigenvalue (the identity, and a matrix with two equal blocks):
        // any unit vector of its eigenspace.
        let (value, y) = lowest_of_tridiagonal(&[2.0; 6], &[0.0; 5]).unwrap();
        assert_eq!(value, 2.0);
        assert!(residual(&[2.0; 6], &[0.0; 5], value, &y) < 1e-14);
        let (alpha, beta) = ([1.0, 1.0, 1.0, 1.0], [0.5, 0.0, 0.5]);
        let (value, y) = lowest_of_tridiagonal(&alpha, &beta).unwrap();
        assert!((value - 0.5).abs() < 1e-15);
        assert!(residual(&alpha, &beta, value, &y) < 1e-14);
        // The zero matrix, and one entry.
        assert_eq!(lowest_of_tridiagonal(&[0.0; 3], &[0.0; 2]).unwrap().0, 0.0);
        assert_eq!(
            lowest_of_tridiagonal(&[-4.5], &[]).unwrap(),
            (-4.5, vec![1.0])
        );
    }

    #[test]
    fn the_start_meets_the_lowest_vector_whatever_the_signs() {
        // The lowest vector (1, -2, 1) at 0 is orthogonal to a start of one sign throughout,
        // and Lanczos from a basis vector gives exactly this matrix (then stops: the next
        // off-diagonal is 0, so only the vector says whether the pair is right).
        for (alpha, beta) in [
            (vec![2.0, 1.0, 2.0], vec![1.0, 1.0]),
            (vec![2.0, 1.0, 2.0], vec![-1.0, 1.0]),
            (vec![2.0, 1.0, 2.0], vec![-1.0, -1.0]),
            (vec![2.0, 1.0, 2.0, 5.0, 0.0], vec![1.0, 1.0, 0.0, -3.0]),
        ] {
            let (value, y) = lowest_of_tridiagonal(&alpha, &beta).unwrap();
            let (want, _) = dense(&alpha, &beta);
            assert!((value - want).abs() < 1e-14, "{alpha:?} {beta:?}: {value}");
            let r = residual(&alpha, &beta, value, &y);
            assert!(r < 1e-13, "{alpha:?} {beta:?}: residual {r}");
        }
    }

    #[test]
    fn malformed_matrices_are_refused() {
        for (alpha, beta) in [
            (vec![], vec![]),
            (vec![1.0, 2.0], vec![]),
            (vec![1.0], vec![1.0]),
            (vec![1.0, f64::NAN], vec![0.5]),
            (vec![1.0, 2.0], vec![f64::INFINITY]),
        ] {
            let err = lowest_of_tridiagonal(&alpha, &beta).unwrap_err();
            assert!(
                matches!(&err, Error::Dmrg { what, .. } if what == "Lanczos tridiagonal matrix"),
                "{err}"
            );
        }
    }
}
