//! Tessera's kernels.
//!
//! Owns: the backends that run leaf kernels over resolved views (`cpu` on faer and rayon;
//! `cuda` on cudarc behind a feature). Invariant: a backend sees only resolved views, never
//! async types. The kernels arrive with the contraction issue; this crate fixes the place
//! in the dependency order (`core` <- `backends` <- `blocks`).

#![deny(missing_docs)]

pub use tessera_core::Domain;
