//! Contractions of SU(2)-symmetric tensors: one GEMM per coupled spin on the reduced blocks.
//!
//! Owns [`contract_su2`]. Invariant: a contraction is exact on the dense tensors (the plain
//! sum over each contracted pair of an `In` and an `Out` leg), and it is computed as the
//! composition of two maps: `A` permuted to (free legs | contracted legs), `B` to
//! (contracted legs | free legs), their reduced matrices multiplied per coupled spin (the
//! abelian GEMM plan of the two matrix forms, `"ab,bc->ac"`), the product permuted to the
//! output's order and split. A permutation that changes nothing is skipped. Composition
//! needs no coefficient: the trees of the contracted legs are orthonormal on both sides, and
//! a contracted leg stored through `epsilon` on one side is stored through it on the other
//! (an `In` leg in `A`'s domain meets an `Out` leg in `B`'s codomain), where `epsilon` is
//! orthogonal.

use crate::error::Error;
use crate::execute::Contraction;
use crate::spec::Spec;
use tessera_backends::Scalar;
use tessera_blocks::AsyncArray;
use tessera_blocks::su2::{Su2Leg, Su2Structure, Su2Tensor};

/// `C = A B` over the labels of `spec` (as [`Spec::parse`] reads it: `"abc,cd->a|bd"`, the
/// output split at `|`, or after `A`'s free legs without one), for SU(2) tensors.
///
/// ```
/// use tessera_blocks::Direction;
/// use tessera_blocks::su2::{Su2Leg, Su2Structure, Su2Tensor};
/// use tessera_contract::contract_su2;
///
/// let v = Su2Leg::new(Direction::In, [(0, 2), (1, 1)])?;
/// let w = Su2Leg::new(Direction::In, [(1, 2), (2, 1)])?;
/// let a = Su2Tensor::<f64>::random(Su2Structure::new(vec![v.clone(), w.dual()], 1)?, 1)?;
/// let b = Su2Tensor::<f64>::random(Su2Structure::new(vec![w.clone(), v.dual()], 1)?, 2)?;
/// let c = contract_su2("ij,jk->ik", &a, &b)?;
/// let (da, db, dc) = (a.to_dense()?, b.to_dense()?, c.to_dense()?);
/// let (n, m) = (v.dim(), w.dim());
/// let want: f64 = (0..m).map(|j| da[1 + n * j] * db[j + m * 3]).sum();
/// assert!((dc[1 + n * 3] - want).abs() < 1e-12);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// The spec's parse errors; [`Error::Arity`] when an operand's legs do not match its labels;
/// [`Error::Legs`] when a contracted pair has the same direction or different spins. Nothing
/// is enrolled on error.
pub fn contract_su2<T: tessera_backends::Field + Scalar<Real = f64>>(
    spec: &str,
    a: &Su2Tensor<T>,
    b: &Su2Tensor<T>,
) -> Result<Su2Tensor<T>, Error> {
    let spec = Spec::parse(spec)?;
    let (sa, sb) = (a.structure(), b.structure());
    for (operand, labels, s) in [("A", spec.a(), sa), ("B", spec.b(), sb)] {
        if labels.len() != s.legs().len() {
            return Err(Error::Arity {
                operand,
                expected: labels.len(),
                given: s.legs().len(),
            });
        }
    }
    let pos = |labels: &[char], l: char| {
        labels
            .iter()
            .position(|&x| x == l)
            .expect("the spec's labels")
    };
    // Contracted labels in A's order; free ones in the output's.
    let contracted: Vec<char> = spec
        .a()
        .iter()
        .copied()
        .filter(|l| spec.b().contains(l))
        .collect();
    let free_a: Vec<char> = spec
        .output()
        .iter()
        .copied()
        .filter(|l| spec.a().contains(l))
        .collect();
    let free_b: Vec<char> = spec
        .output()
        .iter()
        .copied()
        .filter(|l| spec.b().contains(l))
        .collect();
    for &l in &contracted {
        let (i, j) = (pos(spec.a(), l), pos(spec.b(), l));
        Su2Leg::check_contractible(&sa.legs()[i], &sb.legs()[j]).map_err(|source| Error::Legs {
            label: l,
            a_leg: i,
            b_leg: j,
            source,
        })?;
    }
    let perm_a: Vec<usize> = free_a
        .iter()
        .chain(&contracted)
        .map(|&l| pos(spec.a(), l))
        .collect();
    let perm_b: Vec<usize> = contracted
        .iter()
        .chain(&free_b)
        .map(|&l| pos(spec.b(), l))
        .collect();
    let a2 = arranged(a, &perm_a, free_a.len())?;
    let b2 = arranged(b, &perm_b, contracted.len())?;
    let legs: Vec<Su2Leg> = free_a
        .iter()
        .map(|&l| sa.legs()[pos(spec.a(), l)].clone())
        .chain(free_b.iter().map(|&l| sb.legs()[pos(spec.b(), l)].clone()))
        .collect();
    let product = Su2Structure::shared(legs, free_a.len())?;
    let data = AsyncArray::try_empty(std::sync::Arc::clone(product.matrix()))?;
    Contraction::new("ab,bc->ac")?.apply_into(a2.get().data(), b2.get().data(), &data)?;
    let c = Su2Tensor::from_data(product, data)?;
    let joined: Vec<char> = free_a.iter().chain(&free_b).copied().collect();
    let perm_c: Vec<usize> = spec.output().iter().map(|&l| pos(&joined, l)).collect();
    if unchanged(&c, &perm_c, spec.output_codomain()) {
        Ok(c)
    } else {
        Ok(c.permuted(&perm_c, spec.output_codomain())?)
    }
}

/// Whether `perm` and `n_codomain` leave `t`'s legs as they are.
fn unchanged<T: Scalar<Real = f64>>(t: &Su2Tensor<T>, perm: &[usize], n_codomain: usize) -> bool {
    perm.iter().enumerate().all(|(i, &p)| i == p) && n_codomain == t.structure().n_codomain()
}

/// A tensor permuted for a contraction, or the operand itself when nothing moves.
enum Arranged<'a, T: Scalar> {
    Same(&'a Su2Tensor<T>),
    Permuted(Su2Tensor<T>),
}

impl<T: Scalar> Arranged<'_, T> {
    fn get(&self) -> &Su2Tensor<T> {
        match self {
            Self::Same(t) => t,
            Self::Permuted(t) => t,
        }
    }
}

/// `t` permuted, or `t` itself when the permutation and split change nothing.
fn arranged<'a, T: Scalar<Real = f64>>(
    t: &'a Su2Tensor<T>,
    perm: &[usize],
    n_codomain: usize,
) -> Result<Arranged<'a, T>, Error> {
    Ok(if unchanged(t, perm, n_codomain) {
        Arranged::Same(t)
    } else {
        Arranged::Permuted(t.permuted(perm, n_codomain)?)
    })
}
