//! Two-site DMRG on the ranks of an MPI job (the `mpi` feature): the sweep of [`Dmrg`] with
//! every tensor a [`DistArray`].
//!
//! Owns: [`DistDmrg`]. Invariants: every rank runs the same sweep over the same global
//! structures, each tensor's blocks placed by coupled sector ([`ProcessMap::BySector`]);
//! contractions are computed by the owners of their output blocks from the operand blocks
//! sent to them ([`contract`]), the SVD of the pair by the ranks that hold its sectors with
//! one truncation agreed from everyone's singular values ([`svd`]), and every number a
//! decision reads (Lanczos's inner products and norms, the truncation) comes from a
//! reduction with the same bits on every rank. So the ranks stay in step without a barrier,
//! and the state is the one process's to rounding: the energies agree to 1e-10.
//!
//! The placement is the simplest that is right, not the fastest: each step of the effective
//! Hamiltonian moves the blocks its owners need, as every contraction does (see
//! `docs/SCALING.md`). A placement that moves no intermediate, split over the MPO's bond
//! sectors as block2 does, is the next step.
//!
//! [`Dmrg`]: super::Dmrg

use std::time::Instant;

use tessera_blocks::AbelianSector;
use tessera_coalesce::Truncation;
use tessera_contract::Contraction;
use tessera_distributed::{Comm, DistArray, ProcessMap, contract, svd};

use super::environments::edges;
use super::heff::{Contractions, Tensor, sweep_order};
use super::lanczos::{KrylovVector, Solved, krylov};
use super::{
    Bra, Settings, StepStats, SweepStats, Toward, check_run, converged, cut_short, lanczos_budget,
    plan, truncated,
};
use crate::{Mpo, Mps, Result, graded};

/// A distributed real tensor.
type Dist<S> = DistArray<f64, S>;

/// Where every tensor of the sweep is placed.
const PLACEMENT: ProcessMap = ProcessMap::BySector;

impl<S: AbelianSector> KrylovVector for Dist<S> {
    fn dim(&self) -> usize {
        self.structure().total_len()
    }
    fn copy(&self) -> Self {
        self.duplicate()
    }
    fn norm2(&self) -> Result<f64> {
        Ok(self.norm()?)
    }
    fn dot(&self, other: &Self) -> Result<f64> {
        Ok(self.inner(other)?)
    }
    fn add_scaled(&self, alpha: f64, x: &Self) -> Result<()> {
        Ok(self.axpy(alpha, x)?)
    }
    fn scale_by(&self, alpha: f64) {
        self.scale(alpha);
    }
}

/// Two-site DMRG with every tensor distributed over the ranks of an MPI job: the same
/// sweeps, Lanczos and truncation as [`Dmrg`](super::Dmrg), collective (every rank calls
/// the same methods in the same order, as an SPMD program does), and the same energies to
/// rounding.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tessera_distributed::World;
/// use tessera_mps::dmrg::{DistDmrg, Settings};
/// use tessera_mps::models::{ChainModel, Model};
///
/// let world = World::init()?; // under `mpirun -n 2`, on every rank
/// let Model::Spin(chain) = Model::parse("heisenberg:L=16")? else { unreachable!() };
/// let (mpo, start) = (chain.mpo()?, chain.initial_state()?);
/// let mut dmrg = DistDmrg::new(world.comm(), mpo, start, Settings::new(32))?;
/// let e0 = dmrg.run(|_| {})?; // the same on every rank
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct DistDmrg<S: AbelianSector> {
    comm: Comm,
    settings: Settings,
    /// The MPO tensors in sweep order.
    w: Vec<Dist<S>>,
    mps: Vec<Dist<S>>,
    /// `left[i]`: the environment of sites `..i`; `right[i]`: of sites `i..`.
    left: Vec<Option<Dist<S>>>,
    right: Vec<Option<Dist<S>>>,
    c: Contractions,
    /// `L theta` with `L` as stored, `(k, a, y)`: a distributed array is not permuted in
    /// place, the contraction reads it in its own order.
    heff_left: Contraction,
    sweeps_done: usize,
    energies: Vec<f64>,
    /// Per sweep: the steps an early Lanczos budget stopped short of its tolerance.
    cut_short: Vec<usize>,
}

impl<S: AbelianSector> DistDmrg<S> {
    /// A run of `mpo` from `start` (every rank passes the same ones, as it builds them from
    /// the same model), its tensors placed by sector and its right environments built.
    ///
    /// # Errors
    ///
    /// [`Error::Dmrg`](crate::Error::Dmrg) for invalid settings, fewer than two sites, or a
    /// chain length or a physical leg that differs between `mpo` and `start` (the same on
    /// every rank: nothing is distributed then); the distributed operations' errors
    /// ([`Error::Distributed`](crate::Error::Distributed)).
    pub fn new(comm: &Comm, mpo: Mpo<S>, start: Mps<S>, settings: Settings) -> Result<Self> {
        check_run(&mpo, &start, &settings)?;
        let l = start.len();
        let tensors = start.into_tensors();
        let (left_edge, right_edge) = edges(&tensors[0], &tensors[l - 1], &mpo)?;
        let place =
            |t: &Tensor<S>| -> Result<Dist<S>> { Ok(DistArray::scatter(comm, t, &PLACEMENT)?) };
        let mps = tensors.iter().map(place).collect::<Result<Vec<_>>>()?;
        let w = mpo
            .tensors()
            .iter()
            .map(|w| place(&sweep_order(w)?))
            .collect::<Result<Vec<_>>>()?;
        let mut left = (0..=l).map(|_| None).collect::<Vec<_>>();
        let mut right = (0..=l).map(|_| None).collect::<Vec<_>>();
        left[0] = Some(place(&left_edge)?);
        right[l] = Some(place(&right_edge)?);
        let mut run = Self {
            comm: comm.clone(),
            settings,
            w,
            mps,
            left,
            right,
            c: Contractions::new()?,
            heff_left: Contraction::new("kay,kstr->ya|str")?,
            sweeps_done: 0,
            energies: Vec::new(),
            cut_short: Vec::new(),
        };
        for i in (2..l).rev() {
            run.build_right(i)?;
        }
        Ok(run)
    }

    /// The communicator the run is on.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// The energy after each sweep.
    pub fn energies(&self) -> &[f64] {
        &self.energies
    }

    /// The MPS tensors (left isometries, the centre pair, right isometries).
    pub fn tensors(&self) -> &[Dist<S>] {
        &self.mps
    }

    /// The operand whose in-place conjugate is the bra of `a` (see
    /// [`graded::reversal_signed`]): a signed copy for graded sectors, else `a`'s copy-free
    /// stand-in (`None`).
    fn bra(&self, a: &Dist<S>) -> Result<Option<Dist<S>>> {
        if !S::GRADED || self.settings.bra == Bra::InPlaceConjugate {
            return Ok(None);
        }
        Ok(Some(a.with_local(graded::reversal_signed(a.local())?)?))
    }

    /// `right[i]` from `right[i + 1]` and the MPS tensor at site `i`.
    fn build_right(&mut self, i: usize) -> Result<()> {
        let r = self.right[i + 1]
            .as_ref()
            .expect("built from the right edge");
        let (b, c) = (&self.mps[i], &self.c.right);
        let t = contract(&c[0], b, r, &PLACEMENT)?;
        let t = contract(&c[1], &t, &self.w[i], &PLACEMENT)?;
        let bra = self.bra(b)?;
        let t = contract(&c[2], &t, bra.as_ref().unwrap_or(b), &PLACEMENT)?;
        self.right[i] = Some(t);
        Ok(())
    }

    /// `left[i + 1]` from `left[i]` and the MPS tensor at site `i`.
    fn build_left(&mut self, i: usize) -> Result<()> {
        let l = self.left[i].as_ref().expect("built from the left edge");
        let (a, c) = (&self.mps[i], &self.c.left);
        let t = contract(&c[0], l, a, &PLACEMENT)?;
        let t = contract(&c[1], &t, &self.w[i], &PLACEMENT)?;
        let bra = self.bra(a)?;
        let t = contract(&c[2], &t, bra.as_ref().unwrap_or(a), &PLACEMENT)?;
        self.left[i + 1] = Some(t);
        Ok(())
    }

    /// Optimises the pair `(i, i + 1)` with at most `budget` Lanczos products and splits it,
    /// moving the centre `toward` one of its sites.
    fn step(&mut self, i: usize, toward: Toward, budget: usize) -> Result<StepStats> {
        let c = &self.c;
        let theta = contract(&c.pair, &self.mps[i], &self.mps[i + 1], &PLACEMENT)?;
        let left = self.left[i].as_ref().expect("valid at the centre");
        let right = self.right[i + 2].as_ref().expect("valid at the centre");
        let twisted = if S::GRADED {
            Some(right.with_local(graded::twisted(right.local(), 2)?)?)
        } else {
            None
        };
        let right = twisted.as_ref().unwrap_or(right);
        let w = contract(&c.mpo_pair, &self.w[i], &self.w[i + 1], &PLACEMENT)?;
        let apply = |x: &Dist<S>| -> Result<Dist<S>> {
            let t = contract(&self.heff_left, left, x, &PLACEMENT)?;
            let [_, second, last] = c.heff[1].steps();
            let t = contract(second, &t, &w, &PLACEMENT)?;
            Ok(contract(last, &t, right, &PLACEMENT)?)
        };
        let Solved {
            value: energy,
            vector: ground,
            iterations: matvecs,
            converged,
        } = krylov(apply, &theta, self.settings.lanczos_tol, budget)?;
        let f = svd(&ground, &Truncation::max_dim(self.settings.chi))?;
        let (discarded, kept) = truncated(f.discarded_weight, f.total_weight);
        let s = f.s.map(|x| x / kept);
        let bond = f.s.len();
        match toward {
            Toward::Right => {
                self.mps[i + 1] = f.vt.with_local(s.scale_rows(f.vt.local())?)?;
                self.mps[i] = f.u;
                self.build_left(i)?;
            }
            Toward::Left => {
                self.mps[i] = f.u.with_local(s.scale_columns(f.u.local())?)?;
                self.mps[i + 1] = f.vt;
                self.build_right(i + 1)?;
            }
        }
        Ok(StepStats {
            energy,
            discarded,
            bond,
            matvecs,
            converged,
        })
    }

    /// One sweep, left to right and back, as [`Dmrg::sweep`](super::Dmrg::sweep).
    ///
    /// # Errors
    ///
    /// The distributed operations' errors, on every rank.
    pub fn sweep(&mut self) -> Result<SweepStats> {
        let start = Instant::now();
        let steps = plan(self.mps.len(), self.sweeps_done);
        let (mut energy, mut truncation, mut matvecs, mut max_bond) = (f64::NAN, 0.0_f64, 0, 1);
        let mut unconverged = 0;
        let budget = lanczos_budget(&self.settings, &self.energies, self.mps.len());
        for (i, toward) in steps {
            let s = self.step(i, toward, budget)?;
            energy = s.energy;
            truncation = truncation.max(s.discarded);
            matvecs += s.matvecs;
            max_bond = max_bond.max(s.bond);
            unconverged += usize::from(!s.converged);
        }
        self.sweeps_done += 1;
        self.energies.push(energy);
        self.cut_short
            .push(cut_short(&self.settings, budget, unconverged));
        Ok(SweepStats {
            sweep: self.sweeps_done,
            energy,
            truncation,
            max_bond,
            matvecs,
            lanczos_iter: budget,
            unconverged,
            time: start.elapsed(),
        })
    }

    /// Sweeps until the energy changes by less than `tol` between sweeps (at least two
    /// sweeps) or `sweeps` have been done, calling `report` after each; returns the energy of
    /// the last sweep, the same on every rank.
    ///
    /// # Errors
    ///
    /// As [`sweep`](Self::sweep).
    pub fn run(&mut self, mut report: impl FnMut(&SweepStats)) -> Result<f64> {
        while self.sweeps_done < self.settings.sweeps
            && !converged(&self.energies, &self.cut_short, self.settings.tol)
        {
            let stats = self.sweep()?;
            report(&stats);
        }
        Ok(*self.energies.last().expect("at least one sweep"))
    }
}
