//! Free fermions as an end-to-end check of the fermionic sign convention (see the contract
//! crate's docs): a two-site DMRG on `FermionicU1` block-sparse tensors whose MPO is written
//! on graded legs, with no Jordan-Wigner string anywhere. The odd MPO bond sectors carry the
//! fermion between the two ends of a hopping term, and the graded contractions supply every
//! sign. Checked against the sum of the single-particle energies (open chains of 16 and 32
//! sites, half filling, to `1e-10`) and, at small sizes and every filling, against exact
//! diagonalisation of the dense many-body Hamiltonian built with explicit Jordan-Wigner
//! signs. Next-nearest-neighbour hopping is included because with nearest-neighbour hopping
//! alone an open chain of fermions has the spectrum of hard-core bosons, so it cannot tell a
//! right sign from a missing one; a hop over a site can.
//!
//! # How the signs work out
//!
//! Every tensor here (MPS, MPO, environments, `theta`) has even flux, so it is an even
//! element of the graded tensor product of its legs and commutes with every other: the value
//! of the network `<psi|H|psi>` does not depend on the order of its tensors, and the
//! pairwise contractions (associative under the convention) compute it in any order.
//!
//! - MPS tensor `A(k, s, r)`: left bond `In`, physical `In`, right bond `Out`. Neighbours
//!   meet bra first (`A_i`'s `Out` bond, then `A_{i+1}`'s `In` bond), so the chain is the
//!   plain product: the state is `sum psi[s] e_{s_1} ... e_{s_L} e^{edge}`, which is the
//!   Fock state `(c_1^+)^{s_1} ... (c_L^+)^{s_L} |0>` (the graded tensor product of the
//!   sites' Fock spaces is the Fock space of the chain).
//! - MPO tensor `W(a, u, s, b)`: left bond `In`, output (ket) `In`, input (bra) `Out`, right
//!   bond `Out`, `W[a, u, s, b] = <u|O_ab|s>`. The chain of `W`s is the graded tensor
//!   product of the site operators `O_ab` (the bonds meet bra first, sign-free), and the
//!   graded tensor product of `a^+` on site `i` with `a` on site `j > i` is `c_i^+ c_j`,
//!   Jordan-Wigner string included; `c_j^+ c_i` is `-a ⊗ a^+` (the odd factors swap).
//! - The bra: the graded adjoint of an element `sum x e_1 ... e_n` is `sum conj(x) e_n^* ...
//!   e_1^*`, the same coefficients on the legs *reversed* (and dualled); it is
//!   antimultiplicative, `(A B)^+ = B^+ A^+`, so the bra layer of the network is the ket
//!   layer's adjoints. The library's conjugate (`conj_b`) conjugates and duals in place, and
//!   a permutation only relabels an element (it carries the Koszul sign so that the element
//!   stays the same), so no sequence of library operations reverses the legs *without* that
//!   sign. Read in the original leg order, the adjoint is the in-place conjugate times the
//!   reversal sign, `(-1)` per pair of odd legs of a block: [`with_reversal_sign`] applies
//!   it, the one sign this file writes besides the twist below. Without it the energies are
//!   wrong (`the_in_place_conjugate_is_not_the_adjoint`): for an MPS tensor the sign is
//!   `(-1)^{|r| + |k| |s|}`, and its `(-1)^{|r|}` on every bond is a Jordan-Wigner-like
//!   string inside the bond sums.
//! - The twist: the graded pairing of an adjoint with a ket, `x^+ y`, meets the pairs of
//!   their `Out` legs ket first, so it is `sum conj(x) y` times `(-1)` per odd `Out` leg, not
//!   the Hilbert-space inner product. Inside the network every bond is closed and the
//!   adjoint is exact, so this matters only for open `Out` legs: the right edge of the MPS
//!   (it carries the particle number) and the right bond `r` of `theta`. So the right edge
//!   environment is the identity twisted on its bra leg, and the effective Hamiltonian is
//!   the network `L W W R theta` with the right environment twisted on its bra leg (the
//!   output's `Out` leg): then `<theta'|H_eff theta>` (plain inner product, as Lanczos uses)
//!   is `<psi'|H|psi>` and `H_eff` is symmetric (tested). With `L` and `R` the environments
//!   of left and right isometries (SVD factors, orthonormal as plain matrices), `theta ->
//!   psi` is an isometry, so Lanczos on `H_eff` is the usual DMRG step.
//!
//! Both signs in their smallest form, on one tensor: the full contraction of `conj(A)` with
//! `A` is `<A|A>` only with the reversal sign and the twist
//! (`a_tensor_paired_with_its_conjugate_is_its_norm_only_with_the_reversal_sign_and_twist`).
//!
//! Duplicated from `examples/dmrg/heisenberg.rs` (which is `U1`-only): `lanczos`,
//! `lowest_of_tridiagonal`, the sweep skeleton (`Dmrg::new`/`update_*`/`step`/`sweep`/`run`)
//! and most contraction specs, adapted to `FermionicU1`; the MPO and its leg order, the
//! product state, the reversal sign, the twists and the dense references are this file's
//! own.

use std::sync::Arc;
use tessera::blocks::{
    AsyncArray, BlockStructure, Blocks, Direction, FermionParity, FermionicU1, Leg, Product,
    Sector, U1,
};
use tessera::coalesce::{Truncation, svd};
use tessera::contract::Contraction;
use tessera::prelude::Runtime;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, BoxError>;
type Tensor = AsyncArray<f64, FermionicU1>;

/// The sector of `n` particles: charge `n`, parity that of `n`.
fn charge(n: i32) -> FermionicU1 {
    Product(U1(n), FermionParity::new(n % 2 != 0))
}

/// The physical leg (`In`): empty (even), occupied (odd).
fn physical_leg() -> Result<Leg<FermionicU1>> {
    Ok(Leg::new(Direction::In, [(charge(0), 1), (charge(1), 1)])?)
}

/// MPO bond states by their dense index on the MPO leg (segments: charge -1, 0, +1, two
/// states each): an `a` placed on the site just left of the bond (`M1`) or on the one
/// before (`M2`), waiting for its `a^+`; nothing placed yet; the term complete; likewise an
/// `a^+` waiting for its `a` (`P1`, `P2`). The four waiting states are odd: they carry the
/// fermion.
const M1: usize = 0;
const M2: usize = 1;
const START: usize = 2;
const DONE: usize = 3;
const P1: usize = 4;
const P2: usize = 5;
const MPO_DIM: usize = 6;

fn mpo_leg() -> Result<Leg<FermionicU1>> {
    Ok(Leg::new(
        Direction::In,
        [(charge(-1), 2), (charge(0), 2), (charge(1), 2)],
    )?)
}

/// The bulk MPO of `H = -sum_i [t1 (c_i^+ c_{i+1} + h.c.) + t2 (c_i^+ c_{i+2} + h.c.)]`,
/// legs `(a In, u In, s Out, b Out)`, `W[a, u, s, b] = <u|O_ab|s>`. The hop over a site
/// passes its middle site with the plain identity: the odd bond makes it a string.
fn mpo(t1: f64, t2: f64) -> Result<Tensor> {
    let (p, m) = (physical_leg()?, mpo_leg()?);
    let s = BlockStructure::new([m.clone(), p.clone()], [p.dual(), m.dual()], charge(0))?;
    let identity = |u: usize, s: usize| f64::from(u8::from(u == s));
    let create = |u: usize, s: usize| f64::from(u8::from(u == 1 && s == 0));
    let annihilate = |u: usize, s: usize| f64::from(u8::from(u == 0 && s == 1));
    let at = |a: usize, u: usize, s: usize, b: usize| a + MPO_DIM * (u + 2 * (s + 2 * b));
    let mut dense = vec![0.0; MPO_DIM * 4 * MPO_DIM];
    for (u, s_) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        // c_i^+ c_j = a^+ ⊗ a and c_j^+ c_i = -a ⊗ a^+ (i < j), times -t.
        let entries = [
            (START, START, identity(u, s_)),
            (DONE, DONE, identity(u, s_)),
            (START, P1, create(u, s_)),
            (START, M1, annihilate(u, s_)),
            (P1, DONE, -t1 * annihilate(u, s_)),
            (M1, DONE, t1 * create(u, s_)),
            (P1, P2, identity(u, s_)),
            (M1, M2, identity(u, s_)),
            (P2, DONE, -t2 * annihilate(u, s_)),
            (M2, DONE, t2 * create(u, s_)),
        ];
        for (a, b, v) in entries {
            dense[at(a, u, s_, b)] += v;
        }
    }
    Ok(Tensor::from_dense(s, &dense)?)
}

/// A one-dimensional leg of `n` particles.
fn trivial_leg(direction: Direction, n: i32) -> Result<Leg<FermionicU1>> {
    Ok(Leg::new(direction, [(charge(n), 1)])?)
}

/// A product state of `n` particles on `l` sites, spread evenly (at half filling every
/// second site is occupied): bond dimension 1.
fn product_state(l: usize, n: usize) -> Result<Vec<Tensor>> {
    let p = physical_leg()?;
    let mut placed = 0;
    let mut mps = Vec::with_capacity(l);
    for i in 0..l {
        let occupied = (i + 1) * n / l > placed;
        let next = placed + usize::from(occupied);
        let s = BlockStructure::new(
            [trivial_leg(Direction::In, placed as i32)?, p.clone()],
            [trivial_leg(Direction::Out, next as i32)?],
            charge(0),
        )?;
        let mut dense = [0.0; 2];
        dense[usize::from(occupied)] = 1.0;
        mps.push(Tensor::from_dense(s, &dense)?);
        placed = next;
    }
    Ok(mps)
}

/// A copy of `x` with `(-1)` on the blocks whose sectors (one per leg) satisfy `negative`.
fn negated(x: &Tensor, negative: impl Fn(&[FermionicU1]) -> bool) -> Result<Tensor> {
    let ids: Vec<usize> = x
        .structure()
        .blocks()
        .filter(|b| negative(b.sectors()))
        .map(|b| b.id())
        .collect();
    let y = x.duplicate();
    y.scale_blocks(-1.0, Blocks::Only(&ids))?;
    Ok(y)
}

/// A copy of `a` with the sign of reversing its legs: `(-1)` on the blocks with an odd
/// number of pairs of odd legs. Its in-place conjugate (the contraction's `conj_b`) is the
/// graded adjoint of `a`, read in `a`'s leg order.
fn with_reversal_sign(a: &Tensor) -> Result<Tensor> {
    negated(a, |sectors| {
        let odd = sectors.iter().filter(|s| s.parity()).count();
        (odd * odd.saturating_sub(1) / 2) % 2 == 1
    })
}

/// A copy of `x` with `(-1)` on the blocks whose sector on `leg` is odd: the twist that
/// turns the graded pairing of an open `Out` leg into the Hilbert-space inner product.
fn twisted(x: &Tensor, leg: usize) -> Result<Tensor> {
    negated(x, |sectors| sectors[leg].parity())
}

/// How the bra layer is made from the ket.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bra {
    /// The graded adjoint: the in-place conjugate with the reversal sign (right).
    Adjoint,
    /// The in-place conjugate alone (wrong for fermions; kept to show that it is).
    InPlace,
}

/// The contractions of a sweep. Labels: `k`/`y` left ket/bra bond, `r`/`z` right ket/bra
/// bond, `a`/`b`/`c` MPO bonds, `s`/`t` ket and `u`/`v` bra physical legs. A left
/// environment has legs `(k Out, a Out, y In)`, a right one `(r In, b In, z Out)`; a bra
/// operand (conjugated by the contraction) is labelled `yuz`.
struct Contractions {
    heff: [Contraction; 4],
    left: [Contraction; 3],
    right: [Contraction; 3],
    pair: Contraction,
    absorb_right: Contraction,
    absorb_left: Contraction,
    bra: Bra,
}

impl Contractions {
    fn new(bra: Bra) -> Result<Self> {
        Ok(Self {
            heff: [
                Contraction::new("kay,kstr->yastr")?,
                Contraction::new("yastr,ausb->yubtr")?,
                Contraction::new("yubtr,bvtc->yuvcr")?,
                Contraction::new("yuvcr,rcz->yu|vz")?,
            ],
            left: [
                Contraction::new("kay,ksr->yasr")?,
                Contraction::new("yasr,ausb->yrub")?,
                Contraction::new("yrub,yuz->rbz")?.conj_b(),
            ],
            right: [
                Contraction::new("ksr,rbz->ksbz")?,
                Contraction::new("ksbz,ausb->kzau")?,
                Contraction::new("kzau,yuz->kay")?.conj_b(),
            ],
            pair: Contraction::new("ksm,mtr->ks|tr")?,
            absorb_right: Contraction::new("km,mtr->kt|r")?,
            absorb_left: Contraction::new("ksm,mr->ks|r")?,
            bra,
        })
    }

    /// The operand whose in-place conjugate is the bra of `a`.
    fn bra_of(&self, a: &Tensor) -> Result<Tensor> {
        match self.bra {
            Bra::Adjoint => with_reversal_sign(a),
            Bra::InPlace => Ok(a.duplicate()),
        }
    }
}

/// `theta -> L W W R theta`, with `right` already twisted on its bra leg.
struct EffectiveHamiltonian<'a> {
    left: &'a Tensor,
    w: &'a Tensor,
    right: &'a Tensor,
    steps: &'a [Contraction; 4],
}

impl EffectiveHamiltonian<'_> {
    fn apply(&self, theta: &Tensor) -> Result<Tensor> {
        let t = self.steps[0].apply(self.left, theta)?;
        let t = self.steps[1].apply(&t, self.w)?;
        let t = self.steps[2].apply(&t, self.w)?;
        Ok(self.steps[3].apply(&t, self.right)?)
    }
}

/// The lowest eigenpair of the symmetric map `apply` by Lanczos with full
/// reorthogonalisation (as in `examples/dmrg/heisenberg.rs`): the Ritz value and vector.
fn lanczos(
    apply: impl Fn(&Tensor) -> Result<Tensor>,
    start: &Tensor,
    tol: f64,
    max_iter: usize,
) -> Result<(f64, Tensor)> {
    let max_iter = max_iter.clamp(1, start.structure().total_len().max(1));
    let v0 = start.duplicate();
    let n0 = v0.norm().get()?;
    if n0 == 0.0 {
        return Err("Lanczos: the start vector is zero".into());
    }
    v0.scale(1.0 / n0);
    let mut basis = vec![v0];
    let (mut alpha, mut beta): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    let (value, y) = loop {
        let k = basis.len() - 1;
        let w = apply(&basis[k])?;
        let a = basis[k].inner(&w)?.get()?;
        alpha.push(a);
        w.axpy(-a, &basis[k])?;
        if k > 0 {
            w.axpy(-beta[k - 1], &basis[k - 1])?;
        }
        let overlaps = basis
            .iter()
            .map(|v| v.inner(&w))
            .collect::<std::result::Result<Vec<_>, tessera::blocks::Error>>()?;
        for (v, c) in basis.iter().zip(overlaps) {
            w.axpy(-c.get()?, v)?;
        }
        let b = w.norm().get()?;
        let (value, y) = lowest_of_tridiagonal(&alpha, &beta)?;
        if b * y[k].abs() < tol || basis.len() >= max_iter || b < 1e-14 {
            break (value, y);
        }
        w.scale(1.0 / b);
        beta.push(b);
        basis.push(w);
    };
    let x = basis[0].duplicate();
    x.scale(y[0]);
    for (v, &c) in basis.iter().zip(&y).skip(1) {
        x.axpy(c, v)?;
    }
    let n = x.norm().get()?;
    x.scale(1.0 / n);
    Ok((value, x))
}

/// The lowest eigenpair of the symmetric tridiagonal matrix (`alpha` diagonal, `beta` off).
fn lowest_of_tridiagonal(alpha: &[f64], beta: &[f64]) -> Result<(f64, Vec<f64>)> {
    let n = alpha.len();
    let t = faer::Mat::<f64>::from_fn(n, n, |i, j| match i.abs_diff(j) {
        0 => alpha[i],
        1 => beta[i.min(j)],
        _ => 0.0,
    });
    let eig = t
        .self_adjoint_eigen(faer::Side::Lower)
        .map_err(|e| format!("tridiagonal eigensolver: {e:?}"))?;
    let y = (0..n).map(|i| eig.U()[(i, 0)]).collect();
    Ok((eig.S().column_vector()[0], y))
}

/// A two-site DMRG run on the hopping chain.
struct Dmrg {
    chi: usize,
    w: Tensor,
    mps: Vec<Tensor>,
    /// `left[i]`: the environment of sites `0..i`; `right[i]` that of sites `i..L`.
    left: Vec<Option<Tensor>>,
    right: Vec<Option<Tensor>>,
    c: Contractions,
    sweeps: usize,
}

impl Dmrg {
    /// A run on `l` sites with `n` particles, hopping `t1` and `t2`, bond dimension `chi`.
    fn new(l: usize, n: usize, (t1, t2): (f64, f64), chi: usize, bra: Bra) -> Result<Self> {
        assert!(l >= 2 && n <= l && chi >= 1);
        let m = mpo_leg()?;
        // Left edge: the trivial bonds (even, no sign), the MPO at "nothing placed".
        let lb = BlockStructure::new(
            [trivial_leg(Direction::Out, 0)?, m.dual()],
            [trivial_leg(Direction::In, 0)?],
            charge(0),
        )?;
        let mut dense = vec![0.0; MPO_DIM];
        dense[START] = 1.0;
        let left_edge = Tensor::from_dense(lb, &dense)?;
        // Right edge: the ket's edge leg (`Out`, n particles) meets the bra's (`In`) through
        // the identity twisted on its bra leg, the MPO at "term complete".
        let q = n as i32;
        let rb = BlockStructure::new(
            [trivial_leg(Direction::In, q)?, m],
            [trivial_leg(Direction::Out, q)?],
            charge(0),
        )?;
        let mut dense = vec![0.0; MPO_DIM];
        dense[DONE] = 1.0;
        let right_edge = twisted(&Tensor::from_dense(rb, &dense)?, 2)?;
        let mut left: Vec<Option<Tensor>> = (0..=l).map(|_| None).collect();
        let mut right: Vec<Option<Tensor>> = (0..=l).map(|_| None).collect();
        left[0] = Some(left_edge);
        right[l] = Some(right_edge);
        let mut run = Self {
            chi,
            w: mpo(t1, t2)?,
            mps: product_state(l, n)?,
            left,
            right,
            c: Contractions::new(bra)?,
            sweeps: 0,
        };
        for i in (2..l).rev() {
            run.update_right(i)?;
        }
        Ok(run)
    }

    /// `right[i]` from `right[i + 1]` and the right isometry at site `i`.
    fn update_right(&mut self, i: usize) -> Result<()> {
        let r = self.right[i + 1].as_ref().expect("next right environment");
        let t = self.c.right[0].apply(&self.mps[i], r)?;
        let t = self.c.right[1].apply(&t, &self.w)?;
        let bra = self.c.bra_of(&self.mps[i])?;
        self.right[i] = Some(self.c.right[2].apply(&t, &bra)?);
        Ok(())
    }

    /// `left[i + 1]` from `left[i]` and the left isometry at site `i`.
    fn update_left(&mut self, i: usize) -> Result<()> {
        let l = self.left[i].as_ref().expect("previous left environment");
        let t = self.c.left[0].apply(l, &self.mps[i])?;
        let t = self.c.left[1].apply(&t, &self.w)?;
        let bra = self.c.bra_of(&self.mps[i])?;
        self.left[i + 1] = Some(self.c.left[2].apply(&t, &bra)?);
        Ok(())
    }

    /// The pair `(i, i + 1)` as one tensor `theta(k, s, t, r)`, and the right environment
    /// of the pair twisted for the effective Hamiltonian.
    fn pair(&self, i: usize) -> Result<(Tensor, Tensor)> {
        let theta = self.c.pair.apply(&self.mps[i], &self.mps[i + 1])?;
        let right = twisted(self.right[i + 2].as_ref().expect("right environment"), 2)?;
        Ok((theta, right))
    }

    fn heff<'a>(&'a self, i: usize, right: &'a Tensor) -> EffectiveHamiltonian<'a> {
        EffectiveHamiltonian {
            left: self.left[i].as_ref().expect("left environment"),
            w: &self.w,
            right,
            steps: &self.c.heff,
        }
    }

    /// Optimises the pair `(i, i + 1)` and splits it, the centre moving to `i + 1`
    /// (`to_right`) or staying at `i`. Returns the energy and the discarded weight.
    fn step(&mut self, i: usize, to_right: bool) -> Result<(f64, f64)> {
        let (theta, right) = self.pair(i)?;
        let h = self.heff(i, &right);
        let (energy, ground) = lanczos(|x| h.apply(x), &theta, 1e-9, 60)?;
        let f = svd(&ground, &Truncation::max_dim(self.chi))?;
        let discarded = f.discarded_weight / f.total_weight;
        let s = f.s.to_array()?;
        s.scale(1.0 / (f.total_weight - f.discarded_weight).sqrt());
        if to_right {
            self.mps[i] = f.u;
            self.mps[i + 1] = self.c.absorb_right.apply(&s, &f.vt)?;
            self.update_left(i)?;
        } else {
            self.mps[i] = self.c.absorb_left.apply(&f.u, &s)?;
            self.mps[i + 1] = f.vt;
            self.update_right(i + 1)?;
        }
        Ok((energy, discarded))
    }

    /// One sweep, left to right and back; the energy of its last step and the largest
    /// discarded weight.
    fn sweep(&mut self) -> Result<(f64, f64)> {
        let l = self.mps.len();
        let first = usize::from(self.sweeps > 0);
        let mut plan: Vec<(usize, bool)> = (first..l - 1).map(|i| (i, i + 2 < l)).collect();
        plan.extend((0..l.saturating_sub(2)).rev().map(|i| (i, i == 0)));
        if plan.is_empty() {
            plan.push((0, true));
        }
        self.sweeps += 1;
        let (mut energy, mut discarded) = (f64::NAN, 0.0_f64);
        for (i, to_right) in plan {
            let (e, d) = self.step(i, to_right)?;
            energy = e;
            discarded = discarded.max(d);
        }
        Ok((energy, discarded))
    }

    /// Sweeps until the energy changes by less than `tol` (at most `max_sweeps`).
    fn run(&mut self, tol: f64, max_sweeps: usize) -> Result<f64> {
        let mut previous = f64::INFINITY;
        for _ in 0..max_sweeps {
            let (energy, _) = self.sweep()?;
            if (previous - energy).abs() < tol {
                return Ok(energy);
            }
            previous = energy;
        }
        Ok(previous)
    }
}

/// The single-particle hopping matrix of the open chain.
fn hopping(l: usize, (t1, t2): (f64, f64)) -> faer::Mat<f64> {
    faer::Mat::<f64>::from_fn(l, l, |i, j| match i.abs_diff(j) {
        1 => -t1,
        2 => -t2,
        _ => 0.0,
    })
}

/// The exact ground-state energy of `n` free fermions: the sum of the `n` lowest
/// single-particle energies.
fn free_fermion_energy(l: usize, n: usize, t: (f64, f64)) -> f64 {
    let e = hopping(l, t)
        .self_adjoint_eigenvalues(faer::Side::Lower)
        .expect("the dense eigensolver converges");
    e[..n].iter().sum()
}

/// The lowest energy of the dense many-body Hamiltonian with `n` particles, in the basis of
/// bit strings (bit `i`: site `i` occupied; the Fock state `prod_i (c_i^+)^{b_i} |0>`, sites
/// in increasing order). With `fermions`, `c_i^+ c_j` carries the Jordan-Wigner sign
/// `(-1)` per occupied site strictly between `i` and `j`; without, the particles are
/// hard-core bosons.
fn exact_diagonalisation(l: usize, n: usize, t: (f64, f64), fermions: bool) -> f64 {
    let basis: Vec<u32> = (0..1u32 << l)
        .filter(|b| b.count_ones() as usize == n)
        .collect();
    let h1 = hopping(l, t);
    let mut h = faer::Mat::<f64>::zeros(basis.len(), basis.len());
    for (col, &b) in basis.iter().enumerate() {
        for i in 0..l {
            for j in 0..l {
                // c_i^+ c_j |b>: j occupied, i empty.
                if i == j || h1[(i, j)] == 0.0 || b >> j & 1 == 0 || b >> i & 1 == 1 {
                    continue;
                }
                let (lo, hi) = (i.min(j), i.max(j));
                let between = (b >> (lo + 1)) & ((1u32 << (hi - lo - 1)) - 1);
                let sign = if fermions && between.count_ones() % 2 == 1 {
                    -1.0
                } else {
                    1.0
                };
                let to = b ^ (1 << i) ^ (1 << j);
                let row = basis.binary_search(&to).expect("a state of the sector");
                h[(row, col)] += sign * h1[(i, j)];
            }
        }
    }
    h.self_adjoint_eigenvalues(faer::Side::Lower)
        .expect("the dense eigensolver converges")[0]
}

fn dmrg(runtime: &Runtime, l: usize, n: usize, t: (f64, f64), chi: usize, bra: Bra) -> f64 {
    runtime
        .enter(|| Dmrg::new(l, n, t, chi, bra)?.run(1e-12, 30))
        .expect("the DMRG run succeeds")
}

#[test]
fn the_dense_references_agree_and_tell_fermions_from_hard_core_bosons() {
    for (l, t) in [(6, (1.0, 0.0)), (6, (1.0, 0.5)), (8, (0.7, -0.4))] {
        for n in 0..=l {
            let ed = exact_diagonalisation(l, n, t, true);
            let free = free_fermion_energy(l, n, t);
            assert!((ed - free).abs() < 1e-12, "L {l}, N {n}, t {t:?}");
        }
    }
    // Nearest-neighbour hopping alone cannot see the statistics; a hop over a site can.
    let boson = |n, t| exact_diagonalisation(8, n, t, false);
    let fermion = |n, t| exact_diagonalisation(8, n, t, true);
    assert!((boson(4, (1.0, 0.0)) - fermion(4, (1.0, 0.0))).abs() < 1e-12);
    assert!((boson(4, (1.0, 0.5)) - fermion(4, (1.0, 0.5))).abs() > 1e-2);
    // The open nearest-neighbour chain's energies are -2 cos(pi k / (L + 1)).
    let l = 16;
    let cosines: f64 = (1..=l / 2)
        .map(|k| -2.0 * (std::f64::consts::PI * k as f64 / (l as f64 + 1.0)).cos())
        .sum();
    assert!((free_fermion_energy(l, l / 2, (1.0, 0.0)) - cosines).abs() < 1e-12);
}

#[test]
fn dmrg_equals_exact_diagonalisation_at_every_filling() {
    let runtime = Runtime::new(2).unwrap();
    // chi = 2^(L/2): no truncation, so DMRG is exact in every particle-number sector, odd
    // ones included (their right edge leg is odd).
    for (l, t) in [(6, (1.0, 0.5)), (6, (1.0, 0.0)), (8, (0.7, -0.4))] {
        for n in 0..=l {
            let exact = exact_diagonalisation(l, n, t, true);
            let got = dmrg(&runtime, l, n, t, 1 << (l / 2), Bra::Adjoint);
            assert!(
                (got - exact).abs() < 1e-10,
                "L {l}, N {n}, t {t:?}: DMRG {got}, exact {exact}"
            );
        }
    }
}

#[test]
fn the_effective_hamiltonian_is_symmetric_and_its_expectation_is_the_energy() {
    let runtime = Runtime::new(2).unwrap();
    runtime
        .enter(|| -> Result<()> {
            let (l, n, t) = (8, 3, (1.0, 0.5));
            let mut run = Dmrg::new(l, n, t, 16, Bra::Adjoint)?;
            run.run(1e-12, 30)?;
            // After a run the centre is at (0, 1); move it to (3, 4), a bulk pair.
            for i in 0..3 {
                run.step(i, true)?;
            }
            let (theta, right) = run.pair(3)?;
            let h = run.heff(3, &right);
            let x = AsyncArray::random(Arc::clone(theta.structure()), 7);
            let y = AsyncArray::random(Arc::clone(theta.structure()), 8);
            let xhy = x.inner(&h.apply(&y)?)?.get()?;
            let yhx = y.inner(&h.apply(&x)?)?.get()?;
            assert!((xhy - yhx).abs() < 1e-12 * (1.0 + xhy.abs()), "{xhy} {yhx}");
            // <psi|H|psi> of the current state, through the environments, is the ground
            // energy (the state is converged and exact at chi = 16).
            let e = theta.inner(&h.apply(&theta)?)?.get()? / theta.inner(&theta)?.get()?;
            let exact = exact_diagonalisation(l, n, t, true);
            assert!((e - exact).abs() < 1e-8, "{e} vs {exact}");
            // Without the twist the network is not symmetric.
            let untwisted = run.right[5].as_ref().unwrap();
            let h = run.heff(3, untwisted);
            let xhy = x.inner(&h.apply(&y)?)?.get()?;
            let yhx = y.inner(&h.apply(&x)?)?.get()?;
            assert!((xhy - yhx).abs() > 1e-3, "{xhy} {yhx}");
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_in_place_conjugate_is_not_the_adjoint() {
    // The same run with the bra conjugated in place (no reversal) gives a wrong energy.
    let runtime = Runtime::new(2).unwrap();
    let (l, n, t) = (6, 3, (1.0, 0.5));
    let exact = exact_diagonalisation(l, n, t, true);
    let wrong = dmrg(&runtime, l, n, t, 8, Bra::InPlace);
    assert!((wrong - exact).abs() > 1e-3, "{wrong} vs {exact}");
}

#[test]
fn half_filled_chains_of_16_and_32_sites_give_the_free_fermion_energy() {
    let runtime = Runtime::new(2).unwrap();
    for (l, chi) in [(16, 64), (32, 128)] {
        let exact: f64 = (1..=l / 2)
            .map(|k| -2.0 * (std::f64::consts::PI * k as f64 / (l as f64 + 1.0)).cos())
            .sum();
        let got = dmrg(&runtime, l, l / 2, (1.0, 0.0), chi, Bra::Adjoint);
        println!("L = {l}: DMRG {got:.15}, exact {exact:.15}");
        assert!((got - exact).abs() < 1e-10, "L {l}: {got} vs {exact}");
    }
}

#[test]
fn a_hop_over_a_site_gives_the_free_fermion_energy_at_16_sites() {
    // The Jordan-Wigner string of c_i^+ c_{i+2} comes from the odd MPO bond passing site
    // i + 1: hard-core bosons would give another energy.
    let runtime = Runtime::new(2).unwrap();
    let (l, t) = (16, (1.0, 0.5));
    let exact = free_fermion_energy(l, l / 2, t);
    let got = dmrg(&runtime, l, l / 2, t, 64, Bra::Adjoint);
    println!("L = {l}, t2 = {}: DMRG {got:.15}, exact {exact:.15}", t.1);
    assert!((got - exact).abs() < 1e-10, "{got} vs {exact}");
}

#[test]
fn a_tensor_paired_with_its_conjugate_is_its_norm_only_with_the_reversal_sign_and_twist() {
    // The minimal form of what the DMRG needs: for A(k In, s In, r Out), the full
    // contraction of conj(A) with A (in place, as `conj_a` does) is not <A|A> but
    // sum_blocks (-1)^(pairs of odd legs + |r|) |A_b|^2; with the reversal sign on the
    // conjugated operand and the twist on the Out leg it is <A|A>.
    let runtime = Runtime::new(2).unwrap();
    runtime
        .enter(|| -> Result<()> {
            let v = Leg::new(Direction::In, (-1..=2).map(|n| (charge(n), 2)))?;
            let s = BlockStructure::new([v.clone(), physical_leg()?], [v.dual()], charge(0))?;
            let a = AsyncArray::<f64, _>::random(s, 11);
            let pair = Contraction::new("ksr,ksr->")?.conj_a();
            let in_place = pair.apply(&a, &a)?.to_dense()?[0];
            let mut want = 0.0;
            for (b, data) in a.structure().blocks().zip(a.to_blocks()?) {
                let p: Vec<bool> = b.sectors().iter().map(|s| s.parity()).collect();
                let pairs = usize::from(p[0] && p[1])
                    + usize::from(p[0] && p[2])
                    + usize::from(p[1] && p[2]);
                let sign = if (pairs + usize::from(p[2])) % 2 == 1 {
                    -1.0
                } else {
                    1.0
                };
                want += sign * data.iter().map(|x| x * x).sum::<f64>();
            }
            let norm2 = a.inner(&a)?.get()?;
            assert!(
                (in_place - want).abs() < 1e-12 * norm2,
                "{in_place} vs {want}"
            );
            assert!(
                (in_place - norm2).abs() > 1e-2 * norm2,
                "{in_place} vs {norm2}"
            );
            let adjoint = pair.apply(&with_reversal_sign(&a)?, &twisted(&a, 2)?)?;
            let got = adjoint.to_dense()?[0];
            assert!((got - norm2).abs() < 1e-12 * norm2, "{got} vs {norm2}");
            Ok(())
        })
        .unwrap();
}
