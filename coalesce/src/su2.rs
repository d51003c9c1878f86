//! Factorizations of SU(2)-symmetric tensors, per coupled spin (and charge).
//!
//! Owns [`svd_su2`], [`qr_su2`], [`eigh_su2`] and their results [`Su2Svd`], [`Su2Qr`],
//! [`Su2Eigh`]. Invariants: each is the abelian factorization of the matrix form, one per
//! coupled spin `c` (and charge `q`) of the reduced matrix, and the factors are SU(2) tensors
//! whose bond leg holds `(c, q)` with as many multiplets as that factorization's bond has
//! columns, so composing them gives back `A` on the dense tensors. `A = U S V†` exactly up to the
//! truncation, which weighs each singular value by `2c + 1`: a multiplet is kept or dropped
//! whole, `max_dim` counts states, and the discarded weight is the dense `||A - U S V†||^2`.
//! An eigenvalue of [`eigh_su2`] is the eigenvalue of a whole multiplet (`2c + 1` equal dense
//! eigenvalues).

use crate::eigh::eigh;
use crate::error::Error;
use crate::qr::qr;
use crate::svd::{SingularValues, svd_weighted};
use crate::truncation::Truncation;
use tessera_backends::{Field, Scalar};
use tessera_blocks::su2::{Su2Label, Su2Leg, Su2Structure, Su2Tensor};
use tessera_blocks::{AsyncArray, Direction, Leg};

/// The result of [`svd_su2`].
#[derive(Debug)]
pub struct Su2Svd<T: Scalar> {
    /// `U`: `A`'s codomain legs to the bond leg, orthonormal columns per coupled spin.
    pub u: Su2Tensor<T>,
    /// The kept singular values per coupled spin and charge, as on the reduced matrices
    /// (each stands for a multiplet of `2c + 1` states); labelled [`Su2Label`] `(2c, q)`.
    pub s: SingularValues<f64, Su2Label>,
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
    let f = svd_weighted(a.data(), truncation, |c: &Su2Label| f64::from(c.0.0 + 1))?;
    let bond = Su2Leg::with_charges(
        Direction::Out,
        f.s.iter().map(|(c, v)| ((c.0.0 as u32, c.1.0), v.len())),
    )?;
    let (u, vt) = (left_factor(a, &bond, f.u)?, right_factor(a, &bond, f.vt)?);
    Ok(Su2Svd {
        u,
        s: f.s,
        vt,
        bond,
        discarded_weight: f.discarded_weight,
        total_weight: f.total_weight,
    })
}

/// The result of [`qr_su2`].
#[derive(Debug)]
pub struct Su2Qr<T: Scalar> {
    /// `Q`: `A`'s codomain legs to the bond leg, orthonormal columns per coupled spin.
    pub q: Su2Tensor<T>,
    /// `R`: the dual bond leg to `A`'s domain legs, upper triangular per coupled spin.
    pub r: Su2Tensor<T>,
    /// The bond leg (as `Q`'s domain leg, `Out`): spin `c` with `min(rows, cols)` multiplets
    /// of the reduced matrix of `c`.
    pub bond: Su2Leg,
}

/// The result of [`eigh_su2`].
#[derive(Debug)]
pub struct Su2Eigh<T: Scalar> {
    /// `D`: the eigenvalues, a diagonal map on the bond leg (legs: the dual bond leg, then
    /// the bond leg), non-decreasing per coupled spin; each stands for a multiplet.
    pub values: Su2Tensor<f64>,
    /// `V`: `A`'s codomain legs to the bond leg, unitary per coupled spin.
    pub vectors: Su2Tensor<T>,
    /// The bond leg (as `V`'s domain leg, `Out`).
    pub bond: Su2Leg,
}

/// The SU(2) leg of an abelian factor's bond leg (labelled `(2c, q)`, direction `Out`).
fn su2_bond(leg: &Leg<Su2Label>) -> Result<Su2Leg, Error> {
    let sectors = leg
        .segments()
        .iter()
        .map(|g| ((g.sector.0.0 as u32, g.sector.1.0), g.dim));
    Ok(Su2Leg::with_charges(Direction::Out, sectors)?)
}

/// The left factor of `a` at `bond` (`a`'s codomain to the bond), from the abelian factor's
/// data.
fn left_factor<T: Scalar<Real = f64>>(
    a: &Su2Tensor<T>,
    bond: &Su2Leg,
    data: AsyncArray<T, Su2Label>,
) -> Result<Su2Tensor<T>, Error> {
    let s = a.structure();
    let legs: Vec<Su2Leg> = s.codomain().iter().cloned().chain([bond.clone()]).collect();
    Ok(Su2Tensor::from_data(
        Su2Structure::shared(legs, s.n_codomain())?,
        data,
    )?)
}

/// The right factor of `a` at `bond` (the dual bond to `a`'s domain), from the abelian
/// factor's data.
fn right_factor<T: Scalar<Real = f64>>(
    a: &Su2Tensor<T>,
    bond: &Su2Leg,
    data: AsyncArray<T, Su2Label>,
) -> Result<Su2Tensor<T>, Error> {
    let legs: Vec<Su2Leg> = [bond.dual()]
        .into_iter()
        .chain(a.structure().domain().iter().cloned())
        .collect();
    Ok(Su2Tensor::from_data(Su2Structure::shared(legs, 1)?, data)?)
}

/// The QR decomposition of an SU(2) tensor map, one per coupled spin (the abelian [`qr`]
/// of the matrix form): `A = Q R` on the dense tensors, `Q` an isometry.
///
/// ```
/// use tessera_blocks::Direction;
/// use tessera_blocks::su2::{Su2Leg, Su2Structure, Su2Tensor};
/// use tessera_coalesce::qr_su2;
///
/// let v = Su2Leg::new(Direction::In, [(0, 2), (1, 1), (2, 2)])?;
/// let a = Su2Tensor::<f64>::random(Su2Structure::new(vec![v.clone(), v.clone(), v.dual()], 2)?, 1)?;
/// let f = qr_su2(&a)?;
/// // Q is an isometry: R carries all of A's norm.
/// assert!((f.r.norm()? - a.norm()?).abs() < 1e-12);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`qr`]; what the data decides poisons the factors.
pub fn qr_su2<T: Field + Scalar<Real = f64>>(a: &Su2Tensor<T>) -> Result<Su2Qr<T>, Error> {
    let f = qr(a.data())?;
    let bond = su2_bond(&f.q.structure().domain()[0])?;
    let (q, r) = (left_factor(a, &bond, f.q)?, right_factor(a, &bond, f.r)?);
    Ok(Su2Qr { q, r, bond })
}

/// The eigendecomposition of a Hermitian SU(2) tensor map from a space to itself (the
/// domain legs the duals of the codomain legs), one per coupled spin (the abelian [`eigh`]
/// of the matrix form): `A = V D V†` on the dense tensors, each eigenvalue that of a whole
/// multiplet.
///
/// ```
/// use tessera_blocks::Direction;
/// use tessera_blocks::su2::{Su2Leg, Su2Structure, Su2Tensor};
/// use tessera_coalesce::eigh_su2;
///
/// // S1 . S2 on two spins one half: -3/4 on the singlet, 1/4 on the triplet.
/// let half = Su2Leg::new(Direction::In, [(1, 1)])?;
/// let s = Su2Structure::new(vec![half.clone(), half.clone(), half.dual(), half.dual()], 2)?;
/// let mut h = vec![0.0; 16];
/// let at = |a: usize, b: usize, c: usize, d: usize| a + 2 * (b + 2 * (c + 2 * d));
/// for (a, b, c, d, x) in [(0, 0, 0, 0, 0.25), (1, 1, 1, 1, 0.25), (0, 1, 0, 1, -0.25),
///     (1, 0, 1, 0, -0.25), (0, 1, 1, 0, 0.5), (1, 0, 0, 1, 0.5)] {
///     h[at(a, b, c, d)] = x;
/// }
/// let f = eigh_su2(&Su2Tensor::from_dense(s, &h)?)?;
/// assert_eq!(f.bond.sectors(), &[(0, 1), (2, 1)]);
/// let d = f.values.data().to_blocks()?;
/// assert!((d[0][0] + 0.75).abs() < 1e-12 && (d[1][0] - 0.25).abs() < 1e-12);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`eigh`]: [`Error::NotEndomorphism`] when the matrix form is not square per coupled
/// spin with matching legs, before anything is enrolled; what the data decides poisons the
/// factors.
pub fn eigh_su2<T: Field + Scalar<Real = f64>>(a: &Su2Tensor<T>) -> Result<Su2Eigh<T>, Error> {
    let f = eigh(a.data())?;
    let bond = su2_bond(&f.vectors.structure().domain()[0])?;
    let vectors = left_factor(a, &bond, f.vectors)?;
    let diagonal = Su2Structure::shared(vec![bond.dual(), bond.clone()], 1)?;
    let values = Su2Tensor::from_data(diagonal, f.values)?;
    Ok(Su2Eigh {
        values,
        vectors,
        bond,
    })
}
