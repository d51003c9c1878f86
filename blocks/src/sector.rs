//! Sectors: the labels of irreducible representations that symmetric legs carry.
//!
//! Owns the [`Sector`] trait, its abelian fast path [`AbelianSector`], the fusion-output
//! iterator [`Fusions`], and the built-in sectors [`Trivial`], [`U1`], [`Zn`],
//! [`FermionParity`] and the direct product [`Product`].
//!
//! Invariant: every sector value is a canonical label. Two values are equal exactly when they
//! label the same irrep, so `Eq`, `Ord` and `Hash` can key maps and sort legs (a [`Zn`] value
//! is always reduced into `0..N`; a [`U1`] charge is its integer). [`Sector::encode`] writes
//! that label as a fixed number of `u32` words that do not depend on the platform, the process
//! or the crate version, which is what structure fingerprints hash.
//!
//! # Conventions
//!
//! - Fusion is the group operation for abelian sectors: `U1(a) ⊗ U1(b) = U1(a + b)`,
//!   `Zn(a) ⊗ Zn(b) = Zn((a + b) mod N)`. The dual is the inverse.
//! - Fermion parity is a *grading*, not a separate mechanism: every sector answers
//!   [`Sector::parity`] (`true` = odd = fermionic). Plain bosonic sectors are always even.
//!   [`FermionParity`] is the group Z2 whose odd element is fermionic, and a product's parity
//!   is the xor of its parts' parities, so `Product<U1, FermionParity>` ([`FermionicU1`]) is a
//!   fermion-number-like U1 whose grading lives in the `FermionParity` part. Reordering legs
//!   then costs the sign `(-1)` for every pair of odd legs that cross (see
//!   `BlockStructure::permuted`).
//! - [`U1`] charges are `i32`; fusion wraps on overflow, i.e. the group is realised as
//!   Z_(2^32). Every physical charge (|q| far below 2^30) fuses exactly.
//!
//! # Room for non-abelian sectors
//!
//! Nothing here assumes that fusion has one output. The general interface is
//! [`Sector::fuse`], which yields the list of outputs `c` in `a ⊗ b` (distinct, in increasing
//! order), [`Sector::qdim`] (the quantum dimension) and [`Sector::FUSION`], which says whether
//! fusion is unique ([`FusionStyle::Unique`], abelian), multiplicity free
//! ([`FusionStyle::Simple`], e.g. SU(2)) or general ([`FusionStyle::Generic`], e.g. SU(3)).
//! Abelian sectors additionally implement [`AbelianSector`], whose
//! [`fuse_abelian`](AbelianSector::fuse_abelian) is the allocation-free fast path that the
//! sector-tuple block structures of this crate are built on.
//!
//! SU(2) fits as follows, without changing this trait (the sector and its exact coupling
//! coefficients are [`crate::su2`]; the fusion-tree structures are still to come):
//!
//! - `struct SU2 { two_j: u32 }` implements [`Sector`] with `FUSION = Simple`;
//!   `fuse(j1, j2)` yields `|j1 - j2|, ..., j1 + j2` (a [`Fusions::many`]), `qdim() = 2j + 1`,
//!   `dual()` is the identity (SU(2) irreps are self-dual), `parity()` is `false` (or, for
//!   `Product<SU2, FermionParity>`, the parity part), and `encode` writes `two_j`.
//!   It does *not* implement [`AbelianSector`].
//! - The recoupling data (F-symbols, i.e. 6j symbols; R-symbols for braiding; the
//!   Frobenius-Schur indicators) live in a separate fusion-tree module as extra traits on the
//!   sector (`trait FSymbol: Sector`, `trait Braiding: Sector`), because only the non-abelian
//!   code paths need them; for abelian sectors they are trivially 1 (times the fermionic sign
//!   given by [`Sector::parity`]).
//! - A non-abelian block structure keys its blocks by *fusion-tree pairs* (a splitting tree
//!   from the codomain legs to the coupled sector `c`, a fusion tree from `c` to the domain
//!   legs, with their inner sectors) instead of sector tuples. The sector-major layout keeps
//!   its shape: one dense matrix per coupled sector `c`, whose rows are the codomain trees
//!   ending in `c` and whose columns are the domain trees starting from `c`; the matrices'
//!   sizes are reduced dimensions, without the `qdim` factor. Leg permutations then act by
//!   F- and R-moves on the trees instead of the single sign computed for abelian sectors.

use std::fmt::{self, Debug, Display};
use std::hash::Hash;
use std::iter::FusedIterator;

/// How many outputs fusing two sectors can have, and with which multiplicities.
///
/// Ordered by generality, so the style of a product is the maximum of its parts' styles.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FusionStyle {
    /// Exactly one output: abelian sectors (`Trivial`, `U1`, `Zn`, `FermionParity`, products).
    Unique,
    /// Several outputs, each with multiplicity one (SU(2)).
    Simple,
    /// Several outputs with multiplicities (SU(3) and beyond).
    Generic,
}

impl FusionStyle {
    /// The more general of two styles (the style of a product sector).
    pub const fn max(self, other: Self) -> Self {
        if (self as u8) >= (other as u8) {
            self
        } else {
            other
        }
    }
}

/// A label of an irreducible representation of a symmetry group, carried by the segments of a
/// leg.
///
/// Contract for implementors:
///
/// - `Eq`/`Ord`/`Hash` compare canonical labels (equal exactly when the irrep is the same).
/// - `trivial()` is the unit of fusion: `fuse(trivial, a) = [a]`.
/// - `fuse(a, b)` yields every `c` in `a ⊗ b` once, in increasing order, and at least one.
/// - `dual()` is the irrep with `trivial ∈ a ⊗ dual(a)`; `dual(dual(a)) = a`.
/// - `parity()` is a grading: the parity of any output of `a ⊗ b` is
///   `a.parity() ^ b.parity()`, and `dual` keeps parity.
/// - `encode` writes exactly [`Sector::ENCODED_WORDS`] words, stable across platforms,
///   processes and versions, and injective on labels.
pub trait Sector: Ord + Hash + Clone + Debug + Display + Send + Sync + 'static {
    /// Whether fusion has one output (abelian) or several.
    const FUSION: FusionStyle;

    /// Whether any sector of this type can be odd (fermionic). When `false`, every
    /// [`parity`](Sector::parity) is `false` and permutation signs need not be computed.
    const GRADED: bool;

    /// The number of `u32` words that [`encode`](Sector::encode) writes.
    const ENCODED_WORDS: usize;

    /// The trivial (vacuum) sector: the unit of fusion.
    fn trivial() -> Self;

    /// The dual (conjugate) sector. For abelian sectors, the inverse.
    fn dual(&self) -> Self;

    /// All sectors in the fusion product `self ⊗ other`, distinct and in increasing order.
    fn fuse(&self, other: &Self) -> Fusions<Self>;

    /// The quantum dimension (1 for abelian sectors; `2j + 1` for SU(2) spin `j`).
    fn qdim(&self) -> f64 {
        1.0
    }

    /// Fermion parity: `true` when the sector is odd (fermionic). Bosonic sectors are even.
    fn parity(&self) -> bool;

    /// Appends the compact, stable encoding of this label ([`Sector::ENCODED_WORDS`] words).
    fn encode(&self, out: &mut Vec<u32>);

    /// Whether this is the trivial sector.
    fn is_trivial(&self) -> bool {
        *self == Self::trivial()
    }

    /// Whether fusion is unique for this sector type (abelian).
    fn is_abelian() -> bool {
        matches!(Self::FUSION, FusionStyle::Unique)
    }
}

/// Abelian sectors: fusion has exactly one output. The fast path used to build block
/// structures keyed by sector tuples.
///
/// Implementors must have `FUSION == FusionStyle::Unique` and
/// `fuse(a, b) == [fuse_abelian(a, b)]`.
pub trait AbelianSector: Sector {
    /// The unique output of `self ⊗ other`.
    fn fuse_abelian(&self, other: &Self) -> Self;

    /// The fusion of all `sectors` (the trivial sector for none).
    fn fuse_all<'a, I>(sectors: I) -> Self
    where
        I: IntoIterator<Item = &'a Self>,
    {
        sectors
            .into_iter()
            .fold(Self::trivial(), |acc, s| acc.fuse_abelian(s))
    }
}

/// The outputs of a fusion `a ⊗ b`: one for abelian sectors (no allocation), several for
/// non-abelian ones.
#[derive(Clone, Debug)]
pub struct Fusions<S>(FusionsRepr<S>);

#[derive(Clone, Debug)]
enum FusionsRepr<S> {
    One(Option<S>),
    Many(std::vec::IntoIter<S>),
}

impl<S> Fusions<S> {
    /// The single output of an abelian fusion.
    pub fn one(sector: S) -> Self {
        Self(FusionsRepr::One(Some(sector)))
    }

    /// Several outputs; the caller keeps them distinct and in increasing order.
    pub fn many(sectors: Vec<S>) -> Self {
        Self(FusionsRepr::Many(sectors.into_iter()))
    }
}

impl<S> Fusions<S> {
    /// The output if exactly one is left, otherwise the iterator back.
    pub fn single(self) -> Result<S, Self> {
        match self.0 {
            FusionsRepr::One(Some(s)) => Ok(s),
            FusionsRepr::Many(mut it) if it.len() == 1 => {
                it.next().ok_or(Self(FusionsRepr::One(None)))
            }
            other => Err(Self(other)),
        }
    }
}

impl<S> Iterator for Fusions<S> {
    type Item = S;

    fn next(&mut self) -> Option<S> {
        match &mut self.0 {
            FusionsRepr::One(s) => s.take(),
            FusionsRepr::Many(it) => it.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.0 {
            FusionsRepr::One(s) => usize::from(s.is_some()),
            FusionsRepr::Many(it) => it.len(),
        };
        (n, Some(n))
    }
}

impl<S> ExactSizeIterator for Fusions<S> {}
impl<S> FusedIterator for Fusions<S> {}

/// The trivial symmetry: one sector. Legs of `Trivial` are plain tilings (general block
/// sparsity, as in TiledArray or DBCSR).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Trivial;

impl Display for Trivial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Trivial")
    }
}

impl Sector for Trivial {
    const FUSION: FusionStyle = FusionStyle::Unique;
    const GRADED: bool = false;
    const ENCODED_WORDS: usize = 0;

    fn trivial() -> Self {
        Trivial
    }
    fn dual(&self) -> Self {
        Trivial
    }
    fn fuse(&self, other: &Self) -> Fusions<Self> {
        Fusions::one(self.fuse_abelian(other))
    }
    fn parity(&self) -> bool {
        false
    }
    fn encode(&self, _out: &mut Vec<u32>) {}
}

impl AbelianSector for Trivial {
    fn fuse_abelian(&self, _other: &Self) -> Self {
        Trivial
    }
}

/// A U(1) charge (particle number, `2 Sz`, ...). Bosonic.
///
/// Fusion adds charges with wrapping arithmetic (the group is realised as Z_(2^32)); the dual
/// negates.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct U1(pub i32);

impl Display for U1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "U1({})", self.0)
    }
}

impl Sector for U1 {
    const FUSION: FusionStyle = FusionStyle::Unique;
    const GRADED: bool = false;
    const ENCODED_WORDS: usize = 1;

    fn trivial() -> Self {
        U1(0)
    }
    fn dual(&self) -> Self {
        U1(self.0.wrapping_neg())
    }
    fn fuse(&self, other: &Self) -> Fusions<Self> {
        Fusions::one(self.fuse_abelian(other))
    }
    fn parity(&self) -> bool {
        false
    }
    fn encode(&self, out: &mut Vec<u32>) {
        out.push(u32::from_le_bytes(self.0.to_le_bytes()));
    }
}

impl AbelianSector for U1 {
    fn fuse_abelian(&self, other: &Self) -> Self {
        U1(self.0.wrapping_add(other.0))
    }
}

/// A Z_N charge, `N >= 1` (a compile-time error otherwise). Bosonic.
///
/// The value is kept reduced into `0..N`, so equal charges compare equal.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Zn<const N: u32>(u32);

/// Z2 as a bosonic charge (spin-flip or reflection parity). For fermion parity use
/// [`FermionParity`].
pub type Z2 = Zn<2>;

impl<const N: u32> Zn<N> {
    const NONZERO: () = assert!(N >= 1, "Zn<N> needs N >= 1");

    /// The charge `value mod N`.
    pub const fn new(value: u32) -> Self {
        let () = Self::NONZERO;
        Self(value % N)
    }

    /// The charge `value mod N` for a signed value (so `Zn::<3>::from_signed(-1) == Zn::new(2)`).
    pub const fn from_signed(value: i64) -> Self {
        let () = Self::NONZERO;
        Self(value.rem_euclid(N as i64) as u32)
    }

    /// The representative in `0..N`.
    pub const fn value(self) -> u32 {
        self.0
    }
}

impl<const N: u32> Display for Zn<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Z{N}({})", self.0)
    }
}

impl<const N: u32> Sector for Zn<N> {
    const FUSION: FusionStyle = FusionStyle::Unique;
    const GRADED: bool = false;
    const ENCODED_WORDS: usize = 1;

    fn trivial() -> Self {
        Self::new(0)
    }
    fn dual(&self) -> Self {
        Self::new((N - self.0) % N)
    }
    fn fuse(&self, other: &Self) -> Fusions<Self> {
        Fusions::one(self.fuse_abelian(other))
    }
    fn parity(&self) -> bool {
        false
    }
    fn encode(&self, out: &mut Vec<u32>) {
        out.push(self.0);
    }
}

impl<const N: u32> AbelianSector for Zn<N> {
    fn fuse_abelian(&self, other: &Self) -> Self {
        // Both values are < N <= u32::MAX, so the sum fits in u64.
        Self(((u64::from(self.0) + u64::from(other.0)) % u64::from(N)) as u32)
    }
}

/// Fermion parity: the group Z2 whose odd element is fermionic. The grading of fermionic
/// sectors; combine with a charge as `Product<U1, FermionParity>` ([`FermionicU1`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FermionParity(bool);

impl FermionParity {
    /// The even (bosonic) sector.
    pub const EVEN: Self = Self(false);
    /// The odd (fermionic) sector.
    pub const ODD: Self = Self(true);

    /// The sector of the given parity (`true` = odd).
    pub const fn new(odd: bool) -> Self {
        Self(odd)
    }

    /// Whether this is the odd sector.
    pub const fn is_odd(self) -> bool {
        self.0
    }
}

impl Display for FermionParity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0 { "odd" } else { "even" })
    }
}

impl Sector for FermionParity {
    const FUSION: FusionStyle = FusionStyle::Unique;
    const GRADED: bool = true;
    const ENCODED_WORDS: usize = 1;

    fn trivial() -> Self {
        Self::EVEN
    }
    fn dual(&self) -> Self {
        *self
    }
    fn fuse(&self, other: &Self) -> Fusions<Self> {
        Fusions::one(self.fuse_abelian(other))
    }
    fn parity(&self) -> bool {
        self.0
    }
    fn encode(&self, out: &mut Vec<u32>) {
        out.push(u32::from(self.0));
    }
}

impl AbelianSector for FermionParity {
    fn fuse_abelian(&self, other: &Self) -> Self {
        Self(self.0 ^ other.0)
    }
}

/// The direct product of two symmetries: `U1 x U1`, `U1 x Z2`, and, with a
/// [`FermionParity`] part, graded (fermionic) sectors. Nest for more factors:
/// `Product<U1, Product<U1, FermionParity>>`.
///
/// Fusion and dual act componentwise; the parity is the xor of the parts' parities; the order
/// is lexicographic (first part first).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Product<A, B>(pub A, pub B);

/// A fermionic U(1) charge (particle number) graded by fermion parity. Keep the parity part
/// equal to the charge's parity (`Product(U1(n), FermionParity::new(n % 2 != 0))`) for the
/// usual fermion-number symmetry; the library does not impose it.
pub type FermionicU1 = Product<U1, FermionParity>;

impl<A: Display, B: Display> Display for Product<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.0, self.1)
    }
}

impl<A: Sector, B: Sector> Sector for Product<A, B> {
    const FUSION: FusionStyle = A::FUSION.max(B::FUSION);
    const GRADED: bool = A::GRADED || B::GRADED;
    const ENCODED_WORDS: usize = A::ENCODED_WORDS + B::ENCODED_WORDS;

    fn trivial() -> Self {
        Product(A::trivial(), B::trivial())
    }
    fn dual(&self) -> Self {
        Product(self.0.dual(), self.1.dual())
    }
    fn fuse(&self, other: &Self) -> Fusions<Self> {
        match (
            self.0.fuse(&other.0).single(),
            self.1.fuse(&other.1).single(),
        ) {
            (Ok(a), Ok(b)) => Fusions::one(Product(a, b)),
            (left, right) => {
                let left = left.map_or_else(Iterator::collect, |a| vec![a]);
                let right: Vec<B> = right.map_or_else(Iterator::collect, |b| vec![b]);
                // Lexicographic order of increasing parts is increasing in `Product`'s order.
                let all = left
                    .into_iter()
                    .flat_map(|a| right.iter().map(move |b| Product(a.clone(), b.clone())))
                    .collect();
                Fusions::many(all)
            }
        }
    }
    fn qdim(&self) -> f64 {
        self.0.qdim() * self.1.qdim()
    }
    fn parity(&self) -> bool {
        self.0.parity() ^ self.1.parity()
    }
    fn encode(&self, out: &mut Vec<u32>) {
        self.0.encode(out);
        self.1.encode(out);
    }
}

impl<A: AbelianSector, B: AbelianSector> AbelianSector for Product<A, B> {
    fn fuse_abelian(&self, other: &Self) -> Self {
        Product(self.0.fuse_abelian(&other.0), self.1.fuse_abelian(&other.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group_laws<S: AbelianSector>(samples: &[S]) {
        assert_eq!(S::FUSION, FusionStyle::Unique);
        for a in samples {
            assert_eq!(a.fuse_abelian(&S::trivial()), *a);
            assert!(a.fuse_abelian(&a.dual()).is_trivial());
            assert_eq!(a.dual().dual(), *a);
            assert_eq!(a.dual().parity(), a.parity());
            assert_eq!(a.qdim(), 1.0);
            let mut words = Vec::new();
            a.encode(&mut words);
            assert_eq!(words.len(), S::ENCODED_WORDS);
            if !S::GRADED {
                assert!(!a.parity());
            }
            for b in samples {
                let c = a.fuse_abelian(b);
                assert_eq!(c, b.fuse_abelian(a));
                assert_eq!(a.fuse(b).collect::<Vec<_>>(), vec![c.clone()]);
                assert_eq!(c.parity(), a.parity() ^ b.parity());
                let mut wb = Vec::new();
                b.encode(&mut wb);
                assert_eq!(words == wb, a == b, "encoding must be injective");
                for d in samples {
                    assert_eq!(c.fuse_abelian(d), a.fuse_abelian(&b.fuse_abelian(d)));
                }
            }
        }
    }

    #[test]
    fn abelian_group_laws() {
        group_laws(&[Trivial]);
        group_laws(&[U1(0), U1(1), U1(-3), U1(7)]);
        group_laws(&(0..3).map(Zn::<3>::new).collect::<Vec<_>>());
        group_laws(&[FermionParity::EVEN, FermionParity::ODD]);
        let mut uu = Vec::new();
        for a in -1..=1 {
            for b in -1..=1 {
                uu.push(Product(U1(a), U1(b)));
            }
        }
        group_laws(&uu);
        let uz: Vec<_> = (-2..=2)
            .flat_map(|q| (0..2).map(move |z| Product(U1(q), Z2::new(z))))
            .collect();
        group_laws(&uz);
        let fu: Vec<FermionicU1> = (-2..=2)
            .map(|n| Product(U1(n), FermionParity::new(n % 2 != 0)))
            .collect();
        group_laws(&fu);
    }

    #[test]
    fn zn_reduces_and_displays() {
        assert_eq!(Zn::<3>::new(5), Zn::<3>::new(2));
        assert_eq!(Zn::<3>::from_signed(-1).value(), 2);
        assert_eq!(Zn::<3>::new(1).dual().value(), 2);
        assert_eq!(Zn::<1>::new(9).value(), 0);
        assert_eq!(Zn::<3>::new(2).to_string(), "Z3(2)");
        assert_eq!(
            Product(U1(1), FermionParity::ODD).to_string(),
            "(U1(1), odd)"
        );
        assert_eq!(
            Zn::<{ u32::MAX }>::new(u32::MAX - 1)
                .fuse_abelian(&Zn::new(3))
                .value(),
            2
        );
    }

    #[test]
    fn grading_and_styles() {
        const { assert!(!<Product<U1, U1> as Sector>::GRADED) };
        const { assert!(<FermionicU1 as Sector>::GRADED) };
        assert_eq!(<Product<U1, Z2> as Sector>::ENCODED_WORDS, 2);
        assert!(Product(U1(3), FermionParity::ODD).parity());
        assert!(
            !Product(FermionParity::ODD, FermionParity::ODD).parity(),
            "parity of a product is the xor of its parts"
        );
        assert_eq!(
            FusionStyle::Unique.max(FusionStyle::Simple),
            FusionStyle::Simple
        );
        assert!(<Product<U1, Zn<4>> as Sector>::is_abelian());
        assert_eq!(U1(i32::MAX).fuse_abelian(&U1(1)), U1(i32::MIN));
        assert_eq!(U1::fuse_all(&[U1(1), U1(2), U1(-5)]), U1(-2));
    }

    /// A toy multiplicity-free sector (SU(2) spins, `two_j`), to check that the generic
    /// interface carries non-abelian fusion through products.
    #[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    struct Spin(u32);
    impl Display for Spin {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "j={}/2", self.0)
        }
    }
    impl Sector for Spin {
        const FUSION: FusionStyle = FusionStyle::Simple;
        const GRADED: bool = false;
        const ENCODED_WORDS: usize = 1;
        fn trivial() -> Self {
            Spin(0)
        }
        fn dual(&self) -> Self {
            *self
        }
        fn fuse(&self, o: &Self) -> Fusions<Self> {
            let lo = self.0.abs_diff(o.0);
            Fusions::many((lo..=self.0 + o.0).step_by(2).map(Spin).collect())
        }
        fn qdim(&self) -> f64 {
            f64::from(self.0 + 1)
        }
        fn parity(&self) -> bool {
            false
        }
        fn encode(&self, out: &mut Vec<u32>) {
            out.push(self.0);
        }
    }

    #[test]
    fn non_abelian_fits_the_trait() {
        let s = Product(Spin(1), FermionParity::ODD);
        assert_eq!(
            <Product<Spin, FermionParity> as Sector>::FUSION,
            FusionStyle::Simple
        );
        let out: Vec<_> = s.fuse(&s).collect();
        assert_eq!(
            out,
            vec![
                Product(Spin(0), FermionParity::EVEN),
                Product(Spin(2), FermionParity::EVEN)
            ]
        );
        assert_eq!(s.qdim(), 2.0);
        let total: f64 = out.iter().map(Sector::qdim).sum();
        assert_eq!(total, s.qdim() * s.qdim());
    }
}
