//! The crate's error type.
//!
//! Owns [`Error`], the one error enum of `tessera-blocks`. Invariant: every fallible operation
//! of this crate on user input returns one of these variants instead of panicking, and every
//! message says what was expected and what was given. Sectors appear in messages through their
//! `Display` form, so the enum is not generic over the sector type.

use crate::leg::Direction;
use tessera_core::AllocError;

/// Errors of sector, leg and block-structure construction and queries.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A segment was given dimension 0.
    #[error("segment {segment} has dimension 0; expected a dimension of at least 1")]
    ZeroDimension {
        /// The offending segment.
        segment: usize,
    },

    /// A symmetric leg was given the same sector twice.
    #[error(
        "sector {sector} appears in segments {first} and {second}; expected each sector at most \
         once on a symmetric leg (use `Leg::tiled` for repeated sectors)"
    )]
    RepeatedSector {
        /// The repeated sector (`Display` form).
        sector: String,
        /// Its first segment.
        first: usize,
        /// Its second segment.
        second: usize,
    },

    /// A direction was given as a number other than +1 or -1.
    #[error("invalid direction {given}; expected +1 (In) or -1 (Out)")]
    InvalidDirection {
        /// The number given.
        given: i64,
    },

    /// A segment index is out of range for its leg.
    #[error("segment {segment} is out of range; expected an index below {segments} on leg {leg}")]
    SegmentOutOfRange {
        /// The leg (its position in the structure, or 0 for a lone leg).
        leg: usize,
        /// The index given.
        segment: usize,
        /// The number of segments of that leg.
        segments: usize,
    },

    /// Two legs to be contracted have the same direction.
    #[error("legs are not contractible: expected opposite directions, both are {direction}")]
    SameDirection {
        /// The common direction.
        direction: Direction,
    },

    /// Two legs to be contracted have different numbers of segments.
    #[error(
        "legs are not contractible: expected the same number of segments, the left leg has \
         {left}, the right leg has {right}"
    )]
    SegmentCountMismatch {
        /// Segments of the left leg.
        left: usize,
        /// Segments of the right leg.
        right: usize,
    },

    /// Two legs to be contracted differ at one segment.
    #[error(
        "legs are not contractible at segment {segment}: expected the same sector and \
         dimension, the left leg has ({left_sector}, {left_dim}), the right leg has \
         ({right_sector}, {right_dim})"
    )]
    SegmentMismatch {
        /// The first segment that differs.
        segment: usize,
        /// The left leg's sector there (`Display` form).
        left_sector: String,
        /// The left leg's dimension there.
        left_dim: usize,
        /// The right leg's sector there (`Display` form).
        right_sector: String,
        /// The right leg's dimension there.
        right_dim: usize,
    },

    /// A size (a fused dimension, a block size, a count of blocks, the allocation length,
    /// a byte size, the dense size) overflows `usize`, or a byte size `isize::MAX`.
    #[error(
        "{what} overflows; expected sizes that fit in the address space (counts in usize, \
         byte sizes at most isize::MAX)"
    )]
    Overflow {
        /// What overflowed.
        what: &'static str,
    },

    /// The allocator (the operating system) refused an allocation of a representable size.
    #[error(
        "the allocator refused {bytes} bytes for {what}; expected memory the system can provide"
    )]
    Allocation {
        /// What the allocation was for.
        what: &'static str,
        /// Its size.
        bytes: usize,
    },

    /// The codomain was said to have more legs than the structure has.
    #[error("codomain of {n_codomain} legs requested; expected at most the {legs} legs given")]
    SplitOutOfRange {
        /// The codomain size asked for.
        n_codomain: usize,
        /// The number of legs.
        legs: usize,
    },

    /// A permutation is not a permutation of the legs.
    #[error("expected a permutation of 0..{legs} (each leg exactly once), got {given:?}")]
    InvalidPermutation {
        /// The number of legs.
        legs: usize,
        /// The list given.
        given: Vec<usize>,
    },

    /// A tuple (of segments or sectors) has the wrong number of entries.
    #[error("expected one entry per leg ({expected}), got {given}")]
    ArityMismatch {
        /// The number of legs.
        expected: usize,
        /// The number of entries given.
        given: usize,
    },

    /// A presence mask does not have one bit per allowed block.
    #[error("presence mask has {given} bits; expected one per allowed block ({expected})")]
    MaskLength {
        /// The number of allowed blocks.
        expected: usize,
        /// The number of bits given.
        given: usize,
    },

    /// A screening threshold is negative or not a number.
    #[error("screening threshold {given} is invalid; expected a number >= 0 (or +inf)")]
    InvalidThreshold {
        /// The threshold given.
        given: f64,
    },

    /// A block norm given to screening is negative or not a number.
    #[error("norm of block {block} is {given}; expected a number >= 0 (or +inf)")]
    InvalidNorm {
        /// The block.
        block: usize,
        /// The norm given.
        given: f64,
    },

    /// A lookup by sector tuple met a leg that carries the sector in several segments.
    #[error(
        "leg {leg} carries sector {sector} in several segments; expected a leg with unique \
         sectors for a lookup by sector (look the block up by segment tuple instead)"
    )]
    AmbiguousSector {
        /// The leg.
        leg: usize,
        /// The sector (`Display` form).
        sector: String,
    },

    /// A block id that the structure does not have.
    #[error("block {block} does not exist; expected a block id below {blocks}")]
    UnknownBlock {
        /// The id given.
        block: usize,
        /// How many blocks the structure has.
        blocks: usize,
    },

    /// A range of coupled-sector positions that passes the structure's last sector.
    #[error("coupled sectors {start}..{end} do not exist; expected a range within 0..{sectors}")]
    UnknownSectors {
        /// The range's start.
        start: usize,
        /// The range's end.
        end: usize,
        /// How many coupled sectors the structure has.
        sectors: usize,
    },

    /// A segment or sector tuple that names no present block.
    #[error("no present block has segments {segments:?}; expected an allowed, present block")]
    NoSuchBlock {
        /// The segment tuple given (or found from the sectors given).
        segments: Vec<usize>,
    },

    /// Charges (one per leg) that name no present block.
    #[error("expected one charge per leg naming a present block, but ({asked}) {reason}")]
    NoBlockWithCharges {
        /// The charges asked for (`Display` forms, comma-separated).
        asked: String,
        /// Why no block has them, and which charges do exist (a leg's charges, or the
        /// charge tuples of the present blocks).
        reason: String,
    },

    /// A coupled charge that labels no coupled sector of the structure.
    #[error(
        "expected the coupled charge of a sector that has blocks (one of {present}), but \
         {asked} was asked"
    )]
    NoSectorWithCharge {
        /// The charge asked for (`Display` form).
        asked: String,
        /// The coupled charges of the structure's sectors (`Display` forms, in order).
        present: String,
    },

    /// Two operands of an operation need the same structure and do not have it.
    #[error("expected an operand with structure {expected}, but it has {given}")]
    StructureMismatch {
        /// The structure required (legs, split and flux, as text).
        expected: String,
        /// The structure given.
        given: String,
    },

    /// A dense tensor with a nonzero element outside every present block.
    #[error(
        "the dense tensor breaks the symmetry: element {index:?} is {value}, but it lies in          block (segments {segments:?}), which the structure does not have; expected 0 there"
    )]
    SymmetryBreaking {
        /// The element's multi-index.
        index: Vec<usize>,
        /// The segment tuple of the block it falls in.
        segments: Vec<usize>,
        /// The offending value.
        value: String,
    },

    /// Data of the wrong length.
    #[error("{what}: expected {expected} elements, got {given}")]
    DataLength {
        /// What the data is for.
        what: String,
        /// The length required.
        expected: usize,
        /// The length given.
        given: usize,
    },

    /// A multi-index outside the tensor.
    #[error("index {index:?} is outside the tensor; expected one index per leg below {dims:?}")]
    IndexOutOfRange {
        /// The index given.
        index: Vec<usize>,
        /// The dimensions of the legs.
        dims: Vec<usize>,
    },

    /// An output shares its storage with an input of the same operation.
    #[error(
        "{operation}: the output must not share storage with an input, but it is the same array"
    )]
    AliasedOperands {
        /// The operation.
        operation: &'static str,
    },

    /// Operands of one operation live in different storage domains (devices).
    #[error(
        "expected every operand in {expected} (where the operation runs), but one lives in \
         {given}: move it with a transfer first"
    )]
    DeviceMismatch {
        /// The domain of the operation (its first operand's).
        expected: tessera_core::Domain,
        /// The domain of the operand that differs.
        given: tessera_core::Domain,
    },

    /// A tolerance that is negative or not a number.
    #[error("{what} {given} is invalid; expected a number >= 0 (or +inf)")]
    InvalidTolerance {
        /// Which tolerance.
        what: &'static str,
        /// The value given.
        given: f64,
    },

    /// A complex tensor converted to a real one holds an element whose imaginary part is not
    /// zero within the tolerance (or is not a number). Found when the conversion's task runs:
    /// the task fails with it and poisons the blocks it converts (see
    /// [`Error::from_task_failure`]).
    #[error(
        "expected a real tensor (every imaginary part at most {tol:e} in magnitude), but \
         element {index:?} (block {block}) is {value}"
    )]
    ImaginaryPart {
        /// The element's index in the tensor (one per leg, as `AsyncArray::get` takes it).
        index: Vec<usize>,
        /// The block holding it.
        block: usize,
        /// The element.
        value: String,
        /// The tolerance given.
        tol: f64,
    },

    /// The CUDA backend refused or failed a device operation.
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Cuda(#[from] tessera_backends::cuda::CudaError),

    /// The runtime refused or failed the operation (a poisoned value, a wait inside a task).
    #[error(transparent)]
    Runtime(#[from] tessera_core::Error),
}

impl Error {
    /// The error of an allocation for `what` that `SharedBuffer` refused: [`Error::Overflow`]
    /// for a byte size past `isize::MAX`, [`Error::Allocation`] for the allocator's refusal.
    pub(crate) fn of_alloc(what: &'static str) -> impl Fn(AllocError) -> Error {
        move |e| match e {
            AllocError::TooLarge { .. } => Error::Overflow { what },
            AllocError::Refused { bytes } => Error::Allocation { what, bytes },
        }
    }

    /// The error of this crate that a failed task of this crate reported, when `err` is a
    /// value poisoned by that failure (say [`Error::ImaginaryPart`] from
    /// [`AsyncArray::to_real`](crate::AsyncArray::to_real)).
    pub fn from_task_failure(err: &tessera_core::Error) -> Option<&Error> {
        err.task_error::<Error>()
    }
}

/// An empty vector with room for exactly `len` elements, or [`Error::Overflow`] (the byte
/// size past `isize::MAX`) or [`Error::Allocation`] (refused), naming `what`: for tables
/// whose length comes from user input, so a hostile size is an error, not an abort.
pub(crate) fn try_vec<T>(len: usize, what: &'static str) -> Result<Vec<T>, Error> {
    let bytes = len
        .checked_mul(size_of::<T>())
        .filter(|&b| isize::try_from(b).is_ok())
        .ok_or(Error::Overflow { what })?;
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| Error::Allocation { what, bytes })?;
    Ok(v)
}
