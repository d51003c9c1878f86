//! Factorizations of SU(2)-symmetric tensors, per coupled spin.
//!
//! Owns [`svd_su2`] and its result [`Su2Svd`]. Invariant: `A = U S V†` exactly up to the
//! truncation, with one SVD per coupled spin `c` of the reduced matrix (the abelian
//! [`svd_weighted`] of the matrix form), and the truncation weighs each singular value by
//! `2c + 1`: a multiplet is kept or dropped whole, `max_dim` counts states, and the discarded
//! weight is the dense `||A - U S V†||^2`.

use crate::error::Error;
use crate::svd::{SingularValues, svd_weighted};
use crate::truncation::Truncation;
use tessera_backends::{Field, Scalar};
use tessera_blocks::su2::{Su2Leg, Su2Structure, Su2Tensor};
use tessera_blocks::{Direction, U1};

/// The result of [`svd_su2`].
#[derive(Debug)]
pub struct Su2Svd<T: Scalar> {
    /// `U`: `A`'s codomain legs to the bond leg, orthonormal columns per coupled spin.
    pub u: Su2Tensor<T>,
    /// The kept singular values per coupled spin, as on the reduced matrices (each stands
    /// for a multiplet of `2c + 1` states); labelled `U1(2c)`.
    pub s: SingularValues<f64, U1>,
    /// `V†`: the dual bond leg to `A`'s domain legs, orthonormal rows per coupled spin.
    pub vt: Su2Tensor<T>,
    /// The bond leg (as `U`'s domain leg, `Out`): spin `c` with the multiplets it keeps.
    pub bond: Su2Leg,
    /// The dense `||A - U S V†||^2`: the discarded values' squares times `2c + 1`.
    pub discarded_weight: f64,
    /// The dense `||A||^2`.
    pub total_weight: f64,
}

/// The singular value decomposition of an SU(2) tensor map, per coupled spin, truncated
/// globally with every value weighed by its multiplet's dimension.
///
/// ```
/// use tessera_blocks::Direction;
/// use tessera_blocks::su2::{Su2Leg, Su2Structure, Su2Tensor};
/// use tessera_coalesce::{Truncation, svd_su2};
///
/// let v = Su2Leg::new(Direction::In, [(0, 3), (2, 3)])?;
/// let a = Su2Tensor::<f64>::random(Su2Structure::new(vec![v.clone(), v.dual()], 1)?, 1)?;
/// // Seven states: the largest values, a singlet counting one and a triplet three.
/// let f = svd_su2(&a, &Truncation::max_dim(7))?;
/// assert!(f.bond.dim() <= 7);
/// assert!((f.total_weight.sqrt() - a.norm()?).abs() < 1e-12);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`svd_weighted`](crate::svd_weighted).
pub fn svd_su2<T: Field + Scalar<Real = f64>>(
    a: &Su2Tensor<T>,
    truncation: &Truncation,
) -> Result<Su2Svd<T>, Error> {
    let f = svd_weighted(a.data(), truncation, |c: &U1| f64::from(c.0 + 1))?;
    let bond = Su2Leg::new(
        Direction::Out,
        f.s.iter().map(|(c, v)| (c.0 as u32, v.len())),
    )?;
    let s = a.structure();
    let left: Vec<Su2Leg> = s.codomain().iter().cloned().chain([bond.clone()]).collect();
    let right: Vec<Su2Leg> = [bond.dual()]
        .into_iter()
        .chain(s.domain().iter().cloned())
        .collect();
    let u = Su2Tensor::from_data(Su2Structure::shared(left, s.n_codomain())?, f.u)?;
    let vt = Su2Tensor::from_data(Su2Structure::shared(right, 1)?, f.vt)?;
    Ok(Su2Svd {
        u,
        s: f.s,
        vt,
        bond,
        discarded_weight: f.discarded_weight,
        total_weight: f.total_weight,
    })
}
