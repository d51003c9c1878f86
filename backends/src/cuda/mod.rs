//! The CUDA backend: cuBLAS through cudarc, loaded at run time.
//!
//! Owns: the probe of the CUDA driver and cuBLAS libraries ([`probe`]), the typed
//! [`CudaError`], the per-device handle [`CudaDevice`] (context, one stream, two cuBLAS handles
//! on it: one in host pointer mode, one in device pointer mode for results left on the
//! device; and side streams that one call forks from the stream and joins back into it), device buffers ([`DeviceBuffer`]) with host/device copies (whole buffers or
//! ranges), stream-ordered copies between devices ([`CudaDevice::copy_from_device`], event
//! waits both ways, no host wait) and zeroing of matrices ([`CudaDevice::zero`]), and for
//! `f32` and `f64`:
//! column-major GEMM and strided-batched GEMM ([`CudaDevice::gemm`],
//! [`CudaDevice::gemm_strided_batched`]), and many of them side by side on side streams
//! forked from the device's and joined back ([`CudaDevice::gemm_independent`]); level-1 cuBLAS on strided vectors
//! ([`CudaDevice::axpy`], [`CudaDevice::scal`], [`CudaDevice::nrm2`], [`CudaDevice::dot`], and
//! [`CudaDevice::nrm2_into`] / [`CudaDevice::dot_into`] that leave the result on the device);
//! pointer-array GEMM over products at arbitrary offsets in three buffers, of one shape
//! ([`CudaDevice::gemm_batched`], `cublas?gemmBatched`) or of groups of shapes
//! ([`CudaDevice::gemm_grouped`], `cublas?gemmGroupedBatched`, cuBLAS 12.5+, probed apart by
//! [`probe_grouped`]); and permuting copies of strided N-d views (up to 8 axes) into
//! column-major destination matrices (a contiguous run, or a block of a larger matrix) with an
//! optional sign flip ([`CudaDevice::permute_copy`]), a kernel
//! compiled at run time with NVRTC (probed apart by [`probe_nvrtc`]: without libnvrtc only the
//! permutes fail, with a typed [`CudaError::Unavailable`]); and skinny products (two dims of
//! a few, the third long: [`skinny_shape`]), which [`CudaDevice::gemm_independent`] runs
//! through NVRTC kernels of their own where NVRTC loads, else through cuBLAS.
//!
//! Invariant: no cudarc call is made before [`probe`] has seen both shared libraries load and
//! export every symbol this module reaches (cudarc panics on a missing library or symbol, so
//! a machine with no driver gets [`CudaError::Unavailable`], never a panic), no grouped GEMM
//! before [`probe_grouped`] and no NVRTC call before [`probe_nvrtc`] passed; and every device
//! pointer handed to cuBLAS or a kernel lies inside the buffer it came from, with its extent,
//! leading dims or strides and device checked first by a pure function (tested without a
//! GPU), so a bad layout is a [`CudaError`] and nothing is written.
//!
//! The crate is built with cudarc's `driver`, `cublas`, `nvrtc`, `dynamic-loading` and
//! `cuda-13000` features: it builds and links with no CUDA installed, and at run time looks for
//! `libcuda.so`/`libcuda.so.1`, `libcublas.so`/`libcublas.so.13` and
//! `libnvrtc.so`/`libnvrtc.so.13` (CUDA 13's sonames; `.12` is also among the names tried).
//!
//! Work is stream-ordered: every call enqueues on the device's one stream and returns; the host
//! copies that read device data ([`CudaDevice::copy_to_host`], [`CudaDevice::download`]) wait
//! for the stream.
//!
//! ```
//! use tessera_backends::cuda::{CudaDevice, CudaError, MatLayout, Op};
//! # fn main() -> Result<(), CudaError> {
//! let dev = match CudaDevice::open(0) {
//!     Ok(dev) => dev,
//!     // No driver, an old one, or no device: nothing to run here (and no panic).
//!     Err(CudaError::Unavailable { .. } | CudaError::MissingSymbol { .. }) => return Ok(()),
//!     Err(CudaError::NoDevice { .. }) => return Ok(()),
//!     Err(e) => return Err(e),
//! };
//! // C (2 x 2) = A (2 x 3) B (3 x 2), all column-major.
//! let a = dev.upload(&[1.0_f64, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! let b = dev.upload(&[1.0_f64; 6])?;
//! let mut c = dev.alloc_zeros::<f64>(4)?;
//! dev.gemm(
//!     c.mat_mut(MatLayout::contiguous(2, 2)),
//!     0.0,
//!     a.mat(MatLayout::contiguous(2, 3)),
//!     Op::Identity,
//!     b.mat(MatLayout::contiguous(3, 2)),
//!     Op::Identity,
//!     1.0,
//! )?;
//! assert_eq!(dev.download(&c)?, vec![9.0, 12.0, 9.0, 12.0]);
//! # Ok(())
//! # }
//! ```

mod batched;
mod blas1;
mod device;
mod gemm;
mod lanes;
mod permute;
mod placement;
mod skinny;
mod solver;
mod storage;

pub use batched::{BatchBuffers, GemmEntry, GemmGroup, may_overlap};
pub use blas1::{DeviceVec, DeviceVecMut, VecLayout};
pub use device::{CudaDevice, CudaScalar, DeviceBuffer};
pub use gemm::{DeviceMat, DeviceMatMut, MatLayout, Op, StridedBatch};
pub use lanes::{IndependentGemm, LANES};
pub use permute::{MAX_AXES, PERMUTE_SOURCE, PermuteMove, StridedView};
pub use placement::Cuda;
pub use skinny::{SKINNY_MAX, SKINNY_SOURCE, skinny_shape};
pub use solver::{DenseFactors, Lapack, probe_cusolver};
pub use storage::{CudaStorage, with_buffers};

use crate::cpu::GemmShapeMismatch;
use cudarc::cublas::result::CublasError;
use cudarc::driver::DriverError;
use std::sync::{Arc, OnceLock};

/// The CUDA version cudarc's bindings were generated for (its `cuda-13000` feature).
pub const BINDINGS_CUDA_VERSION: &str = "13.0";

/// What went wrong in the CUDA backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// A shared library could not be loaded under any of the names cudarc tries.
    #[error(
        "expected the {library} shared library to load, but none of the {n} names tried \
         ({names}) could be loaded (no NVIDIA driver or CUDA toolkit on the library path)",
        n = .searched.len(), names = short_list(.searched)
    )]
    Unavailable {
        /// The library's base name (`cuda` for the driver, `cublas`, `nvrtc`).
        library: &'static str,
        /// The file names tried, in order, without repeats.
        searched: Vec<String>,
    },
    /// A loaded library lacks a symbol this backend calls (it is older than the bindings).
    #[error(
        "expected the {library} library to export `{symbol}` (bindings for CUDA 13.0), \
         but the loaded library does not"
    )]
    MissingSymbol {
        /// The library's base name.
        library: &'static str,
        /// The missing symbol.
        symbol: &'static str,
    },
    /// No device with the ordinal asked for.
    #[error("expected a device ordinal below the device count {count}, but was given {ordinal}")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// The number of devices the driver reports.
        count: usize,
    },
    /// A CUDA driver call failed.
    #[error("expected the CUDA driver to {during}, but it failed: {source}")]
    Driver {
        /// What was being done.
        during: &'static str,
        /// The driver's error.
        source: DriverError,
    },
    /// A cuBLAS call failed.
    #[error("expected cuBLAS to {during}, but it failed: {source}")]
    Cublas {
        /// What was being done.
        during: &'static str,
        /// cuBLAS's status.
        source: CublasError,
    },
    /// A cuSOLVER call failed (or refused an argument).
    #[error("expected cuSOLVER to {during}, but it failed: {status}")]
    Cusolver {
        /// What was being done.
        during: &'static str,
        /// cuSOLVER's status, or which argument it refused.
        status: String,
    },
    /// An iterative factorization did not converge (cuSOLVER's positive `info`).
    #[error("expected the device's {what} to converge, but cuSOLVER reported info = {info}")]
    NoConvergence {
        /// Which factorization.
        what: &'static str,
        /// cuSOLVER's `info`.
        info: i32,
    },
    /// A host and a device buffer of one copy have different lengths.
    #[error(
        "expected a {what} copy between buffers of equal length, but the destination has \
         {expected} elements and the source {given}"
    )]
    LengthMismatch {
        /// `host to device` or `device to host`.
        what: &'static str,
        /// The destination's length.
        expected: usize,
        /// The source's length.
        given: usize,
    },
    /// One call was handed a storage both to read and to write, or no storage at all.
    #[error("expected distinct storages to read and to write, but {what}")]
    Aliased {
        /// What was handed over.
        what: &'static str,
    },
    /// A buffer lives on another device than the one asked to use it.
    #[error("expected {operand} on device {expected}, but it lives on device {given}")]
    WrongDevice {
        /// Which operand.
        operand: &'static str,
        /// The ordinal of the device running the call.
        expected: usize,
        /// The ordinal of the buffer's device.
        given: usize,
    },
    /// A matrix's leading dimension is smaller than its row count (or zero).
    #[error("expected a leading dim of at least max(1, {rows}) for {operand}, but was given {ld}")]
    LeadingDim {
        /// Which operand.
        operand: &'static str,
        /// The rows of the stored matrix.
        rows: usize,
        /// The leading dim given.
        ld: usize,
    },
    /// A matrix (or batch of matrices) reaches past the end of its buffer.
    #[error(
        "expected {operand} to lie within its buffer of {len} elements, but it reaches element \
         {needed}"
    )]
    OutOfBounds {
        /// Which operand.
        operand: &'static str,
        /// One past the last element the layout reaches (`usize::MAX` on overflow).
        needed: usize,
        /// The buffer's length.
        len: usize,
    },
    /// The output matrices of one batched call would overlap.
    #[error(
        "expected a stride between the batch's C matrices of at least their extent {extent}, \
         but was given {stride}"
    )]
    OverlappingBatch {
        /// The stride between consecutive C matrices.
        stride: usize,
        /// The elements one C matrix spans.
        extent: usize,
    },
    /// An entry of a pointer-array batch group has other dims than the group's first.
    #[error(
        "expected every {operand} of group {group} to be {} x {} with leading dim {}, like its \
         first, but entry {entry} is {} x {} with leading dim {}",
        .expected[0], .expected[1], .expected[2], .given[0], .given[1], .given[2]
    )]
    UnequalBatch {
        /// The group's index (0 for [`CudaDevice::gemm_batched`]).
        group: usize,
        /// The entry's index in its group.
        entry: usize,
        /// Which operand.
        operand: &'static str,
        /// The first entry's rows, columns and leading dim for that operand.
        expected: [usize; 3],
        /// This entry's.
        given: [usize; 3],
    },
    /// Two C matrices of one batched call may share an element.
    #[error(
        "expected the C matrices of one batched call to share no element, but entry {} of \
         group {} and entry {} of group {} may",
        .first.1, .first.0, .second.1, .second.0
    )]
    OverlappingOutputs {
        /// `(group, entry)` of one.
        first: (usize, usize),
        /// `(group, entry)` of the other.
        second: (usize, usize),
    },
    /// Two destinations of one batch of permuting copies may share an element.
    #[error(
        "expected the destinations of one batch of permuting copies to share no element, but \
         copies {first} and {second} may"
    )]
    OverlappingCopies {
        /// One copy's index in the batch.
        first: usize,
        /// The other's.
        second: usize,
    },
    /// A permuting copy with more axes than its kernel takes.
    #[error("expected at most {max} axes for a permuting copy, but was given {given}")]
    TooManyAxes {
        /// The axes given.
        given: usize,
        /// The most the kernel takes.
        max: usize,
    },
    /// A strided view with another number of strides than axes.
    #[error("expected one stride per axis ({axes} axes), but was given {strides} strides")]
    StrideCount {
        /// The axes (dims) given.
        axes: usize,
        /// The strides given.
        strides: usize,
    },
    /// A strided view whose negative strides reach before its buffer's first element.
    #[error(
        "expected {operand} to reach no element before the start of its buffer, but it \
         reaches {below} before it"
    )]
    NegativeReach {
        /// Which operand.
        operand: &'static str,
        /// How many elements before element 0 the lowest one reached lies.
        below: usize,
    },
    /// NVRTC failed to compile a kernel of this backend.
    #[error("expected NVRTC to compile the backend's kernels, but it failed: {message}")]
    Nvrtc {
        /// NVRTC's status and log.
        message: String,
    },
    /// A vector's increment is zero (cuBLAS's level-1 calls here take positive ones).
    #[error("expected a positive increment for {operand}, but was given 0")]
    ZeroIncrement {
        /// Which operand.
        operand: &'static str,
    },
    /// A vector of a level-1 call has another length than the call needs.
    #[error("expected {operand} of {operation} to hold {expected} elements, but it holds {given}")]
    VectorLengths {
        /// `axpy`, `dot`, ...
        operation: &'static str,
        /// Which operand.
        operand: &'static str,
        /// The length needed (x's, or 1 for a result slot).
        expected: usize,
        /// The length given.
        given: usize,
    },
    /// A size does not fit the integers CUDA takes: cuBLAS's 32-bit sizes (64-bit batch
    /// strides), a kernel's 64-bit ones, or an allocation's byte count (63 bits).
    #[error("expected {what} to fit CUDA's {bits}-bit integers, but was given {value}")]
    TooLarge {
        /// Which size.
        what: &'static str,
        /// The size.
        value: usize,
        /// The integer width (in bits) it must fit.
        bits: u32,
    },
    /// The dims of a GEMM's operands do not fit together.
    #[error(transparent)]
    Shape(#[from] GemmShapeMismatch),
}

/// The driver symbols this module (through cudarc) reaches: device and primary-context
/// management, one stream, events, stream-ordered and plain allocation, copies and memset.
const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuGetErrorString",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuDeviceGetDefaultMemPool",
    "cuMemPoolSetAttribute",
    "cuMemAllocAsync",
    "cuMemAlloc_v2",
    "cuMemFreeAsync",
    "cuMemFree_v2",
    "cuMemsetD8Async",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyPeerAsync",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
];

/// The cuBLAS symbols this module reaches.
const CUBLAS_SYMBOLS: &[&str] = &[
    "cublasCreate_v2",
    "cublasDestroy_v2",
    "cublasSetStream_v2",
    "cublasSgemm_v2",
    "cublasDgemm_v2",
    "cublasSgemmStridedBatched",
    "cublasDgemmStridedBatched",
    "cublasSetPointerMode_v2",
    "cublasSaxpy_v2",
    "cublasDaxpy_v2",
    "cublasSscal_v2",
    "cublasDscal_v2",
    "cublasSnrm2_v2",
    "cublasDnrm2_v2",
    "cublasSdot_v2",
    "cublasDdot_v2",
    "cublasSgemmBatched",
    "cublasDgemmBatched",
];

/// The cuBLAS symbols of grouped GEMM, new in cuBLAS 12.5: probed apart ([`probe_grouped`]) so
/// that an older cuBLAS still runs everything else.
const GROUPED_SYMBOLS: &[&str] = &["cublasSgemmGroupedBatched", "cublasDgemmGroupedBatched"];

/// The NVRTC symbols cudarc calls to compile a kernel to PTX (and read its log on failure).
const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcDestroyProgram",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
];

fn unavailable(library: &'static str, names: &[&str]) -> CudaError {
    let mut searched: Vec<String> = Vec::new();
    for candidate in names
        .iter()
        .flat_map(|name| cudarc::get_lib_name_candidates(name))
    {
        if !searched.contains(&candidate) {
            searched.push(candidate);
        }
    }
    CudaError::Unavailable { library, searched }
}

/// The first three names and the last, for a message (the error holds them all).
fn short_list(names: &[String]) -> String {
    if names.len() <= 4 {
        return names.join(", ");
    }
    format!("{}, ..., {}", names[..3].join(", "), names[names.len() - 1])
}

fn probe_driver_uncached() -> Result<(), CudaError> {
    use cudarc::driver::sys;
    // SAFETY: loading a shared library runs its initialisers (why libloading's `Library::new`
    // is unsafe); libcuda's need nothing from the caller, and the library is only opened here.
    if !unsafe { sys::is_culib_present() } {
        return Err(unavailable("cuda", &["cuda", "nvcuda"]));
    }
    // SAFETY: `is_culib_present` just loaded one of the names `culib` tries, in the same
    // order, so `culib` finds a library and does not panic.
    let lib = unsafe { sys::culib() };
    for &symbol in DRIVER_SYMBOLS {
        // SAFETY: the lookup reads the library's symbol table only; the symbol is typed as a
        // bare function pointer and dropped without being called.
        if unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.is_err() {
            return Err(CudaError::MissingSymbol {
                library: "cuda",
                symbol,
            });
        }
    }
    Ok(())
}

fn probe_cublas_uncached() -> Result<(), CudaError> {
    probe_cublas_symbols(CUBLAS_SYMBOLS)
}

fn probe_cublas_symbols(symbols: &[&'static str]) -> Result<(), CudaError> {
    use cudarc::cublas::sys;
    // SAFETY: as for the driver: cuBLAS's initialisers need nothing from the caller.
    if !unsafe { sys::is_culib_present() } {
        return Err(unavailable("cublas", &["cublas"]));
    }
    // SAFETY: `is_culib_present` just loaded one of the names `culib` tries, so it finds one.
    let lib = unsafe { sys::culib() };
    for &symbol in symbols {
        // SAFETY: a symbol-table lookup; the symbol is never called.
        if unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.is_err() {
            return Err(CudaError::MissingSymbol {
                library: "cublas",
                symbol,
            });
        }
    }
    Ok(())
}

/// Whether the CUDA driver library loads and exports every symbol this backend calls (checked
/// once per process).
///
/// # Errors
///
/// [`CudaError::Unavailable`] with no driver, [`CudaError::MissingSymbol`] for an old one.
pub fn probe_driver() -> Result<(), CudaError> {
    static DRIVER: OnceLock<Result<(), CudaError>> = OnceLock::new();
    DRIVER.get_or_init(probe_driver_uncached).clone()
}

/// Whether cuBLAS loads and exports every symbol this backend calls (checked once per
/// process).
///
/// # Errors
///
/// As [`probe_driver`], for `cublas`.
pub fn probe_cublas() -> Result<(), CudaError> {
    static CUBLAS: OnceLock<Result<(), CudaError>> = OnceLock::new();
    CUBLAS.get_or_init(probe_cublas_uncached).clone()
}

/// Whether cuBLAS exports grouped GEMM (`cublas?gemmGroupedBatched`, cuBLAS 12.5 and later),
/// after [`probe`] (checked once per process).
///
/// # Errors
///
/// As [`probe`]; [`CudaError::MissingSymbol`] for a cuBLAS older than 12.5.
pub fn probe_grouped() -> Result<(), CudaError> {
    static GROUPED: OnceLock<Result<(), CudaError>> = OnceLock::new();
    probe()?;
    GROUPED
        .get_or_init(|| probe_cublas_symbols(GROUPED_SYMBOLS))
        .clone()
}

fn probe_nvrtc_uncached() -> Result<(), CudaError> {
    use cudarc::nvrtc::sys;
    // SAFETY: as for the driver: NVRTC's initialisers need nothing from the caller.
    if !unsafe { sys::is_culib_present() } {
        return Err(unavailable("nvrtc", &["nvrtc"]));
    }
    // SAFETY: `is_culib_present` just loaded one of the names `culib` tries, so it finds one.
    let lib = unsafe { sys::culib() };
    for &symbol in NVRTC_SYMBOLS {
        // SAFETY: a symbol-table lookup; the symbol is never called.
        if unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.is_err() {
            return Err(CudaError::MissingSymbol {
                library: "nvrtc",
                symbol,
            });
        }
    }
    Ok(())
}

/// Whether NVRTC (the runtime compiler, needed only for the permute kernels) loads and exports
/// every symbol this backend calls (checked once per process). It is probed apart from
/// [`probe`]: the cuBLAS calls run without it.
///
/// # Errors
///
/// [`CudaError::Unavailable`] for `nvrtc` when no libnvrtc loads, [`CudaError::MissingSymbol`]
/// for an old one.
pub fn probe_nvrtc() -> Result<(), CudaError> {
    static NVRTC: OnceLock<Result<(), CudaError>> = OnceLock::new();
    NVRTC.get_or_init(probe_nvrtc_uncached).clone()
}

/// `source` compiled to PTX by NVRTC (after [`probe_nvrtc`]), its log in the error when it
/// does not compile.
pub(crate) fn compile_ptx(name: &str, source: &str) -> Result<cudarc::nvrtc::Ptx, CudaError> {
    probe_nvrtc()?;
    let opts = cudarc::nvrtc::CompileOptions {
        name: Some(name.into()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(source, opts).map_err(|e| CudaError::Nvrtc {
        message: match e {
            cudarc::nvrtc::CompileError::CompileError { nvrtc, log, .. } => {
                format!("{nvrtc}: {}", log.to_string_lossy())
            }
            other => other.to_string(),
        },
    })
}

/// The functions `names` of `ptx`, loaded as a module into `ctx` (a kernel module of this
/// backend: it lives as long as the functions).
pub(crate) fn load_kernels<const N: usize>(
    ctx: &Arc<cudarc::driver::CudaContext>,
    ptx: cudarc::nvrtc::Ptx,
    names: [&str; N],
) -> Result<[cudarc::driver::CudaFunction; N], CudaError> {
    let module = ctx
        .load_module(ptx)
        .map_err(driver("load a kernel module"))?;
    let mut functions = Vec::with_capacity(N);
    for name in names {
        functions.push(
            module
                .load_function(name)
                .map_err(driver("find a kernel in its module"))?,
        );
    }
    Ok(functions
        .try_into()
        .unwrap_or_else(|_| unreachable!("{N} names, {N} functions")))
}

/// [`probe_driver`], then [`probe_cublas`]: whether this backend can make any call at all.
/// It does not initialise the driver or look for devices ([`CudaDevice::count`] does).
///
/// # Errors
///
/// The first library that is missing or too old.
pub fn probe() -> Result<(), CudaError> {
    probe_driver()?;
    probe_cublas()
}

/// Wraps a driver error with what was being done.
fn driver(during: &'static str) -> impl FnOnce(DriverError) -> CudaError {
    move |source| CudaError::Driver { during, source }
}

/// Wraps a cuBLAS error with what was being done.
fn cublas(during: &'static str) -> impl FnOnce(CublasError) -> CudaError {
    move |source| CudaError::Cublas { during, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs everywhere: a range copy's range must lie inside its buffer, with no wrap.
    #[test]
    fn range_copies_are_checked_before_any_call() {
        assert_eq!(device::check_range("the source", 2, 3, 5), Ok(2..5));
        assert_eq!(device::check_range("the source", 5, 0, 5), Ok(5..5));
        assert_eq!(
            device::check_range("the destination", 3, 3, 5),
            Err(CudaError::OutOfBounds {
                operand: "the destination",
                needed: 6,
                len: 5
            })
        );
        assert!(matches!(
            device::check_range("the source", usize::MAX, 2, 5),
            Err(CudaError::OutOfBounds {
                needed: usize::MAX,
                ..
            })
        ));
    }

    /// Runs everywhere: an allocation whose byte count would wrap (cudarc does not check) is
    /// refused before any call; the largest that fits is let through to the driver.
    #[test]
    fn allocations_whose_bytes_wrap_are_refused() {
        let wraps = (1_usize << 61) + 1;
        assert_eq!(
            device::check_alloc_bytes::<f64>(wraps),
            Err(CudaError::TooLarge {
                what: "the allocation's size in elements (times the element size, in bytes)",
                value: wraps,
                bits: 63
            })
        );
        assert!(device::check_alloc_bytes::<f64>(1 << 60).is_err());
        assert!(device::check_alloc_bytes::<f64>((1 << 60) - 1).is_ok());
        assert!(device::check_alloc_bytes::<f32>((1 << 61) - 1).is_ok());
        assert!(device::check_alloc_bytes::<f32>(1 << 61).is_err());
    }

    /// The handles can be shared with and moved to the runtime's workers.
    #[test]
    fn handles_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<CudaDevice>();
        send_sync::<DeviceBuffer<f32>>();
        send_sync::<DeviceBuffer<f64>>();
        send_sync::<CudaError>();
    }

    /// Runs everywhere: with no driver the probe is a typed error naming the names searched.
    #[test]
    fn probing_never_panics_and_names_what_it_searched() {
        match probe() {
            Ok(()) => println!("CUDA driver and cuBLAS present"),
            Err(CudaError::Unavailable { library, searched }) => {
                assert!(library == "cuda" || library == "cublas");
                assert!(searched.iter().any(|name| name.contains(library)));
                let message = probe().unwrap_err().to_string();
                assert!(message.contains("expected the"), "{message}");
            }
            Err(e @ CudaError::MissingSymbol { .. }) => println!("old CUDA libraries: {e}"),
            Err(e) => panic!("the probe gave an error it never makes: {e}"),
        }
        // NVRTC is probed on its own: present, old, or a typed Unavailable naming its sonames.
        match probe_nvrtc() {
            Ok(()) => println!("NVRTC present"),
            Err(CudaError::Unavailable { library, searched }) => {
                assert_eq!(library, "nvrtc");
                assert!(
                    searched.iter().any(|name| name.contains("nvrtc")),
                    "{searched:?}"
                );
            }
            Err(e @ CudaError::MissingSymbol { .. }) => println!("old NVRTC: {e}"),
            Err(e) => panic!("the NVRTC probe gave an error it never makes: {e}"),
        }
        // The grouped-GEMM probe fails whenever the main one does, with its error.
        match (probe(), probe_grouped()) {
            (Err(main), grouped) => assert_eq!(grouped, Err(main)),
            (Ok(()), Ok(())) => println!("cuBLAS has grouped GEMM"),
            (Ok(()), Err(e)) => {
                assert!(
                    matches!(
                        e,
                        CudaError::MissingSymbol {
                            library: "cublas",
                            ..
                        }
                    ),
                    "{e}"
                )
            }
        }
    }
}
