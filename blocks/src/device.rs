//! Block-sparse tensors in a CUDA device's memory (feature `cuda`).
//!
//! Owns: [`DeviceArray`], the region of some of its blocks ([`DeviceBlocks`]) with its views
//! ([`DeviceRead`], [`DeviceWrite`]), [`enqueue`] (how a task reaches the device buffers it
//! holds grants for), the transfers between the host and devices, and the device operations
//! (scale, axpy, norm, inner product, leg permutation) through cuBLAS and the NVRTC permute.
//! Invariants:
//!
//! - One device allocation per array, of `structure.total_len()` elements laid out exactly
//!   as the host array's (the structure's offsets and strides), zeroed when made: a transfer
//!   is one copy, and a block's descriptor is the structure's.
//! - One hazard record per block, as on the host: a task that touches device blocks enrolls
//!   on exactly their records, like any other task, so program order is kept per block.
//! - A task on device data *enqueues* its work on the device's one stream and completes when
//!   it is enqueued, not when it is done. Such a task is scheduled eagerly: when it waits for
//!   nothing, the calling thread enqueues the work itself, with no hand-off to a worker
//!   (transfers to the host and reductions, which wait for the stream, run on workers). Later work on the same device is enrolled after
//!   it, so it is enqueued after it and the stream orders the two with no host wait; work
//!   on another device waits on an event ([`DeviceArray::to_device`]); the host sees device
//!   data only through a transfer ([`DeviceArray::to_host`]) or a reduction, whose tasks
//!   wait for the stream before they complete. Freeing the allocation is stream-ordered too.
//! - The host-side handle of an allocation (a cudarc slice) is touched only under its
//!   storage's lock, held while work is enqueued (microseconds; a copy to the host holds it
//!   until the copy is done, as CUDA's copies into pageable memory return then) and taken in
//!   address order
//!   when a task touches several storages, so no two tasks hold one at once and no lock
//!   order can cycle. A write grant and a read grant of one storage are never handed to one
//!   call (refused as aliasing before anything is enrolled).

use crate::array::AsyncArray;
use crate::error::Error;
use crate::ops::{Blocks, check_permuted};
use crate::sector::AbelianSector;
use crate::structure::{BlockStructure, Permuted};
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;
use std::ops::Range;
use std::sync::Arc;
use tessera_backends::Scalar;
use tessera_backends::cuda::{
    CudaDevice, CudaError, CudaScalar, DeviceBuffer, MatLayout, PermuteMove, VecLayout,
};
use tessera_core::{
    Alias, Async, Domain, HazardSet, RecordTable, Region, schedule_eager_named, schedule_named,
};

/// One device allocation and the device it lives on.
#[derive(Debug)]
struct DeviceStorage<T> {
    device: Arc<CudaDevice>,
    buffer: Mutex<DeviceBuffer<T>>,
}

impl<T> DeviceStorage<T> {
    fn domain(&self) -> Domain {
        Domain::Cuda {
            ordinal: self.device.ordinal() as u32,
        }
    }
}

/// A storage and its locked buffer.
type Locked<'a, T> = (&'a DeviceStorage<T>, MutexGuard<'a, DeviceBuffer<T>>);

/// Some blocks of one device allocation (one block for [`DeviceArray::block`]): the owner
/// token, the structure and the block ids. Cheap to clone.
#[derive(Debug)]
pub struct DeviceBlocks<T, S: AbelianSector> {
    storage: Arc<DeviceStorage<T>>,
    structure: Arc<BlockStructure<S>>,
    ids: Arc<[usize]>,
}

impl<T, S: AbelianSector> Clone for DeviceBlocks<T, S> {
    fn clone(&self) -> Self {
        Self {
            storage: Arc::clone(&self.storage),
            structure: Arc::clone(&self.structure),
            ids: Arc::clone(&self.ids),
        }
    }
}

/// The alias handle of some blocks of a [`DeviceArray`].
pub type DeviceBlocksAlias<T, S> = Alias<DeviceBlocks<T, S>>;

impl<T: CudaScalar, S: AbelianSector> DeviceBlocks<T, S> {
    /// Where the blocks live (the device's ordinal): part of every handle.
    pub fn domain(&self) -> Domain {
        self.storage.domain()
    }

    /// The device.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.storage.device
    }

    /// The block ids.
    pub fn ids(&self) -> &[usize] {
        &self.ids
    }

    /// The structure the ids refer to.
    pub fn structure(&self) -> &Arc<BlockStructure<S>> {
        &self.structure
    }

    /// Block `k` of the set as a column-major matrix in the allocation: its first `rows`
    /// legs folded into rows, the rest into columns ([`block_matrix`]). `None` past the end,
    /// or for a fold the layout does not allow.
    pub fn matrix(&self, k: usize, rows: usize) -> Option<MatLayout> {
        block_matrix(&self.structure, *self.ids.get(k)?, rows)
    }

    /// The element ranges of the allocation the set's blocks cover, increasing, adjacent
    /// ranges merged (one range for a whole array without gaps).
    pub fn runs(&self) -> Vec<Range<usize>> {
        element_runs(&self.structure, &self.ids)
    }

    /// [`runs`](Self::runs), each cut into pieces that fit cuBLAS's 32-bit lengths.
    fn blas_runs(&self) -> Vec<Range<usize>> {
        const MOST: usize = i32::MAX as usize;
        self.runs()
            .into_iter()
            .flat_map(|r| {
                (r.start..r.end)
                    .step_by(MOST)
                    .map(move |start| start..(start + MOST).min(r.end))
            })
            .collect()
    }
}

// SAFETY: the views reach no host memory at all: device memory is reached only by work
// enqueued through `enqueue`, under the storage's lock (so Rust never sees two live `&mut`
// of one buffer handle); the region is paired only with the records of exactly its blocks
// (`DeviceArray::blocks`), and the operations here touch only those blocks' elements.
unsafe impl<T: CudaScalar, S: AbelianSector> Region for DeviceBlocks<T, S> {
    type Ref<'a> = DeviceRead<'a, T, S>;
    type Mut<'a> = DeviceWrite<'a, T, S>;

    unsafe fn resolve(&self) -> tessera_core::Result<DeviceRead<'_, T, S>> {
        Ok(DeviceRead { blocks: self })
    }

    unsafe fn resolve_mut(&self) -> tessera_core::Result<DeviceWrite<'_, T, S>> {
        Ok(DeviceWrite { blocks: self })
    }
}

/// A task's read grant of some device blocks: it can be handed to [`enqueue`] as a source.
pub struct DeviceRead<'a, T, S: AbelianSector> {
    blocks: &'a DeviceBlocks<T, S>,
}

/// A task's write grant of some device blocks: it can be handed to [`enqueue`] as the
/// destination.
pub struct DeviceWrite<'a, T, S: AbelianSector> {
    blocks: &'a DeviceBlocks<T, S>,
}

impl<'a, T, S: AbelianSector> std::ops::Deref for DeviceRead<'a, T, S> {
    type Target = DeviceBlocks<T, S>;
    fn deref(&self) -> &DeviceBlocks<T, S> {
        self.blocks
    }
}

impl<'a, T, S: AbelianSector> std::ops::Deref for DeviceWrite<'a, T, S> {
    type Target = DeviceBlocks<T, S>;
    fn deref(&self) -> &DeviceBlocks<T, S> {
        self.blocks
    }
}

/// Runs `f` with the device buffers behind a task's grants: `write`'s mutably (when given),
/// each of `reads` shared (in order; a storage read twice is handed out twice), all on the
/// device of the first operand, whose handle `f` gets. `f` enqueues work on that device's
/// stream; nothing here waits for it.
///
/// The buffers are whole allocations: `f` must touch only the elements of the blocks its
/// grants name ([`DeviceBlocks::matrix`], [`DeviceBlocks::runs`]); the hazard records order
/// exactly those. The storages stay locked while `f` runs, so `f` must not call `enqueue`
/// on them again (that would wait for itself).
///
/// # Errors
///
/// [`Error::DataLength`] with no operand at all, [`Error::DeviceMismatch`] when the operands
/// live on different devices, [`Error::AliasedOperands`] when a read shares storage with the
/// write (nothing is called); `f`'s error as [`Error::Cuda`].
pub fn enqueue<T: CudaScalar, S: AbelianSector, R>(
    write: Option<&mut DeviceWrite<'_, T, S>>,
    reads: &[&DeviceRead<'_, T, S>],
    f: impl FnOnce(
        &CudaDevice,
        Option<&mut DeviceBuffer<T>>,
        &[&DeviceBuffer<T>],
    ) -> Result<R, CudaError>,
) -> Result<R, Error> {
    let write = write.map(|w| &*w.blocks.storage);
    let reads: SmallVec<[&DeviceStorage<T>; 4]> =
        reads.iter().map(|r| &*r.blocks.storage).collect();
    let Some(first) = write.or(reads.first().copied()) else {
        return Err(Error::DataLength {
            what: "the operands of a device task".to_owned(),
            expected: 1,
            given: 0,
        });
    };
    for other in reads.iter().chain(&write) {
        if other.device.ordinal() != first.device.ordinal() {
            return Err(Error::DeviceMismatch {
                expected: first.domain(),
                given: other.domain(),
            });
        }
    }
    if let Some(w) = write
        && reads.iter().any(|r| std::ptr::eq(*r, w))
    {
        return Err(Error::AliasedOperands {
            operation: "a device task (a storage both read and written)",
        });
    }
    // Lock each storage once, in address order.
    let mut order: SmallVec<[&DeviceStorage<T>; 4]> =
        write.into_iter().chain(reads.iter().copied()).collect();
    order.sort_by_key(|s| *s as *const DeviceStorage<T>);
    order.dedup_by(|a, b| std::ptr::eq(*a, *b));
    let mut guards: SmallVec<[Locked<'_, T>; 4]> =
        order.iter().map(|s| (*s, s.buffer.lock())).collect();
    let mut out = None;
    let mut shared: SmallVec<[(&DeviceStorage<T>, &DeviceBuffer<T>); 4]> = SmallVec::new();
    for (storage, guard) in guards.iter_mut() {
        if write.is_some_and(|w| std::ptr::eq(w, *storage)) {
            out = Some(&mut **guard);
        } else {
            shared.push((*storage, &**guard));
        }
    }
    let srcs: SmallVec<[&DeviceBuffer<T>; 4]> = reads
        .iter()
        .map(|r| {
            let (_, buf) = shared
                .iter()
                .find(|(s, _)| std::ptr::eq(*s, *r))
                .expect("every read storage is locked");
            *buf
        })
        .collect();
    f(&first.device, out, &srcs).map_err(Error::Cuda)
}

/// Block `id` of `s` as a column-major matrix in the allocation: legs `..rows` folded into
/// rows, the rest into columns, columns `ld` apart (its coupled sector's row count, or its
/// own rows in a packed sector); `None` for an unknown block, `rows` past its legs, or a fold
/// its strides do not allow (it always allows `rows = s.n_codomain()`).
pub fn block_matrix<S: AbelianSector>(
    s: &BlockStructure<S>,
    id: usize,
    rows: usize,
) -> Option<MatLayout> {
    let b = s.block(id)?;
    let (shape, strides) = (b.shape(), b.strides());
    if rows > shape.len() {
        return None;
    }
    let r: usize = shape[..rows].iter().product();
    let c: usize = shape[rows..].iter().product();
    let ld = match shape[rows..].iter().position(|&d| d > 1) {
        Some(k) => strides[rows + k],
        None => r.max(1),
    };
    // The fold holds when the row legs step column-major inside a column and the column
    // legs step by multiples of `ld` (axes of extent 1 take no step).
    let (mut row_step, mut col_step) = (1, ld);
    for (k, (&d, &st)) in shape.iter().zip(strides).enumerate() {
        let step = if k < rows {
            &mut row_step
        } else {
            &mut col_step
        };
        if d > 1 && st != *step {
            return None;
        }
        *step *= d;
    }
    if r > ld && c > 1 {
        return None;
    }
    Some(MatLayout {
        offset: b.offset(),
        rows: r,
        cols: c,
        ld: ld.max(r).max(1),
    })
}

/// The element ranges blocks `ids` of `s` cover, sorted and merged where adjacent: a coupled
/// sector whose region the selected blocks fill is one range (its blocks tile it: they lie
/// in it, apart, and their sizes sum to its size); any other block gives its matrix's
/// runs ([`MatLayout::runs`]). So a whole array is a range per run of sectors, with
/// no per-column work, even where blocks are a few rows tall and millions of columns wide.
fn element_runs<S: AbelianSector>(s: &BlockStructure<S>, ids: &[usize]) -> Vec<Range<usize>> {
    let mut selected = vec![false; s.num_blocks()];
    let mut filled = vec![0_usize; s.sectors().len()];
    for &id in ids {
        let block = s.block(id).expect("the ids were checked");
        if !std::mem::replace(&mut selected[id], true) {
            filled[block.coupled()] += block.len();
        }
    }
    let whole = |c: usize| filled[c] == s.sectors()[c].len();
    let mut runs: Vec<Range<usize>> = (s.sectors().iter().enumerate())
        .filter(|&(c, sector)| filled[c] > 0 && whole(c) && !sector.is_empty())
        .map(|(_, sector)| sector.offset()..sector.offset() + sector.len())
        .collect();
    for (id, _) in selected.iter().enumerate().filter(|&(_, &on)| on) {
        let block = s.block(id).expect("the ids were checked");
        if whole(block.coupled()) {
            continue;
        }
        let m = block_matrix(s, id, s.n_codomain()).expect("the layout's fold of a block");
        runs.extend(m.runs());
    }
    runs.sort_unstable_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(runs.len());
    for r in runs {
        match merged.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => merged.push(r),
        }
    }
    merged
}

/// A block-sparse tensor in one CUDA device's memory: the structure of an [`AsyncArray`],
/// one device allocation laid out as the host array's, one hazard record per block.
///
/// Made by [`AsyncArray::to_device`] or [`DeviceArray::zeros`]; read on the host through
/// [`DeviceArray::to_host`]. Operations enqueue on the device's stream and return at once.
///
/// ```
/// use tessera_backends::cuda::CudaDevice;
/// use tessera_blocks::{AsyncArray, Blocks, BlockStructure, Direction, Leg, U1};
/// use std::sync::Arc;
///
/// let Ok(dev) = CudaDevice::open(0) else { return Ok(()) }; // no GPU here: nothing to show
/// let dev = Arc::new(dev);
/// let v = Leg::new(Direction::In, [(U1(-1), 4), (U1(0), 6), (U1(1), 4)])?;
/// let s = BlockStructure::new(vec![v.clone()], vec![v.dual()], U1(0))?;
/// let a = AsyncArray::<f64, U1>::random(s, 7);
/// let d = a.to_device(&dev)?;           // enqueued: returns before the copy is done
/// d.scale(2.0);           // stream-ordered after the copy, no host wait
/// let back = d.to_host()?;              // the transfer task waits for the stream
/// assert_eq!(back.to_dense()?, a.to_dense()?.iter().map(|x| 2.0 * x).collect::<Vec<_>>());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DeviceArray<T, S: AbelianSector> {
    structure: Arc<BlockStructure<S>>,
    storage: Arc<DeviceStorage<T>>,
    records: Arc<RecordTable>,
}

impl<T: CudaScalar, S: AbelianSector> DeviceArray<T, S> {
    /// A tensor of zeros on `device` (the allocation is enqueued on its stream).
    ///
    /// # Errors
    ///
    /// [`Error::Cuda`] if the allocation fails.
    pub fn zeros(
        structure: impl Into<Arc<BlockStructure<S>>>,
        device: &Arc<CudaDevice>,
    ) -> Result<Self, Error> {
        let structure = structure.into();
        let buffer = device.alloc_zeros::<T>(structure.total_len())?;
        Ok(Self {
            records: RecordTable::new(structure.num_blocks()),
            structure,
            storage: Arc::new(DeviceStorage {
                device: Arc::clone(device),
                buffer: Mutex::new(buffer),
            }),
        })
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
        self.storage.domain()
    }

    /// The device.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.storage.device
    }

    /// Whether two arrays share storage.
    pub fn same_storage(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// One alias handle over blocks `ids` (in that order), paired with exactly their
    /// records, carrying the placement ([`DeviceBlocks::domain`]).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`] for an id that is not a block.
    pub fn blocks(&self, ids: &[usize]) -> Result<DeviceBlocksAlias<T, S>, Error> {
        if let Some(&bad) = ids.iter().find(|&&i| i >= self.num_blocks()) {
            return Err(Error::UnknownBlock {
                block: bad,
                blocks: self.num_blocks(),
            });
        }
        let hazards = HazardSet::of_table(&self.records, ids.iter().copied());
        let region = DeviceBlocks {
            storage: Arc::clone(&self.storage),
            structure: Arc::clone(&self.structure),
            ids: ids.into(),
        };
        // SAFETY: the region names exactly blocks `ids` (checked above) and is paired with
        // exactly their records; its views reach no host memory.
        Ok(unsafe { Alias::from_parts(region, hazards) })
    }

    /// The alias handle of block `id`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`] when `id` is not a block.
    pub fn block(&self, id: usize) -> Result<DeviceBlocksAlias<T, S>, Error> {
        self.blocks(&[id])
    }

    /// The handle of the selected blocks (increasing ids).
    fn selected(&self, blocks: Blocks<'_>) -> Result<DeviceBlocksAlias<T, S>, Error> {
        self.blocks(&blocks.resolve(self.num_blocks())?)
    }

    fn check_same_structure(&self, other: &Self) -> Result<(), Error> {
        if Arc::ptr_eq(&self.structure, &other.structure) || self.structure == other.structure {
            Ok(())
        } else {
            Err(Error::StructureMismatch {
                expected: self.structure.summary(),
                given: other.structure.summary(),
            })
        }
    }

    fn check_same_device(&self, other: &Self) -> Result<(), Error> {
        if self.domain() == other.domain() {
            Ok(())
        } else {
            Err(Error::DeviceMismatch {
                expected: self.domain(),
                given: other.domain(),
            })
        }
    }

    /// Waits until every block's work is enqueued (not done: see [`to_host`](Self::to_host)).
    pub fn wait(&self) -> Result<(), Error> {
        self.selected(Blocks::All)?.wait()?;
        Ok(())
    }

    /// A host copy, by one task that enqueues the copy after the work the blocks depend on
    /// and waits for the stream before it completes (the stream: so also for any device work
    /// enqueued before it); the host array's readers wait for that task. A device fault from
    /// earlier asynchronous work surfaces here (or at the next call that checks), as CUDA
    /// reports it.
    ///
    /// # Errors
    ///
    /// The runtime's refusal; the host allocation's errors (see
    /// [`AsyncArray::try_empty`]); a failed copy poisons the host array's blocks.
    pub fn to_host(&self) -> Result<AsyncArray<T, S>, Error> {
        let host = AsyncArray::<T, S>::try_empty(Arc::clone(&self.structure))?;
        let src = self.selected(Blocks::All)?.into_read();
        let whole = host.whole();
        // The flat view of the whole allocation: run positions are offsets from `base`.
        let base = whole.region().offset();
        let dst = whole.into_overwrite();
        schedule_named("device.to_host", (src, dst), move |(src, mut dst)| {
            let mut result = Ok(());
            dst.for_each_run_mut(|start, run| {
                if result.is_ok() {
                    result = enqueue(None, &[&src], |dev, _, bufs| {
                        dev.copy_to_host_at(bufs[0], base + start, run)
                    });
                }
            });
            Ok(result?)
        })?;
        Ok(host)
    }

    /// A copy on `device` (this one or another): one task enqueues it on `device`'s stream
    /// after an event of this array's stream, and makes this stream wait for the copy (so
    /// later writes here do not race with it); no host wait.
    ///
    /// # Errors
    ///
    /// [`Error::Cuda`] if the allocation fails; a failed copy poisons the new array's blocks.
    pub fn to_device(&self, device: &Arc<CudaDevice>) -> Result<Self, Error> {
        let out = Self::zeros(Arc::clone(&self.structure), device)?;
        let src = self.selected(Blocks::All)?.into_read();
        let dst = out.selected(Blocks::All)?.into_overwrite();
        schedule_eager_named("device.to_device", (src, dst), |(src, dst)| {
            // Two devices: each storage under its own lock, in address order (as `enqueue`).
            let (s, d) = (&src.storage, &dst.storage);
            let (src_buf, mut dst_buf);
            if (Arc::as_ptr(s) as usize) < (Arc::as_ptr(d) as usize) {
                src_buf = s.buffer.lock();
                dst_buf = d.buffer.lock();
            } else {
                dst_buf = d.buffer.lock();
                src_buf = s.buffer.lock();
            }
            d.device
                .copy_from_device(&src_buf, &mut dst_buf)
                .map_err(Error::Cuda)?;
            Ok(())
        })?;
        Ok(out)
    }

    /// `self <- alpha self`, through cuBLAS's scal (one call for the whole array), as
    /// [`AsyncArray::scale`]: nothing to check, so nothing to report (a device failure
    /// poisons the blocks).
    pub fn scale(&self, alpha: T) {
        self.scale_blocks(alpha, Blocks::All)
            .expect("scaling every block has nothing to check")
    }

    /// `self <- alpha self` on the selected blocks, through cuBLAS's scal (one call per
    /// element run the blocks cover).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`]; nothing is enrolled on error.
    pub fn scale_blocks(&self, alpha: T, blocks: Blocks<'_>) -> Result<(), Error> {
        let y = self.selected(blocks)?.into_write();
        schedule_eager_named("device.scale", y, move |mut y| {
            let runs = y.blas_runs();
            enqueue(Some(&mut y), &[], |dev, y, _| {
                let y = y.expect("a write was given");
                runs.iter()
                    .try_for_each(|r| dev.scal(alpha, y.vec_mut(run(r))))
            })?;
            Ok(())
        })?;
        Ok(())
    }

    /// `self <- alpha x + self`, through cuBLAS's axpy.
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`], [`Error::DeviceMismatch`], [`Error::AliasedOperands`]
    /// (`x` is `self`); nothing is enrolled on error.
    pub fn axpy(&self, alpha: T, x: &Self) -> Result<(), Error> {
        self.axpy_blocks(alpha, x, Blocks::All)
    }

    /// `self <- alpha x + self` on the selected blocks, through cuBLAS's axpy.
    ///
    /// # Errors
    ///
    /// As [`axpy`](Self::axpy), and [`Error::UnknownBlock`].
    pub fn axpy_blocks(&self, alpha: T, x: &Self, blocks: Blocks<'_>) -> Result<(), Error> {
        self.check_same_structure(x)?;
        self.check_same_device(x)?;
        if self.same_storage(x) {
            return Err(Error::AliasedOperands { operation: "axpy" });
        }
        let ids = blocks.resolve(self.num_blocks())?;
        let access = (x.blocks(&ids)?.into_read(), self.blocks(&ids)?.into_write());
        schedule_eager_named("device.axpy", access, move |(x, mut y)| {
            let runs = y.blas_runs();
            enqueue(Some(&mut y), &[&x], |dev, y, xs| {
                let y = y.expect("a write was given");
                runs.iter()
                    .try_for_each(|r| dev.axpy(alpha, xs[0].vec(run(r)), y.vec_mut(run(r))))
            })?;
            Ok(())
        })?;
        Ok(())
    }

    /// The Frobenius norm, through cuBLAS's nrm2, as [`AsyncArray::norm`]: a host value of
    /// the real type (its task copies the device result back, waiting for the stream after
    /// it has released the storage).
    pub fn norm(&self) -> Async<T::Real> {
        self.norm_blocks(Blocks::All)
            .expect("the norm of every block has nothing to check")
    }

    /// The Frobenius norm of the selected blocks, through cuBLAS's nrm2 (one per element
    /// run, each into a device slot); a host value, as [`norm`](Self::norm).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`]; nothing is enrolled on error.
    pub fn norm_blocks(&self, blocks: Blocks<'_>) -> Result<Async<T::Real>, Error> {
        let x = self.selected(blocks)?.into_read();
        let out = Async::new(<T::Real as Scalar>::ZERO);
        schedule_named("device.norm", (x, out.overwrite()), |(x, out)| {
            let runs = x.blas_runs();
            let (dev, slots) = enqueue(None, &[&x], |dev, _, xs| {
                let mut slots = dev.alloc_zeros::<T>(runs.len())?;
                for (k, r) in runs.iter().enumerate() {
                    dev.nrm2_into(xs[0].vec(run(r)), &mut slots, k)?;
                }
                Ok((Arc::clone(x.device()), slots))
            })?;
            let norms = dev.download(&slots).map_err(Error::Cuda)?;
            let squares: f64 = norms.iter().map(|n| n.to_c64().re.powi(2)).sum();
            *out = <T::Real as Scalar>::from_f64(squares.sqrt());
            Ok(())
        })?;
        Ok(out)
    }

    /// The inner product `<self, other>` (real types: the plain sum of products), through
    /// cuBLAS's dot; a host value, as [`norm`](Self::norm).
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`], [`Error::DeviceMismatch`]; nothing is enrolled on error.
    pub fn inner(&self, other: &Self) -> Result<Async<T>, Error> {
        self.inner_blocks(other, Blocks::All)
    }

    /// The inner product `<self, other>` over the selected blocks.
    ///
    /// # Errors
    ///
    /// As [`inner`](Self::inner), and [`Error::UnknownBlock`].
    pub fn inner_blocks(&self, other: &Self, blocks: Blocks<'_>) -> Result<Async<T>, Error> {
        self.check_same_structure(other)?;
        self.check_same_device(other)?;
        let ids = blocks.resolve(self.num_blocks())?;
        let out = Async::new(T::ZERO);
        let access = (
            self.blocks(&ids)?.into_read(),
            other.blocks(&ids)?.into_read(),
            out.overwrite(),
        );
        schedule_named("device.inner", access, |(x, y, out)| {
            let runs = x.blas_runs();
            let (dev, slots) = enqueue(None, &[&x, &y], |dev, _, bufs| {
                let mut slots = dev.alloc_zeros::<T>(runs.len())?;
                for (k, r) in runs.iter().enumerate() {
                    dev.dot_into(bufs[0].vec(run(r)), bufs[1].vec(run(r)), &mut slots, k)?;
                }
                Ok((Arc::clone(x.device()), slots))
            })?;
            let parts = dev.download(&slots).map_err(Error::Cuda)?;
            *out = T::from_f64(parts.iter().map(|p| p.to_c64().re).sum());
            Ok(())
        })?;
        Ok(out)
    }

    /// The leg permutation of [`AsyncArray::permute`] on the device: a new array on the
    /// same device, each block moved by the NVRTC permute kernel (with its fermionic sign);
    /// the re-indexing is the plan the structure keeps.
    ///
    /// # Errors
    ///
    /// As [`AsyncArray::permute`].
    pub fn permute(&self, perm: &[usize], n_codomain: usize) -> Result<Self, Error> {
        self.permute_blocks(perm, n_codomain, Blocks::All)
    }

    /// [`permute`](Self::permute) of the selected blocks; the other blocks of the result are
    /// zero, as [`AsyncArray::permute_blocks`].
    ///
    /// # Errors
    ///
    /// As [`AsyncArray::permute_blocks`].
    pub fn permute_blocks(
        &self,
        perm: &[usize],
        n_codomain: usize,
        blocks: Blocks<'_>,
    ) -> Result<Self, Error> {
        let permuted = self.structure.permutation(perm, n_codomain)?;
        blocks.resolve(self.num_blocks())?;
        let out = Self::zeros(permuted.structure.clone(), self.device())?;
        self.permute_into_with_blocks(&permuted, perm, &out, blocks)?;
        Ok(out)
    }

    /// Like [`permute`](Self::permute), into an existing array `out` on the same device that
    /// has the permuted structure, as [`AsyncArray::permute_into`].
    ///
    /// # Errors
    ///
    /// As [`AsyncArray::permute_into`], and [`Error::DeviceMismatch`].
    pub fn permute_into(&self, perm: &[usize], n_codomain: usize, out: &Self) -> Result<(), Error> {
        self.permute_into_blocks(perm, n_codomain, out, Blocks::All)
    }

    /// [`permute_into`](Self::permute_into) of the selected blocks (the other blocks of
    /// `out` are left as they are).
    ///
    /// # Errors
    ///
    /// As [`permute_into`](Self::permute_into), and [`Error::UnknownBlock`].
    pub fn permute_into_blocks(
        &self,
        perm: &[usize],
        n_codomain: usize,
        out: &Self,
        blocks: Blocks<'_>,
    ) -> Result<(), Error> {
        let permuted = self.structure.permutation(perm, n_codomain)?;
        self.permute_into_with_blocks(&permuted, perm, out, blocks)
    }

    /// Like [`AsyncArray::permute_into_with`], on the device: one task moves every block
    /// into `out` (same device) in one kernel launch.
    ///
    /// # Errors
    ///
    /// As [`AsyncArray::permute_into_with`], and [`Error::DeviceMismatch`].
    pub fn permute_into_with(
        &self,
        permuted: &Permuted<S>,
        perm: &[usize],
        out: &Self,
    ) -> Result<(), Error> {
        self.permute_into_with_blocks(permuted, perm, out, Blocks::All)
    }

    /// [`permute_into_with`](Self::permute_into_with) of the selected blocks.
    ///
    /// # Errors
    ///
    /// As [`permute_into_with`](Self::permute_into_with), and [`Error::UnknownBlock`].
    pub fn permute_into_with_blocks(
        &self,
        permuted: &Permuted<S>,
        perm: &[usize],
        out: &Self,
        blocks: Blocks<'_>,
    ) -> Result<(), Error> {
        check_permuted(&self.structure, permuted, perm, &out.structure)?;
        self.check_same_device(out)?;
        if self.same_storage(out) {
            return Err(Error::AliasedOperands {
                operation: "permute_into",
            });
        }
        // Without NVRTC the kernel cannot be built: say so now, not by a poisoned output.
        tessera_backends::cuda::probe_nvrtc()?;
        let ids = blocks.resolve(self.num_blocks())?;
        let targets: Vec<usize> = ids.iter().map(|&i| permuted.block_map[i]).collect();
        let negative: Vec<bool> = ids.iter().map(|&i| permuted.negative[i]).collect();
        let perm = perm.to_vec();
        let access = (
            self.blocks(&ids)?.into_read(),
            out.blocks(&targets)?.into_overwrite(),
        );
        schedule_eager_named("device.permute", access, move |(x, mut y)| {
            let nc = y.structure().n_codomain();
            let moves: Vec<(StridedSource, MatLayout, bool)> = (0..x.ids().len())
                .map(|k| {
                    let b = x.structure().block(x.ids()[k]).expect("ids checked");
                    let source = StridedSource {
                        offset: b.offset(),
                        dims: perm.iter().map(|&p| b.shape()[p]).collect(),
                        strides: perm.iter().map(|&p| b.strides()[p] as isize).collect(),
                    };
                    let dst = y.matrix(k, nc).expect("ids checked");
                    (source, dst, negative[k])
                })
                .collect();
            enqueue(Some(&mut y), &[&x], |dev, dst, srcs| {
                let batch: Vec<PermuteMove<'_>> = moves
                    .iter()
                    .map(|(src, layout, negate)| PermuteMove {
                        negate: *negate,
                        offset: src.offset,
                        dims: &src.dims,
                        strides: &src.strides,
                        dst: *layout,
                    })
                    .collect();
                dev.permute_copies(srcs[0], dst.expect("a write was given"), &batch)
            })?;
            Ok(())
        })?;
        Ok(())
    }
}

/// A block read through a leg permutation: the source of one permuting copy.
struct StridedSource {
    offset: usize,
    dims: SmallVec<[usize; 6]>,
    strides: SmallVec<[isize; 6]>,
}

/// A contiguous range as a level-1 vector.
fn run(r: &Range<usize>) -> VecLayout {
    VecLayout {
        offset: r.start,
        ..VecLayout::contiguous(r.len())
    }
}

impl<T: CudaScalar, S: AbelianSector> AsyncArray<T, S> {
    /// A copy on `device`: one task enqueues the host-to-device copy after the work the
    /// blocks depend on (the host data is staged when the copy is enqueued, so the task
    /// completes without waiting for the device).
    ///
    /// # Errors
    ///
    /// [`Error::Cuda`] if the allocation fails; a failed copy poisons the new array's blocks.
    pub fn to_device(&self, device: &Arc<CudaDevice>) -> Result<DeviceArray<T, S>, Error> {
        let out = DeviceArray::zeros(Arc::clone(self.structure()), device)?;
        let whole = self.whole();
        // The flat view of the whole allocation: run positions are offsets from `base`.
        let base = whole.region().offset();
        let src = whole.into_read();
        let dst = out.selected(Blocks::All)?.into_overwrite();
        schedule_named("device.to_device", (src, dst), move |(src, mut dst)| {
            let mut result = Ok(());
            src.for_each_run(|start, run| {
                if result.is_ok() {
                    result = enqueue(Some(&mut dst), &[], |dev, buf, _| {
                        dev.copy_to_device_at(run, buf.expect("a write was given"), base + start)
                    });
                }
            });
            Ok(result?)
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Kind, random_mask, random_structure};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use tessera_core::for_each_offset;

    /// Runs everywhere: a block's matrix reaches exactly its elements (the structure's
    /// offsets and strides), and the runs of a set of blocks cover exactly their elements,
    /// merged (one run for all the blocks of a structure without packed sectors).
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
                let runs = element_runs(&s, &ids);
                let got: Vec<usize> = runs.iter().flat_map(|r| r.clone()).collect();
                assert_eq!(got, want);
                assert!(runs.windows(2).all(|w| w[0].end < w[1].start), "merged");
                let twice: Vec<usize> = ids.iter().chain(&ids).copied().collect();
                assert_eq!(
                    element_runs(&s, &twice),
                    runs,
                    "an id given twice counts once"
                );
                let all: Vec<usize> = (0..s.num_blocks()).collect();
                // Whole sectors are one range each, however their blocks' columns interleave.
                assert!(element_runs(&s, &all).len() <= s.sectors().len());
                if s.sectors().iter().all(|c| c.is_dense()) && s.num_blocks() > 0 {
                    assert_eq!(element_runs(&s, &all), vec![0..s.total_len()]);
                }
            }
        }
        crate::for_each_kind!(run);
    }
}
