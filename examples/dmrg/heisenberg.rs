//! Two-site DMRG for the open spin-1/2 Heisenberg chain with U(1) (Sz) symmetry, on the
//! public API of `tessera` only.
//!
//! Owns: the Heisenberg MPO ([`mpo`]), the Néel starting state, the left and right
//! environments, a Lanczos eigensolver on block-sparse tensors ([`lanczos`]) and the sweep
//! ([`Dmrg`]). Shared by `examples/dmrg/main.rs` (the driver) and `tests/dmrg.rs`.
//! Invariant: between steps the MPS is in mixed canonical form around the pair being
//! optimised: every tensor left of the pair is a left isometry (an SVD's `U`), every tensor
//! right of it a right isometry (an SVD's `V†`), and `left[i]` / `right[i]` are the
//! environments of exactly those tensors, so `L W W R` applied to the pair's `theta` is the
//! Hamiltonian projected onto the current basis.
//!
//! Conventions. Charges are `2 Sz`: spin down is `U1(-1)`, spin up `U1(1)`, and the physical
//! index runs (down, up). An MPS tensor has legs (left `In`, physical `In`, right `Out`);
//! an MPO tensor `W(a, s, u, b)` has (left `In`, ket `Out`, bra `In`, right `Out`) with
//! `W[a, s, u, b] = <u|O_ab|s>`, so `H theta` has the legs of `theta`. A left environment
//! has (ket `Out`, MPO `Out`, bra `In`), a right one (ket `In`, MPO `In`, bra `Out`).

use std::time::{Duration, Instant};
use tessera::blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera::coalesce::{Truncation, svd};
use tessera::contract::Contraction;

/// The error type of this module: every layer's errors, boxed.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A result with [`BoxError`].
pub(crate) type Result<T> = std::result::Result<T, BoxError>;

/// A real block-sparse tensor with U(1) charges.
pub(crate) type Tensor = AsyncArray<f64, U1>;

/// MPO bond states, by their dense index on the MPO leg (its segments are charges -2, 0, 0,
/// 0, +2): an `S-` placed, waiting for `S+` (charge -2); nothing placed yet; an `Sz` placed;
/// the term complete; an `S+` placed (charge +2).
const MPO_MINUS: usize = 0;
const MPO_START: usize = 1;
const MPO_SZ: usize = 2;
const MPO_DONE: usize = 3;
const MPO_PLUS: usize = 4;
/// The MPO bond dimension.
pub(crate) const MPO_DIM: usize = 5;

/// The physical leg (`In`): spin down (`U1(-1)`) then spin up (`U1(1)`).
pub(crate) fn physical_leg() -> Result<Leg<U1>> {
    Ok(Leg::new(Direction::In, [(U1(-1), 1), (U1(1), 1)])?)
}

/// The MPO's left bond leg (`In`): charges -2, 0 (three states), +2.
fn mpo_leg() -> Result<Leg<U1>> {
    Ok(Leg::new(
        Direction::In,
        [(U1(-2), 1), (U1(0), 3), (U1(2), 1)],
    )?)
}

/// The bulk MPO tensor of `H = J sum_i S_i . S_{i+1}` with `J = 1`:
/// `Sz Sz + (S+ S- + S- S+) / 2`, bond dimension 5, legs `(a In, s Out, u In, b Out)`.
pub(crate) fn mpo() -> Result<Tensor> {
    let (p, m) = (physical_leg()?, mpo_leg()?);
    let s = BlockStructure::new([m.clone(), p.dual()], [p.clone(), m.dual()], U1(0))?;
    // <u|O|s> for (u, s) in (down = 0, up = 1).
    let identity = |u: usize, s: usize| f64::from(u8::from(u == s));
    let sz = |u: usize, s: usize| if u == s { s as f64 - 0.5 } else { 0.0 };
    let splus = |u: usize, s: usize| f64::from(u8::from(u == 1 && s == 0));
    let sminus = |u: usize, s: usize| f64::from(u8::from(u == 0 && s == 1));
    let mut dense = vec![0.0; MPO_DIM * 2 * 2 * MPO_DIM];
    let at = |a: usize, s: usize, u: usize, b: usize| a + MPO_DIM * (s + 2 * (u + 2 * b));
    for (s_, u) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let entries = [
            (MPO_START, MPO_START, identity(u, s_)),
            (MPO_DONE, MPO_DONE, identity(u, s_)),
            (MPO_START, MPO_PLUS, splus(u, s_)),
            (MPO_START, MPO_MINUS, sminus(u, s_)),
            (MPO_START, MPO_SZ, sz(u, s_)),
            (MPO_PLUS, MPO_DONE, 0.5 * sminus(u, s_)),
            (MPO_MINUS, MPO_DONE, 0.5 * splus(u, s_)),
            (MPO_SZ, MPO_DONE, sz(u, s_)),
        ];
        for (a, b, v) in entries {
            dense[at(a, s_, u, b)] += v;
        }
    }
    // `from_dense` rejects any nonzero outside the charge-conserving blocks.
    Ok(Tensor::from_dense(s, &dense)?)
}

/// A one-dimensional leg carrying `charge`.
fn trivial_leg(direction: Direction, charge: i32) -> Result<Leg<U1>> {
    Ok(Leg::new(direction, [(U1(charge), 1)])?)
}

/// The Néel product state `up, down, up, ...` (total `2 Sz` is 0 for even `sites`, 1 for
/// odd): bond dimension 1, every tensor both a left and a right isometry.
pub(crate) fn neel(sites: usize) -> Result<Vec<Tensor>> {
    let p = physical_leg()?;
    let mut charge = 0;
    let mut mps = Vec::with_capacity(sites);
    for i in 0..sites {
        let (spin, index) = if i % 2 == 0 { (1, 1) } else { (-1, 0) };
        let (l, r) = (
            trivial_leg(Direction::In, charge)?,
            trivial_leg(Direction::Out, charge + spin)?,
        );
        let s = BlockStructure::new([l, p.clone()], [r], U1(0))?;
        let mut dense = [0.0; 2];
        dense[index] = 1.0;
        mps.push(Tensor::from_dense(s, &dense)?);
        charge += spin;
    }
    Ok(mps)
}

/// The contractions a sweep runs, parsed once (their plans are cached by structure).
///
/// Labels: `k`/`y` the left ket/bra bond, `r`/`z` the right ket/bra bond, `a`/`b`/`c` MPO
/// bonds, `s`/`t` ket and `u`/`v` bra physical legs, `m` an inner MPS bond.
struct Contractions {
    heff: [Contraction; 4],
    left: [Contraction; 3],
    right: [Contraction; 3],
    pair: Contraction,
    absorb_right: Contraction,
    absorb_left: Contraction,
}

impl Contractions {
    fn new() -> Result<Self> {
        Ok(Self {
            // (L theta) W1 W2 R: theta(k, s, t, r) -> (y, u, v, z), split as theta.
            heff: [
                Contraction::new("kay,kstr->yastr")?,
                Contraction::new("yastr,asub->yubtr")?,
                Contraction::new("yubtr,btvc->yuvcr")?,
                Contraction::new("yuvcr,rcz->yu|vz")?,
            ],
            // L'(r, b, z) = L(k, a, y) A(k, s, r) W(a, s, u, b) conj(A)(y, u, z).
            left: [
                Contraction::new("kay,ksr->yasr")?,
                Contraction::new("yasr,asub->yrub")?,
                Contraction::new("yrub,yuz->rbz")?.conj_b(),
            ],
            // R'(k, a, y) = B(k, s, r) R(r, b, z) W(a, s, u, b) conj(B)(y, u, z).
            right: [
                Contraction::new("ksr,rbz->ksbz")?,
                Contraction::new("ksbz,asub->kzau")?,
                Contraction::new("kzau,yuz->kay")?.conj_b(),
            ],
            pair: Contraction::new("ksm,mtr->ks|tr")?,
            // S V†: the singular values into the right factor, and U S into the left one.
            absorb_right: Contraction::new("km,mtr->kt|r")?,
            absorb_left: Contraction::new("ksm,mr->ks|r")?,
        })
    }
}

/// The Hamiltonian projected onto a pair: `theta -> L W W R theta`.
pub(crate) struct EffectiveHamiltonian<'a> {
    left: &'a Tensor,
    w: &'a Tensor,
    right: &'a Tensor,
    steps: &'a [Contraction; 4],
}

impl EffectiveHamiltonian<'_> {
    /// `H theta`, a new tensor with the structure of `theta` (enrolled, not waited for).
    pub(crate) fn apply(&self, theta: &Tensor) -> Result<Tensor> {
        let t = self.steps[0].apply(self.left, theta)?;
        let t = self.steps[1].apply(&t, self.w)?;
        let t = self.steps[2].apply(&t, self.w)?;
        Ok(self.steps[3].apply(&t, self.right)?)
    }
}

/// What [`lanczos`] found.
#[derive(Debug)]
pub(crate) struct Eigenpair {
    /// The lowest Ritz value.
    pub(crate) value: f64,
    /// Its normalised Ritz vector.
    pub(crate) vector: Tensor,
    /// Matrix-vector products used.
    pub(crate) iterations: usize,
}

/// The lowest eigenpair of the Hermitian map `apply` by Lanczos with full
/// reorthogonalisation, from `start`: stops when the residual norm `||H x - e x||` is below
/// `tol`, after `max_iter` products, or when the Krylov space is exhausted. Every vector
/// operation is the library's scheduled block operation (`inner`, `norm`, `axpy`, `scale`);
/// the host waits only for the scalars the recurrence needs.
pub(crate) fn lanczos(
    apply: impl Fn(&Tensor) -> Result<Tensor>,
    start: &Tensor,
    tol: f64,
    max_iter: usize,
) -> Result<Eigenpair> {
    let dim = start.structure().total_len();
    let max_iter = max_iter.clamp(1, dim.max(1));
    let v0 = start.duplicate();
    let n0 = v0.norm().get()?;
    if n0 == 0.0 {
        return Err("Lanczos: the start vector is zero".into());
    }
    v0.scale(1.0 / n0);
    let mut basis = vec![v0];
    let (mut alpha, mut beta): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    let (value, coefficients) = loop {
        let k = basis.len() - 1;
        let w = apply(&basis[k])?;
        let a = basis[k].inner(&w)?.get()?;
        alpha.push(a);
        w.axpy(-a, &basis[k])?;
        if k > 0 {
            w.axpy(-beta[k - 1], &basis[k - 1])?;
        }
        // Full reorthogonalisation against the whole basis (classical Gram-Schmidt, one
        // pass: enroll every product first, then wait).
        let overlaps = basis
            .iter()
            .map(|v| v.inner(&w))
            .collect::<std::result::Result<Vec<_>, tessera::blocks::Error>>()?;
        for (v, c) in basis.iter().zip(overlaps) {
            w.axpy(-c.get()?, v)?;
        }
        let b = w.norm().get()?;
        let (value, y) = lowest_of_tridiagonal(&alpha, &beta)?;
        let residual = b * y[k].abs();
        if residual < tol || basis.len() >= max_iter || b < 1e-14 {
            break (value, y);
        }
        w.scale(1.0 / b);
        beta.push(b);
        basis.push(w);
    };
    let x = basis[0].duplicate();
    x.scale(coefficients[0]);
    for (v, &c) in basis.iter().zip(&coefficients).skip(1) {
        x.axpy(c, v)?;
    }
    let n = x.norm().get()?;
    x.scale(1.0 / n);
    Ok(Eigenpair {
        value,
        vector: x,
        iterations: basis.len(),
    })
}

/// The lowest eigenvalue of the symmetric tridiagonal matrix with diagonal `alpha` and
/// off-diagonal `beta`, and its eigenvector (faer's dense Hermitian eigensolver).
fn lowest_of_tridiagonal(alpha: &[f64], beta: &[f64]) -> Result<(f64, Vec<f64>)> {
    let n = alpha.len();
    let t = faer::Mat::<f64>::from_fn(n, n, |i, j| {
        if i == j {
            alpha[i]
        } else if i == j + 1 {
            beta[j]
        } else if j == i + 1 {
            beta[i]
        } else {
            0.0
        }
    });
    let eig = t
        .self_adjoint_eigen(faer::Side::Lower)
        .map_err(|e| format!("tridiagonal eigensolver: {e:?}"))?;
    let value = eig.S().column_vector()[0];
    let y = (0..n).map(|i| eig.U()[(i, 0)]).collect();
    Ok((value, y))
}

/// The settings of a run.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Chain length `L` (at least 2).
    pub(crate) sites: usize,
    /// The largest bond dimension kept.
    pub(crate) chi: usize,
    /// The most sweeps run (at least 1: the energy is the last sweep's).
    pub(crate) sweeps: usize,
    /// Stop once a sweep changes the energy by less than this.
    pub(crate) tol: f64,
    /// Lanczos stops when the residual norm is below this.
    pub(crate) lanczos_tol: f64,
    /// The most Lanczos iterations per step.
    pub(crate) lanczos_iter: usize,
}

impl Settings {
    /// Defaults for `sites` sites and bond dimension `chi`.
    pub(crate) fn new(sites: usize, chi: usize) -> Self {
        Self {
            sites,
            chi,
            sweeps: 20,
            tol: 1e-10,
            lanczos_tol: 1e-8,
            lanczos_iter: 40,
        }
    }
}

/// Where a sweep is, reported after every two-site step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Progress {
    /// The sweep (from 1).
    pub(crate) sweep: usize,
    /// The left site of the pair just optimised.
    pub(crate) site: usize,
    /// Steps done in this sweep (from 1).
    pub(crate) step: usize,
    /// Steps in this sweep.
    pub(crate) steps: usize,
    /// The energy of this step.
    pub(crate) energy: f64,
    /// The bond dimension just chosen.
    pub(crate) bond: usize,
}

/// One sweep's summary.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SweepStats {
    /// The sweep (from 1).
    pub(crate) sweep: usize,
    /// The energy after the sweep's last step.
    pub(crate) energy: f64,
    /// The largest discarded weight (fraction of the norm squared) of any step.
    pub(crate) truncation: f64,
    /// The largest bond dimension after the sweep.
    pub(crate) max_bond: usize,
    /// Lanczos products in this sweep.
    pub(crate) matvecs: usize,
    /// Wall time of the sweep.
    pub(crate) time: Duration,
}

/// A two-site DMRG run: the MPS, its environments and the contractions.
pub(crate) struct Dmrg {
    settings: Settings,
    w: Tensor,
    mps: Vec<Tensor>,
    /// `left[i]`: the environment of sites `0..i` (set for `i` up to the pair).
    left: Vec<Option<Tensor>>,
    /// `right[i]`: the environment of sites `i..L` (set for `i` past the pair).
    right: Vec<Option<Tensor>>,
    c: Contractions,
    sweeps_done: usize,
}

impl Dmrg {
    /// A run from the Néel state, its right environments built.
    pub(crate) fn new(settings: Settings) -> Result<Self> {
        let l = settings.sites;
        if l < 2 || settings.chi == 0 || settings.sweeps == 0 {
            return Err(format!(
                "DMRG needs at least 2 sites, chi >= 1 and sweeps >= 1 (given {l} sites, chi {}, \
                 {} sweeps)",
                settings.chi, settings.sweeps
            )
            .into());
        }
        let w = mpo()?;
        let mps = neel(l)?;
        let total = if l.is_multiple_of(2) { 0 } else { 1 };
        let m = mpo_leg()?;
        // Boundaries: 1 at "nothing placed" on the left, at "term complete" on the right.
        let lb = BlockStructure::new(
            [trivial_leg(Direction::Out, 0)?, m.dual()],
            [trivial_leg(Direction::In, 0)?],
            U1(0),
        )?;
        let mut dense = vec![0.0; MPO_DIM];
        dense[MPO_START] = 1.0;
        let left_edge = Tensor::from_dense(lb, &dense)?;
        let rb = BlockStructure::new(
            [trivial_leg(Direction::In, total)?, m.clone()],
            [trivial_leg(Direction::Out, total)?],
            U1(0),
        )?;
        let mut dense = vec![0.0; MPO_DIM];
        dense[MPO_DONE] = 1.0;
        let right_edge = Tensor::from_dense(rb, &dense)?;
        let mut left: Vec<Option<Tensor>> = (0..=l).map(|_| None).collect();
        let mut right: Vec<Option<Tensor>> = (0..=l).map(|_| None).collect();
        left[0] = Some(left_edge);
        right[l] = Some(right_edge);
        let mut run = Self {
            settings,
            w,
            mps,
            left,
            right,
            c: Contractions::new()?,
            sweeps_done: 0,
        };
        for i in (2..l).rev() {
            run.update_right(i)?;
        }
        Ok(run)
    }

    /// `right[i]` from `right[i + 1]` and the right isometry at site `i`.
    fn update_right(&mut self, i: usize) -> Result<()> {
        let r = self.right[i + 1]
            .as_ref()
            .expect("the next right environment");
        let t = self.c.right[0].apply(&self.mps[i], r)?;
        let t = self.c.right[1].apply(&t, &self.w)?;
        self.right[i] = Some(self.c.right[2].apply(&t, &self.mps[i])?);
        Ok(())
    }

    /// `left[i + 1]` from `left[i]` and the left isometry at site `i`.
    fn update_left(&mut self, i: usize) -> Result<()> {
        let l = self.left[i]
            .as_ref()
            .expect("the previous left environment");
        let t = self.c.left[0].apply(l, &self.mps[i])?;
        let t = self.c.left[1].apply(&t, &self.w)?;
        self.left[i + 1] = Some(self.c.left[2].apply(&t, &self.mps[i])?);
        Ok(())
    }

    /// Optimises the pair `(i, i + 1)` and splits it, moving the orthogonality centre to
    /// site `i + 1` (`to_right`) or keeping it at `i`. Returns the energy, the discarded
    /// weight, the new bond dimension and the Lanczos products used.
    fn step(&mut self, i: usize, to_right: bool) -> Result<(f64, f64, usize, usize)> {
        let theta = self.c.pair.apply(&self.mps[i], &self.mps[i + 1])?;
        let h = EffectiveHamiltonian {
            left: self.left[i]
                .as_ref()
                .expect("the left environment of the pair"),
            w: &self.w,
            right: self.right[i + 2]
                .as_ref()
                .expect("the right environment of the pair"),
            steps: &self.c.heff,
        };
        let ground = lanczos(
            |x| h.apply(x),
            &theta,
            self.settings.lanczos_tol,
            self.settings.lanczos_iter,
        )?;
        let f = svd(&ground.vector, &Truncation::max_dim(self.settings.chi))?;
        let truncation = if f.total_weight > 0.0 {
            f.discarded_weight / f.total_weight
        } else {
            0.0
        };
        let s = f.s.to_array()?;
        // Keep the state normalised after truncation.
        let kept = (f.total_weight - f.discarded_weight).sqrt();
        s.scale(1.0 / kept);
        let bond = f.s.len();
        if to_right {
            self.mps[i] = f.u;
            self.mps[i + 1] = self.c.absorb_right.apply(&s, &f.vt)?;
            self.update_left(i)?;
        } else {
            self.mps[i] = self.c.absorb_left.apply(&f.u, &s)?;
            self.mps[i + 1] = f.vt;
            self.update_right(i + 1)?;
        }
        Ok((ground.value, truncation, bond, ground.iterations))
    }

    /// One sweep: left to right, then back. The first sweep starts at the pair `(0, 1)`,
    /// later ones at `(1, 2)` (the last step of the previous sweep optimised `(0, 1)`).
    pub(crate) fn sweep(&mut self, mut progress: impl FnMut(&Progress)) -> Result<SweepStats> {
        let start = Instant::now();
        let l = self.settings.sites;
        let first = if self.sweeps_done == 0 { 0 } else { 1 };
        // (left site, move the centre right afterwards)
        let mut plan: Vec<(usize, bool)> = (first..l - 1).map(|i| (i, i + 2 < l)).collect();
        plan.extend((0..l.saturating_sub(2)).rev().map(|i| (i, i == 0)));
        if plan.is_empty() {
            plan.push((0, true));
        }
        self.sweeps_done += 1;
        let (mut energy, mut truncation, mut matvecs) = (f64::NAN, 0.0_f64, 0);
        for (k, &(i, to_right)) in plan.iter().enumerate() {
            let (e, t, bond, n) = self.step(i, to_right)?;
            energy = e;
            truncation = truncation.max(t);
            matvecs += n;
            progress(&Progress {
                sweep: self.sweeps_done,
                site: i,
                step: k + 1,
                steps: plan.len(),
                energy,
                bond,
            });
        }
        Ok(SweepStats {
            sweep: self.sweeps_done,
            energy,
            truncation,
            max_bond: self.bond_dims().into_iter().max().unwrap_or(1),
            matvecs,
            time: start.elapsed(),
        })
    }

    /// Sweeps until the energy changes by less than `tol` between sweeps (at least two
    /// sweeps) or `sweeps` have run; calls `report` after each sweep.
    pub(crate) fn run(
        &mut self,
        mut progress: impl FnMut(&Progress),
        mut report: impl FnMut(&SweepStats),
    ) -> Result<f64> {
        let mut previous = f64::INFINITY;
        let mut energy = f64::NAN;
        for _ in 0..self.settings.sweeps {
            let stats = self.sweep(&mut progress)?;
            report(&stats);
            energy = stats.energy;
            if (previous - energy).abs() < self.settings.tol {
                break;
            }
            previous = energy;
        }
        Ok(energy)
    }

    /// The bond dimensions between neighbouring sites.
    pub(crate) fn bond_dims(&self) -> Vec<usize> {
        self.mps[..self.mps.len() - 1]
            .iter()
            .map(|a| a.structure().legs()[2].dim())
            .collect()
    }
}
