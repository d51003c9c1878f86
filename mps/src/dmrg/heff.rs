//! The contractions of a two-site sweep and the effective Hamiltonian of a pair.
//!
//! Owns: [`Contractions`] (every spec a sweep applies, parsed once; their plans are cached by
//! structure in the global plan cache), [`sweep_order`] and [`EffectiveHamiltonian`].
//! Invariant: the specs follow the crate's leg conventions for the MPS `(k In, s In, r Out)`
//! and take each MPO tensor in sweep order, `W(a In, i Out, o In, b Out)` (the crate's
//! `(a, o, i, b)` with its physical legs swapped by [`sweep_order`], a permutation, so the
//! same graded element); a left environment has legs `(k Out, a Out, y In)` and a right one
//! `(r In, b In, z Out)`, so `H theta` has the structure of `theta`.
//!
//! Why the sweep order: the contractions meet an MPO tensor with `(a, i)` contracted and
//! `(o, b)` free, so in this order its matrix form needs no permutation, and every product
//! with `W` (two per Lanczos step, one per environment) skips a permutation task.
//!
//! Labels: `k`/`y` the left ket/bra bond, `r`/`z` the right ket/bra bond, `a`/`b`/`c` MPO
//! bonds, `s`/`t` ket and `u`/`v` bra physical legs, `m` an inner MPS bond. A bra operand
//! (conjugated in place by the contraction) is labelled `yuz`; the engine passes the
//! reversal-signed ket there ([`crate::graded::reversal_signed`]), whose in-place conjugate
//! is the graded adjoint.

use tessera_backends::{Host, Placement};
use tessera_blocks::AbelianSector;
use tessera_contract::{Chain, Contraction, Executor};

use crate::{Error, Result};

/// A real block-sparse tensor with sectors `S` at placement `P` (host memory by default).
pub(crate) type Tensor<S, P = Host> = tessera_blocks::Tensor<f64, S, P>;

/// The two environments of a pair, left and right.
pub(crate) type Pair<'a, S, P> = (&'a Tensor<S, P>, &'a Tensor<S, P>);

/// A tensor borrowed, or a signed copy owned (`Cow` without `Clone`: tensors are copied
/// only by `duplicate`).
#[derive(Debug)]
pub(crate) enum Signed<'a, S: AbelianSector, P: Placement<f64> = Host> {
    /// The tensor itself.
    Borrowed(&'a Tensor<S, P>),
    /// A new tensor.
    Owned(Tensor<S, P>),
}

impl<S: AbelianSector, P: Placement<f64>> std::ops::Deref for Signed<'_, S, P> {
    type Target = Tensor<S, P>;

    fn deref(&self) -> &Tensor<S, P> {
        match self {
            Signed::Borrowed(t) => t,
            Signed::Owned(t) => t,
        }
    }
}

/// The contractions a sweep runs.
#[derive(Debug)]
pub(crate) struct Contractions {
    /// `(L theta) W R` for `theta` split after its first `n` legs, by `n - 1`:
    /// `theta(k | s, t, r) -> (y | u, v, z)` (the Lanczos form), `(k, s | t, r) -> (y, u |
    /// v, z)` (as [`Dmrg::pair`](super::Dmrg::pair) returns it) and `(k, s, t | r) -> (y, u,
    /// v | z)`, with `L` as `(y, a | k)` and `W = W_i W_{i+1}` as `(a, s, t | u, v, c)` (see
    /// [`EffectiveHamiltonian`]); each step's output is what the next step reads in place.
    /// Each one [`Chain`], run fused by row panels of `y` on host tensors.
    pub(crate) heff: [Chain; 3],
    /// The pair's MPO tensors as one operator, `W(a, s, t | u, v, c)`.
    pub(crate) mpo_pair: Contraction,
    /// `L'(r, b, z) = L(k, a, y) A(k, s, r) W(a, s, u, b) conj(A)(y, u, z)`.
    pub(crate) left: [Contraction; 3],
    /// `R'(k, a, y) = A(k, s, r) R(r, b, z) W(a, s, u, b) conj(A)(y, u, z)`.
    pub(crate) right: [Contraction; 3],
    /// `theta = A_i A_{i+1}`, split `(k, s | t, r)` for the SVD.
    pub(crate) pair: Contraction,
    /// `theta = A_i A_{i+1}`, split `(k | s, t, r)` for Lanczos (see [`EffectiveHamiltonian`]).
    pub(crate) pair_lanczos: Contraction,
    /// `S V†`: the singular values into the right factor.
    pub(crate) absorb_right: Contraction,
    /// `U S`: the singular values into the left factor.
    pub(crate) absorb_left: Contraction,
}

impl Contractions {
    pub(crate) fn new() -> Result<Self> {
        let heff = |out: &str| -> Result<Chain> {
            Ok(Chain::new([
                Contraction::new("yak,kstr->ya|str")?,
                Contraction::new("yastr,astuvc->yuv|rc")?,
                Contraction::new(&format!("yuvrc,rcz->{out}"))?,
            ]))
        };
        Ok(Self {
            heff: [heff("y|uvz")?, heff("yu|vz")?, heff("yuv|z")?],
            mpo_pair: Contraction::new("asub,btvc->ast|uvc")?,
            left: [
                Contraction::new("kay,ksr->yasr")?,
                Contraction::new("yasr,asub->yrub")?,
                Contraction::new("yrub,yuz->rbz")?.conj_b(),
            ],
            right: [
                Contraction::new("ksr,rbz->ksbz")?,
                Contraction::new("ksbz,asub->kzau")?,
                Contraction::new("kzau,yuz->kay")?.conj_b(),
            ],
            pair: Contraction::new("ksm,mtr->ks|tr")?,
            pair_lanczos: Contraction::new("ksm,mtr->k|str")?,
            absorb_right: Contraction::new("km,mtr->kt|r")?,
            absorb_left: Contraction::new("ksm,mr->ks|r")?,
        })
    }
}

/// `w` (an MPO tensor `(a, o, i, b)`) in sweep order `(a, i | o, b)`: the same element with
/// its physical legs swapped (the permutation carries the sign of swapping two odd legs).
pub(crate) fn sweep_order<S: AbelianSector, P: Placement<f64>>(
    w: &Tensor<S, P>,
) -> Result<Tensor<S, P>> {
    Ok(w.permute(&[0, 2, 1, 3], 2)?)
}

/// The Hamiltonian projected onto a pair of sites: `theta -> L W_i W_{i+1} R theta`, with
/// the right environment twisted on its bra leg (the open `Out` leg of the output; the
/// identity for bosonic sectors). With the environments of left and right isometries,
/// `<theta'|H theta>` (the plain inner product) is `<psi'|H|psi>` and the map is symmetric.
///
/// Built once per step, it holds its constant operands in the layouts its contractions take
/// them in: the left environment permuted once to `(y, a | k)`, the pair's two MPO tensors
/// contracted into one operator `W(a, s, t | u, v, c)` (a few hundred elements), the right
/// environment `(r, c | z)` as stored. Applying it to `theta(k | s, t, r)` (the form
/// [`lanczos`] runs in) is a GEMM `L theta` into `(y, a | s, t, r)`, the operator applied
/// to that in one pass ([`Strategy::SmallOperand`]: its blocks have at most a few dozen
/// elements, so the pass reads the GEMM's product in place and writes `(y, u, v | r, c)`
/// directly), and a GEMM with `R` into `(y, u, v | z)`, which is `theta`'s form re-split;
/// from [`FUSE_MIN_ELEMS`](tessera_contract::FUSE_MIN_ELEMS) elements of `L theta` on, the
/// three run as one [`Chain`], a task per sector of `y` doing all three on its rows and the
/// last GEMMs writing the result's blocks in `theta`'s form (each holds whole rows of its
/// sector: a bond leg has each sector once). No other pass over memory; below that size,
/// one more, the product re-split. Before, the MPO tensors were applied one at a time and
/// nothing was held in place: four steps and nine passes.
///
/// [`Strategy::SmallOperand`]: tessera_contract::Strategy::SmallOperand
///
/// [`lanczos`]: super::lanczos
#[derive(Debug)]
pub struct EffectiveHamiltonian<'a, S: AbelianSector, P: Placement<f64> = Host> {
    pub(super) left: Tensor<S, P>,
    pub(super) w: Tensor<S, P>,
    pub(super) right: Signed<'a, S, P>,
    c: &'a Contractions,
}

impl<'a, S: AbelianSector, P: Executor<f64>> EffectiveHamiltonian<'a, S, P> {
    /// The map for environments `left` `(k, a, y)` and `right` `(r, c, z)` (twisted), MPO
    /// tensors `w` in sweep order: permutes the left environment and contracts the MPO
    /// tensors (enrolled, not waited for).
    pub(crate) fn new(
        left: &Tensor<S, P>,
        w: [&Tensor<S, P>; 2],
        right: Signed<'a, S, P>,
        c: &'a Contractions,
    ) -> Result<Self> {
        Ok(Self {
            left: left.permute(&[2, 1, 0], 2)?,
            w: c.mpo_pair.apply(w[0], w[1])?,
            right,
            c,
        })
    }

    /// `H theta`: a new tensor with the structure of `theta` (enrolled, not waited for).
    /// `theta` is a pair `(k | s, t, r)` (the fastest), `(k, s | t, r)` (as [`Dmrg::pair`]
    /// returns it) or `(k, s, t | r)`; the last two take one more pass, `theta` re-split.
    ///
    /// # Errors
    ///
    /// A contraction error when `theta` is not a pair `(k In, s In, t In, r Out)` of this
    /// pair's legs, split so.
    ///
    /// [`Dmrg::pair`]: super::Dmrg::pair
    pub fn apply(&self, theta: &Tensor<S, P>) -> Result<Tensor<S, P>> {
        let n = theta.structure().n_codomain();
        let Some(chain) = n.checked_sub(1).and_then(|i| self.c.heff.get(i)) else {
            return Err(Error::Dmrg {
                what: "the pair H is applied to".into(),
                expected: "a pair split (k | s, t, r), (k, s | t, r) or (k, s, t | r)".into(),
                found: format!("{n} codomain legs"),
            });
        };
        Ok(chain.apply(&self.left, theta, &self.w, &*self.right)?)
    }
}
