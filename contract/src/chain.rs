//! Three contractions applied as one, by row panels: `((A B) C) D`, where `C` is a small
//! operand (an MPO, a gate) and `A`'s first leg stays the first leg of every intermediate and
//! of the result (DMRG's `H_eff theta = ((L theta) W) R`).
//!
//! Owns [`Chain`] and its panel plan. Applied in turn, the three contractions are some 25
//! tasks at DMRG bond dimension 128 to 512 (permutations, GEMM groups, the operator's passes),
//! each step waiting for all of the one before, and they write two intermediates far larger
//! than the operands (at bond dimension 512 each is about 8 MB) that round-trip through
//! memory. Run by panels, one task takes one segment `p` of `A`'s first leg and does all
//! three steps for it: the rows of both intermediates on `p` into its own scratch, chunk by
//! chunk of rows (so a chunk's intermediates are still in cache when the next step reads
//! them), then the result's blocks on `p`; the same sector GEMMs (on fewer rows) and the
//! same small-operand kernel on the same blocks. A handful of tasks, largest first.
//!
//! Invariants:
//!
//! - The result is the one the three [`Contraction`]s give applied in turn. The chain runs
//!   them fused only where the plans allow it (see [`PanelPlan::build`]: an abelian,
//!   ungraded symmetry, no conjugation, sector GEMMs for the first and last steps with
//!   neither `A` nor the intermediates permuted and the result at most re-split (its legs in
//!   the product's order, split elsewhere, each block's rows still one matrix's), a
//!   small-operand pass for the middle one along the first leg, and at least
//!   [`FUSE_MIN_ELEMS`] elements of `A B`); otherwise in turn, as [`Contraction::apply`]
//!   does.
//! - Fused, each task owns one panel: it reads `A`, `B'` (the matrix form of `B`), `C` and
//!   `D'`, and overwrites exactly the result's blocks on its segment that a GEMM writes,
//!   every row of them once; the result's blocks no pair writes are zeroed by a task of
//!   their own.
//!   Its scratch is its own (taken from the buffer pool and given back when it ends).
//! - Every scratch element a later step reads was written first in the same task: a GEMM's
//!   whole output, the small pass's output blocks, or zero where no pair writes a block.

use crate::cache::PlanCache;
use crate::error::Error;
use crate::execute::{Contraction, block_reads, block_writes, matrix_form, settle_idle};
use crate::operand::Operand;
use crate::operand::sealed::Token;
use crate::plan::{Plan, SectorGemm};
use faer::{MatMut, Par};
use smallvec::SmallVec;
use std::any::{Any, TypeId};
use std::ops::Range;
use std::sync::Arc;
use tessera_backends::Field;
use tessera_backends::cpu::{
    SmallOutput, SmallPair, Stores, contract_small, gemm_with, matrix_mut,
};
use tessera_blocks::{AbelianSector, AsyncArray, Block, BlockStructure};
use tessera_coalesce::Matrices;
use tessera_coalesce::{Coalesce, SectorBatches};
use tessera_core::{KernelError, LruCache, SharedBuffer, StridedMut, StridedRef, schedule_named};

/// The modelled memory traffic of one fused application of a [`Chain`] (see
/// [`Chain::traffic`]), in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainTraffic {
    /// Elements read of `A`, `B'` (the matrix form of `B`), `C` and `D'`: each block once per
    /// GEMM or kernel call that reads it. `A`'s rows are read once; a sector of `B'` or `D'`
    /// once per chunk of each panel that meets it (and once per row tuple where the chunk is
    /// not the whole panel); a block of `C` once per pair of blocks it is applied in.
    pub reads: [usize; 4],
    /// Elements of the result, each written once.
    pub written: usize,
    /// The most scratch elements one panel's task holds (both intermediates, one chunk).
    pub scratch: usize,
}

/// A kept panel plan, typed by the key it is kept under.
type Kept = Arc<dyn Any + Send + Sync>;

/// How many panel plans a [`Chain`] keeps (the most recently used).
const KEPT_PLANS: usize = 8;

/// `((A B) C) D` by three [`Contraction`]s, run fused by row panels where it can (see the
/// module docs), with the result of applying them in turn.
///
/// ```
/// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
/// use tessera_contract::{Chain, Contraction};
///
/// let v = Leg::new(Direction::In, [(U1(0), 3), (U1(1), 2)])?;
/// let p = Leg::new(Direction::In, [(U1(0), 1), (U1(1), 1)])?;
/// let m = Leg::new(Direction::In, [(U1(0), 2)])?;
/// // L(y, a | k), theta(k | s, r), W(a, s | u, c), R(r, c | z)
/// let l: AsyncArray<f64, U1> = AsyncArray::random(BlockStructure::new([v.clone(), m.clone()], [v.clone()], U1(0))?, 1);
/// let theta = AsyncArray::random(BlockStructure::new([v.dual()], [p.clone(), v.clone()], U1(0))?, 2);
/// let w = AsyncArray::random(BlockStructure::new([m.dual(), p.dual()], [p.dual(), m.clone()], U1(0))?, 3);
/// let r = AsyncArray::random(BlockStructure::new([v.dual(), m.dual()], [v.clone()], U1(0))?, 4);
/// let steps = [
///     Contraction::new("yak,ksr->ya|sr")?,
///     Contraction::new("yasr,asuc->yu|rc")?,
///     Contraction::new("yurc,rcz->yu|z")?,
/// ];
/// // Tensors this small run faster in turn; fused here to show it.
/// let chain = Chain::new(steps.clone()).with_fused_min(0);
/// let structures = [&l, &theta, &w, &r].map(|x| x.structure());
/// assert!(chain.fuses::<f64, U1>(structures)?);
/// let fused = chain.apply(&l, &theta, &w, &r)?;
/// let t = steps[0].apply(&l, &theta)?;
/// let u = steps[1].apply(&t, &w)?;
/// let in_turn = steps[2].apply(&u, &r)?;
/// for (x, y) in fused.to_dense()?.iter().zip(in_turn.to_dense()?) {
///     assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()));
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Chain {
    steps: [Contraction; 3],
    /// Plans the middle step with the small-operand pass at any size (the pass runs on one
    /// panel's rows, in cache, where a GEMM would need two permutations).
    small_cache: Arc<PlanCache>,
    /// Panel plans (`None`: the chain runs in turn for those structures) by the operands'
    /// types and structures' fingerprints.
    panels: LruCache<(TypeId, [u64; 4]), Option<Kept>>,
    /// Rows per chunk when set (see [`Chain::with_chunk_rows`]).
    chunk_rows: Option<usize>,
    /// The least elements of the first intermediate it fuses (see
    /// [`Chain::with_fused_min`]).
    fused_min: usize,
}

impl Clone for Chain {
    fn clone(&self) -> Self {
        Self {
            chunk_rows: self.chunk_rows,
            fused_min: self.fused_min,
            ..Self::new(self.steps.clone())
        }
    }
}

impl Chain {
    /// The chain of `steps`: `steps[0]` contracts `A` with `B`, `steps[1]` that with `C`,
    /// `steps[2]` that with `D`.
    pub fn new(steps: [Contraction; 3]) -> Self {
        Self {
            steps,
            small_cache: Arc::new(PlanCache::new().with_small_operand_min(0)),
            panels: LruCache::new(KEPT_PLANS),
            chunk_rows: None,
            fused_min: FUSE_MIN_ELEMS,
        }
    }

    /// Fuses from `elems` elements of the first intermediate `A B` on, instead of from
    /// [`FUSE_MIN_ELEMS`] (2^16, below which the steps in turn are faster): for tuning, and
    /// for small examples and tests that want the fused path.
    pub fn with_fused_min(mut self, elems: usize) -> Self {
        self.fused_min = elems;
        self.panels.clear();
        self
    }

    /// Runs each panel in chunks of `rows` rows of the first leg (the last one shorter)
    /// instead of chunks of a multiple of 16 rows (at least 64) with about 2 MiB of
    /// scratch: for tuning, and for tests that want many chunks. At least 1.
    pub fn with_chunk_rows(mut self, rows: usize) -> Self {
        self.chunk_rows = Some(rows.max(1));
        self.panels.clear();
        self
    }

    /// `panel` with its rows per chunk set: as the chain was told, or a multiple of
    /// [`CHUNK_ROWS_STEP`] rows (the last chunk shorter) whose scratch holds at most about
    /// [`CHUNK_ELEMS`] elements, and at least [`MIN_CHUNK_ROWS`].
    fn chunked(&self, mut panel: Panel) -> Panel {
        let dy = panel.dy.max(1);
        panel.chunk = match self.chunk_rows {
            Some(rows) => rows.min(dy),
            None => {
                let per_row = (panel.t_len + panel.u_len).max(1);
                let rows = CHUNK_ELEMS / per_row / CHUNK_ROWS_STEP * CHUNK_ROWS_STEP;
                rows.max(MIN_CHUNK_ROWS).min(dy)
            }
        };
        panel
    }

    /// The three contractions.
    pub fn steps(&self) -> &[Contraction; 3] {
        &self.steps
    }

    /// Whether [`apply`](Chain::apply) runs fused by row panels on host operands of
    /// structures `s` (`[A, B, C, D]`) and elements `T`; `false` where it applies the steps
    /// in turn.
    ///
    /// # Errors
    ///
    /// As [`Contraction::plan`] for each step.
    pub fn fuses<T: Field, S: AbelianSector>(
        &self,
        s: [&Arc<BlockStructure<S>>; 4],
    ) -> Result<bool, Error> {
        Ok(self.panel_plan::<T, S>(s)?.is_some())
    }

    /// The memory traffic of one fused application on host operands of structures `s`
    /// (`[A, B, C, D]`), elements `T`, from the panel plan alone; `None` where the chain
    /// runs in turn. Counts an operand's block once per GEMM or kernel call that reads it
    /// (no reuse between calls assumed: an upper bound), see [`ChainTraffic`].
    ///
    /// # Errors
    ///
    /// As [`Contraction::plan`] for each step.
    pub fn traffic<T: Field, S: AbelianSector>(
        &self,
        s: [&Arc<BlockStructure<S>>; 4],
    ) -> Result<Option<ChainTraffic>, Error> {
        let Some(plan) = self.panel_plan::<T, S>(s)? else {
            return Ok(None);
        };
        let [p1, _, p3] = &plan.plans;
        let (am, bm) = (&p1.operands[0].matrix, &p1.operands[1].matrix);
        let mut t = ChainTraffic {
            reads: [0; 4],
            written: p3.output().total_len(),
            scratch: 0,
        };
        let c_len = |id: usize| s[2].block(id).map_or(0, |b| b.len());
        for panel in &plan.panels {
            let c_reads: usize = panel
                .calls
                .iter()
                .flat_map(|call| &call.pairs)
                .map(|&(_, y)| c_len(y))
                .sum();
            t.scratch = t.scratch.max((panel.t_len + panel.u_len) * panel.chunk);
            for (_, n) in panel.chunks() {
                let calls = |f: usize| gemms(f, n, panel.dy).count();
                for g in &panel.first {
                    t.reads[0] += g.f * n * am.sectors()[g.a].cols();
                    let b = &bm.sectors()[g.b];
                    t.reads[1] += calls(g.f) * b.rows() * b.cols();
                }
                t.reads[2] += c_reads;
                for g in &panel.last {
                    t.reads[3] += calls(g.f) * g.k * g.cols.len();
                }
            }
        }
        Ok(Some(t))
    }

    /// `((A B) C) D` into a new array (enrolled, not waited for), fused by row panels on
    /// host arrays where the plans allow it, else the three contractions in turn.
    ///
    /// # Errors
    ///
    /// As [`Contraction::apply`] for each step.
    pub fn apply<X: Operand>(&self, a: &X, b: &X, c: &X, d: &X) -> Result<X, Error> {
        if let Some(out) = X::submit_chain(self, [a, b, c, d], Token(()))? {
            return Ok(out);
        }
        let [first, second, last] = &self.steps;
        let t = first.apply(a, b)?;
        let u = second.apply(&t, c)?;
        last.apply(&u, d)
    }

    /// The panel plan for host operands of these structures (`None`: run in turn), kept.
    fn panel_plan<T: Field, S: AbelianSector>(
        &self,
        s: [&Arc<BlockStructure<S>>; 4],
    ) -> Result<Option<Arc<PanelPlan<S>>>, Error> {
        let key = (TypeId::of::<(T, S)>(), s.map(|x| x.fingerprint()));
        // A fingerprint collision is not the same structures: it plans again.
        let fits = |kept: &Option<Kept>| {
            kept.as_ref()
                .is_none_or(|p| p.downcast_ref::<PanelPlan<S>>().is_some_and(|p| p.fits(s)))
        };
        if let Some(kept) = self.panels.get_if(&key, fits) {
            return Ok(kept.map(|p| p.downcast::<PanelPlan<S>>().expect("keyed by type")));
        }
        let plan = PanelPlan::build::<T>(self, s)?.map(Arc::new);
        self.panels.insert(key, plan.clone().map(|p| p as Kept));
        Ok(plan)
    }
}

/// A block of an intermediate in a chunk's scratch, per row of the first leg: the chunk
/// of `n` rows holds its sector's rows on the panel as one column-major matrix of leading
/// dimension `ld * n`, each row tuple's rows ordered by its other row legs, then the first
/// leg; so the block starts at `offset * n` and has strides that scale with `n`.
#[derive(Clone, Debug)]
struct Place {
    offset: usize,
    ld: usize,
    /// The block's shape (its first extent is the panel's, replaced by the chunk's).
    shape: SmallVec<[usize; 6]>,
    n_rows: usize,
}

impl Place {
    /// Offset, extents and strides in the scratch of a chunk of `n` rows.
    fn at(&self, n: usize) -> (usize, SmallVec<[usize; 6]>, SmallVec<[isize; 6]>) {
        let mut dims = self.shape.clone();
        dims[0] = n;
        let mut strides = SmallVec::new();
        let mut s = 1_usize;
        for (i, &d) in dims.iter().enumerate() {
            if i == self.n_rows {
                s = self.ld * n;
            }
            strides.push(s as isize);
            s *= d;
        }
        (self.offset * n, dims, strides)
    }
}

/// The GEMMs of the first step for one row tuple of the product, `f` rows per row of the
/// first leg (the extent of its other row legs), for a chunk of `n` rows from `y0`: for each
/// `j < f`, rows `row + j dy + y0 ..` (`n` of them) of `A`'s sector `a` times `B'`'s sector
/// `b`, into the chunk's scratch at `(offset + j) n`, leading dimension `ld n`. When the
/// chunk is the whole panel those rows follow each other in both, and one GEMM does all.
#[derive(Clone, Debug)]
struct First {
    a: usize,
    b: usize,
    row: usize,
    f: usize,
    offset: usize,
    ld: usize,
}

/// One call of the small-operand kernel: output blocks (local indices into the panel's `u`
/// places) with their ranges of `pairs` (local `t` index, block of `C`).
#[derive(Clone, Debug, Default)]
struct Call {
    outputs: Vec<(usize, Range<usize>)>,
    pairs: Vec<(usize, usize)>,
}

/// The GEMMs of the last step for one block of the result, `f` rows per row of the first
/// leg, for a chunk of `n` rows from `y0`: for each `j < f`, the chunk's scratch rows at
/// `(offset + j) n` (`n` of them, leading dimension `ld n`, `k` columns) times columns
/// `cols` of `D'`'s sector `d`, into rows `j dy + y0 ..` of the result's block `out` (a
/// local index into the panel's written blocks); one GEMM when the chunk is the panel.
#[derive(Clone, Debug)]
struct Last {
    offset: usize,
    f: usize,
    ld: usize,
    k: usize,
    d: usize,
    cols: Range<usize>,
    out: usize,
}

/// One task's work: the result's blocks on one segment of the first leg, in chunks of rows.
#[derive(Clone, Debug, Default)]
struct Panel {
    /// The segment's extent and the rows per chunk.
    dy: usize,
    chunk: usize,
    /// Scratch elements of the two intermediates per row of the chunk.
    t_len: usize,
    u_len: usize,
    first: Vec<First>,
    /// Scratch ranges of the first intermediate (per row) that no GEMM writes (zeroed).
    t_zero: Vec<Range<usize>>,
    t: Vec<Place>,
    u: Vec<Place>,
    /// Local `u` indices no pair writes (zeroed).
    u_zero: Vec<usize>,
    calls: Vec<Call>,
    last: Vec<Last>,
    /// The result's blocks the panel writes.
    out: Vec<usize>,
    /// The GEMMs' flops (its cost, for the order of the tasks).
    flops: u64,
}

impl Panel {
    /// Its chunks as `(first row, rows)`: `chunk` rows each, the last one shorter.
    fn chunks(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.dy)
            .step_by(self.chunk.max(1))
            .map(|y0| (y0, self.chunk.min(self.dy - y0)))
    }
}

/// The scratch of one chunk, both intermediates: about 2 MiB of `f64` (a core's share of
/// the caches), which bounds a task's scratch unless [`MIN_CHUNK_ROWS`] needs more. At DMRG
/// bond dimension 512 the two largest panels (145 rows) then run in chunks of 64, 64 and 17
/// rows, 3-4% faster than in chunks of 96 and 49, as fast as in chunks of 48 or 32 (chain
/// against chain, alternating in one process); at 1024, chunks of 64 and 96 are as fast.
const CHUNK_ELEMS: usize = 1 << 18;

/// Chunks are a multiple of this many rows: two AVX-512 vectors of `f64` (four AVX2
/// vectors), so the GEMMs' row blocks end on whole vectors (chunks of 49 or 73 rows were
/// 4-12% slower than of 48 or 64).
const CHUNK_ROWS_STEP: usize = 16;

/// The least rows of a chunk (unless the panel has fewer): fewer rows make more and shorter
/// GEMMs, each reading its `B` again (at bond dimension 1024, chunks of 48 rows were 1-3%
/// slower than of 64, of 32 up to 5%).
const MIN_CHUNK_ROWS: usize = 4 * CHUNK_ROWS_STEP;

/// The least elements of the first intermediate for which the chain runs fused: below it
/// (DMRG bonds under about 128) the panels' many small GEMMs and kernel calls cost more
/// than the memory passes they save (`dmrg --sites 32 --chi 256`: fused from 2^16, 0.63 s;
/// always fused, 0.87 s; never, 0.66 s; medians of six).
pub const FUSE_MIN_ELEMS: usize = 1 << 16;

/// The fused plan of a [`Chain`] for operands of given structures.
#[derive(Debug)]
struct PanelPlan<S: AbelianSector> {
    plans: [Arc<Plan<S>>; 3],
    /// Every sector of `A`, of `B'` and of `D'`, one batch each (sector `i` is matrix `i`).
    batches: [SectorBatches<S>; 3],
    panels: Vec<Panel>,
    /// The result's blocks no pair writes (the last plan's idle product blocks).
    idle: Vec<usize>,
}

/// The rows of one intermediate on a panel, sector by sector, per row of the first leg.
struct Rows {
    sectors: Vec<SectorRows>,
    len: usize,
}

/// One sector's rows on a panel, per row of the first leg: where they start in the
/// scratch, how many (the leading dimension of their matrix; 0 when the sector has no block
/// on the panel), and each row tuple's local offset, `(row range start, local offset)` by
/// start.
struct SectorRows {
    base: usize,
    ld: usize,
    local: Vec<(usize, usize)>,
}

impl Rows {
    /// The layout of `s`'s blocks whose first leg has segment `p` of extent `dy`.
    fn of<S: AbelianSector>(s: &BlockStructure<S>, p: usize, dy: usize) -> Self {
        let mut sectors = Vec::with_capacity(s.sectors().len());
        let mut len = 0;
        for sector in s.sectors() {
            let mut ranges: Vec<Range<usize>> = sector
                .blocks()
                .filter_map(|id| s.block(id))
                .filter(|b| b.segments()[0] == p)
                .map(|b| b.rows())
                .collect();
            ranges.sort_by_key(|r| r.start);
            ranges.dedup();
            let mut local = Vec::with_capacity(ranges.len());
            let mut ld = 0;
            for r in &ranges {
                local.push((r.start, ld));
                ld += r.len() / dy;
            }
            sectors.push(SectorRows {
                base: len,
                ld,
                local,
            });
            len += ld * sector.cols();
        }
        Self { sectors, len }
    }

    /// The local offset of row tuple `start` of sector `c`.
    fn local(&self, c: usize, start: usize) -> Option<usize> {
        let local = &self.sectors[c].local;
        local
            .binary_search_by_key(&start, |&(s, _)| s)
            .ok()
            .map(|i| local[i].1)
    }

    /// The place of block `id` of `s` (on the panel).
    fn place<S: AbelianSector>(&self, s: &BlockStructure<S>, id: usize) -> Option<Place> {
        let b = s.block(id)?;
        let c = b.coupled();
        let SectorRows { base, ld, .. } = self.sectors[c];
        let row = self.local(c, b.rows().start)?;
        Some(Place {
            offset: base + row + b.cols().start * ld,
            ld,
            shape: b.shape().iter().copied().collect(),
            n_rows: s.n_codomain(),
        })
    }
}

impl<S: AbelianSector> PanelPlan<S> {
    /// The fused plan, or `None` where the chain must run in turn: the symmetry is graded
    /// (fermionic signs of permutations and pairings, which the in-turn plans carry), a step
    /// conjugates, the first or last step is not all sector GEMMs with `A` (resp. the middle
    /// result) and the intermediates unpermuted, the result is permuted other than by a
    /// re-split whose blocks' rows fold as the product's (see [`rows_fold`]), the middle
    /// step has no small-operand pass on its first operand along its first leg, `A`'s first
    /// leg is contracted, a sector is packed, or `A B` has fewer elements than the chain
    /// fuses.
    fn build<T: Field>(
        chain: &Chain,
        [sa, sb, sc, sd]: [&Arc<BlockStructure<S>>; 4],
    ) -> Result<Option<Self>, Error> {
        let [first, second, last] = &chain.steps;
        if S::GRADED || [first, second, last].iter().any(|s| s.conj() != [false; 2]) {
            return Ok(None);
        }
        // (`resplit`: the output may be the product re-split, its legs in the same order.)
        let gemms_only = |p: &Plan<S>, resplit: bool| {
            p.small.is_none()
                && p.groups.is_empty()
                && p.operands[0].permute.is_none()
                && p.output_permute.as_ref().is_none_or(|(perm, _)| {
                    resplit && perm.iter().enumerate().all(|(i, &j)| i == j)
                })
        };
        let leading_free = |c: &Contraction| {
            let spec = c.spec();
            spec.a()
                .first()
                .is_some_and(|y| !spec.contracted().contains(y) && spec.output().first() == Some(y))
        };
        if ![first, second, last].into_iter().all(leading_free) {
            return Ok(None);
        }
        let p1 = first.plan_structures::<T, S>(sa, sb)?;
        if !gemms_only(&p1, false) {
            return Ok(None);
        }
        if p1.output().total_len() < chain.fused_min {
            return Ok(None);
        }
        let p2 = second
            .clone()
            .with_cache(Arc::clone(&chain.small_cache))
            .plan_structures::<T, S>(p1.output(), sc)?;
        let Some(small) = p2.small.as_ref() else {
            return Ok(None);
        };
        if small.big != 0 || small.legs.inner != (0, 0) {
            return Ok(None);
        }
        let p3 = last.plan_structures::<T, S>(p2.output(), sd)?;
        if !gemms_only(&p3, true) {
            return Ok(None);
        }
        let all = |s: &Arc<BlockStructure<S>>| {
            let ids: Vec<usize> = (0..s.sectors().len()).collect();
            SectorBatches::new(s, [ids.as_slice()])
        };
        let batches = match (
            all(sa),
            all(&p1.operands[1].matrix),
            all(&p3.operands[1].matrix),
        ) {
            (Ok(a), Ok(b), Ok(d)) => [a, b, d],
            _ => return Ok(None),
        };
        let (ts, us, out) = (p1.output(), p2.output(), p3.output());
        // The last GEMMs write the result's blocks directly, re-split or not.
        let target = p3.target();
        let Some(idle) = p3
            .idle
            .iter()
            .map(|&i| target.block(i).and_then(|b| out.block_id(b.segments())))
            .collect::<Option<Vec<usize>>>()
        else {
            return Ok(None);
        };
        // Dense sectors with the first leg a row leg (the fastest of the rows) everywhere.
        let rows_first =
            |s: &BlockStructure<S>| s.n_codomain() >= 1 && s.sectors().iter().all(|c| c.is_dense());
        if ![sa, ts, us, out].into_iter().all(|s| rows_first(s)) {
            return Ok(None);
        }
        // Per output block of the middle step, its pairs `(block of T, block of C)`.
        let mut pairs_of: Vec<Vec<(usize, usize)>> = vec![Vec::new(); us.num_blocks()];
        for g in &small.groups {
            for (local, range) in g.products.iter().enumerate() {
                pairs_of[g.c[local]].extend(
                    g.pairs[range.clone()]
                        .iter()
                        .map(|&(lx, ly, _)| (g.x[lx], g.y[ly])),
                );
            }
        }
        // The axes of U that are free legs of T (the kernel's inner and outer legs): blocks
        // of U that agree on them read the same columns of T, so one call serves them.
        let free: Vec<usize> = std::iter::once(small.legs.inner.1)
            .chain(small.legs.outer.iter().map(|l| l.1))
            .collect();
        let segments = sa.legs().first().map_or(0, |l| l.num_segments());
        let mut panels = Vec::with_capacity(segments);
        for p in 0..segments {
            let dy = sa.legs()[0].segments()[p].dim;
            let panel = Self::panel(&p1, &p3, &free, [ts, us, out], &pairs_of, p, dy);
            match panel.map(|q| chain.chunked(q)) {
                Some(panel) if !panel.out.is_empty() => panels.push(panel),
                Some(_) => {}
                None => return Ok(None),
            }
        }
        // Largest first: the runtime mostly starts tasks that are ready together in the order
        // they were enrolled (a hint, not a guarantee), and the panels' costs differ by orders
        // of magnitude (the middle sectors are the largest).
        panels.sort_by_key(|q| std::cmp::Reverse(q.flops));
        Ok(Some(Self {
            plans: [p1, p2, p3],
            batches,
            panels,
            idle,
        }))
    }

    /// The work of segment `p` of extent `dy` (`None`: a block the layout cannot place).
    #[allow(clippy::too_many_arguments)]
    fn panel(
        p1: &Plan<S>,
        p3: &Plan<S>,
        free: &[usize],
        [ts, us, out]: [&BlockStructure<S>; 3],
        pairs_of: &[Vec<(usize, usize)>],
        p: usize,
        dy: usize,
    ) -> Option<Panel> {
        let (t_rows, u_rows) = (Rows::of(ts, p, dy), Rows::of(us, p, dy));
        let mut panel = Panel {
            dy,
            t_len: t_rows.len,
            u_len: u_rows.len,
            ..Panel::default()
        };
        // First step: the GEMMs of each row tuple of each product sector on the panel (its
        // rows `y + dy * j` for the `f` indices `j` of its other row legs).
        let mut t_written = vec![false; ts.sectors().len()];
        for &SectorGemm { a, b, c } in &p1.sector_gemms {
            let SectorRows { base, ld, local } = &t_rows.sectors[c];
            t_written[c] = true;
            for (i, &(start, row)) in local.iter().enumerate() {
                let next = local.get(i + 1).map_or(*ld, |&(_, r)| r);
                panel.first.push(First {
                    a,
                    b,
                    row: start,
                    f: next - row,
                    offset: base + row,
                    ld: *ld,
                });
            }
        }
        for (c, rows) in t_rows.sectors.iter().enumerate() {
            if !t_written[c] && rows.ld > 0 {
                let cols = ts.sectors()[c].cols();
                panel.t_zero.push(rows.base..rows.base + rows.ld * cols);
            }
        }
        // Middle step: the blocks of T and U on the panel, and one kernel call per row of
        // T's free sectors (the blocks of U that read the same columns of T).
        let mut t_local = vec![usize::MAX; ts.num_blocks()];
        for blk in ts.blocks().filter(|b| b.segments()[0] == p) {
            t_local[blk.id()] = panel.t.len();
            panel.t.push(t_rows.place(ts, blk.id())?);
        }
        let mut call_of: Vec<(SmallVec<[usize; 6]>, usize)> = Vec::new();
        for blk in us.blocks().filter(|b| b.segments()[0] == p) {
            let local = panel.u.len();
            panel.u.push(u_rows.place(us, blk.id())?);
            let pairs = &pairs_of[blk.id()];
            if pairs.is_empty() {
                panel.u_zero.push(local);
                continue;
            }
            let key: SmallVec<[usize; 6]> = free.iter().map(|&i| blk.segments()[i]).collect();
            let call = match call_of.iter().find(|(k, _)| *k == key) {
                Some(&(_, i)) => i,
                None => {
                    call_of.push((key, panel.calls.len()));
                    panel.calls.push(Call::default());
                    panel.calls.len() - 1
                }
            };
            let call = &mut panel.calls[call];
            let start = call.pairs.len();
            for &(x, y) in pairs {
                let lx = *t_local.get(x)?;
                if lx == usize::MAX {
                    return None;
                }
                call.pairs.push((lx, y));
            }
            call.outputs.push((local, start..call.pairs.len()));
        }
        // Last step: the GEMMs of each block of the product on the panel (rows as above),
        // each into the result's block of the same segments (the same block unless the
        // result is re-split).
        let target = p3.target();
        for &SectorGemm { a, b, c } in &p3.sector_gemms {
            let SectorRows { base, ld, .. } = u_rows.sectors[a];
            let k = us.sectors()[a].cols();
            for blk in target.sectors()[c]
                .blocks()
                .filter_map(|id| target.block(id))
                .filter(|blk| blk.segments()[0] == p)
            {
                let row = u_rows.local(a, blk.rows().start)?;
                let id = out.block_id(blk.segments())?;
                if !rows_fold(&out.block(id)?, target.n_codomain()) {
                    return None;
                }
                panel.last.push(Last {
                    offset: base + row,
                    f: blk.rows().len() / dy,
                    ld,
                    k,
                    d: b,
                    cols: blk.cols(),
                    out: panel.out.len(),
                });
                panel.out.push(id);
            }
        }
        let (am, bm) = (&p1.operands[0].matrix, &p1.operands[1].matrix);
        let first: usize = panel
            .first
            .iter()
            .map(|g| g.f * am.sectors()[g.a].cols() * bm.sectors()[g.b].cols())
            .sum();
        let last: usize = panel.last.iter().map(|g| g.f * g.k * g.cols.len()).sum();
        panel.flops = 2 * (dy * (first + last)) as u64;
        Some(panel)
    }

    /// Whether the plan was made for these structures.
    fn fits(&self, [sa, sb, sc, sd]: [&Arc<BlockStructure<S>>; 4]) -> bool {
        let [p1, p2, p3] = &self.plans;
        p1.fits(sa, sb) && p2.fits(p1.output(), sc) && p3.fits(p2.output(), sd)
    }
}

/// Enrolls `((a b) c) d` by `chain`'s panel plan, or returns `None` when it has none for
/// these structures.
pub(crate) fn submit<T: Field, S: AbelianSector>(
    chain: &Chain,
    [a, b, c, d]: [&AsyncArray<T, S>; 4],
) -> Result<Option<AsyncArray<T, S>>, Error> {
    let structures = [a, b, c, d].map(|x| x.structure());
    let Some(plan) = chain.panel_plan::<T, S>(structures)? else {
        return Ok(None);
    };
    let [p1, _, p3] = &plan.plans;
    let b_tmp = matrix_form(p1, 1, b)?;
    let bm = b_tmp.as_ref().unwrap_or(b);
    let d_tmp = matrix_form(p3, 1, d)?;
    let dm = d_tmp.as_ref().unwrap_or(d);
    let result = AsyncArray::try_empty(Arc::clone(p3.output()))?;
    // Every block of the small operand (all read by every panel).
    let c_ids: Vec<usize> = (0..c.structure().num_blocks()).collect();
    let [ba, bb, bd] = &plan.batches;
    for i in 0..plan.panels.len() {
        let access = (
            a.sector_batches(ba)?.remove(0).into_read(),
            bm.sector_batches(bb)?.remove(0).into_read(),
            block_reads(c, &c_ids)?,
            dm.sector_batches(bd)?.remove(0).into_read(),
            block_writes(&result, &plan.panels[i].out, true)?,
        );
        let plan = Arc::clone(&plan);
        schedule_named(
            "contract.chain_panel",
            access,
            move |(av, bv, cv, dv, mut outs)| {
                let panel = &plan.panels[i];
                run_panel(&plan, panel, &av, &bv, &cv, &dv, &mut outs)
            },
        )?;
    }
    settle_idle(&result, &plan.idle, true, T::ZERO)?;
    Ok(Some(result))
}

/// One panel's three steps, chunk by chunk of its rows (the kernel of its task).
#[allow(clippy::too_many_arguments)]
fn run_panel<T: Field, S: AbelianSector>(
    plan: &PanelPlan<S>,
    panel: &Panel,
    a: &Matrices<'_, T>,
    b: &Matrices<'_, T>,
    c: &[StridedRef<'_, T>],
    d: &Matrices<'_, T>,
    outs: &mut [StridedMut<'_, T>],
) -> Result<(), KernelError> {
    let legs = &plan.plans[1]
        .small
        .as_ref()
        .ok_or("a small-operand plan")?
        .legs;
    // The result's blocks as matrices of the product's rows (see `rows_fold`).
    let n_rows = plan.plans[2].target().n_codomain();
    let mut t = SharedBuffer::<T>::try_recycled(panel.t_len * panel.chunk)?;
    let mut u = SharedBuffer::<T>::try_recycled(panel.u_len * panel.chunk)?;
    for (y0, n) in panel.chunks() {
        // First step: T's rows of the chunk.
        {
            let ts = t.as_mut_slice();
            for z in &panel.t_zero {
                ts[z.start * n..z.end * n].fill(T::ZERO);
            }
            // (`gemms` splits each tuple's rows `(j, y)`, `j < f`, into the GEMMs whose
            // rows are consecutive in `A` as in the scratch: one when `n = dy`.)
            for g in &panel.first {
                let rhs = b.get(g.b);
                for (j, rows) in gemms(g.f, n, panel.dy) {
                    let lhs = a.get(g.a).subrows(g.row + j * panel.dy + y0, rows);
                    let out = scratch_mut(ts, (g.offset + j) * n, rows, rhs.ncols(), g.ld * n)?;
                    gemm_with(Par::Seq, out, T::ZERO, lhs, false, rhs, false, T::ONE)?;
                }
            }
        }
        // Middle step: U's blocks of the chunk from T's by the small kernel.
        {
            let places = |buf: &SharedBuffer<T>, ps: &[Place]| {
                ps.iter()
                    .map(|p| {
                        let (offset, dims, strides) = p.at(n);
                        buf.check_extent(offset, &dims, &strides)
                            .then_some((offset, dims, strides))
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or("a panel's block lies outside its scratch")
            };
            let (tp, up) = (places(&t, &panel.t)?, places(&u, &panel.u)?);
            // SAFETY: each place passed the extent check; `t` is this task's own buffer,
            // written above wherever a pair reads it (GEMM outputs, zeroed ranges), and
            // only read while these views live.
            let tv: Vec<StridedRef<'_, T>> = tp
                .iter()
                .map(|(o, d, s)| unsafe { t.view(*o, d, s) })
                .collect();
            // SAFETY: as above for `u`, which only these views touch while they live;
            // distinct blocks of U lie in disjoint elements of the scratch (distinct row
            // tuples, or distinct column ranges of one), and a block's strides map
            // distinct indices to distinct elements.
            let mut uv: Vec<StridedMut<'_, T>> = up
                .iter()
                .map(|(o, d, s)| unsafe { u.view_mut(*o, d, s) })
                .collect();
            for &i in &panel.u_zero {
                uv[i].update(|_, _| T::ZERO);
            }
            let mut slots: Vec<Option<&mut StridedMut<'_, T>>> = uv.iter_mut().map(Some).collect();
            for call in &panel.calls {
                let pairs: Vec<Vec<SmallPair<'_, '_, T>>> = call
                    .outputs
                    .iter()
                    .map(|(_, r)| {
                        call.pairs[r.clone()]
                            .iter()
                            .map(|&(x, y)| SmallPair {
                                x: &tv[x],
                                y: &c[y],
                                scale: T::ONE,
                            })
                            .collect()
                    })
                    .collect();
                let mut outputs: Vec<SmallOutput<'_, '_, '_, T>> = Vec::with_capacity(pairs.len());
                for ((i, _), p) in call.outputs.iter().zip(&pairs) {
                    let view = slots[*i].take().ok_or("a block of U written twice")?;
                    outputs.push((view, p.as_slice()));
                }
                contract_small(legs, [false; 2], &mut outputs, None, Stores::Cached)?;
            }
        }
        // Last step: the chunk's rows of the result's blocks.
        let us = u.as_mut_slice();
        for g in &panel.last {
            let rhs = d.get(g.d).subcols(g.cols.start, g.cols.len());
            for (j, rows) in gemms(g.f, n, panel.dy) {
                let lhs = scratch_mut(us, (g.offset + j) * n, rows, g.k, g.ld * n)?;
                let out = matrix_mut(&mut outs[g.out], n_rows)
                    .ok_or("a result block is a strided matrix")?
                    .subrows_mut(j * panel.dy + y0, rows);
                gemm_with(
                    Par::Seq,
                    out,
                    T::ZERO,
                    lhs.as_ref(),
                    false,
                    rhs,
                    false,
                    T::ONE,
                )?;
            }
        }
    }
    Ok(())
}

/// Whether block `b`'s first `k` axes fold into rows of stride 1 and the others into
/// columns (as [`matrix_mut`] folds its view): a product block's always do; a re-split
/// result's do when the legs it moved step as they did in the product, e.g. `(y | u, v, z)`
/// from `(y, u, v | z)` where `y` has each sector once (then `u` steps by `y`'s extent),
/// and any split where the moved legs have extent 1 (spin-1/2 sites).
fn rows_fold<S: AbelianSector>(b: &Block<'_, S>, k: usize) -> bool {
    let steps = |axes: Range<usize>, mut next: Option<usize>| {
        axes.filter(|&i| b.shape()[i] > 1).all(|i| {
            let (d, s) = (b.shape()[i], b.strides()[i]);
            let ok = next.is_none_or(|n| n == s);
            next = Some(s * d);
            ok
        })
    };
    k <= b.shape().len() && steps(0..k, Some(1)) && steps(k..b.shape().len(), None)
}

/// The GEMMs of `f` row indices `j` of a tuple for a chunk of `n` of a panel's `dy` rows,
/// as `(first j, rows)`: one of `f n` rows when the chunk is the panel (rows `(j, y)` then
/// follow each other in `A`, the scratch and the result alike), else `f` of `n` rows.
fn gemms(f: usize, n: usize, dy: usize) -> impl Iterator<Item = (usize, usize)> {
    let whole = n == dy;
    (0..if whole { 1 } else { f }).map(move |j| (j, if whole { f * n } else { n }))
}

/// The `rows x cols` column-major matrix at `offset` of `scratch` (leading dimension
/// `ld >= rows`), or an error when it does not fit.
fn scratch_mut<T>(
    scratch: &mut [T],
    offset: usize,
    rows: usize,
    cols: usize,
    ld: usize,
) -> Result<MatMut<'_, T>, KernelError> {
    let end = if rows == 0 || cols == 0 {
        offset
    } else {
        offset + (cols - 1) * ld + rows
    };
    let slice = scratch
        .get_mut(offset..end)
        .ok_or("a panel's matrix lies outside its scratch")?;
    Ok(MatMut::from_column_major_slice_with_stride_mut(
        slice, rows, cols, ld,
    ))
}
