//! Coalesced views over several blocks of an [`AsyncArray`](tessera_blocks::AsyncArray),
//! with composite hazard sets, and per-sector factorizations.
//!
//! Owns: [`SectorRegion`] (a column-major matrix inside an array's allocation that resolves
//! to a faer `MatRef` / `MatMut` inside a task), [`SectorAlias`] (that region paired with the
//! composite of the covered blocks' hazard records), the [`Coalesce`] trait that hands
//! them out (per coupled sector, or zero-copy over a block set that is one strided matrix),
//! and [`GatheredBlocks`], the explicit copy of any block set of one sector into a
//! temporary; and per-sector factorizations through faer ([`svd`] with global
//! [`Truncation`], [`qr`], [`lq`], [`eigh`]) that return block-sparse factors joined by a new
//! bond leg: a masked input is factored with its absent blocks as zeros, and a NaN or an
//! infinity fails the sector's task with [`Error::NonFinite`] (read out of a poisoned factor
//! with [`Error::from_task_failure`]) instead of giving NaN factors. Invariant: a coalesced
//! view is never given fresh records: it is ordered by exactly the records of the blocks it
//! covers, enrolled in one step, so block views and coalesced views of one array are ordered
//! together (a write excludes every overlapping access, reads share).
//!
//! ```
//! use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
//! use tessera_coalesce::Coalesce;
//! use tessera_core::schedule;
//!
//! let row = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)])?;
//! let s = BlockStructure::new([row.clone()], [row.dual()], U1(0))?;
//! let a = AsyncArray::<f64, U1>::zeros(s);
//! // A task that sees the whole charge-1 sector as one faer matrix.
//! schedule(a.sector(1)?.overwrite(), |mut m| {
//!     for i in 0..m.nrows() {
//!         m[(i, i)] = 1.0;
//!     }
//!     Ok(())
//! })?;
//! assert_eq!(a.get(&[3, 3])?, 1.0); // waits for exactly that task
//! # Ok::<(), tessera_coalesce::Error>(())
//! ```

#![deny(missing_docs)]

#[cfg(feature = "cuda")]
mod device;
mod eigh;
mod error;
mod factor;
mod gather;
mod kernels;
mod qr;
mod region;
mod su2;
mod svd;
mod truncation;
mod view;

#[cfg(feature = "cuda")]
pub use device::DeviceSvd;
pub use eigh::{Eigh, eigh};
pub use error::Error;
pub use gather::GatheredBlocks;
pub use kernels::{Factorize, HostSvd};
pub use qr::{Lq, Qr, lq, qr};
pub use region::{Matrices, MatricesMut, SectorAlias, SectorRegion, SectorsAlias, SectorsRegion};
pub use su2::{Su2Eigh, Su2Qr, Su2Svd, eigh_su2, qr_su2, svd_su2};
pub use svd::{
    SectorSvds, SingularValues, Svd, SvdLayout, svd, svd_layout, svd_sectors, svd_weighted,
};
pub use truncation::{Kept, Truncation};
pub use view::{Coalesce, SectorBatches};
