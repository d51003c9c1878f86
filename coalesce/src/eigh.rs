//! Block-sparse Hermitian eigendecomposition.
//!
//! Owns [`eigh`] and its result [`Eigh`]. Invariant: for a tensor from a space to itself
//! (domain legs the duals of the codomain legs, trivial flux; every sector matrix is then
//! square), `A = V · D · V†` sector by sector, `V` unitary per sector, `D` real and diagonal
//! with each sector's eigenvalues in non-decreasing order. Legs and directions follow the
//! `factor` module. Like faer, only the lower triangle of each sector matrix is read (the
//! upper one is taken to be its adjoint). Nothing waits on the host: one scheduled task per
//! sector writes both factors.

use crate::error::Error;
use crate::factor::{
    bond_leg, diagonal_structure, factor_sector, kernel_error, left_structure, re, sector_views,
};
use faer::Side;
use tessera_backends::{Field, Real, Scalar};
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure};
use tessera_core::Runtime;

/// The result of [`eigh`].
#[derive(Debug)]
pub struct Eigh<T: Scalar, S: AbelianSector> {
    /// `D`: the eigenvalues as a real block-diagonal tensor (codomain the dual bond leg,
    /// domain the bond leg, trivial flux), non-decreasing in each sector.
    pub values: AsyncArray<Real<T>, S>,
    /// `V`: `A`'s codomain legs to the bond leg, unitary per sector.
    pub vectors: AsyncArray<T, S>,
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
/// # Errors
///
/// [`Error::NotEndomorphism`] and [`Error::PackedSector`] before anything is enrolled.
/// A sector whose decomposition does not converge poisons both factors with
/// [`Error::NoConvergence`].
pub fn eigh<T: Field, S: AbelianSector>(a: &AsyncArray<T, S>) -> Result<Eigh<T, S>, Error> {
    check_endomorphism(a.structure())?;
    let views = sector_views(a)?;
    let sectors = a.structure().sectors();
    let bond = bond_leg(sectors.iter().map(|c| (c.sector().clone(), c.rows())))?;
    let vectors = AsyncArray::zeros(left_structure(a.structure(), &bond)?);
    let values = AsyncArray::<Real<T>, S>::zeros(diagonal_structure(&bond)?);
    let rt = Runtime::current();
    for (i, (view, c)) in views.iter().zip(sectors).enumerate() {
        let (vc, dc) = (
            factor_sector(&vectors, c.sector())?,
            factor_sector(&values, c.sector())?,
        );
        rt.schedule_named(
            "coalesce.eigh",
            (view.read(), vc.overwrite(), dc.overwrite()),
            move |(m, mut vc, mut dc)| {
                let e = m.self_adjoint_eigen(Side::Lower).map_err(|_| {
                    kernel_error(Error::NoConvergence {
                        what: "Hermitian eigendecomposition",
                        sector: i,
                        rows: m.nrows(),
                        cols: m.ncols(),
                    })
                })?;
                vc.copy_from(e.U());
                dc.fill(Real::<T>::ZERO);
                for (j, &x) in e.S().column_vector().iter().enumerate() {
                    dc[(j, j)] = Real::<T>::from_f64(re(x));
                }
                Ok(())
            },
        )?;
    }
    Ok(Eigh { values, vectors })
}
