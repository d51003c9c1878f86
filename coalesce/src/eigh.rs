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
use crate::factor::{
    SectorInfo, bond_leg, diagonal_structure, factor_sector, kernel_error, left_structure, re,
    sector_views, with_absent_as_zeros,
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
pub fn eigh<T: Field, S: AbelianSector>(a: &AsyncArray<T, S>) -> Result<Eigh<T, S>, Error> {
    check_endomorphism(a.structure())?;
    let filled = with_absent_as_zeros(a)?;
    let a = filled.as_ref().unwrap_or(a);
    let views = sector_views(a)?;
    let sectors = a.structure().sectors();
    let bond = bond_leg(sectors.iter().map(|c| (c.sector().clone(), c.rows())))?;
    let vectors = AsyncArray::try_zeros(left_structure(a.structure(), &bond)?)?;
    let values = AsyncArray::<Real<T>, S>::try_zeros(diagonal_structure(&bond)?)?;
    let rt = Runtime::current();
    for (view, c) in views.iter().zip(sectors) {
        let (vc, dc) = (
            factor_sector(&vectors, c.sector())?,
            factor_sector(&values, c.sector())?,
        );
        let info = SectorInfo::new("Hermitian eigendecomposition", c.sector());
        rt.schedule_named(
            "coalesce.eigh",
            (view.read(), vc.overwrite(), dc.overwrite()),
            move |(m, mut vc, mut dc)| {
                let shape = (m.nrows(), m.ncols());
                info.check_finite(m, shape, "the sector matrix")?;
                let e = m.self_adjoint_eigen(Side::Lower).map_err(|_| {
                    kernel_error(Error::NoConvergence {
                        what: info.operation,
                        sector: info.sector.clone(),
                        rows: shape.0,
                        cols: shape.1,
                    })
                })?;
                let values: Vec<f64> = e.S().column_vector().iter().map(|&x| re(x)).collect();
                info.check_values(&values, shape, "eigenvalue")?;
                info.check_finite(e.U(), shape, "the eigenvectors")?;
                vc.copy_from(e.U());
                dc.fill(Real::<T>::ZERO);
                for (j, &x) in values.iter().enumerate() {
                    dc[(j, j)] = Real::<T>::from_f64(x);
                }
                Ok(())
            },
        )?;
    }
    Ok(Eigh { values, vectors })
}
