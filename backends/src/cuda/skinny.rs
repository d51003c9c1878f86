//! Skinny products: `C <- alpha A B + beta C` where two of `m`, `n`, `k` are at most
//! [`SKINNY_MAX`] and the third is large, as a DMRG step through an MPO tensor is (a few rows
//! of the MPO against millions of columns of the environment). Such a product is memory-bound;
//! cuBLAS's kernels, tiled for large `m` and `n`, moved it at about a fifth of the H200's
//! bandwidth. Here one thread takes one column of C (`m` and `k` small: "wide") or one row
//! ("tall": `k` and `n` small), with the small operand in shared memory.
//!
//! Owns: [`SKINNY_SOURCE`], [`skinny_shape`] and the launch of the kernels
//! ([`CudaDevice::launch_skinny`], used by [`CudaDevice::gemm_independent`]). Invariant: a
//! launch is made only for a product [`skinny_shape`] accepts (so the small operand fits the
//! kernel's shared array and its registers) whose matrices were checked as cuBLAS's are; a
//! device without NVRTC runs the product through cuBLAS instead.

use super::device::{CudaDevice, CudaScalar};
use super::{CudaError, driver};
use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use std::ffi::c_int;
use std::sync::{Arc, OnceLock};

/// The largest small dimension of a skinny product.
pub const SKINNY_MAX: usize = 16;

/// The smallest large dimension of a skinny product: below it cuBLAS's launch is as good.
const SKINNY_MIN_LONG: usize = 4096;

/// The CUDA C++ source of the skinny products, one `extern "C"` kernel per element type
/// (`tessera_skinny_f32`, `tessera_skinny_f64`).
pub const SKINNY_SOURCE: &str = r#"
#define TESSERA_SMALL 16
// C <- alpha A B + beta C, column-major. wide: m, k <= 16, one thread per column of C;
// else (tall) k, n <= 16, one thread per row. beta == 0 never reads C.
template <typename T>
__device__ void tessera_skinny(const T* __restrict__ a, const long long lda,
                               const T* __restrict__ b, const long long ldb,
                               T* __restrict__ c, const long long ldc,
                               const int m, const int n, const int k,
                               const T alpha, const T beta, const int wide) {
    __shared__ T small[TESSERA_SMALL * TESSERA_SMALL];
    const int rows = wide ? m : k;
    const int cols = wide ? k : n;
    const T* s = wide ? a : b;
    const long long lds = wide ? lda : ldb;
    for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
        small[e] = s[(e % rows) + (long long)(e / rows) * lds];
    }
    __syncthreads();
    const long long count = wide ? (long long)n : (long long)m;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < count; p += step) {
        T x[TESSERA_SMALL];
#pragma unroll
        for (int l = 0; l < TESSERA_SMALL; ++l) {
            if (l < k) x[l] = wide ? b[l + p * ldb] : a[p + l * lda];
        }
        const int outs = wide ? m : n;
#pragma unroll
        for (int o = 0; o < TESSERA_SMALL; ++o) {
            if (o < outs) {
                T sum = T(0);
#pragma unroll
                for (int l = 0; l < TESSERA_SMALL; ++l) {
                    if (l < k) sum += (wide ? small[o + l * m] : small[l + o * k]) * x[l];
                }
                T* out = wide ? c + o + p * ldc : c + p + o * ldc;
                *out = beta == T(0) ? alpha * sum : alpha * sum + beta * *out;
            }
        }
    }
}

extern "C" __global__ void tessera_skinny_f32(const float* a, long long lda, const float* b,
                                              long long ldb, float* c, long long ldc, int m,
                                              int n, int k, float alpha, float beta, int wide) {
    tessera_skinny<float>(a, lda, b, ldb, c, ldc, m, n, k, alpha, beta, wide);
}

extern "C" __global__ void tessera_skinny_f64(const double* a, long long lda, const double* b,
                                              long long ldb, double* c, long long ldc, int m,
                                              int n, int k, double alpha, double beta,
                                              int wide) {
    tessera_skinny<double>(a, lda, b, ldb, c, ldc, m, n, k, alpha, beta, wide);
}
"#;

/// Threads per block of the skinny kernels.
const THREADS: u32 = 256;

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

/// A device's skinny kernels, indexed by [`CudaScalar`]'s `KERNEL`.
#[derive(Debug)]
pub(crate) struct SkinnyKernels {
    functions: [CudaFunction; 2],
}

/// The kernel source compiled to PTX, once per process.
fn ptx() -> Result<Ptx, CudaError> {
    static PTX: OnceLock<Result<Ptx, CudaError>> = OnceLock::new();
    PTX.get_or_init(|| super::compile_ptx("tessera_skinny.cu", SKINNY_SOURCE))
        .clone()
}

/// One skinny product's arguments: device pointers to the first element of A, B and C, the
/// leading dims and dims as cuBLAS takes them, and whether it is wide.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SkinnyArgs<T> {
    pub(crate) a: CUdeviceptr,
    pub(crate) lda: c_int,
    pub(crate) b: CUdeviceptr,
    pub(crate) ldb: c_int,
    pub(crate) c: CUdeviceptr,
    pub(crate) ldc: c_int,
    pub(crate) m: c_int,
    pub(crate) n: c_int,
    pub(crate) k: c_int,
    pub(crate) alpha: T,
    pub(crate) beta: T,
    pub(crate) wide: bool,
}

impl CudaDevice {
    /// This device's skinny kernels, compiled and loaded on first use (a failure, such as a
    /// missing NVRTC, is remembered and returned again).
    pub(crate) fn skinny_kernels(&self) -> Result<Arc<SkinnyKernels>, CudaError> {
        self.skinny_kernels
            .get_or_init(|| {
                let module = self
                    .context()
                    .load_module(ptx()?)
                    .map_err(driver("load the skinny kernels' module"))?;
                let load = |name| {
                    module
                        .load_function(name)
                        .map_err(driver("find a skinny kernel in its module"))
                };
                Ok(Arc::new(SkinnyKernels {
                    functions: [load("tessera_skinny_f32")?, load("tessera_skinny_f64")?],
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
        args: SkinnyArgs<T>,
    ) -> Result<(), CudaError> {
        let long = if args.wide { args.n } else { args.m } as u32;
        let blocks = long.div_ceil(THREADS).clamp(1, MAX_BLOCKS);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (lda, ldb, ldc) = (
            i64::from(args.lda),
            i64::from(args.ldb),
            i64::from(args.ldc),
        );
        let wide = c_int::from(args.wide);
        let mut launch = stream.launch_builder(&kernels.functions[T::KERNEL]);
        launch
            .arg(&args.a)
            .arg(&lda)
            .arg(&args.b)
            .arg(&ldb)
            .arg(&args.c)
            .arg(&ldc)
            .arg(&args.m)
            .arg(&args.n)
            .arg(&args.k)
            .arg(&args.alpha)
            .arg(&args.beta)
            .arg(&wide);
        // SAFETY: the arguments match the kernel's signature in order and type (device
        // pointers as 64-bit values, 64-bit leading dims, three ints, two scalars of `T`, an
        // int). The caller's contract puts every element the kernel reads or writes inside
        // live allocations of this device, C apart from A and B, and the small dims within
        // the kernel's shared array; the module lives in `kernels`.
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
        assert_eq!(skinny_shape(1 << 20, 4, 16), Some(false));
        assert_eq!(skinny_shape(16, 4096, 16), Some(true));
        assert_eq!(skinny_shape(17, 1 << 20, 5), None, "m too large");
        assert_eq!(skinny_shape(5, 1 << 20, 17), None, "k too large");
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
