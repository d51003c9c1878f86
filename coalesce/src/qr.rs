//! Block-sparse QR and LQ decompositions.
//!
//! Owns [`qr`], [`lq`] and their results [`Qr`], [`Lq`]. Invariant: `A = Q · R` (`A = L · Q`)
//! sector by sector, with the bond dimension of sector `c` equal to `min(rows, cols)` of its
//! matrix; `Q` has orthonormal columns (rows, for LQ) and `R` is upper (`L` lower)
//! triangular in every sector. Legs and directions follow the `factor` module. No decision
//! depends on the values, so the factors' structures are known at the call and nothing waits
//! on the host: one scheduled task per sector reads the sector matrix of `A` and overwrites
//! the sector matrices of both factors. A masked input is factored with its absent blocks as
//! zeros (see the `factor` module).

use crate::error::Error;
use crate::factor::{
    SectorInfo, bond_leg, factor_sector, left_structure, right_structure, sector_views,
    with_absent_as_zeros,
};
use tessera_backends::{Field, Scalar};
use tessera_blocks::{AbelianSector, AsyncArray, Leg};
use tessera_core::Runtime;

/// The result of [`qr`].
#[derive(Debug)]
pub struct Qr<T: Scalar, S: AbelianSector> {
    /// `Q`: `A`'s codomain legs to the bond leg, orthonormal columns per sector.
    pub q: AsyncArray<T, S>,
    /// `R`: the dual bond leg to `A`'s domain legs, upper triangular per sector.
    pub r: AsyncArray<T, S>,
}

/// The result of [`lq`].
#[derive(Debug)]
pub struct Lq<T: Scalar, S: AbelianSector> {
    /// `L`: `A`'s codomain legs to the bond leg, lower triangular per sector.
    pub l: AsyncArray<T, S>,
    /// `Q`: the dual bond leg to `A`'s domain legs, orthonormal rows per sector.
    pub q: AsyncArray<T, S>,
}

/// The bond leg of a full-rank factorization: `min(rows, cols)` per sector.
fn thin_bond<T: Field, S: AbelianSector>(a: &AsyncArray<T, S>) -> Result<Leg<S>, Error> {
    bond_leg(
        a.structure()
            .sectors()
            .iter()
            .map(|c| (c.sector().clone(), c.rows().min(c.cols()))),
    )
}

/// The QR decomposition of `a`, one task per coupled sector. A tensor whose structure
/// leaves out allowed blocks (a presence mask) is factored with its absent blocks as zeros;
/// the factors' structures have no mask.
///
/// # Errors
///
/// [`Error::Core`] only when the runtime refuses to enroll the tasks. What the data decides
/// surfaces through the factors, which the failed sector's task poisons: waiting on one of
/// their blocks or sectors gives the poison, and [`Error::from_task_failure`] or
/// [`Error::task_failure`] reads the typed reason out of it, [`Error::NonFinite`] when the
/// sector matrix holds a NaN or an infinity (or a factor computed from it would). Sectors
/// that do not depend on the failure are computed.
pub fn qr<T: Field, S: AbelianSector>(a: &AsyncArray<T, S>) -> Result<Qr<T, S>, Error> {
    let filled = with_absent_as_zeros(a)?;
    let a = filled.as_ref().unwrap_or(a);
    let views = sector_views(a)?;
    let bond = thin_bond(a)?;
    let q = AsyncArray::try_zeros(left_structure(a.structure(), &bond)?)?;
    let r = AsyncArray::try_zeros(right_structure(&bond, a.structure())?)?;
    let rt = Runtime::current();
    for (view, c) in views.iter().zip(a.structure().sectors()) {
        let (qc, rc) = (
            factor_sector(&q, c.sector())?,
            factor_sector(&r, c.sector())?,
        );
        let info = SectorInfo::new("QR", c.sector());
        rt.schedule_named(
            "coalesce.qr",
            (view.read(), qc.overwrite(), rc.overwrite()),
            move |(m, mut qc, mut rc)| {
                let shape = (m.nrows(), m.ncols());
                info.check_finite(m, shape, "the sector matrix")?;
                let f = m.qr();
                let (q, r) = (f.compute_thin_Q(), f.thin_R());
                info.check_finite(r, shape, "R")?;
                info.check_finite(q.as_ref(), shape, "Q")?;
                qc.copy_from(q);
                rc.copy_from(r);
                Ok(())
            },
        )?;
    }
    Ok(Qr { q, r })
}

/// The LQ decomposition of `a` (the QR decomposition of `a†`, adjoined), one task per
/// coupled sector. Absent blocks of a masked input are zeros, as for [`qr`].
///
/// # Errors
///
/// As [`qr`]: what the data decides ([`Error::NonFinite`]) poisons the factors.
pub fn lq<T: Field, S: AbelianSector>(a: &AsyncArray<T, S>) -> Result<Lq<T, S>, Error> {
    let filled = with_absent_as_zeros(a)?;
    let a = filled.as_ref().unwrap_or(a);
    let views = sector_views(a)?;
    let bond = thin_bond(a)?;
    let l = AsyncArray::try_zeros(left_structure(a.structure(), &bond)?)?;
    let q = AsyncArray::try_zeros(right_structure(&bond, a.structure())?)?;
    let rt = Runtime::current();
    for (view, c) in views.iter().zip(a.structure().sectors()) {
        let (lc, qc) = (
            factor_sector(&l, c.sector())?,
            factor_sector(&q, c.sector())?,
        );
        let info = SectorInfo::new("LQ", c.sector());
        rt.schedule_named(
            "coalesce.lq",
            (view.read(), lc.overwrite(), qc.overwrite()),
            move |(m, mut lc, mut qc)| {
                let shape = (m.nrows(), m.ncols());
                info.check_finite(m, shape, "the sector matrix")?;
                let f = m.adjoint().qr();
                let (q, r) = (f.compute_thin_Q(), f.thin_R());
                info.check_finite(r.transpose(), shape, "L")?;
                info.check_finite(q.as_ref().transpose(), shape, "Q")?;
                lc.copy_from(r.adjoint());
                qc.copy_from(q.adjoint());
                Ok(())
            },
        )?;
    }
    Ok(Lq { l, q })
}
