//! Tessera's symmetric block-sparse tensors.
//!
//! Owns: sectors, legs, block structures and `AsyncArray` (one backing allocation, a
//! synchronous descriptor table, per-block alias handles). Arrives with the blocks issue;
//! this crate fixes its place in the dependency order.

#![deny(missing_docs)]
