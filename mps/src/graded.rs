//! The two signs a fermionic chain writes by hand: the reversal sign of a graded adjoint and
//! the twist of an open `Out` leg.
//!
//! Owns: [`reversal_signed`] and [`twisted`]. Invariant: both return a new tensor with the
//! structure of their argument and the same values up to a sign per block, and both are a
//! plain copy when the sector type is not graded (`S::GRADED == false`).
//!
//! Why these two (the contraction crate's docs give the convention): a tensor is an element
//! `sum x e_1 ... e_n` of the graded tensor product of its legs. Its graded adjoint is
//! `sum conj(x) e_n^* ... e_1^*`, the legs reversed; the library's in-place conjugate keeps
//! the leg order, so read in the original order the adjoint is the in-place conjugate times
//! `(-1)` per pair of odd legs of a block. The graded pairing `x^+ y` meets the pairs of
//! `Out` legs ket first, which is the Hilbert-space inner product times `(-1)` per odd open
//! `Out` leg: twisting that leg on one side undoes it.

use tessera_backends::Placement;
use tessera_blocks::{AbelianSector, Blocks, Tensor};

use crate::Result;

/// A copy of `x` with `(-1)` on the blocks whose sectors (one per leg) satisfy `negative`.
fn negated<S: AbelianSector, P: Placement<f64>>(
    x: &Tensor<f64, S, P>,
    negative: impl Fn(&[S]) -> bool,
) -> Result<Tensor<f64, S, P>> {
    let y = x.duplicate();
    if !S::GRADED {
        return Ok(y);
    }
    let ids: Vec<usize> = x
        .structure()
        .blocks()
        .filter(|b| negative(b.sectors()))
        .map(|b| b.id())
        .collect();
    if !ids.is_empty() {
        y.scale_blocks(-1.0, Blocks::Only(&ids))?;
    }
    Ok(y)
}

/// A copy of `a` with the sign of reversing its legs: `(-1)` on the blocks with an odd number
/// of pairs of odd legs. Its in-place conjugate (a contraction's `conj_b`) is the graded
/// adjoint of `a`, read in `a`'s leg order.
pub fn reversal_signed<S: AbelianSector, P: Placement<f64>>(
    a: &Tensor<f64, S, P>,
) -> Result<Tensor<f64, S, P>> {
    negated(a, |sectors| {
        let odd = sectors.iter().filter(|s| s.parity()).count();
        (odd * odd.saturating_sub(1) / 2) % 2 == 1
    })
}

/// A copy of `x` with `(-1)` on the blocks whose sector on `leg` is odd: the twist that turns
/// the graded pairing of an open `Out` leg into the Hilbert-space inner product.
pub fn twisted<S: AbelianSector, P: Placement<f64>>(
    x: &Tensor<f64, S, P>,
    leg: usize,
) -> Result<Tensor<f64, S, P>> {
    negated(x, |sectors| sectors[leg].parity())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_blocks::{
        AsyncArray, BlockStructure, Direction, FermionParity, FermionicU1, Leg, U1,
    };

    fn f(n: i32) -> FermionicU1 {
        tessera_blocks::Product(U1(n), FermionParity::new(n % 2 != 0))
    }

    #[test]
    fn signs_follow_the_odd_legs_and_are_absent_for_bosons() {
        let v = Leg::new(Direction::In, [(f(0), 1), (f(1), 1)]).unwrap();
        // Legs (v, v, v*) of dimension 2, index 1 odd; flux 0 keeps (0,0,0), (0,1,1), (1,0,1).
        let s = BlockStructure::new([v.clone(), v.clone()], [v.dual()], f(0)).unwrap();
        let a = AsyncArray::<f64, FermionicU1>::random(s, 11);
        let dense = a.to_dense().unwrap();
        // Dense indices are column-major: index = i0 + 2 i1 + 4 i2.
        let odd = |x: usize, leg: usize| (x >> leg) & 1 == 1;
        let reversed = reversal_signed(&a).unwrap().to_dense().unwrap();
        let twist = twisted(&a, 0).unwrap().to_dense().unwrap();
        let mut negated = 0;
        for x in 0..8 {
            let n = (0..3).filter(|&l| odd(x, l)).count();
            let r = if n * n.saturating_sub(1) / 2 % 2 == 1 {
                -1.0
            } else {
                1.0
            };
            let t = if odd(x, 0) { -1.0 } else { 1.0 };
            assert_eq!(reversed[x], r * dense[x], "reversal at {x}");
            assert_eq!(twist[x], t * dense[x], "twist at {x}");
            negated += usize::from(r < 0.0 && dense[x] != 0.0);
        }
        assert_eq!(negated, 2, "both blocks with two odd legs change sign");
        let u = Leg::new(Direction::In, [(U1(0), 1), (U1(1), 1)]).unwrap();
        let b = AsyncArray::<f64, U1>::random(
            BlockStructure::new([u.clone(), u.clone()], [u.dual()], U1(0)).unwrap(),
            3,
        );
        assert_eq!(
            reversal_signed(&b).unwrap().to_dense().unwrap(),
            b.to_dense().unwrap()
        );
        assert_eq!(
            twisted(&b, 1).unwrap().to_dense().unwrap(),
            b.to_dense().unwrap()
        );
    }
}
