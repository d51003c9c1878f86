//! `Tensor`: a symmetric block-sparse tensor in one allocation of a placement (host memory,
//! a CUDA device), with one hazard record per block.
//!
//! Owns: [`Tensor`] and its aliases [`AsyncArray`] (host) and `DeviceArray` (a CUDA device,
//! feature `cuda`), [`TensorRegion`] (some blocks, or a flat span of coupled sectors, of one
//! tensor behind one handle: what a task of any placement is granted), the placement-free
//! accessors (structure, hazard sets, handles) and the moves between placements.
//! Invariants:
//!
//! - The allocation holds exactly `structure.total_len()` elements laid out as the structure
//!   says, on every placement: block `i` is the strided extent `(offset, shape, strides)` of
//!   the structure's block `i`, no two blocks overlap, and so block `i`'s record alone
//!   orders every access to block `i`'s elements, wherever they live.
//! - A region is paired with exactly the records of the blocks its extents cover (a span of
//!   coupled sectors: their blocks, which tile it); a kernel of the placement reaches only
//!   those extents ([`tessera_backends::Grant`]).
//! - Whole-tensor access is the composite of all block records, enrolled in one step.

use crate::error::Error;
use crate::sector::AbelianSector;
use crate::structure::BlockStructure;
use std::sync::Arc;
use tessera_backends::{Extent, Grant, GrantMut, Host, Placement, PlacementError, Scalar};
use tessera_core::{Alias, Domain, HazardSet, RecordTable, Region};

/// A symmetric block-sparse tensor: one allocation of placement `P` (host memory by
/// default), an immutable, shared descriptor table (the [`BlockStructure`]) and one hazard
/// record per block. Every operation (scale, axpy, norm, inner product, permutation,
/// contraction, factorization) is written once over `P`; a tensor moves between placements
/// with [`to_placement`](Tensor::to_placement).
///
/// ```
/// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
///
/// let leg = Leg::new(Direction::In, [(U1(-1), 2), (U1(1), 3)])?;
/// let s = BlockStructure::new(vec![leg.clone()], vec![leg], U1(0))?;
/// let a = AsyncArray::<f64, U1>::random(s, 7);
/// a.scale(2.0);               // one task per block, in parallel
/// let n = a.norm();            // an Async<f64>, computed by tasks
/// let dense = a.to_dense()?;   // waits for exactly the scale tasks
/// let want = dense.iter().map(|x| x * x).sum::<f64>().sqrt();
/// assert!((n.get()? - want).abs() < 1e-12);
/// # Ok::<(), tessera_blocks::Error>(())
/// ```
pub struct Tensor<T: Scalar, S: AbelianSector, P: Placement<T> = Host> {
    pub(crate) structure: Arc<BlockStructure<S>>,
    pub(crate) storage: Arc<P::Storage>,
    pub(crate) records: Arc<RecordTable>,
}

/// A tensor in host memory, worked on by the runtime's workers (the CPU backend).
pub type AsyncArray<T, S> = Tensor<T, S, Host>;

/// A tensor in one CUDA device's memory, worked on through the device's stream (cuBLAS and
/// the NVRTC permute).
///
/// ```
/// use tessera_backends::cuda::Cuda;
/// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
///
/// let Ok(gpu) = Cuda::open(0) else { return Ok(()) }; // no GPU here: nothing to show
/// let v = Leg::new(Direction::In, [(U1(-1), 4), (U1(0), 6), (U1(1), 4)])?;
/// let s = BlockStructure::new(vec![v.clone()], vec![v.dual()], U1(0))?;
/// let a = AsyncArray::<f64, U1>::random(s, 7);
/// let d = a.to_placement(&gpu)?;       // enqueued: returns before the copy is done
/// d.scale(2.0);                         // stream-ordered after the copy, no host wait
/// let back = d.to_host()?;              // the transfer task waits for the stream
/// assert_eq!(back.to_dense()?, a.to_dense()?.iter().map(|x| 2.0 * x).collect::<Vec<_>>());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "cuda")]
pub type DeviceArray<T, S> = Tensor<T, S, tessera_backends::cuda::Cuda>;

impl<T: Scalar, S: AbelianSector, P: Placement<T>> std::fmt::Debug for Tensor<T, S, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("domain", &P::of(&self.storage).domain())
            .field("blocks", &self.structure.num_blocks())
            .field("len", &self.structure.total_len())
            .finish_non_exhaustive()
    }
}

/// Some extents of one tensor's allocation behind one handle: a task's region on any
/// placement. Cheap to clone (shared lists).
pub struct TensorRegion<T: Scalar, P: Placement<T>> {
    storage: Arc<P::Storage>,
    extents: Arc<[Extent]>,
}

impl<T: Scalar, P: Placement<T>> Clone for TensorRegion<T, P> {
    fn clone(&self) -> Self {
        Self {
            storage: Arc::clone(&self.storage),
            extents: Arc::clone(&self.extents),
        }
    }
}

impl<T: Scalar, P: Placement<T>> std::fmt::Debug for TensorRegion<T, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorRegion")
            .field("extents", &self.extents.len())
            .finish_non_exhaustive()
    }
}

impl<T: Scalar, P: Placement<T>> TensorRegion<T, P> {
    /// The extents, in the order the grants hand them to kernels.
    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }
}

/// The alias handle of a [`TensorRegion`].
pub type TensorAlias<T, P> = Alias<TensorRegion<T, P>>;

// SAFETY: every extent of a region is a block of its tensor's structure or a span of
// consecutive coupled sectors (the tensor's `region` and `span` make them), inside the
// allocation (the structure's layout: `total_len` elements, which every placement
// allocates), one-to-one, and not overlapping one another (distinct blocks never overlap;
// a span is never paired with a block); the region is paired with exactly the records of
// the blocks those extents cover, so a holder of the grants holds exactly the grants
// `Grant::new` and `GrantMut::new` ask for.
unsafe impl<T: Scalar, P: Placement<T>> Region for TensorRegion<T, P> {
    type Ref<'a> = Grant<'a, T, P>;
    type Mut<'a> = GrantMut<'a, T, P>;

    unsafe fn resolve(&self) -> tessera_core::Result<Grant<'_, T, P>> {
        // SAFETY: see above; the caller holds the read grants (`Region::resolve`).
        Ok(unsafe { Grant::new(&*self.storage, &self.extents) })
    }

    unsafe fn resolve_mut(&self) -> tessera_core::Result<GrantMut<'_, T, P>> {
        // SAFETY: see above; the caller holds the write grants (`Region::resolve_mut`).
        Ok(unsafe { GrantMut::new(&*self.storage, &self.extents) })
    }
}

/// A placement's refusal as this crate's error.
pub(crate) fn placement_error(e: PlacementError) -> Error {
    match e {
        PlacementError::Host(e) => Error::of_alloc("the array's storage")(e),
        #[cfg(feature = "cuda")]
        PlacementError::Cuda(e) => Error::Cuda(e),
    }
}

/// The extent of block `id` of `s` (`None` for an unknown block).
pub fn block_extent<S: AbelianSector>(s: &BlockStructure<S>, id: usize) -> Option<Extent> {
    let b = s.block(id)?;
    Some(Extent::strided(b.offset(), b.shape(), b.strides()))
}

/// Block `id` of `s` as a column-major matrix in the allocation: legs `..rows` folded into
/// rows, the rest into columns, columns `ld` apart (its coupled sector's row count, or its
/// own rows in a packed sector); `None` for an unknown block, `rows` past its legs, or a fold
/// its strides do not allow (it always allows `rows = s.n_codomain()`).
pub fn block_matrix<S: AbelianSector>(
    s: &BlockStructure<S>,
    id: usize,
    rows: usize,
) -> Option<tessera_backends::MatLayout> {
    block_extent(s, id)?.matrix(rows)
}

/// Coupled sector `c` of `s` as the dense column-major matrix of its region (rows: its
/// codomain tuples, columns: its domain tuples, leading dim its rows), as a sector GEMM or a
/// factorization reads it; a packed sector's blocks lie inside that region too.
///
/// # Panics
///
/// When `c` is not a sector position of `s`.
pub fn sector_matrix<S: AbelianSector>(
    s: &BlockStructure<S>,
    c: usize,
) -> tessera_backends::MatLayout {
    let sector = &s.sectors()[c];
    tessera_backends::MatLayout {
        offset: sector.offset(),
        rows: sector.rows(),
        cols: sector.cols(),
        ld: sector.rows().max(1),
    }
}

impl<T: Scalar, S: AbelianSector, P: Placement<T>> Tensor<T, S, P> {
    /// A new tensor of `structure` at `placement`: zeros when `zeroed`, else values that
    /// are overwritten before anything reads them.
    pub(crate) fn alloc_on(
        structure: Arc<BlockStructure<S>>,
        placement: &P,
        zeroed: bool,
    ) -> Result<Self, Error> {
        let storage = placement
            .alloc(structure.total_len(), zeroed)
            .map_err(placement_error)?;
        Ok(Self {
            records: RecordTable::new(structure.num_blocks()),
            structure,
            storage: Arc::new(storage),
        })
    }

    /// A tensor of zeros at `placement`.
    ///
    /// # Errors
    ///
    /// The allocation's refusal: [`Error::Overflow`] or [`Error::Allocation`] in host
    /// memory, `Error::Cuda` on a device.
    pub fn zeros_on(
        structure: impl Into<Arc<BlockStructure<S>>>,
        placement: &P,
    ) -> Result<Self, Error> {
        Self::alloc_on(structure.into(), placement, true)
    }

    /// A tensor at `placement` whose values are unspecified until written: for a result
    /// that is written in full before anything reads it (a host allocation skips zeroing;
    /// a device allocation is zeroed anyway).
    ///
    /// # Errors
    ///
    /// As [`zeros_on`](Self::zeros_on).
    pub fn empty_on(
        structure: impl Into<Arc<BlockStructure<S>>>,
        placement: &P,
    ) -> Result<Self, Error> {
        Self::alloc_on(structure.into(), placement, false)
    }

    /// The descriptor table.
    pub fn structure(&self) -> &Arc<BlockStructure<S>> {
        &self.structure
    }

    /// The number of (present) blocks.
    pub fn num_blocks(&self) -> usize {
        self.structure.num_blocks()
    }

    /// Where the allocation lives.
    pub fn domain(&self) -> Domain {
        self.placement().domain()
    }

    /// The placement (host memory, a device).
    pub fn placement(&self) -> P {
        P::of(&self.storage)
    }

    /// The one allocation (every handle points into it).
    pub fn storage(&self) -> &Arc<P::Storage> {
        &self.storage
    }

    /// Whether two tensors share storage (the same allocation and records).
    pub fn same_storage(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// The composite hazard set of every block.
    pub fn hazards(&self) -> HazardSet {
        HazardSet::span(&self.records, 0..self.num_blocks())
    }

    /// The composite hazard set of the given blocks (the records a view over exactly those
    /// blocks must enroll on), without making a handle per block.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`] for an id that is not a block.
    pub fn hazards_of(&self, ids: impl IntoIterator<Item = usize>) -> Result<HazardSet, Error> {
        self.hazards_of_ranges(ids.into_iter().map(|id| id..id + 1))
    }

    /// The composite hazard set of the blocks in `ranges` of ids (the blocks of several
    /// sectors are such ranges): one step per range, not per block.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`] for a range that reaches past the last block.
    pub fn hazards_of_ranges(
        &self,
        ranges: impl IntoIterator<Item = std::ops::Range<usize>>,
    ) -> Result<HazardSet, Error> {
        let ranges: smallvec::SmallVec<[std::ops::Range<usize>; 32]> = ranges.into_iter().collect();
        if let Some(r) = ranges
            .iter()
            .find(|r| r.end > self.num_blocks() && !r.is_empty())
        {
            return Err(Error::UnknownBlock {
                block: r.start.max(self.num_blocks()),
                blocks: self.num_blocks(),
            });
        }
        Ok(HazardSet::of_ranges(&self.records, ranges))
    }

    /// One alias handle over blocks `ids` (in that order, each id once), paired with
    /// exactly their records: what a task of any placement reads or writes, with one
    /// extent per block.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`] for an id that is not a block, [`Error::AliasedOperands`]
    /// for an id given twice (a write grant of two overlapping extents).
    pub fn region(&self, ids: &[usize]) -> Result<TensorAlias<T, P>, Error> {
        let hazards = self.hazards_of(ids.iter().copied())?;
        let increasing = ids.windows(2).all(|w| w[0] < w[1]);
        if !increasing && {
            let mut sorted: smallvec::SmallVec<[usize; 32]> = ids.into();
            sorted.sort_unstable();
            sorted.windows(2).any(|w| w[0] == w[1])
        } {
            return Err(Error::AliasedOperands {
                operation: "a region (a block listed twice)",
            });
        }
        let extents: Arc<[Extent]> = ids
            .iter()
            .map(|&i| block_extent(&self.structure, i).expect("ids checked"))
            .collect();
        let region = TensorRegion {
            storage: Arc::clone(&self.storage),
            extents,
        };
        // SAFETY: the extents are exactly blocks `ids` (checked, each once), paired with
        // exactly their records (see `Region for TensorRegion`).
        Ok(unsafe { Alias::from_parts(region, hazards) })
    }

    /// Coupled sectors `sectors` (positions in [`BlockStructure::sectors`]) as one alias of
    /// one flat extent, ordered by the records of exactly their blocks: what a kernel that
    /// works on whole sector matrices (a factorization) is granted.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownSectors`] for a range that is empty-reversed or passes the last
    /// sector.
    pub fn sectors_region(
        &self,
        sectors: std::ops::Range<usize>,
    ) -> Result<TensorAlias<T, P>, Error> {
        let n = self.structure.sectors().len();
        if sectors.end > n || sectors.start > sectors.end {
            return Err(Error::UnknownSectors {
                start: sectors.start,
                end: sectors.end,
                sectors: n,
            });
        }
        Ok(self.span(sectors))
    }

    /// Coupled sectors `sectors` as one flat alias (a one-axis extent over their
    /// consecutive regions), ordered by the records of exactly their blocks: for
    /// elementwise operations and transfers, which need no block shapes.
    pub(crate) fn span(&self, sectors: std::ops::Range<usize>) -> TensorAlias<T, P> {
        let (elems, blocks) = self.structure.sectors_extent(sectors);
        let region = TensorRegion {
            storage: Arc::clone(&self.storage),
            extents: Arc::from([Extent::span(elems)]),
        };
        let hazards = HazardSet::span(&self.records, blocks);
        // SAFETY: the regions of consecutive sectors follow each other and hold exactly the
        // elements of their blocks, whose ids are consecutive too (the structure's layout),
        // so the span's elements are exactly those blocks' elements, and it is paired with
        // their records.
        unsafe { Alias::from_parts(region, hazards) }
    }

    /// The whole allocation as one flat alias, ordered by every block's record.
    pub(crate) fn whole_span(&self) -> TensorAlias<T, P> {
        self.span(0..self.structure.sectors().len())
    }

    /// Blocks until every block's pending work is done (on a device: enqueued; see
    /// [`to_placement`](Self::to_placement) for a copy the host can read).
    ///
    /// # Errors
    ///
    /// A poisoned block's error.
    pub fn wait(&self) -> Result<(), Error> {
        self.whole_span().wait()?;
        Ok(())
    }

    /// A copy at `placement` (host memory, a device; this one or another), by one task that
    /// copies every element after the work the blocks depend on. To the host, the task
    /// waits for the device before it completes (the host copy's readers wait for that
    /// task); to a device, the copy is enqueued (staged from host memory, or from another
    /// device after an event of its stream) and the task completes with no host wait.
    ///
    /// # Errors
    ///
    /// The allocation's refusal (see [`zeros_on`](Self::zeros_on)); the runtime's refusal.
    /// A failed copy poisons the new tensor's blocks.
    pub fn to_placement<Q: Placement<T>>(&self, placement: &Q) -> Result<Tensor<T, S, Q>, Error> {
        let out = Tensor::<T, S, Q>::alloc_on(Arc::clone(&self.structure), placement, false)?;
        let host = Domain::Cpu;
        let waits = self.domain() == host || placement.domain() == host;
        let access = (
            self.whole_span().into_read(),
            out.whole_span().into_overwrite(),
        );
        let len = self.structure.total_len();
        Q::schedule("tensor.transfer", len, 1, waits, access, |(x, mut y)| {
            Q::transfer(&x, &mut y)
        })?;
        Ok(out)
    }
}

impl<T: Scalar, S: AbelianSector> Tensor<T, S, Host> {
    /// A copy in one CUDA device's memory (see [`to_placement`](Tensor::to_placement)).
    ///
    /// # Errors
    ///
    /// As [`to_placement`](Tensor::to_placement).
    #[cfg(feature = "cuda")]
    pub fn to_device(
        &self,
        device: &Arc<tessera_backends::cuda::CudaDevice>,
    ) -> Result<DeviceArray<T, S>, Error>
    where
        T: tessera_backends::cuda::CudaScalar,
    {
        self.to_placement(&tessera_backends::cuda::Cuda::new(device))
    }
}

#[cfg(feature = "cuda")]
impl<T: tessera_backends::cuda::CudaScalar, S: AbelianSector> DeviceArray<T, S> {
    /// A tensor of zeros on `device` (the allocation is enqueued on its stream).
    ///
    /// # Errors
    ///
    /// [`Error::Cuda`] if the allocation fails.
    pub fn zeros(
        structure: impl Into<Arc<BlockStructure<S>>>,
        device: &Arc<tessera_backends::cuda::CudaDevice>,
    ) -> Result<Self, Error> {
        Self::zeros_on(structure, &tessera_backends::cuda::Cuda::new(device))
    }

    /// The device.
    pub fn device(&self) -> &Arc<tessera_backends::cuda::CudaDevice> {
        self.storage.device()
    }

    /// A host copy ([`to_placement`](Tensor::to_placement) to [`Host`]). A device fault
    /// from earlier asynchronous work surfaces here (or at the next call that checks), as
    /// CUDA reports it.
    ///
    /// # Errors
    ///
    /// As [`to_placement`](Tensor::to_placement).
    pub fn to_host(&self) -> Result<AsyncArray<T, S>, Error> {
        self.to_placement(&Host)
    }

    /// A copy on `device` (this one or another; see [`to_placement`](Tensor::to_placement)).
    ///
    /// # Errors
    ///
    /// As [`to_placement`](Tensor::to_placement).
    pub fn to_device(
        &self,
        device: &Arc<tessera_backends::cuda::CudaDevice>,
    ) -> Result<Self, Error> {
        self.to_placement(&tessera_backends::cuda::Cuda::new(device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Kind, random_mask, random_structure};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use tessera_backends::merged_runs;
    use tessera_core::for_each_offset;

    /// A block's matrix reaches exactly its elements (the structure's offsets and strides),
    /// and the merged runs of a set of blocks cover exactly their elements (one run for all
    /// the blocks of a structure without packed sectors): what a device's kernels reach.
    #[test]
    fn block_matrices_and_runs_cover_exactly_the_blocks() {
        fn run<S: Kind>(seed: u64) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for _ in 0..200 {
                let mut s = random_structure::<S>(&mut rng);
                if rng.gen_bool(0.3) {
                    s = s
                        .with_present(&random_mask(&mut rng, s.num_allowed()))
                        .unwrap();
                }
                let ids: Vec<usize> = (0..s.num_blocks()).filter(|_| rng.gen_bool(0.6)).collect();
                let mut want = Vec::new();
                for &id in &ids {
                    let b = s.block(id).unwrap();
                    let strides: Vec<isize> = b.strides().iter().map(|&x| x as isize).collect();
                    let mut elems = Vec::new();
                    for_each_offset(b.shape(), &strides, |_, at| {
                        elems.push(b.offset() + at as usize)
                    });
                    // The matrix of any fold the strides allow reaches the same elements.
                    for rows in 0..=b.shape().len() {
                        let Some(m) = block_matrix(&s, id, rows) else {
                            assert_ne!(rows, s.n_codomain(), "block {id}: the layout's fold");
                            continue;
                        };
                        // In order: element k of the block is (k % rows, k / rows).
                        let reach: Vec<usize> = (0..m.cols)
                            .flat_map(|j| (0..m.rows).map(move |i| m.offset + j * m.ld + i))
                            .collect();
                        assert_eq!(reach, elems, "block {id} rows {rows}");
                    }
                    want.extend(elems);
                }
                want.sort_unstable();
                let extents: Vec<Extent> =
                    ids.iter().map(|&i| block_extent(&s, i).unwrap()).collect();
                let runs = merged_runs(&extents);
                let got: Vec<usize> = runs.iter().flat_map(|r| r.clone()).collect();
                assert_eq!(got, want);
                assert!(runs.windows(2).all(|w| w[0].end < w[1].start), "merged");
                let all: Vec<Extent> = (0..s.num_blocks())
                    .map(|i| block_extent(&s, i).unwrap())
                    .collect();
                // The blocks of whole sectors merge into one range per run of sectors.
                assert!(merged_runs(&all).len() <= s.sectors().len().max(1));
                if s.sectors().iter().all(|c| c.is_dense()) && s.num_blocks() > 0 {
                    assert_eq!(merged_runs(&all), vec![0..s.total_len()]);
                }
            }
        }
        crate::for_each_kind!(run);
    }

    /// A move to the host placement is a copy on new storage and records, equal element
    /// for element, ordered after the writes before it; a region refuses unknown and
    /// repeated blocks (a write grant of one block twice would alias).
    #[test]
    fn moves_between_placements_copy_and_regions_refuse_misuse() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for _ in 0..40 {
            let s = Arc::new(random_structure::<crate::U1>(&mut rng));
            let a = AsyncArray::<f64, crate::U1>::random(Arc::clone(&s), rng.r#gen());
            let before = a.to_dense().unwrap();
            a.scale(3.0);
            let b = a.to_placement(&Host).unwrap();
            assert!(!a.same_storage(&b));
            assert_eq!(b.placement(), Host);
            let want: Vec<f64> = before.iter().map(|x| 3.0 * x).collect();
            assert_eq!(b.to_dense().unwrap(), want);
            let n = s.num_blocks();
            assert!(matches!(
                a.region(&[n]),
                Err(Error::UnknownBlock { block, blocks }) if block == n && blocks == n
            ));
            if n > 1 {
                assert!(matches!(
                    a.region(&[1, 0, 1]),
                    Err(Error::AliasedOperands { .. })
                ));
                assert_eq!(a.region(&[1, 0]).unwrap().region().extents().len(), 2);
            }
        }
    }
}
