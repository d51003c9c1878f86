//! Distributed factorizations: each coupled sector factored by the rank that holds it, one
//! global truncation agreed from every rank's singular values.
//!
//! Owns: [`svd`] and its result [`DistSvd`]. Invariants: a sector's matrix never moves (the
//! input is placed so that each coupled sector is on one rank, and its factors' sectors are
//! placed on that same rank); the only messages are the singular values, each rank's sent to
//! every other, so every rank ranks the same values in the same order and makes the same
//! truncation ([`Truncation::select`]): the factors are those of one process, sector for
//! sector.

use crate::array::{DistArray, all_gather};
use crate::error::Error;
use crate::map::ProcessMap;
use std::collections::HashMap;
use std::sync::Arc;
use tessera_backends::{Field, Real, Scalar};
use tessera_blocks::AbelianSector;
use tessera_coalesce::{SectorSvds, SingularValues, Truncation, svd_layout, svd_sectors};

/// The result of a distributed [`svd`]: the factors as distributed arrays, each sector on
/// the rank that factored it, and the kept singular values on every rank.
#[derive(Debug)]
pub struct DistSvd<T: Field, S: AbelianSector> {
    /// `U`: `A`'s codomain legs to the bond leg.
    pub u: DistArray<T, S>,
    /// The kept singular values, per bond segment, the same on every rank.
    pub s: SingularValues<Real<T>, S>,
    /// `V†`: the dual bond leg to `A`'s domain legs.
    pub vt: DistArray<T, S>,
    /// The sum of the squares of the discarded singular values.
    pub discarded_weight: f64,
    /// The sum of the squares of all singular values.
    pub total_weight: f64,
}

/// Whether every coupled sector of `a` has all its blocks on one rank.
fn by_whole_sectors<T: Field, S: AbelianSector>(a: &DistArray<T, S>) -> bool {
    a.structure().sectors().iter().all(|c| {
        let mut owners = c.blocks().map(|b| a.owners().of(b));
        owners.next().is_none_or(|first| owners.all(|r| r == first))
    })
}

/// The singular value decomposition of a distributed `a`, per coupled sector, truncated
/// globally as [`tessera_coalesce::svd`] truncates one process's tensor: each sector's
/// SVD runs on the rank that holds the sector, the ranks exchange only the singular values
/// (a few numbers per state), and every rank selects the same ones. An `a` whose sectors are
/// split over ranks is first redistributed [`ProcessMap::BySector`] (one call; only the
/// blocks that move travel). The factors are placed by sector alike, `U`'s and `V†`'s
/// sector of charge `c` on the rank that held `A`'s. Collective; waits for the singular
/// values, as the one-process SVD does.
///
/// Coupled sectors without a block (a masked structure's) are not factored: where the one
/// process SVD factors them as zeros, their zero values would only be kept by a truncation
/// that keeps zeros.
///
/// # Errors
///
/// The truncation's and the factorization's errors ([`Error::Coalesce`]: a sector with a
/// NaN, a poisoned input) on the rank that met them; [`Error::Remote`] naming that rank's
/// error on every other rank.
pub fn svd<T: Field, S: AbelianSector>(
    a: &DistArray<T, S>,
    truncation: &Truncation,
) -> Result<DistSvd<T, S>, Error> {
    if !by_whole_sectors(a) {
        return svd(&a.redistribute(&ProcessMap::BySector)?, truncation);
    }
    let comm = a.comm();
    let op = comm.begin();
    let me = comm.rank();
    let st = a.structure();
    // The factored sectors (those with a block) in sector order, with their owners.
    let sectors: Vec<(S, usize)> = st
        .sectors()
        .iter()
        .filter_map(|c| Some((c.sector().clone(), a.owners().of(c.blocks().next()?))))
        .collect();
    let local = truncation
        .check()
        .and_then(|()| svd_sectors(a.local()))
        .map_err(Error::from);
    let (staged, part) = match local {
        Ok(staged) => {
            let part = encode(&staged, sectors.iter().filter(|(_, r)| *r == me));
            (Some(staged), Ok(part))
        }
        Err(e) => (None, Err(e)),
    };
    let parts = all_gather(comm, op, part)?;
    let staged = staged.expect("this rank's part succeeded, or the gather returned its error");
    comm.or_abort(op, || {
        let values = decode(&parts, &sectors)?;
        let kept = truncation.select(&values)?;
        let layout = svd_layout(
            st,
            sectors
                .iter()
                .map(|(l, _)| l.clone())
                .zip(kept.per_sector.iter().copied()),
        )?;
        let owner_of: HashMap<&S, usize> = sectors.iter().map(|(l, r)| (l, *r)).collect();
        let placed = |x: &tessera_blocks::BlockStructure<S>| -> ProcessMap {
            let owners: Arc<[usize]> = x
                .blocks()
                .map(|b| owner_of[x.sectors()[b.coupled()].sector()])
                .collect();
            ProcessMap::Explicit(owners)
        };
        let (u_map, vt_map) = (placed(&layout.u), placed(&layout.vt));
        let u = DistArray::zeros(comm, layout.u, &u_map)?;
        let vt = DistArray::zeros(comm, layout.vt, &vt_map)?;
        let mut s_values = Vec::new();
        for (((label, owner), &k), v) in sectors.iter().zip(&kept.per_sector).zip(&values) {
            if k == 0 {
                continue;
            }
            if *owner == me {
                staged.keep(label, k, u.local(), vt.local())?;
            }
            s_values.push(v[..k].iter().map(|&x| Real::<T>::from_f64(x)).collect());
        }
        Ok(DistSvd {
            u,
            s: SingularValues::new(layout.bond, s_values)?,
            vt,
            discarded_weight: kept.discarded_weight,
            total_weight: kept.total_weight,
        })
    })
}

/// This rank's singular values, sector after sector (`mine`, in sector order): a count,
/// then the values, little-endian.
fn encode<'a, T: Field, S: AbelianSector + 'a>(
    staged: &SectorSvds<T, S>,
    mine: impl Iterator<Item = &'a (S, usize)>,
) -> Vec<u8> {
    let mut out = Vec::new();
    for (label, _) in mine {
        let v = staged.values_of(label).unwrap_or(&[]);
        out.extend_from_slice(&(v.len() as u64).to_le_bytes());
        v.iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    }
    out
}

/// Every sector's singular values, in sector order, from every rank's part.
fn decode<S: AbelianSector>(
    parts: &[Vec<u8>],
    sectors: &[(S, usize)],
) -> Result<Vec<Vec<f64>>, Error> {
    let mut at = vec![0usize; parts.len()];
    let mut read = |rank: usize| -> Result<u64, Error> {
        let b = &parts[rank];
        let word = b
            .get(at[rank]..at[rank] + 8)
            .ok_or_else(|| Error::Mismatch {
                given: format!(
                    "singular values of {} bytes from rank {rank}, cut short",
                    b.len()
                ),
            })?;
        at[rank] += 8;
        Ok(u64::from_le_bytes(word.try_into().expect("8 bytes")))
    };
    let mut values = Vec::with_capacity(sectors.len());
    for (_, rank) in sectors {
        let n = read(*rank)?;
        let v = (0..n)
            .map(|_| read(*rank).map(f64::from_bits))
            .collect::<Result<Vec<_>, _>>()?;
        values.push(v);
    }
    Ok(values)
}
