//! Pointer-array GEMM: many products at arbitrary offsets within three device buffers, in one
//! cuBLAS call (`cublas?gemmBatched` for one shape, `cublas?gemmGroupedBatched` for groups of
//! shapes).
//!
//! Owns: [`GemmEntry`], [`GemmGroup`], [`BatchBuffers`], [`CudaDevice::gemm_batched`] and
//! [`CudaDevice::gemm_grouped`].
//!
//! Invariant: cuBLAS is called only after [`check_group`] and [`check_disjoint`] (pure
//! functions) saw every product's A, B and C inside their buffers with dims that fit, every
//! product of a group of one shape, no two C matrices of the call sharing an element, and every
//! size within cuBLAS's 32-bit integers; otherwise the call returns a [`CudaError`] and nothing
//! is enqueued or written.
//!
//! The pointer arrays: built on the host from the checked layouts (buffer base plus offset),
//! uploaded in one stream-ordered copy into a fresh device allocation, read by cuBLAS on the
//! stream, and freed when the call returns by dropping that allocation. The free is itself
//! stream-ordered: cudarc frees with `cuMemFreeAsync` on the device's stream when the device
//! has memory pools (every GPU this backend targets), so the memory goes back to the pool only
//! once the stream has run the GEMM before it; without memory pools cudarc synchronizes the
//! stream before `cuMemFree`. Either way no pending kernel reads freed memory. The host vector
//! of pointers may go as soon as the copy is enqueued: a copy from pageable memory is staged
//! before `cuMemcpyHtoDAsync` returns (at the cost that the driver may wait on the stream to
//! stage it; a pinned, reused staging area is left for later).

use super::blas1::element;
use super::device::{CudaDevice, CudaScalar, DeviceBuffer};
use super::gemm::{self, MatLayout, Op, Operand, StridedBatch};
use super::{CudaError, cublas, driver};
use cudarc::cublas::sys::cublasOperation_t;
use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{DevicePtr, DevicePtrMut};
use std::ffi::c_int;

/// Where one product of a pointer-array call lies: its A, B and C, each in the call's buffer
/// for that operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmEntry {
    /// A, as stored (before its op).
    pub a: MatLayout,
    /// B, as stored.
    pub b: MatLayout,
    /// C.
    pub c: MatLayout,
}

/// Products of one shape: `C_i <- alpha * op_a(A_i) op_b(B_i) + beta * C_i` for every entry.
/// Every entry must have the first's rows, columns and leading dims for each operand.
#[derive(Debug, Clone, Copy)]
pub struct GemmGroup<'a, T> {
    /// What cuBLAS applies to every A.
    pub op_a: Op,
    /// What cuBLAS applies to every B.
    pub op_b: Op,
    /// Scales the products.
    pub alpha: T,
    /// Scales the old C (zero: C is not read).
    pub beta: T,
    /// The products.
    pub entries: &'a [GemmEntry],
}

/// The three buffers of a pointer-array call: every A lies in `a`, every B in `b` (possibly
/// the same buffer), every C in `c`.
#[derive(Debug)]
pub struct BatchBuffers<'a, T> {
    /// Holds every C.
    pub c: &'a mut DeviceBuffer<T>,
    /// Holds every A.
    pub a: &'a DeviceBuffer<T>,
    /// Holds every B.
    pub b: &'a DeviceBuffer<T>,
}

/// A checked group: cuBLAS's integers and scalars for it, and how many products it has.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GroupShape<T> {
    pub(crate) transa: cublasOperation_t,
    pub(crate) transb: cublasOperation_t,
    pub(crate) m: c_int,
    pub(crate) n: c_int,
    pub(crate) k: c_int,
    pub(crate) lda: c_int,
    pub(crate) ldb: c_int,
    pub(crate) ldc: c_int,
    pub(crate) alpha: T,
    pub(crate) beta: T,
    pub(crate) count: c_int,
    /// Whether there is nothing to compute (no entries, or an empty C).
    pub(crate) empty: bool,
}

fn dims(l: &MatLayout) -> [usize; 3] {
    [l.rows, l.cols, l.ld]
}

/// Checks group `group` against buffers of `lens = [a, b, c]` elements: every entry's dims
/// fit its ops, every matrix lies in its buffer, every entry has the first's dims, and the
/// sizes fit cuBLAS. Needs no device.
pub(crate) fn check_group<T: Copy>(
    group: usize,
    g: &GemmGroup<'_, T>,
    [a_len, b_len, c_len]: [usize; 3],
) -> Result<GroupShape<T>, CudaError> {
    let count = gemm::int("a group's product count", g.entries.len())?;
    let Some(first) = g.entries.first() else {
        // No entries: nothing to compute; the integers are never handed to cuBLAS.
        return Ok(GroupShape {
            transa: g.op_a.cublas(),
            transb: g.op_b.cublas(),
            m: 0,
            n: 0,
            k: 0,
            lda: 1,
            ldb: 1,
            ldc: 1,
            alpha: g.alpha,
            beta: g.beta,
            count,
            empty: true,
        });
    };
    let check_entry = |e: &GemmEntry| {
        gemm::check(
            StridedBatch::ONE,
            Operand {
                layout: e.c,
                op: Op::Identity,
                len: c_len,
            },
            g.beta,
            Operand {
                layout: e.a,
                op: g.op_a,
                len: a_len,
            },
            Operand {
                layout: e.b,
                op: g.op_b,
                len: b_len,
            },
            g.alpha,
        )
    };
    // Every entry must have the first's dims, so the first's checked config is the group's.
    let checked = check_entry(first)?;
    for (index, e) in g.entries.iter().enumerate().skip(1) {
        for (operand, want, got) in [
            ("A", &first.a, &e.a),
            ("B", &first.b, &e.b),
            ("C", &first.c, &e.c),
        ] {
            if dims(want) != dims(got) {
                return Err(CudaError::UnequalBatch {
                    group,
                    entry: index,
                    operand,
                    expected: dims(want),
                    given: dims(got),
                });
            }
        }
        check_entry(e)?;
    }
    let (cfg, empty) = (checked.cfg, checked.empty);
    Ok(GroupShape {
        transa: cfg.transa,
        transb: cfg.transb,
        m: cfg.m,
        n: cfg.n,
        k: cfg.k,
        lda: cfg.lda,
        ldb: cfg.ldb,
        ldc: cfg.ldc,
        alpha: cfg.alpha,
        beta: cfg.beta,
        count,
        empty,
    })
}

/// Whether two matrices of one leading dim `ld` (each with `rows <= ld`, neither empty)
/// share an element, exactly. Seen from `x`'s first element, `y` starts `q` columns and `r`
/// rows on; a column of `y` that runs past row `ld` wraps into the next column of the grid,
/// so `y` covers rows `r..min(r + rows, ld)` of columns `q..` and rows `0..r + rows - ld` of
/// columns `q + 1..`.
fn same_ld_overlap(x: &MatLayout, y: &MatLayout) -> bool {
    let (x, y) = if x.offset <= y.offset { (x, y) } else { (y, x) };
    let ld = x.ld;
    let (q, r) = ((y.offset - x.offset) / ld, (y.offset - x.offset) % ld);
    let meets = |[a0, a1]: [usize; 2], [b0, b1]: [usize; 2]| a0 < b1 && b0 < a1;
    let columns = |shift: usize| meets([0, x.cols], [q + shift, q + shift + y.cols]);
    let rows = [0, x.rows];
    (meets(rows, [r, (r + y.rows).min(ld)]) && columns(0))
        || (r + y.rows > ld && meets(rows, [0, r + y.rows - ld]) && columns(1))
}

/// Whether two C matrices may share an element: exactly for two of one leading dim
/// (disjoint sub-blocks of one larger matrix, wherever it starts, pass), and by their extents
/// otherwise (conservative: interleaved layouts of different leading dims are refused). The
/// batched and grouped GEMMs refuse C matrices for which this holds; it needs no device.
pub fn may_overlap(x: &MatLayout, y: &MatLayout) -> bool {
    let (Some(ex), Some(ey)) = (x.extent(), y.extent()) else {
        return true;
    };
    if ex == 0 || ey == 0 {
        return false;
    }
    if !(x.offset < y.offset + ey && y.offset < x.offset + ex) {
        return false;
    }
    if x.ld == y.ld && x.rows <= x.ld && y.rows <= y.ld {
        return same_ld_overlap(x, y);
    }
    true
}

/// Checks that no two of the C matrices (labelled `(group, entry)`) share an element, as
/// [`may_overlap`] decides; the layouts were checked before (leading dims, no overflow).
/// Sorts by offset and compares each matrix with those whose extent reaches it. Needs no
/// device.
pub(crate) fn check_disjoint(cs: &[((usize, usize), MatLayout)]) -> Result<(), CudaError> {
    let mut order: Vec<usize> = (0..cs.len())
        .filter(|&i| cs[i].1.extent().is_some_and(|e| e > 0))
        .collect();
    order.sort_by_key(|&i| cs[i].1.offset);
    // Matrices whose extent may still reach later ones, with their ends.
    let mut open: Vec<(usize, usize)> = Vec::new();
    for &i in &order {
        let l = &cs[i].1;
        let end = l.offset + l.extent().unwrap_or(usize::MAX - l.offset);
        open.retain(|&(_, open_end)| open_end > l.offset);
        for &(j, _) in &open {
            if may_overlap(&cs[j].1, l) {
                let (first, second) = if j < i { (j, i) } else { (i, j) };
                return Err(CudaError::OverlappingOutputs {
                    first: cs[first].0,
                    second: cs[second].0,
                });
            }
        }
        open.push((i, end));
    }
    Ok(())
}

/// The device pointer arrays of one call, on the host: every entry's A, then every B, then
/// every C, as the buffers' base addresses plus the checked offsets.
pub(crate) fn pointer_arrays<T>(
    [a_base, b_base, c_base]: [CUdeviceptr; 3],
    entries: &[GemmEntry],
) -> Vec<CUdeviceptr> {
    let mut ptrs = Vec::with_capacity(3 * entries.len());
    ptrs.extend(entries.iter().map(|e| element::<T>(a_base, e.a.offset)));
    ptrs.extend(entries.iter().map(|e| element::<T>(b_base, e.b.offset)));
    ptrs.extend(entries.iter().map(|e| element::<T>(c_base, e.c.offset)));
    ptrs
}

impl CudaDevice {
    pub(super) fn check_batch_devices<T>(
        &self,
        bufs: &BatchBuffers<'_, T>,
    ) -> Result<(), CudaError> {
        self.check_device("C", bufs.c)?;
        self.check_device("A", bufs.a)?;
        self.check_device("B", bufs.b)
    }

    /// `C_i <- alpha * op(A_i) op(B_i) + beta * C_i` for every entry of `group`, all of one
    /// shape, at any offsets within the three buffers, with one `cublas?gemmBatched` call on
    /// this device's stream (it returns once enqueued). See the module doc for how the
    /// pointer arrays are kept alive.
    ///
    /// # Errors
    ///
    /// [`CudaError::WrongDevice`], [`CudaError::Shape`], [`CudaError::LeadingDim`],
    /// [`CudaError::OutOfBounds`], [`CudaError::UnequalBatch`],
    /// [`CudaError::OverlappingOutputs`], [`CudaError::TooLarge`]: nothing is enqueued.
    /// [`CudaError::Driver`] if the pointer upload fails, [`CudaError::Cublas`] if cuBLAS
    /// refuses the call.
    pub fn gemm_batched<T: CudaScalar>(
        &self,
        bufs: BatchBuffers<'_, T>,
        group: GemmGroup<'_, T>,
    ) -> Result<(), CudaError> {
        self.check_batch_devices(&bufs)?;
        let lens = [bufs.a.len(), bufs.b.len(), bufs.c.len()];
        let shape = check_group(0, &group, lens)?;
        let cs: Vec<_> = (group.entries.iter().enumerate())
            .map(|(entry, e)| ((0, entry), e.c))
            .collect();
        check_disjoint(&cs)?;
        if shape.empty {
            return Ok(());
        }
        let count = group.entries.len();
        self.bind()?;
        let stream = self.stream();
        let (a_base, _a_read) = bufs.a.as_cuda_slice().device_ptr(stream);
        let (b_base, _b_read) = bufs.b.as_cuda_slice().device_ptr(stream);
        let (c_base, _c_write) = bufs.c.as_cuda_slice_mut().device_ptr_mut(stream);
        let host = pointer_arrays::<T>([a_base, b_base, c_base], group.entries);
        let arrays = stream
            .clone_htod(&host)
            .map_err(driver("copy GEMM pointer arrays to the device"))?;
        let (arrays_base, _arrays_read) = arrays.device_ptr(stream);
        let at = |i: usize| element::<CUdeviceptr>(arrays_base, i * count);
        // SAFETY: `check_group` put every entry's A, B and C inside their buffers, all of one
        // shape, and `check_disjoint` kept the C matrices apart; the buffers are on this
        // device, whose context is current, and C's buffer is borrowed mutably, so it is
        // neither A's nor B's. The three pointer arrays of `count` device pointers each lie in
        // `arrays`, uploaded earlier on this stream; `arrays` is freed stream-ordered after
        // this call (module doc). `alpha` and `beta` are host values read during the call
        // (host pointer mode). The guards record the buffers' use after the call is enqueued.
        unsafe {
            (T::GEMM_BATCHED)(
                *self.blas.handle(),
                shape.transa,
                shape.transb,
                shape.m,
                shape.n,
                shape.k,
                &shape.alpha,
                at(0) as *const *const T,
                shape.lda,
                at(1) as *const *const T,
                shape.ldb,
                &shape.beta,
                at(2) as *const *mut T,
                shape.ldc,
                shape.count,
            )
        }
        .result()
        .map_err(cublas("run a pointer-array batched GEMM"))
    }

    /// Every group of `groups` (each of one shape, op pair and scalars; shapes may differ from
    /// group to group) in one `cublas?gemmGroupedBatched` call on this device's stream. Groups
    /// with no entries or an empty C are left out. Needs cuBLAS 12.5 or later (checked:
    /// [`CudaError::MissingSymbol`] on an older one).
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::gemm_batched`], for every group, with no two C matrices of the whole
    /// call sharing an element; and [`CudaError::MissingSymbol`] for a cuBLAS without grouped
    /// GEMM.
    pub fn gemm_grouped<T: CudaScalar>(
        &self,
        bufs: BatchBuffers<'_, T>,
        groups: &[GemmGroup<'_, T>],
    ) -> Result<(), CudaError> {
        self.check_batch_devices(&bufs)?;
        let lens = [bufs.a.len(), bufs.b.len(), bufs.c.len()];
        let mut shapes = Vec::with_capacity(groups.len());
        let mut entries = Vec::new();
        for (index, group) in groups.iter().enumerate() {
            let shape = check_group(index, group, lens)?;
            if !shape.empty {
                shapes.push(shape);
                entries.extend_from_slice(group.entries);
            }
        }
        let cs: Vec<_> = (groups.iter().enumerate())
            .flat_map(|(g, group)| {
                (group.entries.iter().enumerate()).map(move |(i, e)| ((g, i), e.c))
            })
            .collect();
        check_disjoint(&cs)?;
        gemm::int("the grouped call's product count", entries.len())?;
        let group_count = gemm::int("the group count", shapes.len())?;
        if shapes.is_empty() {
            return Ok(());
        }
        super::probe_grouped()?;
        let column = |f: fn(&GroupShape<T>) -> c_int| shapes.iter().map(f).collect::<Vec<_>>();
        let (m, n, k) = (column(|s| s.m), column(|s| s.n), column(|s| s.k));
        let (lda, ldb, ldc) = (column(|s| s.lda), column(|s| s.ldb), column(|s| s.ldc));
        let sizes = column(|s| s.count);
        let transa: Vec<_> = shapes.iter().map(|s| s.transa).collect();
        let transb: Vec<_> = shapes.iter().map(|s| s.transb).collect();
        let alpha: Vec<T> = shapes.iter().map(|s| s.alpha).collect();
        let beta: Vec<T> = shapes.iter().map(|s| s.beta).collect();
        let count = entries.len();
        self.bind()?;
        let stream = self.stream();
        let (a_base, _a_read) = bufs.a.as_cuda_slice().device_ptr(stream);
        let (b_base, _b_read) = bufs.b.as_cuda_slice().device_ptr(stream);
        let (c_base, _c_write) = bufs.c.as_cuda_slice_mut().device_ptr_mut(stream);
        let host = pointer_arrays::<T>([a_base, b_base, c_base], &entries);
        let arrays = stream
            .clone_htod(&host)
            .map_err(driver("copy GEMM pointer arrays to the device"))?;
        let (arrays_base, _arrays_read) = arrays.device_ptr(stream);
        let at = |i: usize| element::<CUdeviceptr>(arrays_base, i * count);
        // SAFETY: as in `gemm_batched`, group by group: the entries of the non-empty groups
        // are in `entries` in group order, matching `sizes`, and their pointers fill the
        // three device arrays of `count` each. The host arrays (`group_count` entries each,
        // alpha and beta included, host pointer mode) live until after the call returns.
        unsafe {
            (T::GEMM_GROUPED)(
                *self.blas.handle(),
                transa.as_ptr(),
                transb.as_ptr(),
                m.as_ptr(),
                n.as_ptr(),
                k.as_ptr(),
                alpha.as_ptr(),
                at(0) as *const *const T,
                lda.as_ptr(),
                at(1) as *const *const T,
                ldb.as_ptr(),
                beta.as_ptr(),
                at(2) as *const *mut T,
                ldc.as_ptr(),
                group_count,
                sizes.as_ptr(),
            )
        }
        .result()
        .map_err(cublas("run a grouped GEMM"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::GemmShapeMismatch;

    fn at(offset: usize, rows: usize, cols: usize, ld: usize) -> MatLayout {
        MatLayout {
            offset,
            rows,
            cols,
            ld,
        }
    }

    fn group(entries: &[GemmEntry], op_a: Op) -> GemmGroup<'_, f64> {
        GemmGroup {
            op_a,
            op_b: Op::Identity,
            alpha: 2.0,
            beta: 0.5,
            entries,
        }
    }

    /// Runs everywhere: what a pointer-array batch checks before any call.
    #[test]
    fn groups_are_checked_entry_by_entry() {
        // C (2 x 3) = A^T (A stored 4 x 2) B (4 x 3), two products at arbitrary offsets.
        let entries = [
            GemmEntry {
                a: at(0, 4, 2, 4),
                b: at(5, 4, 3, 5),
                c: at(1, 2, 3, 2),
            },
            GemmEntry {
                a: at(8, 4, 2, 4),
                b: at(0, 4, 3, 5),
                c: at(20, 2, 3, 2),
            },
        ];
        let shape = check_group(0, &group(&entries, Op::Transpose), [16, 20, 26]).unwrap();
        assert_eq!(
            (shape.m, shape.n, shape.k, shape.lda, shape.ldb, shape.ldc),
            (2, 3, 4, 4, 5, 2)
        );
        assert_eq!(shape.transa, cublasOperation_t::CUBLAS_OP_T);
        assert_eq!(
            (shape.alpha, shape.beta, shape.count, shape.empty),
            (2.0, 0.5, 2, false)
        );
        // The second A one element past its buffer.
        assert_eq!(
            check_group(0, &group(&entries, Op::Transpose), [15, 20, 26]).unwrap_err(),
            CudaError::OutOfBounds {
                operand: "A",
                needed: 16,
                len: 15
            }
        );
        // Without the transpose the dims do not fit.
        assert!(matches!(
            check_group(0, &group(&entries, Op::Identity), [16, 20, 26]),
            Err(CudaError::Shape(GemmShapeMismatch { a_rows: 4, .. }))
        ));
        // An entry of another shape: named by group, entry and operand.
        let mut uneven = entries;
        uneven[1].b = at(0, 4, 3, 4);
        let err = check_group(3, &group(&uneven, Op::Transpose), [16, 20, 26]).unwrap_err();
        assert_eq!(
            err,
            CudaError::UnequalBatch {
                group: 3,
                entry: 1,
                operand: "B",
                expected: [4, 3, 5],
                given: [4, 3, 4]
            }
        );
        assert_eq!(
            err.to_string(),
            "expected every B of group 3 to be 4 x 3 with leading dim 5, like its first, \
             but entry 1 is 4 x 3 with leading dim 4"
        );
        // No entries, or an empty C: nothing to compute.
        assert!(
            check_group(0, &group(&[], Op::Identity), [0, 0, 0])
                .unwrap()
                .empty
        );
        let empty_c = [GemmEntry {
            a: at(0, 0, 4, 1),
            b: at(0, 4, 3, 4),
            c: at(0, 0, 3, 1),
        }];
        assert!(
            check_group(0, &group(&empty_c, Op::Identity), [0, 12, 0])
                .unwrap()
                .empty
        );
    }

    /// Runs everywhere: on small random layouts, `may_overlap` is the element sets' answer for
    /// one leading dim, and never misses a shared element for two.
    #[test]
    fn may_overlap_agrees_with_the_element_sets() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut draw = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let elements = |l: &MatLayout| -> std::collections::HashSet<usize> {
            (0..l.cols)
                .flat_map(|j| (0..l.rows).map(move |i| l.offset + j * l.ld + i))
                .collect()
        };
        let (mut same, mut shared) = (0, 0);
        for _ in 0..20_000 {
            // One leading dim for both every other time (rows up to 4, so it fits), else each
            // its own.
            let shared_ld = (draw(2) == 0).then(|| 4 + draw(3));
            let [x, y] = [0; 2].map(|_| {
                let rows = draw(5);
                let ld = shared_ld.unwrap_or(rows.max(1) + draw(4));
                at(draw(40), rows, draw(5), ld)
            });
            let truth = !elements(&x).is_disjoint(&elements(&y));
            let said = may_overlap(&x, &y);
            assert_eq!(said, may_overlap(&y, &x), "{x:?} {y:?}: not symmetric");
            if x.ld == y.ld {
                assert_eq!(said, truth, "{x:?} {y:?}");
                same += 1;
                shared += usize::from(truth);
            } else {
                assert!(said || !truth, "{x:?} {y:?}: a shared element missed");
            }
        }
        // Both answers were exercised.
        assert!(
            same > 5_000 && shared > 500 && same - shared > 500,
            "{same} {shared}"
        );
    }

    /// Runs everywhere: C matrices that share an element are refused, sub-blocks of one
    /// larger matrix are not.
    #[test]
    fn outputs_must_be_disjoint() {
        // Four 2 x 2 blocks of one 4 x 4 matrix (ld 4): extents interleave, elements do not.
        let blocks = [
            at(0, 2, 2, 4),
            at(2, 2, 2, 4),
            at(8, 2, 2, 4),
            at(10, 2, 2, 4),
        ];
        assert!(!may_overlap(&blocks[0], &blocks[1]));
        let labelled: Vec<_> = blocks
            .iter()
            .enumerate()
            .map(|(i, &l)| ((0, i), l))
            .collect();
        assert_eq!(check_disjoint(&labelled), Ok(()));
        // A 3 x 3 block from row 1 meets the 2 x 2 at the origin.
        let mut clash = labelled.clone();
        clash.push(((1, 0), at(5, 3, 3, 4)));
        assert_eq!(
            check_disjoint(&clash),
            Err(CudaError::OverlappingOutputs {
                first: (0, 0),
                second: (1, 0)
            })
        );
        // Consecutive dense matrices touch but do not overlap; one element more does.
        assert!(!may_overlap(&at(0, 3, 2, 3), &at(6, 3, 2, 3)));
        assert!(may_overlap(&at(0, 3, 2, 3), &at(5, 3, 2, 3)));
        // Sub-blocks of a matrix that starts mid-column (ld 4, at 5): apart, however they
        // wrap in the grid from 0; a block one row lower meets both.
        assert!(!may_overlap(&at(5, 2, 3, 4), &at(7, 2, 3, 4)));
        assert!(may_overlap(&at(5, 2, 3, 4), &at(6, 2, 3, 4)));
        assert!(may_overlap(&at(7, 2, 3, 4), &at(6, 2, 3, 4)));
        assert!(may_overlap(&at(3, 2, 2, 4), &at(4, 1, 1, 4)));
        // Another leading dim: by extents.
        assert!(may_overlap(&at(0, 2, 2, 4), &at(2, 2, 1, 2)));
        assert!(!may_overlap(&at(0, 2, 2, 4), &at(6, 2, 1, 2)));
        // Empty matrices overlap nothing; one matrix twice does.
        assert!(!may_overlap(&at(0, 0, 5, 1), &at(0, 2, 2, 2)));
        assert!(check_disjoint(&[((0, 0), at(0, 2, 2, 2)), ((0, 1), at(0, 2, 2, 2))]).is_err());
        let err = CudaError::OverlappingOutputs {
            first: (0, 1),
            second: (2, 0),
        };
        assert_eq!(
            err.to_string(),
            "expected the C matrices of one batched call to share no element, but entry 1 of \
             group 0 and entry 0 of group 2 may"
        );
    }

    #[test]
    fn pointer_arrays_hold_a_then_b_then_c() {
        let entries = [
            GemmEntry {
                a: at(1, 1, 1, 1),
                b: at(2, 1, 1, 1),
                c: at(3, 1, 1, 1),
            },
            GemmEntry {
                a: at(10, 1, 1, 1),
                b: at(0, 1, 1, 1),
                c: at(4, 1, 1, 1),
            },
        ];
        let ptrs = pointer_arrays::<f64>([0x1000, 0x2000, 0x3000], &entries);
        assert_eq!(ptrs, vec![0x1008, 0x1050, 0x2010, 0x2000, 0x3018, 0x3020]);
    }
}
