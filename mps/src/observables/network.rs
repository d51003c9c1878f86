//! The transfer network `<psi| W_0 ... W_{L-1} |psi>`: edges, one-site transfers and the
//! closing of a left environment against a right one.
//!
//! Owns: [`Network`]. Invariant: a left environment has legs `(k Out, a Out, y In)` (ket
//! bond, operator bond, bra bond: the duals of the next site's left legs), a right one
//! `(r In, b In, z Out)`, and both are the graded contraction of even elements only (MPS
//! tensors, their graded adjoints, `W`s of trivial flux), so their value does not depend on
//! the order in which the pairwise contractions join them. The bra of a tensor is the
//! in-place conjugate of its reversal-signed copy ([`graded::reversal_signed`]); the one
//! open `Out` leg of the ket (the right edge, carrying the total charge) meets its bra
//! through the identity twisted on its bra leg ([`graded::twisted`]). With those two signs,
//! closing `left[i]` against `right[i]` at any bond is `<psi|O|psi>` in the Hilbert space,
//! where `O` is the graded product of the `W`s in site order. Both signs are the identity
//! on bosonic sectors.

use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure, Direction, Leg};
use tessera_contract::Contraction;

use crate::{Result, graded};

/// The contractions of the transfer network, parsed once. Labels: `k`/`y` left ket/bra
/// bond, `r`/`z` right ket/bra bond, `a`/`b` operator bonds, `s` ket and `u` bra physical
/// legs; a bra operand (conjugated by the contraction) is labelled `yuz`.
pub(crate) struct Network {
    left: [Contraction; 3],
    right: [Contraction; 3],
    close: Contraction,
}

impl Network {
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            left: [
                Contraction::new("kay,ksr->yasr")?,
                Contraction::new("yasr,ausb->yrub")?,
                Contraction::new("yrub,yuz->rb|z")?.conj_b(),
            ],
            right: [
                Contraction::new("ksr,rbz->ksbz")?,
                Contraction::new("ksbz,ausb->kzau")?,
                Contraction::new("kzau,yuz->ka|y")?.conj_b(),
            ],
            close: Contraction::new("rbz,rbz->")?,
        })
    }

    /// The left edge: legs `(k Out, a Out, y In)`, all one-dimensional and trivial, value 1.
    pub(crate) fn left_edge<S: AbelianSector>() -> Result<AsyncArray<f64, S>> {
        let t = |d| Leg::new(d, [(S::trivial(), 1)]);
        let s = BlockStructure::new(
            [t(Direction::Out)?, t(Direction::Out)?],
            [t(Direction::In)?],
            S::trivial(),
        )?;
        Ok(AsyncArray::from_dense(s, &[1.0])?)
    }

    /// The right edge of a state of total charge `charge`: legs `(r In, b In, z Out)`, the
    /// operator bond trivial, value 1 twisted on the bra leg `z`.
    pub(crate) fn right_edge<S: AbelianSector>(charge: &S) -> Result<AsyncArray<f64, S>> {
        let edge = |d| Leg::new(d, [(charge.clone(), 1)]);
        let s = BlockStructure::new(
            [
                edge(Direction::In)?,
                Leg::new(Direction::In, [(S::trivial(), 1)])?,
            ],
            [edge(Direction::Out)?],
            S::trivial(),
        )?;
        graded::twisted(&AsyncArray::from_dense(s, &[1.0])?, 2)
    }

    /// The left environment one site further: `left` with the ket `a`, the operator `w`
    /// and the bra of `a` (`bra`: the reversal-signed copy of `a`, conjugated here).
    pub(crate) fn extend_left<S: AbelianSector>(
        &self,
        left: &AsyncArray<f64, S>,
        a: &AsyncArray<f64, S>,
        w: &AsyncArray<f64, S>,
        bra: &AsyncArray<f64, S>,
    ) -> Result<AsyncArray<f64, S>> {
        let t = self.left[0].apply(left, a)?;
        let t = self.left[1].apply(&t, w)?;
        Ok(self.left[2].apply(&t, bra)?)
    }

    /// The right environment one site further left, as [`extend_left`](Self::extend_left).
    pub(crate) fn extend_right<S: AbelianSector>(
        &self,
        right: &AsyncArray<f64, S>,
        a: &AsyncArray<f64, S>,
        w: &AsyncArray<f64, S>,
        bra: &AsyncArray<f64, S>,
    ) -> Result<AsyncArray<f64, S>> {
        let t = self.right[0].apply(a, right)?;
        let t = self.right[1].apply(&t, w)?;
        Ok(self.right[2].apply(&t, bra)?)
    }

    /// The closed network of `left` and `right` at one bond, as a scalar tensor (read it
    /// with `to_dense`; nothing waits here).
    pub(crate) fn close<S: AbelianSector>(
        &self,
        left: &AsyncArray<f64, S>,
        right: &AsyncArray<f64, S>,
    ) -> Result<AsyncArray<f64, S>> {
        Ok(self.close.apply(left, right)?)
    }
}

/// The scalar of a closed network (a tensor without legs; an empty structure is zero).
pub(crate) fn scalar<S: AbelianSector>(x: &AsyncArray<f64, S>) -> Result<f64> {
    Ok(x.to_dense()?.first().copied().unwrap_or(0.0))
}
