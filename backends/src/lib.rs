//! Tessera's kernels.
//!
//! Owns: the element types ([`Scalar`]), the [`Placement`] trait (where a tensor's one
//! allocation lives and what runs on it: allocation, task scheduling, elementwise,
//! reduction, permuting and transfer kernels on granted [`Extent`]s) and the backends that
//! implement it: [`cpu`] ([`Host`]: plain loops over contiguous runs, faer and rayon), and,
//! with the `cuda` feature, `cuda` (`Cuda`: cuBLAS and NVRTC kernels through cudarc, loaded
//! at run time, so it builds with no CUDA installed). Invariant: a backend sees only
//! resolved views and grants, never async types, and never writes outside the views and
//! grants it is handed.

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
