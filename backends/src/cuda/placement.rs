//! A CUDA device as a [`Placement`]: one [`CudaStorage`] per tensor, kernels enqueued on the
//! device's stream through cuBLAS and the NVRTC permute.
//!
//! Owns: [`Cuda`]. Invariants:
//!
//! - A task that only enqueues work is scheduled eagerly: when it waits for nothing, the
//!   enrolling thread enqueues the work itself, and the task completes when the work is
//!   enqueued, not done. Later work on the same device is enrolled after it, so it is
//!   enqueued after it and the stream orders the two with no host wait.
//! - A task whose result the host needs (a reduction, a copy to the host) runs on a worker
//!   and waits for the stream before it completes.
//! - Element types are real (`f32`, `f64`), so a conjugate is the identity.

use super::storage::{with_buffers, with_pair};
use super::{CudaDevice, CudaError, CudaScalar, PermuteMove, VecLayout};
use crate::placement::{
    ExtentMismatch, Grant, GrantMut, Permutation, Placement, PlacementError, check_alike,
    merged_runs,
};
use crate::{MatLayout, Scalar};
use std::any::Any;
use std::ops::Range;
use std::sync::Arc;
use tessera_core::{Access, Domain, KernelError, TaskId, schedule_eager_named, schedule_named};

use super::storage::CudaStorage;

/// One CUDA device: tensors in one [`CudaStorage`], worked on through its stream.
#[derive(Clone, Debug)]
pub struct Cuda {
    device: Arc<CudaDevice>,
}

impl Cuda {
    /// The placement on `device`.
    pub fn new(device: &Arc<CudaDevice>) -> Self {
        Self {
            device: Arc::clone(device),
        }
    }

    /// Opens device `ordinal` (see [`CudaDevice::open`]).
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::open`]: no driver, no such device.
    pub fn open(ordinal: usize) -> Result<Self, CudaError> {
        Ok(Self {
            device: Arc::new(CudaDevice::open(ordinal)?),
        })
    }

    /// The device.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.device
    }
}

impl PartialEq for Cuda {
    fn eq(&self, other: &Self) -> bool {
        self.device.ordinal() == other.device.ordinal()
    }
}

fn boxed(e: CudaError) -> KernelError {
    Box::new(e)
}

/// A contiguous range as a level-1 vector.
fn vec_of(r: &Range<usize>) -> VecLayout {
    VecLayout {
        offset: r.start,
        ..VecLayout::contiguous(r.len())
    }
}

/// The runs of a grant, cut to cuBLAS's 32-bit lengths.
fn blas_runs(extents: &[crate::Extent]) -> Vec<Range<usize>> {
    crate::placement::pieces_of(&merged_runs(extents), i32::MAX as usize)
}

/// The runs of `y`, checked to be those of `x`.
fn paired_runs(y: &[crate::Extent], x: &[crate::Extent]) -> Result<Vec<Range<usize>>, KernelError> {
    check_alike(y, x).map_err(|e| Box::new(e) as KernelError)?;
    let runs = blas_runs(y);
    if runs != blas_runs(x) {
        return Err(Box::new(ExtentMismatch {
            expected: y.len(),
            given: x.len(),
        }));
    }
    Ok(runs)
}

/// A contiguous run as a one-column matrix (for `CudaDevice::zero`).
fn column(r: &Range<usize>) -> MatLayout {
    MatLayout {
        offset: r.start,
        rows: r.len(),
        cols: 1,
        ld: r.len().max(1),
    }
}

impl<T: CudaScalar> Placement<T> for Cuda {
    type Storage = CudaStorage<T>;

    const CUTS_TASKS: bool = false;

    fn domain(&self) -> Domain {
        Domain::Cuda {
            ordinal: self.device.ordinal() as u32,
        }
    }

    fn of(storage: &CudaStorage<T>) -> Self {
        Self::new(storage.device())
    }

    fn alloc(&self, len: usize, _zeroed: bool) -> Result<CudaStorage<T>, PlacementError> {
        // Device allocations are always zeroed (a memset on the stream costs next to
        // nothing), so a tensor never holds another's leftovers.
        Ok(CudaStorage::zeros(&self.device, len)?)
    }

    fn probe_permute(&self) -> Result<(), PlacementError> {
        Ok(super::probe_nvrtc()?)
    }

    fn schedule<A, F>(
        name: &'static str,
        _largest: usize,
        _threads: usize,
        waits: bool,
        access: A,
        kernel: F,
    ) -> Result<TaskId, tessera_core::Error>
    where
        A: Access,
        F: for<'a> FnOnce(A::View<'a>) -> Result<(), KernelError> + Send + 'static,
    {
        if waits {
            schedule_named(name, access, kernel)
        } else {
            schedule_eager_named(name, access, kernel)
        }
    }

    fn scale(y: &mut GrantMut<'_, T, Self>, alpha: T, _: usize) -> Result<(), KernelError> {
        let runs = blas_runs(y.extents());
        with_buffers(Some(y.storage()), &[], |dev, y, _| {
            let y = y.expect("a write was given");
            runs.iter()
                .try_for_each(|r| dev.scal(alpha, y.vec_mut(vec_of(r))))
        })
        .map_err(boxed)
    }

    fn axpy(
        alpha: T,
        x: &Grant<'_, T, Self>,
        y: &mut GrantMut<'_, T, Self>,
        _: usize,
    ) -> Result<(), KernelError> {
        let runs = paired_runs(y.extents(), x.extents())?;
        with_buffers(Some(y.storage()), &[x.storage()], |dev, y, xs| {
            let y = y.expect("a write was given");
            runs.iter()
                .try_for_each(|r| dev.axpy(alpha, xs[0].vec(vec_of(r)), y.vec_mut(vec_of(r))))
        })
        .map_err(boxed)
    }

    fn combine(
        alpha: T,
        x: &Grant<'_, T, Self>,
        _conj: bool,
        z: Option<(T, &Grant<'_, T, Self>)>,
        y: &mut GrantMut<'_, T, Self>,
        _: usize,
    ) -> Result<(), KernelError> {
        let runs = paired_runs(y.extents(), x.extents())?;
        let mut reads = vec![x.storage()];
        if let Some((_, z)) = z {
            if paired_runs(y.extents(), z.extents())? != runs {
                return Err("the operands cover the same elements".into());
            }
            reads.push(z.storage());
        }
        let beta = z.map(|(beta, _)| beta);
        with_buffers(Some(y.storage()), &reads, |dev, y, srcs| {
            let y = y.expect("a write was given");
            for r in &runs {
                // Zeros first: the old values are not read (NaNs do not leak).
                dev.zero(y, column(r))?;
                dev.axpy(alpha, srcs[0].vec(vec_of(r)), y.vec_mut(vec_of(r)))?;
                if let Some(beta) = beta {
                    dev.axpy(beta, srcs[1].vec(vec_of(r)), y.vec_mut(vec_of(r)))?;
                }
            }
            Ok(())
        })
        .map_err(boxed)
    }

    fn norm_sqr(x: &Grant<'_, T, Self>, _: usize) -> Result<T::Real, KernelError> {
        let runs = blas_runs(x.extents());
        let (dev, slots) = with_buffers(None, &[x.storage()], |dev, _, xs| {
            let mut slots = dev.alloc_zeros::<T>(runs.len())?;
            for (k, r) in runs.iter().enumerate() {
                dev.nrm2_into(xs[0].vec(vec_of(r)), &mut slots, k)?;
            }
            Ok((Arc::clone(x.storage().device()), slots))
        })
        .map_err(boxed)?;
        // The stream is waited for with the storage released.
        let norms = dev.download(&slots).map_err(boxed)?;
        let squares: f64 = norms.iter().map(|n| n.to_c64().re.powi(2)).sum();
        Ok(<T::Real as Scalar>::from_f64(squares))
    }

    fn dot(x: &Grant<'_, T, Self>, y: &Grant<'_, T, Self>, _: usize) -> Result<T, KernelError> {
        let runs = paired_runs(y.extents(), x.extents())?;
        let (dev, slots) = with_buffers(None, &[x.storage(), y.storage()], |dev, _, bufs| {
            let mut slots = dev.alloc_zeros::<T>(runs.len())?;
            for (k, r) in runs.iter().enumerate() {
                dev.dot_into(
                    bufs[0].vec(vec_of(r)),
                    bufs[1].vec(vec_of(r)),
                    &mut slots,
                    k,
                )?;
            }
            Ok((Arc::clone(x.storage().device()), slots))
        })
        .map_err(boxed)?;
        let parts = dev.download(&slots).map_err(boxed)?;
        Ok(T::from_f64(parts.iter().map(|p| p.to_c64().re).sum()))
    }

    fn permute(
        x: &Grant<'_, T, Self>,
        y: &mut GrantMut<'_, T, Self>,
        how: &Permutation<'_>,
        _: usize,
    ) -> Result<(), KernelError> {
        let (xs, ys) = (x.extents(), y.extents());
        if xs.len() != ys.len() || how.moves.len() != xs.len() {
            return Err(Box::new(ExtentMismatch {
                expected: ys.len(),
                given: xs.len(),
            }));
        }
        let mut sources = Vec::with_capacity(xs.len());
        for (src, dst) in xs.iter().zip(ys) {
            let permuted = src
                .permuted(how.perm)
                .ok_or("the permutation indexes the block's legs")?;
            if permuted.dims != dst.dims {
                return Err("a block and its image have the same shape".into());
            }
            let layout = dst
                .matrix(how.rows)
                .ok_or("a destination block folds into its matrix")?;
            sources.push((permuted, layout));
        }
        let batch: Vec<PermuteMove<'_>> = sources
            .iter()
            .zip(how.moves)
            .map(|((src, dst), moved)| PermuteMove {
                negate: moved.negate,
                offset: src.offset,
                dims: &src.dims,
                strides: &src.strides,
                dst: *dst,
            })
            .collect();
        with_buffers(Some(y.storage()), &[x.storage()], |dev, dst, srcs| {
            dev.permute_copies(srcs[0], dst.expect("a write was given"), &batch)
        })
        .map_err(boxed)
    }

    fn transfer<Q: Placement<T>>(
        x: &Grant<'_, T, Q>,
        y: &mut GrantMut<'_, T, Self>,
    ) -> Result<(), KernelError> {
        let runs = merged_runs(y.extents());
        if runs != merged_runs(x.extents()) {
            return Err(Box::new(ExtentMismatch {
                expected: y.extents().len(),
                given: x.extents().len(),
            }));
        }
        let dst = y.storage();
        if runs.is_empty() {
            return Ok(());
        }
        if let Some(src) = (x.storage() as &dyn Any).downcast_ref::<CudaStorage<T>>() {
            // Device to device: one stream-ordered copy of the whole allocation (peer to
            // peer between devices), with no host wait.
            return with_pair(src, dst, |dev, s, d| {
                if runs.len() == 1 && runs[0] == (0..d.len()) {
                    dev.copy_from_device(s, d)
                } else {
                    Err(CudaError::LengthMismatch {
                        what: "device to device (whole allocations only)",
                        expected: d.len(),
                        given: runs.iter().map(|r| r.len()).sum(),
                    })
                }
            })
            .map_err(boxed);
        }
        for r in runs {
            let staged;
            let host = match Q::host_elems(x, r.clone()) {
                Some(host) => host,
                None => {
                    let mut buf = vec![T::ZERO; r.len()];
                    Q::download(x, r.start, &mut buf)?;
                    staged = buf;
                    &staged[..]
                }
            };
            with_buffers(Some(dst), &[], |dev, buf, _| {
                dev.copy_to_device_at(host, buf.expect("a write was given"), r.start)
            })
            .map_err(boxed)?;
        }
        Ok(())
    }

    fn host_elems<'a>(_: &Grant<'a, T, Self>, _: Range<usize>) -> Option<&'a [T]> {
        None
    }

    fn download(x: &Grant<'_, T, Self>, at: usize, into: &mut [T]) -> Result<(), KernelError> {
        with_buffers(None, &[x.storage()], |dev, _, bufs| {
            dev.copy_to_host_at(bufs[0], at, into)
        })
        .map_err(boxed)
    }
}
