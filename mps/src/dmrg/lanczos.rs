//! The eigensolver of a DMRG step: Lanczos with partial reorthogonalisation on
//! block-sparse tensors.
//!
//! Owns: [`lanczos`] and its result [`Eigenpair`]. Invariant: every vector operation is the
//! library's scheduled block operation (`inner`, `norm`, `axpy`, `scale`) and the host
//! waits only for the scalars the recurrence needs; the returned vector has the structure of
//! the start vector and unit norm.

use tessera_backends::{Host, Placement};
use tessera_blocks::{AbelianSector, Tensor};

use super::tridiagonal::lowest_of_tridiagonal;
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
    /// Whether the residual norm met the tolerance (or the Krylov space was exhausted, which
    /// makes the pair exact); `false` when the solve stopped at `max_iter` products.
    pub converged: bool,
}

/// The lowest eigenpair of the symmetric map `apply` by Lanczos with partial
/// reorthogonalisation (Simon's estimates decide when the basis is reorthogonalised, so the
/// vectors stay orthogonal to `sqrt(eps)`), from `start`: stops when the residual norm
/// `||H x - e x||` is below `tol`, after `max_iter` products (at most the dimension of the
/// space), or when the Krylov space is exhausted.
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
/// [`Error::Dmrg`] for a zero start vector or a product that is not finite; the
/// errors of `apply` and of the block operations.
pub fn lanczos<S: AbelianSector, P: Placement<f64>>(
    apply: impl Fn(&Tensor<f64, S, P>) -> Result<Tensor<f64, S, P>>,
    start: &Tensor<f64, S, P>,
    tol: f64,
    max_iter: usize,
) -> Result<Eigenpair<S, P>> {
    let Solved {
        value,
        vector,
        iterations,
        converged,
    } = krylov(apply, start, tol, max_iter)?;
    Ok(Eigenpair {
        value,
        vector,
        iterations,
        converged,
    })
}

/// What [`krylov`] found: as [`Eigenpair`], for any [`KrylovVector`].
pub(crate) struct Solved<V> {
    pub(crate) value: f64,
    pub(crate) vector: V,
    pub(crate) iterations: usize,
    pub(crate) converged: bool,
}

/// What [`krylov`] does with its vectors: one process's tensors, or (with the `mpi`
/// feature) distributed arrays, whose reductions give the same bits on every rank, so every
/// rank makes the same decisions.
pub(crate) trait KrylovVector: Sized {
    /// The dimension of the space.
    fn dim(&self) -> usize;
    /// A copy.
    fn copy(&self) -> Self;
    /// The 2-norm, on the host.
    fn norm2(&self) -> Result<f64>;
    /// The inner product with `other`, on the host.
    fn dot(&self, other: &Self) -> Result<f64>;
    /// `self += alpha * x`.
    fn add_scaled(&self, alpha: f64, x: &Self) -> Result<()>;
    /// `self *= alpha`.
    fn scale_by(&self, alpha: f64);
}

impl<S: AbelianSector, P: Placement<f64>> KrylovVector for Tensor<f64, S, P> {
    fn dim(&self) -> usize {
        self.structure().total_len()
    }
    fn copy(&self) -> Self {
        self.duplicate()
    }
    fn norm2(&self) -> Result<f64> {
        Ok(self.norm().get()?)
    }
    fn dot(&self, other: &Self) -> Result<f64> {
        Ok(self.inner(other)?.get()?)
    }
    fn add_scaled(&self, alpha: f64, x: &Self) -> Result<()> {
        Ok(self.axpy(alpha, x)?)
    }
    fn scale_by(&self, alpha: f64) {
        self.scale(alpha);
    }
}

/// [`lanczos`] on any [`KrylovVector`].
pub(crate) fn krylov<V: KrylovVector>(
    apply: impl Fn(&V) -> Result<V>,
    start: &V,
    tol: f64,
    max_iter: usize,
) -> Result<Solved<V>> {
    let dim = start.dim();
    let max_iter = max_iter.clamp(1, dim.max(1));
    let v0 = start.copy();
    let n0 = v0.norm2()?;
    if n0 == 0.0 || !n0.is_finite() {
        return Err(Error::Dmrg {
            what: "Lanczos start vector".into(),
            expected: "a nonzero, finite norm".into(),
            found: format!("norm {n0}"),
        });
    }
    v0.scale_by(1.0 / n0);
    let mut basis = vec![v0];
    let (mut alpha, mut beta): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    // Simon's estimates of the loss of orthogonality (partial reorthogonalisation):
    // `omega[i]` estimates <v_i, v_k> for the newest vector v_k, `omega_prev` the same for
    // v_{k-1}; `anorm` estimates ||H|| from the recurrence.
    let (mut omega, mut omega_prev): (Vec<f64>, Vec<f64>) = (vec![1.0], Vec::new());
    let mut anorm: f64 = 0.0;
    let mut reorthogonalised_last = false;
    let (value, coefficients, converged) = loop {
        let k = basis.len() - 1;
        let w = apply(&basis[k])?;
        let a = basis[k].dot(&w)?;
        alpha.push(a);
        w.add_scaled(-a, &basis[k])?;
        if k > 0 {
            w.add_scaled(-beta[k - 1], &basis[k - 1])?;
        }
        let mut b = w.norm2()?;
        anorm = anorm.max(a.abs() + b + k.checked_sub(1).map_or(0.0, |j| beta[j]));
        let next = next_omega(&omega, &omega_prev, &alpha, &beta, b, anorm);
        // Reorthogonalise against the whole basis (classical Gram-Schmidt, one pass) when
        // the estimated loss passes sqrt(eps), and once more on the step after (the loss
        // grows back from the part the first pass leaves): full reorthogonalisation's
        // accuracy at a fraction of its 2k passes over the basis per step.
        let lost = next[..=k].iter().fold(0.0_f64, |m, x| m.max(x.abs()));
        let reorthogonalise = lost > f64::EPSILON.sqrt() || reorthogonalised_last;
        let next = if reorthogonalise {
            let overlaps = basis
                .iter()
                .map(|v| v.dot(&w))
                .collect::<Result<Vec<_>>>()?;
            for (v, c) in basis.iter().zip(overlaps) {
                w.add_scaled(-c, v)?;
            }
            b = w.norm2()?;
            let mut fresh = vec![f64::EPSILON; k + 1];
            fresh.push(1.0);
            fresh
        } else {
            next
        };
        reorthogonalised_last = reorthogonalise && !reorthogonalised_last;
        let (value, y) = lowest_of_tridiagonal(&alpha, &beta)?;
        let residual = b * y[k].abs();
        let converged = residual < tol || b < 1e-14 || basis.len() >= dim;
        if converged || basis.len() >= max_iter {
            break (value, y, converged);
        }
        w.scale_by(1.0 / b);
        beta.push(b);
        basis.push(w);
        omega_prev = std::mem::replace(&mut omega, next);
    };
    let x = basis[0].copy();
    x.scale_by(coefficients[0]);
    for (v, &c) in basis.iter().zip(&coefficients).skip(1) {
        x.add_scaled(c, v)?;
    }
    let n = x.norm2()?;
    x.scale_by(1.0 / n);
    Ok(Solved {
        value,
        vector: x,
        iterations: basis.len(),
        converged,
    })
}

/// Simon's recurrence for the loss of orthogonality of the next Lanczos vector
/// `v_{k+1} = w / b` against `v_0 .. v_k`, from the estimates for `v_k` (`omega`, length
/// `k + 1`) and `v_{k-1}` (`omega_prev`, length `k`), with a rounding term of `eps ||H||`:
/// returns `k + 2` estimates, the last (`<v_{k+1}, v_{k+1}>`) 1.
fn next_omega(
    omega: &[f64],
    omega_prev: &[f64],
    alpha: &[f64],
    beta: &[f64],
    b: f64,
    anorm: f64,
) -> Vec<f64> {
    let k = omega.len() - 1;
    let eps = f64::EPSILON;
    let rounding = eps * anorm;
    let mut next = Vec::with_capacity(k + 2);
    // For `i < k` (so `k >= 1`: `beta[k - 1]` and `omega_prev[i]` exist).
    for i in 0..k {
        let mut t = beta[i] * omega[i + 1] + (alpha[i] - alpha[k]) * omega[i];
        if i > 0 {
            t += beta[i - 1] * omega[i - 1];
        }
        t -= beta[k - 1] * omega_prev[i];
        next.push((t + rounding.copysign(t)) / b.max(f64::MIN_POSITIVE));
    }
    // Local orthogonality against v_k is kept by the recurrence itself.
    next.push(eps);
    next.push(1.0);
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    use tessera_contract::Contraction;

    #[test]
    fn a_long_run_stays_accurate_as_orthogonality_is_lost_and_restored() {
        // A spectrum that makes Lanczos lose orthogonality early: the extreme eigenvalues
        // converge in a few steps, then ghosts of them would appear without
        // reorthogonalisation. 400 states, 150 steps at a tolerance never met before the
        // Krylov space is large.
        let rt = tessera_core::Runtime::new(2).unwrap();
        rt.enter(|| {
            let n = 400;
            let v = Leg::new(Direction::In, [(U1(0), n)]).unwrap();
            let s = Arc::new(BlockStructure::new([v.clone()], [v.dual()], U1(0)).unwrap());
            // Q diag(d) Q^T with Q a product of reflections and d widely spread.
            let d: Vec<f64> = (0..n)
                .map(|i| {
                    if i == 0 {
                        -50.0
                    } else {
                        -40.0 + (i as f64).powf(1.3) * 0.1
                    }
                })
                .collect();
            let mut h = faer::Mat::<f64>::from_fn(n, n, |i, j| if i == j { d[i] } else { 0.0 });
            for r in 0..3 {
                let u = faer::Mat::<f64>::from_fn(n, 1, |i, _| ((i * (r + 3)) as f64).sin());
                let norm2 = (0..n).map(|i| u[(i, 0)] * u[(i, 0)]).sum::<f64>();
                let p = faer::Mat::<f64>::from_fn(n, n, |i, j| {
                    f64::from(u8::from(i == j)) - 2.0 * u[(i, 0)] * u[(j, 0)] / norm2
                });
                h = &p * &h * &p;
            }
            let dense: Vec<f64> = (0..n * n).map(|k| h[(k % n, k / n)]).collect();
            let sym = AsyncArray::<f64, U1>::from_dense(s, &dense).unwrap();
            let x = AsyncArray::<f64, U1>::random(
                BlockStructure::new([v.clone()], [], U1(0)).unwrap(),
                3,
            );
            let mv = Contraction::new("ij,j->i").unwrap();
            let got = lanczos(|x| Ok(mv.apply(&sym, x)?), &x, 1e-300, 150).unwrap();
            assert_eq!(got.iterations, 150);
            assert!(
                !got.converged,
                "stopped at the cap, short of a tolerance of 1e-300"
            );
            assert!(
                (got.value - d[0]).abs() < 1e-10,
                "{} vs {}",
                got.value,
                d[0]
            );
            let hx = mv.apply(&sym, &got.vector).unwrap();
            hx.axpy(-got.value, &got.vector).unwrap();
            assert!(hx.norm().get().unwrap() < 1e-8);
            assert!((got.vector.norm().get().unwrap() - 1.0).abs() < 1e-12);
        });
    }

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
            assert!(got.converged);
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
