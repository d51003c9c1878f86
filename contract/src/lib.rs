//! Tessera's contractions: pairwise contractions of block-sparse tensors, planned at
//! submission from the descriptor tables alone and run as GEMM tasks through faer.
//!
//! Owns: contraction specs ([`Spec`]), plans ([`Plan`]) and their cache ([`PlanCache`]),
//! the submission of a plan ([`Contraction`]), and networks of several tensors contracted
//! in an order chosen from block-sparse flop counts ([`Network`]). Invariant: planning reads structures only,
//! and every check runs before the first task is enrolled, so an error writes nothing.
//!
//! # Semantics
//!
//! `C = alpha op(A) op(B) + beta C`, where `op` conjugates when asked. Conjugating an operand
//! conjugates its elements, duals its legs and its flux. The contraction is the matrix
//! product of the operands' matrix forms: `A` permuted to (free legs | contracted legs),
//! `B` to (contracted legs | free legs), with the contracted legs in one order on both; the
//! product has `A`'s free legs then `B`'s, and is permuted into the output's leg order and
//! split. For fermionic sectors every one of those permutations carries its sign (the odd
//! legs it crosses, see [`BlockStructure::permuted`](tessera_blocks::BlockStructure::permuted));
//! the matrix product itself carries none.

#![deny(missing_docs)]

mod cache;
#[cfg(feature = "cuda")]
mod device;
mod error;
mod execute;
mod network;
mod operand;
mod plan;
mod spec;

pub use cache::{DEFAULT_PLAN_CAPACITY, PlanCache};
pub use error::Error;
pub use execute::Contraction;
pub use network::{MAX_EXHAUSTIVE, Network, Order};
pub use operand::Operand;
pub use plan::{Plan, Strategy};
pub use spec::Spec;
