//! Block-sparse singular value decomposition with global truncation.
//!
//! Owns [`svd`], its result [`Svd`] and [`SingularValues`]. Invariant: `A ≈ U · S · V†`
//! sector by sector, `U` has orthonormal columns and `V†` orthonormal rows in every sector,
//! and the kept singular values are the largest over all sectors that the [`Truncation`]
//! allows (see the `truncation` module); the bond leg has one segment per sector that keeps
//! anything, of the kept dimension (see the `factor` module for legs and directions).
//!
//! # Where the host waits
//!
//! The per-sector SVDs run as scheduled tasks, one per coupled sector, in parallel. The
//! truncation decision needs every sector's singular values, and the shapes of `U` and `V†`
//! (the bond leg, hence their descriptor tables) depend on it, so [`svd`] waits for those
//! tasks before it returns: a genuine data dependency, not a lost overlap. The copies of the
//! kept columns into `U` and rows into `V†` are scheduled tasks again; `svd` does not wait
//! for them.

use crate::error::Error;
use crate::factor::{bond_leg, diagonal_structure, left_structure, right_structure};
use crate::kernels::{Factorize, SVD_TASK};
use crate::truncation::Truncation;
use std::sync::Arc;
use tessera_backends::{Field, Host, Placement, Real, Scalar};
use tessera_blocks::{AbelianSector, AsyncArray, Leg, Tensor};
use tessera_core::{Async, Runtime};

/// The singular values kept, per segment of the bond leg, each non-increasing.
#[derive(Clone, Debug)]
pub struct SingularValues<R, S> {
    leg: Leg<S>,
    values: Vec<Vec<R>>,
}

impl<R: Scalar, S: AbelianSector> SingularValues<R, S> {
    /// The bond leg (as `U`'s domain leg): segment `i` is labelled by its coupled sector and
    /// has dimension `values(i).len()`.
    pub fn leg(&self) -> &Leg<S> {
        &self.leg
    }

    /// The kept values of bond segment `i` (non-increasing), or `None` past the segments.
    pub fn values(&self, i: usize) -> Option<&[R]> {
        self.values.get(i).map(Vec::as_slice)
    }

    /// The kept values of the bond segment of coupled charge `charge` (non-increasing), or
    /// `None` when no value of that charge is kept.
    pub fn values_of(&self, charge: &S) -> Option<&[R]> {
        self.values(self.leg.segment_of(charge)?)
    }

    /// Every segment's coupled sector with its kept values.
    pub fn iter(&self) -> impl Iterator<Item = (&S, &[R])> {
        self.leg
            .segments()
            .iter()
            .map(|s| &s.sector)
            .zip(self.values.iter().map(Vec::as_slice))
    }

    /// How many values are kept in total (the bond dimension).
    pub fn len(&self) -> usize {
        self.values.iter().map(Vec::len).sum()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same bond leg with `f` applied to every kept value: `sqrt` to split `S` evenly
    /// between `U` and `V†`, `1 / x` to undo it, a rescaling after truncation.
    #[must_use]
    pub fn map(&self, f: impl Fn(R) -> R) -> Self {
        Self {
            leg: self.leg.clone(),
            values: self
                .values
                .iter()
                .map(|v| v.iter().map(|&x| f(x)).collect())
                .collect(),
        }
    }

    /// `x · S`: a new tensor with column `j` of bond segment `i` of `x` multiplied by
    /// `values(i)[j]`, for `x` whose only domain leg is the bond leg (as `U`'s), real or
    /// complex (any scalar whose real type is `R`). Absorbs `S` into `U` without making `S`
    /// a tensor of `x`'s element type and contracting. Scheduled, one task per coupled sector
    /// of `x` that reads exactly its blocks; does not wait.
    ///
    /// ```
    /// use num_complex::Complex64;
    /// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
    /// use tessera_coalesce::{Truncation, svd};
    ///
    /// let leg = Leg::new(Direction::In, [(U1(0), 3), (U1(1), 4)])?;
    /// let s = BlockStructure::new([leg.clone()], [leg.dual()], U1(0))?;
    /// let a = AsyncArray::<Complex64, U1>::random(s, 1);
    /// let f = svd(&a, &Truncation::max_dim(4))?;
    /// let us = f.s.scale_columns(&f.u)?; // U·S, complex, for the left-canonical step
    /// let sv = f.s.map(f64::sqrt).scale_rows(&f.vt)?; // √S·V†
    /// # let _ = (us, sv);
    /// # Ok::<(), tessera_coalesce::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotOnBond`] when `x`'s domain is not exactly the bond leg; nothing is
    /// enrolled then.
    pub fn scale_columns<T: Scalar<Real = R>>(
        &self,
        x: &AsyncArray<T, S>,
    ) -> Result<AsyncArray<T, S>, Error> {
        let st = x.structure();
        if st.domain() != std::slice::from_ref(&self.leg) {
            return Err(Error::NotOnBond {
                expected: "a tensor whose only domain leg is the bond leg (as U's)",
                given: st.summary(),
            });
        }
        self.scale(x, st.n_codomain())
    }

    /// `S · x`: a new tensor with row `j` of bond segment `i` of `x` multiplied by
    /// `values(i)[j]`, for `x` whose only codomain leg is the dual bond leg (as `V†`'s), real
    /// or complex. Scheduled like [`scale_columns`](Self::scale_columns).
    ///
    /// # Errors
    ///
    /// [`Error::NotOnBond`] when `x`'s codomain is not exactly the dual bond leg; nothing is
    /// enrolled then.
    pub fn scale_rows<T: Scalar<Real = R>>(
        &self,
        x: &AsyncArray<T, S>,
    ) -> Result<AsyncArray<T, S>, Error> {
        let st = x.structure();
        if st.codomain() != std::slice::from_ref(&self.leg.dual()) {
            return Err(Error::NotOnBond {
                expected: "a tensor whose only codomain leg is the dual bond leg (as V†'s)",
                given: st.summary(),
            });
        }
        self.scale(x, 0)
    }

    /// `x` with the bond axis `axis` (leg `axis`: the last for columns, the first for rows)
    /// scaled by the values of its segment. One task per coupled sector of `x`: it reads the
    /// sector's blocks and overwrites the same blocks of the result, element by element
    /// (the blocks' layouts are those of one structure, whatever its mask).
    fn scale<T: Scalar<Real = R>>(
        &self,
        x: &AsyncArray<T, S>,
        axis: usize,
    ) -> Result<AsyncArray<T, S>, Error> {
        let st = x.structure();
        let out = AsyncArray::<T, S>::try_empty(Arc::clone(st))?;
        let rt = Runtime::current();
        for sector in st.sectors() {
            let ids: Vec<usize> = sector.blocks().collect();
            // Per block: its bond segment's values, and how many elements each bond index
            // repeats over before the next (the product of the dims before the bond axis).
            let plan: Vec<(Vec<R>, usize)> = ids
                .iter()
                .map(|&id| {
                    let b = st.block(id).expect("a block of the sector");
                    let inner = b.shape()[..axis].iter().product();
                    (self.values[b.segments()[axis]].clone(), inner)
                })
                .collect();
            rt.schedule_named(
                "coalesce.scale_bond",
                (
                    x.block_set(&ids)?.into_read(),
                    out.block_set(&ids)?.into_overwrite(),
                ),
                move |(xs, mut ys)| {
                    for (k, (values, inner)) in plan.iter().enumerate() {
                        let mut y = ys.get_mut(k);
                        let copied = tessera_backends::cpu::assign_map(&mut y, &xs.get(k), |v| v);
                        assert!(copied, "one structure: a block has the same dims in both");
                        let d = values.len();
                        y.update(|e, v| v * T::from_real(values[(e / inner) % d]));
                    }
                    Ok(())
                },
            )?;
        }
        Ok(out)
    }

    /// `S` as a real block-diagonal tensor: codomain the dual bond leg, domain the bond
    /// leg, trivial flux, so that `U · S · V†` contracts. For complex `U` and `V†`, make it
    /// complex with [`AsyncArray::to_complex`], or scale them directly
    /// ([`scale_columns`](Self::scale_columns), [`scale_rows`](Self::scale_rows)).
    ///
    /// # Errors
    ///
    /// A block-layer error if the structure cannot be built (it always can).
    pub fn to_array(&self) -> Result<AsyncArray<R, S>, Error> {
        let structure = diagonal_structure(&self.leg)?;
        let mut blocks = vec![Vec::new(); structure.num_blocks()];
        for (i, v) in self.values.iter().enumerate() {
            let id = structure
                .block_id(&[i, i])
                .expect("the diagonal blocks of a bond leg and its dual conserve the flux");
            let k = v.len();
            let mut data = vec![R::ZERO; k * k];
            for (j, &s) in v.iter().enumerate() {
                data[j + j * k] = s;
            }
            blocks[id] = data;
        }
        Ok(AsyncArray::from_blocks(structure, &blocks)?)
    }
}

/// The result of [`svd`].
#[derive(Debug)]
pub struct Svd<T: Scalar, S: AbelianSector, P: Placement<T> = Host> {
    /// `U`: `A`'s codomain legs to the bond leg, orthonormal columns per sector.
    pub u: Tensor<T, S, P>,
    /// The kept singular values, per bond segment (on the host: the truncation needed them).
    pub s: SingularValues<Real<T>, S>,
    /// `V†`: the dual bond leg to `A`'s domain legs, orthonormal rows per sector.
    pub vt: Tensor<T, S, P>,
    /// The sum of the squares of the discarded singular values (`||A - U S V†||²`).
    pub discarded_weight: f64,
    /// The sum of the squares of all singular values (`||A||²`).
    pub total_weight: f64,
}

/// A failure `svd` met while waiting for its sectors' tasks: the typed error that one of
/// those tasks reported ([`Error::NonFinite`], [`Error::NoConvergence`]) as itself; any other
/// (a poison that reached `a` from elsewhere, a wait refused) as [`Error::Core`].
fn own_failure(e: tessera_core::Error) -> Error {
    if let tessera_core::Error::Poisoned { origin } = &e
        && origin.name == SVD_TASK
        && let Some(own) = Error::from_task_failure(&e)
    {
        return own.clone();
    }
    Error::Core(e)
}

/// The singular value decomposition of `a`, per coupled sector, truncated globally.
///
/// A tensor whose structure leaves out allowed blocks (a presence mask) is factored with
/// its absent blocks as zeros: the factors are those of the same tensor on the structure
/// with every allowed block (the `factor` module), and their structures have no mask.
///
/// ```
/// use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
/// use tessera_coalesce::{Truncation, svd};
///
/// let leg = Leg::new(Direction::In, [(U1(0), 3), (U1(1), 4)])?;
/// let a = AsyncArray::<f64, U1>::random(BlockStructure::new([leg.clone()], [leg.dual()], U1(0))?, 1);
/// let r = svd(&a, &Truncation::max_dim(5))?;
/// assert_eq!(r.s.len(), 5); // the five largest values of both sectors together
/// assert_eq!(r.u.structure().domain()[0], *r.s.leg());
/// # Ok::<(), tessera_coalesce::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::InvalidTruncation`] before anything is enrolled. Then, from the sectors' tasks
/// (`svd` waits for them): [`Error::NonFinite`] when a sector matrix holds a NaN or an
/// infinity (or its SVD produced one; the truncation never sees such a value), and
/// [`Error::NoConvergence`]; [`Error::Core`] with the poison when `a` was poisoned by an
/// earlier failure; and [`Error::Core`] with a wait error when called inside a task or on a
/// worker thread: `svd` waits on the host for the singular values.
pub fn svd<T: Field, S: AbelianSector, P: Factorize<T>>(
    a: &Tensor<T, S, P>,
    truncation: &Truncation,
) -> Result<Svd<T, S, P>, Error> {
    svd_weighted(a, truncation, |_| 1.0)
}

/// [`svd`] where every singular value of coupled sector `c` stands for `weight(c)` states
/// (for a tensor whose sectors label multiplets, as the reduced matrices of a non-abelian
/// tensor do: the weight is the multiplet's dimension). The truncation counts each value
/// `weight(c)` times towards `max_dim` and `weight(c) s^2` towards the discarded and total
/// weights, so multiplets are kept or dropped whole.
///
/// # Errors
///
/// As [`svd`].
pub fn svd_weighted<T: Field, S: AbelianSector, P: Factorize<T>>(
    a: &Tensor<T, S, P>,
    truncation: &Truncation,
    weight: impl Fn(&S) -> f64,
) -> Result<Svd<T, S, P>, Error> {
    truncation.check()?;
    let filled = P::fill_absent(a)?;
    let a = filled.as_ref().unwrap_or(a);
    let n = a.structure().sectors().len();
    let mut parts = Vec::with_capacity(n);
    for c in 0..n {
        let out = Async::new(P::empty_svd());
        P::svd_sector(a, c, &out)?;
        parts.push(out);
    }
    // The one host wait (see the module docs): the decision needs every singular value.
    let values: Vec<Vec<f64>> = parts
        .iter()
        .map(|p| p.with(|o| P::singular_values(o).to_vec()))
        .collect::<Result<_, _>>()
        .map_err(own_failure)?;
    let structure = a.structure();
    let labels: Vec<S> = structure
        .sectors()
        .iter()
        .map(|c| c.sector().clone())
        .collect();
    let weights: Vec<f64> = labels.iter().map(weight).collect();
    let (kept, discarded_weight, total_weight) = truncation.select_weighted(&values, &weights);
    let bond = bond_leg(labels.iter().cloned().zip(kept.iter().copied()))?;
    let placement = a.placement();
    let u = Tensor::zeros_on(left_structure(structure, &bond)?, &placement)?;
    let vt = Tensor::zeros_on(right_structure(&bond, structure)?, &placement)?;
    let mut s_values = Vec::new();
    for (c, part) in parts.iter().enumerate() {
        let k = kept[c];
        if k == 0 {
            continue;
        }
        s_values.push(
            values[c][..k]
                .iter()
                .map(|&x| Real::<T>::from_f64(x))
                .collect(),
        );
        P::keep_svd(part, k, &u, &vt, &labels[c])?;
    }
    Ok(Svd {
        u,
        s: SingularValues {
            leg: bond,
            values: s_values,
        },
        vt,
        discarded_weight,
        total_weight,
    })
}
