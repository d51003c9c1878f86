//! Explicit gathers: a set of blocks copied into a fresh temporary matrix, and written back.
//!
//! Owns [`GatheredBlocks`] and the checks of a block set ([`BlockSet`]). Invariant: a gather
//! is never implicit: it is this type, made by
//! [`Coalesce::gather_blocks`](crate::Coalesce::gather_blocks), and the copy into it and the
//! copy back ([`GatheredBlocks::scatter`]) are ordinary scheduled tasks that enroll on the
//! composite of the blocks' records in one step (reads for the gather, overwrites for the
//! scatter), so both are ordered against every other access of those blocks.

use crate::error::Error;
use faer::Mat;
use std::ops::Range;
use tessera_backends::Scalar;
use tessera_backends::cpu::{matrix_mut, matrix_ref};
use tessera_blocks::{AbelianSector, AsyncArray, BlockAlias};
use tessera_core::Async;

/// A block of a set: its id, and its rows and columns in the sector matrix.
pub(crate) type Placed = (usize, Range<usize>, Range<usize>);

/// A checked block set: distinct, existing blocks of one coupled sector, with where each
/// block lies in the sector's logical matrix.
pub(crate) struct BlockSet {
    /// The coupled sector (index into `sectors()`).
    pub(crate) sector: usize,
    /// Per block: id, rows and columns in the sector matrix.
    pub(crate) blocks: Vec<Placed>,
    /// The bounding rectangle of the blocks in the sector matrix.
    pub(crate) rows: Range<usize>,
    /// See `rows`.
    pub(crate) cols: Range<usize>,
}

impl BlockSet {
    pub(crate) fn new<T: Scalar, S: AbelianSector>(
        array: &AsyncArray<T, S>,
        ids: &[usize],
    ) -> Result<Self, Error> {
        let structure = array.structure();
        let &first = ids.first().ok_or(Error::EmptyBlockSet)?;
        let mut seen = vec![false; structure.num_blocks()];
        let mut blocks = Vec::with_capacity(ids.len());
        let mut sector = None;
        for &id in ids {
            let block = structure
                .block(id)
                .ok_or(tessera_blocks::Error::UnknownBlock {
                    block: id,
                    blocks: structure.num_blocks(),
                })?;
            if std::mem::replace(&mut seen[id], true) {
                return Err(Error::RepeatedBlock { block: id });
            }
            let c = *sector.get_or_insert(block.coupled());
            if block.coupled() != c {
                return Err(Error::MixedSectors {
                    first,
                    first_sector: c,
                    other: id,
                    other_sector: block.coupled(),
                });
            }
            blocks.push((id, block.rows(), block.cols()));
        }
        let span = |f: fn(&Placed) -> &Range<usize>| {
            let lo = blocks.iter().map(|b| f(b).start).min().unwrap_or(0);
            let hi = blocks.iter().map(|b| f(b).end).max().unwrap_or(0);
            lo..hi
        };
        let (rows, cols) = (span(|b| &b.1), span(|b| &b.2));
        Ok(Self {
            sector: sector.unwrap_or(0),
            blocks,
            rows,
            cols,
        })
    }

    /// Whether the blocks tile their bounding rectangle (they never overlap, so equal areas
    /// mean an exact tiling).
    pub(crate) fn tiles_rectangle(&self) -> (bool, usize) {
        let area: usize = self.blocks.iter().map(|(_, r, c)| r.len() * c.len()).sum();
        (area == self.rows.len() * self.cols.len(), area)
    }
}

/// Blocks of one coupled sector copied into a temporary matrix: the bounding rectangle of
/// the blocks in the sector's logical matrix, zero where no chosen block lies.
///
/// The temporary is an independent value ([`Async`]) on its own timeline: work on it with
/// tasks (`matrix().read()`, `matrix().write()`), then [`scatter`](Self::scatter) to copy it
/// back into the blocks. Entries outside every chosen block are not stored anywhere and are
/// dropped by the scatter.
#[derive(Debug)]
pub struct GatheredBlocks<T: Scalar> {
    matrix: Async<Mat<T>>,
    blocks: Vec<BlockAlias<T>>,
    /// Per block: its first row and column in the temporary.
    places: Vec<(usize, usize)>,
    n_codomain: usize,
}

/// Copies a block's (matrix-shaped) view into `m` at `(r, c)`.
fn copy_in<T: Scalar>(m: &mut Mat<T>, src: faer::MatRef<'_, T>, (r, c): (usize, usize)) {
    for j in 0..src.ncols() {
        for i in 0..src.nrows() {
            m[(r + i, c + j)] = src[(i, j)];
        }
    }
}

impl<T: Scalar> GatheredBlocks<T> {
    /// Schedules the gather of `set` from `array`.
    pub(crate) fn gather<S: AbelianSector>(
        array: &AsyncArray<T, S>,
        set: &BlockSet,
    ) -> Result<Self, Error> {
        let blocks: Vec<BlockAlias<T>> = set
            .blocks
            .iter()
            .map(|(id, _, _)| array.block(*id))
            .collect::<Result<_, _>>()?;
        let places: Vec<(usize, usize)> = set
            .blocks
            .iter()
            .map(|(_, r, c)| (r.start - set.rows.start, c.start - set.cols.start))
            .collect();
        let n_codomain = array.structure().n_codomain();
        let matrix = Async::new(Mat::<T>::from_fn(set.rows.len(), set.cols.len(), |_, _| {
            T::ZERO
        }));
        let reads: Vec<_> = blocks.iter().map(BlockAlias::read).collect();
        let at = places.clone();
        tessera_core::schedule((reads, matrix.write()), move |(views, m)| {
            for (view, &place) in views.iter().zip(&at) {
                let src = matrix_ref(view, n_codomain).expect("a block folds into its rows");
                copy_in(m, src, place);
            }
            Ok(())
        })?;
        Ok(Self {
            matrix,
            blocks,
            places,
            n_codomain,
        })
    }

    /// The temporary (rows: the bounding rows of the blocks in the sector matrix; columns
    /// likewise).
    pub fn matrix(&self) -> &Async<Mat<T>> {
        &self.matrix
    }

    /// How many blocks were gathered.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Schedules the copy of the temporary back into the blocks: one task that reads the
    /// temporary and overwrites every gathered block, enrolled on all of them in one step.
    ///
    /// # Errors
    ///
    /// A runtime error if the task cannot be enrolled.
    pub fn scatter(&self) -> Result<(), Error> {
        let writes: Vec<_> = self.blocks.iter().map(BlockAlias::overwrite).collect();
        let (at, k) = (self.places.clone(), self.n_codomain);
        tessera_core::schedule((self.matrix.read(), writes), move |(m, mut views)| {
            for (view, &(r, c)) in views.iter_mut().zip(&at) {
                let mut dst = matrix_mut(view, k).expect("a block folds into its rows");
                for j in 0..dst.ncols() {
                    for i in 0..dst.nrows() {
                        dst[(i, j)] = m[(r + i, c + j)];
                    }
                }
            }
            Ok(())
        })?;
        Ok(())
    }
}
