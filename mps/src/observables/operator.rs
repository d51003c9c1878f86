//! One-site operators and their MPO-like form with a charge-carrying bond.
//!
//! Owns: [`LocalOperator`]. Invariant: the tensor of a `LocalOperator` has exactly two legs
//! `(o In, i Out)` with `i == o.dual()`, so `O[o, i] = <o|O|i>` is a map of one physical leg;
//! its flux (`o - i`, the charge it adds) is the operator's charge, and an odd flux makes it
//! fermionic.
//!
//! Inside a chain an operator of charge `q` becomes the four-leg tensor
//! `W(a In, o In, i Out, b Out)` of the crate's MPO convention with one-dimensional bonds:
//! `a` carries the charge `c` that earlier operators left on the bond, `b` carries `c + q`,
//! and `W[0, o, i, 0] = O[o, i]`, so every `W` has the trivial flux and is an even element
//! of the graded tensor product. The graded product of such `W`s in site order is the
//! product of the operators in site order, Jordan-Wigner string included: the odd bond
//! passes the sites in between (see the `observables` module docs).

use std::sync::Arc;

use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure, Direction, Leg};
use tessera_contract::Contraction;

pub(crate) use crate::chain::describe;
use crate::{Error, Result};

/// A one-site operator `O[o, i] = <o|O|i>`: an `AsyncArray` with legs `(o In, i Out)`,
/// `i` the dual of `o`, and a flux (its charge; odd flux: a fermionic operator).
///
/// ```
/// use tessera_blocks::{Direction, FermionParity, FermionicU1, Leg, Product, U1};
/// use tessera_mps::observables::LocalOperator;
///
/// let q = |n: i32| Product(U1(n), FermionParity::new(n % 2 != 0));
/// let p = Leg::new(Direction::In, [(q(0), 1), (q(1), 1)])?;
/// // c^+ = |1><0|: dense, column-major O[o + 2 i].
/// let create = LocalOperator::from_dense(&p, q(1), &[0.0, 1.0, 0.0, 0.0])?;
/// assert!(create.is_odd());
/// let n = create.product(&create.adjoint()?)?; // c^+ c
/// assert_eq!(n.tensor().to_dense()?, vec![0.0, 0.0, 0.0, 1.0]);
/// # Ok::<(), tessera_mps::Error>(())
/// ```
#[derive(Debug)]
pub struct LocalOperator<S: AbelianSector> {
    tensor: AsyncArray<f64, S>,
}

impl<S: AbelianSector> Clone for LocalOperator<S> {
    fn clone(&self) -> Self {
        Self {
            tensor: self.tensor.duplicate(),
        }
    }
}

impl<S: AbelianSector> LocalOperator<S> {
    /// The operator of `tensor`, or [`Error::LocalOperator`] when its legs are not `(o In, i Out)`
    /// with `i == o.dual()`.
    pub fn new(tensor: AsyncArray<f64, S>) -> Result<Self> {
        let legs = tensor.structure().legs();
        let directions: Vec<Direction> = legs.iter().map(Leg::direction).collect();
        if directions != [Direction::In, Direction::Out] {
            return Err(Error::LocalOperator {
                what: "tensor".into(),
                expected: "two legs (o In, i Out)".into(),
                found: format!("legs with directions {directions:?}"),
            });
        }
        if legs[1] != legs[0].dual() {
            return Err(Error::LocalOperator {
                what: "tensor".into(),
                expected: format!(
                    "an input leg i that is the dual of the output leg o = {}",
                    describe(&legs[0])
                ),
                found: format!("i = {}", describe(&legs[1])),
            });
        }
        Ok(Self { tensor })
    }

    /// The operator on the physical leg `physical` (`In`) with charge `flux` from its dense
    /// matrix, column-major: `dense[o + d * i] = <o|O|i>`, `d = physical.dim()`.
    ///
    /// # Errors
    ///
    /// [`Error::LocalOperator`] for an `Out` leg; [`Error::Blocks`] for a matrix of the wrong
    /// length or with an entry that the flux forbids.
    pub fn from_dense(physical: &Leg<S>, flux: S, dense: &[f64]) -> Result<Self> {
        if physical.direction() != Direction::In {
            return Err(Error::LocalOperator {
                what: "from_dense".into(),
                expected: "an In physical leg".into(),
                found: "an Out leg".into(),
            });
        }
        let s = BlockStructure::new([physical.clone()], [physical.dual()], flux)?;
        Self::new(AsyncArray::from_dense(s, dense)?)
    }

    /// The identity on `physical` (`In`).
    ///
    /// # Errors
    ///
    /// As [`from_dense`](Self::from_dense).
    pub fn identity(physical: &Leg<S>) -> Result<Self> {
        let d = physical.dim();
        let mut dense = vec![0.0; d * d];
        for i in 0..d {
            dense[i + d * i] = 1.0;
        }
        Self::from_dense(physical, S::trivial(), &dense)
    }

    /// The tensor `O(o In, i Out)`.
    pub fn tensor(&self) -> &AsyncArray<f64, S> {
        &self.tensor
    }

    /// The charge the operator adds (the flux of its tensor).
    pub fn flux(&self) -> &S {
        self.tensor.structure().flux()
    }

    /// Whether the operator is fermionic (odd flux).
    pub fn is_odd(&self) -> bool {
        self.flux().parity()
    }

    /// The physical leg it acts on (its output leg `o`, `In`).
    pub fn physical_leg(&self) -> &Leg<S> {
        &self.tensor.structure().legs()[0]
    }

    /// The product `O P` (apply `P`, then `O`): maps of one leg compose as matrices, with
    /// no sign (the contraction crate's convention).
    ///
    /// # Errors
    ///
    /// [`Error::LocalOperator`] when the two act on different legs.
    pub fn product(&self, other: &Self) -> Result<Self> {
        if self.physical_leg() != other.physical_leg() {
            return Err(Error::LocalOperator {
                what: "product".into(),
                expected: format!(
                    "an operator on the same physical leg {}",
                    describe(self.physical_leg())
                ),
                found: describe(other.physical_leg()),
            });
        }
        let t = Contraction::new("oj,ji->o|i")?.apply(&self.tensor, &other.tensor)?;
        Self::new(t)
    }

    /// The adjoint `O^+` (the transposed matrix, charge negated). For a fermionic operator
    /// this is the Hilbert-space adjoint of the site operator (`c` from `c^+`), which the
    /// chain embeds with its string like any other.
    ///
    /// # Errors
    ///
    /// A block-layer error (none for a well-formed operator).
    pub fn adjoint(&self) -> Result<Self> {
        Self::new(self.tensor.adjoint()?)
    }

    /// Checks that the operator acts on `physical`, the physical leg of a site.
    pub(crate) fn check_leg(&self, what: &str, site: usize, physical: &Leg<S>) -> Result<()> {
        if self.physical_leg() != physical {
            return Err(Error::LocalOperator {
                what: what.into(),
                expected: format!("the physical leg of site {site}, {}", describe(physical)),
                found: format!(
                    "an operator on a leg of {} states",
                    self.physical_leg().dim()
                ),
            });
        }
        Ok(())
    }

    /// The MPO-like tensor `W(a In, o In, i Out, b Out)` with a one-dimensional bond `a` of
    /// charge `incoming` and `b` of charge `incoming + flux`, `W[0, o, i, 0] = O[o, i]`
    /// (trivial flux). Also returns the outgoing charge.
    pub(crate) fn wrapped(&self, incoming: &S) -> Result<(AsyncArray<f64, S>, S)> {
        let outgoing = incoming.fuse_abelian(self.flux());
        let a = Leg::new(Direction::In, [(incoming.clone(), 1)])?;
        let b = Leg::new(Direction::Out, [(outgoing.clone(), 1)])?;
        let p = self.physical_leg();
        let s = Arc::new(BlockStructure::new(
            [a, p.clone()],
            [p.dual(), b],
            S::trivial(),
        )?);
        // With one-dimensional bonds the column-major dense forms of O(o, i) and
        // W(a, o, i, b) are the same sequence.
        let w = AsyncArray::from_dense(s, &self.tensor.to_dense()?)?;
        Ok((w, outgoing))
    }
}
