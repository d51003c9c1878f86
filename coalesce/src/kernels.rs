//! What a placement runs to factor one coupled sector.
//!
//! Owns: [`Factorize`], the per-sector half of every factorization, and its host
//! implementation (faer on the coalesced sector views). The other half, written once in
//! `svd.rs`, `qr.rs` and `eigh.rs` over any `P: Factorize<T>`, checks the input, fills absent
//! blocks, makes the bond leg and the factors' structures, waits for the singular values
//! where the truncation needs them and decides what to keep. Invariants:
//!
//! - A sector's task reads exactly that sector of the input and overwrites exactly that
//!   sector of each factor (or, for an SVD, its own result, copied into the factors by a
//!   later task once the truncation has decided), so sectors run side by side and a failure
//!   poisons only what depends on it.
//! - The host checks every number it reads and computes ([`SectorInfo`]): a NaN or an
//!   infinity fails the sector's task with [`Error::NonFinite`] naming where it is.

use crate::error::Error;
use crate::factor::{SectorInfo, factor_sector, kernel_error, re, with_absent_as_zeros};
use faer::{Mat, Side};
use tessera_backends::{Field, Host, Placement, Real, Scalar};
use tessera_blocks::{AbelianSector, AsyncArray, Tensor};
use tessera_core::{Async, Runtime};

/// The name of a sector's SVD task (its poison is read back as this crate's error).
pub(crate) const SVD_TASK: &str = "coalesce.svd";

/// What a placement runs to factor one coupled sector of a tensor whose sectors are all
/// dense (every allowed block present). Implemented by [`Host`] and, with the `cuda`
/// feature, by `Cuda` (cuSOLVER).
pub trait Factorize<T: Field>: Placement<T> + Placement<Real<T>> {
    /// One sector's SVD, kept until the truncation has decided.
    type SvdPart: Send + Sync + 'static;

    /// A placeholder SVD result, overwritten by the sector's task.
    #[doc(hidden)]
    fn empty_svd() -> Self::SvdPart;

    /// `a` on the structure with every allowed block, absent blocks as zeros, or `None`
    /// when every allowed block of `a` is present.
    ///
    /// # Errors
    ///
    /// The new tensor's allocation; the runtime's refusal.
    #[doc(hidden)]
    fn fill_absent<S: AbelianSector>(
        a: &Tensor<T, S, Self>,
    ) -> Result<Option<Tensor<T, S, Self>>, Error>;

    /// Enrolls the thin SVD of sector `c` of `a` into `out` (task [`SVD_TASK`]).
    ///
    /// # Errors
    ///
    /// The runtime's refusal; nothing is enrolled.
    #[doc(hidden)]
    fn svd_sector<S: AbelianSector>(
        a: &Tensor<T, S, Self>,
        c: usize,
        out: &Async<Self::SvdPart>,
    ) -> Result<(), Error>;

    /// The singular values of a sector's SVD, non-increasing.
    #[doc(hidden)]
    fn singular_values(part: &Self::SvdPart) -> &[f64];

    /// Enrolls the copy of the first `k` columns of `U` and rows of `V†` of `part` into the
    /// sectors labelled `label` of `u` and `vt`.
    ///
    /// # Errors
    ///
    /// The runtime's refusal.
    #[doc(hidden)]
    fn keep_svd<S: AbelianSector>(
        part: &Async<Self::SvdPart>,
        k: usize,
        u: &Tensor<T, S, Self>,
        vt: &Tensor<T, S, Self>,
        label: &S,
    ) -> Result<(), Error>;

    /// Enrolls the QR (`lq`: LQ) decomposition of sector `c` of `a` into the sectors of
    /// the same label of `left` (`Q`, or `L`) and `right` (`R`, or `Q`).
    ///
    /// # Errors
    ///
    /// The runtime's refusal.
    #[doc(hidden)]
    fn qr_sector<S: AbelianSector>(
        a: &Tensor<T, S, Self>,
        c: usize,
        lq: bool,
        left: &Tensor<T, S, Self>,
        right: &Tensor<T, S, Self>,
    ) -> Result<(), Error>;

    /// Enrolls the Hermitian eigendecomposition of (square) sector `c` of `a` into the
    /// sectors of the same label of `vectors` and the diagonal `values`.
    ///
    /// # Errors
    ///
    /// The runtime's refusal.
    #[doc(hidden)]
    fn eigh_sector<S: AbelianSector>(
        a: &Tensor<T, S, Self>,
        c: usize,
        vectors: &Tensor<T, S, Self>,
        values: &Tensor<Real<T>, S, Self>,
    ) -> Result<(), Error>;
}

/// One sector's thin SVD on the host.
#[derive(Debug)]
pub struct HostSvd<T> {
    u: Mat<T>,
    s: Vec<f64>,
    vt: Mat<T>,
}

impl<T: Field> Factorize<T> for Host {
    type SvdPart = HostSvd<T>;

    fn empty_svd() -> HostSvd<T> {
        HostSvd {
            u: Mat::<T>::from_fn(0, 0, |_, _| T::ZERO),
            s: Vec::new(),
            vt: Mat::<T>::from_fn(0, 0, |_, _| T::ZERO),
        }
    }

    fn fill_absent<S: AbelianSector>(
        a: &AsyncArray<T, S>,
    ) -> Result<Option<AsyncArray<T, S>>, Error> {
        with_absent_as_zeros(a)
    }

    fn svd_sector<S: AbelianSector>(
        a: &AsyncArray<T, S>,
        c: usize,
        out: &Async<HostSvd<T>>,
    ) -> Result<(), Error> {
        use crate::view::Coalesce;
        let view = a.sector(c)?;
        let info = SectorInfo::new("SVD", a.structure().sectors()[c].sector());
        Runtime::current().schedule_named(
            SVD_TASK,
            (view.read(), out.overwrite()),
            move |(m, o)| {
                let shape = (m.nrows(), m.ncols());
                info.check_finite(m, shape, "the sector matrix")?;
                let svd = m.thin_svd().map_err(|_| {
                    kernel_error(Error::NoConvergence {
                        what: "SVD",
                        sector: info.sector.clone(),
                        rows: shape.0,
                        cols: shape.1,
                    })
                })?;
                o.s = svd.S().column_vector().iter().map(|&x| re(x)).collect();
                info.check_values(&o.s, shape, "singular value")?;
                info.check_finite(svd.U(), shape, "U")?;
                info.check_finite(svd.V(), shape, "V")?;
                o.u = svd.U().to_owned();
                o.vt = svd.V().adjoint().to_owned();
                Ok(())
            },
        )?;
        Ok(())
    }

    fn singular_values(part: &HostSvd<T>) -> &[f64] {
        &part.s
    }

    fn keep_svd<S: AbelianSector>(
        part: &Async<HostSvd<T>>,
        k: usize,
        u: &AsyncArray<T, S>,
        vt: &AsyncArray<T, S>,
        label: &S,
    ) -> Result<(), Error> {
        let (uc, vc) = (factor_sector(u, label)?, factor_sector(vt, label)?);
        Runtime::current().schedule_named(
            "coalesce.svd.keep",
            (part.read(), uc.overwrite(), vc.overwrite()),
            move |(p, mut uc, mut vc)| {
                uc.copy_from(p.u.as_ref().subcols(0, k));
                vc.copy_from(p.vt.as_ref().subrows(0, k));
                Ok(())
            },
        )?;
        Ok(())
    }

    fn qr_sector<S: AbelianSector>(
        a: &AsyncArray<T, S>,
        c: usize,
        lq: bool,
        left: &AsyncArray<T, S>,
        right: &AsyncArray<T, S>,
    ) -> Result<(), Error> {
        use crate::view::Coalesce;
        let view = a.sector(c)?;
        let label = a.structure().sectors()[c].sector();
        let (lc, rc) = (factor_sector(left, label)?, factor_sector(right, label)?);
        let rt = Runtime::current();
        let access = (view.read(), lc.overwrite(), rc.overwrite());
        if !lq {
            let info = SectorInfo::new("QR", label);
            rt.schedule_named("coalesce.qr", access, move |(m, mut qc, mut rc)| {
                let shape = (m.nrows(), m.ncols());
                info.check_finite(m, shape, "the sector matrix")?;
                let f = m.qr();
                let (q, r) = (f.compute_thin_Q(), f.thin_R());
                info.check_finite(r, shape, "R")?;
                info.check_finite(q.as_ref(), shape, "Q")?;
                qc.copy_from(q);
                rc.copy_from(r);
                Ok(())
            })?;
        } else {
            let info = SectorInfo::new("LQ", label);
            rt.schedule_named("coalesce.lq", access, move |(m, mut lc, mut qc)| {
                let shape = (m.nrows(), m.ncols());
                info.check_finite(m, shape, "the sector matrix")?;
                let f = m.adjoint().qr();
                let (q, r) = (f.compute_thin_Q(), f.thin_R());
                info.check_finite(r.transpose(), shape, "L")?;
                info.check_finite(q.as_ref().transpose(), shape, "Q")?;
                lc.copy_from(r.adjoint());
                qc.copy_from(q.adjoint());
                Ok(())
            })?;
        }
        Ok(())
    }

    fn eigh_sector<S: AbelianSector>(
        a: &AsyncArray<T, S>,
        c: usize,
        vectors: &AsyncArray<T, S>,
        values: &AsyncArray<Real<T>, S>,
    ) -> Result<(), Error> {
        use crate::view::Coalesce;
        let view = a.sector(c)?;
        let label = a.structure().sectors()[c].sector();
        let (vc, dc) = (
            factor_sector(vectors, label)?,
            factor_sector(values, label)?,
        );
        let info = SectorInfo::new("Hermitian eigendecomposition", label);
        Runtime::current().schedule_named(
            "coalesce.eigh",
            (view.read(), vc.overwrite(), dc.overwrite()),
            move |(m, mut vc, mut dc)| {
                let shape = (m.nrows(), m.ncols());
                info.check_finite(m, shape, "the sector matrix")?;
                let e = m.self_adjoint_eigen(Side::Lower).map_err(|_| {
                    kernel_error(Error::NoConvergence {
                        what: info.operation,
                        sector: info.sector.clone(),
                        rows: shape.0,
                        cols: shape.1,
                    })
                })?;
                let values: Vec<f64> = e.S().column_vector().iter().map(|&x| re(x)).collect();
                info.check_values(&values, shape, "eigenvalue")?;
                info.check_finite(e.U(), shape, "the eigenvectors")?;
                vc.copy_from(e.U());
                dc.fill(Real::<T>::ZERO);
                for (j, &x) in values.iter().enumerate() {
                    dc[(j, j)] = Real::<T>::from_f64(x);
                }
                Ok(())
            },
        )?;
        Ok(())
    }
}
