//! Leg permutations of SU(2) tensor maps as fixed linear maps on tree pairs, computed once
//! per segment-tuple shape and shared.
//!
//! Owns: [`Recoupling`] (the matrix that takes a segment tuple's reduced blocks to those of
//! the permuted tuple), its process-wide cache (a bounded [`tessera_core::LruCache`]:
//! [`Recoupling::of`], [`recoupling_cache_stats`]), the dense form of a basis element ([`basis_dense`]) and the
//! spin flip `epsilon`. Invariants:
//!
//! - A tensor is stored through `epsilon` on its *flipped* legs (an `Out` leg in the codomain,
//!   an `In` leg in the domain): a dual space is carried as the space it is isomorphic to,
//!   `epsilon[m, m'] = (-1)^(j - m) delta(m, -m')`, which intertwines the conjugate
//!   representation with the representation. Then every block pairs a splitting tree with a
//!   fusion tree, and composing two maps is a plain matrix product per coupled spin.
//! - A permutation (with a new split) is exact on the dense tensor: the recoupling is the
//!   change of basis from the tree pairs of the old tuple (old legs, old split, old flips)
//!   to those of the new, `W[o, i] = <B'_o, P(B_i)> / (2c' + 1)`, where `P` permutes the axes
//!   and flips the legs whose flip changes. The basis elements are orthogonal with squared
//!   norm `2c + 1`, so `W` is orthogonal in those weights (the test below checks it).
//! - The coefficients are computed in `f64` from the exact Clebsch-Gordan coefficients of
//!   [`super::clebsch_gordan`] (through the trees' dense forms); values below `1e-13` in
//!   magnitude are exact zeros, dropped. A recoupling is computed on first use and shared
//!   while the cache holds it: the same arguments give the same matrix, bit for bit, whether
//!   computed or served.

use super::structure::{BasisElement, local_basis};
use super::tree::FusionTree;
use std::sync::{Arc, OnceLock};
use tessera_backends::Scalar;
use tessera_core::{CacheStats, LruCache};

/// Below this a computed coefficient is an exact zero that rounding left behind.
const ZERO: f64 = 1e-13;

/// The change of basis one leg permutation makes on the reduced blocks of one segment-tuple
/// shape (the legs' spins, the split, the flips).
#[derive(Debug)]
pub struct Recoupling {
    /// The tree pairs of the old tuple (the columns), in [`local_basis`] order.
    pub input: Vec<BasisElement>,
    /// The tree pairs of the permuted tuple (the rows).
    pub output: Vec<BasisElement>,
    /// Per output element, its nonzero coefficients `(input element, value)`.
    pub terms: Vec<Vec<(usize, f64)>>,
}

/// What a recoupling depends on: the old spins (codomain, domain), the permutation (new leg
/// `i` is old leg `perm[i]`), the new codomain size, and per old leg whether it was flipped
/// and whether it is flipped after.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RecouplingKey {
    /// The old legs' spins (`two_j`), codomain then domain.
    pub spins: Vec<u32>,
    /// The old codomain size.
    pub n_codomain: usize,
    /// New leg `i` is old leg `perm[i]`.
    pub perm: Vec<usize>,
    /// The new codomain size.
    pub new_n_codomain: usize,
    /// Per old leg: flipped before.
    pub flipped: Vec<bool>,
    /// Per old leg: flipped after.
    pub new_flipped: Vec<bool>,
}

/// The most recouplings the cache holds; the least recently used one goes first.
const CAPACITY: usize = 1 << 16;

fn cache() -> &'static LruCache<RecouplingKey, Arc<Recoupling>> {
    static CACHE: OnceLock<LruCache<RecouplingKey, Arc<Recoupling>>> = OnceLock::new();
    CACHE.get_or_init(|| LruCache::new(CAPACITY))
}

/// The recoupling cache's counters.
pub fn recoupling_cache_stats() -> CacheStats {
    cache().stats()
}

impl Recoupling {
    /// The recoupling of `key`, computed on first use and shared after.
    ///
    /// # Panics
    ///
    /// When `key.perm` is not a permutation of the legs or a split exceeds them (the callers
    /// check both).
    pub fn of(key: &RecouplingKey) -> Arc<Recoupling> {
        if let Some(r) = cache().get(key) {
            return r;
        }
        let r = Arc::new(Self::new(key));
        cache().insert(key.clone(), Arc::clone(&r));
        r
    }

    /// The recoupling of `key`, computed now, without the cache: what a cache miss of
    /// [`of`](Self::of) costs (the benches time it).
    ///
    /// # Panics
    ///
    /// As [`of`](Self::of).
    pub fn new(key: &RecouplingKey) -> Self {
        let n = key.spins.len();
        assert!(key.perm.len() == n && key.n_codomain <= n && key.new_n_codomain <= n);
        let (cod, dom) = key.spins.split_at(key.n_codomain);
        let new_spins: Vec<u32> = key.perm.iter().map(|&p| key.spins[p]).collect();
        let (new_cod, new_dom) = new_spins.split_at(key.new_n_codomain);
        let input = local_basis(cod, dom);
        let output = local_basis(new_cod, new_dom);
        let old_dims: Vec<usize> = key.spins.iter().map(|&j| j as usize + 1).collect();
        let outputs: Vec<Vec<f64>> = output
            .iter()
            .map(|e| basis_dense(new_cod, new_dom, e))
            .collect();
        let mut terms = vec![Vec::new(); output.len()];
        for (i, e) in input.iter().enumerate() {
            let mut b = basis_dense(cod, dom, e);
            for leg in 0..n {
                // Flipped before and not after: undo it (`epsilon^T`); after only: apply it.
                let was = key.flipped[leg];
                if was != key.new_flipped[leg] {
                    b = flip_axis(&b, &old_dims, leg, &[(key.spins[leg], 1)], was);
                }
            }
            let p = permute_axes(&b, &old_dims, &key.perm);
            for (o, (out, e2)) in outputs.iter().zip(&output).enumerate() {
                let w = out.iter().zip(&p).map(|(x, y)| x * y).sum::<f64>() / f64::from(e2.0 + 1);
                if w.abs() > ZERO {
                    terms[o].push((i, w));
                }
            }
        }
        Self {
            input,
            output,
            terms,
        }
    }
}

/// A tree as a matrix: element `[r * (2c + 1) + M]`, where `r` runs over the legs' `m`
/// (column-major, first leg fastest, each `m` from `j` down to `-j`) and `M` over the coupled
/// spin's. `None` (no legs) is the `1 x 1` identity of spin 0.
fn tree_matrix(tree: Option<&FusionTree>, spins: &[u32], c: u32) -> Vec<f64> {
    let Some(tree) = tree else {
        return vec![1.0];
    };
    let dc = c as usize + 1;
    let dims: Vec<usize> = spins.iter().map(|&j| j as usize + 1).collect();
    let rows: usize = dims.iter().product();
    let row_major = tree.to_dense();
    let mut out = vec![0.0; rows * dc];
    // Walk the row-major multi-index (last leg fastest) and place each row at its
    // column-major position.
    let mut idx = vec![0_usize; dims.len()];
    for r_row in 0..rows {
        let r_col = idx
            .iter()
            .zip(&dims)
            .rev()
            .fold(0, |acc, (&i, &d)| acc * d + i);
        out[r_col * dc..(r_col + 1) * dc].copy_from_slice(&row_major[r_row * dc..(r_row + 1) * dc]);
        for k in (0..dims.len()).rev() {
            idx[k] += 1;
            if idx[k] < dims[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

/// The dense form of a basis element of the tuple (codomain spins, domain spins): element
/// `[r + R * q]` is `sum_M s[r, M] t[q, M]`, `r` the codomain's `m` (column-major), `R` their
/// count, `q` the domain's: the tensor `s t^T`, legs codomain then domain, first fastest.
pub fn basis_dense(codomain: &[u32], domain: &[u32], e: &BasisElement) -> Vec<f64> {
    let dc = e.0 as usize + 1;
    let s = tree_matrix(e.1.as_ref(), codomain, e.0);
    let t = tree_matrix(e.2.as_ref(), domain, e.0);
    let (rows, cols) = (s.len() / dc, t.len() / dc);
    let mut out = vec![0.0; rows * cols];
    for q in 0..cols {
        for r in 0..rows {
            out[r + rows * q] = (0..dc).map(|m| s[r * dc + m] * t[q * dc + m]).sum();
        }
    }
    out
}

/// `x` (column-major over `dims`) with `epsilon` (or, `transpose`, its transpose) applied to
/// every multiplet along axis `axis`, whose index runs over the multiplets `sectors`
/// (`(two_j, copies)`, as on a [`super::Su2Leg`]): within a multiplet, `epsilon x` at `i` is
/// `(-1)^i x[2j - i]` and `epsilon^T x` at `i` is `(-1)^(2j - i) x[2j - i]`.
pub(crate) fn flip_axis<T: Scalar<Real = f64>>(
    x: &[T],
    dims: &[usize],
    axis: usize,
    sectors: &[(u32, usize)],
    transpose: bool,
) -> Vec<T> {
    let inner: usize = dims[..axis].iter().product();
    let d = dims[axis];
    // Along the axis: each index's source and whether it changes sign.
    let mut map = Vec::with_capacity(d);
    let mut base = 0;
    for &(j, copies) in sectors {
        let md = j as usize + 1;
        for a in 0..copies {
            for i in 0..md {
                let mirror = md - 1 - i;
                let odd = if transpose { mirror % 2 } else { i % 2 };
                map.push((base + a * md + mirror, odd == 1));
            }
        }
        base += md * copies;
    }
    debug_assert_eq!(map.len(), d);
    let mut out = vec![T::ZERO; x.len()];
    for (flat, v) in out.iter_mut().enumerate() {
        let i = (flat / inner) % d;
        let (src, negative) = map[i];
        let at = flat - i * inner + src * inner;
        *v = if negative { -x[at] } else { x[at] };
    }
    out
}

/// `x` (column-major over `dims`) with its axes permuted: new axis `a` is old axis `perm[a]`.
pub(crate) fn permute_axes(x: &[f64], dims: &[usize], perm: &[usize]) -> Vec<f64> {
    let mut old_strides = vec![1_usize; dims.len()];
    for a in 1..dims.len() {
        old_strides[a] = old_strides[a - 1] * dims[a - 1];
    }
    let new_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    let strides: Vec<usize> = perm.iter().map(|&p| old_strides[p]).collect();
    let mut out = vec![0.0; x.len()];
    let mut idx = vec![0_usize; dims.len()];
    for v in out.iter_mut() {
        *v = x[idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>()];
        for a in 0..idx.len() {
            idx[a] += 1;
            if idx[a] < new_dims[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sqrt(2c' + 1) W[o, i] / sqrt(2c + 1)` has orthonormal columns: a recoupling keeps
    /// the dense norm.
    #[test]
    fn recouplings_are_orthogonal_in_the_multiplet_weights() {
        let keys = [
            (
                vec![1, 1, 2, 2],
                2,
                vec![2, 0, 3, 1],
                1,
                [false, true, false, true],
            ),
            (
                vec![2, 1, 1, 2],
                1,
                vec![1, 3, 0, 2],
                3,
                [true, false, false, false],
            ),
            (
                vec![1, 3, 2, 2],
                4,
                vec![3, 2, 1, 0],
                0,
                [false, false, false, false],
            ),
        ];
        for (spins, n_codomain, perm, new_n_codomain, flipped) in keys {
            // A leg's flip changes exactly when it changes sides (as in a structure).
            let new_flipped: Vec<bool> = (0..perm.len())
                .map(|l| {
                    let at = perm.iter().position(|&p| p == l).expect("a permutation");
                    flipped[l] ^ ((l < n_codomain) != (at < new_n_codomain))
                })
                .collect();
            let key = RecouplingKey {
                spins,
                n_codomain,
                perm,
                new_n_codomain,
                flipped: flipped.to_vec(),
                new_flipped,
            };
            let r = Recoupling::of(&key);
            assert!(!r.input.is_empty(), "{key:?}");
            let weight = |e: &BasisElement| f64::from(e.0 + 1).sqrt();
            for i in 0..r.input.len() {
                for k in 0..r.input.len() {
                    let dot: f64 = r
                        .terms
                        .iter()
                        .zip(&r.output)
                        .map(|(t, e)| {
                            let at = |c: usize| {
                                t.iter().find(|x| x.0 == c).map_or(0.0, |x| x.1) * weight(e)
                                    / weight(&r.input[c])
                            };
                            at(i) * at(k)
                        })
                        .sum();
                    let want = if i == k { 1.0 } else { 0.0 };
                    assert!(
                        (dot - want).abs() < 1e-12,
                        "{key:?}: ({i}, {k}) gives {dot}"
                    );
                }
            }
        }
    }
}
