//! Matrix regions of an array's allocation: what a coalesced view resolves to.
//!
//! Owns [`SectorRegion`] (the owner token of an array's allocation plus a column-major
//! matrix descriptor: offset, rows, columns, leading dimension) and its [`Region`] impl, which
//! turns a granted access into a faer [`MatRef`] / [`MatMut`]. Invariant: a region's matrix
//! lies inside the allocation (checked once, when the region is made), its columns do not
//! overlap (`ld >= rows`), so the exclusive view maps distinct indices to distinct elements.
//! Which records a region is paired with is decided where the alias is made (module
//! `view`), never here.

use faer::{MatMut, MatRef};
use std::sync::Arc;
use tessera_backends::Scalar;
use tessera_backends::cpu::matrix_ref;
use tessera_core::{Alias, Domain, Region, SharedBuffer};

/// A column-major matrix inside an array's allocation: a coupled sector's matrix, or a
/// sub-rectangle of it that a set of blocks covers exactly.
#[derive(Clone, Debug)]
pub struct SectorRegion<T> {
    buffer: Arc<SharedBuffer<T>>,
    offset: usize,
    rows: usize,
    cols: usize,
    ld: usize,
}

/// A coalesced view: a matrix region and the composite of the records of the blocks it
/// covers.
pub type SectorAlias<T> = Alias<SectorRegion<T>>;

impl<T: Scalar> SectorRegion<T> {
    /// The region `rows x cols` at `offset`, column `j` starting at `offset + j * ld`, or
    /// `None` when it does not lie inside `buffer` or its columns would overlap.
    pub(crate) fn new(
        buffer: Arc<SharedBuffer<T>>,
        offset: usize,
        rows: usize,
        cols: usize,
        ld: usize,
    ) -> Option<Self> {
        let fits = buffer.check_extent(offset, &[rows, cols], &[1, ld as isize]);
        (fits && (ld >= rows || cols <= 1)).then_some(Self {
            buffer,
            offset,
            rows,
            cols,
            ld,
        })
    }

    /// Rows of the matrix.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the matrix.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Where the matrix starts in the allocation.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The leading dimension: how far apart columns start (the sector's row count).
    pub fn ld(&self) -> usize {
        self.ld
    }

    /// Where the allocation lives.
    pub fn domain(&self) -> Domain {
        self.buffer.domain()
    }

    /// The allocation the region points into (the owner token).
    pub fn buffer(&self) -> &Arc<SharedBuffer<T>> {
        &self.buffer
    }

    fn strides(&self) -> [isize; 2] {
        [1, self.ld as isize]
    }
}

// SAFETY: the region reaches only the `rows x cols` matrix at `offset` with leading dimension
// `ld`, inside the allocation it keeps alive (checked in `new`); regions are paired (in module
// `view`) with the records of every block whose elements the matrix covers.
unsafe impl<T: Scalar> Region for SectorRegion<T> {
    type Ref<'a> = MatRef<'a, T>;
    type Mut<'a> = MatMut<'a, T>;

    unsafe fn resolve(&self) -> tessera_core::Result<MatRef<'_, T>> {
        let dims = [self.rows, self.cols];
        // SAFETY: extent checked in `new`; the caller holds read grants of the records
        // covering the matrix.
        let view = unsafe { self.buffer.view(self.offset, &dims, &self.strides()) };
        Ok(matrix_ref(&view, 1).expect("a column-major matrix folds at axis 1"))
    }

    unsafe fn resolve_mut(&self) -> tessera_core::Result<MatMut<'_, T>> {
        let dims = [self.rows, self.cols];
        // SAFETY: extent checked in `new`; columns do not overlap (`ld >= rows`), so distinct
        // indices reach distinct elements; the caller holds write grants of the records
        // covering the matrix.
        let mut view = unsafe { self.buffer.view_mut(self.offset, &dims, &self.strides()) };
        // `cpu::matrix_mut` borrows the strided view, which is a local here; the matrix is
        // made from the same checked pointer and descriptor instead, for the region's lifetime.
        let ptr = view.as_mut_ptr();
        // SAFETY: `ptr` points at element (0, 0) of the checked `rows x cols` matrix with row
        // stride 1 and column stride `ld`; the grant (the caller's duty) makes it exclusive
        // for as long as the borrow of `self` lasts, which bounds the returned lifetime.
        Ok(unsafe { MatMut::from_raw_parts_mut(ptr, self.rows, self.cols, 1, self.ld as isize) })
    }
}
