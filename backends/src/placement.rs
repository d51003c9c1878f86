//! Where a tensor's elements live, and what each place runs on them.
//!
//! Owns: [`Placement`] (allocation, how a task is scheduled, and the elementwise,
//! reduction, permuting and transfer kernels), [`Extent`] (one strided block, or a flat
//! span, of an allocation), [`Grant`] / [`GrantMut`] (a task's granted extents of one
//! storage) and [`Moved`] (what a permutation says about each block it moves). The host
//! placement is [`Host`](crate::Host) (module `cpu`); with the `cuda` feature, a device is
//! `Cuda` (module `cuda`). Invariant: a kernel reaches exactly the elements of the extents
//! of the grants it is handed, and a grant is made (unsafely) only by a holder of the
//! hazard grants of exactly those elements, so every kernel here is a safe function.

use crate::{MatLayout, Scalar};
use smallvec::SmallVec;
use std::fmt::Debug;
use std::ops::Range;
use std::sync::OnceLock;
use tessera_core::{Access, Domain, KernelError, TaskId, for_each_offset};

use crate::cpu::CopyPlan;

/// A strided region of an allocation: element `(i0, i1, ..)` at
/// `offset + i0 * strides[0] + i1 * strides[1] + ..` (a block of a tensor), or a flat span
/// (one axis of stride 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    /// The first element.
    pub offset: usize,
    /// The extent along each axis.
    pub dims: SmallVec<[usize; 6]>,
    /// The step along each axis, in elements (non-negative in every layout made here).
    pub strides: SmallVec<[isize; 6]>,
}

impl Extent {
    /// The contiguous elements `range`, as one axis.
    pub fn span(range: Range<usize>) -> Self {
        Self {
            offset: range.start,
            dims: [range.len()].into_iter().collect(),
            strides: [1].into_iter().collect(),
        }
    }

    /// A strided block: `dims` from `offset`, `strides` apart.
    pub fn strided(offset: usize, dims: &[usize], strides: &[usize]) -> Self {
        Self {
            offset,
            dims: dims.into(),
            strides: strides.iter().map(|&s| s as isize).collect(),
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same elements with the axes reordered: axis `k` is old axis `perm[k]`; `None`
    /// when `perm` does not index the axes.
    pub fn permuted(&self, perm: &[usize]) -> Option<Self> {
        Some(Self {
            offset: self.offset,
            dims: perm
                .iter()
                .map(|&p| self.dims.get(p).copied())
                .collect::<Option<_>>()?,
            strides: perm
                .iter()
                .map(|&p| self.strides.get(p).copied())
                .collect::<Option<_>>()?,
        })
    }

    /// The extent as a column-major matrix: axes `..rows` folded into rows, the rest into
    /// columns; `None` for `rows` past the axes or a fold the strides do not allow (a
    /// block of a tensor always allows its structure's codomain/domain split).
    pub fn matrix(&self, rows: usize) -> Option<MatLayout> {
        let (shape, strides) = (&self.dims[..], &self.strides[..]);
        if rows > shape.len() || strides.iter().any(|&s| s < 0) {
            return None;
        }
        let r: usize = shape[..rows].iter().product();
        let c: usize = shape[rows..].iter().product();
        let ld = match shape[rows..].iter().position(|&d| d > 1) {
            Some(k) => strides[rows + k] as usize,
            None => r.max(1),
        };
        // The fold holds when the row axes step column-major inside a column and the column
        // axes step by multiples of `ld` (axes of extent 1 take no step).
        let (mut row_step, mut col_step) = (1, ld);
        for (k, (&d, &st)) in shape.iter().zip(strides).enumerate() {
            let step = if k < rows {
                &mut row_step
            } else {
                &mut col_step
            };
            if d > 1 && st as usize != *step {
                return None;
            }
            *step *= d;
        }
        if r > ld && c > 1 {
            return None;
        }
        Some(MatLayout {
            offset: self.offset,
            rows: r,
            cols: c,
            ld: ld.max(r).max(1),
        })
    }

    /// The contiguous element ranges the extent covers, each as long as the layout allows
    /// (the leading axes that step contiguously make one run), in the extent's order.
    pub fn runs(&self, out: &mut Vec<Range<usize>>) {
        if self.is_empty() {
            return;
        }
        let mut run = 1usize;
        let mut k = 0;
        while k < self.dims.len() && (self.dims[k] == 1 || self.strides[k] == run as isize) {
            run *= self.dims[k];
            k += 1;
        }
        let offset = self.offset as isize;
        for_each_offset(&self.dims[k..], &self.strides[k..], |_, at| {
            let start = (offset + at) as usize;
            out.push(start..start + run);
        });
    }
}

/// The element ranges `extents` cover, sorted, adjacent ones merged (a whole tensor without
/// gaps is one range).
pub fn merged_runs(extents: &[Extent]) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    for e in extents {
        e.runs(&mut runs);
    }
    runs.sort_unstable_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(runs.len());
    for r in runs {
        match merged.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => merged.push(r),
        }
    }
    merged
}

/// A task's read grant of some extents of one storage.
pub struct Grant<'a, T: Scalar, P: Placement<T>> {
    storage: &'a P::Storage,
    extents: &'a [Extent],
}

/// A task's write grant of some extents of one storage (it reads them too: it derefs to
/// the [`Grant`] of the same extents).
pub struct GrantMut<'a, T: Scalar, P: Placement<T>>(Grant<'a, T, P>);

impl<'a, T: Scalar, P: Placement<T>> std::ops::Deref for GrantMut<'a, T, P> {
    type Target = Grant<'a, T, P>;
    fn deref(&self) -> &Grant<'a, T, P> {
        &self.0
    }
}

impl<'a, T: Scalar, P: Placement<T>> Grant<'a, T, P> {
    /// The grant of `extents` of `storage`.
    ///
    /// # Safety
    ///
    /// Every extent lies inside `storage`, and the caller holds a read (or write) grant of
    /// every element of every extent for as long as the grant lives.
    pub unsafe fn new(storage: &'a P::Storage, extents: &'a [Extent]) -> Self {
        Self { storage, extents }
    }

    /// The storage.
    pub fn storage(&self) -> &'a P::Storage {
        self.storage
    }

    /// The granted extents.
    pub fn extents(&self) -> &'a [Extent] {
        self.extents
    }
}

impl<'a, T: Scalar, P: Placement<T>> GrantMut<'a, T, P> {
    /// The write grant of `extents` of `storage`.
    ///
    /// # Safety
    ///
    /// Every extent lies inside `storage`, no two extents overlap and each maps distinct
    /// indices to distinct elements, and the caller holds the write grant of every element
    /// of every extent for as long as the grant lives.
    pub unsafe fn new(storage: &'a P::Storage, extents: &'a [Extent]) -> Self {
        Self(Grant { storage, extents })
    }
}

/// What a permutation says about one block it moves (source extent `k` of the read grant
/// onto destination extent `k` of the write grant).
#[derive(Clone, Copy, Debug)]
pub struct Moved<'a> {
    /// Whether the block changes sign (a fermionic reordering).
    pub negate: bool,
    /// Where the host keeps the block's planned copy, made by the first task that moves it
    /// (a structure keeps one per block and permutation); `None` plans it here.
    pub plan: Option<&'a OnceLock<CopyPlan>>,
}

/// How a permutation moves its blocks: the legs, the moves, and hints.
#[derive(Clone, Copy, Debug)]
pub struct Permutation<'a> {
    /// New axis `k` of every block is old axis `perm[k]`.
    pub perm: &'a [usize],
    /// How many leading axes of a destination block are its matrix's rows.
    pub rows: usize,
    /// One per block, in the grants' order.
    pub moves: &'a [Moved<'a>],
    /// Whether the values are conjugated as they move.
    pub conj: bool,
    /// Whether the whole operation is larger than a last-level cache, so stores should
    /// bypass it (a host hint).
    pub streaming: bool,
}

/// Why a storage could not be allocated.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// Host memory.
    #[error(transparent)]
    Host(#[from] tessera_core::AllocError),
    /// A CUDA device.
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Cuda(#[from] crate::cuda::CudaError),
}

/// A kernel's operands do not pair up (different extents).
#[derive(Debug, thiserror::Error)]
#[error("expected operands over the same extents, but the grants hold {expected} and {given}")]
pub struct ExtentMismatch {
    /// The destination's extent count.
    pub expected: usize,
    /// The source's.
    pub given: usize,
}

/// Where a tensor's elements live and what runs on them: one implementation per backend
/// (`Host`, `Cuda`), so the tensor type, its hazard records, block handles and operations
/// are written once over `P: Placement<T>`.
///
/// A storage is one allocation; what a task may touch is a [`Grant`] / [`GrantMut`] of
/// extents of it. Kernels run inside tasks: `threads` is the number of workers of the
/// runtime the task was enrolled on (the host cuts large blocks over them; a device
/// ignores it).
pub trait Placement<T: Scalar>: Clone + Debug + PartialEq + Send + Sync + 'static {
    /// One allocation.
    type Storage: Debug + Send + Sync + 'static;

    /// Whether an operation cuts its work into one task per run of blocks (the host: the
    /// workers run them side by side, each enrolled on its own blocks) rather than one task
    /// for all of it (a device: its stream orders the work anyway).
    const CUTS_TASKS: bool;

    /// Where allocations of this placement live.
    fn domain(&self) -> Domain;

    /// The placement of a storage.
    fn of(storage: &Self::Storage) -> Self;

    /// A new allocation of `len` elements: zeros when `zeroed`, else values that are
    /// written in full before they are read.
    ///
    /// # Errors
    ///
    /// The allocation's refusal.
    fn alloc(&self, len: usize, zeroed: bool) -> Result<Self::Storage, PlacementError>;

    /// Whether permutations can run here (a device needs its permute kernel compiled):
    /// checked before a permutation enrolls anything.
    ///
    /// # Errors
    ///
    /// Why they cannot.
    fn probe_permute(&self) -> Result<(), PlacementError> {
        Ok(())
    }

    /// Enrolls `kernel` on `access` as this placement runs its tasks: `largest` is the
    /// largest extent the task touches (the host spreads a large one over its workers, so
    /// the task is not one a waiting host may run inline); `waits` says the kernel waits
    /// for a device (a reduction or a copy to the host), so it cannot be enqueued eagerly.
    ///
    /// # Errors
    ///
    /// The runtime's refusal.
    fn schedule<A, F>(
        name: &'static str,
        largest: usize,
        threads: usize,
        waits: bool,
        access: A,
        kernel: F,
    ) -> Result<TaskId, tessera_core::Error>
    where
        A: Access,
        F: for<'a> FnOnce(A::View<'a>) -> Result<(), KernelError> + Send + 'static;

    /// `y <- alpha y`.
    ///
    /// # Errors
    ///
    /// The backend's failure.
    fn scale(y: &mut GrantMut<'_, T, Self>, alpha: T, threads: usize) -> Result<(), KernelError>;

    /// `y <- alpha x + y`, extent by extent.
    ///
    /// # Errors
    ///
    /// [`ExtentMismatch`] unless the grants have alike extents; the backend's failure.
    fn axpy(
        alpha: T,
        x: &Grant<'_, T, Self>,
        y: &mut GrantMut<'_, T, Self>,
        threads: usize,
    ) -> Result<(), KernelError>;

    /// `y <- alpha op(x) + beta z` (`op`: conjugate when `conj`; no `z`: `beta z` is 0),
    /// extent by extent; the old `y` is not read.
    ///
    /// # Errors
    ///
    /// As [`axpy`](Self::axpy).
    fn combine(
        alpha: T,
        x: &Grant<'_, T, Self>,
        conj: bool,
        z: Option<(T, &Grant<'_, T, Self>)>,
        y: &mut GrantMut<'_, T, Self>,
        threads: usize,
    ) -> Result<(), KernelError>;

    /// The sum of `|x|^2` over the grant, in an order fixed by the extents (not by
    /// `threads`).
    ///
    /// # Errors
    ///
    /// The backend's failure.
    fn norm_sqr(x: &Grant<'_, T, Self>, threads: usize) -> Result<T::Real, KernelError>;

    /// `sum(conj(x) y)`, in an order fixed by the extents.
    ///
    /// # Errors
    ///
    /// As [`axpy`](Self::axpy).
    fn dot(
        x: &Grant<'_, T, Self>,
        y: &Grant<'_, T, Self>,
        threads: usize,
    ) -> Result<T, KernelError>;

    /// Moves source extent `k` of `x`, its axes permuted by `how.perm`, onto destination
    /// extent `k` of `y` for every move `k`, negated and conjugated as `how` says.
    ///
    /// # Errors
    ///
    /// [`ExtentMismatch`] unless the grants and moves pair up; a destination of another
    /// shape than its permuted source; the backend's failure.
    fn permute(
        x: &Grant<'_, T, Self>,
        y: &mut GrantMut<'_, T, Self>,
        how: &Permutation<'_>,
        threads: usize,
    ) -> Result<(), KernelError>;

    /// Copies the granted elements of `x`, of any placement, into the same elements of `y`:
    /// the grants' [`merged_runs`] must be the same ranges.
    ///
    /// # Errors
    ///
    /// [`ExtentMismatch`] when the runs differ; the backend's failure.
    fn transfer<Q: Placement<T>>(
        x: &Grant<'_, T, Q>,
        y: &mut GrantMut<'_, T, Self>,
    ) -> Result<(), KernelError>;

    /// The granted elements of `range` as host memory, where the storage is host memory
    /// (`None` on a device; `range` must lie in the grant's runs).
    fn host_elems<'a>(x: &Grant<'a, T, Self>, range: Range<usize>) -> Option<&'a [T]>;

    /// Copies the elements `at..at + into.len()` (inside the grant's runs) to the host.
    ///
    /// # Errors
    ///
    /// The backend's failure.
    fn download(x: &Grant<'_, T, Self>, at: usize, into: &mut [T]) -> Result<(), KernelError>;
}

/// Checks that two grants pair up extent by extent (alike shapes).
pub(crate) fn check_alike(y: &[Extent], x: &[Extent]) -> Result<(), ExtentMismatch> {
    let alike = y.len() == x.len() && y.iter().zip(x).all(|(a, b)| a.dims == b.dims);
    if alike {
        Ok(())
    } else {
        Err(ExtentMismatch {
            expected: y.len(),
            given: x.len(),
        })
    }
}

/// The element ranges of a grant, as host-side staging runs of at most `most` elements
/// each.
#[cfg(feature = "cuda")]
pub(crate) fn pieces_of(runs: &[Range<usize>], most: usize) -> Vec<Range<usize>> {
    runs.iter()
        .flat_map(|r| {
            (r.start..r.end)
                .step_by(most.max(1))
                .map(move |start| start..(start + most).min(r.end))
        })
        .collect()
}
