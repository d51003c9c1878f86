//! The facade's one error type.
//!
//! Owns: [`Error`], which every workspace crate's error converts into (`?` works on any
//! Tessera call in a function returning `Result<_, tessera::Error>`). Invariant: the
//! conversion keeps the inner error whole (its message, which says what was expected and
//! what was given, and its source) and files it under the layer it came from: an error
//! that a crate only passed on (a contraction's block-layer error, a factorization's
//! runtime error) is filed under the layer that raised it, so one match arm per layer
//! sees every error of that layer.

/// An error of any Tessera layer.
///
/// ```
/// use tessera::prelude::*;
///
/// fn first_block() -> Result<usize, tessera::Error> {
///     let v = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 1)])?; // tessera_blocks::Error
///     let s = BlockStructure::new([v.clone()], [v.dual()], U1(0))?;
///     let a = AsyncArray::<f64, U1>::random(s, 7);
///     let c = Contraction::new("ab,bc->ac")?.apply(&a, &a)?; // tessera_contract::Error
///     let _ = c.norm().get()?; // tessera_core::Error
///     Ok(c.structure().block_of(&[U1(1), U1(1)])?)
/// }
/// assert_eq!(first_block()?, 1);
/// # Ok::<(), tessera::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the runtime (a poisoned value, an aliased access, a wait inside a task).
    #[error(transparent)]
    Core(tessera_core::Error),
    /// An error of sectors, legs, block structures or block-sparse arrays.
    #[error(transparent)]
    Blocks(tessera_blocks::Error),
    /// An error of a coalesced view or a factorization.
    #[error(transparent)]
    Coalesce(tessera_coalesce::Error),
    /// An error of a contraction spec, plan, submission or network.
    #[error(transparent)]
    Contract(tessera_contract::Error),
    /// An error of saving or loading a checkpoint ([`crate::io`]).
    #[error(transparent)]
    Io(IoError),
    /// An error of a matrix-product chain or algorithm ([`crate::mps`]).
    #[error(transparent)]
    Mps(tessera_mps::Error),
    /// An error of the CUDA backend.
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Cuda(tessera_backends::cuda::CudaError),
}

impl From<tessera_core::Error> for Error {
    fn from(e: tessera_core::Error) -> Self {
        Error::Core(e)
    }
}

impl From<tessera_blocks::Error> for Error {
    fn from(e: tessera_blocks::Error) -> Self {
        match e {
            tessera_blocks::Error::Runtime(e) => Error::Core(e),
            #[cfg(feature = "cuda")]
            tessera_blocks::Error::Cuda(e) => Error::Cuda(e),
            e => Error::Blocks(e),
        }
    }
}

impl From<tessera_coalesce::Error> for Error {
    fn from(e: tessera_coalesce::Error) -> Self {
        match e {
            tessera_coalesce::Error::Blocks(e) => e.into(),
            tessera_coalesce::Error::Core(e) => Error::Core(e),
            e => Error::Coalesce(e),
        }
    }
}

impl From<tessera_contract::Error> for Error {
    fn from(e: tessera_contract::Error) -> Self {
        match e {
            tessera_contract::Error::Blocks(e) => e.into(),
            tessera_contract::Error::Coalesce(e) => e.into(),
            tessera_contract::Error::Runtime(e) => Error::Core(e),
            e => Error::Contract(e),
        }
    }
}

/// A checkpoint error ([`tessera_io::Error`]), shared so that [`Error`] stays `Clone` (an
/// I/O error cannot be cloned); two are equal when they are the same error.
pub use tessera_io::SharedError as IoError;

impl From<tessera_io::Error> for Error {
    fn from(e: tessera_io::Error) -> Self {
        match e {
            tessera_io::Error::Task(e) => Error::Core(e),
            e => Error::Io(IoError(std::sync::Arc::new(e))),
        }
    }
}

impl From<tessera_mps::Error> for Error {
    fn from(e: tessera_mps::Error) -> Self {
        match e {
            tessera_mps::Error::Core(e) => Error::Core(e),
            tessera_mps::Error::Blocks(e) => e.into(),
            tessera_mps::Error::Coalesce(e) => e.into(),
            tessera_mps::Error::Contract(e) => e.into(),
            tessera_mps::Error::Io(e) => Error::Io(e),
            e => Error::Mps(e),
        }
    }
}

#[cfg(feature = "cuda")]
impl From<tessera_backends::cuda::CudaError> for Error {
    fn from(e: tessera_backends::cuda::CudaError) -> Self {
        Error::Cuda(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn every_layer_converts_and_keeps_its_message() {
        let blocks = tessera_blocks::Error::ZeroDimension { segment: 3 };
        let e = Error::from(blocks.clone());
        assert_eq!(e, Error::Blocks(blocks.clone()));
        assert_eq!(e.to_string(), blocks.to_string());

        // Passed on by a contraction or a factorization: filed under the block layer.
        let via_contract = Error::from(tessera_contract::Error::Blocks(blocks.clone()));
        assert_eq!(via_contract, Error::Blocks(blocks.clone()));
        let via_coalesce = Error::from(tessera_coalesce::Error::Blocks(blocks.clone()));
        assert_eq!(via_coalesce, Error::Blocks(blocks.clone()));
        let deep = tessera_contract::Error::Coalesce(tessera_coalesce::Error::Blocks(blocks));
        assert!(matches!(Error::from(deep), Error::Blocks(_)));

        let core = tessera_core::Error::WaitOnWorker {
            thread: "w0".into(),
        };
        for e in [
            Error::from(core.clone()),
            Error::from(tessera_blocks::Error::Runtime(core.clone())),
            Error::from(tessera_coalesce::Error::Core(core.clone())),
            Error::from(tessera_contract::Error::Runtime(core.clone())),
        ] {
            assert_eq!(e, Error::Core(core.clone()));
            assert_eq!(e.to_string(), core.to_string());
            assert!(e.source().is_none());
        }

        let spec = tessera_contract::Contraction::new("ab,bc").unwrap_err();
        let e = Error::from(spec.clone());
        assert_eq!(e.to_string(), spec.to_string());
        assert!(e.to_string().contains("expected"), "{e}");
        assert!(matches!(e, Error::Contract(_)));
    }

    /// A checkpoint that cannot be loaded converts with its message; a runtime error passed
    /// on by a save is filed under the runtime.
    #[test]
    fn checkpoint_errors_convert_and_keep_their_message() {
        let missing = std::env::temp_dir().join("tessera-error-test-no-such-file.npz");
        let io = tessera_io::Checkpoint::load(&missing).unwrap_err();
        let text = io.to_string();
        let e = Error::from(io);
        assert!(matches!(e, Error::Io(_)), "{e:?}");
        assert_eq!(e.to_string(), text);
        assert_eq!(e.clone(), e);

        let core = tessera_core::Error::WaitOnWorker {
            thread: "w0".into(),
        };
        let e = Error::from(tessera_io::Error::Task(core.clone()));
        assert_eq!(e, Error::Core(core));
    }
}
