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
//! // No term ends on site 0 or starts on site 5: the first and last bonds need 4 states.
//! assert_eq!(mpo::bond_dimensions(&w), vec![1, 4, 5, 5, 5, 4, 1]);
//! # Ok::<(), tessera_mps::Error>(())
//! ```

use std::collections::{BTreeMap, HashMap};

use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure, Leg};

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

    /// The dense position of every state (states grouped by charge, charges in order of
    /// first appearance) and the leg (`In`).
    fn layout(&self) -> Result<(HashMap<State, usize>, Leg<S>)> {
        let mut groups: Vec<(S, Vec<&State>)> = Vec::new();
        for (state, q) in &self.states {
            match groups.iter_mut().find(|(c, _)| c == q) {
                Some((_, members)) => members.push(state),
                None => groups.push((q.clone(), vec![state])),
            }
        }
        let mut position = HashMap::new();
        for state in groups.iter().flat_map(|(_, m)| m.iter()) {
            let at = position.len();
            position.insert((*state).clone(), at);
        }
        let leg = Leg::new(
            tessera_blocks::Direction::In,
            groups.iter().map(|(q, m)| (q.clone(), m.len())),
        )?;
        Ok((position, leg))
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
    let physical = site.physical_leg()?;
    let layouts = bonds.iter().map(Bond::layout).collect::<Result<Vec<_>>>()?;
    let mut tensors = Vec::with_capacity(len);
    for (j, step) in steps.iter().enumerate() {
        let ((left_at, left), (right_at, right)) = (&layouts[j], &layouts[j + 1]);
        let (da, db) = (left.dim(), right.dim());
        let mut dense = vec![0.0; da * d * d * db];
        for ((from, to), m) in step {
            let (a, b) = (left_at[from], right_at[to]);
            for o in 0..d {
                for i in 0..d {
                    dense[a + da * (o + d * (i + d * b))] += m[o * d + i];
                }
            }
        }
        let s = BlockStructure::new(
            [left.clone(), physical.clone()],
            [physical.dual(), right.dual()],
            S::trivial(),
        )?;
        tensors.push(AsyncArray::from_dense(s, &dense)?);
    }
    Mpo::new(tensors)
}

/// The bond dimensions of `mpo`, left edge to right edge (`len + 1` numbers).
pub fn bond_dimensions<S: AbelianSector>(mpo: &Mpo<S>) -> Vec<usize> {
    let t = mpo.tensors();
    std::iter::once(t[0].structure().legs()[0].dim())
        .chain(t.iter().map(|w| w.structure().legs()[3].dim()))
        .collect()
}
