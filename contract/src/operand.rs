//! The arrays a contraction takes, and which backend runs a plan on them.
//!
//! Owns: the sealed [`Operand`] trait, implemented once for [`Tensor`], and [`Executor`],
//! what each placement implements to run a plan. Invariant: the backend is chosen from the
//! operands' placement alone: host tensors run on the CPU backend (faer GEMM tasks), device
//! tensors (feature `cuda`) on their device's stream through cuBLAS, and operands of one
//! call always share one domain (checked before anything is enrolled).

use crate::error::Error;
use crate::plan::Plan;
use std::sync::Arc;
use tessera_backends::{Field, Scalar};
use tessera_backends::{Host, Placement};
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure, Tensor};
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

    /// Seals [`Executor`](super::Executor): only this crate's placements run plans.
    pub trait Sealed {}

    /// The methods of an [`Operand`](super::Operand) only this crate calls.
    pub trait Operands: Sized {
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

        /// Enrolls `chain` on `operands` fused by row panels into a new array, or `None`
        /// where it cannot (the caller then applies its steps in turn).
        fn submit_chain(
            chain: &crate::chain::Chain,
            operands: [&Self; 4],
            token: Token,
        ) -> Result<Option<Self>, Error>;

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

/// How a placement runs a contraction plan: the CPU backend's GEMM tasks on the host
/// ([`Host`]), cuBLAS calls on a device's stream (`Cuda`, feature `cuda`). Sealed: its
/// one method enrolls work, and only this crate, after its checks, calls it.
pub trait Executor<T: Scalar>: Placement<T> + sealed::Sealed {
    /// Enrolls the plan's work: `c <- alpha op(a) op(b) + beta c` (`fresh`: `c` is new,
    /// written in full, `beta` ignored). BLAS's argument list, plus the token.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn submit<S: AbelianSector>(
        plan: &Arc<Plan<S>>,
        alpha: T,
        a: &Tensor<T, S, Self>,
        b: &Tensor<T, S, Self>,
        beta: T,
        c: &Tensor<T, S, Self>,
        fresh: bool,
        token: sealed::Token,
    ) -> Result<(), Error>;

    /// Enrolls `chain` fused by row panels, or `None` where this placement has no fused
    /// path (the chain then applies its steps in turn).
    #[doc(hidden)]
    fn submit_chain<S: AbelianSector>(
        chain: &crate::chain::Chain,
        operands: [&Tensor<T, S, Self>; 4],
        token: sealed::Token,
    ) -> Result<Option<Tensor<T, S, Self>>, Error> {
        let _ = (chain, operands, token);
        Ok(None)
    }
}

impl sealed::Sealed for Host {}

impl<T: Field> Executor<T> for Host {
    fn submit<S: AbelianSector>(
        plan: &Arc<Plan<S>>,
        alpha: T,
        a: &AsyncArray<T, S>,
        b: &AsyncArray<T, S>,
        beta: T,
        c: &AsyncArray<T, S>,
        fresh: bool,
        _: sealed::Token,
    ) -> Result<(), Error> {
        crate::execute::submit(plan, alpha, a, b, beta, c, fresh)
    }

    fn submit_chain<S: AbelianSector>(
        chain: &crate::chain::Chain,
        operands: [&AsyncArray<T, S>; 4],
        _: sealed::Token,
    ) -> Result<Option<AsyncArray<T, S>>, Error> {
        crate::chain::submit(chain, operands)
    }
}

#[cfg(feature = "cuda")]
impl sealed::Sealed for tessera_backends::cuda::Cuda {}

#[cfg(feature = "cuda")]
impl<T: tessera_backends::cuda::CudaScalar> Executor<T> for tessera_backends::cuda::Cuda {
    fn submit<S: AbelianSector>(
        plan: &Arc<Plan<S>>,
        alpha: T,
        a: &tessera_blocks::DeviceArray<T, S>,
        b: &tessera_blocks::DeviceArray<T, S>,
        beta: T,
        c: &tessera_blocks::DeviceArray<T, S>,
        fresh: bool,
        _: sealed::Token,
    ) -> Result<(), Error> {
        crate::device::submit(plan, alpha, a, b, beta, c, fresh)
    }
}

/// A tensor a [`Contraction`](crate::Contraction) takes: a [`Tensor`] of any placement
/// with an [`Executor`] ([`AsyncArray`] on the host, `DeviceArray` on a CUDA device).
/// Sealed.
pub trait Operand: sealed::Operands<Elem = Self::Scalar, Sector = Self::Symmetry> {
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

impl<T: Scalar, S: AbelianSector, P: Executor<T>> sealed::Operands for Tensor<T, S, P> {
    type Elem = T;
    type Sector = S;

    fn same_storage(&self, other: &Self) -> bool {
        Tensor::same_storage(self, other)
    }

    fn domain_of(&self) -> Domain {
        Tensor::domain(self)
    }

    fn output(&self, structure: &Arc<BlockStructure<S>>, _: sealed::Token) -> Result<Self, Error> {
        Ok(Tensor::empty_on(Arc::clone(structure), &self.placement())?)
    }

    fn submit(
        plan: &Arc<Plan<S>>,
        alpha: T,
        a: &Self,
        b: &Self,
        beta: T,
        c: &Self,
        fresh: bool,
        token: sealed::Token,
    ) -> Result<(), Error> {
        P::submit(plan, alpha, a, b, beta, c, fresh, token)
    }

    fn submit_chain(
        chain: &crate::chain::Chain,
        operands: [&Self; 4],
        token: sealed::Token,
    ) -> Result<Option<Self>, Error> {
        P::submit_chain(chain, operands, token)
    }
}

impl<T: Scalar, S: AbelianSector, P: Executor<T>> Operand for Tensor<T, S, P> {
    type Scalar = T;
    type Symmetry = S;

    fn structure(&self) -> &Arc<BlockStructure<S>> {
        Tensor::structure(self)
    }
}
