//! Coalesced views of an [`AsyncArray`]: one alias over several blocks.
//!
//! Owns the [`Coalesce`] extension trait, the one place where a [`SectorRegion`] is paired
//! with records: sector views and zero-copy block-set views (gathers live in `gather`). Invariant: a coalesced alias carries [`HazardSet::composite`] of exactly the
//! records of the blocks whose elements its matrix covers, so an access through it is
//! enrolled on all of them in one step: a write excludes every overlapping block access and
//! every overlapping coalesced access, reads share with reads.

use crate::error::Error;
use crate::gather::{BlockSet, GatheredBlocks};
use crate::region::{Rect, SectorAlias, SectorRegion, SectorsAlias, SectorsRegion};
use std::sync::Arc;
use tessera_backends::Scalar;
use tessera_blocks::{AbelianSector, AsyncArray};
use tessera_core::{Alias, HazardSet};

/// Coalesced views of an array.
pub trait Coalesce<T: Scalar> {
    /// The coalesced view of coupled sector `c` (an index into `structure().sectors()`): its
    /// contiguous, column-major sector matrix (no copy), ordered by the records of exactly the
    /// sector's blocks. Inside a task it resolves to a faer `MatRef` / `MatMut`.
    ///
    /// ```
    /// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    /// use tessera_coalesce::Coalesce;
    ///
    /// let row = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)])?;
    /// let s = BlockStructure::new([row.clone()], [row.dual()], U1(0))?;
    /// let a = AsyncArray::<f64, U1>::random(s, 1);
    /// let m = a.sector(1)?; // the 3 x 3 matrix of charge 1
    /// let trace = m.with(|m| (0..3).map(|i| m[(i, i)]).sum::<f64>())?;
    /// # let _ = trace;
    /// # Ok::<(), tessera_coalesce::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::UnknownSector`] for an index past the sectors; [`Error::PackedSector`] for a
    /// sector whose blocks do not form one matrix (a masked structure).
    fn sector(&self, c: usize) -> Result<SectorAlias<T>, Error>;

    /// The coalesced view of several coupled sectors at once (indices into
    /// `structure().sectors()`; a repeated one is listed twice): one alias whose region lists their matrices
    /// and whose hazard set is the composite of all their blocks' records. A batch of small
    /// GEMMs takes one such view per operand instead of one alias per sector.
    ///
    /// ```
    /// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    /// use tessera_coalesce::Coalesce;
    ///
    /// let row = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)])?;
    /// let s = BlockStructure::new([row.clone()], [row.dual()], U1(0))?;
    /// let a = AsyncArray::<f64, U1>::random(s, 1);
    /// let both = a.sectors(&[0, 1])?;
    /// let rows = both.with(|m| (0..m.len()).map(|i| m.get(i).nrows()).collect::<Vec<_>>())?;
    /// assert_eq!(rows, [2, 3]);
    /// # Ok::<(), tessera_coalesce::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`sector`](Coalesce::sector), for the first sector that fails.
    fn sectors(&self, cs: &[usize]) -> Result<SectorsAlias<T>, Error>;

    /// The zero-copy view of a set of blocks of one dense coupled sector that tile one
    /// rectangle of its sector matrix (a run of block rows by a run of block columns: the
    /// whole sector, a contiguous run of its columns, ...). The view is that strided
    /// sub-matrix of the allocation (leading dimension: the sector's rows), ordered by
    /// exactly the records of the given blocks. Never copies; a set that is not one matrix
    /// is refused, and [`gather_blocks`](Coalesce::gather_blocks) is the explicit copy.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyBlockSet`], [`Error::RepeatedBlock`], an unknown block
    /// ([`Error::Blocks`]), [`Error::MixedSectors`], and [`Error::NotOneMatrix`] when the
    /// sector is packed or the blocks leave a hole in the rectangle they span.
    fn blocks_view(&self, ids: &[usize]) -> Result<SectorAlias<T>, Error>;

    /// Copies a set of blocks of one coupled sector (dense or packed) into a fresh temporary
    /// matrix, with a scheduled task that reads the blocks (enrolled on all their records
    /// in one step). See [`GatheredBlocks`] for the write-back.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyBlockSet`], [`Error::RepeatedBlock`], an unknown block
    /// ([`Error::Blocks`]) and [`Error::MixedSectors`]; nothing is enrolled then.
    fn gather_blocks(&self, ids: &[usize]) -> Result<GatheredBlocks<T>, Error>;
}

impl<T: Scalar, S: AbelianSector> Coalesce<T> for AsyncArray<T, S> {
    fn sector(&self, c: usize) -> Result<SectorAlias<T>, Error> {
        let region = SectorRegion::from_rect(Arc::clone(self.buffer()), sector_rect(self, c)?);
        let hazards = composite(self, self.structure().sectors()[c].blocks())?;
        // SAFETY: a dense sector's matrix holds exactly the elements of the sector's blocks
        // (the structure's layout), and `hazards` holds every one of their records; no other
        // block shares an element with them.
        Ok(unsafe { Alias::from_parts(region, hazards) })
    }

    fn sectors(&self, cs: &[usize]) -> Result<SectorsAlias<T>, Error> {
        let rects = cs
            .iter()
            .map(|&c| sector_rect(self, c))
            .collect::<Result<Vec<_>, _>>()?;
        let sectors = self.structure().sectors();
        let hazards = composite(self, cs.iter().flat_map(|&c| sectors[c].blocks()))?;
        let region = SectorsRegion::new(Arc::clone(self.buffer()), rects);
        // SAFETY: each dense sector's matrix holds exactly the elements of that sector's
        // blocks, and `hazards` holds the records of every block of every listed sector.
        Ok(unsafe { Alias::from_parts(region, hazards) })
    }

    fn blocks_view(&self, ids: &[usize]) -> Result<SectorAlias<T>, Error> {
        let set = BlockSet::new(self, ids)?;
        let sector = &self.structure().sectors()[set.sector];
        if !sector.is_dense() {
            return Err(Error::NotOneMatrix {
                reason: format!(
                    "their sector {} is packed (its blocks are stored apart)",
                    set.sector
                ),
            });
        }
        let (tiles, area) = set.tiles_rectangle();
        if !tiles {
            return Err(Error::NotOneMatrix {
                reason: format!(
                    "they cover {area} of the {} elements of the {} x {} rectangle they span",
                    set.rows.len() * set.cols.len(),
                    set.rows.len(),
                    set.cols.len()
                ),
            });
        }
        let ld = sector.rows();
        let offset = sector.offset() + set.rows.start + set.cols.start * ld;
        let region = SectorRegion::new(
            Arc::clone(self.buffer()),
            offset,
            set.rows.len(),
            set.cols.len(),
            ld,
        )
        .expect("a rectangle of a dense sector matrix lies inside the allocation");
        let hazards = composite(self, set.blocks.iter().map(|b| b.0))?;
        // SAFETY: in a dense sector a block is exactly its sub-rectangle of the sector matrix;
        // the blocks tile the region's rectangle, so the region's elements are exactly the
        // elements of these blocks, and `hazards` holds every one of their records.
        Ok(unsafe { Alias::from_parts(region, hazards) })
    }

    fn gather_blocks(&self, ids: &[usize]) -> Result<GatheredBlocks<T>, Error> {
        let set = BlockSet::new(self, ids)?;
        GatheredBlocks::gather(self, &set)
    }
}

/// The matrix of dense coupled sector `c`, checked against the allocation.
fn sector_rect<T: Scalar, S: AbelianSector>(
    array: &AsyncArray<T, S>,
    c: usize,
) -> Result<Rect, Error> {
    let sectors = array.structure().sectors();
    let sector = sectors.get(c).ok_or(Error::UnknownSector {
        sector: c,
        sectors: sectors.len(),
    })?;
    if !sector.is_dense() {
        return Err(Error::PackedSector {
            sector: c,
            blocks: sector.blocks().len(),
            rows: sector.rows(),
            cols: sector.cols(),
        });
    }
    Ok(Rect::checked(
        array.buffer(),
        sector.offset(),
        sector.rows(),
        sector.cols(),
        sector.rows(),
    )
    .expect("the structure places every dense sector matrix inside the allocation"))
}

/// The composite of the records of blocks `ids`.
pub(crate) fn composite<T: Scalar, S: AbelianSector>(
    array: &AsyncArray<T, S>,
    ids: impl IntoIterator<Item = usize>,
) -> Result<HazardSet, Error> {
    Ok(array.hazards_of(ids)?)
}
