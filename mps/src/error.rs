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
    /// An error of a distributed operation (with the `mpi` feature): this rank's, or another
    /// rank's failure as that rank reported it.
    #[cfg(feature = "mpi")]
    #[error(transparent)]
    Distributed(#[from] tessera_distributed::Error),
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
    /// An operator name the site type does not define.
    #[error("site type {site_type}: unknown operator {name:?}; known: {known}")]
    UnknownOperator {
        /// The site type's name.
        site_type: String,
        /// The name given.
        name: String,
        /// The names the site type defines.
        known: String,
    },
    /// An ill-formed site type or on-site operator.
    #[error("site type {site_type}, operator {name:?}: expected {reason}")]
    Operator {
        /// The site type's name.
        site_type: String,
        /// The operator's name (empty for the basis).
        name: String,
        /// What was expected and what was found.
        reason: String,
    },
    /// A term placed on a site outside the chain.
    #[error("term {term}: site {site} is outside the chain of {len} sites (expected 0..{len})")]
    SiteOutOfRange {
        /// The term, as written.
        term: String,
        /// The site given.
        site: usize,
        /// The number of sites.
        len: usize,
    },
    /// A term that does not conserve the charge (its operators' charges do not fuse to the
    /// trivial charge).
    #[error(
        "term {term}: expected a charge-conserving product (trivial total charge), found charge {charge}"
    )]
    ChargeViolation {
        /// The term, as written.
        term: String,
        /// The total charge of its operators.
        charge: String,
    },
    /// A model name that is not known.
    #[error("unknown model {given:?}; known: {known}")]
    UnknownModel {
        /// The name given.
        given: String,
        /// The known names.
        known: String,
    },
    /// A parameter the model does not take.
    #[error("model {model}: unknown parameter {given:?}; accepted: {accepted}")]
    UnknownParameter {
        /// The model.
        model: String,
        /// The key given.
        given: String,
        /// The keys the model accepts.
        accepted: String,
    },
    /// A parameter value that cannot be read or is out of range.
    #[error("model {model}: parameter {key} = {given:?}: expected {expected}")]
    InvalidParameter {
        /// The model.
        model: String,
        /// The key.
        key: String,
        /// The value given.
        given: String,
        /// What the parameter accepts.
        expected: String,
    },
    /// A charge sector that has no state on the chain.
    #[error("charge sector {sector}: expected {expected}")]
    EmptySector {
        /// The sector asked for.
        sector: String,
        /// What a reachable sector is.
        expected: String,
    },
    /// An exact computation larger than its limit.
    #[error("exact {what}: dimension {dimension} exceeds the limit {limit}")]
    TooLarge {
        /// What was to be built.
        what: &'static str,
        /// Its dimension.
        dimension: u64,
        /// The largest accepted.
        limit: u64,
    },
    /// The dense eigensolver failed.
    #[error("dense eigensolver: {0}")]
    Eigensolver(String),
    /// A one-site operator that is not a map of a physical leg (legs `(o In, i Out)` with
    /// `i` the dual of `o`), or that does not act on the site it is asked at.
    #[error("operator {what}: expected {expected}, found {found}")]
    LocalOperator {
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
