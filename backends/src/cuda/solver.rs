//! Dense factorizations on a device through cuSOLVER (loaded at run time, like cuBLAS).
//!
//! Owns: [`DenseFactors`] (a factorization's dense results in device memory) and the
//! device's SVD (`gesvdj`), QR (`geqrf` + `orgqr`) and symmetric eigendecomposition
//! (`syevd`) of one column-major matrix. Invariants:
//!
//! - The input matrix is copied into a work buffer first (cuSOLVER overwrites its input),
//!   so the caller's buffer is only read; every temporary is allocated on the device's
//!   stream, and everything is enqueued on that stream, in order after earlier work.
//! - Each call waits for the stream once, to read back cuSOLVER's `info` and the values
//!   (singular values, eigenvalues) the host needs for its decisions; a positive `info` is
//!   [`CudaError::NoConvergence`], a negative one [`CudaError::Cusolver`]-like misuse.
//! - The factors stay on the device, column-major with their own row count as leading
//!   dimension; the caller copies what it keeps into its tensors (the permute kernel).

use super::{CudaDevice, CudaError, CudaScalar, DeviceBuffer, MatLayout};
use cudarc::cusolver::sys as solver_sys;
use cudarc::cusolver::sys::{cublasFillMode_t, cusolverDnHandle_t, cusolverEigMode_t};
use cudarc::driver::{DevicePtr, DevicePtrMut};
use std::ffi::c_int;

/// The cuSOLVER symbols the device factorizations call (checked by [`probe_cusolver`]).
const CUSOLVER_SYMBOLS: &[&str] = &[
    "cusolverDnCreate",
    "cusolverDnDestroy",
    "cusolverDnSetStream",
    "cusolverDnCreateGesvdjInfo",
    "cusolverDnDestroyGesvdjInfo",
    "cusolverDnSgesvdj_bufferSize",
    "cusolverDnSgesvdj",
    "cusolverDnDgesvdj_bufferSize",
    "cusolverDnDgesvdj",
    "cusolverDnSgeqrf_bufferSize",
    "cusolverDnSgeqrf",
    "cusolverDnDgeqrf_bufferSize",
    "cusolverDnDgeqrf",
    "cusolverDnSorgqr_bufferSize",
    "cusolverDnSorgqr",
    "cusolverDnDorgqr_bufferSize",
    "cusolverDnDorgqr",
    "cusolverDnSsyevd_bufferSize",
    "cusolverDnSsyevd",
    "cusolverDnDsyevd_bufferSize",
    "cusolverDnDsyevd",
];

/// Whether cuSOLVER loads and exports every symbol the device factorizations call (checked
/// once per process).
///
/// # Errors
///
/// [`CudaError::Unavailable`] without cuSOLVER, [`CudaError::MissingSymbol`] for an old one.
pub fn probe_cusolver() -> Result<(), CudaError> {
    static CUSOLVER: std::sync::OnceLock<Result<(), CudaError>> = std::sync::OnceLock::new();
    CUSOLVER
        .get_or_init(|| {
            // SAFETY: cuSOLVER's initialisers need nothing from the caller.
            if !unsafe { solver_sys::is_culib_present() } {
                return Err(super::unavailable("cusolver", &["cusolver"]));
            }
            // SAFETY: `is_culib_present` just loaded one of the names `culib` tries.
            let lib = unsafe { solver_sys::culib() };
            for &symbol in CUSOLVER_SYMBOLS {
                // SAFETY: a symbol-table lookup; the symbol is never called.
                if unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.is_err() {
                    return Err(CudaError::MissingSymbol {
                        library: "cusolver",
                        symbol,
                    });
                }
            }
            Ok(())
        })
        .clone()
}

/// A cuSOLVER status.
type Status = solver_sys::cusolverStatus_t;
/// Every routine here computes vectors (singular or eigen).
const VECTORS: cusolverEigMode_t = cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR;
/// The eigensolver reads the lower triangle.
const LOWER: cublasFillMode_t = cublasFillMode_t::CUBLAS_FILL_MODE_LOWER;
/// cuSOLVER's `?gesvdj_bufferSize`.
pub(super) type GesvdjSize<T> = unsafe fn(
    cusolverDnHandle_t,
    cusolverEigMode_t,
    c_int,
    c_int,
    c_int,
    *const T,
    c_int,
    *const T,
    *const T,
    c_int,
    *const T,
    c_int,
    *mut c_int,
    solver_sys::gesvdjInfo_t,
) -> Status;
/// cuSOLVER's `?gesvdj`.
pub(super) type Gesvdj<T> = unsafe fn(
    cusolverDnHandle_t,
    cusolverEigMode_t,
    c_int,
    c_int,
    c_int,
    *mut T,
    c_int,
    *mut T,
    *mut T,
    c_int,
    *mut T,
    c_int,
    *mut T,
    c_int,
    *mut c_int,
    solver_sys::gesvdjInfo_t,
) -> Status;
/// cuSOLVER's `?geqrf_bufferSize`.
pub(super) type GeqrfSize<T> =
    unsafe fn(cusolverDnHandle_t, c_int, c_int, *mut T, c_int, *mut c_int) -> Status;
/// cuSOLVER's `?geqrf`.
pub(super) type Geqrf<T> = unsafe fn(
    cusolverDnHandle_t,
    c_int,
    c_int,
    *mut T,
    c_int,
    *mut T,
    *mut T,
    c_int,
    *mut c_int,
) -> Status;
/// cuSOLVER's `?orgqr_bufferSize`.
pub(super) type OrgqrSize<T> = unsafe fn(
    cusolverDnHandle_t,
    c_int,
    c_int,
    c_int,
    *const T,
    c_int,
    *const T,
    *mut c_int,
) -> Status;
/// cuSOLVER's `?orgqr`.
pub(super) type Orgqr<T> = unsafe fn(
    cusolverDnHandle_t,
    c_int,
    c_int,
    c_int,
    *mut T,
    c_int,
    *const T,
    *mut T,
    c_int,
    *mut c_int,
) -> Status;
/// cuSOLVER's `?syevd_bufferSize`.
pub(super) type SyevdSize<T> = unsafe fn(
    cusolverDnHandle_t,
    cusolverEigMode_t,
    cublasFillMode_t,
    c_int,
    *const T,
    c_int,
    *const T,
    *mut c_int,
) -> Status;
/// cuSOLVER's `?syevd`.
pub(super) type Syevd<T> = unsafe fn(
    cusolverDnHandle_t,
    cusolverEigMode_t,
    cublasFillMode_t,
    c_int,
    *mut T,
    c_int,
    *mut T,
    *mut T,
    c_int,
    *mut c_int,
) -> Status;

/// The per-type cuSOLVER routines (`S` for `f32`, `D` for `f64`), each with cuSOLVER's
/// contract: the loader functions of `cudarc`, named once per type.
#[doc(hidden)]
pub trait Lapack: Sized {
    /// `?gesvdj_bufferSize`.
    const GESVDJ_SIZE: GesvdjSize<Self>;
    /// `?gesvdj`.
    const GESVDJ: Gesvdj<Self>;
    /// `?geqrf_bufferSize`.
    const GEQRF_SIZE: GeqrfSize<Self>;
    /// `?geqrf`.
    const GEQRF: Geqrf<Self>;
    /// `?orgqr_bufferSize`.
    const ORGQR_SIZE: OrgqrSize<Self>;
    /// `?orgqr`.
    const ORGQR: Orgqr<Self>;
    /// `?syevd_bufferSize`.
    const SYEVD_SIZE: SyevdSize<Self>;
    /// `?syevd`.
    const SYEVD: Syevd<Self>;
}

macro_rules! lapack {
    ($t:ty, $prefix:ident) => {
        paste::paste! {
            impl Lapack for $t {
                const GESVDJ_SIZE: GesvdjSize<Self> =
                    solver_sys::[<cusolverDn $prefix gesvdj_bufferSize>];
                const GESVDJ: Gesvdj<Self> = solver_sys::[<cusolverDn $prefix gesvdj>];
                const GEQRF_SIZE: GeqrfSize<Self> = solver_sys::[<cusolverDn $prefix geqrf_bufferSize>];
                const GEQRF: Geqrf<Self> = solver_sys::[<cusolverDn $prefix geqrf>];
                const ORGQR_SIZE: OrgqrSize<Self> = solver_sys::[<cusolverDn $prefix orgqr_bufferSize>];
                const ORGQR: Orgqr<Self> = solver_sys::[<cusolverDn $prefix orgqr>];
                const SYEVD_SIZE: SyevdSize<Self> = solver_sys::[<cusolverDn $prefix syevd_bufferSize>];
                const SYEVD: Syevd<Self> = solver_sys::[<cusolverDn $prefix syevd>];
            }
        }
    };
}

lapack!(f32, S);
lapack!(f64, D);

/// A factorization's dense results on the device: up to two column-major matrices (each
/// with its row count as leading dimension) and the values the host reads.
#[derive(Debug)]
pub struct DenseFactors<T> {
    /// The first factor (`U` of an SVD, `Q` of a QR, the eigenvectors of an eigh) and its
    /// rows and columns.
    pub first: (DeviceBuffer<T>, usize, usize),
    /// The second factor (`V`, not transposed, of an SVD; `R` of a QR) and its rows and
    /// columns; empty for an eigh.
    pub second: (DeviceBuffer<T>, usize, usize),
    /// Singular values (descending) or eigenvalues (ascending), on the host.
    pub values: Vec<f64>,
}

/// A cuSOLVER status as this backend's error.
fn solver(during: &'static str) -> impl FnOnce(solver_sys::cusolverStatus_t) -> CudaError {
    move |status| CudaError::Cusolver {
        during,
        status: format!("{status:?}"),
    }
}

/// `Ok` for a success status.
fn ok(status: solver_sys::cusolverStatus_t, during: &'static str) -> Result<(), CudaError> {
    if status == solver_sys::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(solver(during)(status))
    }
}

/// A dimension as cuSOLVER's `int`.
fn int(value: usize, what: &'static str) -> Result<c_int, CudaError> {
    c_int::try_from(value).map_err(|_| CudaError::TooLarge {
        what,
        value,
        bits: 31,
    })
}

impl CudaDevice {
    /// The cuSOLVER handle of this device's stream, made on first use.
    fn solver(&self) -> Result<cusolverDnHandle_t, CudaError> {
        probe_cusolver()?;
        let handle = self.solver.get_or_init(|| {
            cudarc::cusolver::safe::DnHandle::new(self.stream().clone())
                .map(std::sync::Arc::new)
                .map_err(|e| solver("create a handle")(e.0))
        });
        match handle {
            Ok(h) => Ok(h.cu()),
            Err(e) => Err(e.clone()),
        }
    }

    /// A column-major copy of the matrix at `a` in `src` with leading dimension `a.rows`
    /// (the work buffer cuSOLVER overwrites).
    fn work_copy<T: CudaScalar>(
        &self,
        src: &DeviceBuffer<T>,
        a: MatLayout,
    ) -> Result<DeviceBuffer<T>, CudaError> {
        a.check("the factorized matrix", 1, 0, src.len())?;
        let mut work = self.alloc_zeros::<T>(a.rows * a.cols)?;
        let moves = [super::PermuteMove {
            negate: false,
            offset: a.offset,
            dims: &[a.rows, a.cols],
            strides: &[1, a.ld as isize],
            dst: MatLayout::contiguous(a.rows, a.cols),
        }];
        if a.rows * a.cols > 0 {
            self.permute_copies(src, &mut work, &moves)?;
        }
        Ok(work)
    }

    /// Reads cuSOLVER's `info` and the values back (one wait for the stream) and checks the
    /// `info`.
    fn finish<T: CudaScalar>(
        &self,
        info: &cudarc::driver::CudaSlice<c_int>,
        values: Option<&DeviceBuffer<T>>,
        what: &'static str,
    ) -> Result<Vec<f64>, CudaError> {
        let mut status = [0 as c_int];
        self.stream()
            .memcpy_dtoh(info, &mut status)
            .map_err(super::driver("read cuSOLVER's info"))?;
        self.synchronize()?;
        let values = match values {
            Some(v) => self.download(v)?,
            None => Vec::new(),
        };
        match status[0] {
            0 => Ok(values.iter().map(|v| v.to_c64().re).collect()),
            k if k > 0 => Err(CudaError::NoConvergence { what, info: k }),
            k => Err(CudaError::Cusolver {
                during: what,
                status: format!("argument {} was refused", -k),
            }),
        }
    }

    /// The thin SVD `A = U S V^T` of the `m x n` matrix at `a` in `src`: `U` (`m x p`),
    /// the `p = min(m, n)` singular values (descending) and `V` (`n x p`, not transposed),
    /// through `gesvdj`. Waits for the stream once.
    ///
    /// # Errors
    ///
    /// [`CudaError::Unavailable`] without cuSOLVER; [`CudaError::OutOfBounds`] for a matrix
    /// outside `src`; [`CudaError::NoConvergence`]; cuSOLVER's and the driver's errors.
    pub fn svd<T: CudaScalar>(
        &self,
        src: &DeviceBuffer<T>,
        a: MatLayout,
    ) -> Result<DenseFactors<T>, CudaError> {
        let (m, n) = (a.rows, a.cols);
        let p = m.min(n);
        let mut work = self.work_copy(src, a)?;
        let mut s = self.alloc_zeros::<T>(p)?;
        let mut u = self.alloc_zeros::<T>(m * p)?;
        let mut v = self.alloc_zeros::<T>(n * p)?;
        if p == 0 {
            return Ok(DenseFactors {
                first: (u, m, 0),
                second: (v, n, 0),
                values: Vec::new(),
            });
        }
        let (mi, ni) = (int(m, "rows")?, int(n, "columns")?);
        let h = self.solver()?;
        self.bind()?;
        let stream = self.stream().clone();
        let mut info = stream
            .alloc_zeros::<c_int>(1)
            .map_err(super::driver("allocate cuSOLVER's info"))?;
        let mut params: solver_sys::gesvdjInfo_t = std::ptr::null_mut();
        // SAFETY: `params` is a valid place for the handle.
        let status = unsafe { solver_sys::cusolverDnCreateGesvdjInfo(&mut params) };
        ok(status, "create the SVD's parameters")?;
        let result = (|| {
            let (ap, _a) = work.as_cuda_slice_mut().device_ptr_mut(&stream);
            let (sp, _s) = s.as_cuda_slice_mut().device_ptr_mut(&stream);
            let (up, _u) = u.as_cuda_slice_mut().device_ptr_mut(&stream);
            let (vp, _v) = v.as_cuda_slice_mut().device_ptr_mut(&stream);
            let mut lwork: c_int = 0;
            // SAFETY: the buffers hold `m n`, `p`, `m p` and `n p` elements of this device,
            // the leading dims are `m` (A, U) and `n` (V), the handle is bound to this
            // device's stream; the size query reads no data.
            let status = unsafe {
                (T::GESVDJ_SIZE)(
                    h,
                    VECTORS,
                    1,
                    mi,
                    ni,
                    ap as *const T,
                    mi,
                    sp as *const T,
                    up as *const T,
                    mi,
                    vp as *const T,
                    ni,
                    &mut lwork,
                    params,
                )
            };
            ok(status, "size the SVD's workspace")?;
            let mut scratch = self.alloc_zeros::<T>(lwork.max(1) as usize)?;
            let (wp, _w) = scratch.as_cuda_slice_mut().device_ptr_mut(&stream);
            let (ip, _i) = info.device_ptr_mut(&stream);
            // SAFETY: as above, with a workspace of the size cuSOLVER asked for; everything
            // is enqueued on the stream the buffers are ordered on (the guards record it).
            let status = unsafe {
                (T::GESVDJ)(
                    h,
                    VECTORS,
                    1,
                    mi,
                    ni,
                    ap as *mut T,
                    mi,
                    sp as *mut T,
                    up as *mut T,
                    mi,
                    vp as *mut T,
                    ni,
                    wp as *mut T,
                    lwork,
                    ip as *mut c_int,
                    params,
                )
            };
            ok(status, "run the SVD")
        })();
        // SAFETY: `params` was created above and is used by nothing enqueued after this
        // point (cuSOLVER reads it while enqueuing).
        unsafe { solver_sys::cusolverDnDestroyGesvdjInfo(params) };
        result?;
        let values = self.finish(&info, Some(&s), "SVD")?;
        Ok(DenseFactors {
            first: (u, m, p),
            second: (v, n, p),
            values,
        })
    }

    /// The thin QR decomposition `A = Q R` of the `m x n` matrix at `a` in `src`: `Q`
    /// (`m x p`, orthonormal columns) and `R` (`p x n`, upper triangular), `p = min(m, n)`,
    /// through `geqrf` and `orgqr`. Waits for the stream once.
    ///
    /// # Errors
    ///
    /// As [`svd`](Self::svd).
    pub fn qr<T: CudaScalar>(
        &self,
        src: &DeviceBuffer<T>,
        a: MatLayout,
    ) -> Result<DenseFactors<T>, CudaError> {
        let (m, n) = (a.rows, a.cols);
        let p = m.min(n);
        let mut work = self.work_copy(src, a)?;
        let mut q = self.alloc_zeros::<T>(m * p)?;
        let mut r = self.alloc_zeros::<T>(p * n)?;
        let tau = self.alloc_zeros::<T>(p.max(1))?;
        if p == 0 {
            return Ok(DenseFactors {
                first: (q, m, 0),
                second: (r, 0, n),
                values: Vec::new(),
            });
        }
        let (mi, ni, pi) = (int(m, "rows")?, int(n, "columns")?, int(p, "rank")?);
        let h = self.solver()?;
        self.bind()?;
        let stream = self.stream().clone();
        let mut info = stream
            .alloc_zeros::<c_int>(1)
            .map_err(super::driver("allocate cuSOLVER's info"))?;
        let mut tau = tau;
        {
            let (ap, _a) = work.as_cuda_slice_mut().device_ptr_mut(&stream);
            let (tp, _t) = tau.as_cuda_slice_mut().device_ptr_mut(&stream);
            let mut lwork: c_int = 0;
            // SAFETY: `work` holds the `m x n` matrix (leading dim `m`) on this device, `tau`
            // `p` elements; the size query reads no data.
            let status = unsafe { (T::GEQRF_SIZE)(h, mi, ni, ap as *mut T, mi, &mut lwork) };
            ok(status, "size the QR's workspace")?;
            let mut scratch = self.alloc_zeros::<T>(lwork.max(1) as usize)?;
            let (wp, _w) = scratch.as_cuda_slice_mut().device_ptr_mut(&stream);
            let (ip, _i) = info.device_ptr_mut(&stream);
            // SAFETY: as above, with the workspace cuSOLVER asked for.
            let status = unsafe {
                (T::GEQRF)(
                    h,
                    mi,
                    ni,
                    ap as *mut T,
                    mi,
                    tp as *mut T,
                    wp as *mut T,
                    lwork,
                    ip as *mut c_int,
                )
            };
            ok(status, "run the QR")?;
        }
        // R: the upper triangle of the first p rows (the strictly lower part stays zero).
        for j in 0..n {
            let len = (j + 1).min(p);
            let moves = [super::PermuteMove {
                negate: false,
                offset: j * m,
                dims: &[len],
                strides: &[1],
                dst: MatLayout {
                    offset: j * p,
                    rows: len,
                    cols: 1,
                    ld: len.max(1),
                },
            }];
            self.permute_copies(&work, &mut r, &moves)?;
        }
        // Q: the first p columns of the reflectors, expanded in place.
        let moves = [super::PermuteMove {
            negate: false,
            offset: 0,
            dims: &[m, p],
            strides: &[1, m as isize],
            dst: MatLayout::contiguous(m, p),
        }];
        self.permute_copies(&work, &mut q, &moves)?;
        {
            let (qp, _q) = q.as_cuda_slice_mut().device_ptr_mut(&stream);
            let (tp, _t) = tau.as_cuda_slice().device_ptr(&stream);
            let mut lwork: c_int = 0;
            // SAFETY: `q` holds the `m x p` reflectors (leading dim `m`), `tau` their `p`
            // scalars; the size query reads no data.
            let status = unsafe {
                (T::ORGQR_SIZE)(
                    h,
                    mi,
                    pi,
                    pi,
                    qp as *const T,
                    mi,
                    tp as *const T,
                    &mut lwork,
                )
            };
            ok(status, "size the Q expansion's workspace")?;
            let mut scratch = self.alloc_zeros::<T>(lwork.max(1) as usize)?;
            let (wp, _w) = scratch.as_cuda_slice_mut().device_ptr_mut(&stream);
            let (ip, _i) = info.device_ptr_mut(&stream);
            // SAFETY: as above, with the workspace cuSOLVER asked for.
            let status = unsafe {
                (T::ORGQR)(
                    h,
                    mi,
                    pi,
                    pi,
                    qp as *mut T,
                    mi,
                    tp as *const T,
                    wp as *mut T,
                    lwork,
                    ip as *mut c_int,
                )
            };
            ok(status, "expand Q")?;
        }
        self.finish::<T>(&info, None, "QR")?;
        Ok(DenseFactors {
            first: (q, m, p),
            second: (r, p, n),
            values: Vec::new(),
        })
    }

    /// The eigendecomposition `A = V diag(w) V^T` of the symmetric `n x n` matrix at `a`
    /// in `src` (its lower triangle is read): the eigenvalues ascending and `V` (`n x n`),
    /// through `syevd`. Waits for the stream once.
    ///
    /// # Errors
    ///
    /// As [`svd`](Self::svd).
    pub fn eigh<T: CudaScalar>(
        &self,
        src: &DeviceBuffer<T>,
        a: MatLayout,
    ) -> Result<DenseFactors<T>, CudaError> {
        let n = a.rows;
        if a.cols != n {
            return Err(CudaError::LengthMismatch {
                what: "square-matrix (eigh)",
                expected: n,
                given: a.cols,
            });
        }
        let mut work = self.work_copy(src, a)?;
        let mut w = self.alloc_zeros::<T>(n)?;
        let empty = self.alloc_zeros::<T>(0)?;
        if n == 0 {
            return Ok(DenseFactors {
                first: (work, 0, 0),
                second: (empty, 0, 0),
                values: Vec::new(),
            });
        }
        let ni = int(n, "rows")?;
        let h = self.solver()?;
        self.bind()?;
        let stream = self.stream().clone();
        let mut info = stream
            .alloc_zeros::<c_int>(1)
            .map_err(super::driver("allocate cuSOLVER's info"))?;
        {
            let (ap, _a) = work.as_cuda_slice_mut().device_ptr_mut(&stream);
            let (wp, _w) = w.as_cuda_slice_mut().device_ptr_mut(&stream);
            let mut lwork: c_int = 0;
            // SAFETY: `work` holds the `n x n` matrix (leading dim `n`) on this device, `w`
            // `n` elements; the size query reads no data.
            let status = unsafe {
                (T::SYEVD_SIZE)(
                    h,
                    VECTORS,
                    LOWER,
                    ni,
                    ap as *const T,
                    ni,
                    wp as *const T,
                    &mut lwork,
                )
            };
            ok(status, "size the eigensolver's workspace")?;
            let mut scratch = self.alloc_zeros::<T>(lwork.max(1) as usize)?;
            let (sp, _s) = scratch.as_cuda_slice_mut().device_ptr_mut(&stream);
            let (ip, _i) = info.device_ptr_mut(&stream);
            // SAFETY: as above, with the workspace cuSOLVER asked for.
            let status = unsafe {
                (T::SYEVD)(
                    h,
                    VECTORS,
                    LOWER,
                    ni,
                    ap as *mut T,
                    ni,
                    wp as *mut T,
                    sp as *mut T,
                    lwork,
                    ip as *mut c_int,
                )
            };
            ok(status, "run the eigensolver")?;
        }
        let values = self.finish(&info, Some(&w), "eigh")?;
        Ok(DenseFactors {
            first: (work, n, n),
            second: (empty, 0, 0),
            values,
        })
    }

    /// Copies the strided view `(offset, dims, strides)` of a dense factor into the matrix
    /// at `dst` of `out` (one permute-kernel launch, no host wait).
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::permute_copies`].
    pub fn copy_factor<T: CudaScalar>(
        &self,
        factor: &DeviceBuffer<T>,
        view: (usize, &[usize], &[isize]),
        out: &mut DeviceBuffer<T>,
        dst: MatLayout,
    ) -> Result<(), CudaError> {
        if dst.rows == 0 || dst.cols == 0 {
            return Ok(());
        }
        let moves = [super::PermuteMove {
            negate: false,
            offset: view.0,
            dims: view.1,
            strides: view.2,
            dst,
        }];
        self.permute_copies(factor, out, &moves)
    }
}
