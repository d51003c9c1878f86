//! Contractions planned at submission from block metadata alone, the plan cache and network
//! order search. Arrives with the contraction issue; this crate fixes its place in the
//! dependency order.

#![deny(missing_docs)]
