//! Running a plan: operands to matrix form, GEMM tasks, the product to the output's legs.
//!
//! Owns: [`Contraction`] (the user-facing builder) and the submission of a [`Plan`].
//! Invariants:
//!
//! - Every check (spec against the operands, legs, output structure, aliasing) runs before
//!   the first task is enrolled: an error means nothing was written.
//! - Temporaries are ordinary arrays in the operands' storage domain, filled by ordinary
//!   scheduled kernels, so their hazards order them like any array; they are dropped by the
//!   host once submitted and live on in the tasks' buffers.
//! - A GEMM task writes each of its output blocks once, starting with `beta * C` (or
//!   overwriting when the product is a fresh temporary) and then adding every pair.

use crate::cache::PlanCache;
use crate::error::Error;
use crate::operand::Operand;
use crate::operand::sealed::Token;
use crate::plan::Plan;
use crate::spec::Spec;
use std::sync::Arc;
use tessera_backends::cpu::{
    GEMM_PARALLEL_MIN_FLOPS, gemm_parallelism, gemm_parallelism_alone, gemm_with, matrix_mut,
    matrix_ref,
};
use tessera_backends::{Field, Scalar};
use tessera_blocks::{AbelianSector, AsyncArray, BlockRegion, BlockStructure, Blocks};
use tessera_coalesce::Coalesce;
use tessera_core::{
    Alias, ReadBuffer, Runtime, WriteBuffer, schedule_named, schedule_sequential_if,
};

/// A pairwise contraction: a [`Spec`], whether each operand is conjugated, and the plan cache
/// it plans through.
///
/// ```
/// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
/// use tessera_contract::Contraction;
///
/// let v = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)])?;
/// let s = BlockStructure::new(vec![v.clone()], vec![v.dual()], U1(0))?; // a matrix
/// let a = AsyncArray::<f64, U1>::random(s.clone(), 1);
/// let b = AsyncArray::<f64, U1>::random(s, 2);
/// // C_ac = A_ab B_bc: the contracted leg b is A's domain leg and B's codomain leg.
/// let c = Contraction::new("ab,bc->ac")?.apply(&a, &b)?;
/// let (da, db, dc) = (a.to_dense()?, b.to_dense()?, c.to_dense()?);
/// let want: f64 = (0..5).map(|k| da[1 + 5 * k] * db[k + 5 * 3]).sum();
/// assert!((dc[1 + 5 * 3] - want).abs() < 1e-12);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Contraction {
    spec: Spec,
    conj: [bool; 2],
    cache: Arc<PlanCache>,
}

impl Contraction {
    /// A contraction from an einsum-style spec (see [`Spec::parse`]).
    ///
    /// # Errors
    ///
    /// The spec's parse errors.
    pub fn new(spec: &str) -> Result<Self, Error> {
        Ok(Self::from_spec(Spec::parse(spec)?))
    }

    /// A contraction from a spec.
    pub fn from_spec(spec: Spec) -> Self {
        Self {
            spec,
            conj: [false; 2],
            cache: Arc::clone(PlanCache::global()),
        }
    }

    /// Conjugates `A` (its elements, legs and flux).
    pub fn conj_a(mut self) -> Self {
        self.conj[0] = true;
        self
    }

    /// Conjugates `B`.
    pub fn conj_b(mut self) -> Self {
        self.conj[1] = true;
        self
    }

    /// Plans through `cache` instead of the global one.
    pub fn with_cache(mut self, cache: Arc<PlanCache>) -> Self {
        self.cache = cache;
        self
    }

    /// The spec.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Which operands it conjugates (`[A, B]`).
    pub(crate) fn conj(&self) -> [bool; 2] {
        self.conj
    }

    /// The plan for operands of structures `a` and `b` and elements `T`.
    pub(crate) fn plan_structures<T: Scalar, S: AbelianSector>(
        &self,
        a: &Arc<BlockStructure<S>>,
        b: &Arc<BlockStructure<S>>,
    ) -> Result<Arc<Plan<S>>, Error> {
        self.cache.plan::<T, S>(&self.spec, self.conj, a, b, None)
    }

    /// The plan for these operands (from the cache when their structures were seen before).
    ///
    /// # Errors
    ///
    /// [`Error::Arity`] or [`Error::Legs`] when the operands do not fit the spec.
    pub fn plan<A: Operand>(&self, a: &A, b: &A) -> Result<Arc<Plan<A::Symmetry>>, Error> {
        self.cache.plan::<A::Scalar, A::Symmetry>(
            &self.spec,
            self.conj,
            a.structure(),
            b.structure(),
            None,
        )
    }

    /// The structure of `op(A) op(B)` for operands of structures `a` and `b`: the output's
    /// legs, split and flux, every allowed block. From the legs alone, without planning
    /// (what an output with some of the blocks, for
    /// [`apply_into`](Contraction::apply_into), is built from).
    ///
    /// ```
    /// use tessera_blocks::{BlockStructure, Direction, Leg, U1};
    /// use tessera_contract::Contraction;
    ///
    /// let v = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)])?;
    /// let m = BlockStructure::new([v.clone()], [v.dual()], U1(0))?;
    /// let out = Contraction::new("ij,jk->ik")?.output_of(&m, &m)?;
    /// assert_eq!(out, m);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Arity`] when an operand has not as many legs as the spec labels,
    /// [`Error::Legs`] when a contracted pair of legs cannot be contracted.
    pub fn output_of<S: AbelianSector>(
        &self,
        a: &BlockStructure<S>,
        b: &BlockStructure<S>,
    ) -> Result<BlockStructure<S>, Error> {
        crate::plan::output_structure(&self.spec, self.conj, a, b)
    }

    /// `op(A) op(B)` into a new array, in the operands' storage domain and run by its
    /// backend: host arrays ([`AsyncArray`]) on the CPU, device arrays (`DeviceArray`, with
    /// the `cuda` feature) through cuBLAS on their device.
    ///
    /// # Errors
    ///
    /// As [`plan`](Contraction::plan); operands on different devices give
    /// [`tessera_blocks::Error::DeviceMismatch`]. Nothing is enrolled on error.
    pub fn apply<A: Operand>(&self, a: &A, b: &A) -> Result<A, Error> {
        self.apply_scaled(A::Scalar::ONE, a, b)
    }

    /// `alpha op(A) op(B)` into a new array, as [`apply`](Contraction::apply) (the scaling
    /// is folded into the GEMMs).
    ///
    /// # Errors
    ///
    /// As [`apply`](Contraction::apply).
    pub fn apply_scaled<A: Operand>(&self, alpha: A::Scalar, a: &A, b: &A) -> Result<A, Error> {
        let plan = self.plan(a, b)?;
        a.check_domain(b)?;
        // Written in full by the tasks (GEMM outputs, zeroed idle blocks, or the permute).
        let out = a.output(plan.output(), Token(()))?;
        A::submit(&plan, alpha, a, b, A::Scalar::ZERO, &out, true, Token(()))?;
        Ok(out)
    }

    /// `C <- op(A) op(B)`, into an existing array (so a repeated contraction reuses its
    /// allocation). The old `C` is not read (NaN and infinities in it are overwritten).
    ///
    /// `C` may hold only some of the output's blocks (the output's legs, split and flux,
    /// with a [presence mask](tessera_blocks::BlockStructure::with_present)): then only
    /// those are computed, from the pairs of blocks that write them (a distributed
    /// contraction computes the blocks a process owns so).
    ///
    /// # Errors
    ///
    /// As [`plan`](Contraction::plan); [`Error::Output`] when `c` does not have the output's
    /// legs, split and flux, [`Error::Aliased`] when it shares storage with an operand,
    /// [`tessera_blocks::Error::DeviceMismatch`] when the three are not on one device.
    /// Nothing is enrolled or written on error.
    pub fn apply_into<A: Operand>(&self, a: &A, b: &A, c: &A) -> Result<(), Error> {
        self.apply_into_scaled(A::Scalar::ONE, a, b, A::Scalar::ZERO, c)
    }

    /// `C <- alpha op(A) op(B) + beta C` (BLAS's GEMM). With `beta = 0` the old `C` is not
    /// read (NaN and infinities in it are overwritten, as BLAS does).
    ///
    /// # Errors
    ///
    /// As [`apply_into`](Contraction::apply_into).
    pub fn apply_into_scaled<A: Operand>(
        &self,
        alpha: A::Scalar,
        a: &A,
        b: &A,
        beta: A::Scalar,
        c: &A,
    ) -> Result<(), Error> {
        let given = c.structure();
        let plan = if given.num_blocks() == given.num_allowed() {
            let plan = self.plan(a, b)?;
            if !(Arc::ptr_eq(given, plan.output()) || given == plan.output()) {
                return Err(Error::Output {
                    expected: plan.output().summary(),
                    given: given.summary(),
                });
            }
            plan
        } else {
            // `C` has some of the output's blocks: compute those only, from a plan for them
            // (the full product is not planned).
            let (legs, n_codomain, flux) =
                crate::plan::output_legs(&self.spec, self.conj, a.structure(), b.structure())?;
            let some_blocks = given.legs() == legs.as_slice()
                && given.n_codomain() == n_codomain
                && *given.flux() == flux;
            if !some_blocks {
                return Err(Error::Output {
                    expected: self.output_of(a.structure(), b.structure())?.summary(),
                    given: given.summary(),
                });
            }
            let plan = self.cache.plan::<A::Scalar, A::Symmetry>(
                &self.spec,
                self.conj,
                a.structure(),
                b.structure(),
                Some(given),
            )?;
            debug_assert!(
                plan.output() == given,
                "a plan for some blocks has them all"
            );
            plan
        };
        a.check_domain(b)?;
        a.check_domain(c)?;
        for (operand, x) in [("A", a), ("B", b)] {
            if c.same_storage(x) {
                return Err(Error::Aliased { operand });
            }
        }
        A::submit(&plan, alpha, a, b, beta, c, false, Token(()))
    }
}

/// `a` in its matrix form: itself, or a permuted temporary.
pub(crate) fn matrix_form<T: Field, S: AbelianSector>(
    plan: &Plan<S>,
    which: usize,
    x: &AsyncArray<T, S>,
) -> Result<Option<AsyncArray<T, S>>, Error> {
    let op = &plan.operands[which];
    let Some((perm, permuted)) = &op.permute else {
        return Ok(None);
    };
    // The permutation writes every block of the temporary.
    let tmp = AsyncArray::try_empty(Arc::clone(&op.matrix))?;
    x.permute_into_with(permuted, perm, &tmp)?;
    Ok(Some(tmp))
}

/// Read grants on blocks `ids` of `x`, for one task.
pub(crate) fn block_reads<T: Field, S: AbelianSector>(
    x: &AsyncArray<T, S>,
    ids: &[usize],
) -> Result<Vec<ReadBuffer<BlockRegion<T>>>, Error> {
    Ok(ids
        .iter()
        .map(|&i| x.block(i).map(Alias::into_read))
        .collect::<Result<_, _>>()?)
}

/// Write grants on blocks `ids` of `x`, for one task: overwrites (the old elements are not
/// read) where `overwrite`.
pub(crate) fn block_writes<T: Field, S: AbelianSector>(
    x: &AsyncArray<T, S>,
    ids: &[usize],
    overwrite: bool,
) -> Result<Vec<WriteBuffer<BlockRegion<T>>>, Error> {
    let grant = |a: Alias<BlockRegion<T>>| {
        if overwrite {
            a.into_overwrite()
        } else {
            a.into_write()
        }
    };
    Ok(ids
        .iter()
        .map(|&i| x.block(i).map(grant))
        .collect::<Result<_, _>>()?)
}

/// Blocks `idle` of `x`, which no pair writes: zero where the tasks overwrite (a new array,
/// a product temporary, or `beta = 0`, which ignores the old elements as BLAS does), else
/// scaled by `beta`.
pub(crate) fn settle_idle<T: Field, S: AbelianSector>(
    x: &AsyncArray<T, S>,
    idle: &[usize],
    overwrite: bool,
    beta: T,
) -> Result<(), Error> {
    if overwrite {
        zero_blocks(x, idle)?;
    } else if beta != T::ONE && !idle.is_empty() {
        x.scale_blocks(beta, Blocks::Only(idle))?;
    }
    Ok(())
}

/// One task that sets blocks `ids` of `x` to zero (overwrites: nothing is read).
fn zero_blocks<T: Field, S: AbelianSector>(
    x: &AsyncArray<T, S>,
    ids: &[usize],
) -> Result<(), Error> {
    if ids.is_empty() {
        return Ok(());
    }
    let writes = ids
        .iter()
        .map(|&i| x.block(i).map(Alias::into_overwrite))
        .collect::<Result<Vec<_>, _>>()?;
    schedule_named("contract.zero_idle", writes, |blocks| {
        for mut b in blocks {
            b.for_each_run_mut(|_, run| run.fill(T::ZERO));
        }
        Ok(())
    })?;
    Ok(())
}

/// Enrolls the plan's tasks: `c <- alpha op(a) op(b) + beta c` (`fresh`: `c` is a new array
/// nothing else has, with unspecified elements, so `beta` is ignored and every block is
/// written).
pub(crate) fn submit<T: Field, S: AbelianSector>(
    plan: &Arc<Plan<S>>,
    alpha: T,
    a: &AsyncArray<T, S>,
    b: &AsyncArray<T, S>,
    beta: T,
    c: &AsyncArray<T, S>,
    fresh: bool,
) -> Result<(), Error> {
    if let Some(small) = &plan.small {
        return crate::small::submit(plan, small, alpha, a, b, beta, c, fresh);
    }
    let a_tmp = matrix_form(plan, 0, a)?;
    let b_tmp = matrix_form(plan, 1, b)?;
    let am = a_tmp.as_ref().unwrap_or(a);
    let bm = b_tmp.as_ref().unwrap_or(b);
    // The product goes straight into `c` when the legs agree, else into a temporary.
    let product_tmp = plan
        .output_permute
        .as_ref()
        .map(|_| AsyncArray::<T, S>::try_empty(Arc::clone(&plan.product)))
        .transpose()?;
    let target = product_tmp.as_ref().unwrap_or(c);
    let overwrite = fresh || product_tmp.is_some() || beta == T::ZERO;
    let first_beta = if overwrite { T::ZERO } else { beta };
    let [conj_a, conj_b] = plan.conj;
    let [rows_a, rows_b] = plan.rows;
    // Fewer GEMM tasks than workers: each GEMM may use the idle workers too (so a lone large
    // sector keeps both cores busy); else parallelism comes from the tasks.
    let parallelism = if plan.tasks() < Runtime::current().threads() {
        gemm_parallelism_alone
    } else {
        gemm_parallelism
    };
    // A product too small for any of its GEMMs to run on more than one core: its tasks
    // start no parallel work, so a host that waits for them may run them itself.
    let sequential = plan.flops() < GEMM_PARALLEL_MIN_FLOPS as u64;
    let gemm =
        move |c: faer::MatMut<'_, T>, beta: T, a: faer::MatRef<'_, T>, b: faer::MatRef<'_, T>| {
            let par = parallelism(c.nrows(), c.ncols(), a.ncols());
            gemm_with(par, c, beta, a, conj_a, b, conj_b, alpha)
        };
    for (g, group) in plan.groups.iter().enumerate() {
        let (reads_a, reads_b) = (block_reads(am, &group.a)?, block_reads(bm, &group.b)?);
        let writes = block_writes(target, &group.c, overwrite)?;
        let plan = Arc::clone(plan);
        schedule_sequential_if(
            sequential,
            "contract.gemm_pairs",
            (reads_a, reads_b, writes),
            move |(xa, xb, mut xc)| {
                let group = &plan.groups[g];
                for (local, pairs) in &group.products {
                    let mut cm = matrix_mut(&mut xc[*local], rows_a)
                        .ok_or("an output block is a strided matrix")?;
                    for (n, &(ia, ib)) in group.pairs[pairs.clone()].iter().enumerate() {
                        let lhs = matrix_ref(&xa[ia], rows_a).ok_or("a block of A' is a matrix")?;
                        let rhs = matrix_ref(&xb[ib], rows_b).ok_or("a block of B' is a matrix")?;
                        let beta = if n == 0 { first_beta } else { T::ONE };
                        gemm(cm.as_mut(), beta, lhs, rhs)?;
                    }
                }
                Ok(())
            },
        )?;
    }
    if !plan.sector_groups.is_empty() {
        // One view per operand and batch (one region and one composite each), from the
        // batches the plan resolved once.
        let [ba, bb, bc] = plan.sector_batches()?;
        let lhs = am.sector_batches(ba)?;
        let rhs = bm.sector_batches(bb)?;
        let out = target.sector_batches(bc)?;
        for ((lhs, rhs), out) in lhs.into_iter().zip(rhs).zip(out) {
            let out = if overwrite {
                out.into_overwrite()
            } else {
                out.into_write()
            };
            schedule_sequential_if(
                sequential,
                "contract.gemm_sectors",
                (lhs.into_read(), rhs.into_read(), out),
                move |(lhs, rhs, mut out)| {
                    for i in 0..out.len() {
                        gemm(out.get_mut(i), first_beta, lhs.get(i), rhs.get(i))?;
                    }
                    Ok(())
                },
            )?;
        }
    }
    // (Without overwrite there is no product temporary: the target is `c`.)
    settle_idle(target, &plan.idle, overwrite, beta)?;
    if let (Some(product), Some((perm, permuted))) = (&product_tmp, &plan.output_permute) {
        if fresh || beta == T::ZERO {
            product.permute_into_with(permuted, perm, c)?;
        } else {
            let moved = AsyncArray::try_empty(Arc::clone(plan.output()))?;
            product.permute_into_with(permuted, perm, &moved)?;
            if beta != T::ONE {
                c.scale(beta);
            }
            c.axpy(T::ONE, &moved)?;
        }
    }
    Ok(())
}
