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
//! legs it crosses, see [`BlockStructure::permuted`](tessera_blocks::BlockStructure::permuted)),
//! and the contracted pairs carry the pairing sign below.
//!
//! # Fermionic sign convention
//!
//! A tensor over graded sectors ([`FermionParity`](tessera_blocks::FermionParity),
//! [`FermionicU1`](tessera_blocks::FermionicU1), products containing them) is an element of
//! the graded tensor product of its legs, in leg order: an [`In`](tessera_blocks::Direction::In)
//! leg is a space `V` (a ket), an [`Out`](tessera_blocks::Direction::Out) leg its dual `V*`
//! (a bra). Moving legs past each other costs `(-1)` for every two odd legs that cross
//! (Koszul). A contracted pair is evaluated *bra first*: `<x| |y>` (the `Out` leg left of the
//! `In` leg) is the plain sum `sum_x`; a pair met ket first is swapped before it is
//! evaluated, which costs `(-1)^|x|`. So `C = A B` over labels means: write `A`'s legs, then
//! `B`'s; bring each contracted pair together, nested (`... k1 k2 | k2 k1 ...`); evaluate.
//! Per contracted sector tuple that is `(-1)` to
//!
//! - the number of pairs of odd contracted legs (the nesting: `B'` keeps `K` in `A'`'s
//!   order, not reversed), plus
//! - the number of odd contracted legs whose leg on `A` (after `op`) is `In`.
//!
//! The sign depends on the contracted sectors only, so it is folded into the permutation of
//! one operand (a sign-only copy when neither is permuted); the host plans and the device
//! lowering run the same plan. (A host plan that applies a small operand in one pass,
//! [`Strategy::SmallOperand`], permutes nothing: each pair of blocks carries the product of
//! the signs the permutations and the pairing would give it.) Consequences:
//!
//! - A matrix product `A(i, j) B(j, k)` with `j` an `Out` leg on `A` (the codomain `In`, the
//!   domain `Out`, as [`BlockStructure::new`](tessera_blocks::BlockStructure::new)`([v], [w.dual()])`
//!   builds a map `w -> v`) carries no sign: maps compose as matrices.
//! - Pairwise contraction is associative, so a [`Network`] gives one tensor in every order:
//!   it means the graded product of its tensors *in list order*, and a step that joins
//!   nodes out of that order pays `(-1)` per pair of odd tensors (odd flux) it swaps.
//! - A closed loop is a supertrace: the ring `A(i,j) B(j,k) C(k,i)` of identity maps of `v`
//!   is `dim(v_even) - dim(v_odd)` (the pair `i` is met ket first). Written on the dual space
//!   (legs `[v.dual(), v]`), the same ring is the plain trace.
//! - Conjugation ([`Contraction::conj_a`], [`Contraction::conj_b`]) conjugates the elements
//!   and duals every leg in place, with no sign: `conj(A)`'s `Out` legs are `A`'s `In` legs,
//!   and the pairing sign is read from them. The adjoint of a map
//!   ([`AsyncArray::adjoint`](tessera_blocks::AsyncArray::adjoint)) conjugate-transposes
//!   every block matrix with no sign, so `(A B)^+ = B^+ A^+` holds for maps between single
//!   legs (matrices), the ket-first pairs of one side being the ket-first pairs of the other.
//! - There is no partial trace within one tensor (a [`Spec`] or [`Network`] refuses a label
//!   twice on one operand); close a loop through a contraction with an identity, which
//!   follows this convention.
//! - Trivially graded sectors (`U1`, `Zn`, ...) have no odd sector: no sign is ever computed.
//!
//! ```
//! use std::sync::Arc;
//! use tessera_blocks::{AsyncArray, BlockStructure, Direction, FermionParity, Leg};
//! use tessera_contract::{Network, Order};
//!
//! // Two even states and one odd one; the identity map of v.
//! let v = Leg::new(Direction::In, [(FermionParity::EVEN, 2), (FermionParity::ODD, 1)])?;
//! let s = Arc::new(BlockStructure::new([v.clone()], [v.dual()], FermionParity::EVEN)?);
//! let mut dense = vec![0.0; 9];
//! for i in 0..3 {
//!     dense[i * 4] = 1.0;
//! }
//! let id = AsyncArray::from_dense(Arc::clone(&s), &dense)?;
//! let net = Network::new(vec![("ij", s.clone()), ("jk", s.clone()), ("ki", s)])?;
//! for steps in [vec![(0, 1), (3, 2)], vec![(0, 2), (3, 1)], vec![(2, 1), (0, 3)]] {
//!     let (ring, labels) = net.contract(&[&id, &id, &id], &Order { steps, flops: 0 })?;
//!     assert!(labels.is_empty());
//!     assert_eq!(ring.to_dense()?, vec![2.0 - 1.0]); // the supertrace, in every order
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod cache;
mod chain;
#[cfg(feature = "cuda")]
mod device;
mod error;
mod execute;
mod network;
mod operand;
mod plan;
mod small;
mod spec;
mod su2;

pub use cache::{DEFAULT_PLAN_CAPACITY, PlanCache};
pub use chain::{Chain, ChainTraffic, FUSE_MIN_ELEMS};
pub use error::Error;
pub use execute::Contraction;
pub use network::{MAX_EXHAUSTIVE, Network, Order};
pub use operand::{Executor, Operand};
pub use plan::{Plan, Strategy};
pub use small::{SMALL_COEFFICIENTS, SMALL_OPERAND_MIN_ELEMS};
pub use spec::{MAX_LEGS, Spec};
pub use su2::contract_su2;
