//! One tensor's allocation on a CUDA device, and how a task reaches it.
//!
//! Owns: [`CudaStorage`] (a device buffer and its device) and [`with_buffers`], the one way a
//! task's kernel reaches the buffers it holds grants for. Invariants:
//!
//! - The host-side handle of an allocation (a cudarc slice) is touched only under its
//!   storage's lock, held while work is enqueued (microseconds; a copy to the host holds it
//!   until the copy is done, as CUDA's copies into pageable memory return then) and taken
//!   in address order when a task touches several storages, so no two tasks hold one at
//!   once and no lock order can cycle.
//! - A storage both written and read by one call is refused (aliasing) before anything is
//!   locked or enqueued.
//! - Work is enqueued on the device's one stream, so work enqueued later on the same
//!   device runs after it with no host wait; freeing the allocation is stream-ordered too.

use super::{CudaDevice, CudaError, CudaScalar, DeviceBuffer};
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;
use std::sync::Arc;
use tessera_core::Domain;

/// One device allocation and the device it lives on.
#[derive(Debug)]
pub struct CudaStorage<T> {
    device: Arc<CudaDevice>,
    buffer: Mutex<DeviceBuffer<T>>,
}

impl<T: CudaScalar> CudaStorage<T> {
    /// A zeroed allocation of `len` elements on `device` (enqueued on its stream).
    ///
    /// # Errors
    ///
    /// The driver's refusal.
    pub fn zeros(device: &Arc<CudaDevice>, len: usize) -> Result<Self, CudaError> {
        Ok(Self {
            device: Arc::clone(device),
            buffer: Mutex::new(device.alloc_zeros::<T>(len)?),
        })
    }
}

impl<T> CudaStorage<T> {
    /// The device.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.device
    }

    /// Where the allocation lives.
    pub fn domain(&self) -> Domain {
        Domain::Cuda {
            ordinal: self.device.ordinal() as u32,
        }
    }
}

/// A storage and its locked buffer.
type Locked<'a, T> = (&'a CudaStorage<T>, MutexGuard<'a, DeviceBuffer<T>>);

/// Runs `f` with the device buffers of `write` (mutably, when given) and of each of `reads`
/// (shared, in order; a storage read twice is handed out twice), all on the device of the
/// first operand, whose handle `f` gets. `f` enqueues work on that device's stream; nothing
/// here waits for it.
///
/// The buffers are whole allocations: `f` must touch only the elements its caller's grants
/// cover. The storages stay locked while `f` runs, so `f` must not call this on them again
/// (that would wait for itself).
///
/// # Errors
///
/// [`CudaError::WrongDevice`] when the operands live on different devices,
/// [`CudaError::Aliased`] when a read is the write (nothing is called); `f`'s error.
pub fn with_buffers<T, R>(
    write: Option<&CudaStorage<T>>,
    reads: &[&CudaStorage<T>],
    f: impl FnOnce(
        &CudaDevice,
        Option<&mut DeviceBuffer<T>>,
        &[&DeviceBuffer<T>],
    ) -> Result<R, CudaError>,
) -> Result<R, CudaError> {
    let Some(first) = write.or(reads.first().copied()) else {
        return Err(CudaError::Aliased {
            what: "a device task with no operand",
        });
    };
    for other in reads.iter().chain(&write) {
        if other.device.ordinal() != first.device.ordinal() {
            return Err(CudaError::WrongDevice {
                operand: "an operand of a device task",
                expected: first.device.ordinal(),
                given: other.device.ordinal(),
            });
        }
    }
    if let Some(w) = write
        && reads.iter().any(|r| std::ptr::eq(*r, w))
    {
        return Err(CudaError::Aliased {
            what: "a device task (a storage both read and written)",
        });
    }
    // Lock each storage once, in address order.
    let mut order: SmallVec<[&CudaStorage<T>; 4]> =
        write.into_iter().chain(reads.iter().copied()).collect();
    order.sort_by_key(|s| *s as *const CudaStorage<T>);
    order.dedup_by(|a, b| std::ptr::eq(*a, *b));
    let mut guards: SmallVec<[Locked<'_, T>; 4]> =
        order.iter().map(|s| (*s, s.buffer.lock())).collect();
    let mut out = None;
    let mut shared: SmallVec<[(&CudaStorage<T>, &DeviceBuffer<T>); 4]> = SmallVec::new();
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
    f(&first.device, out, &srcs)
}

/// Runs `f` with two storages' buffers, the second written, each under its own lock taken
/// in address order (for copies between devices, which [`with_buffers`] refuses).
pub(crate) fn with_pair<T, R>(
    src: &CudaStorage<T>,
    dst: &CudaStorage<T>,
    f: impl FnOnce(&CudaDevice, &DeviceBuffer<T>, &mut DeviceBuffer<T>) -> Result<R, CudaError>,
) -> Result<R, CudaError> {
    if std::ptr::eq(src, dst) {
        return Err(CudaError::Aliased {
            what: "a copy of a storage onto itself",
        });
    }
    let (src_buf, mut dst_buf);
    if (src as *const CudaStorage<T>) < (dst as *const CudaStorage<T>) {
        src_buf = src.buffer.lock();
        dst_buf = dst.buffer.lock();
    } else {
        dst_buf = dst.buffer.lock();
        src_buf = src.buffer.lock();
    }
    f(&dst.device, &src_buf, &mut dst_buf)
}
