//! Block-sparse Hermitian eigendecomposition.
//!
//! Owns [`eigh`] and its result [`Eigh`]. Invariant: for a tensor from a space to itself
//! (domain legs the duals of the codomain legs, trivial flux; every sector matrix is then
//! square), `A = V · D · V†` sector by sector, `V` unitary per sector, `D` real and diagonal
//! with each sector's eigenvalues in non-decreasing order. Legs and directions follow the
//! `factor` module. Like faer, only the lower triangle of each sector matrix is read (the
//! upper one is taken to be its adjoint). Nothing waits on the host: one scheduled task per
//! sector writes both factors. A masked input is decomposed with its absent blocks as zeros
//! (see the `factor` module): every sector matrix is then the full square matrix of its
//! coupled sector.

use crate::error::Error;
use crate::factor::{bond_leg, diagonal_structure, left_structure};
use crate::kernels::Factorize;
use tessera_backends::{Field, Host, Placement, Real, Scalar};
use tessera_blocks::{AbelianSector, BlockStructure, Tensor};

/// The result of [`eigh`].
#[derive(Debug)]
pub struct Eigh<T: Scalar, S: AbelianSector, P: Placement<T> + Placement<Real<T>> = Host> {
    /// `D`: the eigenvalues as a real block-diagonal tensor (codomain the dual bond leg,
    /// domain the bond leg, trivial flux), non-decreasing in each sector.
    pub values: Tensor<Real<T>, S, P>,
    /// `V`: `A`'s codomain legs to the bond leg, unitary per sector.
    pub vectors: Tensor<T, S, P>,
}

/// Checks that `s` maps a space to itself.
fn check_endomorphism<S: AbelianSector>(s: &BlockStructure<S>) -> Result<(), Error> {
    let (co, dom) = (s.codomain(), s.domain());
    if co.len() != dom.len() {
        return Err(Error::NotEndomorphism {
            reason: format!("it has {} codomain and {} domain legs", co.len(), dom.len()),
        });
    }
    if let Some(i) = (0..co.len()).find(|&i| dom[i] != co[i].dual()) {
        return Err(Error::NotEndomorphism {
            reason: format!("domain leg {i} is not the dual of codomain leg {i}"),
        });
    }
    if *s.flux() != S::trivial() {
        return Err(Error::NotEndomorphism {
            reason: format!("its flux is {}", s.flux()),
        });
    }
    Ok(())
}

/// The eigendecomposition of the Hermitian tensor `a`, one task per coupled sector.
///
/// A tensor whose structure leaves out allowed blocks (a presence mask) is decomposed with
/// its absent blocks as zeros; the factors' structures have no mask.
///
/// # Errors
///
/// [`Error::NotEndomorphism`] before anything is enrolled. What the data decides poisons
/// both factors (sectors that do not depend on it are computed): [`Error::NonFinite`] when a
/// sector matrix holds a NaN or an infinity anywhere (in either triangle; or a result
/// computed from it would), and [`Error::NoConvergence`]. [`Error::from_task_failure`] or
/// [`Error::task_failure`] reads the typed reason out of the poison a wait gives.
pub fn eigh<T: Field, S: AbelianSector, P: Factorize<T>>(
    a: &Tensor<T, S, P>,
) -> Result<Eigh<T, S, P>, Error> {
    check_endomorphism(a.structure())?;
    let filled = P::fill_absent(a)?;
    let a = filled.as_ref().unwrap_or(a);
    let sectors = a.structure().sectors();
    let bond = bond_leg(sectors.iter().map(|c| (c.sector().clone(), c.rows())))?;
    let placement = a.placement();
    let vectors = Tensor::zeros_on(left_structure(a.structure(), &bond)?, &placement)?;
    let values = Tensor::<Real<T>, S, P>::zeros_on(diagonal_structure(&bond)?, &placement)?;
    for c in 0..sectors.len() {
        P::eigh_sector(a, c, &vectors, &values)?;
    }
    Ok(Eigh { values, vectors })
}
