//! The eigensolver of a DMRG step: Lanczos with full reorthogonalisation on block-sparse
//! tensors.
//!
//! Owns: [`lanczos`] and its result [`Eigenpair`]. Invariant: every vector operation is the
//! library's scheduled block operation (`inner`, `norm`, `axpy`, `scale`) and the host
//! waits only for the scalars the recurrence needs; the returned vector has the structure of
//! the start vector and unit norm.

use tessera_backends::{Host, Placement};
use tessera_blocks::{AbelianSector, Tensor};

use crate::{Error, Result};

/// What [`lanczos`] found.
#[derive(Debug)]
pub struct Eigenpair<S: AbelianSector, P: Placement<f64> = Host> {
    /// The lowest Ritz value.
    pub value: f64,
    /// Its Ritz vector, normalised, with the structure of the start vector.
    pub vector: Tensor<f64, S, P>,
    /// Matrix-vector products used.
    pub iterations: usize,
}

/// The lowest eigenpair of the symmetric map `apply` by Lanczos with full
/// reorthogonalisation, from `start`: stops when the residual norm `||H x - e x||` is below
/// `tol`, after `max_iter` products (at most the dimension of the space), or when the Krylov
/// space is exhausted.
///
/// `apply` must map a tensor to a new tensor of the same structure (as the effective
/// Hamiltonian of a pair does) and be symmetric under [`Tensor::inner`].
///
/// ```
/// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
/// use tessera_contract::Contraction;
/// use tessera_mps::dmrg::lanczos;
///
/// // The map x -> M x for M = [[2, 1], [1, 2]] on the charge-0 block (eigenvalues 1 and 3)
/// // and 5 on the charge-1 block, on vectors of charge 0.
/// let v = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 1)])?;
/// let s = BlockStructure::new([v.clone()], [v.dual()], U1(0))?;
/// let m = AsyncArray::<f64, U1>::from_dense(s, &[2.0, 1.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 5.0])?;
/// let x = AsyncArray::<f64, U1>::from_dense(BlockStructure::new([v], [], U1(0))?, &[1.0, 0.0, 0.0])?;
/// let mv = Contraction::new("ij,j->i")?;
/// let ground = lanczos(|x| Ok(mv.apply(&m, x)?), &x, 1e-12, 10)?;
/// assert!((ground.value - 1.0).abs() < 1e-12);
/// let y = ground.vector.to_dense()?; // (1, -1) / sqrt 2, up to its sign
/// assert!((y[0] + y[1]).abs() < 1e-12 && (y[0].abs() - 0.5_f64.sqrt()).abs() < 1e-12);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`Error::Dmrg`] for a zero start vector or a tridiagonal eigensolver that fails; the
/// errors of `apply` and of the block operations.
pub fn lanczos<S: AbelianSector, P: Placement<f64>>(
    apply: impl Fn(&Tensor<f64, S, P>) -> Result<Tensor<f64, S, P>>,
    start: &Tensor<f64, S, P>,
    tol: f64,
    max_iter: usize,
) -> Result<Eigenpair<S, P>> {
    let dim = start.structure().total_len();
    let max_iter = max_iter.clamp(1, dim.max(1));
    let v0 = start.duplicate();
    let n0 = v0.norm().get()?;
    if n0 == 0.0 || !n0.is_finite() {
        return Err(Error::Dmrg {
            what: "Lanczos start vector".into(),
            expected: "a nonzero, finite norm".into(),
            found: format!("norm {n0}"),
        });
    }
    v0.scale(1.0 / n0);
    let mut basis = vec![v0];
    let (mut alpha, mut beta): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    let (value, coefficients) = loop {
        let k = basis.len() - 1;
        let w = apply(&basis[k])?;
        let a = basis[k].inner(&w)?.get()?;
        alpha.push(a);
        w.axpy(-a, &basis[k])?;
        if k > 0 {
            w.axpy(-beta[k - 1], &basis[k - 1])?;
        }
        // Full reorthogonalisation against the whole basis (classical Gram-Schmidt, one
        // pass: enroll every product first, then wait).
        let overlaps = basis
            .iter()
            .map(|v| v.inner(&w))
            .collect::<std::result::Result<Vec<_>, tessera_blocks::Error>>()?;
        for (v, c) in basis.iter().zip(overlaps) {
            w.axpy(-c.get()?, v)?;
        }
        let b = w.norm().get()?;
        let (value, y) = lowest_of_tridiagonal(&alpha, &beta)?;
        let residual = b * y[k].abs();
        if residual < tol || basis.len() >= max_iter || b < 1e-14 {
            break (value, y);
        }
        w.scale(1.0 / b);
        beta.push(b);
        basis.push(w);
    };
    let x = basis[0].duplicate();
    x.scale(coefficients[0]);
    for (v, &c) in basis.iter().zip(&coefficients).skip(1) {
        x.axpy(c, v)?;
    }
    let n = x.norm().get()?;
    x.scale(1.0 / n);
    Ok(Eigenpair {
        value,
        vector: x,
        iterations: basis.len(),
    })
}

/// The lowest eigenvalue of the symmetric tridiagonal matrix with diagonal `alpha` and
/// off-diagonal `beta`, and its eigenvector (faer's dense self-adjoint eigensolver).
fn lowest_of_tridiagonal(alpha: &[f64], beta: &[f64]) -> Result<(f64, Vec<f64>)> {
    let n = alpha.len();
    let t = faer::Mat::<f64>::from_fn(n, n, |i, j| match i.abs_diff(j) {
        0 => alpha[i],
        1 => beta[i.min(j)],
        _ => 0.0,
    });
    let eig = t
        .self_adjoint_eigen(faer::Side::Lower)
        .map_err(|e| Error::Dmrg {
            what: "Lanczos tridiagonal eigensolver".into(),
            expected: "convergence".into(),
            found: format!("{e:?}"),
        })?;
    let value = eig.S().column_vector()[0];
    let y = (0..n).map(|i| eig.U()[(i, 0)]).collect();
    Ok((value, y))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    use tessera_contract::Contraction;

    #[test]
    fn the_lowest_eigenpair_is_the_dense_one_in_the_vectors_sector() {
        let rt = tessera_core::Runtime::new(2).unwrap();
        rt.enter(|| {
            let v = Leg::new(Direction::In, [(U1(-1), 5), (U1(0), 7), (U1(2), 3)]).unwrap();
            let s = Arc::new(BlockStructure::new([v.clone()], [v.dual()], U1(0)).unwrap());
            let m = AsyncArray::<f64, U1>::random(Arc::clone(&s), 5)
                .to_dense()
                .unwrap();
            // A symmetric, indefinite map: M + M^T (block diagonal as M is).
            let n = v.dim();
            let dense: Vec<f64> = (0..n * n).map(|k| m[k] + m[(k % n) * n + k / n]).collect();
            let sym = AsyncArray::<f64, U1>::from_dense(s, &dense).unwrap();
            let mat = faer::Mat::<f64>::from_fn(n, n, |i, j| dense[i + n * j]);
            assert!((0..n).all(|i| (0..n).all(|j| mat[(i, j)] == mat[(j, i)])));
            // The charge-0 block: rows 5..12.
            let block = faer::Mat::<f64>::from_fn(7, 7, |i, j| mat[(5 + i, 5 + j)]);
            let eig = block.self_adjoint_eigen(faer::Side::Lower).unwrap();
            let want = eig.S().column_vector()[0];
            let x = AsyncArray::<f64, U1>::random(
                BlockStructure::new([v.clone()], [], U1(0)).unwrap(),
                9,
            );
            let mv = Contraction::new("ij,j->i").unwrap();
            let got = lanczos(|x| Ok(mv.apply(&sym, x)?), &x, 1e-12, 50).unwrap();
            assert!((got.value - want).abs() < 1e-10, "{} vs {want}", got.value);
            assert!(got.iterations <= 7, "{}", got.iterations);
            // The vector: unit norm, an eigenvector (H x = e x), in the charge-0 block.
            let hx = mv.apply(&sym, &got.vector).unwrap();
            hx.axpy(-got.value, &got.vector).unwrap();
            assert!(hx.norm().get().unwrap() < 1e-8);
            assert!((got.vector.norm().get().unwrap() - 1.0).abs() < 1e-12);
            let u = (0..7).map(|i| eig.U()[(i, 0)]).collect::<Vec<_>>();
            let xd = got.vector.to_dense().unwrap();
            let overlap: f64 = (0..7).map(|i| u[i] * xd[5 + i]).sum();
            assert!((overlap.abs() - 1.0).abs() < 1e-10, "{overlap}");
            // A zero start vector is refused.
            let zero = AsyncArray::<f64, U1>::zeros(Arc::clone(x.structure()));
            let e = lanczos(|x| Ok(mv.apply(&sym, x)?), &zero, 1e-12, 50).unwrap_err();
            assert!(e.to_string().contains("nonzero"), "{e}");
        });
    }

    use std::sync::Arc;
}
