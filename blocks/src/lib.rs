//! Tessera's symmetric block-sparse tensors.
//!
//! Owns: [sectors](sector) (symmetry labels, fusion, fermionic grading; the SU(2) spin
//! sector and its exact coupling coefficients in [`su2`]), [legs](leg)
//! (segments of sectors with a direction), [block structures](structure) (which blocks a
//! tensor has and where each lives in its one sector-major allocation), and [`Tensor`]: one
//! allocation on a placement (host memory, [`AsyncArray`]; a CUDA device, `DeviceArray`),
//! the structure as its synchronous descriptor table, one hazard record per block, alias
//! handles of blocks, and operations written once over the placement and enrolled as tasks
//! over blocks (on the host also per-block strided views and the real/complex conversions
//! `to_complex` and `to_real`).
//! Structures are immutable once built; every constructor and operation checks its input
//! and reports misuse as [`Error`] before anything is enrolled.
//!
//! ```
//! use tessera_blocks::{BlockStructure, Direction, Leg, U1};
//!
//! // A U(1) matrix: one incoming leg (rows), one outgoing leg (columns), flux 0.
//! let row = Leg::new(Direction::In, [(U1(-1), 2), (U1(0), 3), (U1(1), 1)])?;
//! let col = Leg::new(Direction::Out, [(U1(0), 4), (U1(1), 2)])?;
//! let s = BlockStructure::new([row], [col], U1(0))?;
//!
//! // Charge is conserved: only (0 -> 0) and (1 -> 1) are blocks.
//! assert_eq!(s.num_blocks(), 2);
//! let id = s.block_id_by_sectors(&[U1(1), U1(1)])?.expect("an allowed block");
//! let b = s.block(id).expect("a block id");
//! println!("block {id}: shape {:?} at offset {}", b.shape(), b.offset());
//! assert_eq!((b.shape(), b.offset()), (&[1, 2][..], 3 * 4));
//! assert_eq!(s.total_len(), 3 * 4 + 1 * 2);
//! # Ok::<(), tessera_blocks::Error>(())
//! ```
//!
//! # Charges, coupled sectors, sector indices
//!
//! "Sector" names three different things in this workspace (a rename would touch several
//! hundred uses in every crate; new items say *charge* for the first meaning):
//!
//! 1. **A charge**, or sector label: a value of a [`Sector`] type (`U1(1)`,
//!    `FermionParity::ODD`). A leg is a list of `(charge, dimension)` [`Segment`]s (its
//!    field is `Segment::sector`), and a block is named by one charge per leg:
//!    [`BlockStructure::block_of`], [`BlockStructure::block_id_by_sectors`],
//!    [`AsyncArray::block_by_sectors`].
//! 2. **A coupled sector**: every block whose codomain charges fuse to one charge `c`,
//!    stored as one matrix (rows: the codomain charge tuples fusing to `c`, columns: the
//!    domain tuples) in one region of the allocation: [`CoupledSector`] (its charge is
//!    [`CoupledSector::sector`]), [`BlockStructure::sectors`]; the coalesced views, the
//!    per-sector factorizations and the "sector GEMMs" of a contraction plan work on these.
//! 3. **A sector index**: a position, either into [`BlockStructure::sectors`] (what
//!    `Coalesce::sector(c: usize)` and `tessera_coalesce::Error::UnknownSector` take and
//!    [`BlockStructure::sector_index`] returns) or into a leg's segments (a bond segment of
//!    an SVD's singular values). Find positions from charges with
//!    [`BlockStructure::sector_of`] and [`Leg::segment_of`] (and `Coalesce::sector_by_charge`,
//!    `SingularValues::values_of` in `tessera-coalesce`), never by counting.

#![deny(missing_docs)]

mod array;
mod convert;
mod error;
pub mod leg;
mod lookup;
mod ops;
pub mod sector;
pub mod structure;
pub mod su2;
mod tensor;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use array::{
    BlockAlias, BlockRegion, BlockSetAlias, BlockSetRegion, BlockViews, BlockViewsMut,
};
pub use error::Error;
pub use leg::{Direction, FusionMap, Leg, Segment};
pub use ops::Blocks;
pub use sector::{
    AbelianSector, FermionParity, FermionicU1, FusionStyle, Fusions, Product, Sector, Trivial, U1,
    Z2, Zn,
};
pub use structure::{Block, BlockStructure, CoupledSector, Permuted, Remapped};
pub use su2::SU2;
#[cfg(feature = "cuda")]
pub use tensor::DeviceArray;
pub use tensor::{
    AsyncArray, Tensor, TensorAlias, TensorRegion, block_extent, block_matrix, sector_matrix,
};

/// `bitvec`'s slice and vector types, as used by presence masks.
pub use bitvec::prelude::{BitSlice, BitVec};
