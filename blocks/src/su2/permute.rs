//! Leg permutations of SU(2) tensors, planned once per (legs, split, permutation, new split)
//! and reused.
//!
//! Owns [`PermutePlan`] (the permuted structure, and the tasks that move the reduced blocks)
//! and its process-wide cache ([`permutation_cache_stats`]). Invariants:
//!
//! - A plan depends only on the source structure's legs and split, the permutation and the
//!   new split: the same arguments give the same plan (one `Arc` while the cache holds it),
//!   so a DMRG sweep that permutes the same shapes again pays for no tree, table or
//!   recoupling lookup twice.
//! - Its tasks partition the source's segment tuples: each source block is read by exactly
//!   one task and each target block is written, whole, by exactly one task. The tasks'
//!   write sets are disjoint and every target block is overwritten, so they run in any
//!   order and the result needs no zeroing. A task takes several small tuples, so that a
//!   permutation of thousands of tiny blocks is a few dozen tasks, not thousands.

use super::recouple::{Recoupling, RecouplingKey};
use super::structure::{Su2Label, Su2Leg, Su2Structure};
use crate::error::Error;
use crate::tensor::AsyncArray;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use tessera_backends::Scalar;
use tessera_core::{CacheStats, LruCache, schedule_named};

/// The most plans the cache holds; the least recently used one goes first.
const CAPACITY: usize = 4096;

/// A task takes tuples until it holds at least this many multiply-adds (or a 64th of the
/// whole permutation, when that is more): below it, the runtime's per-task cost dominates.
const MIN_TASK_WORK: usize = 8192;

/// Blocks up to this many elements move through a precomputed gather (a plan holds at most
/// this many indices per tuple); larger ones through strided views, whose per-block cost
/// their size amortizes.
const GATHER_MAX: usize = 4096;

/// One segment tuple's move: its blocks (from `src_at` in its task's source list) to the
/// permuted tuple's (from `dst_at` in the task's target list) through `recoupling`.
struct Item {
    src_at: usize,
    dst_at: usize,
    recoupling: Arc<Recoupling>,
    /// The tuple's multiplicities, old leg order.
    degs: Vec<usize>,
    /// The same, new leg order.
    new_degs: Vec<usize>,
    how: Move,
}

/// How a tuple's blocks move. All blocks of a tuple share their shape, so one way serves
/// every term.
enum Move {
    /// Small blocks whose multiplicity axes keep their order (a move of the split alone, or
    /// of legs of multiplicity one): element for element.
    Same,
    /// Small blocks: per element of a permuted block (column-major), the position of its
    /// source in the old block (column-major).
    Gather(Arc<[u32]>),
    /// Large blocks: strided views.
    Strided,
}

/// The blocks one task reads and writes, and the tuples it moves.
struct Task {
    src: Vec<usize>,
    dst: Vec<usize>,
    items: Vec<Item>,
}

/// A permutation of an SU(2) structure's legs with a new split: the permuted structure and
/// the tasks that take reduced data from the old structure's matrix form to the new one's.
pub(crate) struct PermutePlan {
    /// The permuted structure.
    pub(crate) target: Arc<Su2Structure>,
    /// New leg `i` is old leg `perm[i]`.
    perm: Vec<usize>,
    /// The old and new codomain sizes.
    n_old: usize,
    n_new: usize,
    tasks: Vec<Task>,
}

type Key = (Vec<Su2Leg>, usize, Vec<usize>, usize);

fn cache() -> &'static LruCache<Key, Arc<PermutePlan>> {
    static CACHE: OnceLock<LruCache<Key, Arc<PermutePlan>>> = OnceLock::new();
    CACHE.get_or_init(|| LruCache::new(CAPACITY))
}

/// The permutation plan cache's counters: a plan is made (a miss) the first time a
/// structure's legs and split are permuted one way, and served (a hit) every time after, so
/// a converged sweep's permutations are all hits.
///
/// ```
/// use tessera_blocks::Direction;
/// use tessera_blocks::su2::{Su2Leg, Su2Structure, Su2Tensor, permutation_cache_stats};
///
/// let v = Su2Leg::new(Direction::In, [(1, 2), (2, 1)])?;
/// let t = Su2Tensor::<f64>::random(Su2Structure::new(vec![v.clone(), v.dual()], 1)?, 1)?;
/// t.permuted(&[1, 0], 2)?;
/// let before = permutation_cache_stats();
/// t.permuted(&[1, 0], 2)?;
/// assert!(permutation_cache_stats().hits > before.hits);
/// # Ok::<(), tessera_blocks::Error>(())
/// ```
pub fn permutation_cache_stats() -> CacheStats {
    cache().stats()
}

impl PermutePlan {
    /// The plan of `perm` (a checked permutation of `s`'s legs) with `n_codomain` legs in
    /// the codomain: computed on first use, shared after.
    ///
    /// # Errors
    ///
    /// [`Error::SplitOutOfRange`] when `n_codomain` exceeds the legs; [`Error::Overflow`].
    pub(crate) fn of(
        s: &Su2Structure,
        perm: &[usize],
        n_codomain: usize,
    ) -> Result<Arc<Self>, Error> {
        let key = (s.legs().to_vec(), s.n_codomain(), perm.to_vec(), n_codomain);
        if let Some(p) = cache().get(&key) {
            return Ok(p);
        }
        let plan = Arc::new(Self::build(s, perm, n_codomain)?);
        cache().insert(key, Arc::clone(&plan));
        Ok(plan)
    }

    fn build(s: &Su2Structure, perm: &[usize], n_codomain: usize) -> Result<Self, Error> {
        let legs: Vec<Su2Leg> = perm.iter().map(|&p| s.legs()[p].clone()).collect();
        let target = Su2Structure::shared(legs, n_codomain)?;
        let flipped: Vec<bool> = (0..perm.len()).map(|i| s.flipped(i)).collect();
        let mut new_flipped = vec![false; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            new_flipped[p] = target.flipped(i);
        }
        let block_len = |id: usize| s.matrix().block(id).map_or(0, |b| b.len());
        let mut moves = Vec::with_capacity(s.groups().len());
        let mut total = 0;
        for g in s.groups() {
            let segments: Vec<usize> = perm.iter().map(|&p| g.segments[p]).collect();
            let to = target
                .group(&segments)
                .expect("a permuted segment tuple has the permuted tuple's blocks");
            let recoupling = Recoupling::of(&RecouplingKey {
                spins: s.spins(&g.segments),
                n_codomain: s.n_codomain(),
                perm: perm.to_vec(),
                new_n_codomain: n_codomain,
                flipped: flipped.clone(),
                new_flipped: new_flipped.clone(),
            });
            debug_assert_eq!(recoupling.input.len(), g.blocks.len());
            debug_assert_eq!(recoupling.output.len(), to.blocks.len());
            let work: usize = recoupling
                .terms
                .iter()
                .flatten()
                .map(|&(i, _)| block_len(g.blocks[i]))
                .sum();
            total += work;
            moves.push((g, to, recoupling, work));
        }
        let per_task = MIN_TASK_WORK.max(total / 64);
        let mut tasks = Vec::new();
        let mut task = Task {
            src: Vec::new(),
            dst: Vec::new(),
            items: Vec::new(),
        };
        let mut held = 0;
        // Tuples of equal multiplicities share one gather.
        let mut gathers: HashMap<Vec<usize>, Arc<[u32]>> = HashMap::new();
        for (g, to, recoupling, work) in moves {
            let degs = s.degs(&g.segments);
            let len: usize = degs.iter().product();
            task.items.push(Item {
                src_at: task.src.len(),
                dst_at: task.dst.len(),
                recoupling,
                new_degs: perm.iter().map(|&p| degs[p]).collect(),
                how: if len > GATHER_MAX {
                    Move::Strided
                } else {
                    let g = gathers
                        .entry(degs.clone())
                        .or_insert_with(|| gather(&degs, perm).into());
                    if g.iter().enumerate().all(|(k, &at)| at as usize == k) {
                        Move::Same
                    } else {
                        Move::Gather(Arc::clone(g))
                    }
                },
                degs,
            });
            task.src.extend_from_slice(&g.blocks);
            task.dst.extend_from_slice(&to.blocks);
            held += work;
            if held >= per_task {
                tasks.push(std::mem::replace(
                    &mut task,
                    Task {
                        src: Vec::new(),
                        dst: Vec::new(),
                        items: Vec::new(),
                    },
                ));
                held = 0;
            }
        }
        if !task.items.is_empty() {
            tasks.push(task);
        }
        Ok(Self {
            target,
            perm: perm.to_vec(),
            n_old: s.n_codomain(),
            n_new: n_codomain,
            tasks,
        })
    }

    /// `data` (over the old structure's matrix form) permuted: one task per planned task,
    /// each waiting for exactly the blocks it reads. Nothing is enrolled on error.
    ///
    /// # Errors
    ///
    /// Allocation errors; [`Error::UnknownBlock`] when `data` is not over the old structure.
    pub(crate) fn apply<T: Scalar<Real = f64>>(
        self: &Arc<Self>,
        data: &AsyncArray<T, Su2Label>,
    ) -> Result<AsyncArray<T, Su2Label>, Error> {
        let out = AsyncArray::try_empty(Arc::clone(self.target.matrix()))?;
        let mut work = Vec::with_capacity(self.tasks.len());
        for task in &self.tasks {
            work.push((data.block_set(&task.src)?, out.block_set(&task.dst)?));
        }
        for (k, (src, dst)) in work.into_iter().enumerate() {
            let plan = Arc::clone(self);
            schedule_named(
                "su2 permute",
                (src.into_read(), dst.into_overwrite()),
                move |(src, mut dst)| {
                    let (n_old, n_new) = (plan.n_old, plan.n_new);
                    // Scratch for gathered items: the inputs, column-major, and one output.
                    let (mut inputs, mut acc) = (Vec::new(), Vec::new());
                    for item in &plan.tasks[k].items {
                        let terms = &item.recoupling.terms;
                        if !matches!(item.how, Move::Strided) {
                            let len: usize = item.degs.iter().product();
                            inputs.clear();
                            inputs.reserve(len * item.recoupling.input.len());
                            for i in 0..item.recoupling.input.len() {
                                src.get(item.src_at + i)
                                    .for_each_run(|_, run| inputs.extend_from_slice(run));
                            }
                            for (o, terms) in terms.iter().enumerate() {
                                acc.clear();
                                acc.resize(len, T::ZERO);
                                for &(i, c) in terms {
                                    let (x, c) = (&inputs[i * len..(i + 1) * len], T::from_real(c));
                                    match &item.how {
                                        Move::Gather(gather) => {
                                            for (a, &g) in acc.iter_mut().zip(gather.iter()) {
                                                *a += c * x[g as usize];
                                            }
                                        }
                                        _ => {
                                            for (a, &x) in acc.iter_mut().zip(x) {
                                                *a += c * x;
                                            }
                                        }
                                    }
                                }
                                dst.get_mut(item.dst_at + o).for_each_run_mut(|e, run| {
                                    run.copy_from_slice(&acc[e..e + run.len()]);
                                });
                            }
                            continue;
                        }
                        for (o, terms) in terms.iter().enumerate() {
                            let y = dst.get_mut(item.dst_at + o);
                            let Ok(y) = y.unfold_axis(1, &item.new_degs[n_new..]) else {
                                unreachable!("a block has its segments' multiplicities")
                            };
                            let Ok(mut y) = y.unfold_axis(0, &item.new_degs[..n_new]) else {
                                unreachable!("a block has its segments' multiplicities")
                            };
                            y.update(|_, _| T::ZERO);
                            for &(i, c) in terms {
                                let x = src
                                    .get(item.src_at + i)
                                    .unfold_axis(1, &item.degs[n_old..])
                                    .and_then(|x| x.unfold_axis(0, &item.degs[..n_old]))
                                    .and_then(|x| x.permute_axes(&plan.perm))
                                    .expect("a block has its segments' multiplicities");
                                tessera_backends::cpu::axpy(T::from_real(c), &x, &mut y)
                                    .expect("permuted multiplicities match");
                            }
                        }
                    }
                    Ok(())
                },
            )?;
        }
        Ok(out)
    }
}

/// Per element of the permuted block (column-major over `perm`'s reordering of `degs`), the
/// column-major position of its source in the block of multiplicities `degs`.
fn gather(degs: &[usize], perm: &[usize]) -> Vec<u32> {
    let mut strides = vec![1_usize; degs.len()];
    for a in 1..degs.len() {
        strides[a] = strides[a - 1] * degs[a - 1];
    }
    let new_dims: Vec<usize> = perm.iter().map(|&p| degs[p]).collect();
    let new_strides: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
    let len: usize = degs.iter().product();
    let mut out = Vec::with_capacity(len);
    // An odometer over the new axes (first fastest), moving `at` by a stride per step.
    let mut index = vec![0_usize; degs.len()];
    let mut at = 0_usize;
    for _ in 0..len {
        out.push(u32::try_from(at).expect("a gathered block holds at most GATHER_MAX elements"));
        for a in 0..index.len() {
            index[a] += 1;
            at += new_strides[a];
            if index[a] < new_dims[a] {
                break;
            }
            at -= new_strides[a] * new_dims[a];
            index[a] = 0;
        }
    }
    out
}
