//! The MPO of an operator sum, built by a finite-state automaton.
//!
//! Owns: [`build`] (`Terms` to [`Mpo`]) and [`bond_dimensions`]. Invariant: the chain of
//! tensors built is the graded tensor product, term by term, of the site-ordered factors
//! of [`Terms::placed`], so its operator is the sum of the terms as written (checked against
//! the dense Hamiltonian of [`exact`](crate::exact) in this crate's tests).
//!
//! # The automaton
//!
//! The states of bond `k` (between sites `k - 1` and `k`) are: *start* (nothing placed yet,
//! identities to the left), *done* (a term completed, identities to the right), and one
//! state per *prefix*: the factors a term has placed on sites `< k` when its first factor is
//! left of the bond and its last one right of it. Terms with equal prefixes share the state,
//! and a term's coefficient is written on its last factor, so `sum_i J S_i . S_{i+1}` has
//! the five states `start`, `done`, `Sp`, `Sm`, `Sz` and Hubbard's nearest-neighbour
//! hopping six. Unused states (start right of every term's first site, done left of every
//! term's last one) are left out. A state's charge is the fusion of its prefix's charges,
//! so every tensor has the trivial flux; a prefix of odd parity lives in an odd bond sector
//! and carries the fermion from one end of the term to the other: the sites in between get
//! the plain identity, and the graded legs make it the Jordan-Wigner string (the crate docs'
//! conventions; `tests/free_fermions.rs` writes the same MPO by hand).
//!
//! The automaton shares pasts; an exact compression then shares futures: at every inner
//! bond a state whose column in the left tensor, or row in the right one, is zero or a
//! multiple of another state's of the same charge is removed and folded into that state
//! (deparallelisation, as in Hubig, McCulloch and Schollwöck, PRB 95, 035129). Nothing is
//! truncated: the operator is unchanged to rounding.
//!
//! ```
//! use tessera_mps::{mpo, sites::Site, terms::Terms};
//!
//! let mut h = Terms::new(Site::spin_half(), 6)?;
//! for i in 0..5 {
//!     h.add(0.5, [("Sp", i), ("Sm", i + 1)])?;
//!     h.add(0.5, [("Sm", i), ("Sp", i + 1)])?;
//!     h.add(1.0, [("Sz", i), ("Sz", i + 1)])?;
//! }
//! let w = mpo::build(&h)?;
//! // No term ends on site 0 or starts on site 5: the edge bonds need 4 states.
//! assert_eq!(mpo::bond_dimensions(&w), vec![1, 4, 5, 5, 5, 4, 1]);
//! # Ok::<(), tessera_mps::Error>(())
//! ```

use std::collections::{BTreeMap, HashMap};

use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure, Direction, Leg};

use crate::terms::{Factor, Placed, Terms};
use crate::{Mpo, Result};

/// A bond state of the automaton.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum State {
    /// Nothing placed yet.
    Start,
    /// A term completed.
    Done,
    /// The factors `(site, key)` a term has placed left of the bond.
    Prefix(Vec<(usize, String)>),
}

/// The states of one bond with their charges, in insertion order.
struct Bond<S> {
    states: Vec<(State, S)>,
    index: HashMap<State, usize>,
}

impl<S: AbelianSector> Bond<S> {
    fn new() -> Self {
        Self {
            states: Vec::new(),
            index: HashMap::new(),
        }
    }

    fn insert(&mut self, state: State, charge: S) {
        if !self.index.contains_key(&state) {
            self.index.insert(state.clone(), self.states.len());
            self.states.push((state, charge));
        }
    }
}

/// The MPO of `terms`: one tensor `W(a In, o In, i Out, b Out)` per site with `W[a, o, i,
/// b] = <o|O_ab|i>` (the crate's conventions), built by the automaton of the module docs.
pub fn build<S: AbelianSector>(terms: &Terms<S>) -> Result<Mpo<S>> {
    let site = terms.site();
    let (len, d) = (terms.len(), site.dim());
    let mut placed = terms.placed();
    if placed.is_empty() {
        // The zero operator: a zero constant keeps every bond one-dimensional.
        placed.push(Placed {
            coefficient: 0.0,
            factors: vec![Factor {
                site: 0,
                key: "Id".into(),
                matrix: site.operator("Id").expect("every site").matrix().to_vec(),
            }],
        });
    }
    let charge_of = |key: &str| -> S {
        key.split('*').fold(S::trivial(), |q, name| {
            q.fuse_abelian(site.operator(name).expect("checked by add").charge())
        })
    };
    let mut bonds: Vec<Bond<S>> = (0..=len).map(|_| Bond::new()).collect();
    bonds[0].insert(State::Start, S::trivial());
    bonds[len].insert(State::Done, S::trivial());
    for p in &placed {
        let first = p.factors[0].site;
        let last = p.factors[p.factors.len() - 1].site;
        for bond in bonds.iter_mut().take(first + 1) {
            bond.insert(State::Start, S::trivial());
        }
        for bond in bonds.iter_mut().skip(last + 1) {
            bond.insert(State::Done, S::trivial());
        }
    }
    // Transitions per site: (from, to) -> the matrix, set for shared prefix steps, summed
    // for the final ones (they carry the coefficients).
    let mut steps: Vec<BTreeMap<(State, State), Vec<f64>>> =
        (0..len).map(|_| BTreeMap::new()).collect();
    let identity = site.operator("Id").expect("every site").matrix().to_vec();
    for p in &placed {
        let first = p.factors[0].site;
        let last = p.factors[p.factors.len() - 1].site;
        let mut prefix: Vec<(usize, String)> = Vec::new();
        let mut charge = S::trivial();
        let mut from = State::Start;
        let mut next_factor = p.factors.iter().peekable();
        for j in first..=last {
            let factor = next_factor.next_if(|f| f.site == j);
            let matrix = factor.map_or(&identity, |f| &f.matrix);
            if j == last {
                let m = steps[j]
                    .entry((from, State::Done))
                    .or_insert(vec![0.0; d * d]);
                for (x, y) in m.iter_mut().zip(matrix) {
                    *x += p.coefficient * y;
                }
                break;
            }
            if let Some(f) = factor {
                prefix.push((j, f.key.clone()));
                charge = charge.fuse_abelian(&charge_of(&f.key));
            }
            let to = State::Prefix(prefix.clone());
            bonds[j + 1].insert(to.clone(), charge.clone());
            steps[j].insert((from, to.clone()), matrix.clone());
            from = to;
        }
    }
    for (j, step) in steps.iter_mut().enumerate() {
        for s in [State::Start, State::Done] {
            if bonds[j].index.contains_key(&s) && bonds[j + 1].index.contains_key(&s) {
                step.insert((s.clone(), s), identity.clone());
            }
        }
    }
    // Dense site matrices over the states in insertion order: `(a, o, i, b)` column-major.
    let mut charges: Vec<Vec<S>> = bonds
        .iter()
        .map(|b| b.states.iter().map(|(_, q)| q.clone()).collect())
        .collect();
    let mut dense: Vec<Vec<f64>> = Vec::with_capacity(len);
    for (j, step) in steps.iter().enumerate() {
        let (da, db) = (charges[j].len(), charges[j + 1].len());
        let mut w = vec![0.0; da * d * d * db];
        for ((from, to), m) in step {
            let (a, b) = (bonds[j].index[from], bonds[j + 1].index[to]);
            for o in 0..d {
                for i in 0..d {
                    w[a + da * (o + d * (i + d * b))] += m[o * d + i];
                }
            }
        }
        dense.push(w);
    }
    deparallelise(&mut dense, &mut charges, d * d);
    let physical = site.physical_leg()?;
    // Each bond's states grouped by charge (one segment per charge).
    let mut orders = Vec::with_capacity(len + 1);
    let mut legs = Vec::with_capacity(len + 1);
    for q in &charges {
        let mut groups: Vec<(S, Vec<usize>)> = Vec::new();
        for (k, c) in q.iter().enumerate() {
            match groups.iter_mut().find(|(g, _)| g == c) {
                Some((_, members)) => members.push(k),
                None => groups.push((c.clone(), vec![k])),
            }
        }
        legs.push(Leg::new(
            Direction::In,
            groups.iter().map(|(c, m)| (c.clone(), m.len())),
        )?);
        orders.push(groups.into_iter().flat_map(|(_, m)| m).collect::<Vec<_>>());
    }
    let mut tensors = Vec::with_capacity(len);
    for (j, w) in dense.iter().enumerate() {
        let (left, right) = (&legs[j], &legs[j + 1]);
        let w = select(
            w,
            charges[j].len(),
            d * d,
            charges[j + 1].len(),
            &orders[j],
            &orders[j + 1],
        );
        let s = BlockStructure::new(
            [left.clone(), physical.clone()],
            [physical.dual(), right.dual()],
            S::trivial(),
        )?;
        tensors.push(AsyncArray::from_dense(s, &w)?);
    }
    Mpo::new(tensors)
}

/// The entries `keep0 x keep1` of `w`, an `(n0, p, n1)` array (column-major).
fn select(w: &[f64], n0: usize, p: usize, n1: usize, keep0: &[usize], keep1: &[usize]) -> Vec<f64> {
    debug_assert_eq!(w.len(), n0 * p * n1);
    let m0 = keep0.len();
    let mut out = vec![0.0; m0 * p * keep1.len()];
    for (y, &b) in keep1.iter().enumerate() {
        for q in 0..p {
            for (x, &a) in keep0.iter().enumerate() {
                out[x + m0 * (q + p * y)] = w[a + n0 * (q + p * b)];
            }
        }
    }
    out
}

/// `lambda` with `x = lambda y`, when `x` is a multiple of the non-zero `y`.
fn multiple(x: &[f64], y: &[f64]) -> Option<f64> {
    let k = y.iter().position(|&v| v != 0.0)?;
    let lambda = x[k] / y[k];
    let scale = x.iter().fold(0.0_f64, |m, v| m.max(v.abs()));
    let close = x
        .iter()
        .zip(y)
        .all(|(a, b)| (a - lambda * b).abs() <= 1e-14 * scale);
    (lambda != 0.0 && close).then_some(lambda)
}

/// Removes, at every inner bond, the states whose column (in the site on the left) or row
/// (in the site on the right) is zero or a multiple of another state's of the same charge,
/// folding the multiple into that state's row or column: an exact compression (the
/// deparallelisation of Hubig, McCulloch and Schollwöck), repeated until nothing changes.
/// It merges the automaton's states with equal futures, as its prefix sharing merges those
/// with equal pasts. `dense[j]` is `(a, p, b)` column-major with `p` the `d^2` physical
/// pairs; the edges are never touched.
fn deparallelise<S: AbelianSector>(dense: &mut [Vec<f64>], charges: &mut [Vec<S>], p: usize) {
    let len = dense.len();
    let mut changed = true;
    while changed {
        changed = false;
        for k in 1..len {
            for by_rows in [false, true] {
                let (da, n, db) = (charges[k - 1].len(), charges[k].len(), charges[k + 1].len());
                let (left, right) = dense.split_at_mut(k);
                let (left, right) = (&mut left[k - 1], &mut right[0]);
                // A state's vector: its column of `left` or its row of `right`.
                let vector = |left: &[f64], right: &[f64], s: usize| -> Vec<f64> {
                    if by_rows {
                        (0..p * db).map(|x| right[s + n * x]).collect()
                    } else {
                        left[da * p * s..da * p * (s + 1)].to_vec()
                    }
                };
                let mut keep: Vec<usize> = Vec::with_capacity(n);
                for s in 0..n {
                    let v = vector(left, right, s);
                    if v.iter().all(|&x| x == 0.0) {
                        continue;
                    }
                    let target = keep.iter().find_map(|&t| {
                        if charges[k][t] != charges[k][s] {
                            return None;
                        }
                        multiple(&v, &vector(left, right, t)).map(|l| (t, l))
                    });
                    match target {
                        // v_s = lambda v_t: s's other side folds into t's.
                        Some((t, lambda)) if by_rows => {
                            for x in 0..da * p {
                                left[x + da * p * t] += lambda * left[x + da * p * s];
                            }
                        }
                        Some((t, lambda)) => {
                            for x in 0..p * db {
                                right[t + n * x] += lambda * right[s + n * x];
                            }
                        }
                        None => keep.push(s),
                    }
                }
                if keep.is_empty() {
                    keep.push(0);
                }
                if keep.len() < n {
                    changed = true;
                    let all_a: Vec<usize> = (0..da).collect();
                    let all_b: Vec<usize> = (0..db).collect();
                    *left = select(left, da, p, n, &all_a, &keep);
                    *right = select(right, n, p, db, &keep, &all_b);
                    charges[k] = keep.iter().map(|&s| charges[k][s].clone()).collect();
                }
            }
        }
    }
}

/// The bond dimensions of `mpo`, left edge to right edge (`len + 1` numbers).
pub fn bond_dimensions<S: AbelianSector>(mpo: &Mpo<S>) -> Vec<usize> {
    let t = mpo.tensors();
    std::iter::once(t[0].structure().legs()[0].dim())
        .chain(t.iter().map(|w| w.structure().legs()[3].dim()))
        .collect()
}
