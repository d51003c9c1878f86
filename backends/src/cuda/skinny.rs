//! Skinny products: `C <- alpha A B + beta C` where two of `m`, `n`, `k` are at most
//! [`SKINNY_MAX`] and the third is long, as a DMRG step through an MPO tensor is (a few rows
//! of the MPO against millions of columns of the environment). Such a product is
//! memory-bound, and cuBLAS's kernels, tiled for large `m` and `n`, are not built for it.
//! Here a "wide" product (`m` and `k` small) is done in tiles of 128 columns staged through
//! shared memory, so every read of B and write of C is coalesced, and a "tall" one (`k` and
//! `n` small) with one thread per row of C; the small operand sits in shared memory.
//!
//! Owns: [`SKINNY_SOURCE`], [`skinny_shape`] and the launch of the kernels
//! ([`CudaDevice::launch_skinny`], used by [`CudaDevice::gemm_independent`]). Invariant: a
//! launch is made only for a product [`skinny_shape`] accepts (so the small operand fits the
//! kernel's shared array and its registers) whose matrices were checked as cuBLAS's are; a
//! device without NVRTC runs the product through cuBLAS instead.

use super::device::{CudaDevice, CudaScalar};
use super::{CudaError, driver};
use cudarc::cublas::GemmConfig;
use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use std::sync::{Arc, OnceLock};

/// The largest small dimension of a skinny product (the kernels take up to 16). Measured on
/// an H200 in f64, against cuBLAS on the same product: wide 4 x 15M x 4 in 0.65 ms against
/// 1.39 ms, 2 x 30M x 2 in 0.76 against 2.50, tall 15M x 4 x 4 in 0.81 against 1.02, but wide
/// 16 x 4M x 16 in 0.62 against cuBLAS's 0.47; 8 lies between, not measured.
pub const SKINNY_MAX: usize = 8;

/// The smallest long dimension of a skinny product: shorter ones are left to cuBLAS.
const SKINNY_MIN_LONG: usize = 4096;

/// The CUDA C++ source of the skinny products: `extern "C"` kernels `tessera_wide_*` and
/// `tessera_tall_*` for `f32` and `f64`.
pub const SKINNY_SOURCE: &str = r#"
#define TESSERA_SMALL 16
#define TESSERA_TILE 128
// C <- alpha A B + beta C, column-major; beta == 0 never reads C.

// Wide: m, k <= 16. A block takes tiles of 128 columns: B's tile (128 x k elements, one
// contiguous run when B's columns abut) is read into shared memory by all threads in order,
// each thread computes one column of C's tile into shared memory, and the tile is written
// out in order, so both reads and writes are coalesced whatever k and m are.
template <typename T>
__device__ void tessera_wide(const T* __restrict__ a, const long long lda,
                             const T* __restrict__ b, const long long ldb,
                             T* __restrict__ c, const long long ldc,
                             const int m, const long long n, const int k,
                             const T alpha, const T beta) {
    // A column of the tile is k + 1 (m + 1) apart in shared memory: an odd stride in
    // elements, so the threads of a warp, one column each, hit distinct banks.
    __shared__ T sa[TESSERA_SMALL * TESSERA_SMALL];
    __shared__ T sb[TESSERA_TILE * (TESSERA_SMALL + 1)];
    __shared__ T sc[TESSERA_TILE * (TESSERA_SMALL + 1)];
    for (int e = threadIdx.x; e < m * k; e += blockDim.x) {
        sa[e] = a[(e % m) + (long long)(e / m) * lda];
    }
    // The tile loop's trip count is the block's alone, so every barrier is reached by all.
    for (long long j0 = (long long)blockIdx.x * TESSERA_TILE; j0 < n;
         j0 += (long long)gridDim.x * TESSERA_TILE) {
        const int cols = (int)min((long long)TESSERA_TILE, n - j0);
        __syncthreads();  // sa is loaded; the last tile's sb and sc are no longer read
        for (int e = threadIdx.x; e < cols * k; e += blockDim.x) {
            const int j = e / k;
            sb[e + j] = b[(j0 + j) * ldb + (e - j * k)];
        }
        __syncthreads();
        for (int j = threadIdx.x; j < cols; j += blockDim.x) {
            T x[TESSERA_SMALL];
#pragma unroll
            for (int l = 0; l < TESSERA_SMALL; ++l) {
                if (l < k) x[l] = sb[j * (k + 1) + l];
            }
#pragma unroll
            for (int o = 0; o < TESSERA_SMALL; ++o) {
                if (o < m) {
                    T sum = T(0);
#pragma unroll
                    for (int l = 0; l < TESSERA_SMALL; ++l) {
                        if (l < k) sum += sa[o + l * m] * x[l];
                    }
                    sc[j * (m + 1) + o] = sum;
                }
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < cols * m; e += blockDim.x) {
            const int j = e / m;
            const T v = sc[e + j];
            T* out = c + (j0 + j) * ldc + (e - j * m);
            *out = beta == T(0) ? alpha * v : alpha * v + beta * *out;
        }
    }
}

// Tall: k, n <= 16. One thread per row of C: its loads of A's columns and stores into C's
// columns are each coalesced across a warp.
template <typename T>
__device__ void tessera_tall(const T* __restrict__ a, const long long lda,
                             const T* __restrict__ b, const long long ldb,
                             T* __restrict__ c, const long long ldc,
                             const long long m, const int n, const int k,
                             const T alpha, const T beta) {
    __shared__ T sb[TESSERA_SMALL * TESSERA_SMALL];
    for (int e = threadIdx.x; e < k * n; e += blockDim.x) {
        sb[e] = b[(e % k) + (long long)(e / k) * ldb];
    }
    __syncthreads();
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += step) {
        T x[TESSERA_SMALL];
#pragma unroll
        for (int l = 0; l < TESSERA_SMALL; ++l) {
            if (l < k) x[l] = a[i + l * lda];
        }
#pragma unroll
        for (int o = 0; o < TESSERA_SMALL; ++o) {
            if (o < n) {
                T sum = T(0);
#pragma unroll
                for (int l = 0; l < TESSERA_SMALL; ++l) {
                    if (l < k) sum += x[l] * sb[l + o * k];
                }
                T* out = c + i + o * ldc;
                *out = beta == T(0) ? alpha * sum : alpha * sum + beta * *out;
            }
        }
    }
}

#define TESSERA_SKINNY(NAME, T)                                                              \
    extern "C" __global__ void tessera_wide_##NAME(const T* a, long long lda, const T* b,    \
                                                   long long ldb, T* c, long long ldc, int m, \
                                                   int n, int k, T alpha, T beta) {          \
        tessera_wide<T>(a, lda, b, ldb, c, ldc, m, n, k, alpha, beta);                       \
    }                                                                                        \
    extern "C" __global__ void tessera_tall_##NAME(const T* a, long long lda, const T* b,    \
                                                   long long ldb, T* c, long long ldc, int m, \
                                                   int n, int k, T alpha, T beta) {          \
        tessera_tall<T>(a, lda, b, ldb, c, ldc, m, n, k, alpha, beta);                       \
    }
TESSERA_SKINNY(f32, float)
TESSERA_SKINNY(f64, double)
"#;

/// Threads per block of the skinny kernels (the wide kernel's tile: `TESSERA_TILE`).
const THREADS: u32 = 128;

/// The most blocks a skinny launch takes (each thread then loops over the long dimension):
/// enough to fill any current GPU many times over.
const MAX_BLOCKS: u32 = 8192;

/// Whether an untransposed `m x k` by `k x n` product is skinny: `Some(true)` for "wide"
/// (`m` and `k` small, `n` long), `Some(false)` for "tall" (`k` and `n` small, `m` long),
/// `None` for a product cuBLAS should run.
pub fn skinny_shape(m: usize, n: usize, k: usize) -> Option<bool> {
    let small = |d: usize| d <= SKINNY_MAX;
    if small(m) && small(k) && n >= SKINNY_MIN_LONG {
        Some(true)
    } else if small(k) && small(n) && m >= SKINNY_MIN_LONG {
        Some(false)
    } else {
        None
    }
}

/// A device's skinny kernels, each pair indexed by [`CudaScalar`]'s `KERNEL`.
#[derive(Debug)]
pub(crate) struct SkinnyKernels {
    wide: [CudaFunction; 2],
    tall: [CudaFunction; 2],
}

/// The kernel source compiled to PTX, once per process.
fn ptx() -> Result<Ptx, CudaError> {
    static PTX: OnceLock<Result<Ptx, CudaError>> = OnceLock::new();
    PTX.get_or_init(|| super::compile_ptx("tessera_skinny.cu", SKINNY_SOURCE))
        .clone()
}

/// One skinny product's arguments: device pointers to the first element of A, B and C, its
/// checked cuBLAS configuration (dims, leading dims, scalars; no transposes), and whether it
/// is wide.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SkinnyArgs<'a, T> {
    pub(crate) a: CUdeviceptr,
    pub(crate) b: CUdeviceptr,
    pub(crate) c: CUdeviceptr,
    pub(crate) cfg: &'a GemmConfig<T>,
    pub(crate) wide: bool,
}

impl CudaDevice {
    /// This device's skinny kernels, compiled and loaded on first use (a failure, such as a
    /// missing NVRTC, is remembered and returned again).
    pub(crate) fn skinny_kernels(&self) -> Result<Arc<SkinnyKernels>, CudaError> {
        self.skinny_kernels
            .get_or_init(|| {
                let [wide_f32, wide_f64, tall_f32, tall_f64] = super::load_kernels(
                    self.context(),
                    ptx()?,
                    [
                        "tessera_wide_f32",
                        "tessera_wide_f64",
                        "tessera_tall_f32",
                        "tessera_tall_f64",
                    ],
                )?;
                Ok(Arc::new(SkinnyKernels {
                    wide: [wide_f32, wide_f64],
                    tall: [tall_f32, tall_f64],
                }))
            })
            .clone()
    }

    /// Enqueues one skinny product on `stream` (this device's or one of its lanes).
    ///
    /// # Safety
    ///
    /// [`skinny_shape`] must accept `(m, n, k)` as `wide` says; A (`m x k`), B (`k x n`) and C
    /// (`m x n`, sharing no element with A or B) must lie, with their leading dims (at least
    /// their rows), inside allocations on this device that stay allocated until `stream` has
    /// run the kernel; this device's context must be current and `stream` must be its own.
    pub(crate) unsafe fn launch_skinny<T: CudaScalar>(
        &self,
        stream: &CudaStream,
        kernels: &SkinnyKernels,
        args: SkinnyArgs<'_, T>,
    ) -> Result<(), CudaError> {
        let gemm = args.cfg;
        let long = if args.wide { gemm.n } else { gemm.m } as u32;
        let blocks = long.div_ceil(THREADS).clamp(1, MAX_BLOCKS);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (lda, ldb, ldc) = (
            i64::from(gemm.lda),
            i64::from(gemm.ldb),
            i64::from(gemm.ldc),
        );
        let function = if args.wide {
            &kernels.wide[T::KERNEL]
        } else {
            &kernels.tall[T::KERNEL]
        };
        let mut launch = stream.launch_builder(function);
        launch
            .arg(&args.a)
            .arg(&lda)
            .arg(&args.b)
            .arg(&ldb)
            .arg(&args.c)
            .arg(&ldc)
            .arg(&gemm.m)
            .arg(&gemm.n)
            .arg(&gemm.k)
            .arg(&gemm.alpha)
            .arg(&gemm.beta);
        // SAFETY: the arguments match both kernels' signature in order and type (device
        // pointers as 64-bit values, 64-bit leading dims, three ints, two scalars of `T`).
        // The caller's contract puts every element the kernel reads or writes inside live
        // allocations of this device, C apart from A and B, and the small dims within the
        // kernel's shared array; the module lives in `kernels`.
        unsafe { launch.launch(cfg) }
            .map(|_| ())
            .map_err(driver("launch a skinny GEMM kernel"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs everywhere: which products the skinny kernels take.
    #[test]
    fn skinny_shapes_are_small_by_small_by_long() {
        assert_eq!(skinny_shape(5, 1 << 20, 5), Some(true));
        assert_eq!(skinny_shape(1 << 20, 4, 8), Some(false));
        assert_eq!(skinny_shape(1 << 20, 4, 16), None, "cuBLAS is faster there");
        assert_eq!(skinny_shape(8, 4096, 8), Some(true));
        assert_eq!(skinny_shape(9, 1 << 20, 5), None, "m too large");
        assert_eq!(skinny_shape(5, 1 << 20, 9), None, "k too large");
        assert_eq!(
            skinny_shape(5, 4095, 5),
            None,
            "too short for a kernel of its own"
        );
        assert_eq!(skinny_shape(1024, 1024, 4), None);
        assert_eq!(skinny_shape(8, 8, 8), None, "nothing long");
    }

    /// Runs wherever NVRTC loads (no GPU needed): the kernel source compiles.
    #[test]
    fn the_skinny_kernels_compile() {
        match super::super::probe_nvrtc() {
            Ok(()) => {
                ptx().unwrap();
            }
            Err(e) => println!("skipped: {e}"),
        }
    }
}
