//! The error type of the MPS layer.
//!
//! Owns: [`Error`]. Invariant: a lower layer's error is kept whole under the variant of the
//! layer that raised it; this layer's own variants say what was expected and what was given.

/// An error of building or running a matrix-product algorithm.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the runtime.
    #[error(transparent)]
    Core(#[from] tessera_core::Error),
    /// An error of legs, structures or block-sparse arrays.
    #[error(transparent)]
    Blocks(#[from] tessera_blocks::Error),
    /// An error of a factorization.
    #[error(transparent)]
    Coalesce(#[from] tessera_coalesce::Error),
    /// An error of a contraction.
    #[error(transparent)]
    Contract(#[from] tessera_contract::Error),
    /// An error of saving or loading a checkpoint.
    #[error(transparent)]
    Io(#[from] tessera_io::SharedError),
    /// A chain (MPS or MPO) whose tensors do not follow the crate's conventions.
    #[error("{chain} site {site}: expected {expected}, found {found}")]
    Chain {
        /// `"MPS"` or `"MPO"`.
        chain: &'static str,
        /// The offending site.
        site: usize,
        /// What the convention asks for.
        expected: String,
        /// What the tensor has.
        found: String,
    },
    /// A DMRG run asked for something its settings or its state do not allow (a setting out
    /// of range, a pair away from the orthogonality centre, chains that do not match).
    #[error("DMRG {what}: expected {expected}, found {found}")]
    Dmrg {
        /// What was checked.
        what: String,
        /// What the run needs.
        expected: String,
        /// What it was given.
        found: String,
    },
    /// A checkpoint that does not belong to the run resuming from it.
    #[error("checkpoint {}: {what}: expected {expected}, found {found}", path.display())]
    Resume {
        /// The checkpoint file.
        path: std::path::PathBuf,
        /// What differs (the model, the number of sites, the bond dimension, ...).
        what: String,
        /// What the resuming run has.
        expected: String,
        /// What the checkpoint has.
        found: String,
    },
}

impl From<tessera_io::Error> for Error {
    fn from(e: tessera_io::Error) -> Self {
        match e {
            tessera_io::Error::Task(e) => Error::Core(e),
            e => Error::Io(e.into()),
        }
    }
}
