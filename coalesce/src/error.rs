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

    /// A truncation setting out of its range.
    #[error("invalid truncation: expected {expected}, but {what} is {given}")]
    InvalidTruncation {
        /// Which setting.
        what: &'static str,
        /// Its valid range.
        expected: &'static str,
        /// The value given.
        given: String,
    },

    /// A tensor that is not a map of a space to itself, given to a Hermitian
    /// eigendecomposition.
    #[error(
        "expected a tensor from a space to itself (domain legs the duals of the codomain legs, \
         trivial flux), but {reason}"
    )]
    NotEndomorphism {
        /// What differs.
        reason: String,
    },

    /// A dense factorization did not converge on one sector matrix.
    #[error("the {what} of coupled sector {sector} ({rows} x {cols}) did not converge")]
    NoConvergence {
        /// Which factorization.
        what: &'static str,
        /// The sector index.
        sector: usize,
        /// Rows of its matrix.
        rows: usize,
        /// Columns of its matrix.
        cols: usize,
    },

    /// An error of the block layer (an unknown block, a structure that cannot be built).
    #[error(transparent)]
    Blocks(#[from] tessera_blocks::Error),

    /// An error of the runtime (a poisoned input, a wait inside a task).
    #[error(transparent)]
    Core(#[from] tessera_core::Error),
}
