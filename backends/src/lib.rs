//! Tessera's kernels.
//!
//! Owns: the element types ([`Scalar`]) and the backends that run leaf kernels over resolved
//! views: [`cpu`] on plain loops over contiguous runs (and, with the contraction issue, faer
//! and rayon), and, with the `cuda` feature, `cuda` on cuBLAS through cudarc (loaded at run
//! time, so it builds with no CUDA installed). Invariant: a backend sees only resolved views,
//! never async types, and never writes outside the views it is handed.

#![deny(missing_docs)]

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod layout;
mod placement;
mod scalar;

pub use cpu::Host;
pub use layout::MatLayout;
pub use placement::{
    Extent, ExtentMismatch, Grant, GrantMut, Moved, Permutation, Placement, PlacementError,
    merged_runs,
};
pub use scalar::{Field, Real, Scalar};
pub use tessera_core::Domain;
