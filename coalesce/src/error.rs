//! The crate's error type.
//!
//! Owns [`Error`], the one error enum of `tessera-coalesce`. Invariant: every fallible
//! operation of this crate returns one of these variants instead of panicking on user input,
//! each message says what was expected and what was given, and an operation that returns an
//! error has enrolled nothing and written nothing.

/// Errors of coalesced views and per-sector factorizations.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A coupled-sector index past the structure's sectors.
    #[error("coupled sector {sector} is out of range; expected an index below {sectors}")]
    UnknownSector {
        /// The index given.
        sector: usize,
        /// How many coupled sectors the structure has.
        sectors: usize,
    },

    /// A coupled sector whose region is not one matrix (a presence mask left holes in it).
    #[error(
        "coupled sector {sector} is packed ({blocks} of the blocks of its {rows} x {cols} \
         matrix are present, each stored on its own); expected a dense sector matrix \
         (gather its blocks into a temporary instead)"
    )]
    PackedSector {
        /// The sector index.
        sector: usize,
        /// Its present blocks.
        blocks: usize,
        /// Rows of its logical matrix.
        rows: usize,
        /// Columns of its logical matrix.
        cols: usize,
    },

    /// A block set with no block.
    #[error("expected at least one block in the block set, but none was given")]
    EmptyBlockSet,

    /// A block given twice in one block set.
    #[error("block {block} appears twice in the block set; expected each block at most once")]
    RepeatedBlock {
        /// The repeated block id.
        block: usize,
    },

    /// A block set that spans several coupled sectors.
    #[error(
        "expected every block of the set in one coupled sector, but block {first} is in \
         sector {first_sector} and block {other} in sector {other_sector}"
    )]
    MixedSectors {
        /// The first block of the set.
        first: usize,
        /// Its coupled sector.
        first_sector: usize,
        /// A block in another sector.
        other: usize,
        /// That block's coupled sector.
        other_sector: usize,
    },

    /// A block set that is not one strided matrix of the allocation, asked for as a view.
    #[error(
        "expected blocks that tile one rectangle of a dense sector matrix (a zero-copy view), \
         but {reason}; use `gather_blocks` for an explicit copy"
    )]
    NotOneMatrix {
        /// Why the blocks do not form one matrix.
        reason: String,
    },

    /// An error of the block layer (an unknown block, a structure that cannot be built).
    #[error(transparent)]
    Blocks(#[from] tessera_blocks::Error),

    /// An error of the runtime (a poisoned input, a wait inside a task).
    #[error(transparent)]
    Core(#[from] tessera_core::Error),
}
