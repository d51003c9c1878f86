//! Contraction plans: everything a pairwise contraction will do, derived at submission from
//! the operands' descriptor tables alone.
//!
//! Owns: [`Plan`] (and its task groups) and [`Strategy`]. Invariants:
//!
//! - A plan reads only structures, never data: it can be built before any operand is
//!   computed, and reused for any operands with the same structures.
//! - The matrix form is fixed: `A'` has the free legs of `A` (in `A`'s order) as codomain
//!   and the contracted legs (in the plan's order `K`) as domain; `B'` has `K` as codomain
//!   and `B`'s free legs as domain; the product `C'` has `A`'s free legs then `B`'s, split
//!   between them. So every block of `A'`, `B'` and `C'` is a matrix (rows: its codomain
//!   legs folded, columns: its domain legs), and `C'(f, g) = sum_k A'(f, k) B'(k, g)` over
//!   the blocks that exist.
//! - Each product block of `C'` is written by exactly one task group, and a group lists each
//!   block it touches once, so a group's accesses never alias.

use crate::error::Error;
use crate::small::SmallPlan;
use crate::spec::Spec;
use hashbrown::HashMap;
use smallvec::SmallVec;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, OnceLock};
use tessera_backends::Scalar;
use tessera_blocks::{AbelianSector, BitSlice, BitVec, BlockStructure, Direction, Leg, Permuted};
use tessera_coalesce::SectorBatches;

/// The least work (in flops) one GEMM task is given, unless the blocks run out: a task costs
/// a few microseconds to enroll and run, so tiny GEMMs are batched (2^22 flops, about 40 us
/// of one core; 2^21 measured 3% slower on 32x32x32 blocks, 2^23 no better).
const GROUP_FLOPS: u64 = 1 << 22;

/// How the GEMMs of a plan are laid out, chosen per coupled sector of the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Every sector is one GEMM on the coalesced sector matrices of `A'`, `B'` and `C'`
    /// (possible when the three sectors are dense and their row, inner and column tuples
    /// line up).
    SectorGemms,
    /// One GEMM per pair of matching blocks of `A'` and `B'`, on strided block matrices,
    /// accumulated into the output block.
    BlockPairs,
    /// Some sectors one way, some the other.
    Mixed,
    /// No GEMM on the host: the small operand's blocks applied in one pass over the large
    /// operand, which is read and whose product is written in their own layouts (no matrix
    /// forms; see [`SMALL_COEFFICIENTS`](crate::SMALL_COEFFICIENTS)). A device runs the
    /// plan's GEMMs.
    SmallOperand,
    /// No GEMM at all (no pair of blocks meets).
    Empty,
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::SectorGemms => "one GEMM per coupled sector on coalesced sector matrices",
            Strategy::BlockPairs => "GEMMs on strided block pairs",
            Strategy::Mixed => "sector GEMMs where sectors line up, block pairs elsewhere",
            Strategy::SmallOperand => {
                "the small operand applied in one pass over the large one, no matrix forms"
            }
            Strategy::Empty => "no GEMM",
        })
    }
}

/// One GEMM on whole sector matrices: `C'[c] = A'[a] B'[b]` (sector indices).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SectorGemm {
    pub(crate) a: usize,
    pub(crate) b: usize,
    pub(crate) c: usize,
}

/// Whether the product sector `c` is exactly `A'[sa] B'[sb]` for one pair of dense sectors,
/// given the block pairs that write it: every pair's row, inner and column ranges line up
/// with the sector matrices, the distinct ranges tile all three matrices, and every
/// combination of them is a pair (so the one GEMM sums what the pairs would).
fn sector_gemm<S: AbelianSector>(
    am: &BlockStructure<S>,
    bm: &BlockStructure<S>,
    product: &BlockStructure<S>,
    c: usize,
    pairs_of: &PairTable,
) -> Option<SectorGemm> {
    // A product sector of one block written by one pair of one-block sectors: the three
    // sectors are the three blocks (a sector of one block is dense and that block's shape),
    // so the conditions below hold without collecting ranges.
    let blocks = product.sectors()[c].blocks();
    if blocks.len() == 1
        && let [(ai, bi)] = *pairs_of.of(blocks.start)
    {
        let (xa, xb) = (am.block(ai)?.coupled(), bm.block(bi)?.coupled());
        if am.sectors()[xa].blocks().len() == 1 && bm.sectors()[xb].blocks().len() == 1 {
            let g = SectorGemm { a: xa, b: xb, c };
            debug_assert_eq!(
                general_sector_gemm(am, bm, product, c, pairs_of).map(|h| (h.a, h.b)),
                Some((g.a, g.b))
            );
            return Some(g);
        }
    }
    general_sector_gemm(am, bm, product, c, pairs_of)
}

/// [`sector_gemm`] by its definition.
fn general_sector_gemm<S: AbelianSector>(
    am: &BlockStructure<S>,
    bm: &BlockStructure<S>,
    product: &BlockStructure<S>,
    c: usize,
    pairs_of: &PairTable,
) -> Option<SectorGemm> {
    let cs = &product.sectors()[c];
    let mut found: Option<(usize, usize)> = None;
    type Ranges = SmallVec<[std::ops::Range<usize>; 8]>;
    let (mut rows, mut inner, mut cols) = (Ranges::new(), Ranges::new(), Ranges::new());
    let mut count = 0;
    for ci in cs.blocks() {
        let cb = product.block(ci)?;
        for &(ai, bi) in pairs_of.of(ci) {
            let (ab, bb) = (am.block(ai)?, bm.block(bi)?);
            let here = (ab.coupled(), bb.coupled());
            if *found.get_or_insert(here) != here
                || ab.rows() != cb.rows()
                || bb.cols() != cb.cols()
                || ab.cols() != bb.rows()
            {
                return None;
            }
            for (set, r) in [
                (&mut rows, ab.rows()),
                (&mut inner, ab.cols()),
                (&mut cols, bb.cols()),
            ] {
                if !set.contains(&r) {
                    set.push(r);
                }
            }
            count += 1;
        }
    }
    let (sa, sb) = found?;
    let (xa, xb) = (&am.sectors()[sa], &bm.sectors()[sb]);
    let tiles =
        |set: &[std::ops::Range<usize>], n: usize| set.iter().map(|r| r.len()).sum::<usize>() == n;
    let fits = xa.is_dense()
        && xb.is_dense()
        && cs.is_dense()
        && count == rows.len() * inner.len() * cols.len()
        && (xa.rows(), xa.cols(), xb.rows(), xb.cols())
            == (cs.rows(), xb.rows(), xa.cols(), cs.cols())
        && tiles(&rows, cs.rows())
        && tiles(&inner, xa.cols())
        && tiles(&cols, cs.cols());
    fits.then_some(SectorGemm { a: sa, b: sb, c })
}

/// Per sector of `m`, its row (`rows`) or column tuples with their ranges in the sector
/// matrix, when every combination of them is a block (a full sector); `None` for a sector
/// with a missing block. Linear in the blocks.
fn full_sector_ranges<S: AbelianSector>(
    m: &BlockStructure<S>,
    x: usize,
    rows: bool,
) -> Option<HashMap<usize, Range<usize>>> {
    let sector = &m.sectors()[x];
    let (mut here, mut other) = (HashMap::new(), HashMap::new());
    for id in sector.blocks() {
        let blk = m.block(id)?;
        let (r, c) = blk.tuple_numbers();
        let (t, range, u, orange) = if rows {
            (r, blk.rows(), c, blk.cols())
        } else {
            (c, blk.cols(), r, blk.rows())
        };
        if *here.entry(t).or_insert_with(|| range.clone()) != range
            || *other.entry(u).or_insert_with(|| orange.clone()) != orange
        {
            return None;
        }
    }
    (sector.is_dense() && here.len() * other.len() == sector.blocks().len()).then_some(here)
}

/// [`sector_gemm`] without the block pairs, for a product sector that is full (every block
/// of its rows and columns present) and meets full sectors of `A'` and `B'`: `A'`'s rows are
/// the product's (an `A'` block's sector is fixed by its row tuple, as a product block's
/// is), `B'`'s columns are the product's, and the contracted tuples of the two are the same
/// ranges. Then the one GEMM sums every pair, and every pair of the two sectors writes
/// this product sector. Linear in the three sectors' blocks; `None` when anything differs
/// (the pairs then decide).
fn full_sector_gemm<S: AbelianSector>(
    am: &BlockStructure<S>,
    bm: &BlockStructure<S>,
    product: &BlockStructure<S>,
    c: usize,
    row_sector: &HashMap<usize, usize>,
    col_sector: &HashMap<usize, usize>,
) -> Option<SectorGemm> {
    let cs = &product.sectors()[c];
    let (r, g) = product.block(cs.blocks().start)?.tuple_numbers();
    let (sa, sb) = (*row_sector.get(&r)?, *col_sector.get(&g)?);
    let (xa, xb) = (&am.sectors()[sa], &bm.sectors()[sb]);
    if xa.rows() != cs.rows() || xb.cols() != cs.cols() || xa.cols() != xb.rows() {
        return None;
    }
    let c_rows = full_sector_ranges(product, c, true)?;
    let c_cols = full_sector_ranges(product, c, false)?;
    let a_rows = full_sector_ranges(am, sa, true)?;
    let b_cols = full_sector_ranges(bm, sb, false)?;
    (c_rows == a_rows
        && c_cols == b_cols
        && full_sector_ranges(am, sa, false)? == full_sector_ranges(bm, sb, true)?)
    .then_some(SectorGemm { a: sa, b: sb, c })
}

/// The pairs of blocks `(A' block, B' block)` that meet, grouped by the product block they
/// write (compressed rows: one allocation, whatever the block count).
pub(crate) struct PairTable {
    starts: Vec<usize>,
    pairs: Vec<(usize, usize)>,
}

impl PairTable {
    /// From `(product block, A' block, B' block)` triples, by a counting sort: stable, so
    /// each product block's pairs keep the order they were found in.
    pub(crate) fn new(blocks: usize, met: &[(usize, usize, usize)]) -> Self {
        let mut starts = vec![0usize; blocks + 1];
        for &(ci, _, _) in met {
            starts[ci + 1] += 1;
        }
        for i in 0..blocks {
            starts[i + 1] += starts[i];
        }
        // `starts[ci]` serves as block ci's cursor, which ends at the start of ci + 1; one
        // shift then restores the starts.
        let mut pairs = vec![(0, 0); met.len()];
        for &(ci, ai, bi) in met {
            pairs[starts[ci]] = (ai, bi);
            starts[ci] += 1;
        }
        starts.rotate_right(1);
        starts[0] = 0;
        Self { starts, pairs }
    }

    pub(crate) fn of(&self, ci: usize) -> &[(usize, usize)] {
        &self.pairs[self.starts[ci]..self.starts[ci + 1]]
    }
}

/// How an operand reaches its matrix form.
#[derive(Clone, Debug)]
pub(crate) struct Operand<S: AbelianSector> {
    /// `None` when the operand is already in matrix form; else the permutation, its split,
    /// and the re-indexing.
    pub(crate) permute: Option<(Vec<usize>, Arc<Permuted<S>>)>,
    /// The structure of the matrix form (the operand's own when it is not permuted).
    pub(crate) matrix: Arc<BlockStructure<S>>,
}

/// One task's worth of GEMMs: the blocks it touches (each once) and, per output block, the
/// pairs of local indices it sums.
#[derive(Clone, Debug, Default)]
pub(crate) struct Group {
    pub(crate) a: Vec<usize>,
    pub(crate) b: Vec<usize>,
    pub(crate) c: Vec<usize>,
    /// `(local output index, range of pairs)`.
    pub(crate) products: Vec<(usize, std::ops::Range<usize>)>,
    pub(crate) pairs: Vec<(usize, usize)>,
}

/// A planned pairwise contraction `C = alpha op(A) op(B) + beta C`: the output structure,
/// how each operand reaches its matrix form, the GEMM tasks, and their cost.
///
/// Built at submission from the structures alone and cached by their fingerprints (see
/// [`PlanCache`](crate::PlanCache)); its `Display` shows the strategy, GEMM count, flops and
/// temporary bytes.
#[derive(Debug)]
pub struct Plan<S: AbelianSector> {
    pub(crate) spec: Spec,
    pub(crate) conj: [bool; 2],
    pub(crate) operands: [Operand<S>; 2],
    /// The operands' structures it was planned for.
    pub(crate) inputs: [Arc<BlockStructure<S>>; 2],
    /// `C'`: `A`'s free legs, then `B`'s.
    pub(crate) product: Arc<BlockStructure<S>>,
    /// The output, and the permutation from `C'` when it differs.
    pub(crate) output: Arc<BlockStructure<S>>,
    pub(crate) output_permute: Option<(Vec<usize>, Arc<Permuted<S>>)>,
    pub(crate) groups: Vec<Group>,
    /// Product sectors computed as one GEMM each, in order.
    pub(crate) sector_gemms: Vec<SectorGemm>,
    /// Consecutive runs of `sector_gemms` that one task runs (small GEMMs batched to at
    /// least [`GROUP_FLOPS`]).
    pub(crate) sector_groups: Vec<std::ops::Range<usize>>,
    /// The sector batches of `sector_groups` resolved against `A'`, `B'` and the GEMMs'
    /// target, built by the first execution (planning stays cheap; repeats reuse them).
    batches: OnceLock<[SectorBatches<S>; 3]>,
    /// Product blocks no pair writes (zero, or only scaled by `beta`).
    pub(crate) idle: Vec<usize>,
    /// The host's plan when one operand is small and the GEMMs would need a permutation of
    /// the other or of the product (see [`crate::small`]).
    pub(crate) small: Option<SmallPlan>,
    /// Codomain legs of `A'` and of `B'` (the row folds of their block matrices).
    pub(crate) rows: [usize; 2],
    gemms: usize,
    flops: u64,
    temp_bytes: usize,
    elem_bytes: usize,
}

/// Whether `perm` is the identity and the split already `n`.
fn is_identity<S: AbelianSector>(perm: &[usize], n: usize, s: &BlockStructure<S>) -> bool {
    perm.iter().enumerate().all(|(i, &p)| i == p) && s.n_codomain() == n
}

fn operand<S: AbelianSector>(
    s: &Arc<BlockStructure<S>>,
    perm: Vec<usize>,
    n: usize,
) -> Result<Operand<S>, Error> {
    if is_identity(&perm, n, s) {
        return Ok(Operand {
            permute: None,
            matrix: Arc::clone(s),
        });
    }
    let permuted = s.permuted(&perm, n)?;
    Ok(Operand {
        matrix: Arc::new(permuted.structure.clone()),
        permute: Some((perm, Arc::new(permuted))),
    })
}

/// The fermionic sign of contracting the pairs of legs whose sectors are `k` (the domain
/// sectors of an `A'` block, equal to the codomain sectors of the `B'` blocks it meets), where
/// `a_in[i]` says that `A`'s leg of pair `i` is an `In` leg: `(-1)` to the number of pairs of
/// odd contracted legs (`B'` keeps the contracted legs in `A'`'s order, and the pairs must
/// nest, `... k1 k2 | k2 k1 ...`, to be evaluated one by one), times `(-1)` per odd pair whose
/// `A` leg is `In` (a ket before its bra is swapped past it before it is evaluated). See the
/// crate docs' "Fermionic sign convention".
pub(crate) fn pairing_negative<S: AbelianSector>(k: &[S], a_in: &[bool]) -> bool {
    let mut odd_before = 0_usize;
    let mut m = 0_usize;
    for (s, &is_in) in k.iter().zip(a_in) {
        if s.parity() {
            m += odd_before + usize::from(is_in);
            odd_before += 1;
        }
    }
    m % 2 == 1
}

/// Folds the pairing signs of the contracted legs into the permutation of one operand: `A`'s
/// if it is permuted, else `B`'s if it is, else (when some sign is `-1`) into a sign-only
/// copy of the smaller operand. The sign depends only on the contracted sectors, which an
/// `A'` block and the `B'` blocks it meets share, so either side may carry it.
fn pairing_signs<S: AbelianSector>(
    op_a: &mut Operand<S>,
    op_b: &mut Operand<S>,
    a: &Arc<BlockStructure<S>>,
    b: &Arc<BlockStructure<S>>,
    a_in: &[bool],
) -> Result<(), Error> {
    let nk = a_in.len();
    // The contracted sectors of a block of the matrix form: `A'`'s last `nk`, `B'`'s first.
    let negative = |m: &BlockStructure<S>, id: usize, on_a: bool| {
        let blk = m.block(id).expect("block id");
        let sectors = blk.sectors();
        let k = if on_a {
            &sectors[sectors.len() - nk..]
        } else {
            &sectors[..nk]
        };
        pairing_negative(k, a_in)
    };
    let on_a = op_a.permute.is_some() || (op_b.permute.is_none() && a.total_len() <= b.total_len());
    let (op, source) = if on_a { (op_a, a) } else { (op_b, b) };
    let mut permuted = match op.permute.take() {
        Some((_, p)) => Arc::unwrap_or_clone(p),
        None => {
            if !(0..op.matrix.num_blocks()).any(|id| negative(&op.matrix, id, on_a)) {
                return Ok(());
            }
            let identity: Vec<usize> = (0..source.num_legs()).collect();
            source.permuted(&identity, source.n_codomain())?
        }
    };
    for old in 0..source.num_blocks() {
        let new = permuted.block_map[old];
        if negative(&permuted.structure, new, on_a) {
            let flipped = !permuted.negative[old];
            permuted.negative.set(old, flipped);
        }
    }
    op.permute = Some((permuted.perm().to_vec(), Arc::new(permuted)));
    Ok(())
}

pub(crate) fn effective<S: AbelianSector>(leg: &Leg<S>, conj: bool) -> Leg<S> {
    if conj { leg.dual() } else { leg.clone() }
}

/// The product of `spec` on operands of structures `a` and `b` (conjugated where `conj`
/// says) before its output permutation: `A`'s free legs then `B`'s, how many are `A`'s (its
/// codomain), the fused flux; and the permutation of its legs into the spec's output order.
/// The arities must have been checked.
fn product_legs<S: AbelianSector>(
    spec: &Spec,
    conj: [bool; 2],
    a: &BlockStructure<S>,
    b: &BlockStructure<S>,
) -> (Vec<Leg<S>>, usize, S, Vec<usize>) {
    let (la, lb) = (spec.a(), spec.b());
    let k = spec.contracted();
    let free_a: Vec<char> = la.iter().copied().filter(|c| !k.contains(c)).collect();
    let free_b: Vec<char> = lb.iter().copied().filter(|c| !k.contains(c)).collect();
    let eff_flux = |s: &BlockStructure<S>, conj: bool| {
        if conj {
            s.flux().dual()
        } else {
            s.flux().clone()
        }
    };
    let legs: Vec<Leg<S>> = free_a
        .iter()
        .map(|&c| effective(&a.legs()[position(la, c)], conj[0]))
        .chain(
            free_b
                .iter()
                .map(|&c| effective(&b.legs()[position(lb, c)], conj[1])),
        )
        .collect();
    let flux = eff_flux(a, conj[0]).fuse_abelian(&eff_flux(b, conj[1]));
    let cprime: Vec<char> = free_a.iter().chain(&free_b).copied().collect();
    let out_perm: Vec<usize> = spec
        .output()
        .iter()
        .map(|&c| position(&cprime, c))
        .collect();
    (legs, free_a.len(), flux, out_perm)
}

/// The product's structure ([`product_legs`], every allowed block) and the permutation of
/// its legs into the spec's output order. The arities must have been checked.
fn product_structure<S: AbelianSector>(
    spec: &Spec,
    conj: [bool; 2],
    a: &BlockStructure<S>,
    b: &BlockStructure<S>,
) -> Result<(BlockStructure<S>, Vec<usize>), Error> {
    let (legs, n_codomain, flux, out_perm) = product_legs(spec, conj, a, b);
    Ok((BlockStructure::from_legs(legs, n_codomain, flux)?, out_perm))
}

/// The output's legs in the spec's order, its codomain count and its flux, for operands of
/// structures `a` and `b`: what an output array must have, checked without building a
/// structure (a cheap check on every call of an `apply_into` with some of the blocks).
///
/// # Errors
///
/// As [`output_structure`].
pub(crate) fn output_legs<S: AbelianSector>(
    spec: &Spec,
    conj: [bool; 2],
    a: &BlockStructure<S>,
    b: &BlockStructure<S>,
) -> Result<(Vec<Leg<S>>, usize, S), Error> {
    check_arity(spec, a, b)?;
    check_contractible(spec, conj, a, b)?;
    let (legs, _, flux, out_perm) = product_legs(spec, conj, a, b);
    let legs = out_perm.iter().map(|&i| legs[i].clone()).collect();
    Ok((legs, spec.output_codomain(), flux))
}

/// The structure of the output of `spec` on operands of structures `a` and `b`: its legs,
/// split and flux, every allowed block (what [`Plan::output`] is for an unmasked output),
/// from the legs alone, without planning a block.
///
/// # Errors
///
/// [`Error::Arity`] when an operand has not as many legs as the spec labels, [`Error::Legs`]
/// when a contracted pair of legs cannot be contracted.
pub(crate) fn output_structure<S: AbelianSector>(
    spec: &Spec,
    conj: [bool; 2],
    a: &BlockStructure<S>,
    b: &BlockStructure<S>,
) -> Result<BlockStructure<S>, Error> {
    check_arity(spec, a, b)?;
    check_contractible(spec, conj, a, b)?;
    let (product, out_perm) = product_structure(spec, conj, a, b)?;
    if is_identity(&out_perm, spec.output_codomain(), &product) {
        return Ok(product);
    }
    Ok(product
        .permuted(&out_perm, spec.output_codomain())?
        .structure)
}

/// [`Error::Legs`] unless each contracted pair of legs can be contracted.
fn check_contractible<S: AbelianSector>(
    spec: &Spec,
    conj: [bool; 2],
    a: &BlockStructure<S>,
    b: &BlockStructure<S>,
) -> Result<(), Error> {
    let (la, lb) = (spec.a(), spec.b());
    for c in spec.contracted() {
        let (i, j) = (position(la, c), position(lb, c));
        let x = effective(&a.legs()[i], conj[0]);
        let y = effective(&b.legs()[j], conj[1]);
        Leg::check_contractible(&x, &y).map_err(|source| Error::Legs {
            label: c,
            a_leg: i,
            b_leg: j,
            source,
        })?;
    }
    Ok(())
}

/// [`Error::Arity`] unless each operand has as many legs as the spec labels.
fn check_arity<S: AbelianSector>(
    spec: &Spec,
    a: &BlockStructure<S>,
    b: &BlockStructure<S>,
) -> Result<(), Error> {
    for (operand, labels, s) in [("A", spec.a(), a), ("B", spec.b(), b)] {
        if labels.len() != s.num_legs() {
            return Err(Error::Arity {
                operand,
                expected: labels.len(),
                given: s.num_legs(),
            });
        }
    }
    Ok(())
}

fn position(labels: &[char], c: char) -> usize {
    labels
        .iter()
        .position(|&x| x == c)
        .expect("the spec's labels")
}

impl<S: AbelianSector> Plan<S> {
    /// Plans `spec` for operands with structures `a` and `b` (conjugated where `conj` says)
    /// and elements of type `T`; `small_min`: the least elements of the large operand for
    /// which the host applies a small operand in one pass ([`Strategy::SmallOperand`]) where
    /// the GEMMs would permute; `output_present`: the output blocks to compute, one bit per
    /// allowed output block (`None`: all of them). Pairs that would write another block are
    /// not planned, and the output structure has these blocks only.
    pub(crate) fn build<T: Scalar>(
        spec: &Spec,
        conj: [bool; 2],
        a: &Arc<BlockStructure<S>>,
        b: &Arc<BlockStructure<S>>,
        small_min: usize,
        output_present: Option<&BitSlice>,
    ) -> Result<Self, Error> {
        check_arity(spec, a, b)?;
        let (la, lb) = (spec.a(), spec.b());
        let k_a = spec.contracted();
        let free_a: Vec<char> = la.iter().copied().filter(|c| !k_a.contains(c)).collect();
        let free_b: Vec<char> = lb.iter().copied().filter(|c| !k_a.contains(c)).collect();
        let nk = k_a.len();
        // Keep A as stored when it is in matrix form; else follow B's order when B is.
        let a_ready = la[free_a.len()..] == k_a[..] && a.n_codomain() == free_a.len();
        let b_ready = lb[..nk].iter().all(|c| k_a.contains(c)) && b.n_codomain() == nk;
        let k: Vec<char> = if !a_ready && b_ready {
            lb[..nk].to_vec()
        } else {
            k_a
        };
        check_contractible(spec, conj, a, b)?;
        let perm_a: Vec<usize> = free_a.iter().chain(&k).map(|&c| position(la, c)).collect();
        let perm_b: Vec<usize> = k.iter().chain(&free_b).map(|&c| position(lb, c)).collect();
        let mut op_a = operand(a, perm_a, free_a.len())?;
        let mut op_b = operand(b, perm_b, nk)?;
        if S::GRADED && nk > 0 {
            // Whether A's side of each contracted pair is an In leg (a ket), after `op`.
            let a_in: Vec<bool> = k
                .iter()
                .map(|&c| effective(&a.legs()[position(la, c)], conj[0]).direction())
                .map(|d| d == Direction::In)
                .collect();
            pairing_signs(&mut op_a, &mut op_b, a, b, &a_in)?;
        }

        let (product, out_perm) = product_structure(spec, conj, a, b)?;
        let mut product = Arc::new(product);
        if let Some(mask) = output_present {
            // Every allowed block of the full product is present, so block ids are allowed
            // ids on both sides; the product keeps the blocks that land in the mask.
            let keep: BitVec = if is_identity(&out_perm, spec.output_codomain(), &product) {
                mask.to_bitvec()
            } else {
                let p = product.permuted(&out_perm, spec.output_codomain())?;
                p.block_map.iter().map(|&new| mask[new]).collect()
            };
            product = Arc::new(product.with_present(&keep)?);
        }
        let (output, output_permute) = if is_identity(&out_perm, spec.output_codomain(), &product) {
            (Arc::clone(&product), None)
        } else {
            let p = product.permuted(&out_perm, spec.output_codomain())?;
            (Arc::new(p.structure.clone()), Some((out_perm, Arc::new(p))))
        };

        let nfa = free_a.len();
        let (am, bm) = (Arc::clone(&op_a.matrix), Arc::clone(&op_b.matrix));
        let (am, bm) = (&*am, &*bm);
        // Tuples are numbered mixed-radix per side (see `Block::tuple_numbers`). The legs of
        // K in A' and B' have the same segments (checked above), and C' has A's free legs
        // then B's, so one numbering serves: an A' block's domain number is its contracted
        // tuple, as is a B' block's codomain number, and their free numbers are the row and
        // column numbers of the product block they write. Building A' enumerated the tuples
        // of K, so their count fits.
        let k_count = am.legs()[nfa..]
            .iter()
            .map(Leg::num_segments)
            .product::<usize>();
        // The blocks of A' with a given contracted tuple are one run of ids: a tuple of the
        // domain lies in one coupled sector, in one column of it, and blocks are numbered
        // column by column (the blocks crate's canonical order).
        let mut a_of_k = vec![0..0; k_count];
        let mut a_row = Vec::with_capacity(am.num_blocks());
        let mut row_sector = HashMap::new();
        for blk in am.blocks() {
            let (row, kt) = blk.tuple_numbers();
            a_row.push(row);
            row_sector.insert(row, blk.coupled());
            let run = &mut a_of_k[kt];
            if run.start == run.end {
                *run = blk.id()..blk.id();
            }
            assert_eq!(run.end, blk.id(), "blocks of one column are consecutive");
            run.end += 1;
        }
        let col_sector: HashMap<usize, usize> = bm
            .blocks()
            .map(|blk| (blk.tuple_numbers().1, blk.coupled()))
            .collect();
        // Full sectors first, from their blocks alone: planning costs what the plan holds
        // (blocks and sectors), not block pairs (a product of 1000 x 1000 tiles has 10^9).
        let full: Vec<Option<SectorGemm>> = (0..product.sectors().len())
            .map(|c| full_sector_gemm(am, bm, &product, c, &row_sector, &col_sector))
            .collect();
        // Every pair of a full A' sector writes its product sector, so the pairs are
        // enumerated for the other sectors only. The A' blocks of one contracted tuple lie
        // in one sector (their rows have the tuple's fused charge).
        let mut a_full = vec![false; am.sectors().len()];
        for g in full.iter().flatten() {
            a_full[g.a] = true;
        }
        let mut met: Vec<(usize, usize, usize)> = Vec::new();
        for blk in bm.blocks() {
            let (kt, col) = blk.tuple_numbers();
            let run = a_of_k[kt].clone();
            if run.is_empty() || a_full[am.block(run.start).expect("block id").coupled()] {
                continue;
            }
            for ai in run {
                if let Some(ci) = product.block_id_by_tuples(a_row[ai], col) {
                    met.push((ci, ai, blk.id()));
                }
            }
        }
        let pairs_of = PairTable::new(product.num_blocks(), &met);
        let flop_factor = if T::IS_COMPLEX { 8 } else { 2 };
        let folded = |s: &BlockStructure<S>, id: usize, axes: std::ops::Range<usize>| -> u64 {
            s.block(id).expect("block id").shape()[axes]
                .iter()
                .product::<usize>() as u64
        };
        let (na, nb) = (am.num_legs(), bm.num_legs());
        let mut groups = Vec::new();
        let mut idle = Vec::new();
        let mut group = Group::default();
        let (mut group_flops, mut flops, mut gemms) = (0_u64, 0_u64, 0_usize);
        let mut sector_gemms = Vec::with_capacity(product.sectors().len());
        let mut sector_groups = Vec::new();
        let mut in_sector_gemm = vec![false; product.num_blocks()];
        for (c, &full_gemm) in full.iter().enumerate() {
            let found = full_gemm.or_else(|| sector_gemm(am, bm, &product, c, &pairs_of));
            if let Some(g) = found {
                let (xa, xb) = (&am.sectors()[g.a], &bm.sectors()[g.b]);
                let f = flop_factor * (xa.rows() * xa.cols() * xb.cols()) as u64;
                flops += f;
                group_flops += f;
                gemms += 1;
                sector_gemms.push(g);
                let start = sector_groups
                    .last()
                    .map_or(0, |r: &std::ops::Range<usize>| r.end);
                if group_flops >= GROUP_FLOPS {
                    sector_groups.push(start..sector_gemms.len());
                    group_flops = 0;
                }
                for ci in product.sectors()[c].blocks() {
                    in_sector_gemm[ci] = true;
                }
            }
        }
        let done = sector_groups.last().map_or(0, |r| r.end);
        if done < sector_gemms.len() {
            sector_groups.push(done..sector_gemms.len());
        }
        group_flops = 0;
        // Block id -> index in the current group (usize::MAX: not in it); reset per group.
        // Only block pairs need them (none when every sector is one GEMM).
        let block_pairs = in_sector_gemm.contains(&false);
        let mut local_a = vec![usize::MAX; if block_pairs { am.num_blocks() } else { 0 }];
        let mut local_b = vec![usize::MAX; if block_pairs { bm.num_blocks() } else { 0 }];
        for (ci, &in_sector) in in_sector_gemm.iter().enumerate() {
            if in_sector {
                continue;
            }
            let pairs = pairs_of.of(ci);
            if pairs.is_empty() {
                idle.push(ci);
                continue;
            }
            let start = group.pairs.len();
            for &(ai, bi) in pairs {
                let m = folded(am, ai, 0..nfa);
                let kk = folded(am, ai, nfa..na);
                let n = folded(bm, bi, nk..nb);
                let f = flop_factor * m * n * kk;
                group_flops += f;
                flops += f;
                gemms += 1;
                if local_a[ai] == usize::MAX {
                    local_a[ai] = group.a.len();
                    group.a.push(ai);
                }
                if local_b[bi] == usize::MAX {
                    local_b[bi] = group.b.len();
                    group.b.push(bi);
                }
                let (la, lb) = (local_a[ai], local_b[bi]);
                group.pairs.push((la, lb));
            }
            group.c.push(ci);
            group
                .products
                .push((group.c.len() - 1, start..group.pairs.len()));
            if group_flops >= GROUP_FLOPS {
                group.a.iter().for_each(|&i| local_a[i] = usize::MAX);
                group.b.iter().for_each(|&i| local_b[i] = usize::MAX);
                groups.push(std::mem::take(&mut group));
                group_flops = 0;
            }
        }
        if !group.c.is_empty() {
            groups.push(group);
        }
        // Where the GEMM plan moves the large operand or its product through a temporary, the
        // small operand's blocks may be applied in place instead. (The GEMMs are kept: a
        // device runs them.)
        let permuted = [
            op_a.permute.is_some(),
            op_b.permute.is_some(),
            output_permute.is_some(),
        ];
        let small = SmallPlan::build::<T, S>(spec, conj, a, b, &output, small_min, permuted);
        let elem_bytes = std::mem::size_of::<T>();
        let temp_elems = [&op_a, &op_b]
            .iter()
            .filter(|o| o.permute.is_some())
            .map(|o| o.matrix.total_len())
            .sum::<usize>()
            + output_permute.as_ref().map_or(0, |_| product.total_len());
        Ok(Self {
            spec: spec.clone(),
            conj,
            operands: [op_a, op_b],
            inputs: [Arc::clone(a), Arc::clone(b)],
            product,
            output,
            output_permute,
            groups,
            sector_gemms,
            sector_groups,
            batches: OnceLock::new(),
            idle,
            small,
            rows: [nfa, nk],
            gemms,
            flops,
            temp_bytes: temp_elems * elem_bytes,
            elem_bytes,
        })
    }

    /// The structure the GEMMs write: `C'`, or the output itself when no permutation follows.
    pub(crate) fn target(&self) -> &Arc<BlockStructure<S>> {
        if self.output_permute.is_some() {
            &self.product
        } else {
            &self.output
        }
    }

    /// The GEMM batches of `sector_groups` for `A'`, `B'` and the target, resolved on first
    /// use.
    pub(crate) fn sector_batches(&self) -> Result<&[SectorBatches<S>; 3], Error> {
        if let Some(b) = self.batches.get() {
            return Ok(b);
        }
        let resolve = |s: &Arc<BlockStructure<S>>, f: fn(&SectorGemm) -> usize| {
            let ids: Vec<Vec<usize>> = self
                .sector_groups
                .iter()
                .map(|run| self.sector_gemms[run.clone()].iter().map(f).collect())
                .collect();
            SectorBatches::new(s, ids.iter().map(Vec::as_slice))
        };
        let batches = [
            resolve(&self.operands[0].matrix, |g| g.a)?,
            resolve(&self.operands[1].matrix, |g| g.b)?,
            resolve(self.target(), |g| g.c)?,
        ];
        // A racing first use resolved the same batches; either copy serves.
        Ok(self.batches.get_or_init(|| batches))
    }

    /// The structure of the result.
    pub fn output(&self) -> &Arc<BlockStructure<S>> {
        &self.output
    }

    /// The spec this plan carries out.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// How the GEMMs are laid out.
    pub fn strategy(&self) -> Strategy {
        if self.small.is_some() {
            return Strategy::SmallOperand;
        }
        match (self.sector_gemms.is_empty(), self.groups.is_empty()) {
            (false, true) => Strategy::SectorGemms,
            (true, false) => Strategy::BlockPairs,
            (false, false) => Strategy::Mixed,
            (true, true) => Strategy::Empty,
        }
    }

    /// How many GEMMs run on the host (none with [`Strategy::SmallOperand`], whose pairs of
    /// blocks are [`small_pairs`](Plan::small_pairs)).
    pub fn gemms(&self) -> usize {
        if self.small.is_some() { 0 } else { self.gemms }
    }

    /// How many pairs of blocks the small operand's pass applies (0 unless the strategy is
    /// [`Strategy::SmallOperand`]).
    pub fn small_pairs(&self) -> usize {
        self.small.as_ref().map_or(0, |s| s.pairs)
    }

    /// How many tasks the host runs (small GEMMs share a task).
    pub fn tasks(&self) -> usize {
        match &self.small {
            Some(s) => s.tasks(),
            None => self.sector_groups.len() + self.groups.len(),
        }
    }

    /// How many product sectors run as one GEMM on coalesced sector matrices on the host.
    pub fn sector_gemms(&self) -> usize {
        if self.small.is_some() {
            0
        } else {
            self.sector_gemms.len()
        }
    }

    /// The flops of the GEMMs (`2 m n k` each, `8 m n k` for complex elements).
    pub fn flops(&self) -> u64 {
        self.small.as_ref().map_or(self.flops, |s| s.flops)
    }

    /// The bytes of the temporaries a new output needs on the host (operands and product
    /// brought to matrix form; none with [`Strategy::SmallOperand`]); accumulating into a
    /// permuted output needs one more output-sized one.
    pub fn temporary_bytes(&self) -> usize {
        if self.small.is_some() {
            0
        } else {
            self.temp_bytes
        }
    }

    /// The bytes the plan's own tables hold (its GEMM groups and sector runs, idle blocks,
    /// and the sign and block maps of its permutations), not counting the structures it
    /// shares with the operands and the output. Grows with the blocks and sectors of the
    /// plan, not with the pairs of blocks it never forms: one GEMM per sector of a product
    /// of 1000 x 1000 tiles holds a few megabytes.
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let groups: usize = self
            .groups
            .iter()
            .map(|g| {
                size_of::<Group>()
                    + (g.a.capacity() + g.b.capacity() + g.c.capacity()) * size_of::<usize>()
                    + g.products.capacity() * size_of::<(usize, std::ops::Range<usize>)>()
                    + g.pairs.capacity() * size_of::<(usize, usize)>()
            })
            .sum();
        let permutes: usize = self
            .operands
            .iter()
            .filter_map(|o| o.permute.as_ref())
            .chain(&self.output_permute)
            .map(|(perm, p)| {
                (perm.len() + p.block_map.len()) * size_of::<usize>() + p.negative.len() / 8
            })
            .sum();
        size_of::<Self>()
            + self.small.as_ref().map_or(0, SmallPlan::memory_bytes)
            + groups
            + permutes
            + self.sector_gemms.capacity() * size_of::<SectorGemm>()
            + self.sector_groups.capacity() * size_of::<std::ops::Range<usize>>()
            + self.idle.capacity() * size_of::<usize>()
    }

    /// Whether operand `A` (0) or `B` (1) is permuted into a temporary first on the host.
    pub fn permutes_operand(&self, which: usize) -> bool {
        self.small.is_none()
            && self
                .operands
                .get(which)
                .is_some_and(|o| o.permute.is_some())
    }

    /// Whether the product is permuted into the output's leg order at the end on the host.
    pub fn permutes_output(&self) -> bool {
        self.small.is_none() && self.output_permute.is_some()
    }

    /// Whether this plan was made for operands with these structures: the same shared
    /// structures (the common case, one pointer comparison each), or equal ones.
    pub(crate) fn fits(&self, a: &Arc<BlockStructure<S>>, b: &Arc<BlockStructure<S>>) -> bool {
        [a, b]
            .iter()
            .zip(&self.inputs)
            .all(|(x, y)| Arc::ptr_eq(x, y) || x == &y)
    }
}

impl<S: AbelianSector> fmt::Display for Plan<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yes = |b: bool| if b { "yes" } else { "no" };
        writeln!(
            f,
            "contraction {} (conj A: {}, conj B: {})",
            self.spec,
            yes(self.conj[0]),
            yes(self.conj[1])
        )?;
        if let Some(small) = &self.small {
            writeln!(f, "  A, B and output: used as stored")?;
            writeln!(
                f,
                "  strategy: {}: {} pairs of blocks into {} output blocks in {} tasks",
                self.strategy(),
                small.pairs,
                self.output.num_blocks() - small.idle_blocks(),
                small.tasks()
            )?;
        } else {
            for (name, o) in ["A", "B"].iter().zip(&self.operands) {
                match &o.permute {
                    None => writeln!(f, "  {name}: used as stored")?,
                    Some((perm, _)) => writeln!(
                        f,
                        "  {name}: permuted {perm:?} into a temporary of {} bytes",
                        o.matrix.total_len() * self.elem_bytes
                    )?,
                }
            }
            match &self.output_permute {
                None => writeln!(f, "  output: written in place")?,
                Some((perm, _)) => writeln!(
                    f,
                    "  output: product in a temporary of {} bytes, then permuted {perm:?}",
                    self.product.total_len() * self.elem_bytes
                )?,
            }
            writeln!(
                f,
                "  strategy: {}: {} GEMMs ({} on sector matrices) into {} output blocks in {} \
                 tasks",
                self.strategy(),
                self.gemms,
                self.sector_gemms.len(),
                self.product.num_blocks() - self.idle.len(),
                self.tasks()
            )?;
        }
        write!(
            f,
            "  cost: {} flop ({:.3} GFLOP), temporaries {} bytes, plan {} bytes",
            self.flops(),
            self.flops() as f64 * 1e-9,
            self.temporary_bytes(),
            self.memory_bytes()
        )
    }
}
