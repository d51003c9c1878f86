//! Matrix product states and operators on Tessera's block-sparse tensors.
//!
//! Owns the one-dimensional algorithms built on the library's public layers: the chain
//! containers [`Mps`] and [`Mpo`] and the graded signs every fermionic chain needs
//! ([`graded`]). Invariant: every tensor of a chain follows the leg conventions below, which
//! [`Mps::new`] and [`Mpo::new`] check, so code that takes an `Mps` or `Mpo` never
//! re-checks them.
//!
//! # Conventions
//!
//! - MPS tensor `A_i(k, s, r)`: left bond `In`, physical `In`, right bond `Out`. The left
//!   edge of site 0 is one-dimensional with the trivial sector; the right edge of the last
//!   site is one-dimensional and carries the state's total charge. Neighbours meet bra first
//!   (`A_i`'s `Out` bond with `A_{i+1}`'s `In` bond), so for graded sectors the chain is the
//!   plain product `(c_1^+)^{s_1} ... (c_L^+)^{s_L} |0>` with no Jordan-Wigner string.
//! - MPO tensor `W_i(a, o, i, b)`: left bond `In`, output (ket) leg `In`, input (bra) leg
//!   `Out`, right bond `Out`, with `W[a, o, i, b] = <o|O_ab|i>`; both edges are
//!   one-dimensional with the trivial sector, and the flux of every `W` is trivial. The chain
//!   of `W`s is the graded tensor product of the site operators, so `a^+` on site `i` times
//!   `a` on site `j > i` is `c_i^+ c_j`, string included.
//! - Bras: the graded adjoint of a tensor is its in-place conjugate times the reversal sign
//!   ([`graded::reversal_signed`]); an open `Out` leg paired with its bra takes the twist
//!   ([`graded::twisted`]). Both are the identity on bosonic sectors.

#![deny(missing_docs)]

mod chain;
pub mod dmrg;
mod error;
pub mod exact;
pub mod graded;
pub mod models;
pub mod mpo;
pub mod observables;
pub mod sites;
pub mod su2;
pub mod terms;

pub use chain::{Mpo, Mps};
pub use error::Error;

/// A result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
