//! Where a column-major matrix lies in a flat allocation: the one matrix-layout type of every
//! layer (a coalesced sector view on the host, a cuBLAS operand on a device, a planned GEMM).
//!
//! Owns: [`MatLayout`]. Invariant: a layout made by [`MatLayout::inside`] lies within the
//! allocation length it was checked against and its columns do not overlap (`ld >= rows`,
//! or at most one column), so distinct indices reach distinct elements; a layout built
//! field by field is checked by whoever resolves it (the CUDA GEMM checks before enqueuing).

use std::ops::Range;

/// Where a column-major matrix lies in a buffer: `rows x cols` from element `offset`, with
/// consecutive columns `ld` elements apart (BLAS's leading dimension).
///
/// ```
/// use tessera_backends::MatLayout;
/// let m = MatLayout::inside(12, 2, 2, 3, 3).unwrap(); // a 2 x 3 matrix in a 3-row frame
/// assert_eq!(m.extent(), Some(8));
/// assert_eq!(m.runs().collect::<Vec<_>>(), [2..4, 5..7, 8..10]);
/// assert!(MatLayout::inside(12, 5, 2, 3, 3).is_none()); // element (1, 2) would be 12
/// assert!(MatLayout::inside(12, 0, 3, 2, 2).is_none()); // columns would overlap
/// # Ok::<(), ()>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatLayout {
    /// The element the matrix starts at.
    pub offset: usize,
    /// Rows of the stored matrix.
    pub rows: usize,
    /// Columns of the stored matrix.
    pub cols: usize,
    /// Elements between consecutive columns; at least `max(1, rows)` for a valid layout.
    pub ld: usize,
}

impl MatLayout {
    /// A dense `rows x cols` matrix from element 0 (`ld = max(1, rows)`).
    pub fn contiguous(rows: usize, cols: usize) -> Self {
        Self {
            offset: 0,
            rows,
            cols,
            ld: rows.max(1),
        }
    }

    /// The layout, or `None` when it does not lie inside the first `len` elements of an
    /// allocation or its columns would overlap (`ld < rows` with more than one column). An
    /// empty matrix needs only `offset <= len`.
    pub fn inside(len: usize, offset: usize, rows: usize, cols: usize, ld: usize) -> Option<Self> {
        let layout = Self {
            offset,
            rows,
            cols,
            ld,
        };
        let fits = layout
            .extent()
            .and_then(|extent| offset.checked_add(extent))
            .is_some_and(|end| end <= len);
        (fits && (ld >= rows || cols <= 1)).then_some(layout)
    }

    /// The elements the matrix spans from `offset`: `(cols - 1) * ld + rows`, or 0 for an
    /// empty matrix; `None` on overflow.
    pub fn extent(&self) -> Option<usize> {
        if self.rows == 0 || self.cols == 0 {
            return Some(0);
        }
        (self.cols - 1).checked_mul(self.ld)?.checked_add(self.rows)
    }

    /// The contiguous element ranges the matrix covers, in order: one for a matrix whose
    /// columns abut (`ld == rows`), else one per column; none for an empty matrix.
    pub fn runs(&self) -> impl Iterator<Item = Range<usize>> + use<> {
        let (count, len, step) = match (self.rows, self.cols) {
            (0, _) | (_, 0) => (0, 0, 0),
            _ if self.ld == self.rows => (1, self.rows * self.cols, 0),
            _ => (self.cols, self.rows, self.ld),
        };
        let offset = self.offset;
        (0..count).map(move |j| offset + j * step..offset + j * step + len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_accepts_exactly_the_layouts_within_the_allocation() {
        // Exhaustive over small shapes: accepted iff every element index is below `len` and
        // distinct indices reach distinct elements.
        for len in 0..10 {
            for offset in 0..11 {
                for rows in 0..4 {
                    for cols in 0..4 {
                        for ld in 0..5 {
                            let elements: Vec<usize> = (0..cols)
                                .flat_map(|j| (0..rows).map(move |i| offset + i + j * ld))
                                .collect();
                            let mut distinct = elements.clone();
                            distinct.sort_unstable();
                            distinct.dedup();
                            let ok = elements.iter().all(|&e| e < len)
                                && distinct.len() == elements.len()
                                && offset <= len;
                            let got = MatLayout::inside(len, offset, rows, cols, ld);
                            assert_eq!(got.is_some(), ok, "{len} {offset} {rows}x{cols} ld {ld}");
                            if let Some(m) = got {
                                let covered: Vec<usize> = m.runs().flatten().collect();
                                assert_eq!(covered, elements);
                            }
                        }
                    }
                }
            }
        }
    }
}
