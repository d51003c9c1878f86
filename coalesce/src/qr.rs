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
use crate::factor::{bond_leg, left_structure, right_structure};
use crate::kernels::Factorize;
use tessera_backends::{Field, Host, Placement, Scalar};
use tessera_blocks::{AbelianSector, Leg, Tensor};

/// The result of [`qr`].
#[derive(Debug)]
pub struct Qr<T: Scalar, S: AbelianSector, P: Placement<T> = Host> {
    /// `Q`: `A`'s codomain legs to the bond leg, orthonormal columns per sector.
    pub q: Tensor<T, S, P>,
    /// `R`: the dual bond leg to `A`'s domain legs, upper triangular per sector.
    pub r: Tensor<T, S, P>,
}

/// The result of [`lq`].
#[derive(Debug)]
pub struct Lq<T: Scalar, S: AbelianSector, P: Placement<T> = Host> {
    /// `L`: `A`'s codomain legs to the bond leg, lower triangular per sector.
    pub l: Tensor<T, S, P>,
    /// `Q`: the dual bond leg to `A`'s domain legs, orthonormal rows per sector.
    pub q: Tensor<T, S, P>,
}

/// The bond leg of a full-rank factorization: `min(rows, cols)` per sector.
fn thin_bond<T: Field, S: AbelianSector, P: Placement<T>>(
    a: &Tensor<T, S, P>,
) -> Result<Leg<S>, Error> {
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
pub fn qr<T: Field, S: AbelianSector, P: Factorize<T>>(
    a: &Tensor<T, S, P>,
) -> Result<Qr<T, S, P>, Error> {
    let (q, r) = factor_pair(a, false)?;
    Ok(Qr { q, r })
}

/// The two factors of one decomposition: left and right.
type Pair<T, S, P> = (Tensor<T, S, P>, Tensor<T, S, P>);

/// The two factors of a QR (`lq`: LQ) decomposition, one task per sector.
fn factor_pair<T: Field, S: AbelianSector, P: Factorize<T>>(
    a: &Tensor<T, S, P>,
    lq: bool,
) -> Result<Pair<T, S, P>, Error> {
    let filled = P::fill_absent(a)?;
    let a = filled.as_ref().unwrap_or(a);
    let bond = thin_bond(a)?;
    let placement = a.placement();
    let left = Tensor::zeros_on(left_structure(a.structure(), &bond)?, &placement)?;
    let right = Tensor::zeros_on(right_structure(&bond, a.structure())?, &placement)?;
    for c in 0..a.structure().sectors().len() {
        P::qr_sector(a, c, lq, &left, &right)?;
    }
    Ok((left, right))
}

/// The LQ decomposition of `a` (the QR decomposition of `a†`, adjoined), one task per
/// coupled sector. Absent blocks of a masked input are zeros, as for [`qr`].
///
/// # Errors
///
/// As [`qr`]: what the data decides ([`Error::NonFinite`]) poisons the factors.
pub fn lq<T: Field, S: AbelianSector, P: Factorize<T>>(
    a: &Tensor<T, S, P>,
) -> Result<Lq<T, S, P>, Error> {
    let (l, q) = factor_pair(a, true)?;
    Ok(Lq { l, q })
}
