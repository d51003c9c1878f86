//! Block structures: which blocks a symmetric tensor has, and where each one lives in the
//! tensor's single backing allocation.
//!
//! Owns [`BlockStructure`] (the immutable descriptor table), its views [`Block`] and
//! [`CoupledSector`], and the results of re-indexing: [`Permuted`] (a permutation's plan,
//! the few most recently used of which a structure keeps, in a bounded LRU cache) and
//! [`Remapped`]. The descriptor table never changes; what a structure keeps beside it (its
//! fingerprint, its permutation plans) is derived from it alone. Every size, offset and
//! table length it computes is checked: a structure too large to count or to hold is
//! [`Error::Overflow`] or [`Error::Allocation`], never an abort. The builder that makes
//! the table from legs, split, flux and presence lives in the submodule `build`, one named
//! step per function.
//!
//! # What is allowed, what is present
//!
//! A tensor has legs split into `n_codomain` codomain (row) legs followed by domain (column)
//! legs, and a flux. A block is one segment per leg; it is *allowed* when the fusion of the
//! legs' effective sectors (see [`Direction`](crate::Direction)) equals the flux. Its
//! *coupled sector* `c` is the fusion of the codomain legs' effective sectors; the domain
//! part then fuses to `dual(c) ⊗ flux`.
//!
//! Allowed blocks have a canonical order: by coupled sector (increasing), then by domain
//! tuple, then by codomain tuple, where tuples of each side are enumerated with the first
//! leg's segment fastest. That is column-major order of the sector matrices below. A
//! *presence mask* (one bit per allowed block, in canonical order) selects the *present*
//! blocks; by default every allowed block is present. Only present blocks are blocks of the
//! structure: block ids `0..num_blocks()` number the present blocks in canonical order,
//! lookups find only them, and absent blocks take no storage.
//!
//! # Layout (docs/ARCHITECTURE.md, the descriptor)
//!
//! One allocation, sector-major. For each coupled sector `c` that has a present block, in
//! increasing order, one region follows the previous one. Its logical matrix has as rows the
//! codomain tuples of `c` that have a present block (their segment dimensions multiplied, in
//! canonical order) and as columns the domain tuples likewise. Then:
//!
//! - **Dense sector** (every block of that rectangle is present; always the case without a
//!   mask): the region is that `rows x cols` matrix, column-major, leading dimension `rows`.
//!   A block is the sub-rectangle `rows() x cols()`, reshaped to its legs: the codomain
//!   multi-index is column-major inside the row range (first leg fastest), the domain
//!   multi-index likewise inside the column range. Its strides are `1, d0, d0*d1, ...` for
//!   the codomain legs and `rows, rows*e0, ...` for the domain legs. A GEMM takes the region
//!   as is.
//! - **Packed sector** (a mask left holes in the rectangle): the present blocks follow each
//!   other in canonical order, each a contiguous column-major matrix of its own (leading
//!   dimension = the block's row count). `rows()`/`cols()` still give the block's place in
//!   the logical sector matrix, so a coalesced view can gather it; the region is not a
//!   matrix.
//!
//! So offsets are computed over present blocks only, the regions of the sectors tile
//! `0..total_len()` exactly, and the elements of the present blocks tile it exactly.
//!
//! # Lookup
//!
//! [`block_id`](BlockStructure::block_id) is arithmetic, not a hash map: each side's tuple
//! is numbered mixed-radix, a table per side gives its group (fused sector) and position,
//! the row group's pairing gives the allowed index, and a rank over the presence mask gives
//! the block id. So a lookup is a few loads whatever the block count, and building the
//! table is one pass (a hash map cost more than half of planning a 10,000-block product).
//!
//! Invariants kept by every constructor: the descriptor table is consistent with the legs,
//! split, flux and mask it was built from; it never changes afterwards (share it as
//! `Arc<BlockStructure<S>>`); and [`fingerprint`](BlockStructure::fingerprint) is a stable
//! hash of exactly those inputs.
//!
//! Built for abelian sectors; a non-abelian structure keys blocks by fusion-tree pairs
//! instead of segment tuples (see the `sector` module).

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use bitvec::field::BitField;
use bitvec::prelude::{BitSlice, BitVec};
use smallvec::SmallVec;
use tessera_backends::cpu::CopyPlan;
use tessera_core::{CacheStats, LruCache};

mod build;

use crate::error::Error;
use crate::leg::Leg;
use crate::sector::{AbelianSector, Sector};
use build::Presence;

/// The storage of one present block (the per-leg data live in the structure's flat arrays).
#[derive(Clone, Debug)]
struct Entry {
    offset: usize,
    len: usize,
    coupled: usize,
    rows: Range<usize>,
    cols: Range<usize>,
    allowed: usize,
    /// The enumeration numbers of the codomain and domain tuples (below 2^32:
    /// `enumerate_side` checks the tuple counts).
    tuples: (u32, u32),
}

/// One coupled sector with at least one present block: its region of the allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoupledSector<S> {
    sector: S,
    offset: usize,
    len: usize,
    rows: usize,
    cols: usize,
    dense: bool,
    blocks: Range<usize>,
}

impl<S> CoupledSector<S> {
    /// The coupled sector `c`.
    pub fn sector(&self) -> &S {
        &self.sector
    }

    /// The start of the sector's region in the allocation.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The number of elements of the region (`rows * cols` when dense).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never, for a sector of a structure).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The rows of the logical sector matrix.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The columns of the logical sector matrix.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Whether the region is the dense column-major `rows x cols` matrix (see the module
    /// docs); `false` for a packed sector.
    pub fn is_dense(&self) -> bool {
        self.dense
    }

    /// The ids of the sector's blocks (contiguous).
    pub fn blocks(&self) -> Range<usize> {
        self.blocks.clone()
    }
}

/// The immutable descriptor table of a block-sparse symmetric tensor. See the module docs for
/// what is allowed, present, and the layout.
#[derive(Clone)]
pub struct BlockStructure<S: AbelianSector> {
    legs: Vec<Leg<S>>,
    n_codomain: usize,
    flux: S,
    present: BitVec,
    /// Per present block, one entry per leg (`num_legs()` consecutive entries).
    seg: Vec<usize>,
    sec: Vec<S>,
    shape: Vec<usize>,
    strides: Vec<usize>,
    entries: Vec<Entry>,
    sectors: Vec<CoupledSector<S>>,
    /// The block index, by arithmetic instead of hashing: per side, where each segment tuple
    /// (numbered mixed-radix, first leg fastest) sits (its group and its position there).
    row_slot: Vec<(u32, u32)>,
    col_slot: Vec<(u32, u32)>,
    /// Per row group: the column group that completes it to the flux (`u32::MAX`: none),
    /// the row group's length, and the allowed index of its first block (a pair's blocks
    /// are numbered column-major: `start + column position * row length + row position`).
    pairing: Vec<(u32, u32, usize)>,
    /// Present blocks before each 64-bit word of the presence mask (block id = rank).
    rank: Vec<usize>,
    total_len: usize,
    /// Computed on first use: many structures (products, temporaries) are never keyed.
    fingerprint: OnceLock<u64>,
    /// The permutations planned for this structure (see [`BlockStructure::permutation`]).
    permutations: KeptPermutations<S>,
}

/// The permutation plans a structure keeps: at most [`KEPT_PERMUTATIONS`] (unless
/// [`BlockStructure::set_kept_permutations`] says otherwise), the least recently used dropped
/// first, keyed by the permutation and the new split. A clone of the structure starts with
/// none.
struct KeptPermutations<S: AbelianSector>(LruCache<PermutationKey, Arc<Permuted<S>>>);

/// A permutation of the legs and the new number of codomain legs.
type PermutationKey = (SmallVec<[usize; 6]>, usize);

/// How many permutation plans a structure keeps unless told otherwise.
pub const KEPT_PERMUTATIONS: usize = 4;

impl<S: AbelianSector> Default for KeptPermutations<S> {
    fn default() -> Self {
        Self(LruCache::new(KEPT_PERMUTATIONS))
    }
}

impl<S: AbelianSector> Clone for KeptPermutations<S> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// One present block: a view into its [`BlockStructure`].
#[derive(Copy, Clone)]
pub struct Block<'a, S: AbelianSector> {
    structure: &'a BlockStructure<S>,
    id: usize,
}

impl<'a, S: AbelianSector> Block<'a, S> {
    fn entry(&self) -> &'a Entry {
        &self.structure.entries[self.id]
    }

    fn per_leg<T>(&self, v: &'a [T]) -> &'a [T] {
        let n = self.structure.legs.len();
        &v[self.id * n..(self.id + 1) * n]
    }

    /// The block id.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The segment of each leg.
    pub fn segments(&self) -> &'a [usize] {
        self.per_leg(&self.structure.seg)
    }

    /// The sector label of each leg.
    pub fn sectors(&self) -> &'a [S] {
        self.per_leg(&self.structure.sec)
    }

    /// The dimension of each leg.
    pub fn shape(&self) -> &'a [usize] {
        self.per_leg(&self.structure.shape)
    }

    /// The stride of each leg, in elements.
    pub fn strides(&self) -> &'a [usize] {
        self.per_leg(&self.structure.strides)
    }

    /// The position of the block's first element in the allocation.
    pub fn offset(&self) -> usize {
        self.entry().offset
    }

    /// The number of elements (the product of the shape).
    pub fn len(&self) -> usize {
        self.entry().len
    }

    /// Whether the block has no elements (never: dimensions are at least 1).
    pub fn is_empty(&self) -> bool {
        self.entry().len == 0
    }

    /// The position in the allocation of the element at multi-index `index` (one index per
    /// leg), or `None` when the arity or an index is out of range.
    pub fn element_offset(&self, index: &[usize]) -> Option<usize> {
        if index.len() != self.shape().len() {
            return None;
        }
        let mut off = self.offset();
        for ((&i, &d), &s) in index.iter().zip(self.shape()).zip(self.strides()) {
            if i >= d {
                return None;
            }
            off += i * s;
        }
        Some(off)
    }

    /// The id of the block's coupled sector (an index into
    /// [`BlockStructure::sectors`]).
    pub fn coupled(&self) -> usize {
        self.entry().coupled
    }

    /// The block's coupled sector.
    pub fn coupled_sector(&self) -> &'a CoupledSector<S> {
        &self.structure.sectors[self.entry().coupled]
    }

    /// The block's rows in its logical sector matrix.
    pub fn rows(&self) -> Range<usize> {
        self.entry().rows.clone()
    }

    /// The block's columns in its logical sector matrix.
    pub fn cols(&self) -> Range<usize> {
        self.entry().cols.clone()
    }

    /// The enumeration numbers of the block's codomain tuple and of its domain tuple: each
    /// side's segments read mixed-radix over that side's legs, first leg fastest (the
    /// arguments of [`BlockStructure::block_id_by_tuples`]).
    pub fn tuple_numbers(&self) -> (usize, usize) {
        let (row, col) = self.entry().tuples;
        (row as usize, col as usize)
    }

    /// The block's position among the allowed blocks (its bit in the presence mask).
    pub fn allowed_index(&self) -> usize {
        self.entry().allowed
    }
}

impl<S: AbelianSector> fmt::Debug for Block<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Block")
            .field("id", &self.id)
            .field("segments", &self.segments())
            .field("sectors", &self.sectors())
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .field("offset", &self.offset())
            .field("coupled", &self.coupled())
            .field("rows", &self.rows())
            .field("cols", &self.cols())
            .finish()
    }
}

/// A structure with its legs reordered (see [`BlockStructure::permuted`]): the plan of a
/// permutation, which also keeps the copy of every block it has moved, planned from the two
/// blocks' layouts by the task that first moved it.
#[derive(Clone, Debug)]
pub struct Permuted<S: AbelianSector> {
    /// The permuted structure.
    pub structure: BlockStructure<S>,
    /// `block_map[old]` is the id in `structure` of block `old` of the original.
    pub block_map: Vec<usize>,
    /// Bit `old` is set when block `old` picks up the fermionic sign `-1`.
    pub negative: BitVec,
    /// The permutation of the legs (new leg `k` is old leg `perm[k]`).
    perm: Vec<usize>,
    /// What determines the original structure (legs, split, present blocks; the flux is
    /// `structure`'s): an array permuted with this plan must have exactly that structure.
    source: (Vec<Leg<S>>, usize, BitVec),
    /// Per original block, its copy onto its image, planned on first use.
    copies: OnceLock<Arc<[OnceLock<CopyPlan>]>>,
}

impl<S: AbelianSector> Permuted<S> {
    /// The fermionic sign (`+1` or `-1`) of original block `old`, if it is a block.
    pub fn sign(&self, old: usize) -> Option<i8> {
        self.negative.get(old).map(|b| if *b { -1 } else { 1 })
    }

    /// The permutation of the legs it was computed for: new leg `k` is old leg `perm[k]`.
    pub fn perm(&self) -> &[usize] {
        &self.perm
    }

    /// Whether `s` is the structure this was computed from: the same legs, split, flux and
    /// present blocks, which determine a structure (its layout included).
    pub fn is_permutation_of(&self, s: &BlockStructure<S>) -> bool {
        let (legs, n_codomain, present) = &self.source;
        s.n_codomain == *n_codomain
            && s.flux == self.structure.flux
            && s.present == *present
            && s.legs == *legs
    }

    /// One slot per original block for its planned copy (a host's `CopyPlan` of the block's extent onto its image's), shared by
    /// every use of this plan: the slots are filled by the tasks that move the blocks.
    pub(crate) fn copy_slots(&self) -> Arc<[OnceLock<CopyPlan>]> {
        Arc::clone(
            self.copies
                .get_or_init(|| (0..self.block_map.len()).map(|_| OnceLock::new()).collect()),
        )
    }
}

/// A structure derived from another one, with the map of block ids (see
/// [`BlockStructure::screened`] and [`BlockStructure::adjoint`]).
#[derive(Clone, Debug)]
pub struct Remapped<S: AbelianSector> {
    /// The new structure.
    pub structure: BlockStructure<S>,
    /// `block_map[old]` is the id in `structure` of block `old` of the original, or `None`
    /// when it was dropped.
    pub block_map: Vec<Option<usize>>,
}

/// The enumeration number of a tuple of segments of `legs` (mixed radix, first leg fastest),
/// or `None` when a segment is out of range.
fn tuple_index<S: Sector>(legs: &[Leg<S>], segments: &[usize]) -> Option<usize> {
    let (mut t, mut radix) = (0usize, 1usize);
    for (leg, &seg) in legs.iter().zip(segments) {
        let n = leg.num_segments();
        if seg >= n {
            return None;
        }
        t += seg * radix;
        radix *= n;
    }
    Some(t)
}

/// A word-at-a-time hash: stable across platforms, processes and versions. Each word's
/// update is a bijection of the state (xor, multiply by an odd constant, xor-shift), so no
/// word's history is lost; [`finish`](StableHasher::finish) mixes the state once more.
struct StableHasher(u64);

impl StableHasher {
    fn new() -> Self {
        StableHasher(0xcbf2_9ce4_8422_2325)
    }
    fn word(&mut self, w: u64) {
        let h = (self.0 ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 29);
    }
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn sector<S: Sector>(&mut self, s: &S, buf: &mut Vec<u32>) {
        buf.clear();
        s.encode(buf);
        self.word(buf.len() as u64);
        for &w in buf.iter() {
            self.word(u64::from(w));
        }
    }
}

impl<S: AbelianSector> BlockStructure<S> {
    /// The structure of a tensor from `codomain` to `domain` legs with the given flux, every
    /// allowed block present.
    ///
    /// No allowed block is not an error: the structure is then empty.
    pub fn new(
        codomain: impl IntoIterator<Item = Leg<S>>,
        domain: impl IntoIterator<Item = Leg<S>>,
        flux: S,
    ) -> Result<Self, Error> {
        let mut legs: Vec<Leg<S>> = codomain.into_iter().collect();
        let n_codomain = legs.len();
        legs.extend(domain);
        Self::build(legs, n_codomain, flux, Presence::All)
    }

    /// Like [`new`](BlockStructure::new), from all legs and the number of codomain legs (the
    /// first `n_codomain` legs).
    pub fn from_legs(legs: Vec<Leg<S>>, n_codomain: usize, flux: S) -> Result<Self, Error> {
        Self::build(legs, n_codomain, flux, Presence::All)
    }

    /// The same legs, split and flux with the given presence mask: one bit per *allowed*
    /// block in canonical order (the block ids of the unmasked structure), set for present
    /// blocks. This is general block sparsity.
    pub fn with_present(&self, mask: &BitSlice) -> Result<Self, Error> {
        Self::build(
            self.legs.clone(),
            self.n_codomain,
            self.flux.clone(),
            Presence::Bits(mask),
        )
    }

    /// Drops the blocks whose norm is below `threshold`: `norm(id)` is asked once per block of
    /// `self`, in id order, and the block is kept when `norm(id) >= threshold`. Dropped blocks
    /// take no storage in the result. Returns the new structure and where each block went.
    pub fn screened(
        &self,
        mut norm: impl FnMut(usize) -> f64,
        threshold: f64,
    ) -> Result<Remapped<S>, Error> {
        if threshold.is_nan() || threshold < 0.0 {
            return Err(Error::InvalidThreshold { given: threshold });
        }
        let mut mask = self.present.clone();
        let mut block_map = Vec::with_capacity(self.num_blocks());
        let mut kept = 0usize;
        for (id, e) in self.entries.iter().enumerate() {
            let n = norm(id);
            if n.is_nan() || n < 0.0 {
                return Err(Error::InvalidNorm {
                    block: id,
                    given: n,
                });
            }
            if n >= threshold {
                block_map.push(Some(kept));
                kept += 1;
            } else {
                mask.set(e.allowed, false);
                block_map.push(None);
            }
        }
        let structure = self.with_present(&mask)?;
        Ok(Remapped {
            structure,
            block_map,
        })
    }

    /// The structure with the legs reordered and a new split: new leg `k` is old leg
    /// `perm[k]`, the first `n_codomain` new legs form the codomain, the flux is kept, and the
    /// present blocks are the images of the present blocks.
    ///
    /// Also gives, for each old block, its new id and the fermionic sign of the reordering:
    /// `(-1)^m`, where `m` counts the pairs of legs whose order the permutation inverts and
    /// whose sectors in that block are both odd.
    pub fn permuted(&self, perm: &[usize], n_codomain: usize) -> Result<Permuted<S>, Error> {
        let n = self.legs.len();
        let mut inverse = vec![usize::MAX; n];
        let valid = perm.len() == n
            && perm
                .iter()
                .enumerate()
                .all(|(k, &p)| p < n && std::mem::replace(&mut inverse[p], k) == usize::MAX);
        if !valid {
            return Err(Error::InvalidPermutation {
                legs: n,
                given: perm.to_vec(),
            });
        }
        let legs: Vec<Leg<S>> = perm.iter().map(|&p| self.legs[p].clone()).collect();
        let mut block_map = vec![usize::MAX; self.num_blocks()];
        let mut old_tuple = vec![0usize; n];
        let mut next = 0usize;
        let mut pred = |t: &[usize]| {
            for (k, &s) in t.iter().enumerate() {
                old_tuple[perm[k]] = s;
            }
            match self.block_id(&old_tuple) {
                Some(old) => {
                    // Presence is decided in canonical order, which is block id order.
                    block_map[old] = next;
                    next += 1;
                    true
                }
                None => false,
            }
        };
        let structure = Self::build(
            legs,
            n_codomain,
            self.flux.clone(),
            Presence::Pred(&mut pred),
        )?;
        let mut negative = BitVec::repeat(false, self.num_blocks());
        if S::GRADED {
            let mut odd = Vec::with_capacity(n);
            for b in self.blocks() {
                odd.clear();
                odd.extend(perm.iter().map(|&p| b.sectors()[p].parity()));
                let mut m = 0usize;
                for i in 0..n {
                    for j in i + 1..n {
                        m += usize::from(odd[i] && odd[j] && perm[i] > perm[j]);
                    }
                }
                negative.set(b.id(), m % 2 == 1);
            }
        }
        Ok(Permuted {
            structure,
            block_map,
            negative,
            perm: perm.to_vec(),
            source: (self.legs.clone(), self.n_codomain, self.present.clone()),
            copies: OnceLock::new(),
        })
    }

    /// [`permuted`](Self::permuted), kept: the plan of the few most recently used
    /// permutations of this structure ([`KEPT_PERMUTATIONS`], settable with
    /// [`set_kept_permutations`](Self::set_kept_permutations)) is made once and shared, with the block copies it plans on first use,
    /// so a permutation repeated on arrays of this structure (a sweep applies the same ones
    /// again and again) neither re-indexes nor plans its copies again.
    ///
    /// # Errors
    ///
    /// As [`permuted`](Self::permuted).
    pub fn permutation(
        &self,
        perm: &[usize],
        n_codomain: usize,
    ) -> Result<Arc<Permuted<S>>, Error> {
        let key: PermutationKey = (perm.into(), n_codomain);
        if let Some(p) = self.permutations.0.get(&key) {
            return Ok(p);
        }
        // Planned outside the lock; two threads asking at once may both plan, and both
        // plans are right (the second one kept replaces the first).
        let planned = Arc::new(self.permuted(perm, n_codomain)?);
        self.permutations.0.insert(key, Arc::clone(&planned));
        Ok(planned)
    }

    /// The hits, misses and evictions of the permutation plans this structure keeps (see
    /// [`permutation`](Self::permutation)), how many it keeps now and at most.
    pub fn kept_permutations(&self) -> CacheStats {
        self.permutations.0.stats()
    }

    /// Sets how many permutation plans this structure keeps (initially
    /// [`KEPT_PERMUTATIONS`]), dropping the least recently used ones beyond it; 0 keeps
    /// none, so every [`permutation`](Self::permutation) plans afresh.
    pub fn set_kept_permutations(&self, capacity: usize) {
        self.permutations.0.set_capacity(capacity);
    }

    /// The adjoint structure: codomain and domain swapped (the old domain legs, in order,
    /// become the codomain), every leg dualled, the flux dualled; block `(a, b)` becomes
    /// `(b, a)` and its sector matrix is transposed. Fermionic conjugation signs are left to
    /// the caller.
    pub fn adjoint(&self) -> Result<Remapped<S>, Error> {
        let n = self.legs.len();
        let nc = self.n_codomain;
        let nd = n - nc;
        let legs: Vec<Leg<S>> = self.legs[nc..]
            .iter()
            .chain(&self.legs[..nc])
            .map(Leg::dual)
            .collect();
        let mut block_map = vec![None; self.num_blocks()];
        let mut old_tuple = vec![0usize; n];
        let mut next = 0usize;
        let mut pred = |t: &[usize]| {
            old_tuple[nc..].copy_from_slice(&t[..nd]);
            old_tuple[..nc].copy_from_slice(&t[nd..]);
            match self.block_id(&old_tuple) {
                Some(old) => {
                    block_map[old] = Some(next);
                    next += 1;
                    true
                }
                None => false,
            }
        };
        let structure = Self::build(legs, nd, self.flux.dual(), Presence::Pred(&mut pred))?;
        Ok(Remapped {
            structure,
            block_map,
        })
    }

    fn compute_fingerprint(&self) -> u64 {
        let mut h = StableHasher::new();
        let mut buf = Vec::new();
        h.word(0x7465_7373_6572_6102); // "tessera" + layout version 2
        h.word(self.legs.len() as u64);
        h.word(self.n_codomain as u64);
        for leg in &self.legs {
            h.word(leg.direction().sign() as u64);
            h.word(leg.num_segments() as u64);
            for seg in leg.segments() {
                h.sector(&seg.sector, &mut buf);
                h.word(seg.dim as u64);
            }
        }
        h.sector(&self.flux, &mut buf);
        h.word(self.present.len() as u64);
        for chunk in self.present.chunks(64) {
            h.word(chunk.load_le::<u64>());
        }
        h.finish()
    }

    /// A one-line description for error messages: legs (direction and `sector:dim`
    /// segments), split, flux and block count.
    pub fn summary(&self) -> String {
        let legs: Vec<String> = self
            .legs()
            .iter()
            .map(|l| {
                let segs: Vec<String> = l
                    .segments()
                    .iter()
                    .map(|g| format!("{}:{}", g.sector, g.dim))
                    .collect();
                format!("{}[{}]", l.direction(), segs.join(" "))
            })
            .collect();
        format!(
            "legs ({}) with {} codomain legs, flux {}, {} blocks",
            legs.join(", "),
            self.n_codomain(),
            self.flux(),
            self.num_blocks()
        )
    }

    /// All legs: the codomain legs, then the domain legs.
    pub fn legs(&self) -> &[Leg<S>] {
        &self.legs
    }

    /// The codomain (row) legs.
    pub fn codomain(&self) -> &[Leg<S>] {
        &self.legs[..self.n_codomain]
    }

    /// The domain (column) legs.
    pub fn domain(&self) -> &[Leg<S>] {
        &self.legs[self.n_codomain..]
    }

    /// The number of legs.
    pub fn num_legs(&self) -> usize {
        self.legs.len()
    }

    /// The number of codomain legs.
    pub fn n_codomain(&self) -> usize {
        self.n_codomain
    }

    /// The flux.
    pub fn flux(&self) -> &S {
        &self.flux
    }

    /// The number of (present) blocks.
    pub fn num_blocks(&self) -> usize {
        self.entries.len()
    }

    /// Whether the structure has no blocks (and no storage).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The number of allowed blocks (present or not).
    pub fn num_allowed(&self) -> usize {
        self.present.len()
    }

    /// The presence mask: one bit per allowed block, in canonical order.
    pub fn present_mask(&self) -> &BitSlice {
        &self.present
    }

    /// The length of the backing allocation, in elements.
    pub fn total_len(&self) -> usize {
        self.total_len
    }

    /// The number of elements of the dense tensor: the product of the leg dimensions (1
    /// for a structure without legs, a scalar; 0 when a leg has dimension 0, whatever the
    /// other legs are).
    ///
    /// # Errors
    ///
    /// [`Error::Overflow`] ("dense tensor size") when the product overflows `usize`: a
    /// structure may describe a tensor whose blocks fit in memory while its dense form
    /// cannot be counted.
    pub fn dense_len(&self) -> Result<usize, Error> {
        if self.legs.iter().any(|l| l.dim() == 0) {
            return Ok(0);
        }
        self.legs
            .iter()
            .try_fold(1usize, |n, l| n.checked_mul(l.dim()))
            .ok_or(Error::Overflow {
                what: "dense tensor size",
            })
    }

    /// A stable 64-bit hash of the legs (segments and directions), the split, the flux and
    /// the presence mask, computed once at construction. Equal structures have equal
    /// fingerprints, in every process and on every platform; a cache keyed by it must still
    /// confirm a hit with `==`.
    pub fn fingerprint(&self) -> u64 {
        *self.fingerprint.get_or_init(|| self.compute_fingerprint())
    }

    /// Block `id`, if it is a block.
    pub fn block(&self, id: usize) -> Option<Block<'_, S>> {
        (id < self.entries.len()).then_some(Block {
            structure: self,
            id,
        })
    }

    /// All blocks, in id order.
    pub fn blocks(&self) -> impl ExactSizeIterator<Item = Block<'_, S>> + '_ {
        (0..self.entries.len()).map(move |id| Block {
            structure: self,
            id,
        })
    }

    /// The coupled sectors that have blocks, in increasing order, with their regions.
    pub fn sectors(&self) -> &[CoupledSector<S>] {
        &self.sectors
    }

    /// The elements and the block ids of consecutive coupled sectors `sectors` (empty
    /// ranges for an empty or out-of-range selection): their regions follow each other,
    /// and their blocks' ids do too, so both are ranges.
    pub fn sectors_extent(
        &self,
        sectors: std::ops::Range<usize>,
    ) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let all = &self.sectors;
        match (all.get(sectors.start), sectors.end.checked_sub(1)) {
            (Some(first), Some(last)) if sectors.start < sectors.end && last < all.len() => {
                let last = &all[last];
                (
                    first.offset()..last.offset() + last.len(),
                    first.blocks().start..last.blocks().end,
                )
            }
            _ => (0..0, 0..0),
        }
    }

    /// The id of coupled sector `c`, if it has blocks.
    pub fn sector_index(&self, c: &S) -> Option<usize> {
        self.sectors.binary_search_by(|s| s.sector.cmp(c)).ok()
    }

    /// The id of the present block with these segments (one per leg). `None` when there is
    /// none, including when the tuple has the wrong length or a segment is out of range.
    pub fn block_id(&self, segments: &[usize]) -> Option<usize> {
        let n = self.legs.len();
        if segments.len() != n {
            return None;
        }
        let (row, col) = segments.split_at(self.n_codomain);
        self.block_id_by_tuples(
            tuple_index(&self.legs[..self.n_codomain], row)?,
            tuple_index(&self.legs[self.n_codomain..], col)?,
        )
    }

    /// The id of the present block whose codomain tuple has enumeration number `row` and
    /// whose domain tuple has number `col` (see [`Block::tuple_numbers`]): a lookup without
    /// the segment list, for callers that number tuples themselves. `None` when there is no
    /// such block, including when a number is out of range.
    pub fn block_id_by_tuples(&self, row: usize, col: usize) -> Option<usize> {
        let &(rg, rpos) = self.row_slot.get(row)?;
        let &(cg, cpos) = self.col_slot.get(col)?;
        let (paired, rlen, start) = self.pairing[rg as usize];
        if paired != cg {
            return None;
        }
        let allowed = start + cpos as usize * rlen as usize + rpos as usize;
        let (word, bit) = (
            allowed / usize::BITS as usize,
            allowed % usize::BITS as usize,
        );
        let bits = self.present.as_raw_slice()[word];
        if (bits >> bit) & 1 == 0 {
            return None;
        }
        let below = bits & ((1usize << bit) - 1);
        Some(self.rank[word] + below.count_ones() as usize)
    }

    /// The id of the present block with these sectors (one per leg), for legs that carry each
    /// of these sectors at most once. `Ok(None)` when there is no such block.
    pub fn block_id_by_sectors(&self, sectors: &[S]) -> Result<Option<usize>, Error> {
        let n = self.legs.len();
        if sectors.len() != n {
            return Err(Error::ArityMismatch {
                expected: n,
                given: sectors.len(),
            });
        }
        let mut segments = Vec::with_capacity(n);
        for (leg, (l, s)) in self.legs.iter().zip(sectors).enumerate() {
            let mut it = l.segments_of(s);
            let Some(first) = it.next() else {
                return Ok(None);
            };
            if it.next().is_some() {
                return Err(Error::AmbiguousSector {
                    leg,
                    sector: s.to_string(),
                });
            }
            segments.push(first);
        }
        Ok(self.block_id(&segments))
    }

    /// Whether the block with these segments (one per leg) conserves the flux, present or
    /// not.
    pub fn is_allowed(&self, segments: &[usize]) -> Result<bool, Error> {
        let n = self.legs.len();
        if segments.len() != n {
            return Err(Error::ArityMismatch {
                expected: n,
                given: segments.len(),
            });
        }
        let mut total = S::trivial();
        for (leg, (l, &seg)) in self.legs.iter().zip(segments).enumerate() {
            let e = l.effective_sector(seg).ok_or(Error::SegmentOutOfRange {
                leg,
                segment: seg,
                segments: l.num_segments(),
            })?;
            total = total.fuse_abelian(&e);
        }
        Ok(total == self.flux)
    }
}

impl<S: AbelianSector> PartialEq for BlockStructure<S> {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint() == other.fingerprint()
            && self.n_codomain == other.n_codomain
            && self.flux == other.flux
            && self.present == other.present
            && self.legs == other.legs
    }
}

impl<S: AbelianSector> Eq for BlockStructure<S> {}

impl<S: AbelianSector> fmt::Debug for BlockStructure<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockStructure")
            .field("legs", &self.legs)
            .field("n_codomain", &self.n_codomain)
            .field("flux", &self.flux)
            .field("blocks", &self.num_blocks())
            .field("allowed", &self.num_allowed())
            .field("sectors", &self.sectors)
            .field("total_len", &self.total_len)
            .field("fingerprint", &format_args!("{:#018x}", self.fingerprint()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leg::Direction;
    use crate::sector::{FermionParity, Product, Trivial, U1};
    use crate::testing::{Kind, for_each_kind, random_mask, random_perm, random_structure};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const CASES: usize = 300;

    /// Every tuple of segments, first leg fastest.
    fn all_tuples<S: Sector>(legs: &[Leg<S>]) -> Vec<Vec<usize>> {
        let mut out = vec![vec![]];
        for l in legs {
            out = (0..l.num_segments())
                .flat_map(|i| {
                    out.iter().map(move |t| {
                        let mut t = t.clone();
                        t.push(i);
                        t
                    })
                })
                .collect();
        }
        // Each new leg is the outer loop, so the first leg is fastest.
        out
    }

    fn multi_indices(shape: &[usize]) -> Vec<Vec<usize>> {
        let mut out = vec![vec![]];
        for &d in shape {
            out = (0..d)
                .flat_map(|i| {
                    out.iter().map(move |t| {
                        let mut t = t.clone();
                        t.push(i);
                        t
                    })
                })
                .collect();
        }
        out
    }

    fn conserves<S: AbelianSector>(legs: &[Leg<S>], t: &[usize], flux: &S) -> bool {
        let effs: Vec<S> = legs
            .iter()
            .zip(t)
            .map(|(l, &i)| l.effective_sector(i).unwrap())
            .collect();
        S::fuse_all(&effs) == *flux
    }

    /// The invariants of the module docs, checked by brute force.
    fn check_invariants<S: AbelianSector>(s: &BlockStructure<S>) {
        let n = s.num_legs();
        let nc = s.n_codomain();
        // Allowed set and lookups against brute force.
        let tuples = all_tuples(s.legs());
        let allowed = tuples
            .iter()
            .filter(|t| conserves(s.legs(), t, s.flux()))
            .count();
        assert_eq!(allowed, s.num_allowed());
        for t in &tuples {
            assert_eq!(s.is_allowed(t), Ok(conserves(s.legs(), t, s.flux())));
            if let Some(id) = s.block_id(t) {
                assert_eq!(s.block(id).unwrap().segments(), &t[..]);
            }
        }
        assert_eq!(s.present_mask().count_ones(), s.num_blocks());
        assert_eq!(s.is_empty(), s.num_blocks() == 0);

        // Blocks: descriptors, conservation, canonical order, lookups.
        let unique = s.legs().iter().all(Leg::has_unique_sectors);
        let mut prev_allowed = None;
        for b in s.blocks() {
            assert_eq!(b.segments().len(), n);
            assert!(conserves(s.legs(), b.segments(), s.flux()), "{b:?}");
            for (l, leg) in s.legs().iter().enumerate() {
                let seg = &leg.segments()[b.segments()[l]];
                assert_eq!(b.sectors()[l], seg.sector);
                assert_eq!(b.shape()[l], seg.dim);
            }
            assert_eq!(b.len(), b.shape().iter().product::<usize>());
            assert!(prev_allowed < Some(b.allowed_index()));
            prev_allowed = Some(b.allowed_index());
            assert!(s.present_mask()[b.allowed_index()]);
            assert_eq!(s.block_id(b.segments()), Some(b.id()));
            let (row, col) = b.tuple_numbers();
            assert_eq!(
                (Some(row), Some(col)),
                (
                    tuple_index(&s.legs()[..nc], &b.segments()[..nc]),
                    tuple_index(&s.legs()[nc..], &b.segments()[nc..])
                )
            );
            assert_eq!(s.block_id_by_tuples(row, col), Some(b.id()));
            if unique {
                assert_eq!(s.block_id_by_sectors(b.sectors()), Ok(Some(b.id())));
            }
            let c = S::fuse_all(
                &s.legs()[..nc]
                    .iter()
                    .zip(b.segments())
                    .map(|(l, &i)| l.effective_sector(i).unwrap())
                    .collect::<Vec<_>>(),
            );
            assert_eq!(b.coupled_sector().sector(), &c);
            assert!(b.coupled_sector().blocks().contains(&b.id()));
            let (rows, cols) = (b.rows(), b.cols());
            assert_eq!(rows.len(), b.shape()[..nc].iter().product::<usize>());
            assert_eq!(cols.len(), b.shape()[nc..].iter().product::<usize>());
            assert!(rows.end <= b.coupled_sector().rows());
            assert!(cols.end <= b.coupled_sector().cols());
        }

        // Sector regions tile the allocation, in increasing sector order.
        let mut end = 0;
        let mut next_block = 0;
        for (k, sec) in s.sectors().iter().enumerate() {
            assert_eq!(sec.offset(), end);
            assert_eq!(sec.blocks().start, next_block);
            assert!(!sec.blocks().is_empty() && !sec.is_empty());
            if k > 0 {
                assert!(s.sectors()[k - 1].sector() < sec.sector());
            }
            assert_eq!(s.sector_index(sec.sector()), Some(k));
            if sec.is_dense() {
                assert_eq!(sec.len(), sec.rows() * sec.cols());
            }
            end += sec.len();
            next_block = sec.blocks().end;
        }
        assert_eq!(end, s.total_len());
        assert_eq!(next_block, s.num_blocks());

        // Element ranges: disjoint, exactly covering, inside the sector matrix, and the
        // reshape is column-major inside the row and column ranges.
        let mut cover = vec![false; s.total_len()];
        let mut elements = 0;
        for b in s.blocks() {
            let sec = b.coupled_sector();
            for idx in multi_indices(b.shape()) {
                let off = b.element_offset(&idx).unwrap();
                assert!((sec.offset()..sec.offset() + sec.len()).contains(&off));
                assert!(!cover[off], "element {off} of block {} overlaps", b.id());
                cover[off] = true;
                elements += 1;
                let linear = |range: Range<usize>, shape: &[usize], i: &[usize]| {
                    let mut x = 0;
                    let mut m = 1;
                    for (&d, &v) in shape.iter().zip(i) {
                        x += v * m;
                        m *= d;
                    }
                    range.start + x
                };
                let r = linear(b.rows(), &b.shape()[..nc], &idx[..nc]);
                let c = linear(b.cols(), &b.shape()[nc..], &idx[nc..]);
                if sec.is_dense() {
                    assert_eq!(off - sec.offset(), r + c * sec.rows());
                } else {
                    let rr = r - b.rows().start;
                    let cc = c - b.cols().start;
                    assert_eq!(off - b.offset(), rr + cc * b.rows().len());
                }
            }
            assert_eq!(b.element_offset(&vec![0; n + 1]), None);
        }
        assert_eq!(elements, s.total_len());
        assert!(cover.iter().all(|&x| x));
        assert_eq!(s.block(s.num_blocks()).map(|b| b.id()), None);
    }

    fn random_invariants<S: Kind>(seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut nonempty = 0;
        for _ in 0..CASES {
            let s = random_structure::<S>(&mut rng);
            check_invariants(&s);
            nonempty += usize::from(!s.is_empty());
            // Dense without a mask.
            assert!(s.sectors().iter().all(CoupledSector::is_dense));
            // Rebuilding gives an equal structure and the same fingerprint.
            let again =
                BlockStructure::from_legs(s.legs().to_vec(), s.n_codomain(), s.flux().clone())
                    .unwrap();
            assert_eq!(again, s);
            assert_eq!(again.fingerprint(), s.fingerprint());
        }
        assert!(
            nonempty > CASES / 2,
            "the generator should mostly give blocks"
        );
    }

    fn random_masks<S: Kind>(seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..CASES {
            let s = random_structure::<S>(&mut rng);
            let mask = random_mask(&mut rng, s.num_allowed());
            let m = s.with_present(&mask).unwrap();
            check_invariants(&m);
            assert_eq!(m.present_mask(), &mask[..]);
            assert_eq!(m.num_blocks(), mask.count_ones());
            if mask.not_any() {
                assert_eq!((m.total_len(), m.sectors().len()), (0, 0));
            }
            if !mask.is_empty() && mask != s.present_mask() {
                assert_ne!(m.fingerprint(), s.fingerprint());
            }
            // Screening keeps exactly the blocks at or above the threshold.
            let norms: Vec<f64> = (0..m.num_blocks())
                .map(|_| rng.gen_range(0.0..1.0))
                .collect();
            let r = m.screened(|id| norms[id], 0.5).unwrap();
            check_invariants(&r.structure);
            for b in m.blocks() {
                match r.block_map[b.id()] {
                    Some(new) => {
                        assert!(norms[b.id()] >= 0.5);
                        let nb = r.structure.block(new).unwrap();
                        assert_eq!(nb.segments(), b.segments());
                        assert_eq!(nb.allowed_index(), b.allowed_index());
                    }
                    None => assert!(norms[b.id()] < 0.5),
                }
            }
        }
    }

    fn random_permutations<S: Kind>(seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for case in 0..CASES {
            let mut s = random_structure::<S>(&mut rng);
            if case % 2 == 1 {
                let mask = random_mask(&mut rng, s.num_allowed());
                s = s.with_present(&mask).unwrap();
            }
            let n = s.num_legs();
            let perm = random_perm(&mut rng, n);
            let nc = rng.gen_range(0..=n);
            let p = s.permuted(&perm, nc).unwrap();
            let t = &p.structure;
            check_invariants(t);
            assert_eq!(t.num_blocks(), s.num_blocks());
            assert_eq!(t.num_allowed(), s.num_allowed());
            assert_eq!(t.total_len(), s.total_len());
            assert_eq!(t.flux(), s.flux());
            let mut hit = vec![false; t.num_blocks()];
            for b in s.blocks() {
                let nb = t.block(p.block_map[b.id()]).unwrap();
                assert!(!std::mem::replace(&mut hit[nb.id()], true));
                for (k, &pk) in perm.iter().enumerate() {
                    assert_eq!(nb.segments()[k], b.segments()[pk]);
                    assert_eq!(nb.shape()[k], b.shape()[pk]);
                }
                assert_eq!(nb.len(), b.len());
                // The sign by its definition, counted over pairs of old legs.
                let odd = |l: usize| b.sectors()[l].parity();
                let pos = |l: usize| perm.iter().position(|&x| x == l).unwrap();
                let mut m = 0;
                for x in 0..n {
                    for y in x + 1..n {
                        m += usize::from(odd(x) && odd(y) && pos(x) > pos(y));
                    }
                }
                assert_eq!(p.sign(b.id()), Some(if m % 2 == 0 { 1 } else { -1 }));
            }
            // Permuting back restores the structure; ids and signs compose to the identity.
            let mut inv = vec![0; n];
            for (k, &x) in perm.iter().enumerate() {
                inv[x] = k;
            }
            let back = t.permuted(&inv, s.n_codomain()).unwrap();
            assert_eq!(back.structure, s);
            for b in s.blocks() {
                let mid = p.block_map[b.id()];
                assert_eq!(back.block_map[mid], b.id());
                assert_eq!(p.sign(b.id()).unwrap() * back.sign(mid).unwrap(), 1);
            }
            // The adjoint is an involution and transposes every block.
            let a = s.adjoint().unwrap();
            check_invariants(&a.structure);
            assert_eq!(a.structure.num_blocks(), s.num_blocks());
            assert_eq!(a.structure.flux(), &s.flux().dual());
            for b in s.blocks() {
                let ab = a.structure.block(a.block_map[b.id()].unwrap()).unwrap();
                assert_eq!(
                    (ab.rows().len(), ab.cols().len()),
                    (b.cols().len(), b.rows().len())
                );
            }
            assert_eq!(a.structure.adjoint().unwrap().structure, s);
        }
    }

    #[test]
    fn random_structures_keep_their_invariants() {
        for_each_kind!(random_invariants);
    }

    #[test]
    fn random_masks_and_screening() {
        for_each_kind!(random_masks);
    }

    #[test]
    fn random_permutations_and_adjoints() {
        for_each_kind!(random_permutations);
    }

    #[test]
    fn generator_exercises_the_interesting_cases() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let (mut packed, mut negative, mut blocks) = (0, 0, 0);
        for _ in 0..CASES {
            let s = random_structure::<Product<U1, FermionParity>>(&mut rng);
            let mask = random_mask(&mut rng, s.num_allowed());
            let m = s.with_present(&mask).unwrap();
            packed += m.sectors().iter().filter(|c| !c.is_dense()).count();
            let perm = random_perm(&mut rng, s.num_legs());
            negative += s.permuted(&perm, 0).unwrap().negative.count_ones();
            blocks += s.num_blocks();
        }
        assert!(packed > 10, "packed sectors: {packed}");
        assert!(negative > 10, "negative signs: {negative}");
        assert!(blocks > 1000, "blocks: {blocks}");
    }

    fn u1(dir: Direction, segs: &[(i32, usize)]) -> Leg<U1> {
        Leg::new(dir, segs.iter().map(|&(q, d)| (U1(q), d))).unwrap()
    }

    #[test]
    fn layout_by_hand() {
        // Codomain: a (In: q=0 dim 1, q=1 dim 2) x b (In: q=0 dim 3, q=1 dim 1);
        // domain: c (Out: q=0 dim 2, q=1 dim 1, q=2 dim 1); flux 0.
        let a = u1(Direction::In, &[(0, 1), (1, 2)]);
        let b = u1(Direction::In, &[(0, 3), (1, 1)]);
        let c = u1(Direction::Out, &[(0, 2), (1, 1), (2, 1)]);
        let s = BlockStructure::new([a, b], [c], U1(0)).unwrap();
        // Coupled 0: rows (0,0) -> 3; cols c0 -> 2.   3 x 2 at 0.
        // Coupled 1: rows (1,0) -> 6, (0,1) -> 1; cols c1 -> 1.   7 x 1 at 6.
        // Coupled 2: rows (1,1) -> 2; cols c2 -> 1.   2 x 1 at 13.
        let secs: Vec<_> = s
            .sectors()
            .iter()
            .map(|x| (x.sector().0, x.offset(), x.rows(), x.cols()))
            .collect();
        assert_eq!(secs, vec![(0, 0, 3, 2), (1, 6, 7, 1), (2, 13, 2, 1)]);
        assert_eq!(s.total_len(), 15);
        assert_eq!(s.num_blocks(), 4);
        let b = s.block(s.block_id(&[0, 1, 1]).unwrap()).unwrap();
        assert_eq!((b.offset(), b.rows(), b.cols()), (12, 6..7, 0..1));
        let b = s.block(s.block_id(&[1, 0, 1]).unwrap()).unwrap();
        assert_eq!(
            (b.offset(), b.shape(), b.strides()),
            (6, &[2, 3, 1][..], &[1, 2, 7][..])
        );
        let b = s.block(0).unwrap();
        assert_eq!((b.shape(), b.strides()), (&[1, 3, 2][..], &[1, 1, 3][..]));
        assert_eq!(b.element_offset(&[0, 2, 1]), Some(5));
        assert_eq!(b.element_offset(&[0, 3, 1]), None);
        assert_eq!(s.block_id(&[0, 0, 1]), None);
        assert_eq!(s.is_allowed(&[0, 0, 1]), Ok(false));
        assert_eq!(s.block_id_by_sectors(&[U1(1), U1(1), U1(2)]), Ok(Some(3)));
        assert_eq!(s.block_id_by_sectors(&[U1(5), U1(1), U1(2)]), Ok(None));

        // A mask that drops the (0,1) row of coupled sector 1 keeps it dense (6 x 1); one that
        // leaves a hole makes a packed sector.
        let mut mask = BitVec::repeat(true, 4);
        mask.set(2, false);
        let m = s.with_present(&mask).unwrap();
        assert_eq!(m.sectors()[1].rows(), 6);
        assert!(m.sectors()[1].is_dense());
        assert_eq!(m.total_len(), 6 + 6 + 2);

        // Two-by-two legs, each (q=0 dim 1, q=1 dim 2): coupled sector 1 has rows (1,0),
        // (0,1) and columns likewise, four 2x2 blocks (allowed indices 1..5).
        let l = u1(Direction::In, &[(0, 1), (1, 2)]);
        let s = BlockStructure::new([l.clone(), l.clone()], [l.dual(), l.dual()], U1(0)).unwrap();
        assert_eq!((s.num_allowed(), s.total_len()), (6, 1 + 16 + 16));
        let mut mask = BitVec::repeat(true, 6);
        mask.set(2, false); // row (0,1), column (1,0): a hole
        let m = s.with_present(&mask).unwrap();
        let sec = &m.sectors()[1];
        assert!(!sec.is_dense());
        assert_eq!(
            (sec.offset(), sec.len(), sec.rows(), sec.cols()),
            (1, 12, 4, 4)
        );
        let b = m.block(m.block_id(&[1, 0, 0, 1]).unwrap()).unwrap();
        assert_eq!((b.offset(), b.rows(), b.cols()), (5, 0..2, 2..4));
        assert_eq!(b.strides(), &[1, 2, 2, 2][..]);
        assert_eq!(m.sectors()[2].offset(), 13);
        assert_eq!(m.total_len(), 29);
        check_invariants(&m);
    }

    #[test]
    fn fermionic_signs_by_hand() {
        type F = Product<U1, FermionParity>;
        let odd = Product(U1(1), FermionParity::ODD);
        let even = Product(U1(0), FermionParity::EVEN);
        let leg = |dir| Leg::<F>::new(dir, [(even, 1), (odd, 1)]).unwrap();
        // Four legs In, In, Out, Out, flux 0.
        let s = BlockStructure::new(
            [leg(Direction::In), leg(Direction::In)],
            [leg(Direction::Out), leg(Direction::Out)],
            F::trivial(),
        )
        .unwrap();
        let id = |t: &[usize]| s.block_id(t).unwrap();
        // Swap the first two legs: only the block with both of them odd changes sign.
        let p = s.permuted(&[1, 0, 2, 3], 2).unwrap();
        assert_eq!(p.sign(id(&[1, 1, 1, 1])), Some(-1));
        assert_eq!(p.sign(id(&[1, 0, 1, 0])), Some(1));
        assert_eq!(p.sign(id(&[0, 0, 0, 0])), Some(1));
        // Cyclic shift (3, 0, 1, 2): leg 3 crosses legs 0, 1, 2.
        let p = s.permuted(&[3, 0, 1, 2], 1).unwrap();
        assert_eq!(p.sign(id(&[1, 1, 1, 1])), Some(-1)); // three odd crossings
        assert_eq!(p.sign(id(&[1, 0, 0, 1])), Some(-1)); // one
        assert_eq!(p.sign(id(&[1, 0, 1, 0])), Some(1)); // leg 3 even: none
        assert_eq!(p.sign(id(&[0, 1, 1, 0])), Some(1));
        // Full reversal: 6 crossings among four odd legs.
        let p = s.permuted(&[3, 2, 1, 0], 2).unwrap();
        assert_eq!(p.sign(id(&[1, 1, 1, 1])), Some(1));
        assert_eq!(p.sign(id(&[1, 0, 0, 1])), Some(-1));
        assert_eq!(p.sign(s.num_blocks()), None);
        // Bosonic sectors never pick up a sign.
        let u = BlockStructure::new(
            [u1(Direction::In, &[(1, 1)])],
            [u1(Direction::In, &[(-1, 1)])],
            U1(0),
        )
        .unwrap();
        assert!(u.permuted(&[1, 0], 1).unwrap().negative.not_any());
    }

    #[test]
    fn scalars_and_empty_structures() {
        let s = BlockStructure::<U1>::new([], [], U1(0)).unwrap();
        assert_eq!((s.num_blocks(), s.total_len()), (1, 1));
        let b = s.block(0).unwrap();
        assert_eq!(
            (b.shape(), b.len(), b.element_offset(&[])),
            (&[][..], 1, Some(0))
        );
        assert!(BlockStructure::<U1>::new([], [], U1(1)).unwrap().is_empty());
        // No allowed block is an empty structure, not an error.
        let e = BlockStructure::new(
            [u1(Direction::In, &[(1, 2)])],
            [u1(Direction::Out, &[(0, 2)])],
            U1(0),
        )
        .unwrap();
        assert!(e.is_empty());
        assert_eq!(
            (e.total_len(), e.num_allowed(), e.sectors().len()),
            (0, 0, 0)
        );
        check_invariants(&e);
        let z =
            BlockStructure::new([Leg::<U1>::new(Direction::In, []).unwrap()], [], U1(0)).unwrap();
        assert!(z.is_empty());
    }

    #[test]
    fn misuse_is_typed() {
        let a = u1(Direction::In, &[(0, 2), (1, 1)]);
        let s = BlockStructure::new([a.clone()], [a.dual()], U1(0)).unwrap();
        assert_eq!(
            BlockStructure::from_legs(vec![a.clone()], 2, U1(0)).unwrap_err(),
            Error::SplitOutOfRange {
                n_codomain: 2,
                legs: 1
            }
        );
        assert_eq!(
            s.with_present(&BitVec::repeat(true, 3)).unwrap_err(),
            Error::MaskLength {
                expected: 2,
                given: 3
            }
        );
        for bad in [vec![0], vec![0, 0], vec![1, 2], vec![0, 1, 2]] {
            assert_eq!(
                s.permuted(&bad, 1).unwrap_err(),
                Error::InvalidPermutation {
                    legs: 2,
                    given: bad.clone()
                }
            );
        }
        assert_eq!(
            s.permuted(&[1, 0], 3).unwrap_err(),
            Error::SplitOutOfRange {
                n_codomain: 3,
                legs: 2
            }
        );
        assert!(matches!(
            s.screened(|_| 1.0, f64::NAN),
            Err(Error::InvalidThreshold { .. })
        ));
        assert!(matches!(
            s.screened(|_| 1.0, -1.0),
            Err(Error::InvalidThreshold { .. })
        ));
        assert!(matches!(
            s.screened(|id| if id == 1 { f64::NAN } else { 1.0 }, 0.5),
            Err(Error::InvalidNorm { block: 1, .. })
        ));
        assert_eq!(
            s.block_id_by_sectors(&[U1(0)]),
            Err(Error::ArityMismatch {
                expected: 2,
                given: 1
            })
        );
        assert_eq!(
            s.is_allowed(&[0]),
            Err(Error::ArityMismatch {
                expected: 2,
                given: 1
            })
        );
        assert_eq!(
            s.is_allowed(&[0, 5]),
            Err(Error::SegmentOutOfRange {
                leg: 1,
                segment: 5,
                segments: 2
            })
        );
        assert_eq!(s.block_id(&[0]), None);
        assert_eq!(s.block_id(&[0, 9]), None);
        let t = Leg::<Trivial>::tiling(&[1, 2]).unwrap();
        let ts = BlockStructure::new([t.clone()], [t.dual()], Trivial).unwrap();
        assert_eq!(ts.num_blocks(), 4);
        assert_eq!(
            ts.block_id_by_sectors(&[Trivial, Trivial]),
            Err(Error::AmbiguousSector {
                leg: 0,
                sector: "Trivial".into()
            })
        );
        let msg = Error::MaskLength {
            expected: 2,
            given: 3,
        }
        .to_string();
        assert!(msg.contains("expected") && msg.contains('3'), "{msg}");
        let huge = Leg::<Trivial>::tiling(&[usize::MAX / 2]).unwrap();
        assert!(matches!(
            BlockStructure::new([huge.clone()], [huge], Trivial),
            Err(Error::Overflow { .. })
        ));
    }

    #[test]
    fn fingerprints_distinguish_what_they_hash() {
        const PIN: u64 = 0xd3f7_db9e_f220_30f3;
        let a = u1(Direction::In, &[(0, 2), (1, 1)]);
        let s = BlockStructure::new([a.clone()], [a.dual()], U1(0)).unwrap();
        let f = s.fingerprint();
        assert_eq!(
            BlockStructure::new([a.clone()], [a.dual()], U1(0))
                .unwrap()
                .fingerprint(),
            f
        );
        let others = [
            BlockStructure::new([a.clone()], [a.dual()], U1(1)).unwrap(),
            BlockStructure::new([a.clone(), a.dual()], [], U1(0)).unwrap(),
            BlockStructure::new([a.dual()], [a.clone()], U1(0)).unwrap(),
            BlockStructure::new([a.clone()], [a.clone()], U1(1)).unwrap(),
            s.with_present(&BitVec::repeat(false, 2)).unwrap(),
        ];
        for o in &others {
            assert_ne!(o.fingerprint(), f, "{o:?}");
            assert_ne!(o, &s);
        }
        // Stable across processes and platforms: pinned (changing the hash or the canonical
        // layout is a deliberate, versioned change).
        assert_eq!(f, PIN, "fingerprint {f:#018x}");
    }
}
