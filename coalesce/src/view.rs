//! Coalesced views of an [`AsyncArray`]: one alias over several blocks.
//!
//! Owns the [`Coalesce`] extension trait, the one place where a [`SectorRegion`] is paired
//! with records: sector views and zero-copy block-set views (gathers live in `gather`). Invariant: a coalesced alias carries [`HazardSet::composite`] of exactly the
//! records of the blocks whose elements its matrix covers, so an access through it is
//! enrolled on all of them in one step: a write excludes every overlapping block access and
//! every overlapping coalesced access, reads share with reads.

use crate::error::Error;
use crate::gather::{BlockSet, GatheredBlocks};
use crate::region::{SectorAlias, SectorRegion, SectorsAlias, SectorsRegion};
use smallvec::SmallVec;
use std::ops::Range;
use std::sync::Arc;
use tessera_backends::{MatLayout, Scalar};
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure};
use tessera_core::{Alias, HazardSet};

/// Coalesced views of an array.
pub trait Coalesce<T: Scalar> {
    /// The array's sector type.
    type Sector: AbelianSector;

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

    /// The coalesced view of the coupled sector whose codomain charges fuse to `charge`: as
    /// [`sector`](Coalesce::sector), looked up by the charge instead of the position.
    ///
    /// ```
    /// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    /// use tessera_coalesce::Coalesce;
    ///
    /// let row = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)])?;
    /// let s = BlockStructure::new([row.clone()], [row.dual()], U1(0))?;
    /// let a = AsyncArray::<f64, U1>::random(s, 1);
    /// let m = a.sector_by_charge(&U1(1))?; // the 3 x 3 matrix of charge 1
    /// assert_eq!(m.with(|m| m.nrows())?, 3);
    /// assert!(a.sector_by_charge(&U1(2)).is_err()); // says which charges exist
    /// # Ok::<(), tessera_coalesce::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`tessera_blocks::Error::NoSectorWithCharge`] (as [`Error::Blocks`]) when no coupled
    /// sector has that charge; otherwise as [`sector`](Coalesce::sector).
    fn sector_by_charge(&self, charge: &Self::Sector) -> Result<SectorAlias<T>, Error>;

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

    /// One view per batch of `batches`, each the view [`sectors`](Coalesce::sectors) makes
    /// of that batch's sectors, built from the batches resolved once (the structure is
    /// checked once per call, no sector is visited again). For work submitted many times over
    /// the same structure: a contraction plan keeps its GEMM batches this way.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    /// use tessera_coalesce::{Coalesce, SectorBatches};
    ///
    /// let row = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3), (U1(2), 1)])?;
    /// let s = Arc::new(BlockStructure::new([row.clone()], [row.dual()], U1(0))?);
    /// let batches = SectorBatches::new(&s, [&[0, 1][..], &[2][..]])?;
    /// let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 1);
    /// let views = a.sector_batches(&batches)?;
    /// let rows = views[0].with(|m| (0..m.len()).map(|i| m.get(i).nrows()).collect::<Vec<_>>())?;
    /// assert_eq!(rows, [2, 3]);
    /// # Ok::<(), tessera_coalesce::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`tessera_blocks::Error::StructureMismatch`] (as [`Error::Blocks`]) when the array's
    /// structure is not the one the batches were resolved for; nothing is enrolled then.
    fn sector_batches(
        &self,
        batches: &SectorBatches<Self::Sector>,
    ) -> Result<Vec<SectorsAlias<T>>, Error>;

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
    type Sector = S;

    fn sector(&self, c: usize) -> Result<SectorAlias<T>, Error> {
        let region = SectorRegion::from_layout(Arc::clone(self.buffer()), sector_layout(self, c)?);
        let hazards = self.hazards_of_ranges([self.structure().sectors()[c].blocks()])?;
        // SAFETY: a dense sector's matrix holds exactly the elements of the sector's blocks
        // (the structure's layout), and `hazards` holds every one of their records; no other
        // block shares an element with them.
        Ok(unsafe { Alias::from_parts(region, hazards) })
    }

    fn sector_by_charge(&self, charge: &S) -> Result<SectorAlias<T>, Error> {
        self.sector(self.structure().sector_of(charge)?)
    }

    fn sectors(&self, cs: &[usize]) -> Result<SectorsAlias<T>, Error> {
        let layouts = cs
            .iter()
            .map(|&c| sector_layout(self, c))
            .collect::<Result<Vec<_>, _>>()?;
        let sectors = self.structure().sectors();
        let hazards = self.hazards_of_ranges(cs.iter().map(|&c| sectors[c].blocks()))?;
        let region = SectorsRegion::new(Arc::clone(self.buffer()), layouts);
        // SAFETY: each dense sector's matrix holds exactly the elements of that sector's
        // blocks, and `hazards` holds the records of every block of every listed sector.
        Ok(unsafe { Alias::from_parts(region, hazards) })
    }

    fn sector_batches(&self, batches: &SectorBatches<S>) -> Result<Vec<SectorsAlias<T>>, Error> {
        let structure = self.structure();
        if !Arc::ptr_eq(structure, &batches.structure) && **structure != *batches.structure {
            return Err(tessera_blocks::Error::StructureMismatch {
                expected: batches.structure.summary(),
                given: structure.summary(),
            }
            .into());
        }
        assert_eq!(
            self.buffer().len(),
            structure.total_len(),
            "an array's allocation holds its structure's elements"
        );
        Ok(batches
            .batches
            .iter()
            .map(|batch| {
                let region =
                    SectorsRegion::shared(Arc::clone(self.buffer()), Arc::clone(&batch.layouts));
                let hazards = self
                    .hazards_of_ranges(batch.blocks.iter().cloned())
                    .expect("a batch's blocks are blocks of its structure");
                // SAFETY: the batch was resolved from this very structure (checked above): each
                // rectangle is one dense sector's matrix, inside `total_len` elements, which is
                // this allocation's length, and `blocks` are exactly those sectors' blocks, so
                // `hazards` holds the records of every element the region reaches.
                unsafe { Alias::from_parts(region, hazards) }
            })
            .collect())
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

/// Batches of dense coupled sectors of one structure, resolved once: for each batch, the
/// places of its sector matrices in the allocation and its blocks (ranges of ids).
/// [`Coalesce::sector_batches`] turns them into one view per batch of any array with that
/// structure without visiting a sector again.
#[derive(Clone, Debug)]
pub struct SectorBatches<S: AbelianSector> {
    structure: Arc<BlockStructure<S>>,
    batches: Vec<Batch>,
}

#[derive(Clone, Debug)]
struct Batch {
    layouts: Arc<[MatLayout]>,
    /// The blocks of the batch's sectors, consecutive ranges merged.
    blocks: SmallVec<[Range<usize>; 2]>,
}

impl<S: AbelianSector> SectorBatches<S> {
    /// Resolves `batches` (each a list of indices into `structure.sectors()`, a repeated one
    /// listed twice) against `structure`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownSector`] and [`Error::PackedSector`], as
    /// [`Coalesce::sectors`] gives them.
    pub fn new<'a>(
        structure: &Arc<BlockStructure<S>>,
        batches: impl IntoIterator<Item = &'a [usize]>,
    ) -> Result<Self, Error> {
        let len = structure.total_len();
        let batches = batches
            .into_iter()
            .map(|cs| {
                let layouts = cs
                    .iter()
                    .map(|&c| dense_sector_layout(structure, len, c))
                    .collect::<Result<Arc<[MatLayout]>, _>>()?;
                let mut blocks: SmallVec<[Range<usize>; 2]> = SmallVec::new();
                for &c in cs {
                    let r = structure.sectors()[c].blocks();
                    match blocks.last_mut() {
                        Some(last) if last.end == r.start => last.end = r.end,
                        _ => blocks.push(r),
                    }
                }
                Ok(Batch { layouts, blocks })
            })
            .collect::<Result<_, Error>>()?;
        Ok(Self {
            structure: Arc::clone(structure),
            batches,
        })
    }

    /// How many batches.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// The structure the batches were resolved for.
    pub fn structure(&self) -> &Arc<BlockStructure<S>> {
        &self.structure
    }
}

/// The matrix of dense coupled sector `c` of `structure`, inside `len` elements.
fn dense_sector_layout<S: AbelianSector>(
    structure: &BlockStructure<S>,
    len: usize,
    c: usize,
) -> Result<MatLayout, Error> {
    let sectors = structure.sectors();
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
    Ok(MatLayout::inside(
        len,
        sector.offset(),
        sector.rows(),
        sector.cols(),
        sector.rows(),
    )
    .expect("the structure places every dense sector matrix inside its elements"))
}

/// The matrix of dense coupled sector `c`, checked against the allocation.
fn sector_layout<T: Scalar, S: AbelianSector>(
    array: &AsyncArray<T, S>,
    c: usize,
) -> Result<MatLayout, Error> {
    dense_sector_layout(array.structure(), array.buffer().len(), c)
}

/// The composite of the records of blocks `ids`.
pub(crate) fn composite<T: Scalar, S: AbelianSector>(
    array: &AsyncArray<T, S>,
    ids: impl IntoIterator<Item = usize>,
) -> Result<HazardSet, Error> {
    Ok(array.hazards_of(ids)?)
}
