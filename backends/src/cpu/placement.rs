//! Host memory as a [`Placement`]: one [`SharedBuffer`] per tensor, kernels on strided views
//! of its granted extents, large extents cut over the workers of the task's runtime.
//!
//! Owns: [`Host`], the parts a large view is cut into ([`over_parts`]) and the thresholds
//! of that cut. Invariants:
//!
//! - A view is made only of an extent of a grant ([`Grant`] / [`GrantMut`]: their makers
//!   hold the hazard grants of exactly those elements, inside the buffer).
//! - A view of at least [`PARALLEL_BLOCK_ELEMS`] elements is worked on by all the workers
//!   of the task's runtime, in parts that write disjoint elements; a reduction adds its
//!   parts in an order fixed by the dims, so its value does not depend on the number of
//!   workers.

use super::{CopyPlan, Stores};
use crate::Scalar;
use crate::placement::{
    ExtentMismatch, Grant, GrantMut, Permutation, Placement, PlacementError, check_alike,
    merged_runs,
};
use rayon::prelude::*;
use tessera_core::{
    Access, Domain, KernelError, SendPtr, SharedBuffer, StridedMut, StridedRef, TaskId,
    schedule_sequential_if,
};

/// The elements from which one block's work is spread over the workers of its task's
/// runtime: a block of a few hundred MiB (the dense sectors of a DMRG state) would otherwise
/// be worked on by one thread. Below this a block's work takes less than the tens of
/// microseconds that fanning it out costs.
pub const PARALLEL_BLOCK_ELEMS: usize = 1 << 18;

/// The elements of one part of a block spread over the workers.
const PART_ELEMS: usize = 1 << 16;

/// Host memory: tensors in one [`SharedBuffer`], worked on by the runtime's workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Host;

/// Whether a view of `len` elements is worked on by all of `threads` workers at once.
pub fn fans_out(len: usize, threads: usize) -> bool {
    threads > 1 && len >= PARALLEL_BLOCK_ELEMS
}

/// The operands of one elementwise kernel, cut alike into parts that pair up element for
/// element ([`StridedRef::split_axis`]).
pub trait Parts: Sized + Send {
    /// The dims of the first operand.
    fn dims(&self) -> &[usize];
    /// Whether every operand has those dims (else the operands are not cut: the kernel
    /// reports the mismatch before it writes anything).
    fn alike(&self) -> bool;
    /// The operands cut along `axis` into `parts`; they are [`alike`](Parts::alike).
    fn cut(self, axis: usize, parts: usize) -> Vec<Self>;
}

impl<T: Scalar> Parts for StridedRef<'_, T> {
    fn dims(&self) -> &[usize] {
        StridedRef::dims(self)
    }
    fn alike(&self) -> bool {
        true
    }
    fn cut(self, axis: usize, parts: usize) -> Vec<Self> {
        self.split_axis(axis, parts).expect("an axis of the view")
    }
}

impl<T: Scalar> Parts for StridedMut<'_, T> {
    fn dims(&self) -> &[usize] {
        StridedMut::dims(self)
    }
    fn alike(&self) -> bool {
        true
    }
    fn cut(self, axis: usize, parts: usize) -> Vec<Self> {
        self.split_axis(axis, parts).expect("an axis of the view")
    }
}

impl<A: Parts, B: Parts> Parts for (A, B) {
    fn dims(&self) -> &[usize] {
        self.0.dims()
    }
    fn alike(&self) -> bool {
        self.0.alike() && self.1.alike() && self.0.dims() == self.1.dims()
    }
    fn cut(self, axis: usize, parts: usize) -> Vec<Self> {
        self.0
            .cut(axis, parts)
            .into_iter()
            .zip(self.1.cut(axis, parts))
            .collect()
    }
}

/// `f` on each part of `views`, the parts' results in order. Views of fewer than
/// [`PARALLEL_BLOCK_ELEMS`] elements are one part. Larger ones are cut along their longest
/// axis into one part per `PART_ELEMS` (65,536) elements, which run on the workers of the pool
/// this task runs on when there are `threads > 1` (in order on this thread otherwise). The
/// parts depend on the views' dims alone, so a reduction that adds the results in order
/// gives the same value on any number of threads.
pub fn over_parts<V: Parts, R: Send>(
    views: V,
    threads: usize,
    f: impl Fn(V) -> R + Sync + Send,
) -> Vec<R> {
    let dims = views.dims();
    let len: usize = dims.iter().product();
    if len < PARALLEL_BLOCK_ELEMS || !views.alike() {
        return vec![f(views)];
    }
    let axis = (0..dims.len()).max_by_key(|&k| dims[k]).unwrap_or(0);
    let parts = views.cut(axis, len.div_ceil(PART_ELEMS));
    if threads > 1 {
        parts.into_par_iter().map(f).collect()
    } else {
        parts.into_iter().map(f).collect()
    }
}

/// [`over_parts`] for a kernel that can fail (on operands of different dims): the first
/// failure, in the parts' order, as the task's error.
pub fn try_over_parts<V: Parts, E: std::error::Error + Send + Sync + 'static>(
    views: V,
    threads: usize,
    f: impl Fn(V) -> Result<(), E> + Sync + Send,
) -> Result<(), KernelError> {
    over_parts(views, threads, f)
        .into_iter()
        .try_for_each(|r| r.map_err(|e| Box::new(e) as KernelError))
}

/// The shared views of a grant's extents.
fn views<'a, T: Scalar>(x: &Grant<'a, T, Host>) -> impl Iterator<Item = StridedRef<'a, T>> {
    let storage = x.storage();
    x.extents().iter().map(move |e| {
        // SAFETY: the grant's maker holds read grants of exactly these elements, which lie
        // inside the buffer (`Grant::new`'s contract).
        unsafe { storage.view(e.offset, &e.dims, &e.strides) }
    })
}

/// The exclusive views of a grant's extents, for as long as the grant stays mutably
/// borrowed (so no other view of it can be made meanwhile).
fn views_mut<'g, T: Scalar>(
    y: &'g mut GrantMut<'_, T, Host>,
) -> impl Iterator<Item = StridedMut<'g, T>> + 'g {
    let (storage, extents): (&'g SharedBuffer<T>, &'g [crate::Extent]) = (y.storage(), y.extents());
    extents.iter().map(move |e| {
        // SAFETY: the grant's maker holds write grants of exactly these elements, inside the
        // buffer, and the extents neither overlap nor alias within themselves
        // (`GrantMut::new`'s contract); the mutable borrow of the grant for `'g` keeps any
        // other view made through it away while these live.
        unsafe { storage.view_mut(e.offset, &e.dims, &e.strides) }
    })
}

fn mismatch(e: ExtentMismatch) -> KernelError {
    Box::new(e)
}

impl<T: Scalar> Placement<T> for Host {
    type Storage = SharedBuffer<T>;

    const CUTS_TASKS: bool = true;

    fn domain(&self) -> Domain {
        Domain::Cpu
    }

    fn of(_: &SharedBuffer<T>) -> Self {
        Host
    }

    fn alloc(&self, len: usize, zeroed: bool) -> Result<SharedBuffer<T>, PlacementError> {
        Ok(if zeroed {
            SharedBuffer::try_zeroed(len)?
        } else {
            SharedBuffer::try_recycled(len)?
        })
    }

    fn schedule<A, F>(
        name: &'static str,
        largest: usize,
        threads: usize,
        _waits: bool,
        access: A,
        kernel: F,
    ) -> Result<TaskId, tessera_core::Error>
    where
        A: Access,
        F: for<'a> FnOnce(A::View<'a>) -> Result<(), KernelError> + Send + 'static,
    {
        // A kernel that starts no parallel work may be run by a waiting host thread.
        schedule_sequential_if(!fans_out(largest, threads), name, access, kernel)
    }

    fn scale(y: &mut GrantMut<'_, T, Self>, alpha: T, threads: usize) -> Result<(), KernelError> {
        for y in views_mut(y) {
            over_parts(y, threads, |mut y| super::scale(&mut y, alpha));
        }
        Ok(())
    }

    fn axpy(
        alpha: T,
        x: &Grant<'_, T, Self>,
        y: &mut GrantMut<'_, T, Self>,
        threads: usize,
    ) -> Result<(), KernelError> {
        check_alike(y.extents(), x.extents()).map_err(mismatch)?;
        for xy in views(x).zip(views_mut(y)) {
            try_over_parts(xy, threads, |(x, mut y)| super::axpy(alpha, &x, &mut y))?;
        }
        Ok(())
    }

    fn combine(
        alpha: T,
        x: &Grant<'_, T, Self>,
        conj: bool,
        z: Option<(T, &Grant<'_, T, Self>)>,
        y: &mut GrantMut<'_, T, Self>,
        threads: usize,
    ) -> Result<(), KernelError> {
        check_alike(y.extents(), x.extents()).map_err(mismatch)?;
        match z {
            None => {
                for xy in views(x).zip(views_mut(y)) {
                    try_over_parts(xy, threads, |(x, mut y)| {
                        super::copy_scaled(alpha, &x, conj, T::ZERO, &mut y)
                    })?;
                }
            }
            Some((beta, z)) => {
                check_alike(y.extents(), z.extents()).map_err(mismatch)?;
                for ((x, z), y) in views(x).zip(views(z)).zip(views_mut(y)) {
                    try_over_parts(((x, z), y), threads, |((x, z), mut y)| {
                        // beta z + alpha op(x): one rounding per product and one per sum,
                        // whichever term comes first.
                        super::copy_scaled(beta, &z, false, T::ZERO, &mut y)?;
                        if conj {
                            super::copy_scaled(alpha, &x, true, T::ONE, &mut y)
                        } else {
                            super::axpy(alpha, &x, &mut y)
                        }
                    })?;
                }
            }
        }
        Ok(())
    }

    fn norm_sqr(x: &Grant<'_, T, Self>, threads: usize) -> Result<T::Real, KernelError> {
        Ok(views(x)
            .flat_map(|x| over_parts(x, threads, |x| super::norm_sqr(&x)))
            .fold(T::Real::ZERO, |a, b| a + b))
    }

    fn dot(
        x: &Grant<'_, T, Self>,
        y: &Grant<'_, T, Self>,
        threads: usize,
    ) -> Result<T, KernelError> {
        check_alike(y.extents(), x.extents()).map_err(mismatch)?;
        let mut acc = T::ZERO;
        for xy in views(x).zip(views(y)) {
            for r in over_parts(xy, threads, |(x, y)| super::dot(&x, &y)) {
                acc += r.map_err(|e| Box::new(e) as KernelError)?;
            }
        }
        Ok(acc)
    }

    fn permute(
        x: &Grant<'_, T, Self>,
        y: &mut GrantMut<'_, T, Self>,
        how: &Permutation<'_>,
        threads: usize,
    ) -> Result<(), KernelError> {
        let (xs, ys) = (x.extents(), y.extents());
        if xs.len() != ys.len() || how.moves.len() != xs.len() {
            return Err(mismatch(ExtentMismatch {
                expected: ys.len(),
                given: xs.len(),
            }));
        }
        let stores = if how.streaming {
            Stores::Streaming
        } else {
            Stores::Cached
        };
        let (src_base, dst_base) = (x.storage().as_ptr(), y.storage().as_ptr().cast_mut());
        for ((src, dst), moved) in xs.iter().zip(ys).zip(how.moves) {
            let permuted = src
                .permuted(how.perm)
                .ok_or("the permutation indexes the block's legs")?;
            if permuted.dims != dst.dims {
                return Err("a block and its image have the same shape".into());
            }
            let planned;
            let plan = match moved.plan {
                Some(slot) => slot
                    .get_or_init(|| CopyPlan::new(&permuted.dims, &dst.strides, &permuted.strides)),
                None => {
                    planned = CopyPlan::new(&permuted.dims, &dst.strides, &permuted.strides);
                    &planned
                }
            };
            let (yp, xp) = (
                dst_base.wrapping_add(dst.offset),
                src_base.wrapping_add(src.offset),
            );
            // Why the copy is sound: `plan` copies the source extent (axes permuted) onto the
            // destination extent, of the same dims (checked above), with exactly their
            // strides (a slot's plan was made from the same extents: a structure keeps one
            // per block and permutation, and the extents are its blocks'); the grants cover
            // exactly those elements, inside their buffers; a block's layout is one-to-one;
            // the grants' makers checked that the two storages differ, so source and
            // destination do not overlap; no view of either lives.
            if !fans_out(plan.len(), threads) {
                // SAFETY: see above.
                unsafe {
                    super::permute_copy_planned(moved.negate, how.conj, plan, yp, xp, stores)
                };
                continue;
            }
            // The same copy in parts that write disjoint elements, one per worker of the
            // runtime whose pool runs this task (so rayon here is that pool). The pointers
            // cross threads with their provenance (`SendPtr`).
            let (ya, xa) = (SendPtr::new(yp), SendPtr::new_const(xp));
            plan.split(threads).par_iter().for_each(|(part, d, s)| {
                let (y, x) = (
                    ya.get().wrapping_offset(*d),
                    xa.get_const().wrapping_offset(*s),
                );
                // SAFETY: as for the whole plan (above); each part copies a subset of its
                // elements, at these offsets from its bases (`CopyPlan::split`), and no two
                // parts write one element.
                unsafe { super::permute_copy_planned(moved.negate, how.conj, part, y, x, stores) };
            });
        }
        Ok(())
    }

    fn transfer<Q: Placement<T>>(
        x: &Grant<'_, T, Q>,
        y: &mut GrantMut<'_, T, Self>,
    ) -> Result<(), KernelError> {
        let runs = merged_runs(y.extents());
        if runs != merged_runs(x.extents()) {
            return Err(mismatch(ExtentMismatch {
                expected: y.extents().len(),
                given: x.extents().len(),
            }));
        }
        let storage = y.storage();
        for r in runs {
            // SAFETY: the run is one of the write grant's runs: inside the buffer, granted
            // exclusively to this task, and no other view of it lives.
            let mut dst = unsafe { storage.view_mut(r.start, &[r.len()], &[1]) };
            let mut result = Ok(());
            dst.for_each_run_mut(|_, dst| {
                result = match Q::host_elems(x, r.clone()) {
                    Some(src) => {
                        dst.copy_from_slice(src);
                        Ok(())
                    }
                    None => Q::download(x, r.start, dst),
                }
            });
            result?;
        }
        Ok(())
    }

    fn host_elems<'a>(x: &Grant<'a, T, Self>, range: std::ops::Range<usize>) -> Option<&'a [T]> {
        let storage = x.storage();
        // SAFETY: the caller names a range inside the grant's runs: inside the buffer and
        // granted for reading while the grant lives.
        let view = unsafe { storage.view(range.start, &[range.len()], &[1]) };
        let ptr = view.as_ptr();
        // SAFETY: a one-axis view of stride 1 is `range.len()` consecutive elements, read
        // granted for `'a`.
        Some(unsafe { std::slice::from_raw_parts(ptr, range.len()) })
    }

    fn download(x: &Grant<'_, T, Self>, at: usize, into: &mut [T]) -> Result<(), KernelError> {
        let src = Self::host_elems(x, at..at + into.len()).expect("host memory");
        into.copy_from_slice(src);
        Ok(())
    }
}
