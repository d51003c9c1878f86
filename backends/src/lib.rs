//! Tessera's kernels.
//!
//! Owns: the element types ([`Scalar`]) and the backends that run leaf kernels over resolved
//! views: [`cpu`] on plain loops over contiguous runs (and, with the contraction issue, faer
//! and rayon). Invariant: a backend sees only resolved views, never async types, and never
//! writes outside the views it is handed.

#![deny(missing_docs)]

pub mod cpu;
mod scalar;

pub use scalar::{Field, Real, Scalar};
pub use tessera_core::Domain;
