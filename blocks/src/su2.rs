//! SU(2): the spin sector and its exact recoupling coefficients.
//!
//! Owns: the sector [`SU2`] (spin `j` stored as `2j`), the exact numbers [`SqrtRational`]
//! (`±sqrt(p/q)`, the form every SU(2) coupling coefficient takes), the Clebsch-Gordan
//! coefficients [`clebsch_gordan`], the Wigner 6j symbols [`six_j`], the recoupling
//! (F) and braiding (R) symbols built on them ([`f_symbol`], [`r_symbol`]), and the
//! process-wide cache they are served from ([`coefficient_cache_stats`]); splitting trees and
//! the permutation transformers acting on them are in [`tree`].
//!
//! Invariants:
//!
//! - Every coefficient is computed exactly, by Racah's formulas in arbitrary-precision
//!   rational arithmetic (the sums are rational; each coefficient is a sign times the square
//!   root of a rational), then cached: the same arguments give the same value, bit for bit,
//!   in every process, whatever was asked before.
//! - Conventions are Condon-Shortley's: `<j1 j1; j2 (J - j1) | J J>` is positive, and
//!   coupled states are `|(j1 j2) J M> = sum <j1 m1; j2 m2 | J M> |j1 m1> |j2 m2>`.
//! - Arguments that break a selection rule (a triangle, `m1 + m2 = M`, `|m| <= j`, integer
//!   steps) give exactly zero, not an error.

use crate::sector::{FusionStyle, Fusions, Sector};
use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive, Zero};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

/// A spin `j` (an irrep of SU(2), dimension `2j + 1`), stored as `two_j = 2j`.
///
/// Fusion is multiplicity free (`j1 ⊗ j2 = |j1 - j2| ⊕ ... ⊕ (j1 + j2)`), every irrep is
/// self-dual, and spins are bosonic (a fermionic spin is `Product<SU2, FermionParity>`).
///
/// ```
/// use tessera_blocks::{Product, Sector, U1, su2::SU2};
///
/// let half = SU2::half(1);
/// let out: Vec<SU2> = half.fuse(&half).collect();
/// assert_eq!(out, [SU2::spin(0), SU2::spin(1)]);
/// assert_eq!(SU2::spin(1).qdim(), 3.0);
/// // SU(2) x U(1) (spin and charge, Hubbard-type models): outputs pair up.
/// let e = Product(SU2::half(1), U1(1));
/// let pair: Vec<_> = e.fuse(&e).collect();
/// assert_eq!(pair, [Product(SU2::spin(0), U1(2)), Product(SU2::spin(1), U1(2))]);
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SU2 {
    two_j: u32,
}

impl SU2 {
    /// Spin `j` for an integer `j`.
    pub const fn spin(j: u32) -> Self {
        Self { two_j: 2 * j }
    }

    /// Spin `two_j / 2` (any non-negative `two_j`: `half(1)` is spin one half).
    pub const fn half(two_j: u32) -> Self {
        Self { two_j }
    }

    /// `2j`.
    pub const fn two_j(self) -> u32 {
        self.two_j
    }

    /// The dimension of the irrep, `2j + 1`.
    pub const fn dim(self) -> usize {
        self.two_j as usize + 1
    }
}

impl fmt::Display for SU2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.two_j.is_multiple_of(2) {
            write!(f, "j={}", self.two_j / 2)
        } else {
            write!(f, "j={}/2", self.two_j)
        }
    }
}

impl Sector for SU2 {
    const FUSION: FusionStyle = FusionStyle::Simple;
    const GRADED: bool = false;
    const ENCODED_WORDS: usize = 1;

    fn trivial() -> Self {
        Self::spin(0)
    }

    fn dual(&self) -> Self {
        *self
    }

    fn fuse(&self, other: &Self) -> Fusions<Self> {
        let lo = self.two_j.abs_diff(other.two_j);
        let hi = self.two_j + other.two_j;
        Fusions::many((lo..=hi).step_by(2).map(Self::half).collect())
    }

    fn qdim(&self) -> f64 {
        f64::from(self.two_j) + 1.0
    }

    fn parity(&self) -> bool {
        false
    }

    fn encode(&self, out: &mut Vec<u32>) {
        out.push(self.two_j);
    }
}

/// An exact real number `sign * sqrt(square)` with `square` a non-negative rational: the
/// form of every SU(2) coupling coefficient.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SqrtRational {
    negative: bool,
    square: BigRational,
}

impl SqrtRational {
    /// Zero.
    pub fn zero() -> Self {
        Self {
            negative: false,
            square: BigRational::zero(),
        }
    }

    /// `sign * sqrt(num / den)` (`den > 0`, `num >= 0`).
    ///
    /// # Panics
    ///
    /// When `den` is zero.
    pub fn new(negative: bool, num: u64, den: u64) -> Self {
        let square = BigRational::new(BigInt::from(num), BigInt::from(den));
        Self {
            negative: negative && !square.is_zero(),
            square,
        }
    }

    /// `sign * sqrt(square)` from a rational `square >= 0`.
    fn from_parts(negative: bool, square: BigRational) -> Self {
        Self {
            negative: negative && !square.is_zero(),
            square,
        }
    }

    /// Whether it is exactly zero.
    pub fn is_zero(&self) -> bool {
        self.square.is_zero()
    }

    /// Whether it is negative.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// Its square, `num / den` in lowest terms (as decimal strings: they may exceed any
    /// machine integer).
    pub fn square(&self) -> (String, String) {
        (
            self.square.numer().to_string(),
            self.square.denom().to_string(),
        )
    }

    /// The nearest `f64` (from the exact square, so correctly rounded up to the square
    /// root's own rounding).
    pub fn to_f64(&self) -> f64 {
        let s = self.square.to_f64().unwrap_or(f64::NAN).sqrt();
        if self.negative { -s } else { s }
    }
}

/// `n!` for small `n`, memoised (the formulas below need factorials up to about
/// `2 (j1 + j2 + j3) + 1`).
fn factorial(n: i64) -> BigInt {
    static TABLE: OnceLock<RwLock<Vec<BigInt>>> = OnceLock::new();
    let table = TABLE.get_or_init(|| RwLock::new(vec![BigInt::one()]));
    let n = usize::try_from(n).expect("a factorial of a non-negative number");
    if let Some(f) = table.read().expect("the factorial table").get(n) {
        return f.clone();
    }
    let mut t = table.write().expect("the factorial table");
    while t.len() <= n {
        let k = t.len();
        let next = &t[k - 1] * BigInt::from(k);
        t.push(next);
    }
    t[n].clone()
}

/// Whether `two_a, two_b, two_c` (twice three spins) obey the triangle rule with an integer
/// sum.
fn triangle(a: i64, b: i64, c: i64) -> bool {
    a >= 0 && b >= 0 && c >= 0 && (a + b + c) % 2 == 0 && c <= a + b && c >= (a - b).abs()
}

/// Racah's triangle coefficient `(a+b-c)! (a-b+c)! (-a+b+c)! / (a+b+c+1)!` of twice-spins.
fn delta(a: i64, b: i64, c: i64) -> BigRational {
    let f = |x: i64| factorial(x / 2);
    BigRational::new(
        f(a + b - c) * f(a - b + c) * f(-a + b + c),
        factorial((a + b + c) / 2 + 1),
    )
}

/// `sqrt(prefactor) * sum_k (-1)^k term(k)` over `range`: the shape of Racah's formulas
/// (the prefactor a rational under the root, the alternating sum rational).
fn racah(
    prefactor: BigRational,
    range: std::ops::RangeInclusive<i64>,
    term: impl Fn(i64) -> BigRational,
) -> SqrtRational {
    let mut sum = BigRational::zero();
    for k in range {
        if k % 2 == 0 {
            sum += term(k);
        } else {
            sum -= term(k);
        }
    }
    SqrtRational::from_parts(sum.is_negative(), prefactor * &sum * &sum)
}

/// Hits and misses of the coefficient cache ([`coefficient_cache_stats`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CoefficientCacheStats {
    /// Coefficients served from the cache.
    pub hits: u64,
    /// Coefficients computed (and then cached).
    pub misses: u64,
    /// Coefficients held.
    pub len: usize,
}

type Key = (u8, [i64; 6]);

struct Cache {
    map: RwLock<HashMap<Key, SqrtRational>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Cache {
        map: RwLock::new(HashMap::new()),
        hits: AtomicU64::new(0),
        misses: AtomicU64::new(0),
    })
}

/// The cached value of `key`, computed by `f` on a miss (outside the lock: two threads
/// missing at once compute the same exact value).
fn cached(key: Key, f: impl FnOnce() -> SqrtRational) -> SqrtRational {
    let c = cache();
    if let Some(v) = c.map.read().expect("the coefficient cache").get(&key) {
        c.hits.fetch_add(1, Ordering::Relaxed);
        return v.clone();
    }
    c.misses.fetch_add(1, Ordering::Relaxed);
    let v = f();
    c.map
        .write()
        .expect("the coefficient cache")
        .insert(key, v.clone());
    v
}

/// The coefficient cache's counters and size, process-wide.
pub fn coefficient_cache_stats() -> CoefficientCacheStats {
    let c = cache();
    CoefficientCacheStats {
        hits: c.hits.load(Ordering::Relaxed),
        misses: c.misses.load(Ordering::Relaxed),
        len: c.map.read().expect("the coefficient cache").len(),
    }
}

/// The Clebsch-Gordan coefficient `<j1 m1; j2 m2 | J M>`, all arguments twice their value
/// (`two_m1` for `2 m1`), exact and cached; zero where a selection rule fails.
///
/// ```
/// use tessera_blocks::su2::clebsch_gordan;
///
/// // Two spins one half into the singlet: <1/2 1/2; 1/2 -1/2 | 0 0> = 1/sqrt(2).
/// let c = clebsch_gordan(1, 1, 1, -1, 0, 0);
/// assert_eq!(c.square(), ("1".to_string(), "2".to_string()));
/// assert!(!c.is_negative());
/// assert!((clebsch_gordan(1, -1, 1, 1, 0, 0).to_f64() + 0.5f64.sqrt()).abs() < 1e-15);
/// ```
pub fn clebsch_gordan(
    two_j1: u32,
    two_m1: i32,
    two_j2: u32,
    two_m2: i32,
    two_j: u32,
    two_m: i32,
) -> SqrtRational {
    let (j1, m1, j2, m2, j, m) = (
        i64::from(two_j1),
        i64::from(two_m1),
        i64::from(two_j2),
        i64::from(two_m2),
        i64::from(two_j),
        i64::from(two_m),
    );
    let in_range = |j: i64, m: i64| m.abs() <= j && (j - m) % 2 == 0;
    if m1 + m2 != m
        || !triangle(j1, j2, j)
        || !in_range(j1, m1)
        || !in_range(j2, m2)
        || !in_range(j, m)
    {
        return SqrtRational::zero();
    }
    cached((0, [j1, m1, j2, m2, j, m]), || {
        let f = |x: i64| factorial(x / 2);
        // Racah's formula, every quantity halved from the twice-spins (all integers here).
        let prefactor = BigRational::new(
            BigInt::from(j + 1)
                * f(j1 + j2 - j)
                * f(j1 - j2 + j)
                * f(-j1 + j2 + j)
                * f(j + m)
                * f(j - m)
                * f(j1 - m1)
                * f(j1 + m1)
                * f(j2 - m2)
                * f(j2 + m2),
            f(j1 + j2 + j + 2),
        );
        let lo = 0.max((j2 - j - m1) / 2).max((j1 - j + m2) / 2);
        let hi = ((j1 + j2 - j) / 2).min((j1 - m1) / 2).min((j2 + m2) / 2);
        racah(prefactor, lo..=hi, |k| {
            let den = factorial(k)
                * factorial((j1 + j2 - j) / 2 - k)
                * factorial((j1 - m1) / 2 - k)
                * factorial((j2 + m2) / 2 - k)
                * factorial((j - j2 + m1) / 2 + k)
                * factorial((j - j1 - m2) / 2 + k);
            BigRational::new(BigInt::one(), den)
        })
    })
}

/// The Wigner 6j symbol `{j1 j2 j3; j4 j5 j6}`, all arguments twice their value, exact and
/// cached; zero where a triangle fails.
///
/// ```
/// use tessera_blocks::su2::six_j;
///
/// // {j1 j2 j3; 0 j3 j2} = (-1)^(j1 + j2 + j3) / sqrt((2 j2 + 1)(2 j3 + 1)).
/// let s = six_j(0, 1, 1, 0, 1, 1); // {0 1/2 1/2; 0 1/2 1/2}
/// assert_eq!(s.square(), ("1".to_string(), "4".to_string()));
/// assert!(s.is_negative());
/// assert!(!six_j(2, 1, 1, 0, 1, 1).is_negative()); // {1 1/2 1/2; 0 1/2 1/2} = +1/2
/// ```
pub fn six_j(
    two_j1: u32,
    two_j2: u32,
    two_j3: u32,
    two_j4: u32,
    two_j5: u32,
    two_j6: u32,
) -> SqrtRational {
    let [a, b, c, d, e, f] = [two_j1, two_j2, two_j3, two_j4, two_j5, two_j6].map(i64::from);
    let triads = [(a, b, c), (a, e, f), (d, b, f), (d, e, c)];
    if !triads.iter().all(|&(x, y, z)| triangle(x, y, z)) {
        return SqrtRational::zero();
    }
    cached((1, [a, b, c, d, e, f]), || {
        let prefactor = triads
            .iter()
            .fold(BigRational::one(), |p, &(x, y, z)| p * delta(x, y, z));
        let alphas = triads.map(|(x, y, z)| (x + y + z) / 2);
        let betas = [
            (a + b + d + e) / 2,
            (b + c + e + f) / 2,
            (c + a + f + d) / 2,
        ];
        let lo = *alphas.iter().max().expect("four triads");
        let hi = *betas.iter().min().expect("three sums");
        racah(prefactor, lo..=hi, |t| {
            let den = alphas.iter().map(|&x| factorial(t - x)).product::<BigInt>()
                * betas.iter().map(|&x| factorial(x - t)).product::<BigInt>();
            BigRational::new(factorial(t + 1), den)
        })
    })
}

/// The recoupling (F) symbol `F^{a b c}_d[e, f]`: the coefficient of the tree
/// `((a b) e c) d` in `(a (b c) f) d`, for spins with the Condon-Shortley coupled states
/// above, `(-1)^(a + b + c + d) sqrt((2e + 1)(2f + 1)) {a b e; c d f}`. All arguments twice
/// their value; exact and cached.
///
/// ```
/// use tessera_blocks::su2::f_symbol;
///
/// // Three spins one half into total spin one half: the F-move is a 2 x 2 rotation.
/// let f = |e, g| f_symbol(1, 1, 1, 1, e, g).to_f64();
/// let (a, b, c, d) = (f(0, 0), f(0, 2), f(2, 0), f(2, 2));
/// assert!((a * a + b * b - 1.0).abs() < 1e-15 && (a * c + b * d).abs() < 1e-15);
/// ```
pub fn f_symbol(
    two_a: u32,
    two_b: u32,
    two_c: u32,
    two_d: u32,
    two_e: u32,
    two_f: u32,
) -> SqrtRational {
    let s = six_j(two_a, two_b, two_e, two_c, two_d, two_f);
    if s.is_zero() {
        return s;
    }
    let weight = BigRational::from_integer(BigInt::from(
        (u64::from(two_e) + 1) * (u64::from(two_f) + 1),
    ));
    let odd = ((two_a + two_b + two_c + two_d) / 2) % 2 == 1;
    SqrtRational::from_parts(s.negative ^ odd, s.square * weight)
}

/// The braiding (R) symbol `R^{a b}_c = (-1)^(a + b - c)`: exchanging two spins coupled to
/// `c` (arguments twice their value; `None` when `c` is not in `a ⊗ b`).
pub fn r_symbol(two_a: u32, two_b: u32, two_c: u32) -> Option<i8> {
    let (a, b, c) = (i64::from(two_a), i64::from(two_b), i64::from(two_c));
    triangle(a, b, c).then_some(if ((a + b - c) / 2) % 2 == 0 { 1 } else { -1 })
}

mod permute;
pub mod recouple;
mod structure;
mod tensor;
pub mod tree;

pub use permute::permutation_cache_stats;
pub use recouple::{Recoupling, RecouplingKey, recoupling_cache_stats};
pub use structure::{
    BasisElement, Coupling, Group, STRUCTURE_CACHE_CAPACITY, Su2Label, Su2Leg, Su2Structure,
    local_basis,
};
pub use tensor::Su2Tensor;
pub use tessera_core::CacheStats;

#[cfg(test)]
mod tests;
