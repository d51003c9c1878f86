//! Re-tiling: the same tensor cut into blocks of other sizes, and placed anew.
//!
//! Owns: [`tiled_leg`] and [`DistArray::retile`]. Invariant: a re-tiled array holds the
//! elements of the original at the same dense indices (its legs cut the same index space,
//! with the same sector at every index), and every piece of an old block that lands in a
//! new block travels once, from the old block's owner to the new block's, as one frame.
//!
//! This is how a large sector's GEMM is spread over a grid of ranks, SUMMA's way: cut the
//! sector's legs into tiles ([`tiled_leg`]), place the tiles on a [`ProcessMap::Grid`],
//! contract (each `A` tile then travels along its grid row and each `B` tile along its grid
//! column, SUMMA's volume), and re-tile the product back if one block per sector is wanted.

use crate::array::{DistArray, Region, copy_region, recv_region, send_region};
use crate::error::Error;
use crate::map::ProcessMap;
use std::sync::Arc;
use tessera_backends::Scalar;
use tessera_blocks::{AbelianSector, BlockStructure, Leg};

/// `leg` with every segment longer than `max` cut into the fewest pieces of at most `max`
/// (as equal as can be, the earlier ones one longer), each of the segment's sector, in
/// order: the tiles of a SUMMA product.
///
/// # Errors
///
/// [`Error::Map`] for a `max` of 0.
pub fn tiled_leg<S: AbelianSector>(leg: &Leg<S>, max: usize) -> Result<Leg<S>, Error> {
    if max == 0 {
        return Err(Error::Map {
            expected: "tiles of at least one index".into(),
            given: "a tile size of 0".into(),
        });
    }
    let mut segments = Vec::new();
    for s in leg.segments() {
        let parts = s.dim.div_ceil(max);
        let (base, extra) = (s.dim / parts, s.dim % parts);
        segments.extend((0..parts).map(|i| (s.sector.clone(), base + usize::from(i < extra))));
    }
    Ok(Leg::tiled(leg.direction(), segments)?)
}

/// One piece of a new segment: the old segment it lies in, where it starts in the old and
/// in the new segment, and its length.
#[derive(Clone, Copy)]
struct Piece {
    old: usize,
    in_old: usize,
    in_new: usize,
    len: usize,
}

/// For every segment of `new`, the pieces of `old`'s segments it is made of.
fn pieces<S: AbelianSector>(
    old: &Leg<S>,
    new: &Leg<S>,
    axis: usize,
) -> Result<Vec<Vec<Piece>>, Error> {
    let mismatch = |why: String| Error::Mismatch {
        given: format!("leg {axis} re-tiled to a leg that {why}"),
    };
    if old.direction() != new.direction() || old.dim() != new.dim() {
        return Err(mismatch(format!(
            "has direction {:?} and dimension {} (was {:?}, {})",
            new.direction(),
            new.dim(),
            old.direction(),
            old.dim()
        )));
    }
    let (os, ns) = (old.segments(), new.segments());
    let mut out = vec![Vec::new(); ns.len()];
    let (mut i, mut in_old) = (0, 0);
    for (j, n) in ns.iter().enumerate() {
        let mut in_new = 0;
        while in_new < n.dim {
            let o = &os[i];
            if o.sector != n.sector {
                return Err(mismatch(format!(
                    "has sector {} where it had {}",
                    n.sector, o.sector
                )));
            }
            let len = (o.dim - in_old).min(n.dim - in_new);
            out[j].push(Piece {
                old: i,
                in_old,
                in_new,
                len,
            });
            (in_old, in_new) = (in_old + len, in_new + len);
            if in_old == o.dim {
                (i, in_old) = (i + 1, 0);
            }
        }
    }
    Ok(out)
}

impl<T: Scalar, S: AbelianSector> DistArray<T, S> {
    /// The same tensor on `legs`, which cut each leg's index space into other segments (finer,
    /// coarser, or both: [`tiled_leg`] makes tiles, the original legs undo them), with the
    /// same split and flux, placed by `map`. Each piece of an old block travels once, from
    /// its owner to the new block's (a copy when that is the same rank); blocks the original
    /// leaves out (a masked structure) give zeros. Collective; returns at once.
    ///
    /// # Errors
    ///
    /// [`Error::Mismatch`] when a leg differs in direction, dimension or the sector of an
    /// index (the same on every rank: nothing is enrolled); the map's errors.
    pub fn retile(&self, legs: Vec<Leg<S>>, map: &ProcessMap) -> Result<Self, Error> {
        let st = self.structure();
        if legs.len() != st.num_legs() {
            return Err(Error::Mismatch {
                given: format!("{} legs for a tensor of {}", legs.len(), st.num_legs()),
            });
        }
        let cut = st
            .legs()
            .iter()
            .zip(&legs)
            .enumerate()
            .map(|(axis, (o, n))| pieces(o, n, axis))
            .collect::<Result<Vec<_>, _>>()?;
        let structure = Arc::new(BlockStructure::from_legs(
            legs,
            st.n_codomain(),
            st.flux().clone(),
        )?);
        let out = DistArray::zeros(self.comm(), Arc::clone(&structure), map)?;
        let comm = self.comm();
        let op = comm.begin();
        comm.or_abort(op, || {
            let me = comm.rank();
            let mut item = 0_u64;
            for b in structure.blocks() {
                let to = out.owners().of(b.id());
                let lists: Vec<&[Piece]> = b
                    .segments()
                    .iter()
                    .zip(&cut)
                    .map(|(&j, c)| c[j].as_slice())
                    .collect();
                // Every combination of one piece per leg: a box of one old block.
                let mut choice = vec![0; lists.len()];
                loop {
                    let piece: Vec<Piece> = choice.iter().zip(&lists).map(|(&k, l)| l[k]).collect();
                    let olds: Vec<usize> = piece.iter().map(|p| p.old).collect();
                    let this = item;
                    item += 1;
                    if let Some(g) = st.block_id(&olds) {
                        let from = self.owners().of(g);
                        let dims: Vec<usize> = piece.iter().map(|p| p.len).collect();
                        let src: Region = (piece.iter().map(|p| p.in_old).collect(), dims.clone());
                        let dst: Region = (piece.iter().map(|p| p.in_new).collect(), dims);
                        match (from == me, to == me) {
                            (true, true) => copy_region(
                                self.local(),
                                self.local_id(g).expect("owned"),
                                out.local(),
                                out.local_id(b.id()).expect("owned"),
                                Some((src, dst)),
                            )?,
                            (true, false) => send_region(
                                comm,
                                op,
                                this,
                                self.local(),
                                self.local_id(g).expect("owned"),
                                Some(src),
                                vec![to],
                            )?,
                            (false, true) => recv_region(
                                comm,
                                (op, this, from),
                                out.local(),
                                out.local_id(b.id()).expect("owned"),
                                Some(dst),
                            )?,
                            (false, false) => {}
                        }
                    }
                    // The next combination (the first leg fastest).
                    let mut axis = 0;
                    while axis < choice.len() {
                        choice[axis] += 1;
                        if choice[axis] < lists[axis].len() {
                            break;
                        }
                        choice[axis] = 0;
                        axis += 1;
                    }
                    if axis == choice.len() {
                        break;
                    }
                }
            }
            Ok(out)
        })
    }
}
