//! Legs: the index spaces of a tensor, as ordered lists of `(sector, dimension)` segments with
//! a direction.
//!
//! Owns [`Direction`], [`Segment`], [`Leg`] and the map [`FusionMap`] returned by
//! [`Leg::fuse`].
//!
//! Invariants of a [`Leg`]: every segment has dimension at least 1; the segments keep the
//! order they were given in (it is the order of the leg's dense index: segment `i` covers
//! `offset(i) .. offset(i) + dim_i`); the total dimension fits in `usize`; and a *symmetric*
//! leg (made by [`Leg::new`]) carries each sector at most once, while a *tiled* leg (made by
//! [`Leg::tiled`] or [`Leg::tiling`]) may repeat sectors, which is how plain block sparsity
//! (TiledArray, DBCSR: trivial sectors, several tiles) is the same type.
//!
//! # Direction convention
//!
//! A block (one segment per leg) is allowed when the fusion over legs of each leg's
//! *effective sector* equals the tensor's flux, where the effective sector of a segment with
//! label `s` is `s` on an [`In`](Direction::In) leg and `dual(s)` on an
//! [`Out`](Direction::Out) leg. For `U1` this is "sum over legs of `dir * charge == flux`"
//! with `In = +1`, `Out = -1`, the rule of the H_eff data files in `benches/data/`. The dual
//! leg flips the direction and keeps the labels, so a leg and its dual contract: their
//! effective sectors cancel segment by segment.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, try_vec};
use crate::sector::{AbelianSector, Sector};

/// The direction of a leg: [`In`](Direction::In) (`+1`) contributes its sectors to the flux,
/// [`Out`](Direction::Out) (`-1`) contributes their duals.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// Incoming (`+1`): a segment contributes its sector.
    In,
    /// Outgoing (`-1`): a segment contributes the dual of its sector.
    Out,
}

impl Direction {
    /// `+1` for `In`, `-1` for `Out`.
    pub const fn sign(self) -> i32 {
        match self {
            Direction::In => 1,
            Direction::Out => -1,
        }
    }

    /// The direction of a sign (`+1` or `-1`, as in the data files).
    pub fn from_sign(sign: i64) -> Result<Self, Error> {
        match sign {
            1 => Ok(Direction::In),
            -1 => Ok(Direction::Out),
            given => Err(Error::InvalidDirection { given }),
        }
    }

    /// The opposite direction.
    #[must_use]
    pub const fn flip(self) -> Self {
        match self {
            Direction::In => Direction::Out,
            Direction::Out => Direction::In,
        }
    }

    /// The effective sector of label `sector` on a leg of this direction: the sector itself
    /// for `In`, its dual for `Out`.
    pub fn act<S: Sector>(self, sector: &S) -> S {
        match self {
            Direction::In => sector.clone(),
            Direction::Out => sector.dual(),
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::In => "In",
            Direction::Out => "Out",
        })
    }
}

/// One segment of a leg: a sector and the dimension of its degeneracy space.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Segment<S> {
    /// The sector label.
    pub sector: S,
    /// The dimension (at least 1).
    pub dim: usize,
}

#[derive(Debug)]
struct LegData<S> {
    segments: Vec<Segment<S>>,
    /// `offsets[i]` is the start of segment `i`; `offsets[len]` the total dimension.
    offsets: Vec<usize>,
    /// Segment indices sorted by `(sector, index)`, for lookup by sector.
    by_sector: Vec<usize>,
    /// No sector appears twice.
    unique: bool,
}

/// A leg: an ordered list of [`Segment`]s and a [`Direction`].
///
/// Cheap to clone: the segment list is shared, so [`dual`](Leg::dual) and clones into block
/// structures do not copy it.
#[derive(Clone, Debug)]
pub struct Leg<S> {
    direction: Direction,
    data: Arc<LegData<S>>,
}

impl<S: Sector> PartialEq for Leg<S> {
    fn eq(&self, other: &Self) -> bool {
        self.direction == other.direction
            && (Arc::ptr_eq(&self.data, &other.data) || self.data.segments == other.data.segments)
    }
}

impl<S: Sector> Eq for Leg<S> {}

impl<S: Sector> Leg<S> {
    /// A symmetric leg: each sector at most once, every dimension at least 1.
    ///
    /// ```
    /// use tessera_blocks::{Direction, Leg, U1};
    /// let leg = Leg::new(Direction::In, [(U1(-1), 2), (U1(1), 3)])?;
    /// assert_eq!(leg.dim(), 5);
    /// # Ok::<(), tessera_blocks::Error>(())
    /// ```
    pub fn new(
        direction: Direction,
        segments: impl IntoIterator<Item = (S, usize)>,
    ) -> Result<Self, Error> {
        let leg = Self::build(direction, segments)?;
        if !leg.data.unique {
            let idx = &leg.data.by_sector;
            let segs = &leg.data.segments;
            for w in idx.windows(2) {
                if segs[w[0]].sector == segs[w[1]].sector {
                    return Err(Error::RepeatedSector {
                        sector: segs[w[0]].sector.to_string(),
                        first: w[0],
                        second: w[1],
                    });
                }
            }
        }
        Ok(leg)
    }

    /// A tiled leg: like [`new`](Leg::new), but sectors may repeat (several tiles per sector).
    pub fn tiled(
        direction: Direction,
        segments: impl IntoIterator<Item = (S, usize)>,
    ) -> Result<Self, Error> {
        Self::build(direction, segments)
    }

    /// A plain tiling: an `In` leg of trivial-sector segments of the given dimensions (general
    /// block sparsity). Use [`dual`](Leg::dual) for the `Out` leg that contracts with it.
    pub fn tiling(dims: &[usize]) -> Result<Self, Error> {
        Self::build(Direction::In, dims.iter().map(|&d| (S::trivial(), d)))
    }

    fn build(
        direction: Direction,
        segments: impl IntoIterator<Item = (S, usize)>,
    ) -> Result<Self, Error> {
        let segments: Vec<Segment<S>> = segments
            .into_iter()
            .map(|(sector, dim)| Segment { sector, dim })
            .collect();
        let mut offsets = Vec::with_capacity(segments.len() + 1);
        let mut total = 0usize;
        offsets.push(0);
        for (segment, s) in segments.iter().enumerate() {
            if s.dim == 0 {
                return Err(Error::ZeroDimension { segment });
            }
            total = total.checked_add(s.dim).ok_or(Error::Overflow {
                what: "leg dimension",
            })?;
            offsets.push(total);
        }
        let mut by_sector: Vec<usize> = (0..segments.len()).collect();
        by_sector.sort_by(|&a, &b| segments[a].sector.cmp(&segments[b].sector).then(a.cmp(&b)));
        let unique = by_sector
            .windows(2)
            .all(|w| segments[w[0]].sector != segments[w[1]].sector);
        Ok(Leg {
            direction,
            data: Arc::new(LegData {
                segments,
                offsets,
                by_sector,
                unique,
            }),
        })
    }

    /// The direction.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// The dual leg: the direction flipped, the same segments (labels and dimensions).
    #[must_use]
    pub fn dual(&self) -> Self {
        Leg {
            direction: self.direction.flip(),
            data: Arc::clone(&self.data),
        }
    }

    /// The same segments with the given direction.
    #[must_use]
    pub fn with_direction(&self, direction: Direction) -> Self {
        Leg {
            direction,
            data: Arc::clone(&self.data),
        }
    }

    /// The total dimension (sum of the segment dimensions).
    pub fn dim(&self) -> usize {
        self.data.offsets[self.data.segments.len()]
    }

    /// The number of segments.
    pub fn num_segments(&self) -> usize {
        self.data.segments.len()
    }

    /// The segments, in leg order.
    pub fn segments(&self) -> &[Segment<S>] {
        &self.data.segments
    }

    /// The segment `segment`, if in range.
    pub fn segment(&self, segment: usize) -> Option<&Segment<S>> {
        self.data.segments.get(segment)
    }

    /// Whether no sector appears twice (always true for a leg made by [`new`](Leg::new)).
    pub fn has_unique_sectors(&self) -> bool {
        self.data.unique
    }

    /// The segment carrying `sector`, when exactly one segment carries it. `None` when no
    /// segment does, and also when several do (possible on tiled legs; see
    /// [`segments_of`](Leg::segments_of)).
    pub fn segment_of(&self, sector: &S) -> Option<usize> {
        let mut it = self.segments_of(sector);
        match (it.next(), it.next()) {
            (Some(i), None) => Some(i),
            _ => None,
        }
    }

    /// All segments carrying `sector`, in increasing order.
    pub fn segments_of<'a>(&'a self, sector: &'a S) -> impl Iterator<Item = usize> + 'a {
        let d = &*self.data;
        let start = d
            .by_sector
            .partition_point(|&i| d.segments[i].sector < *sector);
        d.by_sector[start..]
            .iter()
            .copied()
            .take_while(move |&i| d.segments[i].sector == *sector)
    }

    /// The start of segment `segment` in the leg's dense index, if in range.
    pub fn offset(&self, segment: usize) -> Option<usize> {
        (segment < self.num_segments()).then(|| self.data.offsets[segment])
    }

    /// The range of segment `segment` in the leg's dense index, if in range.
    pub fn range(&self, segment: usize) -> Option<Range<usize>> {
        (segment < self.num_segments())
            .then(|| self.data.offsets[segment]..self.data.offsets[segment + 1])
    }

    /// The effective sector of segment `segment` (its label on an `In` leg, the dual on an
    /// `Out` leg), if in range.
    pub fn effective_sector(&self, segment: usize) -> Option<S> {
        self.segment(segment).map(|s| self.direction.act(&s.sector))
    }

    /// Checks that `a` and `b` can be contracted: opposite directions, the same number of
    /// segments, and the same sector and dimension segment by segment. The error names the
    /// first offending segment.
    pub fn check_contractible(a: &Self, b: &Self) -> Result<(), Error> {
        if a.direction == b.direction {
            return Err(Error::SameDirection {
                direction: a.direction,
            });
        }
        if a.num_segments() != b.num_segments() {
            return Err(Error::SegmentCountMismatch {
                left: a.num_segments(),
                right: b.num_segments(),
            });
        }
        if Arc::ptr_eq(&a.data, &b.data) {
            return Ok(());
        }
        for (segment, (x, y)) in a.segments().iter().zip(b.segments()).enumerate() {
            if x != y {
                return Err(Error::SegmentMismatch {
                    segment,
                    left_sector: x.sector.to_string(),
                    left_dim: x.dim,
                    right_sector: y.sector.to_string(),
                    right_dim: y.dim,
                });
            }
        }
        Ok(())
    }
}

impl<S: AbelianSector> Leg<S> {
    /// Fuses two legs into one, and maps each pair of segments `(i, j)` to the fused segment
    /// and the offset inside it.
    ///
    /// The fused leg has `a`'s direction, and each pair's label is chosen so that its
    /// effective sector is the fusion of the two effective sectors (so the fused leg conserves
    /// exactly what the pair did). Within a fused segment the pairs are stacked column-major,
    /// `i` fastest: pair `(i, j)` comes before `(i', j')` when `j < j'`, or `j == j'` and
    /// `i < i'`. That is the row order of a two-leg codomain in
    /// [`BlockStructure`](crate::BlockStructure), so fusing legs and building a structure
    /// agree.
    ///
    /// When both legs have unique sectors, pairs with the same fused sector are merged into
    /// one segment, and the fused segments are sorted by sector. Otherwise (tiled legs) the
    /// fused leg is tiled too: one segment per pair, in the order above, each at offset 0.
    ///
    /// Defined for abelian sectors; non-abelian fusion of legs needs fusion trees.
    pub fn fuse(a: &Self, b: &Self) -> Result<(Self, FusionMap), Error> {
        let (na, nb) = (a.num_segments(), b.num_segments());
        let dim_of = |i: usize, j: usize| {
            a.data.segments[i]
                .dim
                .checked_mul(b.data.segments[j].dim)
                .ok_or(Error::Overflow {
                    what: "fused segment dimension",
                })
        };
        let label_of = |i: usize, j: usize| {
            let e = a
                .direction
                .act(&a.data.segments[i].sector)
                .fuse_abelian(&b.direction.act(&b.data.segments[j].sector));
            a.direction.act(&e)
        };
        let pairs = na.checked_mul(nb).ok_or(Error::Overflow {
            what: "number of fused segment pairs",
        })?;
        let mut entries = try_vec(pairs, "fusion map")?;
        if a.has_unique_sectors() && b.has_unique_sectors() {
            let mut labels = try_vec(pairs, "fused segment labels")?;
            let mut totals: BTreeMap<S, usize> = BTreeMap::new();
            for j in 0..nb {
                for i in 0..na {
                    let label = label_of(i, j);
                    let d = dim_of(i, j)?;
                    let t = totals.entry(label.clone()).or_insert(0);
                    *t = t.checked_add(d).ok_or(Error::Overflow {
                        what: "fused segment dimension",
                    })?;
                    labels.push(label);
                }
            }
            let index: BTreeMap<&S, usize> =
                totals.keys().enumerate().map(|(k, s)| (s, k)).collect();
            let mut fill = vec![0usize; totals.len()];
            for (p, label) in labels.iter().enumerate() {
                let (i, j) = (p % na, p / na);
                let k = index[label];
                entries.push((k, fill[k]));
                fill[k] += dim_of(i, j)?;
            }
            let leg = Self::new(a.direction, totals)?;
            Ok((leg, FusionMap { left: na, entries }))
        } else {
            let mut segs = try_vec(pairs, "fused segments")?;
            for j in 0..nb {
                for i in 0..na {
                    entries.push((segs.len(), 0));
                    segs.push((label_of(i, j), dim_of(i, j)?));
                }
            }
            let leg = Self::tiled(a.direction, segs)?;
            Ok((leg, FusionMap { left: na, entries }))
        }
    }
}

/// For a fused leg (see [`Leg::fuse`]): where each pair of input segments went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusionMap {
    left: usize,
    /// Entry for pair `(i, j)` at `i + j * left`.
    entries: Vec<(usize, usize)>,
}

impl FusionMap {
    /// The fused segment of the pair `(i, j)` (segment `i` of the left leg, `j` of the right)
    /// and the offset of the pair's `dim_i * dim_j` range inside it, if both are in range.
    /// Inside that range the pair's index is `x + y * dim_i` (left index fastest).
    pub fn get(&self, i: usize, j: usize) -> Option<(usize, usize)> {
        if i >= self.left {
            return None;
        }
        self.entries.get(i + j * self.left).copied()
    }

    /// The number of segments of the left leg.
    pub fn left_segments(&self) -> usize {
        self.left
    }

    /// The number of segments of the right leg.
    pub fn right_segments(&self) -> usize {
        self.entries.len().checked_div(self.left).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sector::{Product, Trivial, U1, Z2};

    fn u1(dir: Direction, segs: &[(i32, usize)]) -> Leg<U1> {
        Leg::new(dir, segs.iter().map(|&(q, d)| (U1(q), d))).unwrap()
    }

    #[test]
    fn construction_and_queries() {
        let leg = u1(Direction::Out, &[(0, 3), (-2, 1), (2, 1)]);
        assert_eq!(leg.dim(), 5);
        assert_eq!(leg.num_segments(), 3);
        assert_eq!(leg.offset(2), Some(4));
        assert_eq!(leg.offset(3), None);
        assert_eq!(leg.range(0), Some(0..3));
        assert_eq!(leg.segment_of(&U1(-2)), Some(1));
        assert_eq!(leg.segment_of(&U1(5)), None);
        assert_eq!(leg.effective_sector(1), Some(U1(2)));
        assert!(leg.has_unique_sectors());
        let d = leg.dual();
        assert_eq!(d.direction(), Direction::In);
        assert_eq!(d.segments(), leg.segments());
        assert_eq!(d.dual(), leg);
        assert_eq!(Direction::from_sign(-1), Ok(Direction::Out));
        assert_eq!(Direction::Out.sign(), -1);
        assert_eq!(
            Direction::from_sign(0),
            Err(Error::InvalidDirection { given: 0 })
        );
        let empty = Leg::<U1>::new(Direction::In, []).unwrap();
        assert_eq!((empty.dim(), empty.num_segments()), (0, 0));
    }

    #[test]
    fn misuse_is_typed() {
        assert_eq!(
            Leg::new(Direction::In, [(U1(0), 2), (U1(1), 0)]).unwrap_err(),
            Error::ZeroDimension { segment: 1 }
        );
        assert_eq!(
            Leg::new(Direction::In, [(U1(1), 2), (U1(0), 1), (U1(1), 4)]).unwrap_err(),
            Error::RepeatedSector {
                sector: "U1(1)".into(),
                first: 0,
                second: 2
            }
        );
        assert!(matches!(
            Leg::new(Direction::In, [(U1(0), usize::MAX), (U1(1), 1)]),
            Err(Error::Overflow { .. })
        ));
        let t = Leg::<Trivial>::tiling(&[2, 3, 2]).unwrap();
        assert!(!t.has_unique_sectors());
        assert_eq!(t.segment_of(&Trivial), None);
        assert_eq!(t.segments_of(&Trivial).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(
            Leg::<Trivial>::tiling(&[2, 0]).unwrap_err(),
            Error::ZeroDimension { segment: 1 }
        );
    }

    #[test]
    fn contractibility() {
        let a = u1(Direction::In, &[(-1, 2), (1, 3)]);
        assert_eq!(Leg::check_contractible(&a, &a.dual()), Ok(()));
        assert_eq!(
            Leg::check_contractible(&a, &a),
            Err(Error::SameDirection {
                direction: Direction::In
            })
        );
        let b = u1(Direction::Out, &[(-1, 2)]);
        assert_eq!(
            Leg::check_contractible(&a, &b),
            Err(Error::SegmentCountMismatch { left: 2, right: 1 })
        );
        let c = u1(Direction::Out, &[(-1, 2), (1, 4)]);
        let err = Leg::check_contractible(&a, &c).unwrap_err();
        assert_eq!(
            err,
            Error::SegmentMismatch {
                segment: 1,
                left_sector: "U1(1)".into(),
                left_dim: 3,
                right_sector: "U1(1)".into(),
                right_dim: 4
            }
        );
        assert!(err.to_string().contains("segment 1"));
    }

    #[test]
    fn fuse_merges_sectors() {
        let a = u1(Direction::In, &[(-1, 2), (1, 3)]);
        let b = u1(Direction::Out, &[(-1, 1), (1, 2)]);
        let (f, map) = Leg::fuse(&a, &b).unwrap();
        assert_eq!(f.direction(), Direction::In);
        assert_eq!(f.dim(), a.dim() * b.dim());
        // effective: a in {-1, 1}, b in {1, -1}; sums -1+1=0, 1+1=2, -1-1=-2, 1-1=0.
        let secs: Vec<_> = f.segments().iter().map(|s| (s.sector.0, s.dim)).collect();
        assert_eq!(secs, vec![(-2, 4), (0, 2 + 6), (2, 3)]);
        assert_eq!(map.get(0, 0), Some((1, 0)));
        assert_eq!(map.get(1, 1), Some((1, 2)));
        assert_eq!(map.get(1, 0), Some((2, 0)));
        assert_eq!(map.get(0, 1), Some((0, 0)));
        assert_eq!(map.get(2, 0), None);
        assert_eq!((map.left_segments(), map.right_segments()), (2, 2));

        // Out legs fuse with Out direction and labels that keep the effective sector.
        let (g, _) = Leg::fuse(&b, &a).unwrap();
        assert_eq!(g.direction(), Direction::Out);
        for (i, s) in g.segments().iter().enumerate() {
            assert_eq!(g.effective_sector(i), Some(s.sector.dual()));
        }
    }

    #[test]
    fn fuse_products_and_tilings() {
        let a = Leg::new(
            Direction::In,
            [
                (Product(U1(0), Z2::new(0)), 1),
                (Product(U1(1), Z2::new(1)), 2),
            ],
        )
        .unwrap();
        let (f, map) = Leg::fuse(&a, &a).unwrap();
        assert_eq!(f.num_segments(), 3);
        assert_eq!(f.segment_of(&Product(U1(1), Z2::new(1))), Some(1));
        assert_eq!(map.get(1, 0), Some((1, 0)));
        assert_eq!(map.get(0, 1), Some((1, 2)));
        let t = Leg::<Trivial>::tiling(&[2, 3]).unwrap();
        let (ft, mt) = Leg::fuse(&t, &t).unwrap();
        let dims: Vec<_> = ft.segments().iter().map(|s| s.dim).collect();
        assert_eq!(dims, vec![4, 6, 6, 9]);
        assert_eq!(mt.get(0, 1), Some((2, 0)));
    }
}
