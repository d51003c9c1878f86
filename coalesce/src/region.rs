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
use tessera_backends::{MatLayout, Scalar};
use tessera_core::{Alias, Domain, Region, SharedBuffer};

/// A column-major matrix inside an array's allocation: a coupled sector's matrix, or a
/// sub-rectangle of it that a set of blocks covers exactly.
#[derive(Clone, Debug)]
pub struct SectorRegion<T> {
    buffer: Arc<SharedBuffer<T>>,
    layout: MatLayout,
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
        let layout = MatLayout::inside(buffer.len(), offset, rows, cols, ld)?;
        Some(Self::from_layout(buffer, layout))
    }

    /// The region of a layout checked against `buffer` ([`MatLayout::inside`] its length).
    pub(crate) fn from_layout(buffer: Arc<SharedBuffer<T>>, layout: MatLayout) -> Self {
        Self { buffer, layout }
    }

    /// Where the matrix lies in the allocation.
    pub fn layout(&self) -> MatLayout {
        self.layout
    }

    /// Rows of the matrix.
    pub fn rows(&self) -> usize {
        self.layout.rows
    }

    /// Columns of the matrix.
    pub fn cols(&self) -> usize {
        self.layout.cols
    }

    /// Where the matrix starts in the allocation.
    pub fn offset(&self) -> usize {
        self.layout.offset
    }

    /// The leading dimension: how far apart columns start (the sector's row count).
    pub fn ld(&self) -> usize {
        self.layout.ld
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

/// The shared matrix view of `layout` in `buffer`.
///
/// # Safety
///
/// `layout` was checked against `buffer` ([`MatLayout::inside`] its length); the caller holds
/// read grants of the records covering it for `'a`.
unsafe fn resolve<'a, T: Scalar>(layout: &MatLayout, buffer: &'a SharedBuffer<T>) -> MatRef<'a, T> {
    // SAFETY: `offset <= len` (checked), so the pointer stays inside the allocation.
    let ptr = unsafe { buffer.as_ptr().add(layout.offset) };
    // SAFETY: `ptr` is element (0, 0) of the checked `rows x cols` matrix with row stride 1
    // and column stride `ld`, inside the allocation `buffer` keeps alive for `'a`; the
    // caller's read grants keep writers away for `'a`.
    unsafe { MatRef::from_raw_parts(ptr, layout.rows, layout.cols, 1, layout.ld as isize) }
}

/// The exclusive matrix view of `layout` in `buffer`.
///
/// # Safety
///
/// As [`resolve`], with write grants, and no other view of these elements may live during
/// `'a`.
unsafe fn resolve_mut<'a, T: Scalar>(
    layout: &MatLayout,
    buffer: &'a SharedBuffer<T>,
) -> MatMut<'a, T> {
    // SAFETY: `offset <= len` (checked). The base pointer carries the allocation's
    // (writable) provenance: the buffer hands out shared and exclusive views alike from it.
    let ptr = unsafe { buffer.as_ptr().add(layout.offset) }.cast_mut();
    // SAFETY: `ptr` is element (0, 0) of the checked `rows x cols` matrix with row stride 1
    // and column stride `ld`; columns do not overlap (`ld >= rows`), so distinct indices
    // reach distinct elements; the caller's write grants make it exclusive for `'a`.
    unsafe { MatMut::from_raw_parts_mut(ptr, layout.rows, layout.cols, 1, layout.ld as isize) }
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
        Ok(unsafe { resolve(&self.layout, &self.buffer) })
    }

    unsafe fn resolve_mut(&self) -> tessera_core::Result<MatMut<'_, T>> {
        // SAFETY: as above, with write grants; the returned view is the only one made from
        // this resolution.
        Ok(unsafe { resolve_mut(&self.layout, &self.buffer) })
    }
}

/// Several matrices inside one array's allocation: the sector matrices of a batch of
/// GEMMs, ordered by one composite of all their blocks' records. Cheap to clone (the
/// descriptors are shared).
#[derive(Clone, Debug)]
pub struct SectorsRegion<T> {
    buffer: Arc<SharedBuffer<T>>,
    layouts: Arc<[MatLayout]>,
}

/// A coalesced view of several sector matrices at once.
pub type SectorsAlias<T> = Alias<SectorsRegion<T>>;

impl<T: Scalar> SectorsRegion<T> {
    /// The matrices `layouts`, each checked against `buffer` ([`MatLayout::inside`] its
    /// length).
    pub(crate) fn new(buffer: Arc<SharedBuffer<T>>, layouts: Vec<MatLayout>) -> Self {
        Self::shared(buffer, layouts.into())
    }

    /// Like [`new`](SectorsRegion::new), sharing an existing list of matrices: each was
    /// checked against a length the buffer has ([`MatLayout::inside`]).
    pub(crate) fn shared(buffer: Arc<SharedBuffer<T>>, layouts: Arc<[MatLayout]>) -> Self {
        Self { buffer, layouts }
    }

    /// How many matrices.
    pub fn len(&self) -> usize {
        self.layouts.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.layouts.is_empty()
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
        unsafe { resolve(&self.region.layouts[i], &self.region.buffer) }
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
        unsafe { resolve_mut(&self.region.layouts[i], &self.region.buffer) }
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
