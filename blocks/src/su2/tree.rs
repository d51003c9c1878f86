//! Splitting trees of SU(2) spins, and leg permutations acting on them.
//!
//! Owns: [`FusionTree`] (a coupled spin split into uncoupled ones, left to right), its
//! enumeration ([`FusionTree::all`]), its dense form through the Clebsch-Gordan coefficients
//! ([`FusionTree::to_dense`], what tests compare against), the exchange of two neighbouring
//! legs ([`FusionTree::exchange`]) and the permutation transformers built from exchanges and
//! cached per tree basis and permutation ([`Transformer::of`]).
//!
//! Invariants:
//!
//! - A tree is left-canonical: line `k` is the spin of the first `k + 1` uncoupled legs
//!   coupled together, so line 0 is the first leg's spin, the last line is the coupled spin,
//!   and the lines in between (`inner`) are the tree's labels. Every line is in the fusion
//!   of the one before and the next leg.
//! - The trees of one basis (uncoupled spins, coupled spin) are orthonormal: their dense
//!   forms are isometries with orthogonal ranges that together span the coupled spin's
//!   multiplicity space.
//! - A permutation of the legs maps a tree to a real linear combination of the trees of the
//!   permuted basis; its transformer is that map as a matrix, computed once (from F and R
//!   symbols) and shared.

use super::{SU2, f_symbol, r_symbol};
use crate::sector::Sector;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

/// A splitting tree: the coupled spin `coupled` split into the uncoupled spins
/// `uncoupled[0], uncoupled[1], ...`, coupling left to right through `inner` (all spins
/// stored as `2j`).
///
/// ```
/// use tessera_blocks::su2::tree::FusionTree;
///
/// // Three spins one half into spin one half: two trees (the first pair a singlet or a
/// // triplet).
/// let trees = FusionTree::all(&[1, 1, 1], 1);
/// assert_eq!(trees.len(), 2);
/// assert_eq!(trees[0].inner(), &[0]);
/// assert_eq!(trees[1].inner(), &[2]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FusionTree {
    uncoupled: Vec<u32>,
    inner: Vec<u32>,
    coupled: u32,
}

impl FusionTree {
    /// Every tree from `coupled` to `uncoupled` (twice-spins), in increasing order of their
    /// inner lines; none when the spins cannot couple so (or `uncoupled` is empty).
    pub fn all(uncoupled: &[u32], coupled: u32) -> Vec<Self> {
        let Some((&first, rest)) = uncoupled.split_first() else {
            return Vec::new();
        };
        // Partial trees: the lines so far.
        let mut lines: Vec<Vec<u32>> = vec![vec![first]];
        for &a in rest {
            lines = lines
                .into_iter()
                .flat_map(|l| {
                    let last = *l.last().expect("a line");
                    SU2::half(last).fuse(&SU2::half(a)).map(move |x| {
                        let mut next = l.clone();
                        next.push(x.two_j());
                        next
                    })
                })
                .collect();
        }
        lines
            .into_iter()
            .filter(|l| l.last() == Some(&coupled))
            .map(|l| Self {
                uncoupled: uncoupled.to_vec(),
                // The lines between the first leg and the coupled spin.
                inner: l.get(1..l.len() - 1).unwrap_or_default().to_vec(),
                coupled,
            })
            .collect()
    }

    /// The uncoupled spins.
    pub fn uncoupled(&self) -> &[u32] {
        &self.uncoupled
    }

    /// The inner lines (`n - 2` of them for `n >= 2` legs).
    pub fn inner(&self) -> &[u32] {
        &self.inner
    }

    /// The coupled spin.
    pub fn coupled(&self) -> u32 {
        self.coupled
    }

    /// Line `k`: the spin of the first `k + 1` legs coupled.
    fn line(&self, k: usize) -> u32 {
        if k == 0 {
            self.uncoupled[0]
        } else if k + 1 == self.uncoupled.len() {
            self.coupled
        } else {
            self.inner[k - 1]
        }
    }

    fn with_line(&self, k: usize, x: u32) -> Self {
        let mut t = self.clone();
        if k == 0 {
            t.uncoupled[0] = x;
        } else if k + 1 == t.uncoupled.len() {
            t.coupled = x;
        } else {
            t.inner[k - 1] = x;
        }
        t
    }

    /// The tree as a dense isometry from the coupled spin to the uncoupled ones: element
    /// `[m_1, ..., m_n, m_c]` (row-major, each `m` running `j, j - 1, ..., -j`) is the
    /// product of the Clebsch-Gordan coefficients along the tree, summed over the inner
    /// lines' `m`.
    pub fn to_dense(&self) -> Vec<f64> {
        let dim = |j: u32| j as usize + 1;
        let m_of = |j: u32, i: usize| j as i32 - 2 * i as i32;
        // The state of line k: [m_1..m_{k+1}, m_line], row-major.
        let mut state = {
            let d = dim(self.uncoupled[0]);
            let mut s = vec![0.0; d * d];
            (0..d).for_each(|i| s[i * d + i] = 1.0);
            s
        };
        let mut outer = dim(self.uncoupled[0]);
        for k in 1..self.uncoupled.len() {
            let (x, a, y) = (self.line(k - 1), self.uncoupled[k], self.line(k));
            let (dx, da, dy) = (dim(x), dim(a), dim(y));
            let mut next = vec![0.0; outer * da * dy];
            for o in 0..outer {
                for ix in 0..dx {
                    let v = state[o * dx + ix];
                    if v == 0.0 {
                        continue;
                    }
                    for ia in 0..da {
                        let (mx, ma) = (m_of(x, ix), m_of(a, ia));
                        let my = mx + ma;
                        if my.unsigned_abs() > y {
                            continue;
                        }
                        let iy = ((y as i32 - my) / 2) as usize;
                        let c = super::clebsch_gordan(x, mx, a, ma, y, my).to_f64();
                        next[(o * da + ia) * dy + iy] += v * c;
                    }
                }
            }
            state = next;
            outer *= da;
        }
        state
    }

    /// The tree with legs `k` and `k + 1` exchanged, as a combination of the trees of the
    /// exchanged basis: `sum_w F^{x a b}_z[y, w] R^{a b}_w F^{x b a}_z[y', w]` for the
    /// new line `y'`, where `x` is line `k - 1`, `y` line `k`, `z` line `k + 1` (for `k = 0`
    /// the phase `R^{a b}_y` alone).
    ///
    /// # Panics
    ///
    /// When `k + 1` is not a leg.
    pub fn exchange(&self, k: usize) -> Vec<(FusionTree, f64)> {
        assert!(
            k + 1 < self.uncoupled.len(),
            "legs {k} and {} exchanged",
            k + 1
        );
        let (a, b) = (self.uncoupled[k], self.uncoupled[k + 1]);
        let mut swapped = self.clone();
        swapped.uncoupled.swap(k, k + 1);
        let r = |a, b, c| f64::from(r_symbol(a, b, c).expect("an admissible coupling"));
        if k == 0 {
            return vec![(swapped, r(a, b, self.line(1)))];
        }
        let (x, y, z) = (self.line(k - 1), self.line(k), self.line(k + 1));
        let ws: Vec<u32> = SU2::half(a).fuse(&SU2::half(b)).map(SU2::two_j).collect();
        SU2::half(x)
            .fuse(&SU2::half(b))
            .map(SU2::two_j)
            .filter_map(|y2| {
                let coef: f64 = ws
                    .iter()
                    .map(|&w| {
                        let f1 = f_symbol(x, a, b, z, y, w).to_f64();
                        let f2 = f_symbol(x, b, a, z, y2, w).to_f64();
                        if f1 == 0.0 || f2 == 0.0 {
                            0.0
                        } else {
                            f1 * r(a, b, w) * f2
                        }
                    })
                    .sum();
                (coef != 0.0).then(|| (swapped.with_line(k, y2), coef))
            })
            .collect()
    }
}

/// A leg permutation on one tree basis, as a matrix: the dense form of input tree `t`,
/// its legs permuted (new leg `i` is old leg `perm[i]`), is `sum_s matrix[s][t]` times the
/// dense form of output tree `s`.
#[derive(Debug)]
pub struct Transformer {
    /// The trees it maps from (the basis of the original legs).
    pub input: Vec<FusionTree>,
    /// The trees it maps to (the basis of the permuted legs).
    pub output: Vec<FusionTree>,
    /// `output.len()` rows of `input.len()` coefficients.
    pub matrix: Vec<f64>,
}

type TransformerKey = (Vec<u32>, u32, Vec<usize>);

fn transformers() -> &'static RwLock<HashMap<TransformerKey, Arc<Transformer>>> {
    static CACHE: OnceLock<RwLock<HashMap<TransformerKey, Arc<Transformer>>>> = OnceLock::new();
    CACHE.get_or_init(|| RwLock::new(HashMap::new()))
}

impl Transformer {
    /// The transformer of `perm` on the trees from `coupled` to `uncoupled`, computed on
    /// first use (as a product of neighbour exchanges, a bubble sort of `perm`) and shared
    /// after.
    ///
    /// # Panics
    ///
    /// When `perm` is not a permutation of the legs.
    pub fn of(uncoupled: &[u32], coupled: u32, perm: &[usize]) -> Arc<Transformer> {
        let mut sorted = perm.to_vec();
        sorted.sort_unstable();
        assert!(
            sorted.iter().enumerate().all(|(i, &p)| i == p) && perm.len() == uncoupled.len(),
            "{perm:?} permutes {} legs",
            uncoupled.len()
        );
        let key = (uncoupled.to_vec(), coupled, perm.to_vec());
        if let Some(t) = transformers()
            .read()
            .expect("the transformer cache")
            .get(&key)
        {
            return Arc::clone(t);
        }
        let t = Arc::new(Self::compute(uncoupled, coupled, perm));
        transformers()
            .write()
            .expect("the transformer cache")
            .insert(key, Arc::clone(&t));
        t
    }

    fn compute(uncoupled: &[u32], coupled: u32, perm: &[usize]) -> Self {
        let input = FusionTree::all(uncoupled, coupled);
        let permuted: Vec<u32> = perm.iter().map(|&p| uncoupled[p]).collect();
        let output = FusionTree::all(&permuted, coupled);
        // Bubble sort of the positions: `order[i]` is the original leg now at place `i`;
        // sorting `target` (each leg's place in `perm`) into order exchanges neighbours.
        let mut place = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            place[p] = i;
        }
        let mut swaps = Vec::new();
        let mut order: Vec<usize> = (0..perm.len()).collect();
        for pass in 0..order.len() {
            for k in 0..order.len().saturating_sub(1 + pass) {
                if place[order[k]] > place[order[k + 1]] {
                    order.swap(k, k + 1);
                    swaps.push(k);
                }
            }
        }
        let index: HashMap<&FusionTree, usize> =
            output.iter().enumerate().map(|(i, t)| (t, i)).collect();
        let mut matrix = vec![0.0; output.len() * input.len()];
        for (col, tree) in input.iter().enumerate() {
            let mut combo: HashMap<FusionTree, f64> = HashMap::from([(tree.clone(), 1.0)]);
            for &k in &swaps {
                let mut next: HashMap<FusionTree, f64> = HashMap::new();
                for (t, c) in combo {
                    for (s, d) in t.exchange(k) {
                        *next.entry(s).or_insert(0.0) += c * d;
                    }
                }
                combo = next;
            }
            for (t, c) in combo {
                let row = index[&t];
                matrix[row * input.len() + col] = c;
            }
        }
        Self {
            input,
            output,
            matrix,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x` (row-major over `dims`) with its axes permuted: new axis `i` is old axis
    /// `perm[i]`.
    fn permute_axes(x: &[f64], dims: &[usize], perm: &[usize]) -> Vec<f64> {
        let new_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
        let mut out = vec![0.0; x.len()];
        let mut idx = vec![0; dims.len()];
        for (flat, &v) in x.iter().enumerate() {
            let mut r = flat;
            for d in (0..dims.len()).rev() {
                idx[d] = r % dims[d];
                r /= dims[d];
            }
            let at = perm
                .iter()
                .zip(&new_dims)
                .fold(0, |acc, (&p, &d)| acc * d + idx[p]);
            out[at] = v;
        }
        out
    }

    fn bases() -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        for n in 1..=4 {
            let mut stack = vec![Vec::new()];
            for _ in 0..n {
                stack = stack
                    .into_iter()
                    .flat_map(|v: Vec<u32>| {
                        (1..=3).map(move |j| {
                            let mut w = v.clone();
                            w.push(j);
                            w
                        })
                    })
                    .collect();
            }
            out.extend(stack.into_iter().filter(|v| v.iter().sum::<u32>() <= 8));
        }
        out
    }

    fn couplings(uncoupled: &[u32]) -> Vec<u32> {
        let total: u32 = uncoupled.iter().sum();
        (total % 2..=total).step_by(2).collect()
    }

    /// The trees of all coupled spins are orthonormal isometries that together span the
    /// product space.
    #[test]
    fn trees_are_an_orthonormal_basis_of_the_product_space() {
        for unc in bases() {
            let size: usize = unc.iter().map(|&j| j as usize + 1).product();
            let mut columns = Vec::new();
            for c in couplings(&unc) {
                for t in FusionTree::all(&unc, c) {
                    let dense = t.to_dense();
                    let dc = c as usize + 1;
                    for mc in 0..dc {
                        columns.push((0..size).map(|i| dense[i * dc + mc]).collect::<Vec<_>>());
                    }
                }
            }
            assert_eq!(columns.len(), size, "{unc:?}: complete");
            for (i, x) in columns.iter().enumerate() {
                for (j, y) in columns.iter().enumerate() {
                    let d: f64 = x.iter().zip(y).map(|(a, b)| a * b).sum();
                    assert!((d - f64::from(u8::from(i == j))).abs() < 1e-12, "{unc:?}");
                }
            }
        }
    }

    /// An exchange of neighbours, and every permutation of up to four legs, agree with
    /// permuting the axes of the dense trees.
    #[test]
    fn permutations_of_trees_match_permuted_dense_trees() {
        let perms4: Vec<Vec<usize>> = {
            let mut all = Vec::new();
            for a in 0..4 {
                for b in 0..4 {
                    for c in 0..4 {
                        for d in 0..4 {
                            let p = vec![a, b, c, d];
                            let mut s = p.clone();
                            s.sort_unstable();
                            if s == [0, 1, 2, 3] {
                                all.push(p);
                            }
                        }
                    }
                }
            }
            all
        };
        let mut checked = 0;
        for unc in bases().into_iter().filter(|u| u.len() >= 2) {
            let n = unc.len();
            let perms: Vec<Vec<usize>> = match n {
                2 => vec![vec![1, 0]],
                3 => vec![vec![1, 0, 2], vec![0, 2, 1], vec![2, 0, 1], vec![1, 2, 0]],
                _ => perms4.clone(),
            };
            for c in couplings(&unc) {
                for perm in &perms {
                    let t = Transformer::of(&unc, c, perm);
                    let dims: Vec<usize> = unc
                        .iter()
                        .map(|&j| j as usize + 1)
                        .chain([c as usize + 1])
                        .collect();
                    let full: Vec<usize> = perm.iter().copied().chain([n]).collect();
                    for (col, tree) in t.input.iter().enumerate() {
                        let want = permute_axes(&tree.to_dense(), &dims, &full);
                        let mut got = vec![0.0; want.len()];
                        for (row, out) in t.output.iter().enumerate() {
                            let coef = t.matrix[row * t.input.len() + col];
                            for (g, d) in got.iter_mut().zip(out.to_dense()) {
                                *g += coef * d;
                            }
                        }
                        let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs());
                        assert!(
                            err.fold(0.0, f64::max) < 1e-12,
                            "{unc:?} -> {c} by {perm:?}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 1000, "{checked} trees checked");
    }

    /// A transformer is computed once per basis and permutation, then shared.
    #[test]
    fn transformers_are_cached() {
        let a = Transformer::of(&[1, 2, 1], 2, &[2, 0, 1]);
        let b = Transformer::of(&[1, 2, 1], 2, &[2, 0, 1]);
        assert!(Arc::ptr_eq(&a, &b));
        // Orthogonal: the matrix of a permutation of an orthonormal basis.
        let n = a.input.len();
        for i in 0..n {
            for j in 0..n {
                let d: f64 = (0..n)
                    .map(|r| a.matrix[r * n + i] * a.matrix[r * n + j])
                    .sum();
                assert!((d - f64::from(u8::from(i == j))).abs() < 1e-12);
            }
        }
    }
}
