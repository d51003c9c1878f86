//! The arrays a contraction takes, and which backend runs a plan on them.
//!
//! Owns: the sealed [`Operand`] trait. Invariant: the backend is chosen from the operands'
//! storage domain alone: host arrays run on the CPU backend (faer GEMM tasks), device arrays
//! (feature `cuda`) on their device's stream through cuBLAS, and operands of one call always
//! share one domain (checked before anything is enrolled).

use crate::error::Error;
use crate::plan::Plan;
use std::sync::Arc;
use tessera_backends::{Field, Scalar};
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure};
use tessera_core::Domain;

mod sealed {
    pub trait Sealed {}
}

/// An array a [`Contraction`](crate::Contraction) takes: [`AsyncArray`] (host memory, the CPU
/// backend) or, with the `cuda` feature, `DeviceArray` (one CUDA device, cuBLAS). Sealed: the
/// methods past [`structure`](Operand::structure) and [`domain`](Operand::domain) are the
/// crate's own.
pub trait Operand: sealed::Sealed + Sized {
    /// The element type.
    type Elem: Scalar;
    /// The sector type.
    type Sector: AbelianSector;

    /// The descriptor table.
    fn structure(&self) -> &Arc<BlockStructure<Self::Sector>>;

    /// Where the array lives.
    fn domain(&self) -> Domain;

    /// Whether two arrays share storage.
    #[doc(hidden)]
    fn same_storage(&self, other: &Self) -> bool;

    /// That `other` lives where `self` does.
    #[doc(hidden)]
    fn check_domain(&self, other: &Self) -> Result<(), Error> {
        if self.domain() == other.domain() {
            Ok(())
        } else {
            Err(tessera_blocks::Error::DeviceMismatch {
                expected: self.domain(),
                given: other.domain(),
            }
            .into())
        }
    }

    /// A new array of `structure` in `self`'s domain, to be written in full.
    #[doc(hidden)]
    fn output(&self, structure: &Arc<BlockStructure<Self::Sector>>) -> Result<Self, Error>;

    /// Enrolls the plan's work: `c <- alpha op(a) op(b) + beta c` (`fresh`: `c` is new,
    /// written in full, `beta` ignored).
    #[doc(hidden)]
    fn submit(
        plan: &Arc<Plan<Self::Sector>>,
        alpha: Self::Elem,
        a: &Self,
        b: &Self,
        beta: Self::Elem,
        c: &Self,
        fresh: bool,
    ) -> Result<(), Error>;
}

impl<T: Field, S: AbelianSector> sealed::Sealed for AsyncArray<T, S> {}

impl<T: Field, S: AbelianSector> Operand for AsyncArray<T, S> {
    type Elem = T;
    type Sector = S;

    fn structure(&self) -> &Arc<BlockStructure<S>> {
        AsyncArray::structure(self)
    }

    fn domain(&self) -> Domain {
        AsyncArray::domain(self)
    }

    fn same_storage(&self, other: &Self) -> bool {
        AsyncArray::same_storage(self, other)
    }

    fn output(&self, structure: &Arc<BlockStructure<S>>) -> Result<Self, Error> {
        Ok(AsyncArray::empty(Arc::clone(structure)))
    }

    fn submit(
        plan: &Arc<Plan<S>>,
        alpha: T,
        a: &Self,
        b: &Self,
        beta: T,
        c: &Self,
        fresh: bool,
    ) -> Result<(), Error> {
        crate::execute::submit(plan, alpha, a, b, beta, c, fresh)
    }
}

#[cfg(feature = "cuda")]
impl<T: tessera_backends::cuda::CudaScalar, S: AbelianSector> sealed::Sealed
    for tessera_blocks::DeviceArray<T, S>
{
}
