//! Operations on tensors of any placement, enrolled as scheduled tasks over blocks.
//!
//! Owns: [`Blocks`] (which blocks an operation touches) and the operations: scale, axpy,
//! add, conj, copy, norm, inner product, leg permutation with a new codomain/domain split
//! (with fermionic signs) and adjoint, written once over the placement `P` (the kernels are
//! the placement's: [`Placement`]). Every operation works on the whole tensor by default
//! (`a.scale(0.5)`, `a.norm()`); its `_blocks` variant (`a.scale_blocks(0.5,
//! Blocks::Only(&ids))`) works on a selection. Invariants:
//!
//! - Every operation checks its operands (structures, placements, block ids, aliasing)
//!   before it enrolls anything: an error means nothing was enrolled and nothing was
//!   written.
//! - On the host ([`Placement::CUTS_TASKS`]) a task covers one block, or a run of
//!   consecutive small blocks holding at least [`GROUP_ELEMS`] elements (a task costs about
//!   as much to enroll and run as copying a few thousand elements), and enrolls on exactly
//!   those blocks' records: work on different tasks' blocks runs in parallel and work on
//!   one block keeps program order. On a device one task covers the selection (the stream
//!   orders its work). Reductions (norm, inner) are one partial result per task plus one
//!   task that sums them.
//! - A permutation runs from its plan ([`Permuted`], kept by the structure): the plan's
//!   source structure and permutation are checked on the host, and each block moves through
//!   a copy planned from its two layouts, which the first task to move it makes and the
//!   plan keeps.

use crate::error::Error;
use crate::sector::AbelianSector;
use crate::structure::{BlockStructure, Permuted};
use crate::tensor::{Tensor, TensorAlias};
use smallvec::SmallVec;
use std::sync::{Arc, OnceLock};
use tessera_backends::cpu::{CopyPlan, PARALLEL_BLOCK_ELEMS, Stores};
use tessera_backends::{Moved, Permutation, Placement, Scalar};
use tessera_core::{Async, schedule_sequential_named};

/// The blocks an operation's `_blocks` variant touches (the plain operation touches every
/// block: `a.scale(x)` is `a.scale_blocks(x, Blocks::All)`).
#[derive(Clone, Copy, Debug)]
pub enum Blocks<'a> {
    /// Every block.
    All,
    /// These block ids (repeats count once).
    Only(&'a [usize]),
}

impl Blocks<'_> {
    /// The selected ids, checked against `n` blocks, increasing and without repeats.
    pub(crate) fn resolve(self, n: usize) -> Result<Vec<usize>, Error> {
        match self {
            Blocks::All => Ok((0..n).collect()),
            Blocks::Only(ids) => {
                if let Some(&bad) = ids.iter().find(|&&i| i >= n) {
                    return Err(Error::UnknownBlock {
                        block: bad,
                        blocks: n,
                    });
                }
                let mut ids = ids.to_vec();
                ids.sort_unstable();
                ids.dedup();
                Ok(ids)
            }
        }
    }
}

fn describe<S: AbelianSector>(s: &BlockStructure<S>) -> String {
    s.summary()
}

/// That `permuted` is the re-indexing of `from` by `perm` and `out` has its structure: the
/// checks of every `permute_into_with`, host or device.
pub(crate) fn check_permuted<S: AbelianSector>(
    from: &BlockStructure<S>,
    permuted: &Permuted<S>,
    perm: &[usize],
    out: &BlockStructure<S>,
) -> Result<(), Error> {
    if permuted.block_map.len() != from.num_blocks()
        || perm.len() != from.num_legs()
        || permuted.perm() != perm
    {
        return Err(Error::InvalidPermutation {
            legs: from.num_legs(),
            given: perm.to_vec(),
        });
    }
    if !permuted.is_permutation_of(from) {
        return Err(Error::StructureMismatch {
            expected: "the structure the permutation was planned for".into(),
            given: describe(from),
        });
    }
    if *out != permuted.structure {
        return Err(Error::StructureMismatch {
            expected: describe(&permuted.structure),
            given: describe(out),
        });
    }
    Ok(())
}

/// The fewest elements one task of an operation covers (unless the blocks run out).
const GROUP_ELEMS: usize = 16 * 1024;

/// How many elements one task of a permutation moving `total` elements on `threads` workers
/// should cover: an equal share of [`PERMUTE_TASKS_PER_WORKER`] tasks per worker, but no
/// fewer than [`GROUP_ELEMS`].
fn permute_task_elems(total: usize, threads: usize) -> usize {
    total
        .div_ceil(PERMUTE_TASKS_PER_WORKER * threads.max(1))
        .max(GROUP_ELEMS)
}

/// Consecutive runs of items (blocks or coupled sectors) of these lengths, one task's each:
/// at least [`GROUP_ELEMS`] elements per run (the last may hold fewer), and an item of
/// [`PARALLEL_BLOCK_ELEMS`] and up alone, as its task spreads it over the workers.
fn runs(lens: impl Iterator<Item = usize>) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut elems, mut n) = (0, 0, 0);
    for (k, len) in lens.enumerate() {
        n = k + 1;
        if len >= PARALLEL_BLOCK_ELEMS {
            if start < k {
                out.push(start..k);
            }
            out.push(k..k + 1);
            (start, elems) = (k + 1, 0);
            continue;
        }
        elems += len;
        if elems >= GROUP_ELEMS {
            out.push(start..k + 1);
            (start, elems) = (k + 1, 0);
        }
    }
    if start < n {
        out.push(start..n);
    }
    out
}

/// Tasks per worker of one permutation. Two, not more: the enrolling thread holds a core
/// while it enrolls, and with 4,096-element blocks in cache four tasks per worker cost a
/// tenth more time per permutation on two cores (measured beside one and two, which tie).
const PERMUTE_TASKS_PER_WORKER: usize = 2;

/// What one task of an elementwise operation covers.
pub(crate) enum Piece<'i> {
    /// Consecutive coupled sectors, as one flat span of the allocation.
    Span(std::ops::Range<usize>),
    /// Consecutive selected blocks, each with its shape.
    Blocks(&'i [usize]),
}

impl<T: Scalar, S: AbelianSector, P: Placement<T>> Tensor<T, S, P> {
    fn check_same_structure(&self, other: &Self) -> Result<(), Error> {
        if Arc::ptr_eq(self.structure(), other.structure()) || self.structure() == other.structure()
        {
            Ok(())
        } else {
            Err(Error::StructureMismatch {
                expected: describe(self.structure()),
                given: describe(other.structure()),
            })
        }
    }

    /// That `other` lives where `self` does (one device for both).
    pub(crate) fn check_same_placement(&self, other: &Self) -> Result<(), Error> {
        if self.domain() == other.domain() {
            Ok(())
        } else {
            Err(Error::DeviceMismatch {
                expected: self.domain(),
                given: other.domain(),
            })
        }
    }

    /// What the tasks of an elementwise operation cover. On the host: runs of consecutive
    /// entries of `ids` ([`runs`] of their blocks), or with every block selected (`all`),
    /// runs of whole coupled sectors as flat spans (elementwise work needs no block
    /// shapes). On a device: one piece.
    pub(crate) fn pieces<'i>(&self, ids: &'i [usize], all: bool) -> Vec<Piece<'i>> {
        let s = self.structure();
        if !P::CUTS_TASKS {
            return vec![if all {
                Piece::Span(0..s.sectors().len())
            } else {
                Piece::Blocks(ids)
            }];
        }
        if all {
            runs(s.sectors().iter().map(|c| c.len()))
                .into_iter()
                .map(Piece::Span)
                .collect()
        } else {
            runs(
                ids.iter()
                    .map(|&i| s.block(i).expect("ids were checked").len()),
            )
            .into_iter()
            .map(|r| Piece::Blocks(&ids[r]))
            .collect()
        }
    }

    /// The largest view a task of `piece` works on (a span counts whole: its kernel cuts
    /// it over the workers as one view).
    pub(crate) fn largest(&self, piece: &Piece<'_>) -> usize {
        let s = self.structure();
        match piece {
            Piece::Span(sectors) => s.sectors()[sectors.clone()].iter().map(|c| c.len()).sum(),
            Piece::Blocks(ids) => ids
                .iter()
                .map(|&i| s.block(i).expect("ids were checked").len())
                .max()
                .unwrap_or(0),
        }
    }

    /// The region of a piece, for one task.
    pub(crate) fn piece(&self, piece: &Piece<'_>) -> TensorAlias<T, P> {
        match piece {
            Piece::Span(sectors) => self.span(sectors.clone()),
            Piece::Blocks(ids) => self.region(ids).expect("ids were checked"),
        }
    }

    /// `self <- alpha * self`. Enrolled here; nothing to check, so nothing to report (a
    /// poisoned block stays poisoned).
    pub fn scale(&self, alpha: T) {
        self.scale_blocks(alpha, Blocks::All)
            .expect("scaling every block has nothing to check")
    }

    /// `self <- alpha * self` on the selected blocks.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`]; nothing is enrolled on error.
    pub fn scale_blocks(&self, alpha: T, blocks: Blocks<'_>) -> Result<(), Error> {
        let ids = blocks.resolve(self.num_blocks())?;
        let threads = tessera_core::Runtime::current().threads();
        for piece in &self.pieces(&ids, matches!(blocks, Blocks::All)) {
            let access = self.piece(piece).into_write();
            P::schedule(
                "blocks.scale",
                self.largest(piece),
                threads,
                false,
                access,
                move |mut y| P::scale(&mut y, alpha, threads),
            )?;
        }
        Ok(())
    }

    /// `self <- alpha * x + self`.
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`] unless `x` has the same structure;
    /// [`Error::DeviceMismatch`] unless it lives where `self` does;
    /// [`Error::AliasedOperands`] when `x` is `self`.
    pub fn axpy(&self, alpha: T, x: &Self) -> Result<(), Error> {
        self.axpy_blocks(alpha, x, Blocks::All)
    }

    /// `self <- alpha * x + self` on the selected blocks.
    ///
    /// # Errors
    ///
    /// As [`axpy`](Self::axpy), and [`Error::UnknownBlock`].
    pub fn axpy_blocks(&self, alpha: T, x: &Self, blocks: Blocks<'_>) -> Result<(), Error> {
        self.check_same_structure(x)?;
        self.check_same_placement(x)?;
        if self.same_storage(x) {
            return Err(Error::AliasedOperands { operation: "axpy" });
        }
        let ids = blocks.resolve(self.num_blocks())?;
        let threads = tessera_core::Runtime::current().threads();
        for piece in &self.pieces(&ids, matches!(blocks, Blocks::All)) {
            let access = (x.piece(piece).into_read(), self.piece(piece).into_write());
            P::schedule(
                "blocks.axpy",
                self.largest(piece),
                threads,
                false,
                access,
                move |(x, mut y)| P::axpy(alpha, &x, &mut y, threads),
            )?;
        }
        Ok(())
    }

    /// `alpha * op(self) + beta * other` into a new tensor at the same placement, with `op`
    /// the conjugate when `conj`; blocks outside the selection are zero in the result.
    fn combine(
        &self,
        alpha: T,
        conj: bool,
        other: Option<(T, &Self)>,
        blocks: Blocks<'_>,
    ) -> Result<Self, Error> {
        if let Some((_, o)) = other {
            self.check_same_structure(o)?;
            self.check_same_placement(o)?;
        }
        let ids = blocks.resolve(self.num_blocks())?;
        let all = matches!(blocks, Blocks::All);
        let out = self.output(Arc::clone(self.structure()), all)?;
        self.combine_into(alpha, conj, other, &out, &ids, all)?;
        Ok(out)
    }

    /// `out <- alpha * op(self) + beta * other` on blocks `ids` (every block when `all`);
    /// the operands are checked.
    fn combine_into(
        &self,
        alpha: T,
        conj: bool,
        other: Option<(T, &Self)>,
        out: &Self,
        ids: &[usize],
        all: bool,
    ) -> Result<(), Error> {
        let threads = tessera_core::Runtime::current().threads();
        for piece in &self.pieces(ids, all) {
            let (x, y) = (
                self.piece(piece).into_read(),
                out.piece(piece).into_overwrite(),
            );
            let largest = self.largest(piece);
            match other {
                None => P::schedule(
                    "blocks.copy",
                    largest,
                    threads,
                    false,
                    (x, y),
                    move |(x, mut y)| P::combine(alpha, &x, conj, None, &mut y, threads),
                )?,
                Some((beta, o)) => P::schedule(
                    "blocks.add",
                    largest,
                    threads,
                    false,
                    (x, o.piece(piece).into_read(), y),
                    move |(x, z, mut y)| {
                        P::combine(alpha, &x, conj, Some((beta, &z)), &mut y, threads)
                    },
                )?,
            };
        }
        Ok(())
    }

    /// `self + other` into a new tensor.
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`] unless `other` has the same structure,
    /// [`Error::DeviceMismatch`] unless it lives where `self` does.
    pub fn add(&self, other: &Self) -> Result<Self, Error> {
        self.add_blocks(other, Blocks::All)
    }

    /// `self + other` on the selected blocks into a new tensor (the others zero).
    ///
    /// # Errors
    ///
    /// As [`add`](Self::add), and [`Error::UnknownBlock`].
    pub fn add_blocks(&self, other: &Self, blocks: Blocks<'_>) -> Result<Self, Error> {
        self.combine(T::ONE, false, Some((T::ONE, other)), blocks)
    }

    /// The elementwise complex conjugate, into a new tensor with the same structure (the
    /// values themselves for real types).
    ///
    /// # Panics
    ///
    /// When the new tensor's storage cannot be had (as [`AsyncArray::zeros`]).
    ///
    /// [`AsyncArray::zeros`]: crate::AsyncArray::zeros
    pub fn conj(&self) -> Self {
        self.conj_blocks(Blocks::All)
            .unwrap_or_else(|e| panic!("Tensor::conj: {e}"))
    }

    /// The elementwise complex conjugate of the selected blocks, into a new tensor with the
    /// same structure (the other blocks zero).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`]; the new storage's refusal.
    pub fn conj_blocks(&self, blocks: Blocks<'_>) -> Result<Self, Error> {
        self.combine(T::ONE, true, None, blocks)
    }

    /// An explicit, scheduled copy onto a new allocation (at the same placement) and new
    /// records.
    ///
    /// # Panics
    ///
    /// When the new tensor's storage cannot be had (as [`AsyncArray::zeros`]).
    ///
    /// [`AsyncArray::zeros`]: crate::AsyncArray::zeros
    pub fn duplicate(&self) -> Self {
        self.combine(T::ONE, false, None, Blocks::All)
            .unwrap_or_else(|e| panic!("Tensor::duplicate: {e}"))
    }

    /// `self <- src`.
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`], [`Error::DeviceMismatch`], or
    /// [`Error::AliasedOperands`] when `src` is `self`.
    pub fn copy_from(&self, src: &Self) -> Result<(), Error> {
        self.copy_from_blocks(src, Blocks::All)
    }

    /// `self <- src` on the selected blocks.
    ///
    /// # Errors
    ///
    /// As [`copy_from`](Self::copy_from), and [`Error::UnknownBlock`].
    pub fn copy_from_blocks(&self, src: &Self, blocks: Blocks<'_>) -> Result<(), Error> {
        self.check_same_structure(src)?;
        self.check_same_placement(src)?;
        if self.same_storage(src) {
            return Err(Error::AliasedOperands {
                operation: "copy_from",
            });
        }
        let ids = blocks.resolve(self.num_blocks())?;
        src.combine_into(
            T::ONE,
            false,
            None,
            self,
            &ids,
            matches!(blocks, Blocks::All),
        )
    }

    /// Sums per-piece partial results (one task each) in one final task.
    fn reduce<R: Scalar>(
        parts: Vec<Async<R>>,
        finish: impl FnOnce(R) -> R + Send + 'static,
    ) -> Result<Async<R>, Error> {
        let out = Async::new(R::ZERO);
        let reads: Vec<_> = parts.iter().map(Async::read).collect();
        schedule_sequential_named(
            "blocks.reduce",
            (reads, out.overwrite()),
            move |(parts, out)| {
                let mut acc = R::ZERO;
                for p in parts {
                    acc += *p;
                }
                *out = finish(acc);
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// The Frobenius norm, computed by scheduled tasks: a host value the host reads with
    /// `get` (`a.norm().get()?`), on every placement.
    pub fn norm(&self) -> Async<T::Real> {
        self.norm_blocks(Blocks::All)
            .expect("the norm of every block has nothing to check")
    }

    /// The Frobenius norm of the selected blocks, computed by scheduled tasks.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBlock`]; nothing is enrolled on error.
    pub fn norm_blocks(&self, blocks: Blocks<'_>) -> Result<Async<T::Real>, Error> {
        let ids = blocks.resolve(self.num_blocks())?;
        let threads = tessera_core::Runtime::current().threads();
        let mut parts = Vec::new();
        for piece in &self.pieces(&ids, matches!(blocks, Blocks::All)) {
            let part = Async::new(T::Real::ZERO);
            let access = (self.piece(piece).into_read(), part.overwrite());
            P::schedule(
                "blocks.norm",
                self.largest(piece),
                threads,
                true,
                access,
                move |(x, p)| {
                    *p = P::norm_sqr(&x, threads)?;
                    Ok(())
                },
            )?;
            parts.push(part);
        }
        Self::reduce(parts, T::sqrt_real)
    }

    /// The inner product `<self, other> = sum(conj(self) * other)`: a host value.
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`] unless `other` has the same structure,
    /// [`Error::DeviceMismatch`] unless it lives where `self` does.
    pub fn inner(&self, other: &Self) -> Result<Async<T>, Error> {
        self.inner_blocks(other, Blocks::All)
    }

    /// The inner product `<self, other> = sum(conj(self) * other)` over the selected blocks.
    ///
    /// # Errors
    ///
    /// As [`inner`](Self::inner), and [`Error::UnknownBlock`].
    pub fn inner_blocks(&self, other: &Self, blocks: Blocks<'_>) -> Result<Async<T>, Error> {
        self.check_same_structure(other)?;
        self.check_same_placement(other)?;
        let ids = blocks.resolve(self.num_blocks())?;
        let threads = tessera_core::Runtime::current().threads();
        let mut parts = Vec::new();
        for piece in &self.pieces(&ids, matches!(blocks, Blocks::All)) {
            let part = Async::new(T::ZERO);
            let access = (
                self.piece(piece).into_read(),
                other.piece(piece).into_read(),
                part.overwrite(),
            );
            P::schedule(
                "blocks.inner",
                self.largest(piece),
                threads,
                true,
                access,
                move |(x, y, p)| {
                    *p = P::dot(&x, &y, threads)?;
                    Ok(())
                },
            )?;
            parts.push(part);
        }
        Self::reduce(parts, |x| x)
    }

    /// The tensor with its legs reordered (new leg `k` is old leg `perm[k]`) and split anew
    /// into `n_codomain` codomain legs, at the same placement. For fermionic sectors each
    /// block carries the sign of the odd legs the permutation crosses.
    ///
    /// The plan (the re-indexing and one copy per block) is kept by the structure
    /// ([`BlockStructure::permutation`]), so repeating a permutation plans nothing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPermutation`] when `perm` is not a permutation of the legs or
    /// `n_codomain` exceeds their number; on a device, why it cannot permute.
    pub fn permute(&self, perm: &[usize], n_codomain: usize) -> Result<Self, Error> {
        self.permute_blocks(perm, n_codomain, Blocks::All)
    }

    /// [`permute`](Self::permute) of the selected blocks; the other blocks of the result are
    /// zero.
    ///
    /// # Errors
    ///
    /// As [`permute`](Self::permute), and [`Error::UnknownBlock`].
    pub fn permute_blocks(
        &self,
        perm: &[usize],
        n_codomain: usize,
        blocks: Blocks<'_>,
    ) -> Result<Self, Error> {
        let permuted = self.structure().permutation(perm, n_codomain)?;
        blocks.resolve(self.num_blocks())?;
        let out = self.output(
            Arc::new(permuted.structure.clone()),
            matches!(blocks, Blocks::All),
        )?;
        self.permute_into_with_blocks(&permuted, perm, &out, blocks)?;
        Ok(out)
    }

    /// Like [`permute`](Self::permute), into an existing tensor `out` (at the same
    /// placement) that has the permuted structure (so a repeated permutation reuses its
    /// allocation).
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`] when `out` does not have the permuted structure,
    /// [`Error::DeviceMismatch`] when it lives elsewhere, [`Error::AliasedOperands`] when
    /// `out` is `self`.
    pub fn permute_into(&self, perm: &[usize], n_codomain: usize, out: &Self) -> Result<(), Error> {
        self.permute_into_blocks(perm, n_codomain, out, Blocks::All)
    }

    /// [`permute_into`](Self::permute_into) of the selected blocks (the other blocks of
    /// `out` are left as they are).
    ///
    /// # Errors
    ///
    /// As [`permute_into`](Self::permute_into), and [`Error::UnknownBlock`].
    pub fn permute_into_blocks(
        &self,
        perm: &[usize],
        n_codomain: usize,
        out: &Self,
        blocks: Blocks<'_>,
    ) -> Result<(), Error> {
        let permuted = self.structure().permutation(perm, n_codomain)?;
        self.permute_into_with_blocks(&permuted, perm, out, blocks)
    }

    /// Like [`permute_into`](Tensor::permute_into), with the re-indexing already computed
    /// by [`BlockStructure::permuted`] for `perm` (a contraction plan keeps it, so a repeated
    /// contraction does not re-index).
    ///
    /// # Errors
    ///
    /// As `permute_into`; [`Error::InvalidPermutation`] when `permuted` was not computed for
    /// `perm` and this tensor's block count, [`Error::StructureMismatch`] when this tensor's
    /// structure is not the one it was computed from.
    pub fn permute_into_with(
        &self,
        permuted: &Permuted<S>,
        perm: &[usize],
        out: &Self,
    ) -> Result<(), Error> {
        self.permute_into_with_blocks(permuted, perm, out, Blocks::All)
    }

    /// [`permute_into_with`](Self::permute_into_with) of the selected blocks.
    ///
    /// # Errors
    ///
    /// As [`permute_into_with`](Self::permute_into_with), and [`Error::UnknownBlock`].
    pub fn permute_into_with_blocks(
        &self,
        permuted: &Permuted<S>,
        perm: &[usize],
        out: &Self,
        blocks: Blocks<'_>,
    ) -> Result<(), Error> {
        check_permuted(self.structure(), permuted, perm, out.structure())?;
        self.check_same_placement(out)?;
        if self.same_storage(out) {
            return Err(Error::AliasedOperands {
                operation: "permute_into",
            });
        }
        let ids = blocks.resolve(self.num_blocks())?;
        let moves = ids.iter().map(|&i| {
            let negative = permuted.sign(i).expect("block of the structure") < 0;
            (i, permuted.block_map[i], negative)
        });
        self.relabel_blocks(moves, out, perm, false, Some(permuted.copy_slots()))
    }

    /// The adjoint: codomain and domain swapped, legs dualled, elements conjugated (each
    /// block's matrix is conjugate-transposed). Fermionic twists are not applied.
    ///
    /// # Errors
    ///
    /// The adjoint structure's errors (an overflowing size).
    pub fn adjoint(&self) -> Result<Self, Error> {
        self.adjoint_blocks(Blocks::All)
    }

    /// The [`adjoint`](Self::adjoint) of the selected blocks (the other blocks of the result
    /// are zero).
    ///
    /// # Errors
    ///
    /// As [`adjoint`](Self::adjoint), and [`Error::UnknownBlock`].
    pub fn adjoint_blocks(&self, blocks: Blocks<'_>) -> Result<Self, Error> {
        let remapped = self.structure().adjoint()?;
        let (n, nc) = (self.structure().num_legs(), self.structure().n_codomain());
        let perm: Vec<usize> = (nc..n).chain(0..nc).collect();
        let ids = blocks.resolve(self.num_blocks())?;
        let out = self.output(Arc::new(remapped.structure), matches!(blocks, Blocks::All))?;
        let moves = ids.iter().map(|&i| {
            let j = remapped.block_map[i].expect("every block has an adjoint block");
            (i, j, false)
        });
        self.relabel_blocks(moves, &out, &perm, true, None)?;
        Ok(out)
    }

    /// This tensor on `full`, a structure with the same legs, split and flux whose blocks
    /// include all of this one's (the structure without a presence mask, say): each block
    /// copied onto its block of `full`, every other block zero. At any placement, by the
    /// permutation's block moves (with the identity permutation).
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`] when the legs, split or flux differ,
    /// [`Error::NoSuchBlock`] for a block `full` lacks; the new storage's refusal.
    pub fn embed(&self, full: impl Into<Arc<BlockStructure<S>>>) -> Result<Self, Error> {
        let full = full.into();
        let s = self.structure();
        if full.legs() != s.legs() || full.n_codomain() != s.n_codomain() || full.flux() != s.flux()
        {
            return Err(Error::StructureMismatch {
                expected: describe(s),
                given: describe(&full),
            });
        }
        let moves = s
            .blocks()
            .map(|b| match full.block_id(b.segments()) {
                Some(j) => Ok((b.id(), j, false)),
                None => Err(Error::NoSuchBlock {
                    segments: b.segments().to_vec(),
                }),
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let out = self.output(full, false)?;
        let identity: Vec<usize> = (0..s.num_legs()).collect();
        self.relabel_blocks(moves.into_iter(), &out, &identity, false, None)?;
        Ok(out)
    }

    /// A new tensor at this placement for the result of an operation: when `all` blocks are
    /// written, its storage is taken uninitialised (the present blocks tile the allocation
    /// exactly, so every element is overwritten before anything can read it); else zeros,
    /// which the unselected blocks keep.
    fn output(&self, structure: Arc<BlockStructure<S>>, all: bool) -> Result<Self, Error> {
        Self::alloc_on(structure, &self.placement(), !all)
    }

    /// Schedules `out[j] <- ±op(permute_axes(self[i], perm))` for every move
    /// `(i, j, negative)`, with the minus sign where `negative` and `op` the conjugate when
    /// `conj`. On the host, consecutive blocks are grouped into tasks of an equal share of
    /// the work, [`PERMUTE_TASKS_PER_WORKER`] per worker of the current runtime, and at
    /// least [`GROUP_ELEMS`] elements each: a task costs a few microseconds to enroll and
    /// run, as much as moving several thousand elements, and the enrolling thread competes
    /// with the workers for the cores; on a device, one task moves every block (one
    /// launch). A group reads one region and writes one (one access each, on exactly its
    /// blocks' records). With `plans` (a permutation's slots for its planned copies, one per
    /// block of `self`, onto its image in `out`), a host moves each block through its
    /// plan, which the first task to move the block makes and keeps.
    fn relabel_blocks(
        &self,
        moves: impl Iterator<Item = (usize, usize, bool)>,
        out: &Self,
        perm: &[usize],
        conj: bool,
        plans: Option<Arc<[OnceLock<CopyPlan>]>>,
    ) -> Result<(), Error> {
        self.placement()
            .probe_permute()
            .map_err(crate::tensor::placement_error)?;
        let moves: Vec<(usize, usize, bool)> = moves.collect();
        let len = |i: usize| self.structure().block(i).expect("checked id").len();
        let total: usize = moves.iter().map(|&(i, _, _)| len(i)).sum();
        let threads = tessera_core::Runtime::current().threads();
        let per_task = if P::CUTS_TASKS {
            permute_task_elems(total, threads)
        } else {
            usize::MAX
        };
        let streaming = Stores::for_result(total * size_of::<T>()) == Stores::Streaming;
        let rows = out.structure().n_codomain();
        let perm: Arc<[usize]> = perm.into();
        let mut group: Vec<(usize, usize, bool)> = Vec::new();
        let mut elems = 0;
        let flush = |group: &mut Vec<(usize, usize, bool)>| -> Result<(), Error> {
            if group.is_empty() {
                return Ok(());
            }
            let ids = |side: fn(&(usize, usize, bool)) -> usize| -> SmallVec<[usize; 32]> {
                group.iter().map(side).collect()
            };
            let reads = self.region(&ids(|m| m.0))?.into_read();
            let writes = out.region(&ids(|m| m.1))?.into_overwrite();
            let largest = group.iter().map(|m| len(m.0)).max().unwrap_or(0);
            // The next group is about as long: allocate it once rather than grow it.
            let group = std::mem::replace(group, Vec::with_capacity(group.len()));
            let (perm, plans) = (Arc::clone(&perm), plans.clone());
            P::schedule(
                "blocks.permute",
                largest,
                threads,
                false,
                (reads, writes),
                move |(x, mut y)| {
                    let moves: Vec<Moved<'_>> = group
                        .iter()
                        .map(|&(i, _, negate)| Moved {
                            negate,
                            plan: plans.as_ref().map(|p| &p[i]),
                        })
                        .collect();
                    let how = Permutation {
                        perm: &perm,
                        rows,
                        moves: &moves,
                        conj,
                        streaming,
                    };
                    P::permute(&x, &mut y, &how, threads)
                },
            )?;
            Ok(())
        };
        for (i, j, negative) in moves {
            elems += len(i);
            group.push((i, j, negative));
            if elems >= per_task {
                flush(&mut group)?;
                elems = 0;
            }
        }
        flush(&mut group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AsyncArray;
    use crate::testing::{Kind, for_each_kind, random_perm, random_structure};
    use num_complex::Complex;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use tessera_testing::{Approx, assert_close_each, ravel, unravel};

    type C64 = Complex<f64>;

    fn dims<S: AbelianSector>(s: &BlockStructure<S>) -> Vec<usize> {
        s.legs().iter().map(|l| l.dim()).collect()
    }

    /// The parity of the sector at element `i` of each leg (the reference's own lookup).
    fn parities<S: AbelianSector>(s: &BlockStructure<S>, index: &[usize]) -> Vec<bool> {
        s.legs()
            .iter()
            .zip(index)
            .map(|(leg, &i)| {
                let seg = (0..leg.num_segments())
                    .find(|&g| leg.range(g).unwrap().contains(&i))
                    .unwrap();
                leg.segment(seg).unwrap().sector.parity()
            })
            .collect()
    }

    /// Dense permutation with the fermionic sign: new axis `k` is old axis `perm[k]`.
    fn dense_permute<T: Scalar, S: AbelianSector>(
        s: &BlockStructure<S>,
        dense: &[T],
        perm: &[usize],
    ) -> Vec<T> {
        let old = dims(s);
        let new: Vec<usize> = perm.iter().map(|&p| old[p]).collect();
        let mut out = vec![T::ZERO; dense.len()];
        for (k, &v) in dense.iter().enumerate() {
            let idx = unravel(k, &old);
            let odd = parities(s, &idx);
            let mut crossings = 0;
            for a in 0..perm.len() {
                for b in a + 1..perm.len() {
                    if perm[a] > perm[b] && odd[perm[a]] && odd[perm[b]] {
                        crossings += 1;
                    }
                }
            }
            let nidx: Vec<usize> = perm.iter().map(|&p| idx[p]).collect();
            out[ravel(&nidx, &new)] = if crossings % 2 == 1 { -v } else { v };
        }
        out
    }

    fn random_scalar<T: Scalar>(rng: &mut ChaCha8Rng) -> T {
        T::from_c64(Complex::new(
            rng.gen_range(-2.0..2.0),
            rng.gen_range(-2.0..2.0),
        ))
    }

    fn differential<T: Scalar + Approx, S: Kind>(seed: u64, cases: usize) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for case in 0..cases {
            let s = Arc::new(random_structure::<S>(&mut rng));
            let what = |op: &str| format!("{op}, {} case {case}, {}", T::NAME, describe(&s));
            let x = AsyncArray::<T, S>::random(Arc::clone(&s), rng.r#gen());
            let y = AsyncArray::<T, S>::random(Arc::clone(&s), rng.r#gen());
            let (xd, yd) = (x.to_dense().unwrap(), y.to_dense().unwrap());
            // Round trips.
            assert_close_each(
                &AsyncArray::<T, S>::from_dense(Arc::clone(&s), &xd)
                    .unwrap()
                    .to_dense()
                    .unwrap(),
                &xd,
                1e-12,
                what("from_dense"),
            );
            assert_close_each(
                &AsyncArray::<T, S>::from_blocks(Arc::clone(&s), &x.to_blocks().unwrap())
                    .unwrap()
                    .to_dense()
                    .unwrap(),
                &xd,
                1e-12,
                what("from_blocks"),
            );
            let alpha: T = random_scalar(&mut rng);
            // Elementwise operations.
            let z = x.add(&y).unwrap();
            let zc = x.conj();
            y.axpy(alpha, &x).unwrap();
            x.scale(alpha);
            let scaled: Vec<T> = xd.iter().map(|&v| alpha * v).collect();
            assert_close_each(&x.to_dense().unwrap(), &scaled, 1e-12, what("scale"));
            let axpy: Vec<T> = xd.iter().zip(&yd).map(|(&a, &b)| alpha * a + b).collect();
            assert_close_each(&y.to_dense().unwrap(), &axpy, 1e-12, what("axpy"));
            let sum: Vec<T> = xd.iter().zip(&yd).map(|(&a, &b)| a + b).collect();
            assert_close_each(&z.to_dense().unwrap(), &sum, 1e-12, what("add"));
            assert_close_each(
                &zc.to_dense().unwrap(),
                &xd.iter().map(|v| v.conj()).collect::<Vec<_>>(),
                1e-12,
                what("conj"),
            );
            // Reductions, on the updated values.
            let (xd2, yd2) = (x.to_dense().unwrap(), y.to_dense().unwrap());
            let norm: f64 = xd2.iter().map(|v| v.abs2().into()).sum::<f64>().sqrt();
            let got: f64 = x.norm().get().unwrap().into();
            assert!(
                (got - norm).abs() <= 1e-12 * (1.0 + norm),
                "{}",
                what("norm")
            );
            let inner = xd2
                .iter()
                .zip(&yd2)
                .fold(T::ZERO, |acc, (&a, &b)| acc + a.conj() * b);
            assert_close_each(
                &[x.inner(&y).unwrap().get().unwrap()],
                &[inner],
                1e-12,
                what("inner"),
            );
            // Permutation with a new split, and the adjoint.
            let n = s.num_legs();
            let perm = random_perm(&mut rng, n);
            let nc = rng.gen_range(0..=n);
            let p = x.permute(&perm, nc).unwrap();
            assert_close_each(
                &p.to_dense().unwrap(),
                &dense_permute(&s, &xd2, &perm),
                1e-12,
                what("permute"),
            );
            let back: Vec<usize> = (0..n)
                .map(|k| perm.iter().position(|&q| q == k).unwrap())
                .collect();
            assert_close_each(
                &p.permute(&back, s.n_codomain())
                    .unwrap()
                    .to_dense()
                    .unwrap(),
                &xd2,
                1e-12,
                what("permute back"),
            );
            let adj = x.adjoint().unwrap();
            let nd = n - s.n_codomain();
            let adj_perm: Vec<usize> = (s.n_codomain()..n).chain(0..s.n_codomain()).collect();
            let old = dims(&s);
            let new: Vec<usize> = adj_perm.iter().map(|&q| old[q]).collect();
            let mut want = vec![T::ZERO; xd2.len()];
            for (k, v) in xd2.iter().enumerate() {
                let idx = unravel(k, &old);
                let nidx: Vec<usize> = adj_perm.iter().map(|&q| idx[q]).collect();
                want[ravel(&nidx, &new)] = v.conj();
            }
            assert_eq!(adj.structure().n_codomain(), nd);
            assert_close_each(&adj.to_dense().unwrap(), &want, 1e-12, what("adjoint"));
            // A subset of blocks: only those change.
            if s.num_blocks() > 1 {
                let chosen: Vec<usize> =
                    (0..s.num_blocks()).filter(|_| rng.gen_bool(0.5)).collect();
                let before = x.to_blocks().unwrap();
                x.scale_blocks(alpha, Blocks::Only(&chosen)).unwrap();
                for (i, (b, a)) in before.iter().zip(x.to_blocks().unwrap()).enumerate() {
                    let want: Vec<T> = if chosen.contains(&i) {
                        b.iter().map(|&v| alpha * v).collect()
                    } else {
                        b.clone()
                    };
                    assert_close_each(&a, &want, 1e-12, what("scale on a subset"));
                }
                let part: f64 = x
                    .norm_blocks(Blocks::Only(&chosen))
                    .unwrap()
                    .get()
                    .unwrap()
                    .into();
                let blocks = x.to_blocks().unwrap();
                let want: f64 = chosen
                    .iter()
                    .flat_map(|&i| &blocks[i])
                    .map(|v| v.abs2().into())
                    .sum::<f64>()
                    .sqrt();
                assert!(
                    (part - want).abs() <= 1e-12 * (1.0 + want),
                    "{}",
                    what("norm on a subset")
                );
            }
            // Element reads on the host.
            if !xd2.is_empty() {
                let k = rng.gen_range(0..xd2.len());
                assert_eq!(x.get(&unravel(k, &old)).unwrap(), x.to_dense().unwrap()[k]);
            }
        }
    }

    fn differential_f64<S: Kind>(seed: u64) {
        differential::<f64, S>(seed, 150);
    }
    fn differential_c64<S: Kind>(seed: u64) {
        differential::<C64, S>(seed + 1, 60);
    }
    fn differential_single<S: Kind>(seed: u64) {
        differential_f32::<S>(seed + 2);
    }
    fn differential_f32<S: Kind>(seed: u64) {
        // Single precision: scale and norm against the dense reference, looser tolerance.
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..40 {
            let s = Arc::new(random_structure::<S>(&mut rng));
            let x = AsyncArray::<Complex<f32>, S>::random(Arc::clone(&s), rng.r#gen());
            let y = AsyncArray::<f32, S>::random(Arc::clone(&s), rng.r#gen());
            let xd = x.to_dense().unwrap();
            x.scale(Complex::new(0.5, -1.0));
            for (a, b) in x.to_dense().unwrap().iter().zip(&xd) {
                assert!((a - Complex::new(0.5, -1.0) * b).norm() <= 1e-5);
            }
            let yd = y.to_dense().unwrap();
            let want = yd.iter().map(|v| v * v).sum::<f32>().sqrt();
            assert!((y.norm().get().unwrap() - want).abs() <= 1e-4 * (1.0 + want));
        }
    }

    #[test]
    fn operations_equal_the_dense_reference_over_every_sector_kind() {
        for_each_kind!(differential_f64);
        for_each_kind!(differential_c64);
        for_each_kind!(differential_single);
    }

    /// A random structure whose segments are 1 to 12 wide (the usual random structures
    /// have segments of 1 to 3), so that blocks hold full squares of the vector transposes
    /// as well as edges.
    fn wide_structure<S: Kind>(rng: &mut ChaCha8Rng) -> BlockStructure<S> {
        let s = random_structure::<S>(rng);
        let legs: Vec<crate::Leg<S>> = s
            .legs()
            .iter()
            .map(|l| {
                let segs: Vec<(S, usize)> = l
                    .segments()
                    .iter()
                    .map(|g| (g.sector.clone(), [1, 8, 9, 12, 3][rng.gen_range(0..5)]))
                    .collect();
                if S::TILED {
                    crate::Leg::tiled(l.direction(), segs).unwrap()
                } else {
                    crate::Leg::new(l.direction(), segs).unwrap()
                }
            })
            .collect();
        BlockStructure::from_legs(legs, s.n_codomain(), s.flux().clone()).unwrap()
    }

    /// Permutation (with fermionic signs), on all blocks and on a subset, and the adjoint,
    /// for one element type, against the dense reference.
    fn permutations_of<T: Scalar + Approx, S: Kind>(seed: u64, cases: usize) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for case in 0..cases {
            let s = Arc::new(wide_structure::<S>(&mut rng));
            if s.total_len() > 60_000 {
                continue;
            }
            let what = |op: &str| format!("{op}, {} case {case}, {}", T::NAME, describe(&s));
            let x = AsyncArray::<T, S>::random(Arc::clone(&s), rng.r#gen());
            let xd = x.to_dense().unwrap();
            let n = s.num_legs();
            let perm = random_perm(&mut rng, n);
            let nc = rng.gen_range(0..=n);
            let p = x.permute(&perm, nc).unwrap();
            let want = dense_permute(&s, &xd, &perm);
            assert_close_each(&p.to_dense().unwrap(), &want, 1e-12, what("permute"));
            // A subset: the chosen blocks move, the others of the result are zero.
            let chosen: Vec<usize> = (0..s.num_blocks()).filter(|_| rng.gen_bool(0.5)).collect();
            let q = x.permute_blocks(&perm, nc, Blocks::Only(&chosen)).unwrap();
            let planned = s.permuted(&perm, nc).unwrap();
            let got = q.to_blocks().unwrap();
            let full = p.to_blocks().unwrap();
            for i in 0..s.num_blocks() {
                let j = planned.block_map[i];
                if chosen.contains(&i) {
                    assert_close_each(&got[j], &full[j], 1e-12, what("permute on a subset"));
                } else {
                    assert!(
                        got[j].iter().all(|&v| v == T::ZERO),
                        "{}",
                        what("unselected")
                    );
                }
            }
            let adj = x.adjoint().unwrap();
            let nc0 = s.n_codomain();
            let adj_perm: Vec<usize> = (nc0..n).chain(0..nc0).collect();
            let old = dims(&s);
            let new: Vec<usize> = adj_perm.iter().map(|&q| old[q]).collect();
            let mut want = vec![T::ZERO; xd.len()];
            for (k, v) in xd.iter().enumerate() {
                let idx = unravel(k, &old);
                let nidx: Vec<usize> = adj_perm.iter().map(|&q| idx[q]).collect();
                want[ravel(&nidx, &new)] = v.conj();
            }
            assert_close_each(&adj.to_dense().unwrap(), &want, 1e-12, what("adjoint"));
        }
    }

    /// `permute_into` (through the plan its structure keeps) equals `permute_into_with` and
    /// the dense reference for a target with the permuted structure built independently,
    /// and refuses targets that differ only in which blocks are present (fewer, or as many
    /// but others), writing nothing. The kept plan is the one handed out again.
    fn permute_into_targets<S: Kind>(seed: u64) {
        use crate::testing::random_mask;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for case in 0..60 {
            let full = random_structure::<S>(&mut rng);
            let mask = random_mask(&mut rng, full.num_blocks());
            let s = Arc::new(full.with_present(&mask).unwrap());
            let what = |op: &str| format!("{op}, case {case}, {}", describe(&s));
            let x = AsyncArray::<f64, S>::random(Arc::clone(&s), rng.r#gen());
            let n = s.num_legs();
            let perm = random_perm(&mut rng, n);
            let nc = rng.gen_range(0..=n);
            let planned = s.permuted(&perm, nc).unwrap();
            let target = AsyncArray::<f64, S>::zeros(planned.structure.clone());
            x.permute_into(&perm, nc, &target).unwrap();
            assert!(Arc::ptr_eq(
                &s.permutation(&perm, nc).unwrap(),
                &s.permutation(&perm, nc).unwrap()
            ));
            let other = AsyncArray::<f64, S>::zeros(planned.structure.clone());
            x.permute_into_with(&planned, &perm, &other).unwrap();
            assert_eq!(
                target.to_blocks().unwrap(),
                other.to_blocks().unwrap(),
                "{}",
                what("permute_into and permute_into_with")
            );
            assert_close_each(
                &target.to_dense().unwrap(),
                &dense_permute(&s, &x.to_dense().unwrap(), &perm),
                1e-12,
                what("permute_into"),
            );
            // Targets with other present blocks: one fewer, or one moved.
            let present = planned.structure.present_mask().to_bitvec();
            let on: Vec<usize> = present.iter_ones().collect();
            let off: Vec<usize> = present.iter_zeros().collect();
            let mut variants = Vec::new();
            if let Some(&a) = on.first() {
                let mut m = present.clone();
                m.set(a, false);
                variants.push(m.clone());
                if let Some(&b) = off.first() {
                    m.set(b, true);
                    variants.push(m);
                }
            }
            for m in variants {
                let wrong = AsyncArray::<f64, S>::random(
                    planned.structure.with_present(&m).unwrap(),
                    rng.r#gen(),
                );
                let before = wrong.to_blocks().unwrap();
                assert!(
                    matches!(
                        x.permute_into(&perm, nc, &wrong),
                        Err(Error::StructureMismatch { .. })
                    ),
                    "{}",
                    what("a target with other blocks")
                );
                assert_eq!(
                    wrong.to_blocks().unwrap(),
                    before,
                    "{}",
                    what("nothing written")
                );
            }
        }
    }

    #[test]
    fn permute_into_takes_the_kept_plan_and_refuses_other_targets() {
        for_each_kind!(permute_into_targets);
    }

    fn permutations_real<S: Kind>(seed: u64) {
        permutations_of::<f64, S>(seed, 40);
        permutations_of::<f32, S>(seed + 1, 25);
    }

    fn permutations_complex<S: Kind>(seed: u64) {
        permutations_of::<C64, S>(seed + 2, 25);
        permutations_of::<Complex<f32>, S>(seed + 3, 25);
    }

    /// The vector transposes (f64), the signed paths and the element-at-a-time edges, on
    /// blocks wide enough to hold full squares. (Real and complex types are two tests, so
    /// that the test harness runs them side by side.)
    #[test]
    fn permutations_of_wide_blocks_equal_the_dense_reference_for_real_types() {
        for_each_kind!(permutations_real);
    }

    /// The vector transposes (Complex<f32>, Complex<f64>) and the conjugating paths, as
    /// above.
    #[test]
    fn permutations_of_wide_blocks_equal_the_dense_reference_for_complex_types() {
        for_each_kind!(permutations_complex);
    }

    /// A block above `PARALLEL_BLOCK_ELEMS` is moved by all the workers at once, its plan
    /// cut into parts: the dense reference, for cuts along a transposed axis and along an
    /// outer one, on two workers (cut) and on one (not cut), with a small block beside it.
    #[test]
    fn permutations_of_a_block_cut_over_the_workers_equal_the_dense_reference() {
        use crate::{Direction, Leg, U1};
        let leg = |dir, big| Leg::new(dir, [(U1(0), big), (U1(1), 2)]).unwrap();
        let s = Arc::new(
            BlockStructure::from_legs(
                vec![
                    leg(Direction::In, 24),
                    leg(Direction::In, 23),
                    leg(Direction::Out, 24),
                    leg(Direction::Out, 25),
                ],
                2,
                U1(0),
            )
            .unwrap(),
        );
        assert!((0..s.num_blocks()).any(|i| s.block(i).unwrap().len() >= PARALLEL_BLOCK_ELEMS));
        for threads in [2, 1] {
            let rt = tessera_core::Runtime::new(threads).unwrap();
            rt.enter(|| {
                let x = AsyncArray::<Complex<f64>, U1>::random(Arc::clone(&s), 17);
                let dense = x.to_dense().unwrap();
                for (perm, nc) in [([2, 3, 0, 1], 2), ([1, 3, 0, 2], 1), ([0, 2, 1, 3], 3)] {
                    let got = x.permute(&perm, nc).unwrap();
                    assert_eq!(
                        got.to_dense().unwrap(),
                        dense_permute(&s, &dense, &perm),
                        "{perm:?} on {threads} workers"
                    );
                }
            });
        }
    }

    fn u1_structure(flux: i32) -> Arc<BlockStructure<crate::U1>> {
        use crate::{Direction, Leg, U1};
        let leg = Leg::new(Direction::In, [(U1(-1), 2), (U1(0), 3), (U1(1), 2)]).unwrap();
        Arc::new(BlockStructure::new(vec![leg.clone()], vec![leg], U1(flux)).unwrap())
    }

    /// A planned permutation moves its blocks through copy plans and raw block addresses:
    /// the dense reference, again on a second run (the plans kept), for a source with an
    /// equal structure built apart, and for a selection of blocks. Small, so that Miri
    /// interprets the raw block addresses.
    #[test]
    fn planned_permutations_equal_the_dense_reference() {
        use crate::U1;
        let s = u1_structure(0);
        let x = AsyncArray::<Complex<f64>, U1>::random(Arc::clone(&s), 5);
        let twin =
            AsyncArray::<Complex<f64>, U1>::from_blocks(u1_structure(0), &x.to_blocks().unwrap())
                .unwrap();
        let planned = s.permuted(&[1, 0], 1).unwrap();
        let dense = dense_permute(&s, &x.to_dense().unwrap(), &[1, 0]);
        let want =
            AsyncArray::<Complex<f64>, U1>::from_dense(Arc::new(planned.structure.clone()), &dense)
                .unwrap();
        for source in [&x, &x, &twin] {
            let got = AsyncArray::<Complex<f64>, U1>::zeros(planned.structure.clone());
            source.permute_into_with(&planned, &[1, 0], &got).unwrap();
            assert_eq!(got.to_dense().unwrap(), dense);
        }
        let some = AsyncArray::<Complex<f64>, U1>::zeros(planned.structure.clone());
        x.permute_into_with_blocks(&planned, &[1, 0], &some, Blocks::Only(&[2]))
            .unwrap();
        let (got, all) = (some.to_blocks().unwrap(), want.to_blocks().unwrap());
        let j = planned.block_map[2];
        for (k, block) in got.iter().enumerate() {
            if k == j {
                assert_eq!(block, &all[j]);
            } else {
                assert!(block.iter().all(|v| *v == Complex::new(0.0, 0.0)));
            }
        }
    }

    /// A structure keeps four permutation plans (a fifth drops the least recently used), a
    /// clone of it keeps none, and the plans it keeps (with their block copies, planned for
    /// it) do not keep it alive.
    #[test]
    fn a_structure_keeps_its_last_permutation_plans_without_keeping_itself() {
        use crate::U1;
        let s = u1_structure(0);
        let x = AsyncArray::<f64, U1>::random(Arc::clone(&s), 9);
        let y = x.permute(&[1, 0], 1).unwrap();
        let first = s.permutation(&[1, 0], 1).unwrap();
        assert!(Arc::ptr_eq(&first, &s.permutation(&[1, 0], 1).unwrap()));
        assert!(!Arc::ptr_eq(&first, &s.permutation(&[1, 0], 2).unwrap()));
        for nc in [0, 2] {
            s.permutation(&[0, 1], nc).unwrap();
        }
        // A use: [1, 0] with 1, the oldest kept, becomes the most recently used.
        assert!(Arc::ptr_eq(&first, &s.permutation(&[1, 0], 1).unwrap()));
        s.permutation(&[0, 1], 1).unwrap(); // the fifth drops [1, 0] with 2, not it
        assert!(Arc::ptr_eq(&first, &s.permutation(&[1, 0], 1).unwrap()));
        // Four others not kept now (two of them dropped before) push it out.
        for (perm, nc) in [([1, 0], 0), ([1, 0], 2), ([0, 1], 0), ([0, 1], 2)] {
            s.permutation(&perm, nc).unwrap();
        }
        assert!(!Arc::ptr_eq(&first, &s.permutation(&[1, 0], 1).unwrap()));
        let kept = s.kept_permutations();
        // 14 lookups (the first by `permute`), 4 of them hits; 10 plans made for 4 places.
        assert_eq!(
            (kept.hits, kept.misses, kept.evictions, kept.len),
            (4, 10, 6, 4)
        );
        let clone = Arc::new((*s).clone());
        assert!(!Arc::ptr_eq(
            &s.permutation(&[0, 1], 1).unwrap(),
            &clone.permutation(&[0, 1], 1).unwrap()
        ));
        let weak = Arc::downgrade(&s);
        // Once the permutation is done its task (and what it held) is gone.
        y.wait().unwrap();
        drop((s, x, y, first, clone));
        assert!(weak.upgrade().is_none(), "the structure was freed");
    }

    #[test]
    fn misuse_gives_typed_errors_and_writes_nothing() {
        use crate::U1;
        let s = u1_structure(0);
        let x = AsyncArray::<f64, U1>::random(Arc::clone(&s), 1);
        let y = AsyncArray::<f64, U1>::random(Arc::clone(&s), 2);
        let other = AsyncArray::<f64, U1>::random(u1_structure(1), 3);
        let (xd, yd) = (x.to_dense().unwrap(), y.to_dense().unwrap());
        assert!(matches!(
            y.axpy(2.0, &other),
            Err(Error::StructureMismatch { .. })
        ));
        assert!(matches!(
            y.copy_from(&other),
            Err(Error::StructureMismatch { .. })
        ));
        assert!(matches!(
            y.add(&other),
            Err(Error::StructureMismatch { .. })
        ));
        assert!(matches!(
            y.inner(&other),
            Err(Error::StructureMismatch { .. })
        ));
        assert_eq!(
            y.axpy(2.0, &y),
            Err(Error::AliasedOperands { operation: "axpy" })
        );
        assert_eq!(
            x.scale_blocks(5.0, Blocks::Only(&[0, 99])),
            Err(Error::UnknownBlock {
                block: 99,
                blocks: 3
            }),
            "a bad id anywhere in the selection refuses the whole operation"
        );
        // Every `_blocks` variant refuses a bad selection the same way, before it enrolls.
        let bad = Blocks::Only(&[1, 7]);
        let unknown = Error::UnknownBlock {
            block: 7,
            blocks: 3,
        };
        let z = AsyncArray::<f64, U1>::zeros(Arc::clone(x.structure()));
        assert_eq!(z.axpy_blocks(1.0, &x, bad), Err(unknown.clone()));
        assert_eq!(z.copy_from_blocks(&x, bad), Err(unknown.clone()));
        assert_eq!(x.add_blocks(&y, bad).unwrap_err(), unknown);
        assert_eq!(x.conj_blocks(bad).unwrap_err(), unknown);
        assert_eq!(x.norm_blocks(bad).unwrap_err(), unknown);
        assert_eq!(x.inner_blocks(&y, bad).unwrap_err(), unknown);
        assert_eq!(x.permute_blocks(&[1, 0], 1, bad).unwrap_err(), unknown);
        assert_eq!(x.adjoint_blocks(bad).unwrap_err(), unknown);
        let zp = AsyncArray::<f64, U1>::zeros(s.permuted(&[1, 0], 1).unwrap().structure);
        assert_eq!(
            x.permute_into_blocks(&[1, 0], 1, &zp, bad),
            Err(unknown.clone())
        );
        assert!(z.to_dense().unwrap().iter().all(|&v| v == 0.0));
        assert!(zp.to_dense().unwrap().iter().all(|&v| v == 0.0));
        assert_eq!(
            x.block(3).unwrap_err(),
            Error::UnknownBlock {
                block: 3,
                blocks: 3
            }
        );
        assert!(matches!(
            x.block_by_segments(&[0, 1]),
            Err(Error::NoSuchBlock { .. })
        ));
        assert!(matches!(
            x.permute(&[0, 0], 1),
            Err(Error::InvalidPermutation { .. })
        ));
        assert!(matches!(
            x.permute_into(&[1, 0], 1, &other),
            Err(Error::StructureMismatch { .. })
        ));
        assert_eq!(
            x.permute_into(&[0, 1], 1, &x),
            Err(Error::AliasedOperands {
                operation: "permute_into"
            })
        );
        // A plan used with another permutation than its own, or for a source with other
        // blocks (the same count, other shapes): refused before anything is scheduled.
        let planned = s.permuted(&[1, 0], 1).unwrap();
        let target = AsyncArray::<f64, U1>::zeros(planned.structure.clone());
        assert_eq!(
            x.permute_into_with(&planned, &[0, 1], &target),
            Err(Error::InvalidPermutation {
                legs: 2,
                given: vec![0, 1]
            })
        );
        let leg =
            crate::Leg::new(crate::Direction::In, [(U1(-1), 3), (U1(0), 2), (U1(1), 3)]).unwrap();
        let wider = BlockStructure::new(vec![leg.clone()], vec![leg], U1(0)).unwrap();
        let foreign = wider.permuted(&[1, 0], 1).unwrap();
        let foreign_target = AsyncArray::<f64, U1>::zeros(foreign.structure.clone());
        assert!(matches!(
            x.permute_into_with(&foreign, &[1, 0], &foreign_target),
            Err(Error::StructureMismatch { .. })
        ));
        assert!(target.to_dense().unwrap().iter().all(|&v| v == 0.0));
        assert!(foreign_target.to_dense().unwrap().iter().all(|&v| v == 0.0));
        assert!(matches!(x.get(&[7, 0]), Err(Error::IndexOutOfRange { .. })));
        assert!(matches!(x.get(&[0]), Err(Error::IndexOutOfRange { .. })));
        assert_eq!(
            x.get(&[0, 2]).unwrap(),
            0.0,
            "outside every block the tensor is zero"
        );
        assert_eq!(x.to_dense().unwrap(), xd, "nothing was written to x");
        assert_eq!(y.to_dense().unwrap(), yd, "nothing was written to y");
        // Dense input that breaks the symmetry names the element and its block.
        let mut bad = xd.clone();
        bad[2 * 7] = 1.5; // element (0, 2): charge -1 row, charge 0 column
        assert_eq!(
            AsyncArray::<f64, U1>::from_dense(Arc::clone(&s), &bad).unwrap_err(),
            Error::SymmetryBreaking {
                index: vec![0, 2],
                segments: vec![0, 1],
                value: "1.5".into()
            }
        );
        assert!(matches!(
            AsyncArray::<f64, U1>::from_dense(Arc::clone(&s), &xd[1..]),
            Err(Error::DataLength {
                expected: 49,
                given: 48,
                ..
            })
        ));
        let mut blocks = x.to_blocks().unwrap();
        blocks[1].pop();
        assert!(matches!(
            AsyncArray::<f64, U1>::from_blocks(Arc::clone(&s), &blocks),
            Err(Error::DataLength {
                expected: 9,
                given: 8,
                ..
            })
        ));
        assert!(matches!(
            AsyncArray::<f64, U1>::from_blocks(Arc::clone(&s), &blocks[..2]),
            Err(Error::DataLength {
                expected: 3,
                given: 2,
                ..
            })
        ));
    }

    #[test]
    fn blocks_share_one_allocation_and_one_record_each() {
        use crate::U1;
        let x = AsyncArray::<f64, U1>::zeros(u1_structure(0));
        let base = x.buffer().as_ptr() as usize;
        assert_eq!(base % tessera_core::ALIGN, 0);
        let ids: Vec<_> = (0..3)
            .map(|i| x.block(i).unwrap().hazards().records().next().unwrap().id())
            .collect();
        assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
        let again = x.block(1).unwrap();
        assert_eq!(
            again.hazards().records().next().unwrap().id(),
            ids[1],
            "a handle shares the block's record"
        );
        assert_eq!(x.hazards().len(), 3);
        // A composite of chosen blocks holds exactly their records.
        let of: Vec<_> = x.hazards_of([2, 0]).unwrap().ids().collect();
        assert_eq!(of.len(), 2);
        assert!(of.contains(&ids[0]) && of.contains(&ids[2]));
        assert!(matches!(
            x.hazards_of([1, 3]),
            Err(Error::UnknownBlock {
                block: 3,
                blocks: 3
            })
        ));
    }

    /// A block set holds exactly its blocks' records, hands out each block's own view, is
    /// ordered against per-block handles of the same blocks, and refuses an unknown block
    /// before anything is enrolled or written.
    #[test]
    fn block_sets_hold_exactly_their_blocks_and_order_with_single_blocks() {
        use crate::U1;
        use tessera_core::schedule;
        let x = AsyncArray::<f64, U1>::zeros(u1_structure(0));
        let record = |i| x.block(i).unwrap().hazards().records().next().unwrap().id();
        let set = x.block_set(&[2, 0]).unwrap();
        let mut held: Vec<_> = set.hazards().ids().collect();
        held.sort_unstable();
        let mut want = vec![record(0), record(2)];
        want.sort_unstable();
        assert_eq!(held, want);
        assert_eq!(set.region().ids(), &[2, 0]);
        // Write block 2 then block 0 through the set (after a write of block 0 alone, which
        // the set's write must wait for), then read both through single handles.
        schedule(x.block(0).unwrap().into_overwrite(), |mut b| {
            b.update(|_, _| 5.0);
            Ok(())
        })
        .unwrap();
        schedule(set.into_write(), |mut blocks| {
            for k in 0..blocks.len() {
                let mut b = blocks.get_mut(k);
                let len = b.len() as f64;
                b.update(|_, v| v + len + k as f64);
            }
            Ok(())
        })
        .unwrap();
        let blocks = x.to_blocks().unwrap();
        let len = |i: usize| x.structure().block(i).unwrap().len() as f64;
        assert!(blocks[0].iter().all(|&v| v == 5.0 + len(0) + 1.0));
        assert!(blocks[1].iter().all(|&v| v == 0.0));
        assert!(blocks[2].iter().all(|&v| v == len(2)));
        // An unknown block: a typed error, and no task ran.
        assert!(matches!(
            x.block_set(&[0, 3]),
            Err(Error::UnknownBlock {
                block: 3,
                blocks: 3
            })
        ));
        assert_eq!(x.to_blocks().unwrap(), blocks);
    }

    #[test]
    fn work_on_different_blocks_overlaps_and_work_on_one_block_is_ordered() {
        use crate::U1;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let rt = tessera_core::Runtime::new(2).unwrap();
        let x = AsyncArray::<f64, U1>::zeros(u1_structure(0));
        let started = Arc::new(AtomicUsize::new(0));
        for id in [0, 2] {
            let started = Arc::clone(&started);
            // Each task waits until both have started: it completes only if the runtime runs
            // the two blocks' tasks at the same time. The bound only turns a hang into a
            // failure; nothing is timed.
            rt.schedule(x.block(id).unwrap().write(), move |mut v| {
                started.fetch_add(1, Ordering::AcqRel);
                let t = std::time::Instant::now();
                while started.load(Ordering::Acquire) < 2 && t.elapsed().as_secs() < 30 {
                    std::thread::yield_now();
                }
                let overlapped = started.load(Ordering::Acquire) == 2;
                v.update(|_, _| if overlapped { 1.0 } else { -1.0 });
                Ok(())
            })
            .unwrap();
        }
        // On one block, a chain of updates keeps program order: v <- 3 v + k.
        for k in 0..50 {
            rt.schedule(x.block(1).unwrap().write(), move |mut v| {
                v.update(|_, e| 3.0 * e + f64::from(k));
                Ok(())
            })
            .unwrap();
        }
        let blocks = x.to_blocks().unwrap();
        assert!(
            blocks[0].iter().chain(&blocks[2]).all(|&v| v == 1.0),
            "blocks 0 and 2 overlapped"
        );
        let want = (0..50).fold(0.0, |v, k| 3.0 * v + f64::from(k));
        assert!(
            blocks[1].iter().all(|&v| v == want),
            "updates of one block ran in order"
        );
    }
}

#[cfg(test)]
mod span_tests {
    use super::*;
    use crate::{AsyncArray, Direction, Leg, Trivial};

    /// Elementwise operations take every path: a coupled sector of 3 x 3 blocks holding
    /// more than `PARALLEL_BLOCK_ELEMS` elements (one span, spread over the workers), one
    /// block that large selected beside small ones (spread too), and forty small sectors
    /// (one flat span); on one worker and on two, where the reductions give the same bits.
    #[test]
    fn elementwise_operations_over_big_and_small_sectors_match_the_dense_result() {
        let big = Leg::<Trivial>::tiling(&[600, 300, 50]).unwrap();
        let s = Arc::new(BlockStructure::new([big.clone()], [big.dual()], Trivial).unwrap());
        assert!(s.sectors()[0].len() >= PARALLEL_BLOCK_ELEMS && s.num_blocks() == 9);
        let len = |i: usize| s.block(i).unwrap().len();
        let large = (0..9).find(|&i| len(i) >= PARALLEL_BLOCK_ELEMS).unwrap();
        let others: Vec<usize> = (0..9).filter(|&i| len(i) < PARALLEL_BLOCK_ELEMS).collect();
        let selected = [large, others[0], others[4]];
        let small = Leg::new(Direction::In, (0..40).map(|q| (crate::U1(q), 3))).unwrap();
        let u =
            Arc::new(BlockStructure::new([small.clone()], [small.dual()], crate::U1(0)).unwrap());
        let mut sums = Vec::new();
        for threads in [1, 2] {
            tessera_core::Runtime::new(threads).unwrap().enter(|| {
                let (x, y) = (
                    AsyncArray::<f64, Trivial>::random(Arc::clone(&s), 1),
                    AsyncArray::random(Arc::clone(&s), 2),
                );
                sums.push(check(&x, &y));
                sums.push(check_selected(&x, &y, &selected));
                let (x, y) = (
                    AsyncArray::<f64, crate::U1>::random(Arc::clone(&u), 3),
                    AsyncArray::random(Arc::clone(&u), 4),
                );
                check(&x, &y);
            });
        }
        assert_eq!(
            sums[..2],
            sums[2..],
            "the reductions on one worker and on two"
        );
    }

    /// The operations on the `ids` blocks alone, block by block against their data; the
    /// norm and inner product of those blocks.
    fn check_selected<S: AbelianSector>(
        x: &AsyncArray<f64, S>,
        y: &AsyncArray<f64, S>,
        ids: &[usize],
    ) -> (f64, f64) {
        let (bx, by) = (x.to_blocks().unwrap(), y.to_blocks().unwrap());
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * (1.0 + b.abs());
        let only = Blocks::Only(ids);
        let each = |got: &[Vec<f64>], f: &dyn Fn(usize, f64, f64) -> f64| {
            for (i, block) in got.iter().enumerate() {
                let want = bx[i].iter().zip(&by[i]).map(|(&a, &b)| f(i, a, b));
                assert!(
                    block.iter().zip(want).all(|(&g, w)| close(g, w)),
                    "block {i}"
                );
            }
        };
        let picked = |i: usize| ids.contains(&i);
        let z = x.duplicate();
        z.axpy_blocks(-2.0, y, only).unwrap();
        z.scale_blocks(0.5, only).unwrap();
        each(&z.to_blocks().unwrap(), &|i, a, b| {
            if picked(i) { 0.5 * (a - 2.0 * b) } else { a }
        });
        let sum = x.add_blocks(y, only).unwrap().to_blocks().unwrap();
        each(&sum, &|i, a, b| if picked(i) { a + b } else { 0.0 });
        z.copy_from_blocks(y, only).unwrap();
        each(&z.to_blocks().unwrap(), &|i, a, b| {
            if picked(i) { b } else { a }
        });
        let sq = |i: &usize| bx[*i].iter().map(|a| a * a).sum::<f64>();
        let dot = |i: &usize| bx[*i].iter().zip(&by[*i]).map(|(a, b)| a * b).sum::<f64>();
        let norm = x.norm_blocks(only).unwrap().get().unwrap();
        let inner = x.inner_blocks(y, only).unwrap().get().unwrap();
        assert!(close(norm, ids.iter().map(sq).sum::<f64>().sqrt()));
        assert!(close(inner, ids.iter().map(dot).sum()));
        (norm, inner)
    }

    /// The operations on every block against the dense data; the norm and inner product.
    fn check<S: AbelianSector>(x: &AsyncArray<f64, S>, y: &AsyncArray<f64, S>) -> (f64, f64) {
        let (dx, dy) = (x.to_dense().unwrap(), y.to_dense().unwrap());
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * (1.0 + b.abs());
        let dot: f64 = dx.iter().zip(&dy).map(|(a, b)| a * b).sum();
        let inner = x.inner(y).unwrap().get().unwrap();
        assert!(close(inner, dot));
        let nrm = dx.iter().map(|a| a * a).sum::<f64>().sqrt();
        let norm = x.norm().get().unwrap();
        assert!(close(norm, nrm));
        assert_eq!(x.conj().to_dense().unwrap(), dx);
        let sum = x.add(y).unwrap().to_dense().unwrap();
        assert!(
            sum.iter()
                .zip(dx.iter().zip(&dy))
                .all(|(s, (a, b))| close(*s, a + b))
        );
        let z = x.duplicate();
        z.axpy(-2.0, y).unwrap();
        z.scale(0.5);
        let got = z.to_dense().unwrap();
        assert!(
            got.iter()
                .zip(dx.iter().zip(&dy))
                .all(|(g, (a, b))| close(*g, 0.5 * (a - 2.0 * b)))
        );
        z.copy_from(y).unwrap();
        assert_eq!(z.to_dense().unwrap(), dy);
        (norm, inner)
    }
}
