//! Distributed arrays: one structure on every rank, each block stored by the rank that owns
//! it.
//!
//! Owns: [`DistArray`], the moves of blocks between ranks (as runtime tasks), scattering,
//! gathering, redistribution and the reductions. Invariants:
//!
//! - Every rank holds the same global structure and owners; the blocks a rank owns live in
//!   one local [`AsyncArray`] (the global structure with only those blocks present: one
//!   allocation, a hazard record per block), so local work keeps the runtime's sequential
//!   meaning.
//! - A block moves as two tasks: a send on its owner, which reads the block (copies it into
//!   a frame) and so waits only for the block's last write; and a receive on the other rank,
//!   a deferred task that overwrites the destination block when the frame arrives. Neither
//!   blocks a worker, and no operation waits for all ranks: host reads wait for exactly the
//!   blocks they read.
//! - Poison crosses ranks: a send of a poisoned block sends the failure instead, and the
//!   receive fails with it; an operation that fails on one rank aborts it on every rank
//!   (see `comm`).

use crate::comm::{Comm, Frame, Op};
use crate::error::Error;
use crate::map::{Owners, ProcessMap};
use std::sync::Arc;
use tessera_backends::Scalar;
use tessera_blocks::{AbelianSector, AsyncArray, BitVec, BlockAlias, BlockStructure};
use tessera_core::{
    AnyBits, StridedMut, StridedRef, schedule_deferred_named, schedule_named, zip_runs,
};

/// Not a local block.
const ABSENT: usize = usize::MAX;

/// A block-sparse array whose blocks are spread over the ranks of an MPI job.
///
/// Every rank holds the structure and the owner of every block; each block's elements live
/// on its owner only. Operations are collective: every rank calls them in the same order.
pub struct DistArray<T: Scalar, S: AbelianSector> {
    comm: Comm,
    structure: Arc<BlockStructure<S>>,
    owners: Owners,
    local: AsyncArray<T, S>,
    /// Global block id to local block id (`ABSENT` when another rank owns it).
    local_id: Arc<[usize]>,
}

impl<T: Scalar, S: AbelianSector> std::fmt::Debug for DistArray<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistArray")
            .field("rank", &self.comm.rank())
            .field("blocks", &self.structure.num_blocks())
            .field("local_blocks", &self.local.structure().num_blocks())
            .finish_non_exhaustive()
    }
}

/// `structure` with only the blocks `keep` accepts, and where each block went.
pub(crate) fn restricted<S: AbelianSector>(
    structure: &BlockStructure<S>,
    keep: impl Fn(usize) -> bool,
) -> Result<(BlockStructure<S>, Vec<usize>), Error> {
    let mut mask = BitVec::with_capacity(structure.num_allowed());
    let mut local_id = Vec::with_capacity(structure.num_blocks());
    let (mut block, mut kept) = (0, 0);
    for present in structure.present_mask().iter().by_vals() {
        let here = present && keep(block);
        mask.push(here);
        if present {
            local_id.push(if here { kept } else { ABSENT });
            kept += usize::from(here);
            block += 1;
        }
    }
    Ok((structure.with_present(&mask)?, local_id))
}

/// The bytes of a run of plain numbers.
fn bytes_of<T: AnyBits>(run: &[T]) -> &[u8] {
    // SAFETY: `AnyBits` types are plain numbers (floats, integers, complex pairs of them),
    // which have no padding, so every byte of the run is initialised; u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(run.as_ptr().cast::<u8>(), std::mem::size_of_val(run)) }
}

/// A block's elements, column-major, as bytes.
pub(crate) fn block_bytes<T: Scalar>(view: &StridedRef<'_, T>) -> Vec<u8> {
    let mut out = Vec::with_capacity(view.len() * std::mem::size_of::<T>());
    view.for_each_run(|_, run| out.extend_from_slice(bytes_of(run)));
    out
}

/// Fills a block from the bytes of its elements, column-major.
pub(crate) fn fill_block<T: Scalar>(
    view: &mut StridedMut<'_, T>,
    bytes: &[u8],
) -> Result<(), Error> {
    let size = std::mem::size_of::<T>();
    if bytes.len() != view.len() * size {
        return Err(Error::Mismatch {
            given: format!(
                "a block of {} bytes arrived for a block of {} elements of {size} bytes",
                bytes.len(),
                view.len()
            ),
        });
    }
    let mut at = 0;
    view.for_each_run_mut(|_, run| {
        let n = std::mem::size_of_val(run);
        // SAFETY: `bytes[at..at + n]` is in range (the lengths were checked), `run` is an
        // exclusive slice of `n` bytes, the two do not overlap (the frame is not the
        // array), and every bit pattern is a valid `T` (`AnyBits`).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes[at..].as_ptr(), run.as_mut_ptr().cast::<u8>(), n)
        };
        at += n;
    });
    Ok(())
}

/// A box of a block: the index it starts at and its extents, per axis.
pub(crate) type Region = (Vec<usize>, Vec<usize>);

/// Sends block `l` of `src` to every rank of `dests` as item `item` of `op`: a task that
/// waits for the block's last write, copies it once, and hands the frames to the progress
/// thread. A poisoned block sends its failure instead.
pub(crate) fn send_block<T: Scalar, S: AbelianSector>(
    comm: &Comm,
    op: Op,
    item: u64,
    src: &AsyncArray<T, S>,
    l: usize,
    dests: Vec<usize>,
) -> Result<(), Error> {
    send_region(comm, op, item, src, l, None, dests)
}

/// [`send_block`] of the box `region` of the block only (the whole block for `None`).
pub(crate) fn send_region<T: Scalar, S: AbelianSector>(
    comm: &Comm,
    op: Op,
    item: u64,
    src: &AsyncArray<T, S>,
    l: usize,
    region: Option<Region>,
    dests: Vec<usize>,
) -> Result<(), Error> {
    if dests.is_empty() {
        return Ok(());
    }
    let comm = comm.clone();
    let read = src.block(l)?.into_read();
    let guard = comm.send_guard();
    schedule_deferred_named("mpi send", read, move |done| {
        let _handed_over = guard;
        if let Some(failure) = done.poisoned() {
            let why = failure.to_string();
            dests
                .iter()
                .for_each(|&d| comm.send_poison(d, op, item, &why));
            done.complete(|_| Ok(()));
            return;
        }
        done.complete(|view| {
            let bytes = match &region {
                None => block_bytes(&view),
                Some((start, dims)) => {
                    block_bytes(&view.sub_box(start, dims).expect("a box inside the block"))
                }
            };
            dests.iter().for_each(|&d| comm.send(d, op, item, &bytes));
            Ok(())
        });
    })?;
    Ok(())
}

/// Receives item `item` of `op` from `source` into block `l` of `dst`: a deferred task that
/// overwrites the block when the frame arrives (on the progress thread), or fails with the
/// sender's failure.
pub(crate) fn recv_block<T: Scalar, S: AbelianSector>(
    comm: &Comm,
    op: Op,
    item: u64,
    source: usize,
    dst: &AsyncArray<T, S>,
    l: usize,
) -> Result<(), Error> {
    recv_region(comm, (op, item, source), dst, l, None)
}

/// [`recv_block`] into the box `region` of the block only (the whole block for `None`): the
/// task then writes that box and keeps the rest of the block.
pub(crate) fn recv_region<T: Scalar, S: AbelianSector>(
    comm: &Comm,
    (op, item, source): (Op, u64, usize),
    dst: &AsyncArray<T, S>,
    l: usize,
    region: Option<Region>,
) -> Result<(), Error> {
    let comm = comm.clone();
    let block = dst.block(l)?;
    let write = match region {
        None => block.into_overwrite(),
        Some(_) => block.into_write(),
    };
    schedule_deferred_named("mpi receive", write, move |done| {
        comm.expect(source, op, item, move |frame: Frame| {
            match frame.payload() {
                Ok(bytes) => done.complete(|mut view| match &region {
                    None => Ok(fill_block(&mut view, bytes)?),
                    Some((start, dims)) => {
                        let mut part = view
                            .sub_box_mut(start, dims)
                            .expect("a box inside the block");
                        Ok(fill_block(&mut part, bytes)?)
                    }
                }),
                Err(e) => done.fail(Box::new(e)),
            }
        });
    })?;
    Ok(())
}

/// Copies block `from` of `src` into block `to` of `dst` (same shape), as a task.
pub(crate) fn copy_block<T: Scalar, S: AbelianSector>(
    src: &AsyncArray<T, S>,
    from: usize,
    dst: &AsyncArray<T, S>,
    to: usize,
) -> Result<(), Error> {
    copy_region(src, from, dst, to, None)
}

/// [`copy_block`] of the box `boxes.0` of the source block into the box `boxes.1` (of the
/// same extents) of the destination block (the whole blocks for `None`): the task then
/// keeps the rest of the destination block.
pub(crate) fn copy_region<T: Scalar, S: AbelianSector>(
    src: &AsyncArray<T, S>,
    from: usize,
    dst: &AsyncArray<T, S>,
    to: usize,
    boxes: Option<(Region, Region)>,
) -> Result<(), Error> {
    let block = dst.block(to)?;
    let write = match boxes {
        None => block.into_overwrite(),
        Some(_) => block.into_write(),
    };
    let access = (src.block(from)?.into_read(), write);
    schedule_named("copy block", access, move |(s, mut d)| {
        match &boxes {
            None => zip_runs(&mut d, &s, |_, d, s| d.copy_from_slice(s)),
            Some(((s0, n0), (d0, n1))) => {
                let s = s.sub_box(s0, n0).expect("a box inside the block");
                let mut d = d.sub_box_mut(d0, n1).expect("a box inside the block");
                zip_runs(&mut d, &s, |_, d, s| d.copy_from_slice(s))
            }
        };
        Ok(())
    })?;
    Ok(())
}

impl<T: Scalar, S: AbelianSector> DistArray<T, S> {
    /// A distributed array of zeros over `structure`, placed by `map`.
    ///
    /// # Errors
    ///
    /// As [`ProcessMap::resolve`]; allocation errors of the local blocks.
    pub fn zeros(
        comm: &Comm,
        structure: impl Into<Arc<BlockStructure<S>>>,
        map: &ProcessMap,
    ) -> Result<Self, Error> {
        Self::placed(comm, structure.into(), map, true)
    }

    /// The array placed by `map`, its local blocks `zeroed` (for [`zeros`](Self::zeros)) or
    /// left as they come (for the operations that overwrite every local block: `scatter`,
    /// `redistribute`).
    fn placed(
        comm: &Comm,
        structure: Arc<BlockStructure<S>>,
        map: &ProcessMap,
        zeroed: bool,
    ) -> Result<Self, Error> {
        let op = comm.begin();
        comm.or_abort(op, || {
            let owners = map.resolve(&structure, comm.size())?;
            let me = comm.rank();
            let (local, local_id) = restricted(&structure, |g| owners.of(g) == me)?;
            Ok(Self {
                comm: comm.clone(),
                local: if zeroed {
                    AsyncArray::try_zeros(local)?
                } else {
                    AsyncArray::try_empty(local)?
                },
                structure,
                owners,
                local_id: local_id.into(),
            })
        })
    }

    /// The blocks of `global` (an array every rank holds in full, such as one read from a
    /// file on each) that `map` gives this rank, copied into a distributed array. Nothing is
    /// sent: every rank takes its own blocks.
    ///
    /// # Errors
    ///
    /// As [`zeros`](Self::zeros).
    pub fn scatter(
        comm: &Comm,
        global: &AsyncArray<T, S>,
        map: &ProcessMap,
    ) -> Result<Self, Error> {
        // Every local block is overwritten below.
        let out = Self::placed(comm, Arc::clone(global.structure()), map, false)?;
        for (g, &l) in out.local_id.iter().enumerate() {
            if l != ABSENT {
                copy_block(global, g, &out.local, l)?;
            }
        }
        Ok(out)
    }

    /// The whole array on every rank: each owner sends its blocks to every other rank.
    /// Returns at once; reading the result waits for the blocks it reads.
    ///
    /// # Errors
    ///
    /// Allocation errors of the full array.
    pub fn gather(&self) -> Result<AsyncArray<T, S>, Error> {
        let op = self.comm.begin();
        self.comm.or_abort(op, || {
            // Every block is overwritten below, by a copy or a receive.
            let full = AsyncArray::try_empty(Arc::clone(&self.structure))?;
            let me = self.comm.rank();
            let others: Vec<usize> = (0..self.comm.size()).filter(|&r| r != me).collect();
            for g in 0..self.structure.num_blocks() {
                let owner = self.owners.of(g);
                if owner == me {
                    let l = self.local_id[g];
                    copy_block(&self.local, l, &full, g)?;
                    send_block(&self.comm, op, g as u64, &self.local, l, others.clone())?;
                } else {
                    recv_block(&self.comm, op, g as u64, owner, &full, g)?;
                }
            }
            Ok(full)
        })
    }

    /// The same array placed by another map: each block moves from its old owner to its new
    /// one, and no other block moves.
    ///
    /// # Errors
    ///
    /// As [`zeros`](Self::zeros).
    pub fn redistribute(&self, map: &ProcessMap) -> Result<Self, Error> {
        // Every local block is overwritten below, by a copy or a receive.
        let out = Self::placed(&self.comm, Arc::clone(&self.structure), map, false)?;
        let op = self.comm.begin();
        self.comm.or_abort(op, || {
            let me = self.comm.rank();
            for g in 0..self.structure.num_blocks() {
                let (from, to) = (self.owners.of(g), out.owners.of(g));
                let item = g as u64;
                match (from == me, to == me) {
                    (true, true) => {
                        copy_block(&self.local, self.local_id[g], &out.local, out.local_id[g])?
                    }
                    (true, false) => {
                        send_block(
                            &self.comm,
                            op,
                            item,
                            &self.local,
                            self.local_id[g],
                            vec![to],
                        )?;
                    }
                    (false, true) => {
                        recv_block(&self.comm, op, item, from, &out.local, out.local_id[g])?;
                    }
                    (false, false) => {}
                }
            }
            Ok(out)
        })
    }

    /// The Frobenius norm of the whole array, on every rank: each rank's sum of squares,
    /// summed over the ranks in rank order (the same bits on every rank). Waits for the
    /// local blocks.
    ///
    /// # Errors
    ///
    /// A poisoned local block, or [`Error::Remote`] when another rank's part failed: every
    /// rank returns an error then.
    pub fn norm(&self) -> Result<f64, Error> {
        let op = self.comm.begin();
        let local = self
            .local
            .norm()
            .get()
            .map(|n| {
                let n: f64 = n.into();
                [n * n, 0.0]
            })
            .map_err(remote_or_local);
        let [sq, _] = reduce_sum(&self.comm, op, local)?;
        Ok(sq.sqrt())
    }

    /// `<self, other>` (conjugating `self`) over the whole array, on every rank.
    ///
    /// # Errors
    ///
    /// [`Error::Mismatch`] when the arrays' structures or owners differ; otherwise as
    /// [`norm`](Self::norm).
    pub fn inner(&self, other: &Self) -> Result<T, Error> {
        let op = self.comm.begin();
        let local = if self.structure != other.structure || self.owners != other.owners {
            Err(Error::Mismatch {
                given: "the inner product of arrays with different structures or maps".into(),
            })
        } else {
            self.local
                .inner(&other.local)
                .map_err(Error::from)
                .and_then(|v| v.get().map_err(remote_or_local))
                .map(|v| {
                    let z = v.to_c64();
                    [z.re, z.im]
                })
        };
        let [re, im] = reduce_sum(&self.comm, op, local)?;
        Ok(T::from_c64(num_complex::Complex64::new(re, im)))
    }

    /// This rank.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// The global structure (the same on every rank).
    pub fn structure(&self) -> &Arc<BlockStructure<S>> {
        &self.structure
    }

    /// The owner of every block.
    pub fn owners(&self) -> &Owners {
        &self.owners
    }

    /// The blocks this rank owns, as one local array (the global structure with only those
    /// blocks present). Local work on it keeps the runtime's ordering with everything the
    /// distributed operations schedule.
    pub fn local(&self) -> &AsyncArray<T, S> {
        &self.local
    }

    /// The local block id of global block `id`, when this rank owns it.
    pub fn local_id(&self, id: usize) -> Option<usize> {
        self.local_id.get(id).copied().filter(|&l| l != ABSENT)
    }

    /// A handle on global block `id` of the local array, when this rank owns it.
    ///
    /// # Errors
    ///
    /// [`Error::Map`] when another rank owns the block.
    pub fn block(&self, id: usize) -> Result<BlockAlias<T>, Error> {
        let l = self.local_id(id).ok_or_else(|| Error::Map {
            expected: format!("a block rank {} owns", self.comm.rank()),
            given: format!(
                "block {id}, owned by rank {}",
                self.owners
                    .as_slice()
                    .get(id)
                    .map_or("none".to_owned(), |r| r.to_string())
            ),
        })?;
        Ok(self.local.block(l)?)
    }

    /// The distributed array with this one's structure and owners whose local blocks are
    /// `local`: the result of local work on [`local`](Self::local) (a copy with a sign on
    /// some blocks, a scaling by singular values, any operation block by block). Not
    /// collective: nothing moves.
    ///
    /// # Errors
    ///
    /// [`Error::Mismatch`] when `local` does not have the local array's structure.
    pub fn with_local(&self, local: AsyncArray<T, S>) -> Result<Self, Error> {
        if local.structure() != self.local.structure() {
            return Err(Error::Mismatch {
                given: format!(
                    "local blocks of {} for an array whose local blocks are {}",
                    local.structure().summary(),
                    self.local.structure().summary()
                ),
            });
        }
        Ok(self.holding(local))
    }

    /// A copy (the local blocks copied by tasks; nothing moves between ranks).
    pub fn duplicate(&self) -> Self {
        self.holding(self.local.duplicate())
    }

    /// Multiplies every element by `alpha` (the local blocks, by tasks).
    pub fn scale(&self, alpha: T) {
        self.local.scale(alpha);
    }

    /// `self += alpha * x`, block by block on each owner (nothing moves between ranks).
    ///
    /// # Errors
    ///
    /// [`Error::Mismatch`] when the arrays' structures or owners differ (the same on every
    /// rank); nothing is enrolled then.
    pub fn axpy(&self, alpha: T, x: &Self) -> Result<(), Error> {
        if self.structure != x.structure || self.owners != x.owners {
            return Err(Error::Mismatch {
                given: "axpy of arrays with different structures or maps".into(),
            });
        }
        Ok(self.local.axpy(alpha, &x.local)?)
    }

    /// This array's structure and owners with the local blocks `local` (of the local
    /// structure: the callers make or check it).
    fn holding(&self, local: AsyncArray<T, S>) -> Self {
        Self {
            comm: self.comm.clone(),
            structure: Arc::clone(&self.structure),
            owners: self.owners.clone(),
            local,
            local_id: Arc::clone(&self.local_id),
        }
    }

    /// A distributed array from its parts (for operations that build their own output).
    pub(crate) fn from_parts(
        comm: &Comm,
        structure: Arc<BlockStructure<S>>,
        owners: Owners,
        local: AsyncArray<T, S>,
        local_id: Vec<usize>,
    ) -> Self {
        Self {
            comm: comm.clone(),
            structure,
            owners,
            local,
            local_id: local_id.into(),
        }
    }
}

/// A local runtime error, or the failure of another rank when that is what poisoned the
/// value (a receive that got the failure instead of a block).
fn remote_or_local(e: tessera_core::Error) -> Error {
    match e.task_error::<Error>() {
        Some(Error::Remote { rank, message }) => Error::Remote {
            rank: *rank,
            message: message.clone(),
        },
        _ => Error::Runtime(e),
    }
}

/// The sum over the ranks of each rank's `part` (two numbers), the same on every rank: the
/// parts gathered by [`all_gather`], added in rank order (so the sums agree to the bit).
pub(crate) fn reduce_sum(
    comm: &Comm,
    op: Op,
    part: Result<[f64; 2], Error>,
) -> Result<[f64; 2], Error> {
    let bytes = part.map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect());
    let parts = all_gather(comm, op, bytes)?;
    let mut sum = [0.0; 2];
    for (source, b) in parts.iter().enumerate() {
        if b.len() != 16 {
            return Err(Error::Mismatch {
                given: format!("a reduction part of {} bytes from rank {source}", b.len()),
            });
        }
        let x = |i: usize| f64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8"));
        sum[0] += x(0);
        sum[1] += x(1);
    }
    Ok(sum)
}

/// Every rank's `part`, in rank order, on every rank: each rank sends its part to every
/// other. A failed part travels as a failure, so every rank returns an error when any part
/// failed, and a rank that aborted `op` fails the gather instead of leaving the others
/// waiting (a collective of the MPI library would wait for it forever, which is why this is
/// frames through the progress thread). A rank whose own part failed returns its own error.
pub(crate) fn all_gather(
    comm: &Comm,
    op: Op,
    part: Result<Vec<u8>, Error>,
) -> Result<Vec<Vec<u8>>, Error> {
    let me = comm.rank();
    for dest in (0..comm.size()).filter(|&r| r != me) {
        match &part {
            Ok(bytes) => comm.send(dest, op, 0, bytes),
            Err(e) => comm.send_poison(dest, op, 0, &e.to_string()),
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    for source in (0..comm.size()).filter(|&r| r != me) {
        let tx = tx.clone();
        comm.expect(source, op, 0, move |frame| {
            let _ = tx.send((source, frame));
        });
    }
    drop(tx);
    let mut parts: Vec<Option<Result<Vec<u8>, Error>>> = (0..comm.size()).map(|_| None).collect();
    for (source, frame) in rx {
        parts[source] = Some(frame.payload().map(<[u8]>::to_vec));
    }
    // This rank's own error first: ranks that fail alike each return their own error.
    parts[me] = Some(Ok(part?));
    parts
        .into_iter()
        .map(|p| p.expect("every rank's part arrived or failed"))
        .collect()
}
