//! One CUDA device: its primary context, its one stream, its cuBLAS handle, and its buffers.
//!
//! Owns: [`CudaDevice`], [`DeviceBuffer`], [`CudaScalar`] and the host/device copies.
//! Invariant: a [`CudaDevice`] exists only after [`super::probe`] passed and the ordinal was
//! checked against the device count; every buffer it allocates is ordered on its stream, and a
//! copy that makes device data visible on the host waits for that stream before returning.

use super::permute::PermuteKernels;
use super::{CudaError, cublas, driver, probe};
use crate::Scalar;
use cudarc::cublas::sys::{self as blas_sys, cublasHandle_t, cublasOperation_t, cublasStatus_t};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig, result::CublasError};
use cudarc::driver::sys::CUresult;
use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceRepr, ValidAsZeroBits,
};
use std::ffi::{c_int, c_longlong};
use std::sync::{Arc, OnceLock};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// An element type with cuBLAS kernels here: `f32` and `f64`.
pub trait CudaScalar:
    Scalar + DeviceRepr + ValidAsZeroBits + sealed::Sealed + super::solver::Lapack
{
    /// The index of this type's kernel in a device's permute kernels.
    #[doc(hidden)]
    const KERNEL: usize;

    /// `cublas?gemm` on the handle's stream.
    ///
    /// # Safety
    ///
    /// `cfg` must describe matrices that lie within `a`, `b` and `c` (leading dims at least
    /// the stored rows), and all three must be on the handle's device.
    #[doc(hidden)]
    unsafe fn gemm(
        blas: &CudaBlas,
        cfg: GemmConfig<Self>,
        a: &CudaView<'_, Self>,
        b: &CudaView<'_, Self>,
        c: &mut CudaViewMut<'_, Self>,
    ) -> Result<(), CublasError>;

    /// `cublas?gemmStridedBatched` on the handle's stream.
    ///
    /// # Safety
    ///
    /// As [`CudaScalar::gemm`], for every matrix of the batch, and the C matrices must not
    /// overlap.
    #[doc(hidden)]
    unsafe fn gemm_strided_batched(
        blas: &CudaBlas,
        cfg: StridedBatchedConfig<Self>,
        a: &CudaView<'_, Self>,
        b: &CudaView<'_, Self>,
        c: &mut CudaViewMut<'_, Self>,
    ) -> Result<(), CublasError>;

    /// `cublas?axpy_v2`: `y <- alpha x + y`. Safety: `x` and `y` must be device pointers on
    /// the handle's device to vectors of `n` elements `incx` / `incy` apart, `y`'s not
    /// overlapping `x`'s; `alpha` as the handle's pointer mode says (host here).
    #[doc(hidden)]
    const AXPY: Axpy<Self>;
    /// `cublas?scal_v2`: `x <- alpha x`. Safety: as for [`CudaScalar::AXPY`], for `x`.
    #[doc(hidden)]
    const SCAL: Scal<Self>;
    /// `cublas?nrm2_v2`: `result <- ||x||_2`. Safety: as for [`CudaScalar::AXPY`];
    /// `result` points where the handle's pointer mode says.
    #[doc(hidden)]
    const NRM2: Nrm2<Self>;
    /// `cublas?dot_v2`: `result <- x . y`. Safety: as for [`CudaScalar::NRM2`], for `x` and
    /// `y`.
    #[doc(hidden)]
    const DOT: Dot<Self>;
    /// `cublas?gemmStridedBatched` on raw device pointers (no cudarc views, so no cudarc
    /// events are waited for or recorded: the caller orders the streams). Safety: every
    /// matrix of the batch (`batch` of them, `stride_*` elements apart) must lie within its
    /// allocation on the handle's device, with no two C matrices sharing an element, and stay
    /// allocated until the handle's stream has run the call. `alpha` and `beta` are host
    /// pointers (host pointer mode).
    #[doc(hidden)]
    const GEMM_STRIDED_RAW: GemmStrided<Self>;
    /// `cublas?gemmBatched`: one shape, pointer arrays in device memory. Safety: the three
    /// arrays must be device memory of `batch` pointers each, every pointer to a matrix that
    /// lies within its allocation on the handle's device, with no two C matrices sharing an
    /// element; the arrays and matrices must stay allocated until the stream has run the
    /// call. `alpha` and `beta` are host pointers (host pointer mode).
    #[doc(hidden)]
    const GEMM_BATCHED: GemmBatched<Self>;
    /// `cublas?gemmGroupedBatched` (cuBLAS 12.5 and later): per-group shapes, scalars and
    /// transposes in host arrays of `group_count`, matrix pointers in device arrays of the
    /// sum of `group_size`. Safety: as for [`CudaScalar::GEMM_BATCHED`], group by group;
    /// every host array holds `group_count` entries; the caller checked the grouped symbols'
    /// probe.
    #[doc(hidden)]
    const GEMM_GROUPED: GemmGrouped<Self>;
}

macro_rules! cuda_scalar {
    ($t:ty, $kernel:literal, $prefix:ident) => {
        paste::paste! {
            impl CudaScalar for $t {
                const KERNEL: usize = $kernel;
                const AXPY: Axpy<Self> = blas_sys::[<cublas $prefix axpy_v2>];
                const SCAL: Scal<Self> = blas_sys::[<cublas $prefix scal_v2>];
                const NRM2: Nrm2<Self> = blas_sys::[<cublas $prefix nrm2_v2>];
                const DOT: Dot<Self> = blas_sys::[<cublas $prefix dot_v2>];
                const GEMM_STRIDED_RAW: GemmStrided<Self> =
                    blas_sys::[<cublas $prefix gemmStridedBatched>];
                const GEMM_BATCHED: GemmBatched<Self> = blas_sys::[<cublas $prefix gemmBatched>];
                const GEMM_GROUPED: GemmGrouped<Self> =
                    blas_sys::[<cublas $prefix gemmGroupedBatched>];

                unsafe fn gemm(
                    blas: &CudaBlas,
                    cfg: GemmConfig<Self>,
                    a: &CudaView<'_, Self>,
                    b: &CudaView<'_, Self>,
                    c: &mut CudaViewMut<'_, Self>,
                ) -> Result<(), CublasError> {
                    // SAFETY: the caller's contract is cudarc's.
                    unsafe { Gemm::<$t>::gemm(blas, cfg, a, b, c) }
                }

                unsafe fn gemm_strided_batched(
                    blas: &CudaBlas,
                    cfg: StridedBatchedConfig<Self>,
                    a: &CudaView<'_, Self>,
                    b: &CudaView<'_, Self>,
                    c: &mut CudaViewMut<'_, Self>,
                ) -> Result<(), CublasError> {
                    // SAFETY: the caller's contract is cudarc's.
                    unsafe { Gemm::<$t>::gemm_strided_batched(blas, cfg, a, b, c) }
                }
            }
        }
    };
}

cuda_scalar!(f32, 0, S);
cuda_scalar!(f64, 1, D);

/// `cublas?axpy_v2` (see [`CudaScalar::AXPY`]).
type Axpy<T> =
    unsafe fn(cublasHandle_t, c_int, *const T, *const T, c_int, *mut T, c_int) -> cublasStatus_t;
/// `cublas?scal_v2`.
type Scal<T> = unsafe fn(cublasHandle_t, c_int, *const T, *mut T, c_int) -> cublasStatus_t;
/// `cublas?nrm2_v2`.
type Nrm2<T> = unsafe fn(cublasHandle_t, c_int, *const T, c_int, *mut T) -> cublasStatus_t;
/// `cublas?dot_v2`.
type Dot<T> =
    unsafe fn(cublasHandle_t, c_int, *const T, c_int, *const T, c_int, *mut T) -> cublasStatus_t;
/// `cublas?gemmStridedBatched`.
type GemmStrided<T> = unsafe fn(
    cublasHandle_t,
    cublasOperation_t,
    cublasOperation_t,
    c_int,
    c_int,
    c_int,
    *const T,
    *const T,
    c_int,
    c_longlong,
    *const T,
    c_int,
    c_longlong,
    *const T,
    *mut T,
    c_int,
    c_longlong,
    c_int,
) -> cublasStatus_t;
/// `cublas?gemmBatched`.
type GemmBatched<T> = unsafe fn(
    cublasHandle_t,
    cublasOperation_t,
    cublasOperation_t,
    c_int,
    c_int,
    c_int,
    *const T,
    *const *const T,
    c_int,
    *const *const T,
    c_int,
    *const T,
    *const *mut T,
    c_int,
    c_int,
) -> cublasStatus_t;
/// `cublas?gemmGroupedBatched`.
type GemmGrouped<T> = unsafe fn(
    cublasHandle_t,
    *const cublasOperation_t,
    *const cublasOperation_t,
    *const c_int,
    *const c_int,
    *const c_int,
    *const T,
    *const *const T,
    *const c_int,
    *const *const T,
    *const c_int,
    *const T,
    *const *mut T,
    *const c_int,
    c_int,
    *const c_int,
) -> cublasStatus_t;

/// A buffer of `T` in one device's memory, allocated and freed in order on that device's
/// stream.
#[derive(Debug)]
pub struct DeviceBuffer<T> {
    slice: CudaSlice<T>,
}

impl<T> DeviceBuffer<T> {
    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.slice.is_empty()
    }

    /// The ordinal of the device whose memory this is.
    pub fn ordinal(&self) -> usize {
        self.slice.ordinal()
    }

    /// The cudarc slice underneath (for kernels this module does not wrap yet).
    pub fn as_cuda_slice(&self) -> &CudaSlice<T> {
        &self.slice
    }

    /// The cudarc slice underneath, mutably.
    pub fn as_cuda_slice_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

/// One CUDA device opened for work: its primary context, one stream that all of this handle's
/// work is ordered on, and two cuBLAS handles bound to that stream (one reading scalars from
/// the host, one reading and writing them in device memory).
#[derive(Debug)]
pub struct CudaDevice {
    // Field order is drop order: the kernels' module and the cuBLAS handles before the stream
    // they are used on, the stream before the context.
    /// The permute kernels, compiled and loaded on first use.
    pub(super) permute_kernels: OnceLock<Result<Arc<PermuteKernels>, CudaError>>,
    /// The skinny GEMM kernels, compiled and loaded on first use.
    pub(super) skinny_kernels: OnceLock<Result<Arc<super::skinny::SkinnyKernels>, CudaError>>,
    /// Side streams for independent GEMMs, made on first use ([`super::lanes`]).
    pub(super) lanes: super::lanes::LaneSet,
    /// The cuSOLVER handle on the stream, made on first use ([`super::solver`]).
    pub(super) solver: OnceLock<Result<Arc<cudarc::cusolver::safe::DnHandle>, CudaError>>,
    /// In host pointer mode (alpha, beta and results are host pointers): GEMMs, axpy, scal.
    pub(super) blas: CudaBlas,
    /// In device pointer mode, set once at creation and never changed (a handle's pointer mode
    /// is state every call reads, so toggling one shared handle would race with other
    /// threads' calls): the reductions that leave their result in device memory.
    pub(super) blas_device_results: CudaBlas,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
}

/// The range `offset..offset + len` of a buffer of `buf_len` elements, when it lies inside.
pub(super) fn check_range(
    operand: &'static str,
    offset: usize,
    len: usize,
    buf_len: usize,
) -> Result<std::ops::Range<usize>, CudaError> {
    match offset.checked_add(len) {
        Some(end) if end <= buf_len => Ok(offset..end),
        end => Err(CudaError::OutOfBounds {
            operand,
            needed: end.unwrap_or(usize::MAX),
            len: buf_len,
        }),
    }
}

/// Refuses an allocation of `len` elements whose size in bytes does not fit an `isize`.
pub(super) fn check_alloc_bytes<T>(len: usize) -> Result<(), CudaError> {
    match len.checked_mul(size_of::<T>()) {
        Some(bytes) if isize::try_from(bytes).is_ok() => Ok(()),
        _ => Err(CudaError::TooLarge {
            what: "the allocation's size in elements (times the element size, in bytes)",
            value: len,
            bits: 63,
        }),
    }
}

/// Makes the device's default memory pool (where cudarc's stream-ordered allocations come
/// from) keep the memory freed into it, instead of handing it back to the driver at every
/// synchronization, which is the pool's default: a temporary of hundreds of MB, freed and
/// allocated again around each host read, would otherwise be mapped again at each use (about
/// half a millisecond per 500 MB on an H200). The memory stays with this process, reused by
/// its later allocations, until it exits. A device without memory pools is left alone.
fn keep_freed_memory(ctx: &CudaContext) -> Result<(), CudaError> {
    use cudarc::driver::sys::{
        CUdevice_attribute, CUmemPool_attribute, cuDeviceGetDefaultMemPool, cuMemPoolSetAttribute,
    };
    let pools = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
        .map_err(driver("ask whether the device has memory pools"))?;
    if pools == 0 {
        return Ok(());
    }
    let mut pool = std::ptr::null_mut();
    // SAFETY: `pool` is a valid place for the handle, and the device is the context's (the
    // probe saw the symbol).
    unsafe { cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }
        .result()
        .map_err(driver("get the device's default memory pool"))?;
    let mut threshold = u64::MAX;
    // SAFETY: the release threshold is a `cuuint64_t`, read through the pointer during the
    // call; `pool` is the handle the driver just gave.
    unsafe {
        cuMemPoolSetAttribute(
            pool,
            CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&raw mut threshold).cast(),
        )
    }
    .result()
    .map_err(driver("set the memory pool's release threshold"))
}

impl Drop for CudaDevice {
    /// Waits for the stream before the fields drop: a kernel still queued must not lose its
    /// module (`cuModuleUnload` is not documented to wait for launches in flight). An error
    /// here has nowhere to go; cudarc records it on the context.
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
    }
}

fn no_device_is_zero(result: Result<i32, cudarc::driver::DriverError>) -> Result<usize, CudaError> {
    match result {
        Ok(count) => Ok(usize::try_from(count).unwrap_or(0)),
        Err(e) if e.0 == CUresult::CUDA_ERROR_NO_DEVICE => Ok(0),
        Err(e) => Err(driver("initialise and count the devices")(e)),
    }
}

impl CudaDevice {
    /// The number of CUDA devices (0 when the driver is present but sees none).
    ///
    /// # Errors
    ///
    /// [`CudaError::Unavailable`] with no driver or cuBLAS; [`CudaError::Driver`] if the
    /// driver fails to initialise for another reason.
    pub fn count() -> Result<usize, CudaError> {
        probe()?;
        no_device_is_zero(CudaContext::device_count())
    }

    /// Opens device `ordinal`: retains its primary context and creates a stream and a cuBLAS
    /// handle on it.
    ///
    /// # Errors
    ///
    /// [`CudaError::Unavailable`] with no driver or cuBLAS (never a panic),
    /// [`CudaError::NoDevice`] for an ordinal at or past the device count, and the driver's or
    /// cuBLAS's error if creating the context, stream or handle fails.
    pub fn open(ordinal: usize) -> Result<Self, CudaError> {
        let count = Self::count()?;
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(driver("retain the device's context"))?;
        let stream = ctx
            .new_stream()
            .map_err(driver("create the device's stream"))?;
        let blas = CudaBlas::new(stream.clone()).map_err(cublas("create a handle"))?;
        let blas_device_results =
            CudaBlas::new(stream.clone()).map_err(cublas("create a second handle"))?;
        blas_device_results
            .set_pointer_mode(blas_sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE)
            .map_err(cublas("set a handle's pointer mode to device"))?;
        ctx.check_err()
            .map_err(driver("bind the context to this thread"))?;
        keep_freed_memory(&ctx)?;
        Ok(Self {
            permute_kernels: OnceLock::new(),
            skinny_kernels: OnceLock::new(),
            lanes: Default::default(),
            solver: OnceLock::new(),
            blas,
            blas_device_results,
            stream,
            ctx,
        })
    }

    /// This device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// The device's name, as the driver reports it.
    ///
    /// # Errors
    ///
    /// The driver's error.
    pub fn name(&self) -> Result<String, CudaError> {
        self.ctx.name().map_err(driver("report the device's name"))
    }

    /// The context (for work this module does not wrap yet).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream all of this handle's work is ordered on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Waits until all work enqueued on this device's stream is done.
    ///
    /// # Errors
    ///
    /// The driver's error (including one from earlier asynchronous work).
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.stream
            .synchronize()
            .map_err(driver("finish the stream's work"))
    }

    pub(super) fn bind(&self) -> Result<(), CudaError> {
        self.ctx
            .bind_to_thread()
            .map_err(driver("make the device's context current"))
    }

    pub(super) fn check_device<T>(
        &self,
        operand: &'static str,
        buf: &DeviceBuffer<T>,
    ) -> Result<(), CudaError> {
        if buf.ordinal() == self.ordinal() {
            Ok(())
        } else {
            Err(CudaError::WrongDevice {
                operand,
                expected: self.ordinal(),
                given: buf.ordinal(),
            })
        }
    }

    /// A buffer of `len` zeros on this device (stream-ordered: it returns once enqueued).
    ///
    /// # Errors
    ///
    /// The driver's error (out of device memory, say).
    pub fn alloc_zeros<T: CudaScalar>(&self, len: usize) -> Result<DeviceBuffer<T>, CudaError> {
        // cudarc multiplies without a check: a wrapped byte count would give a buffer far
        // smaller than the length every bounds check here trusts.
        check_alloc_bytes::<T>(len)?;
        self.bind()?;
        let slice = if len == 0 {
            self.stream.null()
        } else {
            self.stream.alloc_zeros(len)
        }
        .map_err(driver("allocate device memory"))?;
        Ok(DeviceBuffer { slice })
    }

    /// A new device buffer holding a copy of `host`. The host slice may be reused once this
    /// returns (the copy is staged).
    ///
    /// # Errors
    ///
    /// The driver's error.
    pub fn upload<T: CudaScalar>(&self, host: &[T]) -> Result<DeviceBuffer<T>, CudaError> {
        if host.is_empty() {
            return self.alloc_zeros(0);
        }
        self.bind()?;
        let slice = self
            .stream
            .clone_htod(host)
            .map_err(driver("copy host memory to the device"))?;
        Ok(DeviceBuffer { slice })
    }

    /// Copies `host` into `dst`, of the same length.
    ///
    /// # Errors
    ///
    /// [`CudaError::LengthMismatch`] (nothing copied) when the lengths differ,
    /// [`CudaError::WrongDevice`] for a buffer of another device, or the driver's error.
    pub fn copy_to_device<T: CudaScalar>(
        &self,
        host: &[T],
        dst: &mut DeviceBuffer<T>,
    ) -> Result<(), CudaError> {
        self.check_device("the destination", dst)?;
        if host.len() != dst.len() {
            return Err(CudaError::LengthMismatch {
                what: "host to device",
                expected: dst.len(),
                given: host.len(),
            });
        }
        if host.is_empty() {
            return Ok(());
        }
        self.bind()?;
        self.stream
            .memcpy_htod(host, &mut dst.slice)
            .map_err(driver("copy host memory to the device"))
    }

    /// Copies `src` into `dst`, of the same length, and waits for the stream (so every earlier
    /// write to `src` on it is in `dst` on return).
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::copy_to_device`].
    pub fn copy_to_host<T: CudaScalar>(
        &self,
        src: &DeviceBuffer<T>,
        dst: &mut [T],
    ) -> Result<(), CudaError> {
        self.check_device("the source", src)?;
        if src.len() != dst.len() {
            return Err(CudaError::LengthMismatch {
                what: "device to host",
                expected: dst.len(),
                given: src.len(),
            });
        }
        if dst.is_empty() {
            return Ok(());
        }
        self.bind()?;
        self.stream
            .memcpy_dtoh(&src.slice, dst)
            .map_err(driver("copy device memory to the host"))?;
        self.synchronize()
    }

    /// Copies `host` into `dst[offset..offset + host.len()]`; the host slice may be reused
    /// once this returns (the copy is staged).
    ///
    /// # Errors
    ///
    /// [`CudaError::OutOfBounds`] (nothing copied) when the range passes the buffer's end,
    /// [`CudaError::WrongDevice`] for a buffer of another device, or the driver's error.
    pub fn copy_to_device_at<T: CudaScalar>(
        &self,
        host: &[T],
        dst: &mut DeviceBuffer<T>,
        offset: usize,
    ) -> Result<(), CudaError> {
        self.check_device("the destination", dst)?;
        let range = check_range("the destination", offset, host.len(), dst.len())?;
        if range.is_empty() {
            return Ok(());
        }
        self.bind()?;
        self.stream
            .memcpy_htod(host, &mut dst.slice.slice_mut(range))
            .map_err(driver("copy host memory to the device"))
    }

    /// Copies `src[offset..offset + dst.len()]` into `dst` and waits for the stream, like
    /// [`CudaDevice::copy_to_host`].
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::copy_to_device_at`].
    pub fn copy_to_host_at<T: CudaScalar>(
        &self,
        src: &DeviceBuffer<T>,
        offset: usize,
        dst: &mut [T],
    ) -> Result<(), CudaError> {
        self.check_device("the source", src)?;
        let range = check_range("the source", offset, dst.len(), src.len())?;
        if range.is_empty() {
            return Ok(());
        }
        self.bind()?;
        self.stream
            .memcpy_dtoh(&src.slice.slice(range), dst)
            .map_err(driver("copy device memory to the host"))?;
        self.synchronize()
    }

    /// Copies `src` (a buffer of this device or another) into `dst` on this device, of the
    /// same length, stream-ordered on both sides with no host wait: this stream waits for the
    /// work enqueued so far on the stream `src` belongs to (so the copy reads what it wrote),
    /// and that stream waits for the copy (so later writes of `src` there do not race it).
    ///
    /// # Errors
    ///
    /// [`CudaError::LengthMismatch`], [`CudaError::WrongDevice`] (`dst` not on this device):
    /// nothing is enqueued; or the driver's error.
    pub fn copy_from_device<T: CudaScalar>(
        &self,
        src: &DeviceBuffer<T>,
        dst: &mut DeviceBuffer<T>,
    ) -> Result<(), CudaError> {
        self.check_device("the destination", dst)?;
        if src.len() != dst.len() {
            return Err(CudaError::LengthMismatch {
                what: "device to device",
                expected: dst.len(),
                given: src.len(),
            });
        }
        if src.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // The stream the source's buffer is ordered on (its device's, whichever handle).
        let source = src.slice.stream();
        let other = !Arc::ptr_eq(source, &self.stream);
        if other {
            let ready = source
                .record_event(None)
                .map_err(driver("record the source stream's work"))?;
            self.stream
                .wait(&ready)
                .map_err(driver("wait for the source stream"))?;
        }
        // Same context: an ordinary copy on this stream; another: a peer copy.
        self.stream
            .memcpy_dtod(&src.slice, &mut dst.slice)
            .map_err(driver("copy device memory between devices"))?;
        if other {
            let done = self
                .stream
                .record_event(None)
                .map_err(driver("record the copy"))?;
            source
                .wait(&done)
                .map_err(driver("make the source stream wait for the copy"))?;
        }
        Ok(())
    }

    /// Sets the matrix at `layout` in `dst` to zero, stream-ordered: one memset when its
    /// columns are contiguous, else one per column.
    ///
    /// # Errors
    ///
    /// [`CudaError::LeadingDim`], [`CudaError::OutOfBounds`], [`CudaError::WrongDevice`]:
    /// nothing is enqueued; or the driver's error.
    pub fn zero<T: CudaScalar>(
        &self,
        dst: &mut DeviceBuffer<T>,
        layout: super::MatLayout,
    ) -> Result<(), CudaError> {
        self.check_device("the destination", dst)?;
        layout.check("the destination", 1, 0, dst.len())?;
        if layout.rows == 0 || layout.cols == 0 {
            return Ok(());
        }
        self.bind()?;
        for run in layout.runs() {
            self.stream
                .memset_zeros(&mut dst.slice.slice_mut(run))
                .map_err(driver("set device memory to zero"))?;
        }
        Ok(())
    }

    /// A host copy of `src`, once the stream's earlier work on it is done.
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::copy_to_host`].
    pub fn download<T: CudaScalar>(&self, src: &DeviceBuffer<T>) -> Result<Vec<T>, CudaError> {
        let mut host = vec![T::ZERO; src.len()];
        self.copy_to_host(src, &mut host)?;
        Ok(host)
    }
}
