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
    /// A one-site operator that is not a map of a physical leg (legs `(o In, i Out)` with
    /// `i` the dual of `o`), or that does not act on the site it is asked at.
    #[error("operator {what}: expected {expected}, found {found}")]
    Operator {
        /// Which operator (or which use of it).
        what: String,
        /// What the convention or the site asks for.
        expected: String,
        /// What the operator has.
        found: String,
    },
    /// A site index past the end of the chain.
    #[error("site {site} is past the end of a chain of {len} sites")]
    Site {
        /// The index given.
        site: usize,
        /// The number of sites.
        len: usize,
    },
    /// A state of zero norm, which has no expectation values.
    #[error("expected a state of nonzero norm, found norm {norm}")]
    ZeroNorm {
        /// The norm found.
        norm: f64,
    },
    /// A measurement report that could not be written or read (JSON or the file system).
    #[error("measurement report: {0}")]
    Report(String),
}

impl From<tessera_io::Error> for Error {
    fn from(e: tessera_io::Error) -> Self {
        match e {
            tessera_io::Error::Task(e) => Error::Core(e),
            e => Error::Io(e.into()),
        }
    }
}
