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
//!
//! Also owns what every factorization does with a *masked* input (a structure whose
//! presence mask leaves out allowed blocks): absent blocks are zeros. The input is first
//! copied, by scheduled tasks, onto the structure with the same legs, split and flux and
//! every allowed block ([`with_absent_as_zeros`]), so a sector matrix is always the full
//! matrix of its coupled sector, and the factors of a masked tensor are exactly the factors
//! of that zero-filled tensor (their structures are never masked). And it owns the check
//! every factorization kernel makes of what it reads and what it computes
//! ([`check_finite`]): a number that is not finite fails the sector's task with
//! [`Error::NonFinite`] instead of flowing into the factors or the truncation.

use crate::error::Error;
use crate::region::SectorAlias;
use crate::view::Coalesce;
use faer::MatRef;
use std::sync::Arc;
use tessera_backends::cpu::matrix_ref;
use tessera_backends::{Field, Scalar};
use tessera_blocks::{AbelianSector, AsyncArray, BitVec, BlockStructure, Direction, Leg};
use tessera_core::KernelError;

/// The structure with `s`'s legs, split and flux and every allowed block, or `None` when
/// `s` has every allowed block already.
pub(crate) fn full_structure<S: AbelianSector>(
    s: &BlockStructure<S>,
) -> Result<Option<Arc<BlockStructure<S>>>, Error> {
    if s.num_blocks() == s.num_allowed() {
        return Ok(None);
    }
    Ok(Some(Arc::new(BlockStructure::from_legs(
        s.legs().to_vec(),
        s.n_codomain(),
        s.flux().clone(),
    )?)))
}

/// The structure with `s`'s legs, split and flux whose blocks are every allowed block of
/// each coupled sector in which `s` has a block, or `None` when `s` is that already: what a
/// factorization of only the present sectors factors, each sector whole.
pub(crate) fn present_sectors_whole<S: AbelianSector>(
    s: &BlockStructure<S>,
) -> Result<Option<Arc<BlockStructure<S>>>, Error> {
    let Some(full) = full_structure(s)? else {
        return Ok(None);
    };
    let present: std::collections::HashSet<&S> = s
        .sectors()
        .iter()
        .filter(|c| !c.blocks().is_empty())
        .map(|c| c.sector())
        .collect();
    let mask: BitVec = full
        .blocks()
        .map(|b| present.contains(full.sectors()[b.coupled()].sector()))
        .collect();
    let whole = full.with_present(&mask)?;
    if whole.num_blocks() == s.num_blocks() {
        return Ok(None);
    }
    Ok(Some(Arc::new(whole)))
}

/// `a` on the structure with every allowed block, absent blocks as zeros, or `None` when
/// every allowed block of `a` is present (then `a` is that already). The copy is one
/// scheduled task per coupled sector of `a` that reads exactly that sector's blocks and
/// overwrites the full sector matrix; coupled sectors with no present block stay zero.
pub(crate) fn with_absent_as_zeros<T: Field, S: AbelianSector>(
    a: &AsyncArray<T, S>,
) -> Result<Option<AsyncArray<T, S>>, Error> {
    let s = a.structure();
    let Some(full) = full_structure(s)? else {
        return Ok(None);
    };
    let out = AsyncArray::<T, S>::try_zeros(Arc::clone(&full))?;
    let n_codomain = s.n_codomain();
    let rt = tessera_core::Runtime::current();
    for sector in s.sectors() {
        let c = full
            .sector_index(sector.sector())
            .expect("a coupled sector with a present block is a sector of the full structure");
        let ids: Vec<usize> = sector.blocks().collect();
        // Without a mask, block ids are the allowed indices: block `id` of `a` is block
        // `allowed_index()` of the full structure, and that block's place in the full sector
        // matrix is where it goes.
        let places: Vec<(usize, usize)> = ids
            .iter()
            .map(|&id| {
                let allowed = s.block(id).expect("an id of the sector").allowed_index();
                let b = full.block(allowed).expect("every allowed block is present");
                (b.rows().start, b.cols().start)
            })
            .collect();
        rt.schedule_named(
            "coalesce.absent_as_zeros",
            (
                a.block_set(&ids)?.into_read(),
                out.sector(c)?.into_overwrite(),
            ),
            move |(blocks, mut m)| {
                m.fill(T::ZERO);
                for (k, &(r, c)) in places.iter().enumerate() {
                    let src = matrix_ref(&blocks.get(k), n_codomain)
                        .expect("a block folds into its rows and columns");
                    m.as_mut()
                        .submatrix_mut(r, c, src.nrows(), src.ncols())
                        .copy_from(src);
                }
                Ok(())
            },
        )?;
    }
    Ok(Some(out))
}

/// The first number of `m` (column-major) that is not finite, with its place.
fn first_non_finite<T: Scalar>(m: MatRef<'_, T>) -> Option<(usize, usize, T)> {
    (0..m.ncols())
        .flat_map(|j| (0..m.nrows()).map(move |i| (i, j)))
        .map(|(i, j)| (i, j, m[(i, j)]))
        .find(|&(_, _, x)| !is_finite(x))
}

/// Whether both parts of `x` are finite.
fn is_finite<T: Scalar>(x: T) -> bool {
    let z = x.to_c64();
    z.re.is_finite() && z.im.is_finite()
}

/// What a factorization kernel knows of the sector it works on, for its errors.
#[derive(Clone, Debug)]
pub(crate) struct SectorInfo {
    /// Which factorization.
    pub(crate) operation: &'static str,
    /// The coupled sector, in `Display` form.
    pub(crate) sector: String,
}

impl SectorInfo {
    pub(crate) fn new<S: AbelianSector>(operation: &'static str, sector: &S) -> Self {
        Self {
            operation,
            sector: sector.to_string(),
        }
    }

    /// [`Error::NonFinite`] for `value` at `place` of this sector's `rows x cols` matrix.
    pub(crate) fn non_finite(
        &self,
        (rows, cols): (usize, usize),
        value: impl std::fmt::Display,
        place: String,
    ) -> KernelError {
        kernel_error(Error::NonFinite {
            operation: self.operation,
            sector: self.sector.clone(),
            rows,
            cols,
            value: value.to_string(),
            place,
        })
    }

    /// Fails with [`Error::NonFinite`] at the first entry of `m` (what the kernel reads, or a
    /// factor it computed, named `what`) that is not finite. `shape` is the sector matrix's.
    pub(crate) fn check_finite<T: Scalar>(
        &self,
        m: MatRef<'_, T>,
        shape: (usize, usize),
        what: &str,
    ) -> Result<(), KernelError> {
        match first_non_finite(m) {
            None => Ok(()),
            Some((i, j, x)) => {
                Err(self.non_finite(shape, x, format!("entry ({i}, {j}) of {what}")))
            }
        }
    }

    /// Fails with [`Error::NonFinite`] at the first of `values` (named `what`) that is not
    /// finite.
    pub(crate) fn check_values(
        &self,
        values: &[f64],
        shape: (usize, usize),
        what: &str,
    ) -> Result<(), KernelError> {
        match values.iter().position(|x| !x.is_finite()) {
            None => Ok(()),
            Some(k) => Err(self.non_finite(shape, values[k], format!("{what} {k}"))),
        }
    }
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
