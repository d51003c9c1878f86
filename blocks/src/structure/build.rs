//! The structure builder: from legs, a split, a flux and a presence rule to the descriptor
//! table of a [`BlockStructure`], in named steps (see `BlockStructure::build`).
//!
//! Owns the enumeration of each side's segment tuples by fused sector (`Side`), the pairing
//! of row and column groups, the counting and reservation of the tables, the placement of
//! each coupled sector's blocks (dense or packed) and the rank table of the presence mask.
//! Invariant: a structure leaves `build` consistent with its inputs as the parent module's
//! docs describe it (canonical order, the layout, the lookup tables), or the build fails
//! with a typed error before the structure exists; every size it computes is checked.

use bitvec::prelude::{BitSlice, BitVec};
use std::ops::Range;
use std::sync::OnceLock;

use super::{BlockStructure, CoupledSector, Entry, KeptPermutations};
use crate::error::{Error, try_vec};
use crate::leg::Leg;
use crate::sector::AbelianSector;

/// How a build decides presence: called once per allowed block, in canonical order.
pub(super) enum Presence<'a> {
    All,
    Bits(&'a BitSlice),
    Pred(&'a mut dyn FnMut(&[usize]) -> bool),
}

/// One tuple of segments of a side: its fused effective sector, its enumeration number, and
/// the product of its segment dimensions.
#[derive(Clone, Debug)]
struct Tuple<S> {
    fused: S,
    index: usize,
    dim: usize,
}

/// The tuples of one side (codomain or domain), grouped by the fusion of their effective
/// sectors: groups in increasing sector order, each group's tuples in enumeration order
/// (first leg fastest).
struct Side<S> {
    /// The segment counts of the side's legs: the mixed radix of enumeration numbers.
    radix: Vec<usize>,
    /// Group after group.
    tuples: Vec<Tuple<S>>,
    /// Each group's fused sector and its range of `tuples`, in increasing sector order.
    groups: Vec<(S, Range<usize>)>,
    /// Per tuple (by enumeration number): its group and its position in the group.
    slots: Vec<(u32, u32)>,
}

impl<S: Ord> Side<S> {
    /// Writes the segments of tuple `t` (its enumeration number) into `out`, one per leg.
    fn write_tuple(&self, mut t: usize, out: &mut [usize]) {
        if let Some((last, rest)) = out.split_last_mut() {
            for (o, &n) in rest.iter_mut().zip(&self.radix) {
                *o = t % n;
                t /= n;
            }
            *last = t;
        }
    }

    fn group(&self, i: usize) -> &[Tuple<S>] {
        &self.tuples[self.groups[i].1.clone()]
    }

    /// The group of sector `c`, looked for first next to group `near` (fusing a run of
    /// increasing sectors with the flux often gives neighbouring groups), then by bisection.
    fn find(&self, c: &S, near: usize) -> Option<usize> {
        let lo = near.saturating_sub(1);
        let hi = (near + 2).min(self.groups.len());
        (lo..hi)
            .find(|&j| self.groups[j].0 == *c)
            .or_else(|| self.groups.binary_search_by(|(g, _)| g.cmp(c)).ok())
    }
}

/// Room for the `count` tuples of one side: at most 2^32 (tuple numbers, group counts and
/// positions are kept as `u32`), checked before anything is allocated.
fn try_tuples<S>(count: usize) -> Result<Vec<Tuple<S>>, Error> {
    if u32::try_from(count).is_err() {
        return Err(Error::Overflow {
            what: "segment tuples of one side (at most 2^32)",
        });
    }
    try_vec(count, "segment tuples")
}

/// A presence mask of `len` bits, all `set` (dead bits of the last word clear, as
/// `BitVec::repeat` leaves them), or the allocation's error.
fn try_mask(len: usize, set: bool) -> Result<BitVec, Error> {
    let bits = usize::BITS as usize;
    let words = len.div_ceil(bits);
    let mut raw: Vec<usize> = try_vec(words, "presence mask")?;
    raw.resize(words, if set { usize::MAX } else { 0 });
    if let Some(last) = raw.last_mut()
        && !len.is_multiple_of(bits)
    {
        *last &= (1usize << (len % bits)) - 1;
    }
    let mut mask = BitVec::from_vec(raw);
    mask.truncate(len);
    Ok(mask)
}

fn enumerate_side<S: AbelianSector>(legs: &[Leg<S>]) -> Result<Side<S>, Error> {
    let k = legs.len();
    let mut side = Side {
        radix: legs.iter().map(Leg::num_segments).collect(),
        tuples: Vec::new(),
        groups: Vec::new(),
        slots: Vec::new(),
    };
    if side.radix.contains(&0) {
        return Ok(side);
    }
    // In order already (a sorted leg), or strictly decreasing (a sorted leg flipped by its
    // direction), where reversing is the stable sort: no two keys are equal.
    let (mut sorted, mut reversed) = (true, true);
    let mut push = |side: &mut Side<S>, fused: S, dim: usize| {
        if let Some(last) = side.tuples.last() {
            sorted &= last.fused <= fused;
            reversed &= last.fused > fused;
        }
        let index = side.tuples.len();
        side.tuples.push(Tuple { fused, index, dim });
    };
    if let [leg] = legs {
        // One leg (a matrix side): its segments are the tuples.
        side.tuples = try_tuples(leg.num_segments())?;
        for seg in leg.segments() {
            push(&mut side, leg.direction().act(&seg.sector), seg.dim);
        }
    } else {
        let eff: Vec<Vec<S>> = legs
            .iter()
            .map(|l| {
                l.segments()
                    .iter()
                    .map(|s| l.direction().act(&s.sector))
                    .collect()
            })
            .collect();
        let count = side
            .radix
            .iter()
            .try_fold(1usize, |n, &m| n.checked_mul(m))
            .ok_or(Error::Overflow {
                what: "number of segment tuples",
            })?;
        side.tuples = try_tuples(count)?;
        let mut idx = vec![0usize; k];
        loop {
            let mut fused = S::trivial();
            let mut dim = 1usize;
            for (l, &i) in idx.iter().enumerate() {
                fused = fused.fuse_abelian(&eff[l][i]);
                dim =
                    dim.checked_mul(legs[l].segments()[i].dim)
                        .ok_or_else(|| Error::Overflow {
                            what: "block row or column count",
                        })?;
            }
            push(&mut side, fused, dim);
            // Odometer, first leg fastest.
            let mut l = 0;
            loop {
                if l == k {
                    break;
                }
                idx[l] += 1;
                if idx[l] < side.radix[l] {
                    break;
                }
                idx[l] = 0;
                l += 1;
            }
            if l == k {
                break;
            }
        }
    }
    // Stable, so each group keeps enumeration order.
    if reversed {
        side.tuples.reverse();
    } else if !sorted {
        side.tuples.sort_by(|x, y| x.fused.cmp(&y.fused));
    }
    // Group counts and positions fit in u32 (`try_tuples` checked the tuple count). One
    // group per tuple at most (matrix sides often have that many).
    side.slots = try_vec(side.tuples.len(), "segment tuple index")?;
    side.slots.resize(side.tuples.len(), (0, 0));
    side.groups = try_vec(side.tuples.len(), "segment tuple groups")?;
    for (at, t) in side.tuples.iter().enumerate() {
        match side.groups.last_mut() {
            Some((last, range)) if *last == t.fused => range.end += 1,
            _ => side.groups.push((t.fused.clone(), at..at + 1)),
        }
        let (g, range) = (side.groups.len() - 1, &side.groups[side.groups.len() - 1].1);
        side.slots[t.index] = (g as u32, (at - range.start) as u32);
    }
    Ok(side)
}

/// Step 1 of [`BlockStructure::build`]: the column group completing each row group to the
/// flux, as `(row group, column group)` pairs in row-group order. Establishes: each pair's
/// sectors fuse to the flux, and row groups with no partner are left out.
fn pair_groups<S: AbelianSector>(rows: &Side<S>, cols: &Side<S>, flux: &S) -> Vec<(usize, usize)> {
    let mut pairs: Vec<(usize, usize)> = Vec::with_capacity(rows.groups.len());
    let mut near = 0;
    for (i, (c, _)) in rows.groups.iter().enumerate() {
        if let Some(j) = cols.find(&c.dual().fuse_abelian(flux), near) {
            pairs.push((i, j));
            near = j;
        }
    }
    pairs
}

/// Step 2 of [`BlockStructure::build`]: the number of blocks the symmetry allows (row tuples
/// times column tuples, summed over the pairs). Establishes: that number fits in `usize`.
fn count_allowed<S: AbelianSector>(
    rows: &Side<S>,
    cols: &Side<S>,
    pairs: &[(usize, usize)],
) -> Result<usize, Error> {
    let mut n_allowed = 0usize;
    for &(i, j) in pairs {
        n_allowed = rows
            .group(i)
            .len()
            .checked_mul(cols.group(j).len())
            .and_then(|m| n_allowed.checked_add(m))
            .ok_or_else(|| overflow("number of allowed blocks"))?;
    }
    Ok(n_allowed)
}

/// The error for a size that does not fit in `usize`.
fn overflow(what: &'static str) -> Error {
    Error::Overflow { what }
}

/// The total dimension of a group of segment tuples, checked.
fn dims_sum<S>(group: &[Tuple<S>]) -> Result<usize, Error> {
    group.iter().try_fold(0usize, |total, t| {
        total
            .checked_add(t.dim)
            .ok_or_else(|| overflow("sector matrix size"))
    })
}

/// The starts of the live tuples (those whose start is not `usize::MAX`) of a group in the
/// sector matrix, written over their marks, and (total dimension, live count).
fn place_live<S>(starts: &mut [usize], group: &[Tuple<S>]) -> Result<(usize, usize), Error> {
    let (mut total, mut live) = (0usize, 0usize);
    for (st, t) in starts.iter_mut().zip(group) {
        if *st != usize::MAX {
            *st = total;
            total = total
                .checked_add(t.dim)
                .ok_or_else(|| overflow("sector matrix size"))?;
            live += 1;
        }
    }
    Ok((total, live))
}

/// One coupled sector as [`BlockStructure::build`] places it: the two sides, the sector's
/// row and column groups, its index among the kept sectors and its offset in the allocation.
struct SectorSides<'a, S> {
    rows: &'a Side<S>,
    cols: &'a Side<S>,
    rg: &'a [Tuple<S>],
    cg: &'a [Tuple<S>],
    coupled: usize,
    offset: usize,
}

/// What placing one coupled sector established: its matrix's dims, whether its blocks lie in
/// that matrix (dense) or packed, and its length in the allocation.
struct SectorShape {
    n_rows: usize,
    n_cols: usize,
    dense: bool,
    len: usize,
}

/// The buffers [`BlockStructure::build`] reuses from sector to sector: one segment tuple,
/// the present blocks `(row, column, allowed index)` of the sector, and the starts of its
/// live rows and columns.
struct Scratch {
    tuple: Vec<usize>,
    present: Vec<(usize, usize, usize)>,
    row_start: Vec<usize>,
    col_start: Vec<usize>,
}

impl<S: AbelianSector> BlockStructure<S> {
    /// Builds the structure of `legs` (the first `n_codomain` of them the codomain) with
    /// `flux`, holding the allowed blocks that `presence` selects, in named steps:
    /// [`pair_groups`] (which row group couples to which column group), [`count_allowed`]
    /// (how many blocks the symmetry allows), [`Self::reserve`] (the tables, sized before
    /// anything is filled), one [`Self::place_dense_sector`] or
    /// [`Self::place_selected_sector`] per coupled sector (the blocks' offsets, shapes and
    /// strides), and [`Self::rank_present`] (the rank table of the presence mask).
    pub(super) fn build(
        legs: Vec<Leg<S>>,
        n_codomain: usize,
        flux: S,
        mut presence: Presence<'_>,
    ) -> Result<Self, Error> {
        let n = legs.len();
        if n_codomain > n {
            return Err(Error::SplitOutOfRange {
                n_codomain,
                legs: n,
            });
        }
        let mut rows = enumerate_side(&legs[..n_codomain])?;
        let mut cols = enumerate_side(&legs[n_codomain..])?;
        let pairs = pair_groups(&rows, &cols, &flux);
        let n_allowed = count_allowed(&rows, &cols, &pairs)?;
        if let Presence::Bits(mask) = &presence
            && mask.len() != n_allowed
        {
            return Err(Error::MaskLength {
                expected: n_allowed,
                given: mask.len(),
            });
        }
        let mut s = Self::reserve(
            legs, n_codomain, flux, &presence, n_allowed, &pairs, &mut rows, &mut cols,
        )?;
        let mut scratch = Scratch {
            tuple: vec![0usize; n],
            present: Vec::new(),
            row_start: Vec::new(),
            col_start: Vec::new(),
        };
        let mut allowed = 0usize;
        for (i, j) in pairs {
            let (c, rg, cg) = (&rows.groups[i].0, rows.group(i), cols.group(j));
            // Group counts and lengths fit in u32: `enumerate_side` checked the tuple counts.
            s.pairing[i] = (j as u32, rg.len() as u32, allowed);
            let coupled = s.sectors.len();
            let first_block = s.entries.len();
            let sector_offset = s.total_len;
            let sides = SectorSides {
                rows: &rows,
                cols: &cols,
                rg,
                cg,
                coupled,
                offset: sector_offset,
            };
            let shape = if let Presence::All = presence {
                s.place_dense_sector(&sides, &mut allowed, &mut scratch.tuple)?
            } else {
                match s.place_selected_sector(&sides, &mut presence, &mut allowed, &mut scratch)? {
                    Some(shape) => shape,
                    None => continue,
                }
            };
            s.total_len = sector_offset + shape.len;
            s.sectors.push(CoupledSector {
                sector: c.clone(),
                offset: sector_offset,
                len: shape.len,
                rows: shape.n_rows,
                cols: shape.n_cols,
                dense: shape.dense,
                blocks: first_block..s.entries.len(),
            });
        }
        s.rank_present();
        Ok(s)
    }

    /// Step 3 of [`Self::build`]: the structure with no block yet, its tables reserved.
    /// Every allowed block is present unless a mask or predicate says otherwise: room for
    /// that (the common case), so the tables grow without copies. The tables are the largest
    /// part, asked for first: a structure of more blocks than memory holds is refused before
    /// its presence mask is filled. Establishes: the legs, split and flux are set; the
    /// presence mask holds `n_allowed` bits (all set for [`Presence::All`]); the sides'
    /// slot tables are moved in; every pairing is unset.
    #[allow(clippy::too_many_arguments)]
    fn reserve(
        legs: Vec<Leg<S>>,
        n_codomain: usize,
        flux: S,
        presence: &Presence<'_>,
        n_allowed: usize,
        pairs: &[(usize, usize)],
        rows: &mut Side<S>,
        cols: &mut Side<S>,
    ) -> Result<Self, Error> {
        let n = legs.len();
        let expect = match presence {
            Presence::All => n_allowed,
            Presence::Bits(mask) => mask.count_ones(),
            Presence::Pred(_) => 0,
        };
        let per_leg = expect.checked_mul(n).ok_or(Error::Overflow {
            what: "per-leg block tables",
        })?;
        let entries = try_vec(expect, "block table")?;
        let (seg, shape, strides) = (
            try_vec(per_leg, "per-leg block tables")?,
            try_vec(per_leg, "per-leg block tables")?,
            try_vec(per_leg, "per-leg block tables")?,
        );
        let sec = try_vec(per_leg, "per-leg block tables")?;
        Ok(BlockStructure {
            legs,
            n_codomain,
            flux,
            present: try_mask(n_allowed, matches!(presence, Presence::All))?,
            seg,
            sec,
            shape,
            strides,
            entries,
            sectors: try_vec(pairs.len(), "coupled sector table")?,
            row_slot: std::mem::take(&mut rows.slots),
            col_slot: std::mem::take(&mut cols.slots),
            pairing: vec![(u32::MAX, 0, 0); rows.groups.len()],
            rank: Vec::new(),
            total_len: 0,
            fingerprint: OnceLock::new(),
            permutations: KeptPermutations::default(),
        })
    }

    /// Step 4 of [`Self::build`] for a structure of every allowed block: the whole rectangle
    /// of the coupled sector is present, so the sector is dense and its blocks follow in
    /// canonical order (column-major), with no selection pass. Establishes: every block of
    /// the sector is pushed, at its place in the sector matrix (leading dimension the
    /// sector's row count); `allowed` has advanced past the sector's allowed blocks; the
    /// sector matrix's end fits in `usize`.
    fn place_dense_sector(
        &mut self,
        sides: &SectorSides<'_, S>,
        allowed: &mut usize,
        tuple: &mut [usize],
    ) -> Result<SectorShape, Error> {
        let nc = self.n_codomain;
        let (rg, cg) = (sides.rg, sides.cg);
        let (n_rows, n_cols) = (dims_sum(rg)?, dims_sum(cg)?);
        let len = n_rows
            .checked_mul(n_cols)
            .filter(|&len| sides.offset.checked_add(len).is_some())
            .ok_or_else(|| overflow("allocation length"))?;
        let mut col = 0;
        for ct in cg {
            sides.cols.write_tuple(ct.index, &mut tuple[nc..]);
            let mut row = 0;
            for rt in rg {
                sides.rows.write_tuple(rt.index, &mut tuple[..nc]);
                // Inside the sector matrix, whose end was checked above.
                let entry = Entry {
                    offset: sides.offset + row + col * n_rows,
                    len: rt.dim * ct.dim,
                    coupled: sides.coupled,
                    rows: row..row + rt.dim,
                    cols: col..col + ct.dim,
                    allowed: *allowed,
                    tuples: (rt.index as u32, ct.index as u32),
                };
                self.push_block(tuple, n_rows, entry);
                row += rt.dim;
                *allowed += 1;
            }
            col += ct.dim;
        }
        Ok(SectorShape {
            n_rows,
            n_cols,
            dense: true,
            len,
        })
    }

    /// Step 4 of [`Self::build`] for a structure whose blocks a mask or predicate selects:
    /// the selection pass over the sector's allowed blocks, then the placement of the present
    /// ones. The sector matrix holds only the live rows and columns (those with a present
    /// block); the sector is dense when every live row meets every live column, and its
    /// blocks are then placed in the matrix, else packed one after another. Establishes: the
    /// present bits of the sector's allowed blocks are set; the present blocks are pushed;
    /// `allowed` has advanced past the sector's allowed blocks. `None` when no block of the
    /// sector is present (the sector is not kept).
    fn place_selected_sector(
        &mut self,
        sides: &SectorSides<'_, S>,
        presence: &mut Presence<'_>,
        allowed: &mut usize,
        scratch: &mut Scratch,
    ) -> Result<Option<SectorShape>, Error> {
        let nc = self.n_codomain;
        let (rg, cg, sector_offset) = (sides.rg, sides.cg, sides.offset);
        let Scratch {
            tuple,
            present: present_rq,
            row_start,
            col_start,
        } = scratch;
        present_rq.clear();
        for (q, ct) in cg.iter().enumerate() {
            for (r, rt) in rg.iter().enumerate() {
                let here = match presence {
                    Presence::All => unreachable!("placed by `place_dense_sector`"),
                    Presence::Bits(mask) => mask[*allowed],
                    Presence::Pred(p) => {
                        sides.rows.write_tuple(rt.index, &mut tuple[..nc]);
                        sides.cols.write_tuple(ct.index, &mut tuple[nc..]);
                        p(tuple)
                    }
                };
                if here {
                    self.present.set(*allowed, true);
                    present_rq.push((r, q, *allowed));
                }
                *allowed += 1;
            }
        }
        if present_rq.is_empty() {
            return Ok(None);
        }
        // Live rows and columns, and their starts in the logical sector matrix.
        row_start.clear();
        row_start.resize(rg.len(), usize::MAX);
        col_start.clear();
        col_start.resize(cg.len(), usize::MAX);
        for &(r, q, _) in present_rq.iter() {
            row_start[r] = 0;
            col_start[q] = 0;
        }
        let ((n_rows, live_rows), (n_cols, live_cols)) =
            (place_live(row_start, rg)?, place_live(col_start, cg)?);
        let dense = present_rq.len() == live_rows * live_cols;
        if dense {
            // Every offset inside the sector matrix then fits in usize.
            n_rows
                .checked_mul(n_cols)
                .and_then(|len| sector_offset.checked_add(len))
                .ok_or_else(|| overflow("allocation length"))?;
        }
        let mut packed_at = sector_offset;
        for &(r, q, allowed) in present_rq.iter() {
            let (rt, ct) = (&rg[r], &cg[q]);
            sides.rows.write_tuple(rt.index, &mut tuple[..nc]);
            sides.cols.write_tuple(ct.index, &mut tuple[nc..]);
            let len = rt
                .dim
                .checked_mul(ct.dim)
                .ok_or_else(|| overflow("block size"))?;
            let (offset, ld) = if dense {
                // Inside the sector matrix, whose end was checked above.
                (sector_offset + row_start[r] + col_start[q] * n_rows, n_rows)
            } else {
                let at = packed_at;
                packed_at = packed_at
                    .checked_add(len)
                    .ok_or_else(|| overflow("allocation length"))?;
                (at, rt.dim)
            };
            let entry = Entry {
                offset,
                len,
                coupled: sides.coupled,
                rows: row_start[r]..row_start[r] + rt.dim,
                cols: col_start[q]..col_start[q] + ct.dim,
                allowed,
                tuples: (rt.index as u32, ct.index as u32),
            };
            self.push_block(tuple, ld, entry);
        }
        let len = if dense {
            n_rows * n_cols
        } else {
            packed_at - sector_offset
        };
        Ok(Some(SectorShape {
            n_rows,
            n_cols,
            dense,
            len,
        }))
    }

    /// Step 5 of [`Self::build`]: the rank table of the presence mask. Establishes:
    /// `rank[w]` is the number of present blocks in the mask's words before word `w`, so a
    /// block's id is its word's rank plus the ones below it in its word.
    fn rank_present(&mut self) {
        let mut before = 0usize;
        self.rank = self
            .present
            .as_raw_slice()
            .iter()
            .map(|w| {
                let at = before;
                before += w.count_ones() as usize;
                at
            })
            .collect();
    }

    /// Appends a present block: its per-leg data (segments `tuple`; strides `1, d0, ...` over
    /// the codomain legs, `ld, ld * e0, ...` over the domain legs) and its entry.
    fn push_block(&mut self, tuple: &[usize], ld: usize, entry: Entry) {
        // Products of leg dimensions bounded by the (checked) block and sector sizes, so
        // they cannot overflow.
        let mut stride = 1usize;
        for (l, &seg) in tuple.iter().enumerate() {
            if l == self.n_codomain {
                stride = ld;
            }
            let leg_segment = &self.legs[l].segments()[seg];
            self.seg.push(seg);
            self.sec.push(leg_segment.sector.clone());
            self.shape.push(leg_segment.dim);
            self.strides.push(stride);
            stride *= leg_segment.dim;
        }
        self.entries.push(entry);
    }
}
