//! The coupled-cluster doubles contractions that dominate CCSD, on D2h-symmetric block-sparse
//! tensors and, for reference, on the same tensors dense.
//!
//! Owns: the D2h irreps as sectors ([`D2h`], [`irrep`]), the orbital legs ([`Orbitals`]), the
//! two terms ([`Term`]: the particle-particle ladder and a particle-hole ring term) with their
//! random operands ([`Problem`]), and the dense einsum of the same tensors ([`DenseTerm`]:
//! permutations and one faer GEMM). Shared by `examples/ccsd/main.rs` (the driver) and
//! `tests/ccsd.rs`. Invariant: a [`Problem`]'s operands and output have the structures its
//! [`Term`] names over its [`Orbitals`], with totally symmetric flux, and a [`DenseTerm`] built
//! from a [`Problem`] computes the same tensor (column-major, first leg fastest, as
//! `AsyncArray::to_dense` writes it) from the operands' dense forms.
//!
//! Conventions. D2h is the product of three Z2 sectors: irrep `h` (Cotton order Ag, B1g, B2g,
//! B3g, Au, B1u, B2u, B3u) is `(Z2(h & 1), (Z2(h >> 1 & 1), Z2(h >> 2 & 1)))`, so the direct
//! product of irreps is the xor of their indices. Occupied indices are `i, j, k`, virtual
//! ones `a, b, c, d`. Lower (ket) indices of an amplitude or integral are `In` legs, upper
//! (bra) ones `Out` legs, so every contracted pair is one `In` and one `Out` leg; with Z2
//! sectors no leg order costs a sign. The amplitudes and integrals are random (uniform in
//! `[-1, 1)`, seeded), with the point-group block structure of real ones: a block is present
//! exactly when its irreps multiply to Ag. The permutational symmetries of real integrals
//! (`V(a,b,c,d) = V(b,a,d,c)`, ...) are not imposed; they do not change the work.

use std::sync::Arc;
use tessera::blocks::{AsyncArray, BlockStructure, Direction, Leg, Product, Z2};
use tessera::contract::{Contraction, Plan};
use tessera::prelude::Runtime;

/// The error type of this module: every layer's errors, boxed.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A result with [`BoxError`].
pub(crate) type Result<T> = std::result::Result<T, BoxError>;

/// D2h as the product of three Z2 sectors.
pub(crate) type D2h = Product<Z2, Product<Z2, Z2>>;
/// A real block-sparse tensor over D2h.
pub(crate) type Tensor = AsyncArray<f64, D2h>;

/// The names of the D2h irreps in Cotton order (index `h`).
pub(crate) const IRREPS: [&str; 8] = ["Ag", "B1g", "B2g", "B3g", "Au", "B1u", "B2u", "B3u"];

/// The sector of irrep `h` (`0..8`, Cotton order): its three bits as three Z2 charges.
pub(crate) fn irrep(h: usize) -> D2h {
    assert!(h < 8, "D2h has 8 irreps, not {}", h + 1);
    let bit = |k: usize| Z2::new(((h >> k) & 1) as u32);
    Product(bit(0), Product(bit(1), bit(2)))
}

/// The irrep index of a sector (the inverse of [`irrep`]).
pub(crate) fn irrep_index(s: &D2h) -> usize {
    let Product(x, Product(y, z)) = s;
    (x.value() | (y.value() << 1) | (z.value() << 2)) as usize
}

/// The occupied and virtual orbital spaces as `In` legs: one segment per irrep with at least
/// one orbital, in Cotton order.
#[derive(Clone, Debug)]
pub(crate) struct Orbitals {
    /// Occupied orbitals per irrep.
    pub(crate) occ_counts: [usize; 8],
    /// Virtual orbitals per irrep.
    pub(crate) virt_counts: [usize; 8],
    /// The occupied leg.
    pub(crate) occ: Leg<D2h>,
    /// The virtual leg.
    pub(crate) virt: Leg<D2h>,
}

impl Orbitals {
    /// The legs of `occ` and `virt` orbitals per irrep (irreps with none are left out).
    ///
    /// # Errors
    ///
    /// None for counts that fit a leg; the leg's errors otherwise.
    pub(crate) fn new(occ: [usize; 8], virt: [usize; 8]) -> Result<Self> {
        let leg = |counts: [usize; 8]| {
            Leg::new(
                Direction::In,
                (0..8)
                    .filter(|&h| counts[h] > 0)
                    .map(|h| (irrep(h), counts[h])),
            )
        };
        Ok(Self {
            occ_counts: occ,
            virt_counts: virt,
            occ: leg(occ)?,
            virt: leg(virt)?,
        })
    }

    /// All occupied orbitals.
    pub(crate) fn n_occ(&self) -> usize {
        self.occ.dim()
    }

    /// All virtual orbitals.
    pub(crate) fn n_virt(&self) -> usize {
        self.virt.dim()
    }

    /// The structure of `T2(i,j,a,b)` and of the results `R(i,j,a,b)`: `(i, j | a, b)`,
    /// occupied legs `In`, virtual `Out`, flux Ag.
    pub(crate) fn oovv(&self) -> Result<Arc<BlockStructure<D2h>>> {
        let (o, v) = (&self.occ, &self.virt);
        Ok(Arc::new(BlockStructure::new(
            [o.clone(), o.clone()],
            [v.dual(), v.dual()],
            irrep(0),
        )?))
    }

    /// The structure of `V(a,b,c,d)`, the `<cd|ab>`-type integrals of the ladder:
    /// `(a, b | c, d)`, `a, b` `In` (they meet `T2`'s `Out` legs), `c, d` `Out`, flux Ag.
    pub(crate) fn vvvv(&self) -> Result<Arc<BlockStructure<D2h>>> {
        let v = &self.virt;
        Ok(Arc::new(BlockStructure::new(
            [v.clone(), v.clone()],
            [v.dual(), v.dual()],
            irrep(0),
        )?))
    }

    /// The structure of `W(k,b,c,j)`, the `<kb|cj>`-type integrals of the ring term:
    /// `(k, b | c, j)`, `k` `Out` (it meets `T2`'s `In` leg), `b` `Out` (it is `R`'s),
    /// `c` `In` (it meets `T2`'s `Out` leg), `j` `In` (it is `R`'s), flux Ag.
    pub(crate) fn ovvo(&self) -> Result<Arc<BlockStructure<D2h>>> {
        let (o, v) = (&self.occ, &self.virt);
        Ok(Arc::new(BlockStructure::from_legs(
            vec![o.dual(), v.dual(), v.clone(), o.clone()],
            2,
            irrep(0),
        )?))
    }
}

/// One of the doubles contractions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Term {
    /// The particle-particle ladder `R(i,j,c,d) = sum_ab T2(i,j,a,b) V(a,b,c,d)`.
    Ladder,
    /// The particle-hole ring term `R(i,j,a,b) = sum_kc T2(i,k,a,c) W(k,b,c,j)`.
    Ring,
}

impl Term {
    /// Both terms, in the order the driver runs them.
    pub(crate) const ALL: [Term; 2] = [Term::Ladder, Term::Ring];

    /// The name the driver prints.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Term::Ladder => "ladder",
            Term::Ring => "ring",
        }
    }

    /// The formula, as the driver prints it.
    pub(crate) fn formula(self) -> &'static str {
        match self {
            Term::Ladder => "R(i,j,c,d) = sum_ab T2(i,j,a,b) V(a,b,c,d)",
            Term::Ring => "R(i,j,a,b) = sum_kc T2(i,k,a,c) W(k,b,c,j)",
        }
    }

    /// The einsum spec, with the output's legs in `R`'s order and split.
    pub(crate) fn spec(self) -> &'static str {
        match self {
            Term::Ladder => "ijab,abcd->ij|cd",
            Term::Ring => "ikac,kbcj->ij|ab",
        }
    }

    /// The flops of the dense einsum: `2 o^2 v^4` for the ladder, `2 o^3 v^3` for the ring.
    pub(crate) fn dense_flops(self, o: usize, v: usize) -> f64 {
        let (o, v) = (o as f64, v as f64);
        match self {
            Term::Ladder => 2.0 * o * o * v.powi(4),
            Term::Ring => 2.0 * o.powi(3) * v.powi(3),
        }
    }
}

/// One term's random operands, its contraction and the output it writes into.
pub(crate) struct Problem {
    /// The term.
    pub(crate) term: Term,
    /// `T2`.
    pub(crate) a: Tensor,
    /// `V` (ladder) or `W` (ring).
    pub(crate) b: Tensor,
    /// The contraction, by [`Term::spec`].
    pub(crate) contraction: Contraction,
    /// Its plan (cached by the structures).
    pub(crate) plan: Arc<Plan<D2h>>,
    /// The result, overwritten by every [`run`](Problem::run).
    pub(crate) out: Tensor,
}

impl Problem {
    /// The operands of `term` over `orbitals`, random from `seed` (`T2` from `seed`, the
    /// integrals from `seed + 1`), and the output's storage.
    ///
    /// # Errors
    ///
    /// The structures' and the plan's errors (none for orbitals that fit a leg).
    pub(crate) fn new(term: Term, orbitals: &Orbitals, seed: u64) -> Result<Self> {
        let a = Tensor::try_random(orbitals.oovv()?, seed)?;
        let b_structure = match term {
            Term::Ladder => orbitals.vvvv()?,
            Term::Ring => orbitals.ovvo()?,
        };
        let b = Tensor::try_random(b_structure, seed.wrapping_add(1))?;
        let contraction = Contraction::new(term.spec())?;
        let plan = contraction.plan(&a, &b)?;
        debug_assert_eq!(**plan.output(), *orbitals.oovv()?);
        let out = Tensor::try_zeros(Arc::clone(plan.output()))?;
        Ok(Self {
            term,
            a,
            b,
            contraction,
            plan,
            out,
        })
    }

    /// The block-sparse flops (`2 m n k` per block product the plan runs).
    pub(crate) fn flops(&self) -> f64 {
        self.plan.flops() as f64
    }

    /// `out <- a b` on `runtime`, waited for.
    ///
    /// # Errors
    ///
    /// The contraction's errors, a failed task's error.
    pub(crate) fn run(&self, runtime: &Runtime) -> Result<()> {
        runtime.enter(|| self.contraction.apply_into(&self.a, &self.b, &self.out))?;
        self.out.wait()?;
        Ok(())
    }
}

/// A dense tensor with four legs, column-major (first leg fastest).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Dense4 {
    /// The legs' dimensions.
    pub(crate) dims: [usize; 4],
    /// The elements.
    pub(crate) data: Vec<f64>,
}

impl Dense4 {
    /// The dense form of `x`, a four-leg tensor.
    ///
    /// # Errors
    ///
    /// `to_dense`'s errors; a tensor that does not have four legs.
    pub(crate) fn of(x: &Tensor) -> Result<Self> {
        let legs = x.structure().legs();
        if legs.len() != 4 {
            return Err(format!("expected a tensor of 4 legs, given {}", legs.len()).into());
        }
        let dims = [legs[0].dim(), legs[1].dim(), legs[2].dim(), legs[3].dim()];
        Ok(Self {
            dims,
            data: x.to_dense()?,
        })
    }

    /// `self` with its legs reordered into `out` (resized): leg `k` of `out` is leg
    /// `perm[k]` of `self`, so `out[x] = self[y]` with `y[perm[k]] = x[k]`; in parallel over
    /// `out`'s last leg.
    pub(crate) fn permute_into(&self, perm: [usize; 4], out: &mut Dense4) {
        use rayon::prelude::*;
        let mut src_strides = [0usize; 4];
        let mut s = 1;
        for (k, stride) in src_strides.iter_mut().enumerate() {
            *stride = s;
            s *= self.dims[k];
        }
        let dims = perm.map(|p| self.dims[p]);
        let strides = perm.map(|p| src_strides[p]);
        out.dims = dims;
        out.data.resize(self.data.len(), 0.0);
        let slab = dims[0] * dims[1] * dims[2];
        if slab == 0 {
            return;
        }
        let src = &self.data;
        out.data
            .par_chunks_mut(slab)
            .enumerate()
            .for_each(|(x3, chunk)| {
                let mut at = 0;
                for x2 in 0..dims[2] {
                    for x1 in 0..dims[1] {
                        let base = x3 * strides[3] + x2 * strides[2] + x1 * strides[1];
                        for x0 in 0..dims[0] {
                            chunk[at] = src[base + x0 * strides[0]];
                            at += 1;
                        }
                    }
                }
            });
    }
}

/// The dense einsum of one term on the dense forms of a [`Problem`]'s operands: the operands
/// permuted into matrix form where their leg order needs it, one faer GEMM, the product
/// permuted into `R`'s leg order where needed.
pub(crate) struct DenseTerm {
    /// The term.
    pub(crate) term: Term,
    /// Occupied orbitals.
    o: usize,
    /// Virtual orbitals.
    v: usize,
    /// `T2`, dense.
    a: Dense4,
    /// `V` or `W`, dense.
    b: Dense4,
    /// The ring term's matrix forms of `T2` and `W` and its product `P(i,a,b,j)`.
    a_matrix: Dense4,
    b_matrix: Dense4,
    product: Dense4,
    /// The result `R`, dense.
    pub(crate) out: Dense4,
}

/// `c <- a b` for column-major `a` (`m x k`) and `b` (`k x n`) in slices.
fn gemm(c: &mut [f64], a: &[f64], b: &[f64], (m, k, n): (usize, usize, usize), par: faer::Par) {
    use faer::{Accum, MatMut, MatRef};
    let a = MatRef::from_column_major_slice(a, m, k);
    let b = MatRef::from_column_major_slice(b, k, n);
    let c = MatMut::from_column_major_slice_mut(c, m, n);
    faer::linalg::matmul::matmul(c, Accum::Replace, a, b, 1.0, par);
}

impl DenseTerm {
    /// The dense forms of `problem`'s operands (waits for them).
    ///
    /// # Errors
    ///
    /// `to_dense`'s errors.
    pub(crate) fn new(problem: &Problem) -> Result<Self> {
        let a = Dense4::of(&problem.a)?;
        let b = Dense4::of(&problem.b)?;
        let (o, v) = (a.dims[0], a.dims[2]);
        let empty = || Dense4 {
            dims: [0; 4],
            data: Vec::new(),
        };
        Ok(Self {
            term: problem.term,
            o,
            v,
            a,
            b,
            a_matrix: empty(),
            b_matrix: empty(),
            product: empty(),
            out: Dense4 {
                dims: [o, o, v, v],
                data: vec![0.0; o * o * v * v],
            },
        })
    }

    /// `out <- a b`, the dense way, with faer's parallelism `par` (run it inside the
    /// runtime's pool, `Runtime::install`, to use its workers).
    pub(crate) fn run(&mut self, par: faer::Par) {
        let (o, v) = (self.o, self.v);
        match self.term {
            // T2 is the (ij) x (ab) matrix as stored, V the (ab) x (cd) one, R (ij) x (cd).
            Term::Ladder => gemm(
                &mut self.out.data,
                &self.a.data,
                &self.b.data,
                (o * o, v * v, v * v),
                par,
            ),
            Term::Ring => {
                // T2(i,k,a,c) -> (i,a | k,c); W(k,b,c,j) -> (k,c | b,j); the product
                // P(i,a,b,j) -> R(i,j,a,b).
                self.a.permute_into([0, 2, 1, 3], &mut self.a_matrix);
                self.b.permute_into([0, 2, 1, 3], &mut self.b_matrix);
                self.product.dims = [o, v, v, o];
                self.product.data.resize(o * v * v * o, 0.0);
                gemm(
                    &mut self.product.data,
                    &self.a_matrix.data,
                    &self.b_matrix.data,
                    (o * v, o * v, v * o),
                    par,
                );
                self.product.permute_into([0, 3, 1, 2], &mut self.out);
            }
        }
    }
}

/// `|got - want| / |want|` in the Frobenius norm (`|got - want|` where `want` is zero).
pub(crate) fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "compared tensors of unequal sizes");
    let diff: f64 = got
        .iter()
        .zip(want)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = want.iter().map(|y| y * y).sum::<f64>().sqrt();
    if norm > 0.0 { diff / norm } else { diff }
}
