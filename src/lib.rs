//! Tessera: block-sparse, symmetry-adapted tensors on an asynchronous, hazard-ordered block
//! runtime.
//!
//! This facade re-exports the workspace crates; most programs need only the [`prelude`] and
//! the one error type [`Error`], which every crate's error converts into.
//!
//! ```
//! use tessera::prelude::*;
//!
//! let x = Async::new(3.0_f64);
//! let y = Async::new(0.0_f64);
//! schedule((x.read(), y.overwrite()), |(x, y)| {
//!     *y = x * x;
//!     Ok(())
//! })?;
//! assert_eq!(y.get()?, 9.0);
//! # Ok::<(), tessera::Error>(())
//! ```

#![deny(missing_docs)]
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub use tessera_backends as backends;
pub use tessera_blocks as blocks;
pub use tessera_coalesce as coalesce;
pub use tessera_contract as contract;
pub use tessera_core as core;
/// Distributed arrays on MPI (the `mpi` feature).
#[cfg(feature = "mpi")]
pub use tessera_distributed as distributed;
pub use tessera_io as io;
pub use tessera_mps as mps;

mod error;
pub use error::{Error, IoError};

/// The names a first program needs: the tensor type and what builds its structure, the
/// common sectors, contractions and networks, the factorizations and their truncation, the
/// runtime's values and tasks, and the one [`Error`].
pub mod prelude {
    pub use crate::Error;
    pub use tessera_backends::{Host, Placement};
    pub use tessera_blocks::{
        AbelianSector, AsyncArray, BlockStructure, Blocks, Direction, FermionParity, FermionicU1,
        Leg, Product, Sector, Tensor, Trivial, U1, Z2, Zn,
    };
    pub use tessera_coalesce::{Truncation, eigh, lq, qr, svd};
    pub use tessera_contract::{Contraction, Network, Order};
    pub use tessera_core::{Access, Alias, Async, Domain, ReadAlias, Runtime, schedule};
}
