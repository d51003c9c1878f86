//! The crate's error type.
//!
//! Owns [`Error`], the one error enum of `tessera-coalesce`. Invariant: every fallible
//! operation of this crate returns one of these variants instead of panicking on user input,
//! each message says what was expected and what was given, and an operation that refuses its
//! input when it is called has enrolled nothing and written nothing. What only the data
//! decides ([`Error::NonFinite`], [`Error::NoConvergence`]) is found by a task: that task
//! fails with the variant and poisons exactly what it would have written (a waiting
//! operation such as `svd` returns it), and [`Error::from_task_failure`] reads it back out.

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

    /// Singular values, or kept dimensions, that cannot be what they are given as.
    #[error("expected {expected}, but {given}")]
    BadValues {
        /// What they must be.
        expected: String,
        /// What was given.
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

    /// A tensor to be scaled by singular values that does not carry their bond leg where
    /// the scaling needs it.
    #[error("expected {expected}, but the tensor is {given}")]
    NotOnBond {
        /// What the scaling needs.
        expected: &'static str,
        /// The tensor's structure, summarised.
        given: String,
    },

    /// A dense factorization did not converge on one sector matrix.
    #[error("the {what} of coupled sector {sector} ({rows} x {cols}) did not converge")]
    NoConvergence {
        /// Which factorization.
        what: &'static str,
        /// The coupled sector (`Display` form).
        sector: String,
        /// Rows of its matrix.
        rows: usize,
        /// Columns of its matrix.
        cols: usize,
    },

    /// A factorization met a number that is not finite (NaN, `+inf` or `-inf`) in a sector
    /// matrix it was given, or produced one (its input near the largest finite numbers): it
    /// stops there instead of handing on NaN factors, and the truncation never ranks a NaN.
    /// The data is known only when the sector's task runs, so this is the error that task
    /// reports: [`svd`](crate::svd) returns it, the factors of [`qr`](crate::qr),
    /// [`lq`](crate::lq) and [`eigh`](crate::eigh) are poisoned with it (see
    /// [`Error::from_task_failure`]).
    #[error(
        "expected finite numbers, but the {operation} of coupled sector {sector} \
         ({rows} x {cols}) met {value} at {place}"
    )]
    NonFinite {
        /// Which factorization.
        operation: &'static str,
        /// The coupled sector (`Display` form).
        sector: String,
        /// Rows of its matrix.
        rows: usize,
        /// Columns of its matrix.
        cols: usize,
        /// The value met (`NaN`, `inf`, `-inf`, or a complex number with such a part).
        value: String,
        /// Where: an entry of the sector matrix given, or a value computed from it.
        place: String,
    },

    /// An error of the block layer (an unknown block, a structure that cannot be built).
    #[error(transparent)]
    Blocks(#[from] tessera_blocks::Error),

    /// An error of the runtime (a poisoned input, a wait inside a task).
    #[error(transparent)]
    Core(#[from] tessera_core::Error),
}

impl Error {
    /// The error of this crate that a failed task of this crate reported, when `err` is a
    /// value poisoned by that failure: how a caller reads the typed reason (say
    /// [`Error::NonFinite`]) out of a factor it waited on.
    ///
    /// ```
    /// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    /// use tessera_coalesce::{Error, qr};
    ///
    /// let leg = Leg::new(Direction::In, [(U1(0), 2)])?;
    /// let a = AsyncArray::<f64, U1>::from_blocks(
    ///     BlockStructure::new([leg.clone()], [leg.dual()], U1(0))?,
    ///     &[vec![1.0, f64::NAN, 0.0, 1.0]],
    /// )?;
    /// let f = qr(&a)?; // submitted: the data is read when the task runs
    /// let Err(tessera_blocks::Error::Runtime(e)) = f.q.to_dense() else { panic!() };
    /// assert!(matches!(Error::from_task_failure(&e), Some(Error::NonFinite { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_task_failure(err: &tessera_core::Error) -> Option<&Error> {
        err.task_error::<Error>()
    }

    /// [`from_task_failure`](Error::from_task_failure) of the runtime error inside `self`
    /// (as [`Error::Core`], or as a block-layer error), if any.
    pub fn task_failure(&self) -> Option<&Error> {
        match self {
            Error::Core(e) | Error::Blocks(tessera_blocks::Error::Runtime(e)) => {
                Self::from_task_failure(e)
            }
            _ => None,
        }
    }
}
