//! Factorizations of device tensors (feature `cuda`): the per-sector half of [`Factorize`]
//! for `Cuda`, through cuSOLVER.
//!
//! Owns: the device implementation of [`Factorize`] and [`DeviceSvd`]. Invariants:
//!
//! - A sector's task holds the read grant of exactly that sector of the input (one flat
//!   extent: after the absent blocks are filled every sector is dense) and the write grants
//!   of exactly the factors' sectors of the same label; its dense factors live in device
//!   temporaries until they are copied into those sectors by the permute kernel.
//! - A factorization task waits for the device (cuSOLVER's `info`, and the values the host
//!   decides with), so it runs on a worker; a copy of kept factors only enqueues.
//! - The values a kernel returns are checked as on the host ([`SectorInfo::check_values`]):
//!   a NaN or an infinity fails the sector's task with [`Error::NonFinite`]. The input is not
//!   scanned element by element on the device; a non-finite input shows up in the values.

use crate::error::Error;
use crate::factor::{SectorInfo, full_structure, kernel_error};
use crate::kernels::{Factorize, SVD_TASK};
use tessera_backends::cuda::{Cuda, CudaError, CudaScalar, DenseFactors, with_buffers};
use tessera_backends::{Field, MatLayout, Placement, Real, Scalar};
use tessera_blocks::{AbelianSector, BlockStructure, DeviceArray, Tensor};
use tessera_core::{Async, KernelError};

/// One sector's thin SVD on a device: `U` (`m x p`) and `V` (`n x p`, not transposed) in
/// device memory, the singular values on the host.
#[derive(Debug)]
pub struct DeviceSvd<T> {
    factors: Option<DenseFactors<T>>,
}

/// The sector of a factor labelled `label` (a factor has one for every kept sector).
fn factor_sector<S: AbelianSector>(s: &BlockStructure<S>, label: &S) -> usize {
    s.sector_index(label)
        .expect("a factor has a sector for every kept sector of its input")
}

/// A device failure of sector `info`'s `operation` as the task's error: no convergence as
/// [`Error::NoConvergence`], anything else as the device's error.
fn device_error(info: &SectorInfo, shape: (usize, usize)) -> impl Fn(CudaError) -> KernelError {
    let (operation, sector) = (info.operation, info.sector.clone());
    move |e| match e {
        CudaError::NoConvergence { .. } => kernel_error(Error::NoConvergence {
            what: operation,
            sector: sector.clone(),
            rows: shape.0,
            cols: shape.1,
        }),
        e => kernel_error(Error::Blocks(tessera_blocks::Error::Cuda(e))),
    }
}

/// Copies the strided view `view` of `factor` into the matrix `dst` of `out`'s storage.
fn copy_into<T: CudaScalar>(
    factor: &tessera_backends::cuda::DeviceBuffer<T>,
    view: (usize, &[usize], &[isize]),
    out: &tessera_backends::cuda::CudaStorage<T>,
    dst: MatLayout,
) -> Result<(), CudaError> {
    with_buffers(Some(out), &[], |dev, buf, _| {
        dev.copy_factor(factor, view, buf.expect("a write was given"), dst)
    })
}

impl<T> Factorize<T> for Cuda
where
    T: Field + CudaScalar,
    Real<T>: CudaScalar,
{
    type SvdPart = DeviceSvd<T>;

    fn empty_svd() -> DeviceSvd<T> {
        DeviceSvd { factors: None }
    }

    fn fill_absent<S: AbelianSector>(
        a: &DeviceArray<T, S>,
    ) -> Result<Option<DeviceArray<T, S>>, Error> {
        match full_structure(a.structure())? {
            Some(full) => Ok(Some(a.embed(full)?)),
            None => Ok(None),
        }
    }

    fn svd_sector<S: AbelianSector>(
        a: &DeviceArray<T, S>,
        c: usize,
        out: &Async<DeviceSvd<T>>,
    ) -> Result<(), Error> {
        let m = tessera_blocks::sector_matrix(a.structure(), c);
        let info = SectorInfo::new("SVD", a.structure().sectors()[c].sector());
        let access = (a.sectors_region(c..c + 1)?.into_read(), out.overwrite());
        <Cuda as Placement<T>>::schedule(SVD_TASK, 0, 1, true, access, move |(x, o)| {
            let shape = (m.rows, m.cols);
            let f = with_buffers(None, &[x.storage()], |dev, _, bufs| dev.svd(bufs[0], m))
                .map_err(device_error(&info, shape))?;
            info.check_values(&f.values, shape, "singular value")?;
            o.factors = Some(f);
            Ok(())
        })?;
        Ok(())
    }

    fn singular_values(part: &DeviceSvd<T>) -> &[f64] {
        part.factors.as_ref().map_or(&[], |f| &f.values[..])
    }

    fn keep_svd<S: AbelianSector>(
        part: &Async<DeviceSvd<T>>,
        k: usize,
        u: &DeviceArray<T, S>,
        vt: &DeviceArray<T, S>,
        label: &S,
    ) -> Result<(), Error> {
        let (cu, cv) = (
            factor_sector(u.structure(), label),
            factor_sector(vt.structure(), label),
        );
        let (mu, mv) = (
            tessera_blocks::sector_matrix(u.structure(), cu),
            tessera_blocks::sector_matrix(vt.structure(), cv),
        );
        let access = (
            part.read(),
            u.sectors_region(cu..cu + 1)?.into_overwrite(),
            vt.sectors_region(cv..cv + 1)?.into_overwrite(),
        );
        <Cuda as Placement<T>>::schedule(
            "coalesce.svd.keep",
            0,
            1,
            false,
            access,
            move |(p, uc, vc)| {
                let f = p.factors.as_ref().ok_or("the sector's SVD ran")?;
                let ((ub, m, _), (vb, n, _)) = (&f.first, &f.second);
                let (m, n) = (*m as isize, *n as isize);
                // U's first k columns; V†'s first k rows are V's first k columns, transposed.
                copy_into(ub, (0, &[mu.rows, k], &[1, m]), uc.storage(), mu)?;
                copy_into(vb, (0, &[k, mv.cols], &[n, 1]), vc.storage(), mv)?;
                Ok(())
            },
        )?;
        Ok(())
    }

    fn qr_sector<S: AbelianSector>(
        a: &DeviceArray<T, S>,
        c: usize,
        lq: bool,
        left: &DeviceArray<T, S>,
        right: &DeviceArray<T, S>,
    ) -> Result<(), Error> {
        let m = tessera_blocks::sector_matrix(a.structure(), c);
        let label = a.structure().sectors()[c].sector();
        let (cl, cr) = (
            factor_sector(left.structure(), label),
            factor_sector(right.structure(), label),
        );
        let (ml, mr) = (
            tessera_blocks::sector_matrix(left.structure(), cl),
            tessera_blocks::sector_matrix(right.structure(), cr),
        );
        let info = SectorInfo::new(if lq { "LQ" } else { "QR" }, label);
        let access = (
            a.sectors_region(c..c + 1)?.into_read(),
            left.sectors_region(cl..cl + 1)?.into_overwrite(),
            right.sectors_region(cr..cr + 1)?.into_overwrite(),
        );
        let name = if lq { "coalesce.lq" } else { "coalesce.qr" };
        <Cuda as Placement<T>>::schedule(name, 0, 1, true, access, move |(x, lc, rc)| {
            let shape = (m.rows, m.cols);
            let error = device_error(&info, shape);
            let f = with_buffers(None, &[x.storage()], |dev, _, bufs| {
                if !lq {
                    return dev.qr(bufs[0], m);
                }
                // LQ: the QR of the transpose (real types: the adjoint).
                let mut t = dev.alloc_zeros::<T>(m.rows * m.cols)?;
                let back = MatLayout::contiguous(m.cols, m.rows);
                let view = (m.offset, &[m.cols, m.rows][..], &[m.ld as isize, 1][..]);
                dev.copy_factor(bufs[0], view, &mut t, back)?;
                dev.qr(&t, back)
            })
            .map_err(&error)?;
            let ((qb, qm, p), (rb, _, _)) = (&f.first, &f.second);
            let (qm, p) = (*qm as isize, *p as isize);
            if !lq {
                copy_into(qb, (0, &[ml.rows, ml.cols], &[1, qm]), lc.storage(), ml)
                    .map_err(&error)?;
                copy_into(rb, (0, &[mr.rows, mr.cols], &[1, p]), rc.storage(), mr)
                    .map_err(&error)?;
            } else {
                // L = R'^T (m x p) and Q = Q'^T (p x n), from the QR of A^T.
                copy_into(rb, (0, &[ml.rows, ml.cols], &[p, 1]), lc.storage(), ml)
                    .map_err(&error)?;
                copy_into(qb, (0, &[mr.rows, mr.cols], &[qm, 1]), rc.storage(), mr)
                    .map_err(&error)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    fn eigh_sector<S: AbelianSector>(
        a: &DeviceArray<T, S>,
        c: usize,
        vectors: &DeviceArray<T, S>,
        values: &Tensor<Real<T>, S, Cuda>,
    ) -> Result<(), Error> {
        let m = tessera_blocks::sector_matrix(a.structure(), c);
        let label = a.structure().sectors()[c].sector();
        let (cv, cd) = (
            factor_sector(vectors.structure(), label),
            factor_sector(values.structure(), label),
        );
        let (mv, md) = (
            tessera_blocks::sector_matrix(vectors.structure(), cv),
            tessera_blocks::sector_matrix(values.structure(), cd),
        );
        let info = SectorInfo::new("Hermitian eigendecomposition", label);
        let access = (
            a.sectors_region(c..c + 1)?.into_read(),
            vectors.sectors_region(cv..cv + 1)?.into_overwrite(),
            values.sectors_region(cd..cd + 1)?.into_overwrite(),
        );
        <Cuda as Placement<T>>::schedule(
            "coalesce.eigh",
            0,
            1,
            true,
            access,
            move |(x, vc, dc)| {
                let shape = (m.rows, m.cols);
                let error = device_error(&info, shape);
                let f = with_buffers(None, &[x.storage()], |dev, _, bufs| dev.eigh(bufs[0], m))
                    .map_err(&error)?;
                info.check_values(&f.values, shape, "eigenvalue")?;
                let (vb, n, _) = &f.first;
                copy_into(
                    vb,
                    (0, &[mv.rows, mv.cols], &[1, *n as isize]),
                    vc.storage(),
                    mv,
                )
                .map_err(&error)?;
                // The eigenvalues onto the diagonal: a row of n elements, n + 1 apart.
                let host: Vec<Real<T>> = f.values.iter().map(|&v| Real::<T>::from_f64(v)).collect();
                let n = host.len();
                with_buffers(Some(dc.storage()), &[], |dev, buf, _| {
                    let staged = dev.upload(&host)?;
                    let diagonal = MatLayout {
                        offset: md.offset,
                        rows: 1,
                        cols: n,
                        ld: n + 1,
                    };
                    dev.copy_factor(
                        &staged,
                        (0, &[1, n], &[1, 1]),
                        buf.expect("a write"),
                        diagonal,
                    )
                })
                .map_err(&error)?;
                Ok(())
            },
        )?;
        Ok(())
    }
}
