//! A tensor in host memory ([`AsyncArray`]): its block handles with strided views, and its
//! host constructors and conversions.
//!
//! Owns: [`BlockRegion`] (the descriptor of one block inside the allocation),
//! [`BlockSetRegion`] (several blocks behind one handle, viewed block by block) and the host
//! constructors and conversions of [`AsyncArray`] (zeros, empty, seeded random, dense,
//! per-block data, element reads). Invariants:
//!
//! - The allocation holds exactly `structure.total_len()` elements laid out as the structure
//!   says; block `i` is the strided region `(offset, shape, strides)` of the structure's block
//!   `i`, and no two blocks overlap (the structure's invariant), so block `i`'s record alone
//!   orders every access to block `i`'s elements.
//! - `block(i)` hands out an alias over the shared allocation (the owner token) and block
//!   `i`'s exact record; nothing per block is allocated but the handle itself.
//! - `block_set(ids)` hands out one alias over blocks `ids`, paired with the composite of
//!   exactly their records (one span per run of consecutive ids); its exclusive view hands
//!   out one block at a time.
//! - Whole-array access is the composite of all block records, enrolled in one step.

use crate::error::{Error, try_vec};
use crate::sector::AbelianSector;
use crate::structure::BlockStructure;
use crate::tensor::AsyncArray;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use smallvec::SmallVec;
use std::sync::Arc;
use tessera_backends::Scalar;
use tessera_core::{
    Alias, Domain, HazardRecord, HazardSet, ReadBuffer, RecordTable, Region, SharedBuffer,
    StridedMut, StridedRef, WriteBuffer, for_each_common_run, for_each_offset,
};

/// What an array's backing allocation is called in allocation errors.
const STORAGE: &str = "the array's storage";

/// The region of one block: the shared allocation and the block's strided descriptor.
#[derive(Clone, Debug)]
pub struct BlockRegion<T> {
    buffer: Arc<SharedBuffer<T>>,
    offset: usize,
    // Six legs inline: the tensors of DMRG and coupled cluster have up to six.
    dims: SmallVec<[usize; 6]>,
    strides: SmallVec<[isize; 6]>,
}

impl<T: Scalar> BlockRegion<T> {
    /// The block's extent along each leg.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Where the block starts in the allocation.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Where the allocation lives.
    pub fn domain(&self) -> Domain {
        self.buffer.domain()
    }
}

// SAFETY: the region reaches only its block's elements, inside the allocation it keeps alive
// (every block's extent is checked when the array is made, the whole allocation's trivially);
// it is paired only with its block's record (in `AsyncArray::block`), or the whole
// allocation with every record (`whole`), and distinct blocks never overlap.
unsafe impl<T: Scalar> Region for BlockRegion<T> {
    type Ref<'a> = StridedRef<'a, T>;
    type Mut<'a> = StridedMut<'a, T>;

    unsafe fn resolve(&self) -> tessera_core::Result<StridedRef<'_, T>> {
        // SAFETY: extent checked at creation; the caller holds the block's read grant.
        Ok(unsafe { self.buffer.view(self.offset, &self.dims, &self.strides) })
    }

    unsafe fn resolve_mut(&self) -> tessera_core::Result<StridedMut<'_, T>> {
        // SAFETY: extent checked at creation; the block's strides map distinct indices to
        // distinct elements (a column-major sub-rectangle); the caller holds its write grant.
        Ok(unsafe { self.buffer.view_mut(self.offset, &self.dims, &self.strides) })
    }
}

/// An alias handle of one block.
pub type BlockAlias<T> = Alias<BlockRegion<T>>;

/// Several blocks of one array behind one owner token: what a task over a run of blocks
/// reads or writes, enrolled as one access on the composite of their records (instead of
/// one handle, one descriptor and one access per block). Cheap to clone (shared lists).
#[derive(Clone, Debug)]
pub struct BlockSetRegion<T, S: AbelianSector> {
    buffer: Arc<SharedBuffer<T>>,
    structure: Arc<BlockStructure<S>>,
    ids: Arc<[usize]>,
}

/// An alias handle of several blocks ([`AsyncArray::block_set`]).
pub type BlockSetAlias<T, S> = Alias<BlockSetRegion<T, S>>;

impl<T: Scalar, S: AbelianSector> BlockSetRegion<T, S> {
    /// The block ids, in the order the views hand them out.
    pub fn ids(&self) -> &[usize] {
        &self.ids
    }

    /// Where block `k` of the set starts (panics past the end).
    fn offset(&self, k: usize) -> usize {
        self.structure
            .block(self.ids[k])
            .expect("ids checked")
            .offset()
    }

    /// Block `k` of the set (panics past the end): offset, dims, strides.
    fn descriptor(&self, k: usize) -> (usize, &[usize], SmallVec<[isize; 6]>) {
        let block = self.structure.block(self.ids[k]).expect("ids checked");
        let strides = block.strides().iter().map(|&s| s as isize).collect();
        (block.offset(), block.shape(), strides)
    }
}

/// The shared views of a [`BlockSetRegion`]'s blocks.
pub struct BlockViews<'a, T, S: AbelianSector> {
    region: &'a BlockSetRegion<T, S>,
}

impl<'a, T: Scalar, S: AbelianSector> BlockViews<'a, T, S> {
    /// How many blocks.
    pub fn len(&self) -> usize {
        self.region.ids.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.region.ids.is_empty()
    }

    /// The address of the first element of the set's block `k` (panics past the end): the
    /// base of what [`get`](Self::get) views, for kernels planned ahead from the block's
    /// shape and strides in the structure (a [`CopyPlan`](tessera_backends::cpu::CopyPlan)), which
    /// skip building a view per block. The read grant covers exactly those elements.
    pub fn block_ptr(&self, k: usize) -> *const T {
        self.region
            .buffer
            .as_ptr()
            .wrapping_add(self.region.offset(k))
    }

    /// The view of the set's block `k` (panics past the end, like indexing).
    pub fn get(&self, k: usize) -> StridedRef<'a, T> {
        let (offset, dims, strides) = self.region.descriptor(k);
        // SAFETY: every block's extent was checked when the array was made; a `BlockViews`
        // exists only inside a resolution whose read grants cover every block of the set
        // for `'a`.
        unsafe { self.region.buffer.view(offset, dims, &strides) }
    }
}

/// The exclusive views of a [`BlockSetRegion`]'s blocks, one block at a time (each borrow
/// of the whole ends before the next block is taken, so views never overlap, even for an
/// id listed twice).
pub struct BlockViewsMut<'a, T, S: AbelianSector> {
    region: &'a BlockSetRegion<T, S>,
}

impl<T: Scalar, S: AbelianSector> BlockViewsMut<'_, T, S> {
    /// How many blocks.
    pub fn len(&self) -> usize {
        self.region.ids.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.region.ids.is_empty()
    }

    /// The address of the first element of the set's block `k` (panics past the end), as
    /// [`BlockViews::block_ptr`]: the write grant covers exactly the elements of the block's
    /// shape and strides in the structure. Writing through it while a view of the same block
    /// from [`get_mut`](Self::get_mut) lives is the caller's to avoid.
    pub fn block_ptr(&mut self, k: usize) -> *mut T {
        self.region
            .buffer
            .as_ptr()
            .cast_mut()
            .wrapping_add(self.region.offset(k))
    }

    /// The set's block `k`, exclusively, for as long as `self` stays borrowed (panics past
    /// the end).
    pub fn get_mut(&mut self, k: usize) -> StridedMut<'_, T> {
        let (offset, dims, strides) = self.region.descriptor(k);
        // SAFETY: extents checked as in `BlockViews::get`; a block's strides map distinct
        // indices to distinct elements (a column-major sub-rectangle); the caller of
        // `resolve_mut` holds write grants of every block of the set, and `&mut self` keeps
        // any other view made through `self` from living at the same time.
        unsafe { self.region.buffer.view_mut(offset, dims, &strides) }
    }
}

// SAFETY: the region reaches only its blocks' elements (extents checked when the array was
// made), inside the allocation it keeps alive; `AsyncArray::block_set` pairs it with the
// records of exactly those blocks. The exclusive views hand out one block at a time.
unsafe impl<T: Scalar, S: AbelianSector> Region for BlockSetRegion<T, S> {
    type Ref<'a> = BlockViews<'a, T, S>;
    type Mut<'a> = BlockViewsMut<'a, T, S>;

    unsafe fn resolve(&self) -> tessera_core::Result<BlockViews<'_, T, S>> {
        Ok(BlockViews { region: self })
    }

    unsafe fn resolve_mut(&self) -> tessera_core::Result<BlockViewsMut<'_, T, S>> {
        Ok(BlockViewsMut { region: self })
    }
}

/// Where element `i` of a leg lies: its segment and the index inside the segment.
fn locate<S: AbelianSector>(leg: &crate::Leg<S>, i: usize) -> Option<(usize, usize)> {
    // Segments are few; a linear scan beats a search for the sizes legs have.
    (0..leg.num_segments()).find_map(|seg| {
        let range = leg.range(seg)?;
        range.contains(&i).then(|| (seg, i - range.start))
    })
}

/// Column-major strides of a dense tensor with the structure's legs. Exact when
/// [`BlockStructure::dense_len`] is; saturated (and unused: such a structure has no blocks)
/// when a leg of dimension 0 follows legs whose product overflows.
fn dense_strides<S: AbelianSector>(structure: &BlockStructure<S>) -> Vec<usize> {
    let mut acc = 1usize;
    structure
        .legs()
        .iter()
        .map(|l| {
            let s = acc;
            acc = acc.saturating_mul(l.dim());
            s
        })
        .collect()
}

/// Calls `f(dense_offset, block_position)` for every element of block `id`, in the block's
/// column-major order.
fn for_each_dense<S: AbelianSector>(
    structure: &BlockStructure<S>,
    id: usize,
    strides: &[usize],
    mut f: impl FnMut(usize, usize),
) {
    let block = structure
        .block(id)
        .expect("block ids come from the structure");
    let legs = structure.legs();
    let base: usize = block
        .segments()
        .iter()
        .zip(legs)
        .zip(strides)
        .map(|((&seg, leg), &st)| leg.offset(seg).expect("segment of the leg") * st)
        .sum();
    let strides: SmallVec<[isize; 6]> = strides.iter().map(|&s| s as isize).collect();
    for_each_offset(block.shape(), &strides, |k, at| f(base + at as usize, k));
}

impl<T: Scalar, S: AbelianSector> AsyncArray<T, S> {
    fn from_buffer(structure: Arc<BlockStructure<S>>, buffer: SharedBuffer<T>) -> Self {
        debug_assert_eq!(buffer.len(), structure.total_len());
        // Every block's extent, checked once here (the structure's layout guarantees it; the
        // regions `block` makes rely on it): the structure and the buffer never change.
        for b in structure.blocks() {
            let strides: SmallVec<[isize; 6]> = b.strides().iter().map(|&s| s as isize).collect();
            assert!(
                buffer.check_extent(b.offset(), b.shape(), &strides),
                "the structure places block {} inside the allocation",
                b.id()
            );
        }
        let records = RecordTable::new(structure.num_blocks());
        Self {
            structure,
            storage: Arc::new(buffer),
            records,
        }
    }

    /// A tensor of zeros.
    ///
    /// # Panics
    ///
    /// When the storage's byte size overflows `isize::MAX` or the allocator refuses it;
    /// [`try_zeros`](Self::try_zeros) returns either as an error instead.
    pub fn zeros(structure: impl Into<Arc<BlockStructure<S>>>) -> Self {
        Self::try_zeros(structure).unwrap_or_else(|e| panic!("AsyncArray::zeros: {e}"))
    }

    /// A tensor of zeros, or why its storage cannot be had, without aborting the process.
    ///
    /// # Errors
    ///
    /// [`Error::Overflow`] when the storage's byte size (`total_len` elements) overflows
    /// `isize::MAX`, before anything is allocated; [`Error::Allocation`] when the allocator
    /// refuses it.
    ///
    /// ```
    /// use tessera_blocks::{AsyncArray, BlockStructure, Error, Leg, Trivial};
    ///
    /// // One 2^29 x 2^28 block: 2^57 doubles, 2^60 bytes, more than any machine has.
    /// let (rows, cols) = (Leg::tiling(&[1 << 29])?, Leg::<Trivial>::tiling(&[1 << 28])?);
    /// let s = BlockStructure::new([rows], [cols.dual()], Trivial)?;
    /// let refused = AsyncArray::<f64, Trivial>::try_zeros(s).unwrap_err();
    /// assert!(matches!(refused, Error::Allocation { bytes, .. } if bytes == 1 << 60));
    /// # Ok::<(), tessera_blocks::Error>(())
    /// ```
    pub fn try_zeros(structure: impl Into<Arc<BlockStructure<S>>>) -> Result<Self, Error> {
        let structure = structure.into();
        let buffer =
            SharedBuffer::try_zeroed(structure.total_len()).map_err(Error::of_alloc(STORAGE))?;
        Ok(Self::from_buffer(structure, buffer))
    }

    /// An array whose elements are unspecified (valid numbers, often what a dropped array of
    /// the same size held), like NumPy's `empty`: for an output or temporary that is written
    /// in full before it is read, it skips zeroing. Large allocations come from the buffer
    /// pool (see `tessera_core::trim_buffer_pool`).
    ///
    /// # Panics
    ///
    /// As [`zeros`](Self::zeros); [`try_empty`](Self::try_empty) returns an error instead.
    pub fn empty(structure: impl Into<Arc<BlockStructure<S>>>) -> Self {
        Self::try_empty(structure).unwrap_or_else(|e| panic!("AsyncArray::empty: {e}"))
    }

    /// [`empty`](Self::empty), or why its storage cannot be had.
    ///
    /// # Errors
    ///
    /// As [`try_zeros`](Self::try_zeros).
    pub fn try_empty(structure: impl Into<Arc<BlockStructure<S>>>) -> Result<Self, Error> {
        let structure = structure.into();
        let buffer =
            SharedBuffer::try_recycled(structure.total_len()).map_err(Error::of_alloc(STORAGE))?;
        Ok(Self::from_buffer(structure, buffer))
    }

    /// A tensor with independent random entries, uniform in `[-1, 1)` (real and imaginary
    /// parts), reproducible from `seed`.
    ///
    /// # Panics
    ///
    /// As [`zeros`](Self::zeros); [`try_random`](Self::try_random) returns an error instead.
    pub fn random(structure: impl Into<Arc<BlockStructure<S>>>, seed: u64) -> Self {
        Self::try_random(structure, seed).unwrap_or_else(|e| panic!("AsyncArray::random: {e}"))
    }

    /// [`random`](Self::random) (the same elements for the same seed), or why its storage
    /// cannot be had.
    ///
    /// # Errors
    ///
    /// As [`try_zeros`](Self::try_zeros).
    pub fn try_random(
        structure: impl Into<Arc<BlockStructure<S>>>,
        seed: u64,
    ) -> Result<Self, Error> {
        let structure = structure.into();
        let mut buffer =
            SharedBuffer::try_zeroed(structure.total_len()).map_err(Error::of_alloc(STORAGE))?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for x in buffer.as_mut_slice() {
            let re = rng.gen_range(-1.0..1.0);
            let im = if T::IS_COMPLEX {
                rng.gen_range(-1.0..1.0)
            } else {
                0.0
            };
            *x = T::from_c64(num_complex::Complex::new(re, im));
        }
        Ok(Self::from_buffer(structure, buffer))
    }

    /// A tensor from a dense one (column-major, first leg fastest, one axis per leg), of
    /// exactly [`dense_len`](BlockStructure::dense_len) elements: 1 for a structure without
    /// legs (a scalar), 0 when a leg has dimension 0.
    ///
    /// # Errors
    ///
    /// [`Error::Overflow`] when the dense size overflows `usize` (no slice has that length);
    /// [`Error::DataLength`] naming the expected and given lengths for a dense tensor of the
    /// wrong size; [`Error::SymmetryBreaking`] naming the first element that is nonzero
    /// outside every present block; the allocation errors of [`try_zeros`](Self::try_zeros).
    pub fn from_dense(
        structure: impl Into<Arc<BlockStructure<S>>>,
        dense: &[T],
    ) -> Result<Self, Error> {
        let structure = structure.into();
        let expected = structure.dense_len()?;
        let dims: Vec<usize> = structure.legs().iter().map(|l| l.dim()).collect();
        if dense.len() != expected {
            return Err(Error::DataLength {
                what: format!("a dense tensor of dims {dims:?}"),
                expected,
                given: dense.len(),
            });
        }
        let mut buffer =
            SharedBuffer::try_zeroed(structure.total_len()).map_err(Error::of_alloc(STORAGE))?;
        let data = buffer.as_mut_slice();
        let mut segments = vec![0; dims.len()];
        let mut local = vec![0; dims.len()];
        for (k, &value) in dense.iter().enumerate() {
            let mut rem = k;
            for (axis, leg) in structure.legs().iter().enumerate() {
                let i = rem % dims[axis];
                rem /= dims[axis];
                (segments[axis], local[axis]) = locate(leg, i).expect("index inside its leg");
            }
            match structure.block_id(&segments) {
                Some(id) => {
                    let block = structure.block(id).expect("id from the structure");
                    data[block.element_offset(&local).expect("local index in range")] = value;
                }
                None if value != T::ZERO => {
                    let mut rem = k;
                    let index = dims
                        .iter()
                        .map(|&d| {
                            let i = rem % d;
                            rem /= d;
                            i
                        })
                        .collect();
                    return Err(Error::SymmetryBreaking {
                        index,
                        segments: segments.clone(),
                        value: value.to_string(),
                    });
                }
                None => {}
            }
        }
        Ok(Self::from_buffer(structure, buffer))
    }

    /// A tensor from per-block data, one vector per block in block order, each column-major
    /// in the block's shape.
    ///
    /// # Errors
    ///
    /// [`Error::DataLength`] when the number of blocks or a block's length is wrong; the
    /// allocation errors of [`try_zeros`](Self::try_zeros).
    pub fn from_blocks(
        structure: impl Into<Arc<BlockStructure<S>>>,
        blocks: &[Vec<T>],
    ) -> Result<Self, Error> {
        let structure = structure.into();
        if blocks.len() != structure.num_blocks() {
            return Err(Error::DataLength {
                what: "the list of blocks".to_owned(),
                expected: structure.num_blocks(),
                given: blocks.len(),
            });
        }
        let mut buffer =
            SharedBuffer::try_zeroed(structure.total_len()).map_err(Error::of_alloc(STORAGE))?;
        let data = buffer.as_mut_slice();
        for (block, values) in structure.blocks().zip(blocks) {
            if values.len() != block.len() {
                return Err(Error::DataLength {
                    what: format!("block {} of shape {:?}", block.id(), block.shape()),
                    expected: block.len(),
                    given: values.len(),
                });
            }
            let strides: SmallVec<[isize; 6]> =
                block.strides().iter().map(|&s| s as isize).collect();
            let base = block.offset();
            for_each_common_run(block.shape(), [&strides], |k, run, [at]| {
                let at = base + at as usize;
                data[at..at + run].copy_from_slice(&values[k..k + run]);
            });
        }
        Ok(Self::from_buffer(structure, buffer))
    }

    /// The one backing allocation (every block handle points into it).
    pub fn buffer(&self) -> &Arc<SharedBuffer<T>> {
        &self.storage
    }

    /// The alias handle of block `id`: the shared allocation, block `id`'s descriptor and its
    /// exact hazard record.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`] when `id` is not a block of the structure.
    pub fn block(&self, id: usize) -> Result<BlockAlias<T>, Error> {
        let block = self.structure.block(id).ok_or(Error::UnknownBlock {
            block: id,
            blocks: self.num_blocks(),
        })?;
        let region = BlockRegion {
            buffer: Arc::clone(&self.storage),
            offset: block.offset(),
            dims: block.shape().into(),
            strides: block.strides().iter().map(|&s| s as isize).collect(),
        };
        debug_assert!(
            self.storage
                .check_extent(region.offset, &region.dims, &region.strides),
            "checked in from_buffer"
        );
        // SAFETY: the region covers exactly block `id`'s elements (its extent was checked
        // when the array was made), which no other block shares, and it is paired with block
        // `id`'s own record.
        Ok(unsafe {
            Alias::from_parts(region, HazardSet::one(HazardRecord::of(&self.records, id)))
        })
    }

    /// One alias handle over blocks `ids` (in that order), paired with the composite of
    /// exactly their records: a task over many blocks enrolls one access, one step per run
    /// of consecutive ids.
    ///
    /// ```
    /// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    /// use tessera_core::schedule;
    ///
    /// let leg = Leg::new(Direction::In, [(U1(-1), 2), (U1(0), 1), (U1(1), 3)])?;
    /// let a = AsyncArray::<f64, U1>::zeros(BlockStructure::new(vec![leg.clone()], vec![leg.dual()], U1(0))?);
    /// schedule(a.block_set(&[2, 0])?.into_overwrite(), |mut blocks| {
    ///     for k in 0..blocks.len() {
    ///         blocks.get_mut(k).update(|_, _| k as f64 + 1.0);
    ///     }
    ///     Ok(())
    /// })?;
    /// assert_eq!(a.to_blocks()?, vec![vec![2.0; 4], vec![0.0], vec![1.0; 9]]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`] when an id is not a block of the structure.
    pub fn block_set(&self, ids: &[usize]) -> Result<BlockSetAlias<T, S>, Error> {
        let hazards = self.hazards_of(ids.iter().copied())?;
        let region = BlockSetRegion {
            buffer: Arc::clone(&self.storage),
            structure: Arc::clone(&self.structure),
            ids: ids.into(),
        };
        // SAFETY: the region reaches exactly the elements of blocks `ids` (every id was
        // checked by `hazards_of`; extents were checked when the array was made), and it is
        // paired with exactly those blocks' records.
        Ok(unsafe { Alias::from_parts(region, hazards) })
    }

    /// The block with one segment per leg.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchBlock`] when no present block has those segments.
    pub fn block_by_segments(&self, segments: &[usize]) -> Result<BlockAlias<T>, Error> {
        let id = self
            .structure
            .block_id(segments)
            .ok_or_else(|| Error::NoSuchBlock {
                segments: segments.to_vec(),
            })?;
        self.block(id)
    }

    /// The block with one sector per leg (legs with unique sectors).
    ///
    /// # Errors
    ///
    /// The structure's lookup errors, or [`Error::NoSuchBlock`].
    pub fn block_by_sectors(&self, sectors: &[S]) -> Result<BlockAlias<T>, Error> {
        match self.structure.block_id_by_sectors(sectors)? {
            Some(id) => self.block(id),
            None => Err(Error::NoSuchBlock {
                segments: sectors
                    .iter()
                    .zip(self.structure.legs())
                    .filter_map(|(s, l)| l.segment_of(s))
                    .collect(),
            }),
        }
    }

    /// Coupled sectors `sectors` as one flat alias (a one-axis view of their consecutive
    /// regions), ordered by the records of exactly their blocks: for elementwise operations,
    /// which need no block shapes.
    pub(crate) fn sectors_span(&self, sectors: std::ops::Range<usize>) -> BlockAlias<T> {
        let (elems, blocks) = self.structure.sectors_extent(sectors);
        let region = BlockRegion {
            buffer: Arc::clone(&self.storage),
            offset: elems.start,
            dims: [elems.len()].into_iter().collect(),
            strides: [1].into_iter().collect(),
        };
        assert!(
            self.storage
                .check_extent(region.offset, &region.dims, &region.strides),
            "sector regions lie inside the allocation"
        );
        let hazards = HazardSet::span(&self.records, blocks);
        // SAFETY: the regions of consecutive sectors follow each other and hold exactly the
        // elements of their blocks, whose ids are consecutive too (the structure's layout), so
        // the span's elements are exactly those blocks' elements, and it is paired with their
        // records.
        unsafe { Alias::from_parts(region, hazards) }
    }

    fn all_blocks(&self) -> Vec<BlockAlias<T>> {
        (0..self.num_blocks())
            .map(|i| self.block(i).expect("every id below num_blocks is a block"))
            .collect()
    }

    /// A read of every block, enrolled in one step (the composite of all records).
    pub fn read(&self) -> Vec<ReadBuffer<BlockRegion<T>>> {
        self.all_blocks().iter().map(Alias::read).collect()
    }

    /// An update of every block, enrolled in one step.
    pub fn write(&self) -> Vec<WriteBuffer<BlockRegion<T>>> {
        self.all_blocks().iter().map(Alias::write).collect()
    }

    /// An overwrite of every block, enrolled in one step.
    pub fn overwrite(&self) -> Vec<WriteBuffer<BlockRegion<T>>> {
        self.all_blocks().iter().map(Alias::overwrite).collect()
    }

    /// The dense tensor (column-major, first leg fastest), after waiting for exactly the work
    /// the blocks depend on: [`dense_len`](BlockStructure::dense_len) elements, so one for a
    /// structure without legs and none when a leg has dimension 0, as
    /// [`from_dense`](Self::from_dense) takes them.
    ///
    /// # Errors
    ///
    /// [`Error::Overflow`] when the dense size overflows `usize` or its byte size
    /// `isize::MAX`; [`Error::Allocation`] when the allocator refuses it (both before
    /// waiting); a poisoned block's error.
    pub fn to_dense(&self) -> Result<Vec<T>, Error> {
        let total = self.structure.dense_len()?;
        let mut dense = try_vec::<T>(total, "the dense tensor")?;
        dense.resize(total, T::ZERO);
        let strides = dense_strides(&self.structure);
        let out = tessera_core::host(self.read(), move |views| {
            for (id, view) in views.iter().enumerate() {
                let values = view.to_vec();
                for_each_dense(&self.structure, id, &strides, |at, k| dense[at] = values[k]);
            }
            dense
        })?;
        Ok(out)
    }

    /// Per-block data (block order, each column-major in its shape), after waiting.
    pub fn to_blocks(&self) -> Result<Vec<Vec<T>>, Error> {
        Ok(tessera_core::host(self.read(), |views| {
            views.iter().map(StridedRef::to_vec).collect()
        })?)
    }

    /// One element, after waiting for the block that holds it (zero outside every block).
    ///
    /// # Errors
    ///
    /// [`Error::IndexOutOfRange`] for an index outside the tensor.
    pub fn get(&self, index: &[usize]) -> Result<T, Error> {
        let legs = self.structure.legs();
        let out_of_range = || Error::IndexOutOfRange {
            index: index.to_vec(),
            dims: legs.iter().map(|l| l.dim()).collect(),
        };
        if index.len() != legs.len() {
            return Err(out_of_range());
        }
        let mut segments = Vec::with_capacity(legs.len());
        let mut local = Vec::with_capacity(legs.len());
        for (leg, &i) in legs.iter().zip(index) {
            let (seg, at) = locate(leg, i).ok_or_else(out_of_range)?;
            segments.push(seg);
            local.push(at);
        }
        match self.structure.block_id(&segments) {
            Some(id) => {
                let value = self.block(id)?.with(|v| v.get(&local))?;
                Ok(value.expect("local index inside the block"))
            }
            None => Ok(T::ZERO),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Direction, Leg, Trivial, U1};

    fn u1(dir: Direction, segs: &[(i32, usize)]) -> Leg<U1> {
        Leg::new(dir, segs.iter().map(|&(q, d)| (U1(q), d))).unwrap()
    }

    /// One `rows x cols` block of trivial sectors.
    fn one_block(rows: usize, cols: usize) -> BlockStructure<Trivial> {
        let (r, c) = (
            Leg::<Trivial>::tiling(&[rows]).unwrap(),
            Leg::<Trivial>::tiling(&[cols]).unwrap(),
        );
        BlockStructure::new([r], [c.dual()], Trivial).unwrap()
    }

    /// Products of legs that overflow, or that no memory holds, are errors naming the
    /// quantity, computed before anything of that size is allocated.
    #[test]
    fn structures_whose_sizes_overflow_are_refused() {
        // Four legs of 2^16 segments on one side: 2^64 segment tuples.
        let wide = Leg::<Trivial>::tiling(&[1; 1 << 16]).unwrap();
        assert_eq!(
            BlockStructure::new(vec![wide.clone(); 4], [], Trivial).unwrap_err(),
            Error::Overflow {
                what: "number of segment tuples"
            }
        );
        // Three legs of 2^11 segments: 2^33 tuples, past the 2^32 a side may have (this
        // reserved 2^33 tuples and aborted before the limit was checked).
        let mid = Leg::<Trivial>::tiling(&[1; 1 << 11]).unwrap();
        assert_eq!(
            BlockStructure::new(vec![mid; 3], [], Trivial).unwrap_err(),
            Error::Overflow {
                what: "segment tuples of one side (at most 2^32)"
            }
        );
        // One block of 2^40 x 2^40 elements: its length overflows.
        let huge = Leg::<Trivial>::tiling(&[1 << 40]).unwrap();
        assert_eq!(
            BlockStructure::new([huge.clone()], [huge.dual()], Trivial).unwrap_err(),
            Error::Overflow {
                what: "allocation length"
            }
        );
        // 2^21 x 2^21 one-element blocks: 2^42 blocks, a block table of hundreds of
        // terabytes, which the allocator refuses (this aborted).
        let many = Leg::<Trivial>::tiling(&[1; 1 << 21]).unwrap();
        let err = BlockStructure::new([many.clone()], [many.dual()], Trivial).unwrap_err();
        assert!(
            matches!(err, Error::Allocation { what: "block table", bytes } if bytes >= 1 << 42),
            "{err:?}"
        );
        assert!(err.to_string().contains("refused"), "{err}");
    }

    /// `try_*` constructors return an error for storage past `isize::MAX` bytes (before
    /// allocating) and for storage the allocator refuses (2^60 bytes), and the infallible
    /// ones panic (instead of aborting) with the same message.
    #[test]
    fn fallible_constructors_refuse_storage_that_cannot_be_had() {
        // 2^31 x 2^31 doubles: 2^65 bytes, past isize::MAX.
        let past = Arc::new(one_block(1 << 31, 1 << 31));
        let storage = Error::Overflow { what: STORAGE };
        assert_eq!(
            AsyncArray::<f64, Trivial>::try_zeros(Arc::clone(&past)).unwrap_err(),
            storage
        );
        assert_eq!(
            AsyncArray::<f64, Trivial>::try_empty(Arc::clone(&past)).unwrap_err(),
            storage
        );
        assert_eq!(
            AsyncArray::<f64, Trivial>::try_random(Arc::clone(&past), 1).unwrap_err(),
            storage
        );
        // 2^29 x 2^28 doubles: 2^60 bytes, representable, and refused.
        let refused = Arc::new(one_block(1 << 29, 1 << 28));
        let want = Error::Allocation {
            what: STORAGE,
            bytes: 1 << 60,
        };
        assert_eq!(
            AsyncArray::<f64, Trivial>::try_zeros(Arc::clone(&refused)).unwrap_err(),
            want
        );
        assert_eq!(
            AsyncArray::<f64, Trivial>::try_empty(Arc::clone(&refused)).unwrap_err(),
            want
        );
        assert_eq!(
            AsyncArray::<f64, Trivial>::try_random(Arc::clone(&refused), 1).unwrap_err(),
            want
        );
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            AsyncArray::<f64, Trivial>::zeros(refused)
        }))
        .expect_err("zeros panics");
        let msg = panicked
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(msg.contains("refused") && msg.contains(STORAGE), "{msg}");
        // What fits is what the infallible forms make.
        let s = Arc::new(one_block(3, 4));
        let (a, b) = (
            AsyncArray::<f64, Trivial>::try_random(Arc::clone(&s), 5).unwrap(),
            AsyncArray::<f64, Trivial>::random(Arc::clone(&s), 5),
        );
        assert_eq!(a.to_dense().unwrap(), b.to_dense().unwrap());
        assert_eq!(
            AsyncArray::<f64, Trivial>::try_zeros(s)
                .unwrap()
                .to_dense()
                .unwrap(),
            vec![0.0; 12]
        );
    }

    /// The dense size is counted exactly: a wrong length is refused naming both lengths,
    /// and a dense size that overflows (or does not fit in memory) is an error of
    /// `from_dense` and `to_dense`, not a wrapped product.
    #[test]
    fn dense_lengths_are_exact_and_checked() {
        let leg = u1(Direction::In, &[(0, 2), (1, 1)]);
        let s = Arc::new(BlockStructure::new([leg.clone()], [leg.dual()], U1(0)).unwrap());
        for given in [0, 8, 10] {
            assert_eq!(
                AsyncArray::<f64, U1>::from_dense(Arc::clone(&s), &vec![0.0; given]).unwrap_err(),
                Error::DataLength {
                    what: "a dense tensor of dims [3, 3]".into(),
                    expected: 9,
                    given
                }
            );
        }
        // Legs of 2^32 elements each, and no allowed block: no storage, a dense size of
        // 2^64, which wrapped to 0 (so an empty slice was taken, and `to_dense` panicked).
        let big = u1(Direction::In, &[(0, 1 << 32)]);
        let wraps = Arc::new(BlockStructure::new([big.clone()], [big], U1(1)).unwrap());
        assert_eq!((wraps.total_len(), wraps.num_blocks()), (0, 0));
        let dense_size = Error::Overflow {
            what: "dense tensor size",
        };
        assert_eq!(wraps.dense_len(), Err(dense_size.clone()));
        assert_eq!(
            AsyncArray::<f64, U1>::from_dense(Arc::clone(&wraps), &[]).unwrap_err(),
            dense_size
        );
        let a = AsyncArray::<f64, U1>::try_zeros(wraps).unwrap();
        assert_eq!(a.to_dense().unwrap_err(), dense_size);
        // Countable, but its bytes are past isize::MAX (2^62 doubles) or refused (2^57).
        for (rows, cols, want) in [
            (
                1usize << 31,
                1usize << 31,
                Error::Overflow {
                    what: "the dense tensor",
                },
            ),
            (
                1 << 29,
                1 << 28,
                Error::Allocation {
                    what: "the dense tensor",
                    bytes: 1 << 60,
                },
            ),
        ] {
            let s = BlockStructure::new(
                [u1(Direction::In, &[(0, rows)])],
                [u1(Direction::Out, &[(1, cols)])],
                U1(0),
            )
            .unwrap();
            let a = AsyncArray::<f64, U1>::zeros(s);
            assert_eq!(a.to_dense().unwrap_err(), want);
        }
    }

    /// Structures of no elements and scalars round-trip through the dense form.
    #[test]
    fn zero_sized_structures_and_scalars_round_trip() {
        // No legs: a scalar, one element.
        let scalar = Arc::new(BlockStructure::<U1>::new([], [], U1(0)).unwrap());
        assert_eq!(scalar.dense_len(), Ok(1));
        let a = AsyncArray::<f64, U1>::from_dense(Arc::clone(&scalar), &[3.5]).unwrap();
        assert_eq!(a.to_dense().unwrap(), vec![3.5]);
        assert_eq!(a.get(&[]).unwrap(), 3.5);
        assert_eq!(
            AsyncArray::<f64, U1>::from_dense(scalar, &[]).unwrap_err(),
            Error::DataLength {
                what: "a dense tensor of dims []".into(),
                expected: 1,
                given: 0
            }
        );
        // A scalar whose flux forbids its one block: no storage, one (zero) element.
        let none = Arc::new(BlockStructure::<U1>::new([], [], U1(1)).unwrap());
        assert_eq!((none.total_len(), none.dense_len()), (0, Ok(1)));
        let z = AsyncArray::<f64, U1>::from_dense(Arc::clone(&none), &[0.0]).unwrap();
        assert_eq!(z.to_dense().unwrap(), vec![0.0]);
        assert!(matches!(
            AsyncArray::<f64, U1>::from_dense(none, &[1.0]),
            Err(Error::SymmetryBreaking { .. })
        ));
        // A leg of dimension 0 (no segments) beside legs whose product overflows: no
        // element at all, whatever the other legs are.
        let empty = Leg::<U1>::new(Direction::In, []).unwrap();
        let big = u1(Direction::In, &[(0, 1 << 40)]);
        let s = Arc::new(
            BlockStructure::new([big.clone()], [big.dual(), empty.dual()], U1(0)).unwrap(),
        );
        assert_eq!((s.dense_len(), s.total_len()), (Ok(0), 0));
        let e = AsyncArray::<f64, U1>::from_dense(Arc::clone(&s), &[]).unwrap();
        assert_eq!(e.to_dense().unwrap(), Vec::<f64>::new());
        assert_eq!(e.to_blocks().unwrap(), Vec::<Vec<f64>>::new());
        assert_eq!(
            AsyncArray::<f64, U1>::from_dense(s, &[0.0]).unwrap_err(),
            Error::DataLength {
                what: format!("a dense tensor of dims [{}, {}, 0]", 1u64 << 40, 1u64 << 40),
                expected: 0,
                given: 1
            }
        );
        // No allowed block, a dense size of 4: zeros both ways.
        let s = BlockStructure::new(
            [u1(Direction::In, &[(1, 2)])],
            [u1(Direction::Out, &[(0, 2)])],
            U1(0),
        )
        .unwrap();
        let a = AsyncArray::<f64, U1>::from_dense(s, &[0.0; 4]).unwrap();
        assert_eq!(a.to_dense().unwrap(), vec![0.0; 4]);
    }
}
