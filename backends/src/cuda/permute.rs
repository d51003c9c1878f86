//! Permuting copies on the device: a strided N-d source (up to [`MAX_AXES`] axes, any signed
//! strides, typically an axis permutation of a dense block) into a destination laid out as a
//! column-major matrix (a contiguous run, or a block of a larger matrix: columns `ld` apart),
//! element order column-major over the source's dims (first axis fastest, as core's strided
//! views), with an optional sign flip.
//!
//! Owns: [`StridedView`], [`CudaDevice::permute_copy`], the batched
//! [`CudaDevice::permute_copies`] (many copies in one launch, a chunk of one copy per thread
//! block), the kernel source [`PERMUTE_SOURCE`] and its compilation with NVRTC. The source is compiled once per process to PTX (NVRTC's default
//! virtual architecture, so the driver JIT-compiles it for whatever device loads it) and loaded
//! once per [`CudaDevice`] on first use.
//!
//! Invariant: the kernel is launched only after [`check`] (a pure function) saw both buffers on
//! the calling device, at most [`MAX_AXES`] axes with one stride each, every element the source
//! reaches inside its buffer (its lowest and highest reach, whatever the strides' signs), the
//! destination matrix holding exactly `n = prod(dims)` elements inside its buffer (leading dim
//! at least its rows, so no two elements share a place), and every offset within the
//! kernel's 64-bit integers (for a batch: every copy so, and no two destinations sharing an
//! element, [`check_copies`]); otherwise the call returns a [`CudaError`] and nothing is
//! enqueued or written. NVRTC is loaded only after [`super::probe_nvrtc`] saw it export every
//! symbol cudarc calls, so a machine without libnvrtc gets [`CudaError::Unavailable`].
//!
//! The kernel is correctness-first: one thread per destination element (grid-stride), writes
//! coalesced, reads gathered, one division per axis; tiled transposes are left for later.

use super::batched::check_disjoint;
use super::device::{CudaDevice, CudaScalar, DeviceBuffer};
use super::gemm::MatLayout;
use super::{CudaError, driver};
use cudarc::driver::{
    CudaFunction, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use std::sync::{Arc, OnceLock};

/// The most axes a permuting copy takes.
pub const MAX_AXES: usize = 8;

/// The CUDA C++ source of the permuting copies, one `extern "C"` kernel per element type
/// (`tessera_permute_f32`, `tessera_permute_f64`). Its parameter struct `TesseraPermute` is
/// mirrored field for field by a `repr(C)` struct on the Rust side.
pub const PERMUTE_SOURCE: &str = r#"
struct TesseraPermute {
    long long dims[8];
    long long strides[8];
    long long offset;
    long long dst_offset;
    long long dst_rows;
    long long dst_ld;
    int rank;
    int narrow;  // 1: every index of the copy fits 32 bits (cheaper division)
};
static_assert(sizeof(TesseraPermute) == 168, "the host's PermuteParams is 168 bytes");

// Index arithmetic in I: unsigned 32-bit when the copy's indices fit (its divisions cost a
// fraction of 64-bit ones, which bound the kernel's bandwidth), else 64-bit.
template <typename T, typename I>
__device__ __forceinline__ void tessera_permute_at(const T* __restrict__ src,
                                                   T* __restrict__ dst,
                                                   const TesseraPermute& p,
                                                   const I i, const int negate) {
    I rem = i;
    long long at = p.offset;
    for (int d = 0; d < p.rank; ++d) {
        const I dim = (I)p.dims[d];
        const I q = rem / dim;
        at += (long long)(rem - q * dim) * p.strides[d];
        rem = q;
    }
    const T v = src[at];
    const I rows = (I)p.dst_rows;
    const I col = i / rows;
    dst[p.dst_offset + (long long)(i - col * rows) + (long long)col * p.dst_ld] = negate ? -v : v;
}

template <typename T>
__device__ __forceinline__ void tessera_permute_element(const T* __restrict__ src,
                                                        T* __restrict__ dst,
                                                        const TesseraPermute& p,
                                                        const long long i, const int negate) {
    if (p.narrow) {
        tessera_permute_at<T, unsigned int>(src, dst, p, (unsigned int)i, negate);
    } else {
        tessera_permute_at<T, long long>(src, dst, p, i, negate);
    }
}

template <typename T>
__device__ void tessera_permute(const T* __restrict__ src, T* __restrict__ dst,
                                const TesseraPermute p, const long long n, const int negate) {
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        tessera_permute_element<T>(src, dst, p, i, negate);
    }
}

extern "C" __global__ void tessera_permute_f32(const float* src, float* dst,
                                               const TesseraPermute p, const long long n,
                                               const int negate) {
    tessera_permute<float>(src, dst, p, n, negate);
}

extern "C" __global__ void tessera_permute_f64(const double* src, double* dst,
                                               const TesseraPermute p, const long long n,
                                               const int negate) {
    tessera_permute<double>(src, dst, p, n, negate);
}

// Many copies in one launch: thread block b does elements start..end of copy `copy`.
struct TesseraPermuteChunk {
    long long start;
    long long end;
    int copy;
    int negate;
};
static_assert(sizeof(TesseraPermuteChunk) == 24, "the host's PermuteChunk is 24 bytes");

template <typename T>
__device__ void tessera_permute_chunks(const T* __restrict__ src, T* __restrict__ dst,
                                       const TesseraPermute* __restrict__ params,
                                       const TesseraPermuteChunk* __restrict__ chunks) {
    const TesseraPermuteChunk c = chunks[blockIdx.x];
    const TesseraPermute p = params[c.copy];
    for (long long i = c.start + threadIdx.x; i < c.end; i += blockDim.x) {
        tessera_permute_element<T>(src, dst, p, i, c.negate);
    }
}

extern "C" __global__ void tessera_permute_chunks_f32(const float* src, float* dst,
                                                      const TesseraPermute* params,
                                                      const TesseraPermuteChunk* chunks) {
    tessera_permute_chunks<float>(src, dst, params, chunks);
}

extern "C" __global__ void tessera_permute_chunks_f64(const double* src, double* dst,
                                                      const TesseraPermute* params,
                                                      const TesseraPermuteChunk* chunks) {
    tessera_permute_chunks<double>(src, dst, params, chunks);
}
"#;

/// The kernel's parameter struct (`TesseraPermute` in [`PERMUTE_SOURCE`]): axes past `rank`
/// are unused (dims 1, strides 0); destination element `i` (column-major over `dims`) goes to
/// `dst_offset + i % dst_rows + (i / dst_rows) * dst_ld`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PermuteParams {
    pub(crate) dims: [i64; MAX_AXES],
    pub(crate) strides: [i64; MAX_AXES],
    pub(crate) offset: i64,
    pub(crate) dst_offset: i64,
    pub(crate) dst_rows: i64,
    pub(crate) dst_ld: i64,
    pub(crate) rank: i32,
    /// 1 when every index of the copy (its element count) fits 32 bits.
    pub(crate) narrow: i32,
}

// SAFETY: `PermuteParams` is `repr(C)` of plain integers with no padding (8 + 8 + 4 eight-byte
// fields, then two four-byte ones), laid out exactly as `TesseraPermute` in the kernel source,
// so passing its bytes as the kernel parameter is what the kernel reads.
unsafe impl DeviceRepr for PermuteParams {}

/// One chunk of a batch of permuting copies (`TesseraPermuteChunk` in [`PERMUTE_SOURCE`]):
/// destination elements `start..end` of copy `copy`, negated when `negate` is 1.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PermuteChunk {
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) copy: i32,
    pub(crate) negate: i32,
}

// SAFETY: `repr(C)` of two eight-byte and two four-byte integers, no padding, laid out as
// `TesseraPermuteChunk` in the kernel source (which asserts its 24 bytes).
unsafe impl DeviceRepr for PermuteChunk {}

/// Destination elements one thread block of a batch of copies moves: a copy of `n`
/// elements is `ceil(n / CHUNK)` chunks, so a large copy spreads over the device and a small
/// one costs one block, not a launch.
const CHUNK: usize = 8192;

/// Threads per block of the permute kernels.
const THREADS: u32 = 256;

/// One copy of [`CudaDevice::permute_copies`]: a strided source in the batch's source buffer
/// into a matrix of the batch's destination buffer, as [`CudaDevice::permute_copy`] takes
/// them.
#[derive(Debug, Clone, Copy)]
pub struct PermuteMove<'a> {
    /// Whether the copy flips every sign.
    pub negate: bool,
    /// The source element of index `(0, ..., 0)`.
    pub offset: usize,
    /// The source's extent per axis (at most [`MAX_AXES`]).
    pub dims: &'a [usize],
    /// The source's step per axis, in elements; any sign.
    pub strides: &'a [isize],
    /// The destination matrix, of exactly `prod(dims)` elements.
    pub dst: MatLayout,
}

/// One buffer of a batch as [`check_copies`] sees it: its device ordinal and length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BufferMeta {
    pub(crate) ordinal: usize,
    pub(crate) len: usize,
}

/// Checks a batch of permuting copies run on device `device`: each copy as [`check`], then
/// that no two destinations share an element ([`CudaError::OverlappingCopies`]: one launch
/// runs them in any order). Returns the kernel's parameter table (one entry per non-empty
/// copy) and its chunks, which cover every element of every non-empty copy exactly once.
/// Needs no device.
pub(crate) fn check_copies(
    device: usize,
    src: BufferMeta,
    dst: BufferMeta,
    moves: &[PermuteMove<'_>],
) -> Result<(Vec<PermuteParams>, Vec<PermuteChunk>), CudaError> {
    let mut params = Vec::with_capacity(moves.len());
    let mut chunks = Vec::new();
    let mut destinations = Vec::with_capacity(moves.len());
    for (k, m) in moves.iter().enumerate() {
        let (p, n) = check(
            device,
            PermuteArgs {
                src_ordinal: src.ordinal,
                src_len: src.len,
                src_offset: m.offset,
                dims: m.dims,
                strides: m.strides,
                dst_ordinal: dst.ordinal,
                dst_len: dst.len,
                dst: m.dst,
            },
        )?;
        if n == 0 {
            continue;
        }
        let copy = i32::try_from(params.len()).map_err(|_| CudaError::TooLarge {
            what: "the copies of one batch",
            value: moves.len(),
            bits: 31,
        })?;
        params.push(p);
        destinations.push(((0, k), m.dst));
        chunks.extend((0..n).step_by(CHUNK).map(|start| PermuteChunk {
            start,
            end: (start + CHUNK as i64).min(n),
            copy,
            negate: i32::from(m.negate),
        }));
    }
    check_disjoint(&destinations).map_err(|e| match e {
        CudaError::OverlappingOutputs { first, second } => CudaError::OverlappingCopies {
            first: first.1,
            second: second.1,
        },
        other => other,
    })?;
    Ok((params, chunks))
}

/// A strided N-d source in a device buffer: element `(i_0, ..., i_{r-1})` lies at
/// `offset + sum_d i_d * strides[d]`.
#[derive(Debug, Clone, Copy)]
pub struct StridedView<'a, T> {
    /// The buffer.
    pub buf: &'a DeviceBuffer<T>,
    /// The element of index `(0, ..., 0)`.
    pub offset: usize,
    /// The extent of each axis (at most [`MAX_AXES`]).
    pub dims: &'a [usize],
    /// The step of each axis, in elements; any sign.
    pub strides: &'a [isize],
}

/// A permuting copy as [`check`] sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PermuteArgs<'a> {
    pub(crate) src_ordinal: usize,
    pub(crate) src_len: usize,
    pub(crate) src_offset: usize,
    pub(crate) dims: &'a [usize],
    pub(crate) strides: &'a [isize],
    pub(crate) dst_ordinal: usize,
    pub(crate) dst_len: usize,
    pub(crate) dst: MatLayout,
}

fn long(what: &'static str, value: usize) -> Result<i64, CudaError> {
    i64::try_from(value).map_err(|_| CudaError::TooLarge {
        what,
        value,
        bits: 64,
    })
}

/// Checks a permuting copy run on device `device`, and returns the kernel's parameters and
/// element count (0: nothing to do). Needs no device.
pub(crate) fn check(device: usize, a: PermuteArgs<'_>) -> Result<(PermuteParams, i64), CudaError> {
    for (operand, ordinal) in [
        ("the source", a.src_ordinal),
        ("the destination", a.dst_ordinal),
    ] {
        if ordinal != device {
            return Err(CudaError::WrongDevice {
                operand,
                expected: device,
                given: ordinal,
            });
        }
    }
    if a.dims.len() > MAX_AXES {
        return Err(CudaError::TooManyAxes {
            given: a.dims.len(),
            max: MAX_AXES,
        });
    }
    if a.strides.len() != a.dims.len() {
        return Err(CudaError::StrideCount {
            axes: a.dims.len(),
            strides: a.strides.len(),
        });
    }
    // Every extent fits the kernel's 64-bit integers; then the element count (checked: eight
    // extents below 2^63 can still overflow) and the source's lowest and highest reach from
    // its offset, in i128 (each term is below 2^126 in size, and a sum of eight of them
    // stays below 2^129: checked as well).
    for &dim in a.dims {
        long("an axis' extent", dim)?;
    }
    let too_large = |what| CudaError::TooLarge {
        what,
        value: usize::MAX,
        bits: 64,
    };
    let mut n: usize = 1;
    let (mut low, mut high) = (0_i128, 0_i128);
    for (&dim, &stride) in a.dims.iter().zip(a.strides) {
        n = n
            .checked_mul(dim)
            .ok_or_else(|| too_large("the element count"))?;
        if dim > 0 {
            let last = (dim as i128 - 1) * stride as i128;
            low = low
                .checked_add(last.min(0))
                .ok_or_else(|| too_large("the source's reach"))?;
            high = high
                .checked_add(last.max(0))
                .ok_or_else(|| too_large("the source's reach"))?;
        }
    }
    let dst_elements = a.dst.rows.checked_mul(a.dst.cols);
    if dst_elements != Some(n) {
        return Err(CudaError::VectorLengths {
            operation: "permute_copy",
            operand: "the destination matrix",
            expected: n,
            given: dst_elements.unwrap_or(usize::MAX),
        });
    }
    a.dst.check("the destination", 1, 0, a.dst_len)?;
    let mut params = PermuteParams {
        dims: [1; MAX_AXES],
        strides: [0; MAX_AXES],
        offset: long("the source's offset", a.src_offset)?,
        dst_offset: long("the destination's offset", a.dst.offset)?,
        dst_rows: long("the destination's rows", a.dst.rows.max(1))?,
        dst_ld: long("the destination's leading dim", a.dst.ld)?,
        rank: a.dims.len() as i32,
        narrow: i32::from(u32::try_from(n).is_ok()),
    };
    if n == 0 {
        return Ok((params, 0));
    }
    let start = a.src_offset as i128;
    if start + low < 0 {
        return Err(CudaError::NegativeReach {
            operand: "the source",
            below: usize::try_from(-(start + low)).unwrap_or(usize::MAX),
        });
    }
    let end = start + high + 1;
    if end > a.src_len as i128 {
        return Err(CudaError::OutOfBounds {
            operand: "the source",
            needed: usize::try_from(end).unwrap_or(usize::MAX),
            len: a.src_len,
        });
    }
    for (d, (&dim, &stride)) in a.dims.iter().zip(a.strides).enumerate() {
        params.dims[d] = long("an axis' extent", dim)?;
        // In bounds above, so |stride| * (dim - 1) < src_len: it fits, unless dim is 1.
        params.strides[d] = if dim > 1 { stride as i64 } else { 0 };
    }
    Ok((params, long("the element count", n)?))
}

/// The kernels of one device's module, each pair indexed by [`CudaScalar`]'s `KERNEL`: one
/// copy per launch, and a batch of copies per launch.
#[derive(Debug)]
pub(crate) struct PermuteKernels {
    functions: [CudaFunction; 2],
    chunked: [CudaFunction; 2],
}

/// The kernel source compiled to PTX, once per process.
fn ptx() -> Result<Ptx, CudaError> {
    static PTX: OnceLock<Result<Ptx, CudaError>> = OnceLock::new();
    PTX.get_or_init(|| super::compile_ptx("tessera_permute.cu", PERMUTE_SOURCE))
        .clone()
}

impl CudaDevice {
    /// This device's permute kernels, compiled and loaded on first use (a failure, such as a
    /// missing NVRTC, is remembered and returned again).
    fn permute_kernels(&self) -> Result<Arc<PermuteKernels>, CudaError> {
        self.permute_kernels
            .get_or_init(|| {
                let [f32_one, f64_one, f32_chunks, f64_chunks] = super::load_kernels(
                    self.context(),
                    ptx()?,
                    [
                        "tessera_permute_f32",
                        "tessera_permute_f64",
                        "tessera_permute_chunks_f32",
                        "tessera_permute_chunks_f64",
                    ],
                )?;
                Ok(Arc::new(PermuteKernels {
                    functions: [f32_one, f64_one],
                    chunked: [f32_chunks, f64_chunks],
                }))
            })
            .clone()
    }

    /// `dst(k % rows, k / rows) <- ±src(i_0, ..., i_{r-1})` for every index of `src.dims`, with
    /// `k` the column-major position of the index (first axis fastest), `dst` the matrix at
    /// `dst_layout` (of exactly `prod(dims)` elements; [`MatLayout::contiguous`] with one
    /// column for a contiguous run) and `-` when `negate`; enqueued on this device's stream
    /// (it returns before the copy is done). The first call on a device compiles (once per
    /// process) and loads the kernels.
    ///
    /// # Errors
    ///
    /// [`CudaError::WrongDevice`], [`CudaError::TooManyAxes`], [`CudaError::StrideCount`],
    /// [`CudaError::VectorLengths`] (a destination matrix of another size),
    /// [`CudaError::LeadingDim`], [`CudaError::OutOfBounds`], [`CudaError::NegativeReach`],
    /// [`CudaError::TooLarge`]:
    /// nothing is enqueued and the destination is untouched. [`CudaError::Unavailable`] /
    /// [`CudaError::MissingSymbol`] for `nvrtc` when NVRTC is missing or old,
    /// [`CudaError::Nvrtc`] if it fails to compile the kernels, the driver's error if loading
    /// or launching them fails.
    pub fn permute_copy<T: CudaScalar>(
        &self,
        negate: bool,
        src: StridedView<'_, T>,
        dst: &mut DeviceBuffer<T>,
        dst_layout: MatLayout,
    ) -> Result<(), CudaError> {
        let (params, n) = check(
            self.ordinal(),
            PermuteArgs {
                src_ordinal: src.buf.ordinal(),
                src_len: src.buf.len(),
                src_offset: src.offset,
                dims: src.dims,
                strides: src.strides,
                dst_ordinal: dst.ordinal(),
                dst_len: dst.len(),
                dst: dst_layout,
            },
        )?;
        if n == 0 {
            return Ok(());
        }
        let kernels = self.permute_kernels()?;
        let function = &kernels.functions[T::KERNEL];
        self.bind()?;
        let stream = self.stream();
        let (src_base, _src_read) = src.buf.as_cuda_slice().device_ptr(stream);
        let (dst_base, _dst_write) = dst.as_cuda_slice_mut().device_ptr_mut(stream);
        let negate = i32::from(negate);
        // At most 2^16 blocks; the kernel strides over the rest.
        let blocks = (n as u64).div_ceil(u64::from(THREADS)).min(1 << 16) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(function);
        launch
            .arg(&src_base)
            .arg(&dst_base)
            .arg(&params)
            .arg(&n)
            .arg(&negate);
        // SAFETY: the arguments match the kernel's signature in order and type (two device
        // pointers as 64-bit values, the `repr(C)` mirror of its struct, a 64-bit count, an
        // int). `check` put every element the source reaches (its offset plus the lowest and
        // highest reach of the strides) inside the source buffer and the destination matrix of
        // exactly `n` elements (distinct places: leading dim at least its rows) inside the
        // destination buffer, both on this device, whose context is
        // current; the destination is borrowed mutably, so it is not the source. The kernel's
        // module lives in `kernels` (an `Arc` this device holds), and the guards record both
        // buffers' use on the stream after the launch is enqueued.
        unsafe { launch.launch(cfg) }
            .map(|_| ())
            .map_err(driver("launch a permute kernel"))
    }

    /// Every copy of `moves` (each as [`permute_copy`](Self::permute_copy) takes it, all from
    /// `src` into `dst`) in one launch on this device's stream: each thread block moves one
    /// chunk of one copy, so many small copies (the blocks of a tensor) cost one launch, not
    /// one each. The destinations must not share an element (the copies run in any order).
    /// Returns once enqueued.
    ///
    /// # Errors
    ///
    /// As [`permute_copy`](Self::permute_copy), for the first copy that fails its checks;
    /// [`CudaError::OverlappingCopies`]; [`CudaError::TooLarge`] for more chunks than one
    /// launch takes (2^31 - 1): nothing is enqueued and the destination is untouched. The
    /// driver's error if copying the tables to the device or launching fails.
    pub fn permute_copies<T: CudaScalar>(
        &self,
        src: &DeviceBuffer<T>,
        dst: &mut DeviceBuffer<T>,
        moves: &[PermuteMove<'_>],
    ) -> Result<(), CudaError> {
        let meta = |ordinal, len| BufferMeta { ordinal, len };
        let (params, chunks) = check_copies(
            self.ordinal(),
            meta(src.ordinal(), src.len()),
            meta(dst.ordinal(), dst.len()),
            moves,
        )?;
        if chunks.is_empty() {
            return Ok(());
        }
        let grid = u32::try_from(chunks.len())
            .ok()
            .filter(|&g| g <= i32::MAX as u32)
            .ok_or(CudaError::TooLarge {
                what: "the chunks of one batch of permuting copies",
                value: chunks.len(),
                bits: 31,
            })?;
        let kernels = self.permute_kernels()?;
        let function = &kernels.chunked[T::KERNEL];
        self.bind()?;
        let stream = self.stream();
        let params_dev = stream
            .clone_htod(&params)
            .map_err(driver("copy permute parameters to the device"))?;
        let chunks_dev = stream
            .clone_htod(&chunks)
            .map_err(driver("copy permute chunks to the device"))?;
        let (src_base, _src_read) = src.as_cuda_slice().device_ptr(stream);
        let (dst_base, _dst_write) = dst.as_cuda_slice_mut().device_ptr_mut(stream);
        let (params_base, _params_read) = params_dev.device_ptr(stream);
        let (chunks_base, _chunks_read) = chunks_dev.device_ptr(stream);
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(function);
        launch
            .arg(&src_base)
            .arg(&dst_base)
            .arg(&params_base)
            .arg(&chunks_base);
        // SAFETY: the arguments match the kernel's signature in order and type (four device
        // pointers as 64-bit values). `check_copies` checked every copy as `permute_copy`
        // does (source reach inside `src`, a destination matrix of exactly its elements
        // inside `dst`, both on this device, whose context is current) and kept the
        // destinations apart, so no two threads write one element; `dst` is borrowed
        // mutably, so it is not `src`. The tables were uploaded earlier on this stream, one
        // parameter set per chunk's `copy` index and one chunk per block of the grid, and
        // are freed stream-ordered after the launch (as the batched GEMMs' pointer arrays).
        // The module lives in `kernels`, and the guards record every buffer's use on the
        // stream after the launch is enqueued.
        unsafe { launch.launch(cfg) }
            .map(|_| ())
            .map_err(driver("launch a batched permute kernel"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args<'a>(dims: &'a [usize], strides: &'a [isize]) -> PermuteArgs<'a> {
        PermuteArgs {
            src_ordinal: 0,
            src_len: 60,
            src_offset: 0,
            dims,
            strides,
            dst_ordinal: 0,
            dst_len: 60,
            dst: MatLayout::contiguous(
                dims.iter()
                    .try_fold(1_usize, |n, &d| n.checked_mul(d))
                    .unwrap_or(0),
                1,
            ),
        }
    }

    /// Runs everywhere: the parameters a permuting copy hands the kernel, and its refusals.
    #[test]
    fn permute_copies_are_checked_before_any_launch() {
        // A 3 x 4 x 5 column-major tensor read as its (2, 0, 1) permutation: dims 5 x 3 x 4.
        let (dims, strides) = ([5, 3, 4], [12, 1, 3]);
        let (p, n) = check(0, args(&dims, &strides)).unwrap();
        assert_eq!(n, 60);
        assert_eq!((p.rank, p.offset, p.narrow), (3, 0, 1));
        assert_eq!(p.dims, [5, 3, 4, 1, 1, 1, 1, 1]);
        assert_eq!(p.strides, [12, 1, 3, 0, 0, 0, 0, 0]);
        // One element short of the source, and of the destination.
        assert_eq!(
            check(
                0,
                PermuteArgs {
                    src_len: 59,
                    ..args(&dims, &strides)
                }
            )
            .unwrap_err(),
            CudaError::OutOfBounds {
                operand: "the source",
                needed: 60,
                len: 59
            }
        );
        assert_eq!(
            check(
                0,
                PermuteArgs {
                    dst: MatLayout {
                        offset: 1,
                        ..MatLayout::contiguous(60, 1)
                    },
                    ..args(&dims, &strides)
                }
            )
            .unwrap_err(),
            CudaError::OutOfBounds {
                operand: "the destination",
                needed: 61,
                len: 60
            }
        );
        // Negative strides: a reversed axis must start far enough in.
        let (dims, back) = ([4, 2], [-1_isize, 4]);
        let err = check(
            0,
            PermuteArgs {
                src_offset: 2,
                ..args(&dims, &back)
            },
        )
        .unwrap_err();
        assert_eq!(
            err,
            CudaError::NegativeReach {
                operand: "the source",
                below: 1
            }
        );
        assert_eq!(
            err.to_string(),
            "expected the source to reach no element before the start of its buffer, but it \
             reaches 1 before it"
        );
        let (p, n) = check(
            0,
            PermuteArgs {
                src_offset: 3,
                ..args(&dims, &back)
            },
        )
        .unwrap();
        assert_eq!((n, p.offset, &p.strides[..2]), (8, 3, &[-1, 4][..]));
        // Axis and stride counts, devices.
        let nine = [1_usize; 9];
        assert_eq!(
            check(0, args(&nine, &[0; 9])).unwrap_err(),
            CudaError::TooManyAxes { given: 9, max: 8 }
        );
        assert_eq!(
            check(0, args(&[2, 2], &[1])).unwrap_err(),
            CudaError::StrideCount {
                axes: 2,
                strides: 1
            }
        );
        assert_eq!(
            check(
                1,
                PermuteArgs {
                    src_ordinal: 1,
                    ..args(&[2], &[1])
                }
            )
            .unwrap_err(),
            CudaError::WrongDevice {
                operand: "the destination",
                expected: 1,
                given: 0
            }
        );
        // An empty axis: nothing to do, wherever the strides point; a scalar: one element.
        let (_, n) = check(
            0,
            PermuteArgs {
                src_len: 0,
                ..args(&[3, 0], &[-100, 7])
            },
        )
        .unwrap();
        assert_eq!(n, 0);
        let (p, n) = check(
            0,
            PermuteArgs {
                src_offset: 59,
                ..args(&[], &[])
            },
        )
        .unwrap();
        assert_eq!((n, p.rank, p.offset), (1, 0, 59));
        // Extent-1 axes take no stride (whatever was given cannot be reached).
        let (p, _) = check(0, args(&[1, 2], &[isize::MAX, 1])).unwrap();
        assert_eq!(&p.strides[..2], &[0, 1]);
        // Sizes past the kernel's integers are refused, not wrapped: an extent past i64, an
        // element count whose product wraps to 1 modulo 2^128 (each extent below 2^63), and
        // eight extents of i64::MAX with the largest strides.
        assert_eq!(
            check(0, args(&[1 << 63], &[0])).unwrap_err(),
            CudaError::TooLarge {
                what: "an axis' extent",
                value: 1 << 63,
                bits: 64
            }
        );
        let wraps = [
            (1_usize << 32) + 1,
            (1 << 32) - 1,
            274_177,
            67_280_421_310_721,
        ];
        let dims: Vec<usize> = wraps.iter().chain(&wraps).copied().collect();
        assert!(matches!(
            check(0, args(&dims, &[0; 8])).unwrap_err(),
            CudaError::TooLarge {
                what: "the element count",
                ..
            }
        ));
        let (huge, far) = ([i64::MAX as usize; 8], [isize::MAX; 8]);
        assert!(matches!(
            check(0, args(&huge, &far)).unwrap_err(),
            CudaError::TooLarge { .. }
        ));
    }

    /// A destination that is a block of a larger matrix: its rows and leading dim reach the
    /// kernel; a matrix of another size, or rows past the leading dim, are refused.
    #[test]
    fn permute_destinations_are_matrices_of_exactly_the_elements_copied() {
        let (dims, strides) = ([5, 3, 4], [12, 1, 3]);
        // 60 elements as a 15 x 4 block at (2, 0) of a 20-row matrix: reaches 2 + 3*20 + 15.
        let block = MatLayout {
            offset: 2,
            rows: 15,
            cols: 4,
            ld: 20,
        };
        let (p, n) = check(
            0,
            PermuteArgs {
                dst_len: 77,
                dst: block,
                ..args(&dims, &strides)
            },
        )
        .unwrap();
        assert_eq!((n, p.dst_offset, p.dst_rows, p.dst_ld), (60, 2, 15, 20));
        assert_eq!(
            check(
                0,
                PermuteArgs {
                    dst_len: 76,
                    dst: block,
                    ..args(&dims, &strides)
                }
            )
            .unwrap_err(),
            CudaError::OutOfBounds {
                operand: "the destination",
                needed: 77,
                len: 76
            }
        );
        let short = MatLayout { cols: 3, ..block };
        assert_eq!(
            check(
                0,
                PermuteArgs {
                    dst_len: 100,
                    dst: short,
                    ..args(&dims, &strides)
                }
            )
            .unwrap_err(),
            CudaError::VectorLengths {
                operation: "permute_copy",
                operand: "the destination matrix",
                expected: 60,
                given: 45
            }
        );
        let overlapping = MatLayout { ld: 14, ..block };
        assert_eq!(
            check(
                0,
                PermuteArgs {
                    dst_len: 100,
                    dst: overlapping,
                    ..args(&dims, &strides)
                }
            )
            .unwrap_err(),
            CudaError::LeadingDim {
                operand: "the destination",
                rows: 15,
                ld: 14
            }
        );
    }

    #[test]
    fn the_parameter_struct_has_the_kernels_layout() {
        assert_eq!(std::mem::size_of::<PermuteParams>(), 8 * 20 + 8);
        assert_eq!(std::mem::align_of::<PermuteParams>(), 8);
        assert_eq!(std::mem::offset_of!(PermuteParams, offset), 128);
        assert_eq!(std::mem::offset_of!(PermuteParams, dst_ld), 152);
        assert_eq!(std::mem::offset_of!(PermuteParams, rank), 160);
        assert!(PERMUTE_SOURCE.contains("long long dims[8];"));
        assert!(
            PERMUTE_SOURCE.contains("tessera_permute_f32")
                && PERMUTE_SOURCE.contains("tessera_permute_f64")
        );
    }

    /// Runs everywhere: a batch's chunks cover every element of every non-empty copy once,
    /// in order, at most `CHUNK` each, with the copy's parameters and sign; empty copies get
    /// none; overlapping destinations and a bad copy are refused by their index.
    #[test]
    fn batches_are_chunked_exactly_and_checked_whole() {
        let meta = |len| BufferMeta { ordinal: 0, len };
        let at = |offset, rows, cols| MatLayout {
            offset,
            ..MatLayout::contiguous(rows, cols)
        };
        let mv = |negate, dims: &'static [usize], strides: &'static [isize], dst| PermuteMove {
            negate,
            offset: 0,
            dims,
            strides,
            dst,
        };
        let moves = [
            mv(false, &[100, 200], &[200, 1], at(0, 100, 200)),
            mv(true, &[0, 5], &[1, 1], at(20_000, 0, 5)),
            mv(true, &[3], &[1], at(20_000, 3, 1)),
            mv(false, &[CHUNK], &[1], at(20_003, CHUNK, 1)),
        ];
        let (params, chunks) = check_copies(0, meta(20_000), meta(40_000), &moves).unwrap();
        assert_eq!(params.len(), 3, "the empty copy has no parameters");
        assert_eq!(
            params.iter().map(|p| p.dst_offset).collect::<Vec<_>>(),
            [0, 20_000, 20_003]
        );
        for (copy, (n, negate)) in [(20_000, 0), (3, 1), (CHUNK as i64, 0)].iter().enumerate() {
            let mine: Vec<&PermuteChunk> =
                chunks.iter().filter(|c| c.copy == copy as i32).collect();
            assert_eq!(mine.first().map(|c| c.start), Some(0));
            assert_eq!(mine.last().map(|c| c.end), Some(*n));
            for w in mine.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            for c in &mine {
                assert!(c.start < c.end && c.end - c.start <= CHUNK as i64);
                assert_eq!(c.negate, *negate);
            }
        }
        assert_eq!(chunks.len(), 3 + 1 + 1);
        // The third copy's destination meets the first's: refused, by the copies' indices.
        let clash = [moves[0], moves[2], mv(false, &[3], &[1], at(199, 3, 1))];
        assert_eq!(
            check_copies(0, meta(20_000), meta(40_000), &clash),
            Err(CudaError::OverlappingCopies {
                first: 0,
                second: 2
            })
        );
        // A copy that fails its own checks fails the batch with its error.
        let past = [
            moves[2],
            PermuteMove {
                offset: 1,
                ..mv(false, &[3], &[1], at(30_000, 3, 1))
            },
        ];
        assert!(matches!(
            check_copies(0, meta(3), meta(40_000), &past),
            Err(CudaError::OutOfBounds {
                operand: "the source",
                ..
            })
        ));
        assert!(matches!(
            check_copies(1, meta(20_000), meta(40_000), &moves[..1]),
            Err(CudaError::WrongDevice { .. })
        ));
    }

    /// NVRTC needs no driver: wherever it loads, the kernels compile, with every entry point
    /// and the 168-byte parameter the host passes.
    #[test]
    fn the_kernel_source_compiles_wherever_nvrtc_loads() {
        if let Err(e) = crate::cuda::probe_nvrtc() {
            eprintln!("skipped: {e}");
            return;
        }
        let ptx = ptx().unwrap().to_src();
        for ty in ["f32", "f64"] {
            for kernel in ["permute", "permute_chunks"] {
                let entry = format!(".entry tessera_{kernel}_{ty}(");
                assert!(ptx.contains(&entry), "no {entry} in the PTX");
            }
            let param = format!("tessera_permute_{ty}_param_2[168]");
            assert!(ptx.contains(&param), "no {param} in the PTX");
        }
    }
}
