//! Block-sparse singular value decomposition with global truncation.
//!
//! Owns [`svd`], its result [`Svd`] and [`SingularValues`], and the same decomposition in
//! stages for callers that truncate themselves ([`svd_sectors`], [`SectorSvds`],
//! [`svd_layout`]: a distributed SVD whose sectors live on several processes).
//! Invariant: `A ≈ U · S · V†` sector by sector, `U` has orthonormal columns and `V†` orthonormal rows in every sector,
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
use crate::factor::{
    bond_leg, diagonal_structure, left_structure, present_sectors_whole, right_structure,
};
use crate::kernels::{Factorize, SVD_TASK};
use crate::truncation::Truncation;
use std::sync::Arc;
use tessera_backends::{Field, Host, Placement, Real, Scalar};
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure, Leg, Tensor};
use tessera_core::{Async, Runtime};

/// The singular values kept, per segment of the bond leg, each non-increasing.
#[derive(Clone, Debug)]
pub struct SingularValues<R, S> {
    leg: Leg<S>,
    values: Vec<Vec<R>>,
}

impl<R: Scalar, S: AbelianSector> SingularValues<R, S> {
    /// The values `values[i]` on segment `i` of the bond leg `leg` (as `U`'s domain leg), for
    /// a caller that truncates itself ([`svd_sectors`] and [`Truncation::select`]).
    ///
    /// # Errors
    ///
    /// [`Error::BadValues`] when there is not one list per segment, of the segment's
    /// dimension.
    pub fn new(leg: Leg<S>, values: Vec<Vec<R>>) -> Result<Self, Error> {
        let dims: Vec<usize> = leg.segments().iter().map(|s| s.dim).collect();
        let given: Vec<usize> = values.iter().map(Vec::len).collect();
        if dims != given {
            return Err(Error::BadValues {
                expected: format!("one list per bond segment, of its dimension: {dims:?}"),
                given: format!("lists of {given:?} values"),
            });
        }
        Ok(Self { leg, values })
    }

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
    let structure = a.structure();
    let (labels, parts, values) = factor_sectors(a)?;
    let weights: Vec<f64> = labels.iter().map(weight).collect();
    let (kept, discarded_weight, total_weight) = truncation.select_weighted(&values, &weights);
    let layout = svd_layout(structure, labels.iter().cloned().zip(kept.iter().copied()))?;
    let placement = a.placement();
    let u = Tensor::zeros_on(layout.u, &placement)?;
    let vt = Tensor::zeros_on(layout.vt, &placement)?;
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
            leg: layout.bond,
            values: s_values,
        },
        vt,
        discarded_weight,
        total_weight,
    })
}

/// Enrolls the SVD of every coupled sector of `a` that has a block (each one dense) and
/// waits for their singular values (the one host wait, see the module docs): the sectors'
/// labels, results and values, in sector order.
#[allow(clippy::type_complexity)]
fn factor_sectors<T: Field, S: AbelianSector, P: Factorize<T>>(
    a: &Tensor<T, S, P>,
) -> Result<(Vec<S>, Vec<Async<P::SvdPart>>, Vec<Vec<f64>>), Error> {
    let sectors: Vec<usize> = (0..a.structure().sectors().len())
        .filter(|&c| !a.structure().sectors()[c].blocks().is_empty())
        .collect();
    let mut parts = Vec::with_capacity(sectors.len());
    for &c in &sectors {
        let out = Async::new(P::empty_svd());
        P::svd_sector(a, c, &out)?;
        parts.push(out);
    }
    let values: Vec<Vec<f64>> = parts
        .iter()
        .map(|p| p.with(|o| P::singular_values(o).to_vec()))
        .collect::<Result<_, _>>()
        .map_err(own_failure)?;
    let labels = sectors
        .iter()
        .map(|&c| a.structure().sectors()[c].sector().clone())
        .collect();
    Ok((labels, parts, values))
}

/// The bond leg of a truncated SVD and the structures of its factors (see [`svd_layout`]).
#[derive(Clone, Debug, PartialEq)]
pub struct SvdLayout<S: AbelianSector> {
    /// The bond leg, `U`'s domain leg: one segment per coupled sector that keeps anything.
    pub bond: Leg<S>,
    /// `U`'s structure: the tensor's codomain legs to the bond leg, trivial flux.
    pub u: BlockStructure<S>,
    /// `V†`'s structure: the dual bond leg to the tensor's domain legs, the tensor's flux.
    pub vt: BlockStructure<S>,
}

/// The bond leg and the factors' structures of an SVD of a tensor of structure `a` that
/// keeps `k` values of each coupled sector `(label, k)` (sectors that keep none are left
/// out of the bond): what [`svd`] builds once the truncation has decided, for a caller
/// that decides itself ([`svd_sectors`]).
///
/// # Errors
///
/// A block-layer error when a label repeats.
pub fn svd_layout<S: AbelianSector>(
    a: &BlockStructure<S>,
    kept: impl IntoIterator<Item = (S, usize)>,
) -> Result<SvdLayout<S>, Error> {
    let bond = bond_leg(kept)?;
    Ok(SvdLayout {
        u: left_structure(a, &bond)?,
        vt: right_structure(&bond, a)?,
        bond,
    })
}

/// The SVDs of the coupled sectors a tensor has blocks in, computed and not yet truncated
/// ([`svd_sectors`]): the first half of [`svd`], for a caller that decides the truncation
/// with values it gathers from elsewhere, as a factorization whose sectors live on several
/// processes does. [`Truncation::select`] decides from every sector's values,
/// [`svd_layout`] makes the factors' structures, and [`keep`](Self::keep) copies each
/// sector's kept columns of `U` and rows of `V†` into them.
pub struct SectorSvds<T: Field, S: AbelianSector, P: Factorize<T> = Host> {
    labels: Vec<S>,
    parts: Vec<Async<P::SvdPart>>,
    values: Vec<Vec<f64>>,
}

impl<T: Field, S: AbelianSector, P: Factorize<T>> std::fmt::Debug for SectorSvds<T, S, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.labels.iter().zip(self.values.iter().map(Vec::len)))
            .finish()
    }
}

impl<T: Field, S: AbelianSector, P: Factorize<T>> SectorSvds<T, S, P> {
    /// Every factored sector's label with its singular values (non-increasing), in sector
    /// order.
    pub fn iter(&self) -> impl Iterator<Item = (&S, &[f64])> {
        self.labels
            .iter()
            .zip(self.values.iter().map(Vec::as_slice))
    }

    /// The singular values of the sector labelled `label`, if it was factored.
    pub fn values_of(&self, label: &S) -> Option<&[f64]> {
        let c = self.labels.iter().position(|l| l == label)?;
        Some(&self.values[c])
    }

    /// Enrolls the copy of the first `k` columns of `U` and rows of `V†` of the sector
    /// labelled `label` into the sectors of that label of `u` and `vt` (of
    /// [`svd_layout`]'s structures, or any with those sectors whole and `k` wide: the local
    /// part of a distributed factor). Does not wait; a `k` of 0 enrolls nothing.
    ///
    /// # Errors
    ///
    /// [`Error::BadValues`] for a sector not factored here or a `k` past its values;
    /// [`Error::NotOnBond`] when `u` lacks a whole sector `label` of `k` columns, or `vt`
    /// one of `k` rows. Nothing is enrolled then.
    pub fn keep(
        &self,
        label: &S,
        k: usize,
        u: &Tensor<T, S, P>,
        vt: &Tensor<T, S, P>,
    ) -> Result<(), Error> {
        let c = self
            .labels
            .iter()
            .position(|l| l == label)
            .ok_or_else(|| Error::BadValues {
                expected: "a sector that was factored here".into(),
                given: format!("sector {label}"),
            })?;
        if k > self.values[c].len() {
            return Err(Error::BadValues {
                expected: format!("at most {} values of sector {label}", self.values[c].len()),
                given: format!("{k} kept"),
            });
        }
        if k == 0 {
            return Ok(());
        }
        let whole = |x: &Tensor<T, S, P>, rows: bool| {
            let st = x.structure();
            st.sector_index(label)
                .map(|i| &st.sectors()[i])
                .is_some_and(|sec| {
                    sec.is_dense() && if rows { sec.rows() } else { sec.cols() } == k
                })
        };
        if !whole(u, false) {
            return Err(Error::NotOnBond {
                expected: "a U with the sector whole, as wide as the values kept",
                given: u.structure().summary(),
            });
        }
        if !whole(vt, true) {
            return Err(Error::NotOnBond {
                expected: "a V† with the sector whole, as tall as the values kept",
                given: vt.structure().summary(),
            });
        }
        P::keep_svd(&self.parts[c], k, u, vt, label)
    }
}

/// The SVD of every coupled sector in which `a` has a block, each sector whole (its absent
/// blocks as zeros), without truncating: the sectors a process holds of a distributed
/// tensor placed by sector, say. Sectors without a block are not factored (they cost
/// nothing, where [`svd`] factors a masked tensor's absent sectors as zeros). Waits for the
/// singular values, as [`svd`] does.
///
/// ```
/// use tessera_blocks::{AsyncArray, BitVec, BlockStructure, Direction, Leg, U1};
/// use tessera_coalesce::{Truncation, svd_layout, svd_sectors};
///
/// let leg = Leg::new(Direction::In, [(U1(0), 3), (U1(1), 4)])?;
/// let full = BlockStructure::new([leg.clone()], [leg.dual()], U1(0))?;
/// // Only the charge-1 block: the charge-0 sector is not factored.
/// let one = full.with_present(&BitVec::from_iter([false, true]))?;
/// let a = AsyncArray::<f64, U1>::random(one, 1);
/// let f = svd_sectors(&a)?;
/// assert_eq!(f.iter().count(), 1);
/// let kept = Truncation::max_dim(2).select(&[f.values_of(&U1(1)).unwrap().to_vec()])?;
/// let layout = svd_layout(&full, [(U1(1), kept.per_sector[0])])?;
/// let u = AsyncArray::<f64, U1>::zeros(layout.u);
/// let vt = AsyncArray::<f64, U1>::zeros(layout.vt);
/// f.keep(&U1(1), 2, &u, &vt)?;
/// # Ok::<(), tessera_coalesce::Error>(())
/// ```
///
/// # Errors
///
/// As [`svd`], without the truncation's.
pub fn svd_sectors<T: Field, S: AbelianSector, P: Factorize<T>>(
    a: &Tensor<T, S, P>,
) -> Result<SectorSvds<T, S, P>, Error> {
    let filled = match present_sectors_whole(a.structure())? {
        Some(whole) => Some(a.embed(whole)?),
        None => None,
    };
    let a = filled.as_ref().unwrap_or(a);
    let (labels, parts, values) = factor_sectors(a)?;
    Ok(SectorSvds {
        labels,
        parts,
        values,
    })
}
