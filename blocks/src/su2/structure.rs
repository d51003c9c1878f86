//! SU(2)-symmetric structures: legs of spin multiplets, and the reduced blocks of a tensor
//! map keyed by a coupled spin and a pair of trees.
//!
//! Owns: [`Su2Leg`] (spins, each with an abelian `U(1)` charge and a multiplicity, and a
//! direction), [`Coupling`] (a tuple of leg segments coupled through one tree: a row or
//! column of the reduced matrices), [`Su2Structure`] (the legs, the split into codomain and
//! domain, and the reduced blocks as an abelian matrix structure), [`Su2Label`] (the label of
//! a reduced matrix: coupled spin and charge) and [`local_basis`] (the tree pairs of one
//! segment tuple, in the order its blocks and the recoupling transformers share).
//! Invariants:
//!
//! - A structure stores only reduced blocks: one per coupled spin `c` and pair (splitting tree
//!   of the codomain segments to `c`, fusion tree of the domain segments from `c`), each a
//!   dense matrix of the segments' multiplicities (the codomain's rows, first leg fastest;
//!   the domain's columns, first leg fastest), without the `2c + 1` copies the dense tensor
//!   holds.
//! - Those blocks are the blocks of [`Su2Structure::matrix`]: an abelian structure of one
//!   codomain and one domain leg whose segments are the [`Coupling`]s of either side,
//!   labelled [`Su2Label`] `(2c, charge)`, so that the blocks of one coupled spin and charge
//!   tile one matrix (the abelian sector-major layout) in one allocation with one hazard
//!   record per block, and the runtime, GEMM planning and per-sector factorizations of
//!   abelian tensors apply as they are.
//! - Charges (SU(2) x U(1), for Hubbard-type models) only add: a segment tuple either
//!   conserves charge (the `In` legs' charges minus the `Out` legs' sum to zero) and has all
//!   the blocks its spins allow, or has none. Trees, recouplings and permutation moves depend
//!   on the spins alone, and a permutation maps a conserving tuple to a conserving one.
//! - The blocks of one segment tuple (a [`Group`]) are listed in [`local_basis`] order; a leg
//!   permutation maps each group to the group of the permuted tuple by one fixed matrix.

use super::SU2;
use super::tree::FusionTree;
use crate::error::Error;
use crate::leg::{Direction, Leg};
use crate::sector::{Product, Sector, U1};
use crate::structure::BlockStructure;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use tessera_core::LruCache;

/// The label of a reduced matrix: the coupled spin `U1(2c)` and the coupled charge
/// `U1(q)` (0 on legs without charges). The matrix forms of SU(2) tensors are abelian
/// tensors over it.
pub type Su2Label = Product<U1, U1>;

/// A leg of an SU(2)-symmetric tensor: spins `two_j` (twice the spin), each with a `U(1)`
/// charge (0 unless given: SU(2) x U(1) for Hubbard-type models, the charge an electron
/// number) and a multiplicity, and a direction: an [`In`](Direction::In) leg is a space `V`
/// (a ket), an [`Out`](Direction::Out) leg its dual (a bra), as on abelian legs, and an
/// `Out` leg's charges count negatively. A contraction pairs an `In` leg with an `Out` leg.
///
/// Its dense dimension is `sum (2j + 1) * multiplicity`; in the dense index, the sectors come
/// in increasing (spin, charge), the copies of a multiplet one after another, and within a
/// copy `m` runs `j, j - 1, ..., -j`.
///
/// ```
/// use tessera_blocks::Direction;
/// use tessera_blocks::su2::Su2Leg;
///
/// // Two singlets and one triplet: 2 + 3 dense states, 3 reduced ones.
/// let leg = Su2Leg::new(Direction::In, [(2, 1), (0, 2)])?;
/// assert_eq!(leg.sectors(), &[(0, 2), (2, 1)]);
/// assert_eq!((leg.dim(), leg.reduced_dim()), (5, 3));
///
/// // A Hubbard site: empty (spin 0, no electron), one electron (spin 1/2), two (spin 0).
/// let site = Su2Leg::with_charges(Direction::In, [((0, 0), 1), ((1, 1), 1), ((0, 2), 1)])?;
/// assert_eq!(site.sectors(), &[(0, 1), (0, 1), (1, 1)]);
/// assert_eq!(site.charges(), &[0, 2, 1]);
/// assert_eq!(site.dim(), 4);
/// # Ok::<(), tessera_blocks::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Su2Leg {
    direction: Direction,
    sectors: Vec<(u32, usize)>,
    /// The charge of each sector (all 0 for a leg of spins alone).
    charges: Vec<i32>,
}

impl Su2Leg {
    /// A leg of the given spins (`(two_j, multiplicity)`, in any order), of charge 0.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroDimension`] for a multiplicity of 0, [`Error::RepeatedSector`] for a spin
    /// given twice.
    pub fn new(
        direction: Direction,
        sectors: impl IntoIterator<Item = (u32, usize)>,
    ) -> Result<Self, Error> {
        Self::with_charges(direction, sectors.into_iter().map(|(j, d)| ((j, 0), d)))
    }

    /// A leg of the given spins and charges (`((two_j, charge), multiplicity)`, in any
    /// order): an SU(2) x U(1) leg.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroDimension`] for a multiplicity of 0, [`Error::RepeatedSector`] for a
    /// (spin, charge) given twice.
    pub fn with_charges(
        direction: Direction,
        sectors: impl IntoIterator<Item = ((u32, i32), usize)>,
    ) -> Result<Self, Error> {
        let given: Vec<((u32, i32), usize)> = sectors.into_iter().collect();
        if let Some(segment) = given.iter().position(|&(_, d)| d == 0) {
            return Err(Error::ZeroDimension { segment });
        }
        let mut order: Vec<usize> = (0..given.len()).collect();
        order.sort_by_key(|&i| given[i].0);
        for w in order.windows(2) {
            if given[w[0]].0 == given[w[1]].0 {
                return Err(Error::RepeatedSector {
                    sector: sector_name(given[w[0]].0),
                    first: w[0].min(w[1]),
                    second: w[0].max(w[1]),
                });
            }
        }
        Ok(Self {
            direction,
            sectors: order.iter().map(|&i| (given[i].0.0, given[i].1)).collect(),
            charges: order.iter().map(|&i| given[i].0.1).collect(),
        })
    }

    /// Whether the leg is a space (`In`) or a dual space (`Out`).
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// The same spins and charges with the other direction.
    pub fn dual(&self) -> Self {
        Self {
            direction: self.direction.flip(),
            ..self.clone()
        }
    }

    /// The spins (`two_j`) with their multiplicities, in increasing (spin, charge).
    pub fn sectors(&self) -> &[(u32, usize)] {
        &self.sectors
    }

    /// The charge of each sector, in the order of [`sectors`](Self::sectors).
    pub fn charges(&self) -> &[i32] {
        &self.charges
    }

    /// The dense dimension: every multiplet with its `2j + 1` states.
    pub fn dim(&self) -> usize {
        self.sectors
            .iter()
            .map(|&(j, d)| (j as usize + 1) * d)
            .sum()
    }

    /// The number of multiplets.
    pub fn reduced_dim(&self) -> usize {
        self.sectors.iter().map(|&(_, d)| d).sum()
    }

    /// Where segment `s` starts in the dense index.
    pub(crate) fn dense_offset(&self, s: usize) -> usize {
        self.sectors[..s]
            .iter()
            .map(|&(j, d)| (j as usize + 1) * d)
            .sum()
    }

    /// The charge segment `s` adds to a coupling of the codomain (`-` of it for the
    /// domain): its charge on an `In` leg, minus it on an `Out` leg.
    fn signed_charge(&self, s: usize) -> i32 {
        match self.direction {
            Direction::In => self.charges[s],
            Direction::Out => -self.charges[s],
        }
    }

    /// Checks that `a` and `b` can be contracted, as [`Leg::check_contractible`] does for
    /// abelian legs: opposite directions, the same number of sectors, and the same spin,
    /// charge and multiplicity segment by segment. The error names the first offending
    /// segment.
    ///
    /// # Errors
    ///
    /// [`Error::SameDirection`], [`Error::SegmentCountMismatch`], [`Error::SegmentMismatch`].
    pub fn check_contractible(a: &Self, b: &Self) -> Result<(), Error> {
        if a.direction == b.direction {
            return Err(Error::SameDirection {
                direction: a.direction,
            });
        }
        let (x, y) = (&a.sectors, &b.sectors);
        if x.len() != y.len() {
            return Err(Error::SegmentCountMismatch {
                left: x.len(),
                right: y.len(),
            });
        }
        let differs = |k: usize| x[k] != y[k] || a.charges[k] != b.charges[k];
        if let Some(segment) = (0..x.len()).find(|&k| differs(k)) {
            return Err(Error::SegmentMismatch {
                segment,
                left_sector: sector_name((x[segment].0, a.charges[segment])),
                left_dim: x[segment].1,
                right_sector: sector_name((y[segment].0, b.charges[segment])),
                right_dim: y[segment].1,
            });
        }
        Ok(())
    }
}

/// A sector's name in error messages: `2j = 1`, or `2j = 1, q = -1` with a charge.
fn sector_name((two_j, charge): (u32, i32)) -> String {
    if charge == 0 {
        format!("2j = {two_j}")
    } else {
        format!("2j = {two_j}, q = {charge}")
    }
}

/// One row (or column) of the reduced matrices: a segment of each leg of one side, coupled
/// to `coupled` through `tree` (`None` for a side without legs, which couples to spin 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coupling {
    /// The coupled spin (`2c`).
    pub coupled: u32,
    /// The coupled charge: the sum of the segments' charges, counted negatively on `Out`
    /// legs of the codomain and on `In` legs of the domain.
    pub charge: i32,
    /// The segment of each leg of the side.
    pub segments: Vec<usize>,
    /// The tree from the legs' spins to `coupled`.
    pub tree: Option<FusionTree>,
    /// The multiplicity of each segment.
    pub degs: Vec<usize>,
    /// Their product: the rows (or columns) this coupling spans.
    pub dim: usize,
}

impl Coupling {
    /// Its label in the matrix form: `(2c, charge)`.
    pub fn label(&self) -> Su2Label {
        Product(U1(self.coupled as i32), U1(self.charge))
    }
}

/// The spins every coupling of `spins` can reach, increasing (`[0]` for no spins).
pub(crate) fn couplings(spins: &[u32]) -> Vec<u32> {
    let mut reach = vec![0_u32];
    for &a in spins {
        let mut next: Vec<u32> = reach
            .iter()
            .flat_map(|&x| SU2::half(x).fuse(&SU2::half(a)).map(SU2::two_j))
            .collect();
        next.sort_unstable();
        next.dedup();
        reach = next;
    }
    reach
}

/// The trees from `spins` to `c`: `[None]` for no spins (which couple to 0 only).
pub(crate) fn trees(spins: &[u32], c: u32) -> Vec<Option<FusionTree>> {
    if spins.is_empty() {
        return if c == 0 { vec![None] } else { Vec::new() };
    }
    FusionTree::all(spins, c).into_iter().map(Some).collect()
}

/// One element of a segment tuple's basis: the coupled spin and the two trees.
pub type BasisElement = (u32, Option<FusionTree>, Option<FusionTree>);

/// The tree pairs of one segment tuple (codomain spins, domain spins): coupled spins
/// increasing, then splitting trees, then fusion trees, each in [`FusionTree::all`] order.
/// A group's blocks and a recoupling transformer's rows and columns come in this order.
pub fn local_basis(codomain: &[u32], domain: &[u32]) -> Vec<BasisElement> {
    let (a, b) = (couplings(codomain), couplings(domain));
    let mut out = Vec::new();
    for &c in a.iter().filter(|c| b.contains(c)) {
        let (ss, ts) = (trees(codomain, c), trees(domain, c));
        for s in &ss {
            for t in &ts {
                out.push((c, s.clone(), t.clone()));
            }
        }
    }
    out
}

/// The couplings of one tuple of spins: per coupled spin (increasing), its trees in
/// [`FusionTree::all`] order. Shared per spin tuple: a structure's tuples repeat a few spin
/// patterns many times over, and a sweep builds structures of the same patterns again and
/// again.
type Trees = Arc<[(u32, Vec<Option<FusionTree>>)]>;

/// The couplings and trees of `spins`, from a bounded process-wide cache (least recently
/// used first out; the trees are a pure function of the spins).
fn trees_of(spins: &[u32]) -> Trees {
    static CACHE: OnceLock<LruCache<Vec<u32>, Trees>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| LruCache::new(1 << 14));
    if let Some(t) = cache.get(spins) {
        return t;
    }
    let built: Trees = couplings(spins)
        .into_iter()
        .map(|c| (c, trees(spins, c)))
        .collect();
    cache.insert(spins.to_vec(), Arc::clone(&built));
    built
}

/// Every coupling of one side's legs (`codomain`: which side): coupled spin and charge
/// increasing, then segment tuple, then tree.
fn side(legs: &[Su2Leg], codomain: bool) -> Vec<Coupling> {
    // Couplings bucketed by (coupled spin, charge); tuples come in increasing
    // (lexicographic) order and trees in increasing order, so each bucket is sorted as it
    // fills.
    let mut buckets: std::collections::BTreeMap<(u32, i32), Vec<Coupling>> = Default::default();
    let sign = if codomain { 1 } else { -1 };
    let n = legs.len();
    let mut segments = vec![0_usize; n];
    if legs.iter().any(|l| l.sectors.is_empty()) {
        return Vec::new();
    }
    loop {
        let spins: Vec<u32> = segments
            .iter()
            .zip(legs)
            .map(|(&s, l)| l.sectors[s].0)
            .collect();
        let degs: Vec<usize> = segments
            .iter()
            .zip(legs)
            .map(|(&s, l)| l.sectors[s].1)
            .collect();
        let dim = degs.iter().product();
        let charge = sign
            * segments
                .iter()
                .zip(legs)
                .map(|(&s, l)| l.signed_charge(s))
                .sum::<i32>();
        for (c, trees) in trees_of(&spins).iter() {
            let bucket = buckets.entry((*c, charge)).or_default();
            for tree in trees {
                bucket.push(Coupling {
                    coupled: *c,
                    charge,
                    segments: segments.clone(),
                    tree: tree.clone(),
                    degs: degs.clone(),
                    dim,
                });
            }
        }
        // The next tuple, last leg fastest.
        let Some(k) = (0..n)
            .rev()
            .find(|&k| segments[k] + 1 < legs[k].sectors.len())
        else {
            break;
        };
        segments[k] += 1;
        segments[k + 1..].iter_mut().for_each(|s| *s = 0);
    }
    buckets.into_values().flatten().collect()
}

/// The blocks of one segment tuple (one segment per leg, codomain then domain), in
/// [`local_basis`] order.
#[derive(Clone, Debug)]
pub struct Group {
    /// The segment of each leg.
    pub segments: Vec<usize>,
    /// The ids of its blocks in [`Su2Structure::matrix`].
    pub blocks: Vec<usize>,
}

/// The most structures [`Su2Structure::shared`] holds.
pub const STRUCTURE_CACHE_CAPACITY: usize = 1024;

/// The structure of an SU(2)-symmetric tensor map from its domain legs to its codomain legs
/// (an invariant: total spin 0): the legs, the split, and the reduced blocks (see the module
/// docs).
///
/// ```
/// use tessera_blocks::Direction;
/// use tessera_blocks::su2::{Su2Leg, Su2Structure};
///
/// // A spin one half and a spin one coupled into a bond of spins 1/2 and 3/2.
/// let p = Su2Leg::new(Direction::In, [(1, 1)])?;
/// let w = Su2Leg::new(Direction::In, [(2, 1)])?;
/// let bond = Su2Leg::new(Direction::Out, [(1, 3), (3, 2)])?;
/// let s = Su2Structure::new(vec![p, w, bond], 2)?;
/// // One reduced block per coupled spin: 5 numbers where the dense tensor has 84.
/// assert_eq!(s.matrix().num_blocks(), 2);
/// assert_eq!((s.matrix().total_len(), s.dense_dims()), (5, vec![2, 3, 14]));
/// # Ok::<(), tessera_blocks::Error>(())
/// ```
#[derive(Debug)]
pub struct Su2Structure {
    legs: Vec<Su2Leg>,
    n_codomain: usize,
    rows: Vec<Coupling>,
    cols: Vec<Coupling>,
    matrix: Arc<BlockStructure<Su2Label>>,
    groups: Vec<Group>,
    group_of: HashMap<Vec<usize>, usize>,
}

impl PartialEq for Su2Structure {
    fn eq(&self, other: &Self) -> bool {
        self.legs == other.legs && self.n_codomain == other.n_codomain
    }
}

impl Su2Structure {
    /// The structure of maps from `legs[n_codomain..]` to `legs[..n_codomain]`.
    ///
    /// # Errors
    ///
    /// [`Error::SplitOutOfRange`] when `n_codomain` exceeds the legs; [`Error::Overflow`]
    /// when a block's size overflows.
    pub fn new(legs: Vec<Su2Leg>, n_codomain: usize) -> Result<Self, Error> {
        if n_codomain > legs.len() {
            return Err(Error::SplitOutOfRange {
                n_codomain,
                legs: legs.len(),
            });
        }
        let rows = side(&legs[..n_codomain], true);
        let cols = side(&legs[n_codomain..], false);
        let label = |c: &Coupling| (c.label(), c.dim);
        let matrix = BlockStructure::new(
            [Leg::tiled(Direction::In, rows.iter().map(label))?],
            [Leg::tiled(Direction::Out, cols.iter().map(label))?],
            Product(U1(0), U1(0)),
        )?;
        let mut by_tuple: HashMap<Vec<usize>, Vec<(&Coupling, &Coupling, usize)>> = HashMap::new();
        // Rows and columns are sorted by (coupled spin, charge): pair the runs of equal
        // label only.
        let mut k0 = 0;
        for (r, row) in rows.iter().enumerate() {
            let key = (row.coupled, row.charge);
            while k0 < cols.len() && (cols[k0].coupled, cols[k0].charge) < key {
                k0 += 1;
            }
            for (k, col) in cols.iter().enumerate().skip(k0) {
                if (col.coupled, col.charge) != key {
                    break;
                }
                let id = matrix
                    .block_id(&[r, k])
                    .expect("every pair of one coupled spin is a block");
                let tuple = [row.segments.as_slice(), col.segments.as_slice()].concat();
                by_tuple.entry(tuple).or_default().push((row, col, id));
            }
        }
        let mut groups: Vec<Group> = by_tuple
            .into_iter()
            .map(|(segments, mut blocks)| {
                blocks.sort_by(|a, b| {
                    (a.0.coupled, &a.0.tree, &a.1.tree).cmp(&(b.0.coupled, &b.0.tree, &b.1.tree))
                });
                Group {
                    segments,
                    blocks: blocks.into_iter().map(|b| b.2).collect(),
                }
            })
            .collect();
        groups.sort_by(|a, b| a.segments.cmp(&b.segments));
        let group_of = groups
            .iter()
            .enumerate()
            .map(|(i, g)| (g.segments.clone(), i))
            .collect();
        Ok(Self {
            legs,
            n_codomain,
            rows,
            cols,
            matrix: Arc::new(matrix),
            groups,
            group_of,
        })
    }

    /// The structure of `legs` and `n_codomain`, as [`new`](Self::new) builds it, shared: the
    /// first call builds it, later calls with equal arguments return the same `Arc` while
    /// the process-wide cache holds it (two first calls racing may each build one). Contractions, permutations and factorizations make
    /// their results' structures through it, so a sweep that meets the same legs again pays
    /// for neither the trees nor the block tables twice, and the permutation plans keyed by
    /// a structure's legs are reused.
    ///
    /// The cache (a [`tessera_core::LruCache`]) holds at most [`STRUCTURE_CACHE_CAPACITY`]
    /// structures, the least recently used going first (tensors keep their own structures
    /// alive).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tessera_blocks::Direction;
    /// use tessera_blocks::su2::{Su2Leg, Su2Structure};
    ///
    /// let v = Su2Leg::new(Direction::In, [(0, 2), (1, 1)])?;
    /// let a = Su2Structure::shared(vec![v.clone(), v.dual()], 1)?;
    /// let b = Su2Structure::shared(vec![v.clone(), v.dual()], 1)?;
    /// assert!(Arc::ptr_eq(&a, &b));
    /// # Ok::<(), tessera_blocks::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn shared(legs: Vec<Su2Leg>, n_codomain: usize) -> Result<Arc<Self>, Error> {
        type Cache = LruCache<(Vec<Su2Leg>, usize), Arc<Su2Structure>>;
        static CACHE: OnceLock<Cache> = OnceLock::new();
        let cache = CACHE.get_or_init(|| LruCache::new(STRUCTURE_CACHE_CAPACITY));
        let key = (legs, n_codomain);
        if let Some(s) = cache.get(&key) {
            return Ok(s);
        }
        let built = Arc::new(Self::new(key.0.clone(), n_codomain)?);
        cache.insert(key, Arc::clone(&built));
        Ok(built)
    }

    /// The legs, codomain first.
    pub fn legs(&self) -> &[Su2Leg] {
        &self.legs
    }

    /// How many legs are in the codomain.
    pub fn n_codomain(&self) -> usize {
        self.n_codomain
    }

    /// The codomain legs.
    pub fn codomain(&self) -> &[Su2Leg] {
        &self.legs[..self.n_codomain]
    }

    /// The domain legs.
    pub fn domain(&self) -> &[Su2Leg] {
        &self.legs[self.n_codomain..]
    }

    /// The reduced blocks as an abelian matrix structure (module docs).
    pub fn matrix(&self) -> &Arc<BlockStructure<Su2Label>> {
        &self.matrix
    }

    /// The rows of the reduced matrices (the codomain's couplings), in the order of the
    /// matrix structure's codomain segments.
    pub fn rows(&self) -> &[Coupling] {
        &self.rows
    }

    /// The columns of the reduced matrices (the domain's couplings).
    pub fn cols(&self) -> &[Coupling] {
        &self.cols
    }

    /// The blocks grouped by segment tuple, in increasing tuple order.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The group of a segment tuple (one segment per leg), if it has blocks.
    pub fn group(&self, segments: &[usize]) -> Option<&Group> {
        self.group_of.get(segments).map(|&g| &self.groups[g])
    }

    /// The coupled spin of block `id` of the matrix structure.
    pub fn coupled_of(&self, id: usize) -> Option<u32> {
        let b = self.matrix.block(id)?;
        Some(self.rows[b.segments()[0]].coupled)
    }

    /// The dense dimension of every leg.
    pub fn dense_dims(&self) -> Vec<usize> {
        self.legs.iter().map(Su2Leg::dim).collect()
    }

    /// The spins of a segment tuple, codomain then domain.
    pub(crate) fn spins(&self, segments: &[usize]) -> Vec<u32> {
        segments
            .iter()
            .zip(&self.legs)
            .map(|(&s, l)| l.sectors[s].0)
            .collect()
    }

    /// The multiplicities of a segment tuple.
    pub(crate) fn degs(&self, segments: &[usize]) -> Vec<usize> {
        segments
            .iter()
            .zip(&self.legs)
            .map(|(&s, l)| l.sectors[s].1)
            .collect()
    }

    /// Whether leg `i` is stored through the spin-flip map `epsilon` (see
    /// [`super::recouple`]): an `Out` leg in the codomain or an `In` leg in the domain.
    pub(crate) fn flipped(&self, i: usize) -> bool {
        (i < self.n_codomain) == (self.legs[i].direction == Direction::Out)
    }

    /// A one-line description for error messages.
    pub fn summary(&self) -> String {
        let leg = |l: &Su2Leg| {
            let d = if l.direction == Direction::In {
                "In"
            } else {
                "Out"
            };
            let s: Vec<String> = (l.sectors.iter().zip(&l.charges))
                .map(|(&(j, n), &q)| match q {
                    0 => format!("{j}:{n}"),
                    _ => format!("{j}q{q}:{n}"),
                })
                .collect();
            format!("{d}[{}]", s.join(" "))
        };
        let (c, d): (Vec<String>, Vec<String>) = (
            self.codomain().iter().map(leg).collect(),
            self.domain().iter().map(leg).collect(),
        );
        format!("({}) <- ({})", c.join(", "), d.join(", "))
    }
}
