//! Tessera on several processes: block-sparse arrays whose blocks are owned across the ranks
//! of an MPI job, with communication scheduled as runtime tasks.
//!
//! Everything here is behind the `mpi` feature (it links the system MPI, OpenMPI here,
//! through rsmpi); without it the crate is empty. (These docs name the items without
//! links, so that they build either way.)
//!
//! - `World`: MPI for this process (thread level `Multiple`) and the progress thread that
//!   moves its messages; `Comm`: the handle operations take.
//! - `ProcessMap`: which rank owns each block (cyclic, by sector, or given).
//! - `DistArray`: the same structure on every rank, each block's elements on its owner, in
//!   one local allocation with a hazard record per block. Scatter, gather, redistribution,
//!   norm and inner products.
//! - `contract`: contractions planned on every rank from the structures alone, each output
//!   block computed by its owner from the operand blocks sent to it.
//! - `DistArray::retile` and `tiled_leg`: a large sector cut into tiles for a SUMMA-style
//!   product on a `ProcessMap::Grid`, and put back together.
//! - `svd`: each coupled sector factored on the rank that holds it, one global truncation
//!   agreed from the singular values every rank sends every other.
//!
//! Sends and receives are tasks of the runtime: a send waits only for the block it sends, a
//! receive (a deferred task, [`tessera_core::Completion`]) completes when its message
//! arrives, and computation overlaps both. Operations are collective, called in the same
//! order on every rank; none waits for all ranks. A failure on one rank reaches every rank as
//! an error, never as a hang.
//!
//! ```
//! # #[cfg(feature = "mpi")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
//! use tessera_contract::Contraction;
//! use tessera_distributed::{DistArray, ProcessMap, World, contract};
//!
//! // One rank here; under `mpirun -n 4`, every rank runs the same program.
//! let world = World::init()?;
//! let comm = world.comm();
//! let v = Leg::new(Direction::In, [(U1(-1), 8), (U1(0), 16), (U1(1), 8)])?;
//! let m = Arc::new(BlockStructure::new([v.clone()], [v.dual()], U1(0))?);
//! let a = DistArray::scatter(comm, &AsyncArray::<f64, U1>::random(Arc::clone(&m), 1), &ProcessMap::Cyclic)?;
//! let b = DistArray::scatter(comm, &AsyncArray::<f64, U1>::random(m, 2), &ProcessMap::BySector)?;
//! let c = contract(&Contraction::new("ij,jk->ik")?, &a, &b, &ProcessMap::Cyclic)?;
//! println!("rank {}: |AB| = {}", comm.rank(), c.norm()?);
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "mpi"))]
//! # fn main() {}
//! ```

#![cfg_attr(not(feature = "mpi"), allow(unused))]

#[cfg(feature = "mpi")]
mod array;
#[cfg(feature = "mpi")]
mod comm;
#[cfg(feature = "mpi")]
mod contract;
#[cfg(feature = "mpi")]
mod error;
#[cfg(feature = "mpi")]
mod factor;
#[cfg(feature = "mpi")]
mod map;
#[cfg(feature = "mpi")]
mod tile;

#[cfg(feature = "mpi")]
pub use array::DistArray;
#[cfg(feature = "mpi")]
pub use comm::{Comm, World};
#[cfg(feature = "mpi")]
pub use contract::contract;
#[cfg(feature = "mpi")]
pub use error::Error;
#[cfg(feature = "mpi")]
pub use factor::{DistSvd, svd};
#[cfg(feature = "mpi")]
pub use map::{Owners, ProcessMap};
#[cfg(feature = "mpi")]
pub use tile::tiled_leg;
