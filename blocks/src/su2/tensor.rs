//! SU(2)-symmetric tensors: reduced blocks in one allocation, their dense forms, and leg
//! permutations through recoupling transformers.
//!
//! Owns: [`Su2Tensor`] (an [`Su2Structure`] and its reduced data, an abelian
//! [`AsyncArray`] over the structure's matrix form), its dense expansion and projection
//! ([`to_dense`](Su2Tensor::to_dense), [`from_dense`](Su2Tensor::from_dense)), its norm with
//! the quantum dimensions, and [`permuted`](Su2Tensor::permuted). Invariants:
//!
//! - The data's structure is the structure's [`matrix`](Su2Structure::matrix): block `i` is
//!   the reduced block of one (coupled spin, tree pair), with its own hazard record; every
//!   operation is tasks on those records, so programs keep their sequential meaning.
//! - The dense tensor is `sum over blocks of X (x) (s t^T)` with `epsilon^T` undone on the
//!   flipped legs (see [`super::recouple`]); a permutation is exact on it.
//! - A permutation moves each segment tuple's blocks to the permuted tuple's,
//!   `Y_o = sum_i W[o, i] P(X_i)`, with `W` the cached recoupling and `P` the permutation of
//!   the multiplicity axes, as planned by [`super::permute`].

use super::permute::PermutePlan;
use super::recouple::{basis_dense, flip_axis};
use super::structure::{Su2Label, Su2Leg, Su2Structure, local_basis};
use crate::error::Error;
use crate::tensor::AsyncArray;
use std::sync::Arc;
use tessera_backends::Scalar;

/// An SU(2)-symmetric tensor map: an [`Su2Structure`] and one reduced block per coupled spin
/// and tree pair, all in one allocation with one hazard record per block.
///
/// ```
/// use tessera_blocks::Direction;
/// use tessera_blocks::su2::{Su2Leg, Su2Structure, Su2Tensor};
///
/// let v = Su2Leg::new(Direction::In, [(0, 2), (1, 1), (2, 1)])?;
/// let s = Su2Structure::new(vec![v.clone(), v.clone(), v.dual()], 2)?;
/// let t = Su2Tensor::<f64>::random(s, 7)?;
/// // Exchange the two codomain legs: exact on the dense tensor.
/// let u = t.permuted(&[1, 0, 2], 2)?;
/// let (a, b) = (t.to_dense()?, u.to_dense()?);
/// let n = v.dim(); // 2 + 2 + 3
/// for (i, j, k) in [(0, 3, 4), (5, 2, 6), (6, 4, 2)] {
///     assert!((a[i + n * (j + n * k)] - b[j + n * (i + n * k)]).abs() < 1e-12);
/// }
/// # Ok::<(), tessera_blocks::Error>(())
/// ```
pub struct Su2Tensor<T: Scalar> {
    structure: Arc<Su2Structure>,
    data: AsyncArray<T, Su2Label>,
}

impl<T: Scalar> std::fmt::Debug for Su2Tensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Su2Tensor")
            .field("structure", &self.structure.summary())
            .finish_non_exhaustive()
    }
}

/// The coefficient `w` as a scalar of `T`.
fn real<T: Scalar<Real = f64>>(w: f64) -> T {
    T::from_real(w)
}

impl<T: Scalar<Real = f64>> Su2Tensor<T> {
    /// A tensor of zeros.
    ///
    /// # Errors
    ///
    /// The allocation errors of [`AsyncArray::try_zeros`].
    pub fn zeros(structure: impl Into<Arc<Su2Structure>>) -> Result<Self, Error> {
        let structure = structure.into();
        let data = AsyncArray::try_zeros(Arc::clone(structure.matrix()))?;
        Ok(Self { structure, data })
    }

    /// A tensor of seeded random reduced blocks (uniform in `[-1, 1)`, as
    /// [`AsyncArray::random`]).
    ///
    /// # Errors
    ///
    /// The allocation errors of [`AsyncArray::try_random`].
    pub fn random(structure: impl Into<Arc<Su2Structure>>, seed: u64) -> Result<Self, Error> {
        let structure = structure.into();
        let data = AsyncArray::try_random(Arc::clone(structure.matrix()), seed)?;
        Ok(Self { structure, data })
    }

    /// A tensor over `structure` with reduced data `data`.
    ///
    /// # Errors
    ///
    /// [`Error::StructureMismatch`] when `data` is not over the structure's matrix form.
    pub fn from_data(
        structure: impl Into<Arc<Su2Structure>>,
        data: AsyncArray<T, Su2Label>,
    ) -> Result<Self, Error> {
        let structure = structure.into();
        let given: &crate::structure::BlockStructure<Su2Label> = data.structure();
        if given != structure.matrix().as_ref() {
            return Err(Error::StructureMismatch {
                expected: structure.matrix().summary(),
                given: data.structure().summary(),
            });
        }
        Ok(Self { structure, data })
    }

    /// The structure.
    pub fn structure(&self) -> &Arc<Su2Structure> {
        &self.structure
    }

    /// The reduced data: an abelian tensor over the structure's matrix form, whose blocks are
    /// the reduced blocks (and whose coupled sector [`Su2Label`] `(2c, q)` is the reduced
    /// matrix of spin `c` and charge `q`).
    pub fn data(&self) -> &AsyncArray<T, Su2Label> {
        &self.data
    }

    /// The reduced data, by value.
    pub fn into_data(self) -> AsyncArray<T, Su2Label> {
        self.data
    }

    /// The dense tensor, column-major over the legs (codomain then domain; see [`Su2Leg`]
    /// for the order within a leg). Waits for the tasks that write the data.
    ///
    /// # Errors
    ///
    /// [`Error::Overflow`] when the dense size overflows; a runtime error when the data was
    /// poisoned.
    pub fn to_dense(&self) -> Result<Vec<T>, Error> {
        let s = &*self.structure;
        let dims = s.dense_dims();
        let len = dense_len(&dims)?;
        let blocks = self.data.to_blocks()?;
        let mut stored = vec![T::ZERO; len];
        for_each_term(s, &dims, |id, _, d, b, x| {
            stored[d] += blocks[id][x] * real::<T>(b);
        });
        // Undo the flip of the flipped legs: `D = epsilon^T S` on each.
        for i in (0..dims.len()).filter(|&i| s.flipped(i)) {
            stored = flip_axis(&stored, &dims, i, s.legs()[i].sectors(), true);
        }
        Ok(stored)
    }

    /// The tensor of `structure` closest to `dense` (column-major, as
    /// [`to_dense`](Self::to_dense) gives it): its projection onto the symmetric tensors,
    /// exact for a symmetric `dense`.
    ///
    /// # Errors
    ///
    /// [`Error::DataLength`] when `dense` has the wrong length; the allocation errors.
    pub fn from_dense(structure: impl Into<Arc<Su2Structure>>, dense: &[T]) -> Result<Self, Error> {
        let structure = structure.into();
        let s = &*structure;
        let dims = s.dense_dims();
        let len = dense_len(&dims)?;
        if dense.len() != len {
            return Err(Error::DataLength {
                what: format!("the dense form of {}", s.summary()),
                expected: len,
                given: dense.len(),
            });
        }
        // The stored form: `S = epsilon D` on each flipped leg.
        let mut stored = dense.to_vec();
        for i in (0..dims.len()).filter(|&i| s.flipped(i)) {
            stored = flip_axis(&stored, &dims, i, s.legs()[i].sectors(), false);
        }
        let matrix = s.matrix();
        let mut blocks: Vec<Vec<T>> = matrix.blocks().map(|b| vec![T::ZERO; b.len()]).collect();
        for_each_term(s, &dims, |id, c, d, b, x| {
            blocks[id][x] += stored[d] * real::<T>(b * (1.0 / f64::from(c + 1)));
        });
        let data = AsyncArray::from_blocks(Arc::clone(matrix), &blocks)?;
        Ok(Self { structure, data })
    }

    /// The Frobenius norm of the dense tensor: `sqrt(sum_c (2c + 1) |X_c|^2)` over the
    /// reduced blocks. Waits for the tasks that write the data.
    ///
    /// # Errors
    ///
    /// A runtime error when the data was poisoned.
    pub fn norm(&self) -> Result<f64, Error> {
        let blocks = self.data.to_blocks()?;
        let mut sum = 0.0;
        for (id, b) in blocks.iter().enumerate() {
            let c = self
                .structure
                .coupled_of(id)
                .expect("a block of the structure");
            sum += f64::from(c + 1) * b.iter().map(|x| x.abs2()).sum::<f64>();
        }
        Ok(sum.sqrt())
    }

    /// The adjoint map: codomain and domain swapped (the old domain legs, in order, then
    /// the old codomain legs), every leg dualled, the dense tensor conjugated. The trees are
    /// real and a flipped leg stays flipped, so each reduced block is conjugate-transposed
    /// (the abelian adjoint of the matrix form, scheduled as tasks).
    ///
    /// # Errors
    ///
    /// Allocation and runtime errors.
    pub fn adjoint(&self) -> Result<Self, Error> {
        let s = &*self.structure;
        let legs: Vec<Su2Leg> = s
            .domain()
            .iter()
            .chain(s.codomain())
            .map(Su2Leg::dual)
            .collect();
        let target = Su2Structure::shared(legs, s.domain().len())?;
        Self::from_data(target, self.data.adjoint()?)
    }

    /// The same tensor with its legs permuted (new leg `i` is old leg `perm[i]`, with its
    /// direction) and `n_codomain` legs in the codomain. The plan (the permuted structure,
    /// the recouplings of every segment tuple, the tasks) is made once per (legs, split,
    /// permutation, new split) and cached; each task moves a run of segment tuples and
    /// waits for exactly the blocks it reads.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPermutation`], [`Error::SplitOutOfRange`]; allocation and runtime
    /// errors. Nothing is enrolled on error.
    pub fn permuted(&self, perm: &[usize], n_codomain: usize) -> Result<Self, Error> {
        check_permutation(perm, self.structure.legs().len())?;
        let plan = PermutePlan::of(&self.structure, perm, n_codomain)?;
        Ok(Self {
            data: plan.apply(&self.data)?,
            structure: Arc::clone(&plan.target),
        })
    }
}

/// Checks that `perm` permutes `0..legs`.
pub(crate) fn check_permutation(perm: &[usize], legs: usize) -> Result<(), Error> {
    let mut seen = vec![false; legs];
    let ok = perm.len() == legs
        && perm
            .iter()
            .all(|&p| p < legs && !std::mem::replace(&mut seen[p], true));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidPermutation {
            legs,
            given: perm.to_vec(),
        })
    }
}

fn dense_len(dims: &[usize]) -> Result<usize, Error> {
    dims.iter()
        .try_fold(1_usize, |a, &d| a.checked_mul(d))
        .ok_or(Error::Overflow {
            what: "the dense size",
        })
}

/// Calls `f(dense offset, basis offset, block offset)` for every element of one block: the
/// multiplicity index `a` and the multiplet index `m` of every leg.
fn for_each_element(
    s: &Su2Structure,
    segments: &[usize],
    spins: &[u32],
    degs: &[usize],
    dims: &[usize],
    mut f: impl FnMut(usize, usize, usize),
) {
    let n = spins.len();
    let md: Vec<usize> = spins.iter().map(|&j| j as usize + 1).collect();
    let base: Vec<usize> = segments
        .iter()
        .zip(s.legs())
        .map(|(&seg, l)| l.dense_offset(seg))
        .collect();
    let mut dstride = vec![1_usize; n];
    let mut bstride = vec![1_usize; n];
    let mut xstride = vec![1_usize; n];
    for i in 1..n {
        dstride[i] = dstride[i - 1] * dims[i - 1];
        bstride[i] = bstride[i - 1] * md[i - 1];
        xstride[i] = xstride[i - 1] * degs[i - 1];
    }
    // Odometer over (a_i, m_i) for every leg, m fastest.
    let (mut a, mut m) = (vec![0_usize; n], vec![0_usize; n]);
    loop {
        let mut d = 0;
        let (mut bo, mut xo) = (0, 0);
        for i in 0..n {
            d += (base[i] + a[i] * md[i] + m[i]) * dstride[i];
            bo += m[i] * bstride[i];
            xo += a[i] * xstride[i];
        }
        f(d, bo, xo);
        let mut i = 0;
        loop {
            if i == n {
                return;
            }
            m[i] += 1;
            if m[i] < md[i] {
                break;
            }
            m[i] = 0;
            a[i] += 1;
            if a[i] < degs[i] {
                break;
            }
            a[i] = 0;
            i += 1;
        }
    }
}

/// Calls `f(block id, 2c, dense offset, basis value, block offset)` for every element of
/// every block where its basis element's dense form is nonzero: the dense tensor (stored
/// form) is `sum f's block value times basis value` at the dense offset.
fn for_each_term(
    s: &Su2Structure,
    dims: &[usize],
    mut f: impl FnMut(usize, u32, usize, f64, usize),
) {
    for g in s.groups() {
        let (spins, degs) = (s.spins(&g.segments), s.degs(&g.segments));
        let (cod, dom) = spins.split_at(s.n_codomain());
        for (e, &id) in local_basis(cod, dom).iter().zip(&g.blocks) {
            let b = basis_dense(cod, dom, e);
            for_each_element(s, &g.segments, &spins, &degs, dims, |d, bo, xo| {
                if b[bo] != 0.0 {
                    f(id, e.0, d, b[bo], xo);
                }
            });
        }
    }
}
