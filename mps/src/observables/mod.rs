//! Observables of a matrix product state: norm, one-site expectation values, two-point
//! correlation functions, the entanglement entropy and spectrum of every bond, and a JSON
//! report of them.
//!
//! Owns: [`LocalOperator`] (a one-site operator `O(o In, i Out)` with its charge),
//! [`Observables`] (the measurements of one state), [`BondEntanglement`] and the
//! serialisable [`Report`]. Invariant: every value is that of the normalised state in the
//! Hilbert space, computed on the library's block-sparse tensors for any
//! [`AbelianSector`](tessera_blocks::AbelianSector), graded (fermionic) ones included,
//! with no Jordan-Wigner string written by hand.
//!
//! # How the fermionic signs come out
//!
//! The state is the plain graded product of its tensors (the crate's chain convention), so
//! its dense entries are the Fock amplitudes in the occupation basis in site order,
//! `(c_1^+)^{s_1} ... (c_L^+)^{s_L} |0>`. An operator on site `i` is wrapped as the MPO-like
//! tensor `W(a In, o In, i Out, b Out)` with one-dimensional bonds, the bond after it
//! carrying its charge; the graded product of `W`s in site order is the product of the
//! operators in site order, and an odd bond passing a site is the string (`c_i^+` on site
//! `i` and `c` on site `j > i` give `c_i^+ c_j`). Every tensor of the network is even (trivial
//! flux), so the network's value does not depend on the order of the pairwise
//! contractions. Two signs are written, both through [`crate::graded`]: the bra of a site
//! tensor is the in-place conjugate of its reversal-signed copy, and the one open `Out`
//! leg, the state's right edge, meets its bra through the identity twisted on the bra
//! leg. The other order of two odd operators is the exchange sign: `O_i P_j = -P_j O_i`.
//!
//! ```
//! use tessera_blocks::{Direction, FermionParity, FermionicU1, Leg, Product, U1};
//! use tessera_mps::Mps;
//! use tessera_mps::observables::{LocalOperator, Observables};
//!
//! let q = |n: i32| Product(U1(n), FermionParity::new(n % 2 != 0));
//! let p = Leg::new(Direction::In, [(q(0), 1), (q(1), 1)])?;
//! let create = LocalOperator::from_dense(&p, q(1), &[0.0, 1.0, 0.0, 0.0])?;
//! let annihilate = create.adjoint()?;
//! // |0 1 0>: one fermion on the middle site.
//! let obs = Observables::new(&Mps::product_state(&vec![p; 3], &[0, 1, 0])?)?;
//! let n = obs.one_site(&create.product(&annihilate)?)?;
//! assert_eq!(n, vec![0.0, 1.0, 0.0]);
//! // <c_i^+ c_j> is the one-particle density matrix: here diag(n).
//! let c = obs.correlations(&create, &annihilate)?;
//! assert_eq!(c[1][1], 1.0);
//! assert_eq!(c[0][1], 0.0);
//! # Ok::<(), tessera_mps::Error>(())
//! ```

mod entanglement;
mod measure;
mod network;
mod operator;
mod report;

pub use entanglement::BondEntanglement;
pub use measure::Observables;
pub use operator::LocalOperator;
pub use report::{BondReport, CorrelationReport, Report, SectorSpectrum};
