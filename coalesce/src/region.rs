//! Matrix regions of an array's allocation: what a coalesced view resolves to.
//!
//! Owns [`SectorRegion`] (the owner token of an array's allocation plus a column-major
//! matrix descriptor: offset, rows, columns, leading dimension) and its [`Region`] impl, which
//! turns a granted access into a faer [`MatRef`] / [`MatMut`]; and [`SectorsRegion`], several
//! such matrices behind one owner token, resolved to [`Matrices`] / [`MatricesMut`].
//! Invariant: a region's matrices lie inside the allocation (checked once, when the region
//! is made), their columns do not overlap (`ld >= rows`), so an exclusive view maps distinct
//! indices to distinct elements, and exclusive views are handed out one matrix at a time.
//! Which records a region is paired with is decided where the alias is made (module
//! `view`), never here.

use faer::{MatMut, MatRef};
use std::sync::Arc;
use tessera_backends::Scalar;
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
        let rect = Rect::checked(&buffer, offset, rows, cols, ld)?;
        Some(Self::from_rect(buffer, rect))
    }

    /// The region of a rectangle checked against `buffer`.
    pub(crate) fn from_rect(buffer: Arc<SharedBuffer<T>>, rect: Rect) -> Self {
        Self {
            buffer,
            offset: rect.offset,
            rows: rect.rows,
            cols: rect.cols,
            ld: rect.ld,
        }
    }

    fn rect(&self) -> Rect {
        Rect {
            offset: self.offset,
            rows: self.rows,
            cols: self.cols,
            ld: self.ld,
        }
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
}

/// A column-major matrix descriptor inside an allocation: offset, rows, columns, leading
/// dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rect {
    offset: usize,
    rows: usize,
    cols: usize,
    ld: usize,
}

impl Rect {
    /// The rectangle, or `None` when it does not lie inside `buffer` or its columns would
    /// overlap.
    pub(crate) fn checked<T: Scalar>(
        buffer: &SharedBuffer<T>,
        offset: usize,
        rows: usize,
        cols: usize,
        ld: usize,
    ) -> Option<Self> {
        Self::inside(buffer.len(), offset, rows, cols, ld)
    }

    /// The rectangle, or `None` when it does not lie inside the first `len` elements of an
    /// allocation or its columns would overlap (the check [`checked`](Rect::checked) makes
    /// against a buffer of that length).
    pub(crate) fn inside(
        len: usize,
        offset: usize,
        rows: usize,
        cols: usize,
        ld: usize,
    ) -> Option<Self> {
        let fits = if rows == 0 || cols == 0 {
            offset <= len
        } else {
            // The last element, (rows - 1) + (cols - 1) * ld past `offset`, lies inside.
            (cols - 1)
                .checked_mul(ld)
                .and_then(|x| x.checked_add(rows - 1))
                .and_then(|x| x.checked_add(offset))
                .is_some_and(|last| last < len)
        };
        (fits && (ld >= rows || cols <= 1)).then_some(Self {
            offset,
            rows,
            cols,
            ld,
        })
    }

    /// The shared matrix view.
    ///
    /// # Safety
    ///
    /// `self` was checked against `buffer` ([`Rect::checked`]); the caller holds read grants
    /// of the records covering it for `'a`.
    unsafe fn resolve<'a, T: Scalar>(&self, buffer: &'a SharedBuffer<T>) -> MatRef<'a, T> {
        // SAFETY: `offset <= len` (checked), so the pointer stays inside the allocation.
        let ptr = unsafe { buffer.as_ptr().add(self.offset) };
        // SAFETY: `ptr` is element (0, 0) of the checked `rows x cols` matrix with row stride 1
        // and column stride `ld`, inside the allocation `buffer` keeps alive for `'a`; the
        // caller's read grants keep writers away for `'a`.
        unsafe { MatRef::from_raw_parts(ptr, self.rows, self.cols, 1, self.ld as isize) }
    }

    /// The exclusive matrix view.
    ///
    /// # Safety
    ///
    /// As [`Rect::resolve`], with write grants, and no other view of these elements may live
    /// during `'a`.
    unsafe fn resolve_mut<'a, T: Scalar>(&self, buffer: &'a SharedBuffer<T>) -> MatMut<'a, T> {
        // SAFETY: `offset <= len` (checked). The base pointer carries the allocation's
        // (writable) provenance: the buffer hands out shared and exclusive views alike from it.
        let ptr = unsafe { buffer.as_ptr().add(self.offset) }.cast_mut();
        // SAFETY: `ptr` is element (0, 0) of the checked `rows x cols` matrix with row stride 1
        // and column stride `ld`; columns do not overlap (`ld >= rows`), so distinct indices
        // reach distinct elements; the caller's write grants make it exclusive for `'a`.
        unsafe { MatMut::from_raw_parts_mut(ptr, self.rows, self.cols, 1, self.ld as isize) }
    }
}

// SAFETY: the region reaches only the `rows x cols` matrix at `offset` with leading dimension
// `ld`, inside the allocation it keeps alive (checked in `new`); regions are paired (in module
// `view`) with the records of every block whose elements the matrix covers.
unsafe impl<T: Scalar> Region for SectorRegion<T> {
    type Ref<'a> = MatRef<'a, T>;
    type Mut<'a> = MatMut<'a, T>;

    unsafe fn resolve(&self) -> tessera_core::Result<MatRef<'_, T>> {
        // SAFETY: the rectangle was checked in `new`; the caller holds read grants of the
        // records covering the matrix.
        Ok(unsafe { self.rect().resolve(&self.buffer) })
    }

    unsafe fn resolve_mut(&self) -> tessera_core::Result<MatMut<'_, T>> {
        // SAFETY: as above, with write grants; the returned view is the only one made from
        // this resolution.
        Ok(unsafe { self.rect().resolve_mut(&self.buffer) })
    }
}

/// Several matrices inside one array's allocation: the sector matrices of a batch of
/// GEMMs, ordered by one composite of all their blocks' records. Cheap to clone (the
/// descriptors are shared).
#[derive(Clone, Debug)]
pub struct SectorsRegion<T> {
    buffer: Arc<SharedBuffer<T>>,
    rects: Arc<[Rect]>,
}

/// A coalesced view of several sector matrices at once.
pub type SectorsAlias<T> = Alias<SectorsRegion<T>>;

impl<T: Scalar> SectorsRegion<T> {
    /// The matrices `rects`, each checked against `buffer` ([`Rect::checked`]).
    pub(crate) fn new(buffer: Arc<SharedBuffer<T>>, rects: Vec<Rect>) -> Self {
        Self::shared(buffer, rects.into())
    }

    /// Like [`new`](SectorsRegion::new), sharing an existing list of matrices: each was
    /// checked against a length the buffer has ([`Rect::inside`]).
    pub(crate) fn shared(buffer: Arc<SharedBuffer<T>>, rects: Arc<[Rect]>) -> Self {
        Self { buffer, rects }
    }

    /// How many matrices.
    pub fn len(&self) -> usize {
        self.rects.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rects.is_empty()
    }
}

/// The shared views of a [`SectorsRegion`], one matrix at a time.
pub struct Matrices<'a, T> {
    region: &'a SectorsRegion<T>,
}

impl<'a, T: Scalar> Matrices<'a, T> {
    /// How many matrices.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }

    /// Matrix `i` (panics past the end, like indexing).
    pub fn get(&self, i: usize) -> MatRef<'a, T> {
        // SAFETY: every rectangle was checked against the buffer when its sector region was
        // made; a `Matrices` exists only inside a resolution whose read grants cover all of
        // them for `'a`.
        unsafe { self.region.rects[i].resolve(&self.region.buffer) }
    }
}

/// The exclusive views of a [`SectorsRegion`], one matrix at a time (each borrow of the
/// whole ends before the next matrix is taken, so views never overlap).
pub struct MatricesMut<'a, T> {
    region: &'a SectorsRegion<T>,
}

impl<T: Scalar> MatricesMut<'_, T> {
    /// How many matrices.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }

    /// Matrix `i`, exclusively, for as long as `self` stays borrowed (panics past the end).
    pub fn get_mut(&mut self, i: usize) -> MatMut<'_, T> {
        // SAFETY: checked rectangles as in `Matrices::get`, under write grants; `&mut self`
        // keeps any other view made through `self` from living at the same time.
        unsafe { self.region.rects[i].resolve_mut(&self.region.buffer) }
    }
}

// SAFETY: the region reaches only its checked rectangles, inside the allocation it keeps
// alive; it is paired (in module `view`) with the records of every block of every sector
// it lists. The exclusive views hand out one matrix at a time.
unsafe impl<T: Scalar> Region for SectorsRegion<T> {
    type Ref<'a> = Matrices<'a, T>;
    type Mut<'a> = MatricesMut<'a, T>;

    unsafe fn resolve(&self) -> tessera_core::Result<Matrices<'_, T>> {
        Ok(Matrices { region: self })
    }

    unsafe fn resolve_mut(&self) -> tessera_core::Result<MatricesMut<'_, T>> {
        Ok(MatricesMut { region: self })
    }
}
