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

/// What the crate itself calls on an operand: in a private module, so nothing outside the
/// crate can name these methods (or implement the trait), and every call goes through the
/// checks of [`Contraction`](crate::Contraction).
pub(crate) mod sealed {
    use super::*;

    /// Proof that the caller is this crate: the methods that enroll or allocate take one, so
    /// even through an `Operand` bound (where supertrait methods resolve) no one else can
    /// call them.
    #[derive(Clone, Copy, Debug)]
    pub struct Token(pub(crate) ());

    pub trait Sealed: Sized {
        /// The element type.
        type Elem: Scalar;
        /// The sector type.
        type Sector: AbelianSector;

        /// Whether two arrays share storage.
        fn same_storage(&self, other: &Self) -> bool;

        /// Where the array lives.
        fn domain_of(&self) -> Domain;

        /// A new array of `structure` in `self`'s domain, to be written in full.
        fn output(
            &self,
            structure: &Arc<BlockStructure<Self::Sector>>,
            token: Token,
        ) -> Result<Self, Error>;

        /// Enrolls the plan's work: `c <- alpha op(a) op(b) + beta c` (`fresh`: `c` is new,
        /// written in full, `beta` ignored). BLAS's argument list, plus the token.
        #[allow(clippy::too_many_arguments)]
        fn submit(
            plan: &Arc<Plan<Self::Sector>>,
            alpha: Self::Elem,
            a: &Self,
            b: &Self,
            beta: Self::Elem,
            c: &Self,
            fresh: bool,
            token: Token,
        ) -> Result<(), Error>;

        /// That `other` lives where `self` does.
        fn check_domain(&self, other: &Self) -> Result<(), Error> {
            if self.domain_of() == other.domain_of() {
                Ok(())
            } else {
                Err(tessera_blocks::Error::DeviceMismatch {
                    expected: self.domain_of(),
                    given: other.domain_of(),
                }
                .into())
            }
        }
    }
}

/// An array a [`Contraction`](crate::Contraction) takes: [`AsyncArray`] (host memory, the CPU
/// backend) or, with the `cuda` feature, `DeviceArray` (one CUDA device, cuBLAS). Sealed.
pub trait Operand: sealed::Sealed<Elem = Self::Scalar, Sector = Self::Symmetry> {
    /// The element type.
    type Scalar: Scalar;
    /// The sector type.
    type Symmetry: AbelianSector;

    /// The descriptor table.
    fn structure(&self) -> &Arc<BlockStructure<Self::Symmetry>>;

    /// Where the array lives.
    fn domain(&self) -> Domain {
        self.domain_of()
    }
}

impl<T: Field, S: AbelianSector> sealed::Sealed for AsyncArray<T, S> {
    type Elem = T;
    type Sector = S;

    fn same_storage(&self, other: &Self) -> bool {
        AsyncArray::same_storage(self, other)
    }

    fn domain_of(&self) -> Domain {
        AsyncArray::domain(self)
    }

    fn output(&self, structure: &Arc<BlockStructure<S>>, _: sealed::Token) -> Result<Self, Error> {
        Ok(AsyncArray::try_empty(Arc::clone(structure))?)
    }

    fn submit(
        plan: &Arc<Plan<S>>,
        alpha: T,
        a: &Self,
        b: &Self,
        beta: T,
        c: &Self,
        fresh: bool,
        _: sealed::Token,
    ) -> Result<(), Error> {
        crate::execute::submit(plan, alpha, a, b, beta, c, fresh)
    }
}

impl<T: Field, S: AbelianSector> Operand for AsyncArray<T, S> {
    type Scalar = T;
    type Symmetry = S;

    fn structure(&self) -> &Arc<BlockStructure<S>> {
        AsyncArray::structure(self)
    }
}
