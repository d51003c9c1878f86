//! The contraction crate's error type.
//!
//! Owns: [`Error`]. Invariant: every variant says what was expected and what was given, and
//! an error returned by planning or submission means nothing was enrolled or written.

/// Errors of contraction specs, planning and submission.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The spec string does not parse.
    #[error(
        "expected a spec like \"abc,cd->abd\" (optionally \"->ab|d\" to split the output), but {reason} in {spec:?}"
    )]
    Syntax {
        /// The spec as given.
        spec: String,
        /// What is wrong.
        reason: String,
    },
    /// A label appears twice on one operand (a trace), or in both operands and the output
    /// (a batch index): neither is a pairwise contraction.
    #[error(
        "label {label:?} {reason}; expected each label once per operand, and either contracted (both operands, not the output) or free (one operand and the output)"
    )]
    Label {
        /// The label.
        label: char,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A spec gives an operand (or the output) more legs than the documented limit.
    #[error("operand {operand} has {given} legs; expected at most {limit}")]
    TooManyLegs {
        /// `"A"`, `"B"` or `"the output"`.
        operand: &'static str,
        /// The limit ([`MAX_LEGS`](crate::spec::MAX_LEGS)).
        limit: usize,
        /// The legs given.
        given: usize,
    },
    /// An operand has a different number of legs than its labels.
    #[error("operand {operand} has {given} legs, but the spec labels {expected}")]
    Arity {
        /// `"A"` or `"B"`.
        operand: &'static str,
        /// Labels in the spec.
        expected: usize,
        /// Legs of the operand.
        given: usize,
    },
    /// Tensordot axes out of range or repeated.
    #[error("tensordot axes {given:?} of operand {operand} are not distinct axes below {legs}")]
    Axes {
        /// `"A"` or `"B"`.
        operand: &'static str,
        /// The operand's number of legs.
        legs: usize,
        /// The axes given.
        given: Vec<usize>,
    },
    /// A contracted pair of legs does not fit (directions, sectors or dimensions).
    #[error(
        "legs {label:?} cannot be contracted (A leg {a_leg}, B leg {b_leg}, after conjugation): {source}"
    )]
    Legs {
        /// The label of the pair.
        label: char,
        /// Its position on A.
        a_leg: usize,
        /// Its position on B.
        b_leg: usize,
        /// The leg check's error.
        source: tessera_blocks::Error,
    },
    /// The output array given to accumulate into has another structure than the contraction
    /// produces.
    #[error("expected an output with {expected}, but it has {given}")]
    Output {
        /// The structure the contraction produces.
        expected: String,
        /// The output's structure.
        given: String,
    },
    /// The output shares storage with an operand.
    #[error("the output shares its storage with operand {operand}; expected a distinct array")]
    Aliased {
        /// `"A"` or `"B"`.
        operand: &'static str,
    },
    /// The output labels asked of a network are not exactly its open legs.
    #[error(
        "expected the network's open legs {expected:?} once each, in any order (a '|' at \
         most once, to split codomain from domain), but {given:?} was given: {reason}"
    )]
    OutputLabels {
        /// The open legs (labels on one tensor), in network order.
        expected: String,
        /// The output asked for.
        given: String,
        /// What is wrong (a missing, extra or repeated label, a second '|').
        reason: String,
    },
    /// A network was given the wrong number of specs or tensors.
    #[error("a network of {given} tensors: {reason}")]
    Network {
        /// The number of tensors.
        given: usize,
        /// What is wrong.
        reason: String,
    },
    /// An error of the block-sparse layer (structure derivation, submission).
    #[error(transparent)]
    Blocks(#[from] tessera_blocks::Error),
    /// An error of a coalesced view.
    #[error(transparent)]
    Coalesce(#[from] tessera_coalesce::Error),
    /// An error of the runtime (enrollment, a failed task).
    #[error(transparent)]
    Runtime(#[from] tessera_core::Error),
}
