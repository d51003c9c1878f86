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

    /// An error of the block layer (an unknown block, a structure that cannot be built).
    #[error(transparent)]
    Blocks(#[from] tessera_blocks::Error),

    /// An error of the runtime (a poisoned input, a wait inside a task).
    #[error(transparent)]
    Core(#[from] tessera_core::Error),
}
