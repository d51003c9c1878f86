//! What every per-sector factorization shares: the sector views it reads, the new (bond)
//! leg it makes, and the structures of its factors.
//!
//! Owns the bond-leg convention. Invariant: a factorization `A = X · Y` of a tensor with
//! codomain legs `L` and domain legs `R` returns `X` with codomain `L` and domain the bond
//! leg `b` (direction [`Out`](Direction::Out), one segment per kept coupled sector, labelled
//! by that sector, in increasing order), and `Y` with codomain `b.dual()` and domain `R`,
//! with `A`'s flux. So `X`'s domain leg and `Y`'s codomain leg contract, and sector `c` of
//! `X` and of `Y` is the factor of sector `c` of `A`. A diagonal middle factor (singular
//! values, eigenvalues) has codomain `b.dual()`, domain `b` and trivial flux, so it contracts
//! on both sides.

use crate::error::Error;
use crate::region::SectorAlias;
use crate::view::Coalesce;
use tessera_backends::Scalar;
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure, Direction, Leg};
use tessera_core::KernelError;

/// The views of every coupled sector of `a`, refusing a packed one (nothing is enrolled).
pub(crate) fn sector_views<T: Scalar, S: AbelianSector>(
    a: &AsyncArray<T, S>,
) -> Result<Vec<SectorAlias<T>>, Error> {
    (0..a.structure().sectors().len())
        .map(|c| a.sector(c))
        .collect()
}

/// The bond leg: one `Out` segment per sector with a non-zero dimension.
pub(crate) fn bond_leg<S: AbelianSector>(
    dims: impl IntoIterator<Item = (S, usize)>,
) -> Result<Leg<S>, Error> {
    Ok(Leg::new(
        Direction::Out,
        dims.into_iter().filter(|(_, k)| *k > 0),
    )?)
}

/// The structure of the left factor: `A`'s codomain to the bond leg, trivial flux.
pub(crate) fn left_structure<S: AbelianSector>(
    a: &BlockStructure<S>,
    bond: &Leg<S>,
) -> Result<BlockStructure<S>, Error> {
    Ok(BlockStructure::new(
        a.codomain().to_vec(),
        [bond.clone()],
        S::trivial(),
    )?)
}

/// The structure of the right factor: the dual bond leg to `A`'s domain, `A`'s flux.
pub(crate) fn right_structure<S: AbelianSector>(
    bond: &Leg<S>,
    a: &BlockStructure<S>,
) -> Result<BlockStructure<S>, Error> {
    Ok(BlockStructure::new(
        [bond.dual()],
        a.domain().to_vec(),
        a.flux().clone(),
    )?)
}

/// The structure of a diagonal middle factor: the dual bond leg to the bond leg.
pub(crate) fn diagonal_structure<S: AbelianSector>(
    bond: &Leg<S>,
) -> Result<BlockStructure<S>, Error> {
    Ok(BlockStructure::new(
        [bond.dual()],
        [bond.clone()],
        S::trivial(),
    )?)
}

/// The view of the sector labelled `label` of a factor (every factor sector is dense).
pub(crate) fn factor_sector<T: Scalar, S: AbelianSector>(
    x: &AsyncArray<T, S>,
    label: &S,
) -> Result<SectorAlias<T>, Error> {
    let c = x
        .structure()
        .sector_index(label)
        .expect("a factor has a sector for every kept sector of its input");
    x.sector(c)
}

/// A crate error as a kernel error (it becomes the origin of the poison).
pub(crate) fn kernel_error(e: Error) -> KernelError {
    Box::new(e)
}

/// A scalar's real part as `f64`.
pub(crate) fn re<T: Scalar>(x: T) -> f64 {
    x.to_c64().re
}
