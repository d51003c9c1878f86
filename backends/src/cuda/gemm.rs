//! cuBLAS GEMM over column-major matrices in device buffers.
//!
//! Owns: [`DeviceMat`], [`DeviceMatMut`], [`Op`], [`StridedBatch`], and
//! [`CudaDevice::gemm`] / [`CudaDevice::gemm_strided_batched`]. Invariant: cuBLAS is called
//! only after every operand's layout was checked to lie within its buffer (leading dim at least
//! max(1, rows), every batch member inside, C matrices of a batch apart), every buffer was
//! checked to be on the calling device, and every size fits cuBLAS's integers; otherwise the
//! call returns a [`CudaError`] and nothing is enqueued.

use super::device::{CudaDevice, CudaScalar, DeviceBuffer};
use super::{CudaError, cublas};
use crate::cpu::GemmShapeMismatch;
use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{GemmConfig, StridedBatchedConfig};
use cudarc::driver::CudaView;
use std::ffi::{c_int, c_longlong};

pub use crate::layout::MatLayout;

impl MatLayout {
    /// The dims of `op(self)`.
    pub(super) fn op_dims(&self, op: Op) -> (usize, usize) {
        match op {
            Op::Identity => (self.rows, self.cols),
            Op::Transpose => (self.cols, self.rows),
        }
    }

    /// Checks that `count` copies `stride` apart lie within `len` elements, and returns the
    /// elements they span from `offset`.
    pub(crate) fn check(
        &self,
        operand: &'static str,
        count: usize,
        stride: usize,
        len: usize,
    ) -> Result<usize, CudaError> {
        if self.ld < self.rows.max(1) {
            return Err(CudaError::LeadingDim {
                operand,
                rows: self.rows,
                ld: self.ld,
            });
        }
        let span = self.extent().and_then(|extent| {
            if extent == 0 || count == 0 {
                Some(0)
            } else {
                (count - 1).checked_mul(stride)?.checked_add(extent)
            }
        });
        let needed = span.and_then(|span| self.offset.checked_add(span));
        match (span, needed) {
            (Some(span), Some(needed)) if needed <= len => Ok(span),
            _ => Err(CudaError::OutOfBounds {
                operand,
                needed: needed.unwrap_or(usize::MAX),
                len,
            }),
        }
    }
}

/// What cuBLAS applies to an operand before the product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The matrix as stored.
    Identity,
    /// Its transpose (for real types also its conjugate transpose).
    Transpose,
}

impl Op {
    pub(super) fn cublas(self) -> cublasOperation_t {
        match self {
            Op::Identity => cublasOperation_t::CUBLAS_OP_N,
            Op::Transpose => cublasOperation_t::CUBLAS_OP_T,
        }
    }
}

/// A column-major matrix to read, in a device buffer.
#[derive(Debug, Clone, Copy)]
pub struct DeviceMat<'a, T> {
    /// The buffer.
    pub buf: &'a DeviceBuffer<T>,
    /// Where the matrix lies in it (for a batch, the first matrix).
    pub layout: MatLayout,
}

/// A column-major matrix to write, in a device buffer.
#[derive(Debug)]
pub struct DeviceMatMut<'a, T> {
    /// The buffer.
    pub buf: &'a mut DeviceBuffer<T>,
    /// Where the matrix lies in it (for a batch, the first matrix).
    pub layout: MatLayout,
}

impl<T> DeviceBuffer<T> {
    /// The matrix at `layout` in this buffer, to read (checked when used).
    pub fn mat(&self, layout: MatLayout) -> DeviceMat<'_, T> {
        DeviceMat { buf: self, layout }
    }

    /// The matrix at `layout` in this buffer, to write (checked when used).
    pub fn mat_mut(&mut self, layout: MatLayout) -> DeviceMatMut<'_, T> {
        DeviceMatMut { buf: self, layout }
    }
}

/// A uniform batch: `count` products, the `i`th with its A, B and C `i * stride_*` elements
/// past the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StridedBatch {
    /// Products in the batch.
    pub count: usize,
    /// Elements between consecutive A matrices (0 reuses one A).
    pub stride_a: usize,
    /// Elements between consecutive B matrices (0 reuses one B).
    pub stride_b: usize,
    /// Elements between consecutive C matrices; at least one C's extent when `count > 1`.
    pub stride_c: usize,
}

impl StridedBatch {
    /// One product: a batch of one, no strides.
    pub const ONE: Self = Self {
        count: 1,
        stride_a: 0,
        stride_b: 0,
        stride_c: 0,
    };
}

pub(super) fn int(what: &'static str, value: usize) -> Result<c_int, CudaError> {
    c_int::try_from(value).map_err(|_| CudaError::TooLarge {
        what,
        value,
        bits: 32,
    })
}

pub(super) fn long(what: &'static str, value: usize) -> Result<c_longlong, CudaError> {
    c_longlong::try_from(value).map_err(|_| CudaError::TooLarge {
        what,
        value,
        bits: 64,
    })
}

/// The checked pieces of one (batched) GEMM.
pub(super) struct Checked<T> {
    pub(super) cfg: GemmConfig<T>,
    /// `(offset, span)` of A, B and C in their buffers.
    pub(super) a: (usize, usize),
    pub(super) b: (usize, usize),
    pub(super) c: (usize, usize),
    /// Whether there is nothing to compute (C is empty).
    pub(super) empty: bool,
}

/// One operand as [`check`] sees it: where it lies, what cuBLAS applies to it, and the length
/// of its buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Operand {
    pub(super) layout: MatLayout,
    pub(super) op: Op,
    pub(super) len: usize,
}

impl<T> DeviceMat<'_, T> {
    fn operand(&self, op: Op) -> Operand {
        Operand {
            layout: self.layout,
            op,
            len: self.buf.len(),
        }
    }
}

impl<T> DeviceMatMut<'_, T> {
    fn operand(&self) -> Operand {
        Operand {
            layout: self.layout,
            op: Op::Identity,
            len: self.buf.len(),
        }
    }
}

/// Checks the dims, layouts and sizes of a (batched) GEMM against the buffers' lengths; needs
/// no device.
pub(super) fn check<T>(
    batch: StridedBatch,
    c: Operand,
    beta: T,
    a: Operand,
    b: Operand,
    alpha: T,
) -> Result<Checked<T>, CudaError> {
    let (a_rows, a_cols) = a.layout.op_dims(a.op);
    let (b_rows, b_cols) = b.layout.op_dims(b.op);
    let (m, n) = (c.layout.rows, c.layout.cols);
    if a_rows != m || b_cols != n || a_cols != b_rows {
        return Err(GemmShapeMismatch {
            c_rows: m,
            c_cols: n,
            a_rows,
            a_cols,
            b_rows,
            b_cols,
        }
        .into());
    }
    let k = a_cols;
    let span_a = a.layout.check("A", batch.count, batch.stride_a, a.len)?;
    let span_b = b.layout.check("B", batch.count, batch.stride_b, b.len)?;
    let span_c = c.layout.check("C", batch.count, batch.stride_c, c.len)?;
    let extent_c = c.layout.extent().unwrap_or(usize::MAX);
    if batch.count > 1 && extent_c > 0 && batch.stride_c < extent_c {
        return Err(CudaError::OverlappingBatch {
            stride: batch.stride_c,
            extent: extent_c,
        });
    }
    let cfg = GemmConfig {
        transa: a.op.cublas(),
        transb: b.op.cublas(),
        m: int("m (rows of C)", m)?,
        n: int("n (columns of C)", n)?,
        k: int("k (the inner dim)", k)?,
        alpha,
        lda: int("A's leading dim", a.layout.ld)?,
        ldb: int("B's leading dim", b.layout.ld)?,
        beta,
        ldc: int("C's leading dim", c.layout.ld)?,
    };
    Ok(Checked {
        cfg,
        a: (a.layout.offset, span_a),
        b: (b.layout.offset, span_b),
        c: (c.layout.offset, span_c),
        empty: m == 0 || n == 0 || batch.count == 0,
    })
}

impl CudaDevice {
    fn check_devices<T>(
        &self,
        c: &DeviceMatMut<'_, T>,
        a: &DeviceMat<'_, T>,
        b: &DeviceMat<'_, T>,
    ) -> Result<(), CudaError> {
        self.check_device("C", c.buf)?;
        self.check_device("A", a.buf)?;
        self.check_device("B", b.buf)
    }
}

/// The view `offset..offset + span` of a buffer whose layout `check` put inside it (an empty
/// operand, k = 0, may start at the end, which is still in range).
fn view<T>(buf: &DeviceBuffer<T>, (offset, span): (usize, usize)) -> CudaView<'_, T> {
    buf.as_cuda_slice().slice(offset..offset + span)
}

impl CudaDevice {
    /// `C <- alpha * op(A) op(B) + beta * C` with cuBLAS (`sgemm`/`dgemm`), all three
    /// column-major; enqueued on this device's stream (it returns before the product is done).
    /// A `beta` of zero never reads C, as in BLAS. Shaped like [`crate::cpu::gemm`], with
    /// transposes for conjugations.
    ///
    /// # Errors
    ///
    /// [`CudaError::Shape`] when the dims do not fit, [`CudaError::LeadingDim`] /
    /// [`CudaError::OutOfBounds`] for a layout outside its buffer, [`CudaError::WrongDevice`],
    /// [`CudaError::TooLarge`]; in each case nothing is enqueued. [`CudaError::Cublas`] if
    /// cuBLAS refuses the call.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm<T: CudaScalar>(
        &self,
        c: DeviceMatMut<'_, T>,
        beta: T,
        a: DeviceMat<'_, T>,
        op_a: Op,
        b: DeviceMat<'_, T>,
        op_b: Op,
        alpha: T,
    ) -> Result<(), CudaError> {
        self.check_devices(&c, &a, &b)?;
        let checked = check(
            StridedBatch::ONE,
            c.operand(),
            beta,
            a.operand(op_a),
            b.operand(op_b),
            alpha,
        )?;
        if checked.empty {
            return Ok(());
        }
        self.bind()?;
        let (a_view, b_view) = (view(a.buf, checked.a), view(b.buf, checked.b));
        let (c_offset, c_span) = checked.c;
        let mut c_view = c
            .buf
            .as_cuda_slice_mut()
            .slice_mut(c_offset..c_offset + c_span);
        // SAFETY: `check` put A, B and C (leading dims at least max(1, rows)) inside the views
        // handed over, all on this device, whose context was just made current; C's buffer is
        // borrowed mutably, so it is neither A's nor B's. cudarc orders the call on the
        // handle's stream, which is this device's.
        unsafe { T::gemm(&self.blas, checked.cfg, &a_view, &b_view, &mut c_view) }
            .map_err(cublas("run a GEMM"))
    }

    /// `C_i <- alpha * op(A_i) op(B_i) + beta * C_i` for the `batch.count` products of a
    /// uniform batch, with cuBLAS's strided-batched GEMM; the layouts given are those of the
    /// first product, and the others lie `batch.stride_*` elements further on. Enqueued on
    /// this device's stream.
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::gemm`] (checked for every product of the batch), and
    /// [`CudaError::OverlappingBatch`] when `batch.stride_c` is under one C's extent.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_strided_batched<T: CudaScalar>(
        &self,
        batch: StridedBatch,
        c: DeviceMatMut<'_, T>,
        beta: T,
        a: DeviceMat<'_, T>,
        op_a: Op,
        b: DeviceMat<'_, T>,
        op_b: Op,
        alpha: T,
    ) -> Result<(), CudaError> {
        self.check_devices(&c, &a, &b)?;
        let checked = check(
            batch,
            c.operand(),
            beta,
            a.operand(op_a),
            b.operand(op_b),
            alpha,
        )?;
        if checked.empty {
            return Ok(());
        }
        let cfg = StridedBatchedConfig {
            gemm: checked.cfg,
            batch_size: int("the batch count", batch.count)?,
            stride_a: long("A's batch stride", batch.stride_a)?,
            stride_b: long("B's batch stride", batch.stride_b)?,
            stride_c: long("C's batch stride", batch.stride_c)?,
        };
        self.bind()?;
        let (a_view, b_view) = (view(a.buf, checked.a), view(b.buf, checked.b));
        let (c_offset, c_span) = checked.c;
        let mut c_view = c
            .buf
            .as_cuda_slice_mut()
            .slice_mut(c_offset..c_offset + c_span);
        // SAFETY: as in `gemm`, for every product of the batch (`check` bounds the last one),
        // and the C matrices are at least one extent apart, so no two products write one
        // element.
        unsafe { T::gemm_strided_batched(&self.blas, cfg, &a_view, &b_view, &mut c_view) }
            .map_err(cublas("run a strided-batched GEMM"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs everywhere: a matrix's runs are its elements in order, one range when its
    /// columns abut, none when it is empty.
    #[test]
    fn runs_cover_exactly_the_elements() {
        let at = |offset, rows, cols, ld| MatLayout {
            offset,
            rows,
            cols,
            ld,
        };
        let ends = |m: MatLayout| m.runs().map(|r| (r.start, r.end)).collect::<Vec<_>>();
        assert_eq!(ends(at(5, 3, 4, 3)), [(5, 17)]);
        assert_eq!(ends(at(5, 2, 3, 4)), [(5, 7), (9, 11), (13, 15)]);
        assert_eq!(at(5, 0, 3, 1).runs().count(), 0);
        assert_eq!(at(5, 2, 0, 2).runs().count(), 0);
        for m in [at(1, 3, 4, 7), at(0, 4, 2, 4), at(2, 1, 5, 3)] {
            let elements: Vec<usize> = (0..m.cols)
                .flat_map(|j| (0..m.rows).map(move |i| m.offset + j * m.ld + i))
                .collect();
            assert_eq!(m.runs().flatten().collect::<Vec<_>>(), elements);
        }
    }

    /// Runs everywhere: the layout checks need no device.
    #[test]
    fn layouts_are_checked_against_their_buffers() {
        let l = MatLayout {
            offset: 3,
            rows: 4,
            cols: 5,
            ld: 6,
        };
        assert_eq!(l.extent(), Some(4 * 6 + 4));
        assert_eq!(l.check("A", 1, 0, 3 + 28), Ok(28));
        assert_eq!(
            l.check("A", 1, 0, 30),
            Err(CudaError::OutOfBounds {
                operand: "A",
                needed: 31,
                len: 30
            })
        );
        // Three copies 40 apart: the last ends at 3 + 80 + 28.
        assert_eq!(l.check("B", 3, 40, 111), Ok(108));
        assert!(l.check("B", 3, 40, 110).is_err());
        let thin = MatLayout { ld: 3, ..l };
        let err = thin.check("C", 1, 0, 100).unwrap_err();
        assert_eq!(
            err,
            CudaError::LeadingDim {
                operand: "C",
                rows: 4,
                ld: 3
            }
        );
        assert!(err.to_string().contains("at least max(1, 4)"), "{err}");
        // An empty matrix spans nothing and may sit at the end; ld 0 is still refused.
        let empty = MatLayout::contiguous(0, 7);
        assert_eq!(empty.ld, 1);
        assert_eq!(
            MatLayout { offset: 9, ..empty }.check("A", 5, 100, 9),
            Ok(0)
        );
        assert!(MatLayout { ld: 0, ..empty }.check("A", 1, 0, 9).is_err());
        // Overflow is out of bounds, not a wrap.
        let huge = MatLayout {
            offset: 0,
            rows: 2,
            cols: usize::MAX,
            ld: 2,
        };
        assert_eq!(huge.extent(), None);
        assert!(matches!(
            huge.check("A", 1, 0, 10),
            Err(CudaError::OutOfBounds {
                needed: usize::MAX,
                ..
            })
        ));
        assert_eq!(l.op_dims(Op::Transpose), (5, 4));
        assert_eq!(
            int("m", 1 << 31).unwrap_err().to_string(),
            "expected m to fit CUDA's 32-bit integers, but was given 2147483648"
        );
    }

    fn operand(rows: usize, cols: usize, op: Op, len: usize) -> Operand {
        Operand {
            layout: MatLayout::contiguous(rows, cols),
            op,
            len,
        }
    }

    const ONE: StridedBatch = StridedBatch::ONE;

    /// Runs everywhere: what a GEMM call checks before it reaches cuBLAS.
    #[test]
    fn gemm_dims_and_batches_are_checked_before_any_call() {
        // C (3 x 2) = A^T (A stored 4 x 3) B (4 x 2).
        let c = operand(3, 2, Op::Identity, 6);
        let a = operand(4, 3, Op::Transpose, 12);
        let b = operand(4, 2, Op::Identity, 8);
        let ok = check(ONE, c, 0.0_f64, a, b, 1.0).unwrap();
        assert_eq!((ok.cfg.m, ok.cfg.n, ok.cfg.k), (3, 2, 4));
        assert_eq!((ok.cfg.lda, ok.cfg.ldb, ok.cfg.ldc), (4, 4, 3));
        assert_eq!(ok.cfg.transa, cublasOperation_t::CUBLAS_OP_T);
        assert_eq!(
            (ok.a, ok.b, ok.c, ok.empty),
            ((0, 12), (0, 8), (0, 6), false)
        );
        // Without the transpose, op(A) is 4 x 3: refused with the dims of op(A) and op(B).
        let err = check(
            ONE,
            c,
            0.0_f64,
            Operand {
                op: Op::Identity,
                ..a
            },
            b,
            1.0,
        )
        .err()
        .unwrap();
        assert_eq!(
            err,
            CudaError::Shape(GemmShapeMismatch {
                c_rows: 3,
                c_cols: 2,
                a_rows: 4,
                a_cols: 3,
                b_rows: 4,
                b_cols: 2,
            })
        );
        assert!(err.to_string().starts_with("expected C (3 x 2)"), "{err}");
        // A buffer too short for B.
        let err = check(ONE, c, 0.0_f64, a, Operand { len: 7, ..b }, 1.0)
            .err()
            .unwrap();
        assert!(matches!(
            err,
            CudaError::OutOfBounds {
                operand: "B",
                needed: 8,
                len: 7
            }
        ));
        // An empty C is nothing to do, whatever k is.
        let empty = check(
            ONE,
            operand(0, 2, Op::Identity, 0),
            0.0_f64,
            operand(4, 0, Op::Transpose, 0),
            b,
            1.0,
        )
        .unwrap();
        assert!(empty.empty);
        // Batches: every member in bounds, C members apart, counts that fit.
        let batch = StridedBatch {
            count: 3,
            stride_a: 12,
            stride_b: 0,
            stride_c: 6,
        };
        let ok = check(
            batch,
            Operand { len: 18, ..c },
            1.0_f32,
            Operand { len: 36, ..a },
            b,
            2.0,
        )
        .unwrap();
        assert_eq!((ok.a, ok.b, ok.c), ((0, 36), (0, 8), (0, 18)));
        let err = check(
            batch,
            Operand { len: 18, ..c },
            1.0_f32,
            Operand { len: 35, ..a },
            b,
            2.0,
        )
        .err()
        .unwrap();
        assert!(matches!(
            err,
            CudaError::OutOfBounds {
                operand: "A",
                needed: 36,
                len: 35
            }
        ));
        let err = check(
            StridedBatch {
                stride_c: 5,
                ..batch
            },
            Operand { len: 18, ..c },
            1.0_f32,
            Operand { len: 36, ..a },
            b,
            2.0,
        )
        .err()
        .unwrap();
        assert_eq!(
            err,
            CudaError::OverlappingBatch {
                stride: 5,
                extent: 6
            }
        );
        // A dim past cuBLAS's 32-bit integers.
        let wide = 1_usize << 31;
        let err = check(
            ONE,
            Operand {
                len: usize::MAX,
                ..operand(1, wide, Op::Identity, 0)
            },
            0.0_f64,
            Operand {
                len: usize::MAX,
                ..operand(1, 1, Op::Identity, 0)
            },
            Operand {
                len: usize::MAX,
                ..operand(1, wide, Op::Identity, 0)
            },
            1.0,
        )
        .err()
        .unwrap();
        assert_eq!(
            err,
            CudaError::TooLarge {
                what: "n (columns of C)",
                value: wide,
                bits: 32
            }
        );
    }
}
