//! ndarray interop (feature `ndarray`): a tensor to and from a dense [`ArrayD`], and its
//! blocks as [`ArrayViewD`]s borrowed from its storage, without copying.
//!
//! Owns the conversion between Tessera's column-major dense layout (first leg fastest) and
//! ndarray's arrays, whose logical index is the same `(i_0, i_1, ...)` whatever their memory
//! order. Invariant: `from_ndarray(s, &to_ndarray(a)?.view())` equals `a`, and a block view
//! lives only while the blocks are held for reading (no write can run under it).

use crate::Error;
use ndarray::{ArrayD, ArrayViewD, IxDyn, ShapeBuilder};
use std::sync::Arc;
use tessera_backends::Scalar;
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure};

fn blocks_err(source: tessera_blocks::Error) -> Error {
    Error::Blocks {
        name: "(ndarray)".to_owned(),
        source,
    }
}

/// The dense tensor as an `ArrayD` (one axis per leg, Fortran memory order), after waiting
/// for the blocks' pending writes.
///
/// # Errors
///
/// The errors of [`AsyncArray::to_dense`] as [`Error::Blocks`].
pub fn to_ndarray<T: Scalar, S: AbelianSector>(a: &AsyncArray<T, S>) -> Result<ArrayD<T>, Error> {
    let dims: Vec<usize> = a.structure().legs().iter().map(|l| l.dim()).collect();
    let dense = a.to_dense().map_err(blocks_err)?;
    Ok(ArrayD::from_shape_vec(IxDyn(&dims).f(), dense)
        .expect("to_dense returns the product of the leg dimensions"))
}

/// A tensor of `structure` from a dense array of any memory order.
///
/// # Errors
///
/// [`Error::Shape`] when the array's shape is not the legs' dimensions; the errors of
/// [`AsyncArray::from_dense`] (an element outside every block that is not zero) as
/// [`Error::Blocks`].
pub fn from_ndarray<T: Scalar, S: AbelianSector>(
    structure: impl Into<Arc<BlockStructure<S>>>,
    array: &ArrayViewD<'_, T>,
) -> Result<AsyncArray<T, S>, Error> {
    let structure = structure.into();
    let dims: Vec<usize> = structure.legs().iter().map(|l| l.dim()).collect();
    if array.shape() != dims.as_slice() {
        return Err(Error::Shape {
            name: "the dense array".to_owned(),
            expected: dims,
            found: array.shape().to_vec(),
        });
    }
    // The transpose's logical (row-major) order is the original's column-major order.
    let dense: Vec<T> = array.t().iter().copied().collect();
    AsyncArray::from_dense(structure, &dense).map_err(blocks_err)
}

/// Calls `f` with every block (in block order) as an `ArrayViewD` of its shape, borrowed from
/// the tensor's storage: no copy. The blocks are held for reading meanwhile (this waits for
/// their pending writes; writes enrolled later wait for `f`).
///
/// # Errors
///
/// [`Error::Task`] for a poisoned block.
pub fn with_block_views<T: Scalar, S: AbelianSector, R>(
    a: &AsyncArray<T, S>,
    f: impl FnOnce(&[ArrayViewD<'_, T>]) -> R,
) -> Result<R, Error> {
    Ok(tessera_core::host(a.read(), |views| {
        let arrays: Vec<ArrayViewD<'_, T>> = views
            .iter()
            .map(|v| {
                let strides: Vec<usize> = v.strides().iter().map(|&s| s as usize).collect();
                let shape = IxDyn(v.dims()).strides(IxDyn(&strides));
                // SAFETY: `v` views a block of the tensor's allocation: every element
                // `ptr + sum(i_k * strides[k])` for `i` inside `dims` is in bounds and
                // initialised, and the read access held by `host` for the whole closure keeps
                // every writer out while the views (which do not outlive the closure) exist.
                // Strides are non-negative element counts, as ndarray takes them.
                unsafe { ArrayViewD::from_shape_ptr(shape, v.as_ptr()) }
            })
            .collect();
        f(&arrays)
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_complex::Complex64;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use tessera_blocks::testing::{random_mask, random_structure};
    use tessera_blocks::{Product, U1, Z2};

    #[test]
    fn dense_round_trip_and_block_views_match_to_blocks() {
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        for k in 0..20 {
            let s = random_structure::<Product<U1, Z2>>(&mut rng);
            let s = s
                .with_present(&random_mask(&mut rng, s.num_allowed()))
                .unwrap();
            if s.dense_len().map_or(true, |n| n > 1 << 16) {
                continue;
            }
            let a = AsyncArray::<Complex64, _>::random(s.clone(), k);
            let d = to_ndarray(&a).unwrap();
            let dense = a.to_dense().unwrap();
            // Element (i_0, i_1, ...) of the array is the column-major dense element.
            let mut at = 0;
            let mut stride = 1;
            let idx: Vec<usize> = d.shape().iter().map(|&n| n.saturating_sub(1)).collect();
            for (axis, &i) in idx.iter().enumerate() {
                at += i * stride;
                stride *= d.shape()[axis];
            }
            if !dense.is_empty() {
                assert_eq!(d[IxDyn(&idx)], dense[at]);
            }
            let c_order = d.as_standard_layout().into_owned();
            let b = from_ndarray(s.clone(), &c_order.view()).unwrap();
            assert_eq!(b.to_dense().unwrap(), dense);
            let blocks = a.to_blocks().unwrap();
            with_block_views(&a, |views| {
                assert_eq!(views.len(), blocks.len());
                for (v, b) in views.iter().zip(&blocks) {
                    let col_major: Vec<Complex64> = v.t().iter().copied().collect();
                    assert_eq!(&col_major, b);
                }
            })
            .unwrap();
        }
        let s = random_structure::<U1>(&mut rng);
        let wrong = ArrayD::<f64>::zeros(IxDyn(&[7, 7, 7, 7, 7]));
        assert!(matches!(
            from_ndarray::<f64, U1>(s, &wrong.view()),
            Err(Error::Shape { .. })
        ));
    }
}
