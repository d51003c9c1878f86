//! Contractions with a small operand: planned as pairs of blocks that write each output block,
//! run on the host in one pass over the large operand with no matrix forms.
//!
//! Owns: [`SmallPlan`] (built by [`SmallPlan::build`] next to a [`Plan`]'s GEMM plan) and its
//! host submission. Invariants:
//!
//! - Chosen only where it saves a pass over a large array: the GEMM plan would permute the
//!   large operand or the product, every block of the small operand has at most
//!   [`SMALL_COEFFICIENTS`] elements (a contraction with it is memory-bound either way), and
//!   a block of the large operand meets few of them.
//! - The output blocks of one row of the large operand's free sectors are written by one
//!   kernel call, so each block of the large operand is read from memory once.
//! - Each pair carries the fermionic sign the GEMM plan's permutations and pairing would give
//!   it (operands to matrix form, the contracted pairs, the product to the output's legs), so
//!   both plans compute the same tensor.
//! - Each output block is written by exactly one task, which lists it once; blocks no pair
//!   writes are the plan's `idle` ones, as in the GEMM plan.

use crate::execute::{block_reads, block_writes, settle_idle};
use crate::plan::{PairTable, Plan, pairing_negative};
use crate::spec::Spec;
use crate::{Error, plan::effective};
use hashbrown::HashMap;
use smallvec::SmallVec;
use std::ops::Range;
use std::sync::Arc;
use tessera_backends::cpu::{SmallLegs, SmallOutput, SmallPair, Stores, contract_small};
use tessera_backends::{Field, Scalar};
use tessera_blocks::{AbelianSector, AsyncArray, Block, BlockStructure, Direction};
use tessera_core::schedule_named;

/// The most elements a block of the small operand may have: a pass over the large operand
/// then does at most this many multiply-adds per element it reads, which two cores finish
/// in about the time the element takes to arrive from memory.
pub const SMALL_COEFFICIENTS: usize = 64;

/// The least elements of the large operand for which a plan takes the one pass, unless its
/// [`PlanCache`](crate::PlanCache) says otherwise: 2^18 (2 MiB of f64). On the two-core
/// development machine (bench `contract/heff/chi*/operator_step_*`, the DMRG operator step)
/// the pass beats permutation + GEMM + permutation above it (chi 512, 10^6 elements: 2.2
/// against 3.0 ms; chi 1024, 4 10^6: 6.4 against 8.0 ms) and loses below it (chi 256,
/// 2.6 10^5: 0.55 against 0.45 ms; chi 128: 0.28 against 0.17 ms).
pub const SMALL_OPERAND_MIN_ELEMS: usize = 1 << 18;

/// The fewest indices an inner leg other than X's leading one should have in an average
/// block (weighted by the blocks' elements): one AVX-512 vector of `f64`. Along a shorter
/// leg each kernel step does almost no work (a physical leg whose sectors hold one state
/// each gives 1-row columns: the files' chain of the `contract/heff` bench ran 14.4 ms at
/// chi 512 so, 8.0 ms with its MPO steps as GEMMs, and 6.0 ms along the longest leg).
const MIN_INNER_ROWS: usize = 8;

/// `sum over X's blocks of (elements x extent along axis)`: divided by `X`'s elements, the
/// average extent along `axis` an element's block has.
fn rows_along<S: AbelianSector>(x: &BlockStructure<S>, axis: usize) -> usize {
    x.blocks().map(|b| b.len() * b.shape()[axis]).sum()
}

/// The most pairs of blocks per block of the large operand, on average: past it, the large
/// operand is a fine tiling whose blocks each meet many (a product GEMMs on sector matrices
/// do far better than a pass per pair).
const PAIRS_PER_BLOCK: usize = 16;

/// The least work (elements read and written) one task is given, unless the blocks run out:
/// 2^17 elements of f64 are 1 MiB, about 50 us of one core's memory bandwidth, against a few
/// microseconds to enroll and run a task.
const GROUP_ELEMS: usize = 1 << 17;

/// The least work a task is given when the pass is small: 2^13 elements of f64 are 64 KiB,
/// a few microseconds of one core.
const MIN_GROUP_ELEMS: usize = 1 << 13;

/// One task's output blocks, with the pairs that write each.
#[derive(Clone, Debug, Default)]
pub(crate) struct SmallGroup {
    /// Blocks of the large operand, of the small one, and of the output it touches (each
    /// once).
    pub(crate) x: Vec<usize>,
    pub(crate) y: Vec<usize>,
    pub(crate) c: Vec<usize>,
    /// Per output block (in `c`'s order), its range of `pairs`.
    pub(crate) products: Vec<Range<usize>>,
    /// Runs of `c` that share a row of X's free sectors: one kernel call each.
    bundles: Vec<Range<usize>>,
    /// `(local X index, local Y index, negative)`.
    pub(crate) pairs: Vec<(usize, usize, bool)>,
}

/// A contraction with a small operand, run without matrix forms (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct SmallPlan {
    /// Which operand is the large one, `X`: 0 for `A`, 1 for `B`.
    pub(crate) big: usize,
    pub(crate) legs: SmallLegs,
    pub(crate) groups: Vec<SmallGroup>,
    /// Output blocks no pair writes.
    idle: Vec<usize>,
    pub(crate) pairs: usize,
    pub(crate) flops: u64,
}

/// Whether the permutation `perm` (new leg `i` is old leg `perm[i]`) of legs whose parities
/// are `odd` (in the old order) has the fermionic sign `-1`: an odd number of crossings of
/// two odd legs.
fn crossing_negative(odd: &[bool], perm: &[usize]) -> bool {
    let mut m = 0_usize;
    for i in 0..perm.len() {
        for j in i + 1..perm.len() {
            m += usize::from(odd[perm[i]] && odd[perm[j]] && perm[i] > perm[j]);
        }
    }
    m % 2 == 1
}

fn position(labels: &[char], c: char) -> usize {
    labels
        .iter()
        .position(|&x| x == c)
        .expect("the spec's labels")
}

/// The fermionic sign of one pair, as the GEMM plan gives it (see the module docs): `A`
/// permuted to `(free A, K)`, `B` to `(K, free B)`, the pairing of `K`, and the product
/// `(free A, free B)` permuted to the output's legs.
struct Signs {
    perm_a: Vec<usize>,
    perm_b: Vec<usize>,
    /// Positions in `A` of its free legs and of `K`, and in `B` of its free legs.
    free_a: Vec<usize>,
    k_a: Vec<usize>,
    free_b: Vec<usize>,
    a_in: Vec<bool>,
    out_perm: Vec<usize>,
}

impl Signs {
    fn negative<S: AbelianSector>(&self, a: &Block<'_, S>, b: &Block<'_, S>) -> bool {
        let odd = |blk: &Block<'_, S>| -> SmallVec<[bool; 8]> {
            blk.sectors().iter().map(|s| s.parity()).collect()
        };
        let (oa, ob) = (odd(a), odd(b));
        let k: SmallVec<[S; 4]> = self.k_a.iter().map(|&i| a.sectors()[i].clone()).collect();
        let product: SmallVec<[bool; 8]> = self
            .free_a
            .iter()
            .map(|&i| oa[i])
            .chain(self.free_b.iter().map(|&i| ob[i]))
            .collect();
        crossing_negative(&oa, &self.perm_a)
            ^ crossing_negative(&ob, &self.perm_b)
            ^ pairing_negative(&k, &self.a_in)
            ^ crossing_negative(&product, &self.out_perm)
    }
}

impl SmallPlan {
    /// The plan for `spec` on operands with structures `a` and `b` into `output`, or `None`
    /// when the GEMM plan permutes neither the large operand nor the product (`permuted`
    /// says which of A, B and the product it permutes), the large operand has fewer than
    /// `min_elems` elements or no free leg, or no operand is small enough (see
    /// [`SMALL_COEFFICIENTS`]).
    pub(crate) fn build<T: Scalar, S: AbelianSector>(
        spec: &Spec,
        conj: [bool; 2],
        a: &BlockStructure<S>,
        b: &BlockStructure<S>,
        output: &BlockStructure<S>,
        min_elems: usize,
        permuted: [bool; 3],
    ) -> Option<Self> {
        let (la, lb, lo) = (spec.a(), spec.b(), spec.output());
        let k = spec.contracted();
        let big = usize::from(a.total_len() < b.total_len());
        // Only where the GEMM plan moves the large operand or the product through a
        // temporary (`permuted`: A, B, the product).
        if !(permuted[big] || permuted[2]) {
            return None;
        }
        let ((x, lx), (y, ly)) = if big == 0 {
            ((a, la), (b, lb))
        } else {
            ((b, lb), (a, la))
        };
        if x.total_len() < min_elems {
            return None;
        }
        if y.blocks().any(|blk| blk.len() > SMALL_COEFFICIENTS) {
            return None;
        }
        // The inner loop runs along X's first free leg in output order (the output's first
        // leg when it is one of X's: stride 1 in the output, for column-major blocks). Where
        // that is not X's leading leg (read in place, stride 1) and its blocks are short
        // along it (a physical leg whose sectors hold one state each), it runs along the
        // free leg of X whose blocks are longest instead.
        let free_x: Vec<char> = lo.iter().copied().filter(|c| lx.contains(c)).collect();
        let &first = free_x.first()?;
        let rows = |c: char| rows_along(x, position(lx, c));
        let inner = if position(lx, first) == 0 || rows(first) >= MIN_INNER_ROWS * x.total_len() {
            first
        } else {
            // The first of the longest, so equal legs keep output order.
            free_x
                .iter()
                .copied()
                .rev()
                .max_by_key(|&c| rows(c))
                .unwrap_or(first)
        };
        let pair = |c: char, from: &[char], to: &[char]| (position(from, c), position(to, c));
        let legs = SmallLegs {
            inner: pair(inner, lx, lo),
            outer: free_x
                .iter()
                .filter(|&&c| c != inner)
                .map(|&c| pair(c, lx, lo))
                .collect(),
            contracted: k.iter().map(|&c| pair(c, lx, ly)).collect(),
            free_y: lo
                .iter()
                .filter(|c| ly.contains(c))
                .map(|&c| pair(c, ly, lo))
                .collect(),
        };

        let signs = S::GRADED.then(|| {
            let free = |l: &[char]| -> Vec<char> {
                l.iter().copied().filter(|c| !k.contains(c)).collect()
            };
            let (fa, fb) = (free(la), free(lb));
            let at = |l: &[char], cs: &[char]| cs.iter().map(|&c| position(l, c)).collect();
            let cprime: Vec<char> = fa.iter().chain(&fb).copied().collect();
            Signs {
                perm_a: fa.iter().chain(&k).map(|&c| position(la, c)).collect(),
                perm_b: k.iter().chain(&fb).map(|&c| position(lb, c)).collect(),
                free_a: at(la, &fa),
                k_a: at(la, &k),
                free_b: at(lb, &fb),
                a_in: k
                    .iter()
                    .map(|&c| effective(&a.legs()[position(la, c)], conj[0]).direction())
                    .map(|d| d == Direction::In)
                    .collect(),
                out_perm: lo.iter().map(|&c| position(&cprime, c)).collect(),
            }
        });

        // The blocks of X by their contracted segments (in K's order).
        let key = |blk: &Block<'_, S>, axes: &mut dyn Iterator<Item = usize>| {
            axes.map(|i| blk.segments()[i])
                .collect::<SmallVec<[usize; 4]>>()
        };
        let mut x_of_k: HashMap<SmallVec<[usize; 4]>, Vec<usize>> = HashMap::new();
        for blk in x.blocks() {
            let kx = key(&blk, &mut legs.contracted.iter().map(|l| l.0));
            x_of_k.entry(kx).or_default().push(blk.id());
        }
        let keyed = |yb: &Block<'_, S>| {
            x_of_k
                .get(&key(yb, &mut legs.contracted.iter().map(|l| l.1)))
                .map_or(0, Vec::len)
        };
        if y.blocks().map(|yb| keyed(&yb)).sum::<usize>() > PAIRS_PER_BLOCK * x.num_blocks() {
            return None;
        }
        let flop_factor = if T::IS_COMPLEX { 8 } else { 2 };
        let mut met = Vec::new();
        let mut flops = 0_u64;
        let mut segments = vec![0_usize; lo.len()];
        for yb in y.blocks() {
            let ky = key(&yb, &mut legs.contracted.iter().map(|l| l.1));
            let Some(xs) = x_of_k.get(&ky) else { continue };
            let j: usize = legs.free_y.iter().map(|l| yb.shape()[l.0]).product();
            for &(ya, ca) in &legs.free_y {
                segments[ca] = yb.segments()[ya];
            }
            for &xi in xs {
                let xb = x.block(xi)?;
                for &(xa, ca) in std::iter::once(&legs.inner).chain(&legs.outer) {
                    segments[ca] = xb.segments()[xa];
                }
                let Some(ci) = output.block_id(&segments) else {
                    continue;
                };
                flops += flop_factor * (xb.len() * j) as u64;
                met.push((ci, xi, yb.id()));
            }
        }
        let table = PairTable::new(output.num_blocks(), &met);

        // Output blocks by row of X's free sectors, rows in order of first appearance: one
        // bundle each, written by one kernel call.
        let free_c: Vec<usize> = std::iter::once(&legs.inner)
            .chain(&legs.outer)
            .map(|l| l.1)
            .collect();
        let mut rows: HashMap<SmallVec<[usize; 4]>, usize> = HashMap::new();
        let mut bundles: Vec<Vec<usize>> = Vec::new();
        let mut idle = Vec::new();
        for ci in 0..output.num_blocks() {
            if table.of(ci).is_empty() {
                idle.push(ci);
                continue;
            }
            let blk = output.block(ci)?;
            let row = key(&blk, &mut free_c.iter().copied());
            let next = bundles.len();
            let b = *rows.entry(row).or_insert(next);
            if b == next {
                bundles.push(Vec::new());
            }
            bundles[b].push(ci);
        }
        // Tasks of GROUP_ELEMS, or an eighth of the pass when it is smaller, so a small pass
        // still spreads over the workers (down to MIN_GROUP_ELEMS a task).
        let target = ((x.total_len() + output.total_len()) / 8).clamp(MIN_GROUP_ELEMS, GROUP_ELEMS);
        let mut groups = Vec::new();
        let mut group = SmallGroup::default();
        let (mut local_x, mut local_y) = (HashMap::new(), HashMap::new());
        let mut work = 0_usize;
        for bundle in bundles {
            let first = group.c.len();
            for ci in bundle {
                let start = group.pairs.len();
                for &(xi, yi) in table.of(ci) {
                    let (xb, yb) = (x.block(xi)?, y.block(yi)?);
                    let negative = signs.as_ref().is_some_and(|s| {
                        if big == 0 {
                            s.negative(&xb, &yb)
                        } else {
                            s.negative(&yb, &xb)
                        }
                    });
                    let lx = *local_x.entry(xi).or_insert_with(|| {
                        work += xb.len();
                        group.x.push(xi);
                        group.x.len() - 1
                    });
                    let ly = *local_y.entry(yi).or_insert_with(|| {
                        group.y.push(yi);
                        group.y.len() - 1
                    });
                    group.pairs.push((lx, ly, negative));
                }
                work += output.block(ci)?.len();
                group.c.push(ci);
                group.products.push(start..group.pairs.len());
            }
            group.bundles.push(first..group.c.len());
            if work >= target {
                groups.push(std::mem::take(&mut group));
                local_x.clear();
                local_y.clear();
                work = 0;
            }
        }
        if !group.c.is_empty() {
            groups.push(group);
        }
        Some(Self {
            big,
            legs,
            groups,
            idle,
            pairs: met.len(),
            flops,
        })
    }

    /// How many tasks it runs.
    pub(crate) fn tasks(&self) -> usize {
        self.groups.len()
    }

    /// How many output blocks no pair writes.
    pub(crate) fn idle_blocks(&self) -> usize {
        self.idle.len()
    }

    /// The bytes its tables hold.
    pub(crate) fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let groups: usize = self
            .groups
            .iter()
            .map(|g| {
                size_of::<SmallGroup>()
                    + (g.x.capacity() + g.y.capacity() + g.c.capacity()) * size_of::<usize>()
                    + (g.products.capacity() + g.bundles.capacity()) * size_of::<Range<usize>>()
                    + g.pairs.capacity() * size_of::<(usize, usize, bool)>()
            })
            .sum();
        groups + self.idle.capacity() * size_of::<usize>()
    }
}

/// Enrolls `c <- alpha op(a) op(b) + beta c` by `small` (`fresh`: `c` is a new array with
/// unspecified elements, so `beta` is ignored and every block is written).
#[allow(clippy::too_many_arguments)]
pub(crate) fn submit<T: Field, S: AbelianSector>(
    plan: &Arc<Plan<S>>,
    small: &SmallPlan,
    alpha: T,
    a: &AsyncArray<T, S>,
    b: &AsyncArray<T, S>,
    beta: T,
    c: &AsyncArray<T, S>,
    fresh: bool,
) -> Result<(), Error> {
    let overwrite = fresh || beta == T::ZERO;
    // An output beyond the last-level cache is written past it.
    let stores = Stores::for_result(c.structure().total_len() * size_of::<T>());
    let (x, y) = if small.big == 0 { (a, b) } else { (b, a) };
    let conj = if small.big == 0 {
        plan.conj
    } else {
        [plan.conj[1], plan.conj[0]]
    };
    for (g, group) in small.groups.iter().enumerate() {
        let (reads_x, reads_y) = (block_reads(x, &group.x)?, block_reads(y, &group.y)?);
        let writes = block_writes(c, &group.c, overwrite)?;
        let plan = Arc::clone(plan);
        schedule_named(
            "contract.small_operand",
            (reads_x, reads_y, writes),
            move |(xs, ys, mut cs)| {
                let small = plan.small.as_ref().ok_or("a small-operand plan")?;
                let group = &small.groups[g];
                let beta = (!overwrite).then_some(beta);
                let mut rest: &mut [_] = &mut cs;
                for run in &group.bundles {
                    let (views, tail) = std::mem::take(&mut rest).split_at_mut(run.len());
                    rest = tail;
                    let products = &group.products[run.clone()];
                    let pairs: Vec<Vec<SmallPair<'_, '_, T>>> = products
                        .iter()
                        .map(|r| {
                            group.pairs[r.clone()]
                                .iter()
                                .map(|&(lx, ly, neg)| SmallPair {
                                    x: &xs[lx],
                                    y: &ys[ly],
                                    scale: if neg { T::ZERO - alpha } else { alpha },
                                })
                                .collect()
                        })
                        .collect();
                    let mut outputs: Vec<SmallOutput<'_, '_, '_, T>> = views
                        .iter_mut()
                        .zip(&pairs)
                        .map(|(v, p)| (v, p.as_slice()))
                        .collect();
                    contract_small(&small.legs, conj, &mut outputs, beta, stores)?;
                }
                Ok(())
            },
        )?;
    }
    settle_idle(c, &small.idle, overwrite, beta)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Contraction, PlanCache, Strategy};
    use std::sync::Arc;
    use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};

    /// The MPO step of a chain written as TeNPy writes it, in miniature:
    /// `C[p, v, x, y] = sum_{w, q} X[w, p, v, q] W[w, x, q, y]`, with `X`'s leading leg `w`
    /// contracted and the output's first leg `p` a physical leg of one state per sector.
    /// The pass runs along `v` (X's axis 2, the output's axis 1), not along 1-row columns of
    /// `p`, and gives the dense result.
    #[test]
    fn the_pass_runs_along_a_long_leg_where_the_first_is_one_state_per_sector() {
        let phys = Leg::new(Direction::In, [(U1(0), 1), (U1(1), 1)]).unwrap();
        let mpo = Leg::new(Direction::In, [(U1(-1), 1), (U1(0), 2), (U1(1), 1)]).unwrap();
        let bond = Leg::new(Direction::Out, (-3..=3).map(|q| (U1(q), (9 + q) as usize))).unwrap();
        let xs = BlockStructure::from_legs(
            vec![mpo.clone(), phys.clone(), bond, phys.clone()],
            2,
            U1(0),
        )
        .unwrap();
        let ws = BlockStructure::from_legs(
            vec![mpo.dual(), mpo.clone(), phys.dual(), phys.clone()],
            2,
            U1(0),
        )
        .unwrap();
        let x = AsyncArray::<f64, U1>::random(Arc::new(xs), 3);
        let w = AsyncArray::<f64, U1>::random(Arc::new(ws), 4);
        let pass = Contraction::new("wpvq,wxqy->pv|xy")
            .unwrap()
            .with_cache(Arc::new(PlanCache::new().with_small_operand_min(0)));
        let plan = pass.plan(&x, &w).unwrap();
        assert_eq!(plan.strategy(), Strategy::SmallOperand);
        let small = plan.small.as_ref().unwrap();
        assert_eq!((small.big, small.legs.inner), (0, (2, 1)));
        assert_eq!(small.legs.outer, vec![(1, 0)]);

        // Against the definition on the dense tensors (column-major, first leg fastest).
        let got = pass.apply(&x, &w).unwrap().to_dense().unwrap();
        let (dx, dw) = (x.to_dense().unwrap(), w.to_dense().unwrap());
        let (nw, np, nv) = (4, 2, 63);
        let mut want = vec![0.0; np * nv * nw * np];
        for (c, out) in want.iter_mut().enumerate() {
            let (p, v, xx, y) = (c % np, c / np % nv, c / (np * nv) % nw, c / (np * nv * nw));
            for wi in 0..nw {
                for q in 0..np {
                    let a = dx[wi + nw * (p + np * (v + nv * q))];
                    let b = dw[wi + nw * (xx + nw * (q + np * y))];
                    *out += a * b;
                }
            }
        }
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-13 * scale, "{g} against {w}");
        }
    }
}
