//! Tessera: block-sparse, symmetry-adapted tensors on an asynchronous, hazard-ordered block
//! runtime.
//!
//! This facade re-exports the workspace crates; most programs need only the [`prelude`].
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
//! # Ok::<(), tessera::core::Error>(())
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
pub use tessera_io as io;

/// The names most programs use.
pub mod prelude {
    pub use tessera_core::{Access, Alias, Async, Domain, ReadAlias, Runtime, schedule};
}
