//! Strided views as faer matrices.
//!
//! Owns: the one place where a resolved [`StridedRef`] / [`StridedMut`] becomes a faer
//! [`MatRef`] / [`MatMut`], by folding its first `k` axes into rows and the rest into columns.
//! Invariant: a matrix is handed out only when the fold is exact (every folded axis steps by
//! the previous axis's stride times its extent), so the matrix reaches exactly the view's
//! elements, no more; otherwise the caller gets `None` and must copy.

use faer::{MatMut, MatRef};
use tessera_core::{StridedMut, StridedRef};

/// Folds `dims`/`strides` into one axis: its extent and its stride, when the axes step
/// uniformly (axes of extent 1 may have any stride).
fn fold(dims: &[usize], strides: &[isize]) -> Option<(usize, isize)> {
    let n: usize = dims.iter().product();
    if n == 0 {
        return Some((0, 1));
    }
    let mut stride = None;
    let mut next = 0_isize;
    for (&d, &s) in dims.iter().zip(strides).filter(|(d, _)| **d > 1) {
        match stride {
            None => stride = Some(s),
            Some(_) if s != next => return None,
            Some(_) => {}
        }
        next = s.checked_mul(d as isize)?;
    }
    Some((n, stride.unwrap_or(1)))
}

/// The row and column extents and strides of a view folded at axis `k`.
fn split(dims: &[usize], strides: &[isize], k: usize) -> Option<(usize, usize, isize, isize)> {
    if k > dims.len() {
        return None;
    }
    let (rows, rs) = fold(&dims[..k], &strides[..k])?;
    let (cols, cs) = fold(&dims[k..], &strides[k..])?;
    Some((rows, cols, rs, cs))
}

/// The view as a matrix whose rows are axes `0..k` (first fastest) and whose columns are
/// axes `k..`, or `None` when those axes do not fold into one stride each.
///
/// ```
/// use tessera_backends::cpu::matrix_ref;
/// use tessera_core::SharedBuffer;
///
/// let buf = SharedBuffer::from_fn(6, |i| i as f64);
/// // SAFETY (of the example): nothing else accesses `buf`.
/// let view = unsafe { buf.view(0, &[2, 3], &[1, 2]) };
/// let m = matrix_ref(&view, 1).unwrap();
/// assert_eq!((m.nrows(), m.ncols()), (2, 3));
/// assert_eq!(m[(1, 2)], 5.0);
/// ```
pub fn matrix_ref<'a, T: Copy>(view: &StridedRef<'a, T>, k: usize) -> Option<MatRef<'a, T>> {
    let (rows, cols, rs, cs) = split(view.dims(), view.strides(), k)?;
    // SAFETY: the fold is exact, so element (i, j) of the matrix is the view's element at the
    // multi-index that (i, j) unfolds to, which lies inside the view's checked extent; the
    // view is shared and valid for 'a, so the matrix may be too.
    Some(unsafe { MatRef::from_raw_parts(view.as_ptr(), rows, cols, rs, cs) })
}

/// The exclusive view as a matrix (see [`matrix_ref`]); it borrows the view.
pub fn matrix_mut<'b, T: Copy>(view: &'b mut StridedMut<'_, T>, k: usize) -> Option<MatMut<'b, T>> {
    let (rows, cols, rs, cs) = split(view.dims(), view.strides(), k)?;
    // SAFETY: as in `matrix_ref`; the view is exclusive and maps distinct indices to distinct
    // elements (its constructor's duty), so is the matrix, and it borrows the view mutably for
    // as long as it lives.
    Some(unsafe { MatMut::from_raw_parts_mut(view.as_mut_ptr(), rows, cols, rs, cs) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::SharedBuffer;

    #[test]
    fn folds_exact_strides_only() {
        assert_eq!(fold(&[2, 3], &[1, 2]), Some((6, 1)));
        assert_eq!(fold(&[2, 1, 3], &[5, 99, 10]), Some((6, 5)));
        assert_eq!(fold(&[2, 3], &[1, 3]), None);
        assert_eq!(fold(&[], &[]), Some((1, 1)));
        assert_eq!(fold(&[4, 0], &[1, 7]), Some((0, 1)));
        assert_eq!(split(&[2, 3], &[1, 2], 3), None);
    }

    #[test]
    fn matrix_views_match_the_strided_view() {
        // A 2x2x3 tensor inside a buffer with a leading dimension of 5 for the last axis.
        let buf = SharedBuffer::from_fn(20, |i| i as f64);
        // SAFETY: nothing else accesses `buf` in this test.
        let view = unsafe { buf.view(1, &[2, 2, 3], &[1, 2, 5]) };
        let m = matrix_ref(&view, 2).unwrap();
        assert_eq!((m.nrows(), m.ncols()), (4, 3));
        for i in 0..2 {
            for j in 0..2 {
                for c in 0..3 {
                    assert_eq!(Some(m[(i + 2 * j, c)]), view.get(&[i, j, c]));
                }
            }
        }
        // Axes 1 and 2 do not fold (2 * 2 != 5).
        assert!(matrix_ref(&view, 1).is_none());
        // SAFETY: nothing else accesses `buf` in this test.
        let mut out = unsafe { buf.view_mut(0, &[4, 5], &[1, 4]) };
        let mut mm = matrix_mut(&mut out, 1).unwrap();
        mm[(3, 4)] = -1.0;
        assert_eq!(out.as_ref().get(&[3, 4]), Some(-1.0));
    }
}
