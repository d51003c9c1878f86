//! The distributed crate's errors.
//!
//! Owns: [`Error`]. Invariant: an operation that returns an error on one rank has told every
//! other rank (see `comm`), so theirs fail too instead of waiting for it.

/// What went wrong in a distributed operation.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// MPI could not be initialised as the runtime needs it.
    #[error("expected MPI initialised once with thread level Multiple, but {given}")]
    Init {
        /// What happened instead.
        given: String,
    },
    /// A process map does not fit the structure or the job.
    #[error("expected a process map of {expected}, but {given}")]
    Map {
        /// What the map must be.
        expected: String,
        /// What it was.
        given: String,
    },
    /// Two distributed arrays that must share structure and map do not.
    #[error("expected arrays with the same structure and process map, but {given}")]
    Mismatch {
        /// How they differ.
        given: String,
    },
    /// Another rank failed: its error, as it reported it.
    #[error("rank {rank} failed: {message}")]
    Remote {
        /// The rank that failed.
        rank: usize,
        /// Its error.
        message: String,
    },
    /// A local error of the runtime (a poisoned block, a host wait refused).
    #[error(transparent)]
    Runtime(#[from] tessera_core::Error),
    /// A local error of the arrays.
    #[error(transparent)]
    Blocks(#[from] tessera_blocks::Error),
    /// A local error of a contraction.
    #[error(transparent)]
    Contract(#[from] tessera_contract::Error),
    /// A local error of a factorization (a sector with a NaN, a truncation out of range).
    #[error(transparent)]
    Coalesce(#[from] tessera_coalesce::Error),
}
