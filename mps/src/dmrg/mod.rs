//! Two-site DMRG on any abelian sector type: the ground state of an [`Mpo`] as an [`Mps`],
//! with checkpoints and environments that spill to disk.
//!
//! Owns: the engine [`Dmrg`], its [`Settings`], what it reports ([`Progress`] after every
//! step, [`SweepStats`] after every sweep, [`BondSpectrum`] per bond), the eigensolver
//! ([`lanczos`]) and the effective Hamiltonian of a pair ([`EffectiveHamiltonian`]).
//! Invariant: between steps the MPS is in mixed canonical form around the pair being
//! optimised: every tensor left of the pair is a left isometry (an SVD's `U`), every tensor
//! right of it a right isometry (an SVD's `V†`), and the valid environments are exactly
//! those of these tensors, so the effective Hamiltonian of the pair is the Hamiltonian
//! projected onto the current basis and Lanczos on it is the usual DMRG step.
//!
//! # One code path for spins and fermions
//!
//! The conventions are the crate's (see the crate docs): the bra layer of every environment
//! is the in-place conjugate of the reversal-signed ket ([`graded::reversal_signed`](crate::graded::reversal_signed)),
//! the graded adjoint; the right edge environment and the right environment of the
//! effective Hamiltonian are twisted on their bra legs ([`graded::twisted`](crate::graded::twisted)), which makes
//! `H_eff` symmetric under the plain inner product Lanczos uses. Both are the identity on
//! bosonic sectors (and then no copy is made), so the same sweep serves `U1` spins and
//! `FermionicU1` fermions. Edge environments are built from the one-dimensional edges of
//! the MPS and the MPO; nothing is model-specific.
//!
//! # Checkpoints and spilling
//!
//! With sector types that can be saved ([`SectorCodec`](tessera_io::SectorCodec)):
//! [`Dmrg::save_every_sweep`] writes a checkpoint after every sweep (MPS, MPO, sweep
//! number, energies, spectra, settings; see [`Dmrg::save`]) without waiting for anything
//! but the saved tensors' own pending writes; [`Dmrg::resume`] continues from it and
//! reaches the energies of the uninterrupted run; [`Dmrg::spill_to`] keeps the
//! environments a step does not touch on disk and loads the next one back while the
//! current step runs.
//!
//! ```
//! use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
//! use tessera_mps::dmrg::{Dmrg, Settings};
//! use tessera_mps::{Mpo, Mps};
//!
//! // The Heisenberg chain of 4 spins, charges 2 Sz: down U1(-1), up U1(1).
//! let p = Leg::new(Direction::In, [(U1(-1), 1), (U1(1), 1)])?;
//! // MPO bond states: S- placed (charge -2), start, Sz placed, done (0), S+ placed (+2).
//! let bond = Leg::new(Direction::In, [(U1(-2), 1), (U1(0), 3), (U1(2), 1)])?;
//! let edge = Leg::new(Direction::In, [(U1(0), 1)])?;
//! // (a, b, o, i, <o|O_ab|i>) with o, i in (down, up).
//! let entries = [
//!     (1, 1, 0, 0, 1.0), (1, 1, 1, 1, 1.0), (3, 3, 0, 0, 1.0), (3, 3, 1, 1, 1.0),
//!     (1, 4, 1, 0, 1.0), (1, 0, 0, 1, 1.0), (1, 2, 0, 0, -0.5), (1, 2, 1, 1, 0.5),
//!     (4, 3, 0, 1, 0.5), (0, 3, 1, 0, 0.5), (2, 3, 0, 0, -0.5), (2, 3, 1, 1, 0.5),
//! ];
//! // W(a In, o In, i Out, b Out), keeping the bond states `rows` and `cols`.
//! let w = |rows: &[usize], cols: &[usize]| -> Result<AsyncArray<f64, U1>, Box<dyn std::error::Error>> {
//!     let a = if rows.len() == 1 { edge.clone() } else { bond.clone() };
//!     let b = if cols.len() == 1 { edge.dual() } else { bond.dual() };
//!     let s = BlockStructure::new([a, p.clone()], [p.dual(), b], U1(0))?;
//!     let mut dense = vec![0.0; rows.len() * 4 * cols.len()];
//!     for &(r, c, o, i, v) in &entries {
//!         if let (Some(x), Some(y)) = (rows.iter().position(|&k| k == r), cols.iter().position(|&k| k == c)) {
//!             dense[x + rows.len() * (o + 2 * (i + 2 * y))] = v;
//!         }
//!     }
//!     Ok(AsyncArray::from_dense(s, &dense)?)
//! };
//! let all = [0, 1, 2, 3, 4];
//! let mpo = Mpo::new(vec![w(&[1], &all)?, w(&all, &all)?, w(&all, &all)?, w(&all, &[3])?])?;
//! let neel = Mps::product_state(&vec![p.clone(); 4], &[1, 0, 1, 0])?; // up down up down
//! let mut dmrg = Dmrg::new(mpo, neel, Settings::new(4))?;
//! let energy = dmrg.run(|_| {}, |_| {})?;
//! assert!((energy - (-0.75 - 0.75_f64.sqrt())).abs() < 1e-10); // -3/4 - sqrt(3)/2
//! assert_eq!(dmrg.energies().last(), Some(&energy));
//! assert_eq!(dmrg.bond_dims(), vec![2, 4, 2]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod checkpoint;
#[cfg(feature = "mpi")]
mod distributed;
mod environments;
mod heff;
mod lanczos;
mod spectrum;
mod spill;
#[cfg(test)]
mod tests;
mod tridiagonal;

pub use checkpoint::CHECKPOINT_FILE;
#[cfg(feature = "mpi")]
pub use distributed::DistDmrg;
pub use heff::EffectiveHamiltonian;
pub use lanczos::{Eigenpair, lanczos};
pub use spectrum::BondSpectrum;
pub(crate) use tridiagonal::lowest_of_tridiagonal;

use std::time::{Duration, Instant};

/// A size threshold for [`Dmrg::spill_to`]: environments below 1 MiB stay in memory.
pub const SPILL_MIN_BYTES: usize = 1 << 20;

use tessera_backends::Host;
use tessera_blocks::AbelianSector;
use tessera_coalesce::{Factorize, Truncation, svd};
use tessera_contract::Executor;

use crate::{Error, Mpo, Mps, Result};
use environments::{Environments, Key, edges, grow_left, grow_right, twisted_right};
use heff::{Contractions, Pair, Tensor, sweep_order};

/// A placement the engine runs on: one whose contractions and factorizations exist (host
/// memory, or with the `cuda` feature a CUDA device).
pub trait Backend: Executor<f64> + Factorize<f64> {}

impl<P: Executor<f64> + Factorize<f64>> Backend for P {}

/// How the bra layer of the network is made from the ket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Bra {
    /// The graded adjoint: the in-place conjugate of the reversal-signed ket. Right for
    /// every sector type.
    #[default]
    Adjoint,
    /// The in-place conjugate alone, without the reversal sign. The same as
    /// [`Adjoint`](Bra::Adjoint) for bosonic sectors; for graded (fermionic) sectors it is
    /// not the adjoint and the energies come out wrong. Kept as the control that shows the
    /// reversal sign is needed (the free-fermion tests run it).
    InPlaceConjugate,
}

impl Bra {
    fn name(self) -> &'static str {
        match self {
            Bra::Adjoint => "adjoint",
            Bra::InPlaceConjugate => "in-place-conjugate",
        }
    }
}

/// The settings of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The largest bond dimension kept (at least 1).
    pub chi: usize,
    /// The most sweeps, counted from the start of the run (a resumed run counts the sweeps
    /// of its checkpoint); at least 1.
    pub sweeps: usize,
    /// Stop once a sweep changes the energy by less than this (finite, `>= 0`).
    pub tol: f64,
    /// Lanczos stops when the residual norm is below this (finite, `> 0`).
    pub lanczos_tol: f64,
    /// The most Lanczos iterations per step (at least 1).
    pub lanczos_iter: usize,
    /// The most Lanczos iterations per step of an early sweep (see [`EARLY_ENERGY_CHANGE`]),
    /// at least 1; `lanczos_iter` or more makes every sweep alike.
    ///
    /// Why: until the environments have converged, the last digits of a step's eigenvector
    /// are spent on a Hamiltonian the next sweep replaces. The Heisenberg chain at L = 32,
    /// chi = 256 takes 3395 products with 40 in every sweep and 2185 with 12 in the early
    /// ones, in the same five sweeps to the same energy (to 1e-14); at chi = 128 the
    /// Hubbard chain takes 8223 and 4180, in five sweeps each (8 in the early sweeps took
    /// six). A run stops only after a sweep whose steps are those of the full budget (one
    /// that took `lanczos_iter`, or an early one where no step stopped at the cap): the cap
    /// trades products for at most one more sweep, never for accuracy.
    pub lanczos_iter_early: usize,
    /// How the bra is made ([`Bra::Adjoint`] unless demonstrating the alternative).
    pub bra: Bra,
}

/// The default of [`Settings::lanczos_iter`].
pub const LANCZOS_ITER: usize = 40;

/// The default of [`Settings::lanczos_iter_early`].
pub const LANCZOS_ITER_EARLY: usize = 12;

/// A sweep is early (its steps take at most [`Settings::lanczos_iter_early`] products) when
/// fewer than two sweeps were done before it, or the last one changed the energy by more
/// than this per site.
pub const EARLY_ENERGY_CHANGE: f64 = 1e-6;

impl Settings {
    /// Defaults for bond dimension `chi`: 20 sweeps, `tol = 1e-10`, Lanczos to a residual of
    /// `1e-8` in at most 40 iterations (12 in the early sweeps), the graded adjoint.
    pub fn new(chi: usize) -> Self {
        Self {
            chi,
            sweeps: 20,
            tol: 1e-10,
            lanczos_tol: 1e-8,
            lanczos_iter: LANCZOS_ITER,
            lanczos_iter_early: LANCZOS_ITER_EARLY,
            bra: Bra::Adjoint,
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |what: &str, expected: &str, found: String| {
            Err(Error::Dmrg {
                what: format!("setting {what}"),
                expected: expected.into(),
                found,
            })
        };
        if self.chi == 0 {
            return bad("chi", "at least 1", "0".into());
        }
        if self.sweeps == 0 {
            return bad("sweeps", "at least 1", "0".into());
        }
        if !(self.tol.is_finite() && self.tol >= 0.0) {
            return bad("tol", "finite and >= 0", self.tol.to_string());
        }
        if !(self.lanczos_tol.is_finite() && self.lanczos_tol > 0.0) {
            return bad(
                "lanczos_tol",
                "finite and > 0",
                self.lanczos_tol.to_string(),
            );
        }
        if self.lanczos_iter == 0 {
            return bad("lanczos_iter", "at least 1", "0".into());
        }
        if self.lanczos_iter_early == 0 {
            return bad("lanczos_iter_early", "at least 1", "0".into());
        }
        Ok(())
    }
}

/// Which way a step moves the orthogonality centre.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Toward {
    /// To the right site of the pair (`U` stays on the left site).
    Right,
    /// To the left site of the pair (`V†` stays on the right site).
    Left,
}

/// Where a sweep is, reported after every two-site step.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// The sweep (from 1).
    pub sweep: usize,
    /// The left site of the pair just optimised.
    pub site: usize,
    /// Steps done in this sweep (from 1).
    pub step: usize,
    /// Steps in this sweep.
    pub steps: usize,
    /// The energy of this step.
    pub energy: f64,
    /// The bond dimension just chosen.
    pub bond: usize,
}

/// What one two-site step did.
#[derive(Clone, Copy, Debug)]
pub struct StepStats {
    /// The lowest eigenvalue of the effective Hamiltonian.
    pub energy: f64,
    /// The discarded weight, as a fraction of the norm squared.
    pub discarded: f64,
    /// The new bond dimension.
    pub bond: usize,
    /// Lanczos products used.
    pub matvecs: usize,
    /// Whether Lanczos met `lanczos_tol` (else it stopped at the step's budget of products).
    pub converged: bool,
}

/// One sweep's summary.
#[derive(Clone, Copy, Debug)]
pub struct SweepStats {
    /// The sweep (from 1).
    pub sweep: usize,
    /// The energy after the sweep's last step.
    pub energy: f64,
    /// The largest discarded weight (fraction of the norm squared) of any step.
    pub truncation: f64,
    /// The largest bond dimension after the sweep.
    pub max_bond: usize,
    /// Lanczos products in this sweep.
    pub matvecs: usize,
    /// The most Lanczos products a step of this sweep could take: `lanczos_iter`, or
    /// `lanczos_iter_early` in an early sweep.
    pub lanczos_iter: usize,
    /// Steps whose Lanczos stopped there, short of `lanczos_tol`.
    pub unconverged: usize,
    /// Wall time of the sweep.
    pub time: Duration,
}

/// Whether a run whose sweeps ended at `energies`, each with `cut_short` steps an early
/// budget stopped short of the Lanczos tolerance, has converged: the last two sweeps changed
/// the energy by less than `tol`, and no step of the last one was cut short.
///
/// Why the second condition: a step cut short gains less than the full budget would, so
/// two early sweeps may agree to `tol` on an energy that full solves would still lower
/// (the Hubbard chain at chi 128 with at most 8 products in every step stopped 9e-10 above
/// the energy of the full budget).
fn converged(energies: &[f64], cut_short: &[usize], tol: f64) -> bool {
    matches!(energies, [.., a, b] if (a - b).abs() < tol) && cut_short.last() == Some(&0)
}

/// The most Lanczos products a step of the sweep after `energies` (one per sweep done) may
/// take on a chain of `sites`: `lanczos_iter_early` (at most `lanczos_iter`) while the run
/// is early, with fewer than two sweeps done or the last one changing the energy by more
/// than [`EARLY_ENERGY_CHANGE`] per site; `lanczos_iter` after. A function of the
/// energies alone (not of how many sweeps the run may still take), so that a run resumed
/// from a checkpoint makes the choices of the uninterrupted one.
fn lanczos_budget(settings: &Settings, energies: &[f64], sites: usize) -> usize {
    let early = match energies {
        [.., a, b] => (a - b).abs() > EARLY_ENERGY_CHANGE * sites as f64,
        _ => true,
    };
    if early {
        settings.lanczos_iter_early.min(settings.lanczos_iter)
    } else {
        settings.lanczos_iter
    }
}

/// How many of a sweep's `unconverged` steps (those that stopped at `budget` products short
/// of the tolerance) an early budget cut short: all of them when `budget` is below the
/// full one, none otherwise.
fn cut_short(settings: &Settings, budget: usize, unconverged: usize) -> usize {
    if budget < settings.lanczos_iter {
        unconverged
    } else {
        0
    }
}

/// The steps of a sweep, as (left site of the pair, where the centre goes): left to right,
/// then back. The first sweep starts at the pair `(0, 1)`, later ones at `(1, 2)` (the last
/// step of the previous sweep optimised `(0, 1)`).
fn plan(sites: usize, sweeps_done: usize) -> Vec<(usize, Toward)> {
    let first = usize::from(sweeps_done > 0);
    let dir = |right: bool| if right { Toward::Right } else { Toward::Left };
    let mut plan: Vec<(usize, Toward)> = (first..sites - 1)
        .map(|i| (i, dir(i + 2 < sites)))
        .collect();
    plan.extend((0..sites.saturating_sub(2)).rev().map(|i| (i, dir(i == 0))));
    if plan.is_empty() {
        plan.push((0, Toward::Right));
    }
    plan
}

/// [`Error::Dmrg`] for invalid settings, fewer than two sites, or a chain length or a
/// physical leg that differs between `mpo` and `start`.
fn check_run<S: AbelianSector>(mpo: &Mpo<S>, start: &Mps<S>, settings: &Settings) -> Result<()> {
    settings.check()?;
    let l = start.len();
    if l < 2 || mpo.len() != l {
        return Err(Error::Dmrg {
            what: "chain length".into(),
            expected: format!("an MPS of the MPO's length ({}), at least 2", mpo.len()),
            found: format!("an MPS of {l} sites"),
        });
    }
    for i in 0..l {
        let (a, w) = (start.physical_leg(i), mpo.physical_leg(i));
        if a != w {
            return Err(Error::Dmrg {
                what: format!("physical leg of site {i}"),
                expected: format!("the MPO's {w:?}"),
                found: format!("the MPS's {a:?}"),
            });
        }
    }
    Ok(())
}

/// The discarded fraction of a truncated SVD's weight, and the norm of what is kept (the
/// state is divided by it, to stay normalised after truncation).
fn truncated(discarded_weight: f64, total_weight: f64) -> (f64, f64) {
    let fraction = if total_weight > 0.0 {
        discarded_weight / total_weight
    } else {
        0.0
    };
    (fraction, (total_weight - discarded_weight).sqrt())
}

/// What a run does after each sweep besides sweeping (a checkpoint), behind a trait object
/// so that the sweep needs only [`AbelianSector`].
pub(crate) trait AfterSweep<S: AbelianSector, P: Backend = Host>: std::fmt::Debug {
    /// Called after each sweep of [`Dmrg::run`].
    fn after_sweep(&mut self, run: &Dmrg<S, P>) -> Result<()>;
    /// Called when [`Dmrg::run`] returns (waits for what is in flight).
    fn finish(&mut self) -> Result<()>;
}

/// A two-site DMRG run: the MPO, the MPS, its environments and what the sweeps found.
#[derive(Debug)]
pub struct Dmrg<S: AbelianSector, P: Backend = Host> {
    settings: Settings,
    mpo: Mpo<S>,
    /// The MPO tensors in sweep order (see the `heff` module), at the run's placement.
    w: Vec<Tensor<S, P>>,
    mps: Vec<Tensor<S, P>>,
    envs: Environments<S, P>,
    c: Contractions,
    sweeps_done: usize,
    energies: Vec<f64>,
    /// Per sweep, as `energies`: the steps an early budget stopped short of `lanczos_tol`
    /// (zero for a sweep with the full budget); the run stops only after a sweep with none.
    cut_short: Vec<usize>,
    /// Per bond `i` (between sites `i` and `i + 1`): the last step's spectrum and
    /// discarded weight there.
    spectra: Vec<Option<BondSpectrum<S>>>,
    discarded: Vec<f64>,
    after_sweep: Option<Box<dyn AfterSweep<S, P>>>,
}

impl<S: AbelianSector> Dmrg<S> {
    /// A run of `mpo` from `start` in host memory, its right environments built (the
    /// centre at the pair `(0, 1)`): [`on`](Dmrg::on) with [`Host`].
    ///
    /// `start` should be right-normalised or, like a product state, both left- and
    /// right-normalised; its charge picks the symmetry sector of the ground state found.
    ///
    /// # Errors
    ///
    /// As [`on`](Dmrg::on).
    pub fn new(mpo: Mpo<S>, start: Mps<S>, settings: Settings) -> Result<Self> {
        Self::on(&Host, mpo, start, settings)
    }
}

impl<S: AbelianSector, P: Backend> Dmrg<S, P> {
    /// A run of `mpo` from `start` at `placement` (the tensors are moved there; the host
    /// keeps the MPO for checks and checkpoints), its right environments built (the centre
    /// at the pair `(0, 1)`). Every contraction, Lanczos step and SVD then runs there, and
    /// only the scalars the recurrence needs and the singular values come back.
    ///
    /// `start` should be right-normalised or, like a product state, both left- and
    /// right-normalised; its charge picks the symmetry sector of the ground state found.
    ///
    /// # Errors
    ///
    /// [`Error::Dmrg`] for invalid settings, fewer than two sites, a chain length or a
    /// physical leg that differs between `mpo` and `start`; the errors of the contractions.
    pub fn on(placement: &P, mpo: Mpo<S>, start: Mps<S>, settings: Settings) -> Result<Self> {
        let mut run = Self::unprepared(placement, mpo, start, settings)?;
        let l = run.mps.len();
        for i in (2..l).rev() {
            run.build_right(i)?;
        }
        Ok(run)
    }

    /// The run of `mpo` from `start` with only its edge environments.
    fn unprepared(placement: &P, mpo: Mpo<S>, start: Mps<S>, settings: Settings) -> Result<Self> {
        check_run(&mpo, &start, &settings)?;
        let l = start.len();
        let mps = start
            .into_tensors()
            .iter()
            .map(|t| t.to_placement(placement))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let (left, right) = edges(&mps[0], &mps[l - 1], &mpo)?;
        let w = mpo
            .tensors()
            .iter()
            .map(|w| sweep_order(&w.to_placement(placement)?))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            settings,
            mpo,
            w,
            mps,
            envs: Environments::new(l, left, right),
            c: Contractions::new()?,
            sweeps_done: 0,
            energies: Vec::new(),
            cut_short: Vec::new(),
            spectra: vec![None; l - 1],
            discarded: vec![0.0; l - 1],
            after_sweep: None,
        })
    }

    /// `right[i]` from `right[i + 1]` and the MPS tensor at site `i`.
    fn build_right(&mut self, i: usize) -> Result<()> {
        let r = self.envs.get(Key::Right(i + 1))?;
        let t = grow_right(&self.c, r, &self.mps[i], &self.w[i], self.settings.bra)?;
        self.envs.set_right(i, t);
        Ok(())
    }

    /// `left[i + 1]` from `left[i]` and the MPS tensor at site `i`.
    fn build_left(&mut self, i: usize) -> Result<()> {
        let l = self.envs.get(Key::Left(i))?;
        let t = grow_left(&self.c, l, &self.mps[i], &self.w[i], self.settings.bra)?;
        self.envs.set_left(i + 1, t);
        Ok(())
    }

    /// The number of sites.
    pub fn len(&self) -> usize {
        self.mps.len()
    }

    /// Always `false`: a run has at least two sites.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Changes the stopping criteria of later sweeps (`sweeps`, `tol`); the other settings
    /// are those the run was made with.
    ///
    /// # Errors
    ///
    /// [`Error::Dmrg`] for invalid values.
    pub fn set_stopping(&mut self, sweeps: usize, tol: f64) -> Result<()> {
        let next = Settings {
            sweeps,
            tol,
            ..self.settings.clone()
        };
        next.check()?;
        self.settings = next;
        Ok(())
    }

    /// The MPO.
    pub fn mpo(&self) -> &Mpo<S> {
        &self.mpo
    }

    /// The sweeps done (those of a checkpoint included).
    pub fn sweeps_done(&self) -> usize {
        self.sweeps_done
    }

    /// The energy after each sweep done (those of a checkpoint included).
    pub fn energies(&self) -> &[f64] {
        &self.energies
    }

    /// The energy of the last sweep, if one was done.
    pub fn energy(&self) -> Option<f64> {
        self.energies.last().copied()
    }

    /// The current MPS tensors.
    pub fn tensors(&self) -> &[Tensor<S, P>] {
        &self.mps
    }

    /// A copy of the current MPS (after a sweep: the converged state, its centre at site 1
    /// and normalised).
    ///
    /// # Errors
    ///
    /// As [`Mps::new`] (never, for a chain that came from one).
    pub fn mps(&self) -> Result<Mps<S>> {
        Mps::new(
            self.mps
                .iter()
                .map(|t| t.to_placement(&Host))
                .collect::<std::result::Result<_, _>>()?,
        )
    }

    /// The MPS, consuming the run.
    ///
    /// # Errors
    ///
    /// As [`Mps::new`] (never, for a chain that came from one).
    pub fn into_mps(self) -> Result<Mps<S>> {
        self.mps()
    }

    /// The spectrum of bond `i` (between sites `i` and `i + 1`) as the last step on that
    /// bond left it, or `None` before any step split it. After a sweep every bond has one,
    /// from that sweep.
    pub fn spectrum(&self, i: usize) -> Option<&BondSpectrum<S>> {
        self.spectra.get(i)?.as_ref()
    }

    /// The discarded weight (fraction of the norm squared) of the last step on each bond.
    pub fn discarded_weights(&self) -> &[f64] {
        &self.discarded
    }

    /// The bond dimensions between neighbouring sites.
    pub fn bond_dims(&self) -> Vec<usize> {
        self.mps[..self.mps.len() - 1]
            .iter()
            .map(|a| a.structure().legs()[2].dim())
            .collect()
    }

    /// How many environment tensors are in memory now (with [`spill_to`](Self::spill_to),
    /// the few the next steps need and the edges).
    pub fn resident_environments(&self) -> usize {
        self.envs.resident()
    }

    /// The pair `(i, i + 1)` as one tensor `theta(k, s | t, r)`, split between the sites as the
    /// SVD takes it (enrolled, not waited for).
    ///
    /// # Errors
    ///
    /// [`Error::Dmrg`] for a pair past the end.
    pub fn pair(&self, i: usize) -> Result<Tensor<S, P>> {
        if i + 1 >= self.mps.len() {
            return Err(Error::Dmrg {
                what: "pair".into(),
                expected: format!("a left site below {}", self.mps.len() - 1),
                found: i.to_string(),
            });
        }
        Ok(self.c.pair.apply(&self.mps[i], &self.mps[i + 1])?)
    }

    fn check_pair(&self, i: usize) -> Result<()> {
        if self.envs.has_pair(i) {
            return Ok(());
        }
        Err(Error::Dmrg {
            what: "pair".into(),
            expected: format!(
                "a pair next to the orthogonality centre (left site in {:?})",
                self.envs.pairs()
            ),
            found: format!("left site {i}"),
        })
    }

    /// The environments of the pair `(i, i + 1)`: `left[i]` `(k Out, a Out, y In)` and
    /// `right[i + 2]` `(r In, b In, z Out)`, as stored (the right one not twisted).
    ///
    /// # Errors
    ///
    /// [`Error::Dmrg`] for a pair whose environments are not valid (away from the
    /// orthogonality centre); a spilled environment's load errors.
    pub fn environments(&mut self, i: usize) -> Result<Pair<'_, S, P>> {
        self.check_pair(i)?;
        self.envs.pair(i)
    }

    /// The effective Hamiltonian of the pair `(i, i + 1)`.
    ///
    /// # Errors
    ///
    /// As [`environments`](Self::environments).
    pub fn effective_hamiltonian(&mut self, i: usize) -> Result<EffectiveHamiltonian<'_, S, P>> {
        self.check_pair(i)?;
        let (left, right) = self.envs.pair(i)?;
        EffectiveHamiltonian::new(
            left,
            [&self.w[i], &self.w[i + 1]],
            twisted_right(right)?,
            &self.c,
        )
    }

    /// Optimises the pair `(i, i + 1)` (Lanczos on its effective Hamiltonian from the
    /// current pair) and splits it by a truncated SVD, moving the orthogonality centre
    /// `toward` one of its sites and building the environment that move needs.
    ///
    /// Lanczos takes at most [`Settings::lanczos_iter`] products here; a step of
    /// [`sweep`](Self::sweep) may take fewer (see [`Settings::lanczos_iter_early`]).
    ///
    /// # Errors
    ///
    /// [`Error::Dmrg`] for a pair away from the centre; the solver's and the factorization's
    /// errors.
    pub fn step(&mut self, i: usize, toward: Toward) -> Result<StepStats> {
        self.step_within(i, toward, self.settings.lanczos_iter)
    }

    /// [`step`](Self::step) with Lanczos stopped after at most `budget` products.
    fn step_within(&mut self, i: usize, toward: Toward, budget: usize) -> Result<StepStats> {
        self.check_pair(i)?;
        // Lanczos runs on the split the effective Hamiltonian reads and writes; the SVD
        // takes the pair split between the sites (one re-split per step).
        let theta = self.c.pair_lanczos.apply(&self.mps[i], &self.mps[i + 1])?;
        let tol = self.settings.lanczos_tol;
        let ground = {
            let h = self.effective_hamiltonian(i)?;
            lanczos(|x| h.apply(x), &theta, tol, budget)?
        };
        let ground_pair = ground.vector.permute(&[0, 1, 2, 3], 2)?;
        let f = svd(&ground_pair, &Truncation::max_dim(self.settings.chi))?;
        let (discarded, kept) = truncated(f.discarded_weight, f.total_weight);
        let s = f.s.to_array()?;
        s.scale(1.0 / kept);
        let s = s.to_placement(&self.w[0].placement())?;
        let bond = f.s.len();
        self.spectra[i] = Some(BondSpectrum::from_singular_values(&f.s, kept));
        self.discarded[i] = discarded;
        match toward {
            Toward::Right => {
                self.mps[i] = f.u;
                self.mps[i + 1] = self.c.absorb_right.apply(&s, &f.vt)?;
                self.build_left(i)?;
            }
            Toward::Left => {
                self.mps[i] = self.c.absorb_left.apply(&f.u, &s)?;
                self.mps[i + 1] = f.vt;
                self.build_right(i + 1)?;
            }
        }
        Ok(StepStats {
            energy: ground.value,
            discarded,
            bond,
            matvecs: ground.iterations,
            converged: ground.converged,
        })
    }

    /// One sweep, left to right and back (see [`Dmrg`]); `progress` is called after each
    /// step. With [`spill_to`](Self::spill_to), the environment the next step needs is
    /// loaded back while this step runs, and those the next two steps do not need are
    /// written out after it.
    ///
    /// # Errors
    ///
    /// As [`step`](Self::step); the spill store's errors.
    pub fn sweep(&mut self, mut progress: impl FnMut(&Progress)) -> Result<SweepStats> {
        let start = Instant::now();
        let l = self.mps.len();
        let steps = plan(l, self.sweeps_done);
        let next = plan(l, self.sweeps_done + 1);
        let sweep = self.sweeps_done + 1;
        let (mut energy, mut truncation, mut matvecs, mut unconverged) = (f64::NAN, 0.0_f64, 0, 0);
        let budget = lanczos_budget(&self.settings, &self.energies, l);
        for (k, &(i, toward)) in steps.iter().enumerate() {
            // The next two steps (the next sweep's first ones at the end of this one).
            let upcoming: Vec<(usize, Toward)> = steps[k + 1..]
                .iter()
                .chain(&next)
                .take(2)
                .copied()
                .collect();
            if let Some(&(j, _)) = upcoming.first() {
                self.envs.prefetch(Key::Left(j))?;
                self.envs.prefetch(Key::Right(j + 2))?;
            }
            let s = self.step_within(i, toward, budget)?;
            let keep: Vec<Key> = upcoming
                .iter()
                .flat_map(|&(j, _)| [Key::Left(j), Key::Right(j + 2)])
                .collect();
            self.envs.spill_except(&keep)?;
            energy = s.energy;
            truncation = truncation.max(s.discarded);
            matvecs += s.matvecs;
            unconverged += usize::from(!s.converged);
            progress(&Progress {
                sweep,
                site: i,
                step: k + 1,
                steps: steps.len(),
                energy,
                bond: s.bond,
            });
        }
        self.sweeps_done = sweep;
        self.energies.push(energy);
        self.cut_short
            .push(cut_short(&self.settings, budget, unconverged));
        Ok(SweepStats {
            sweep,
            energy,
            truncation,
            max_bond: self.bond_dims().into_iter().max().unwrap_or(1),
            matvecs,
            lanczos_iter: budget,
            unconverged,
            time: start.elapsed(),
        })
    }

    /// Whether the last two sweeps changed the energy by less than `tol` and the last one's
    /// steps are those of the full Lanczos budget (see [`converged`]).
    fn converged(&self) -> bool {
        converged(&self.energies, &self.cut_short, self.settings.tol)
    }

    /// Sweeps until the energy changes by less than `tol` between sweeps (at least two
    /// sweeps) or `sweeps` have been done (counting a checkpoint's); calls `report` after
    /// each sweep, then writes the checkpoint if [`save_every_sweep`](Self::save_every_sweep)
    /// asked for one. Returns the energy of the last sweep; a run that has nothing left to
    /// do returns at once.
    ///
    /// # Errors
    ///
    /// As [`sweep`](Self::sweep); the checkpoint's errors.
    pub fn run(
        &mut self,
        mut progress: impl FnMut(&Progress),
        mut report: impl FnMut(&SweepStats),
    ) -> Result<f64> {
        let outcome: Result<()> = (|| {
            while self.sweeps_done < self.settings.sweeps && !self.converged() {
                let stats = self.sweep(&mut progress)?;
                report(&stats);
                if let Some(mut hook) = self.after_sweep.take() {
                    let saved = hook.after_sweep(self);
                    self.after_sweep = Some(hook);
                    saved?;
                }
            }
            Ok(())
        })();
        let finished = match self.after_sweep.as_mut() {
            Some(hook) => hook.finish(),
            None => Ok(()),
        };
        outcome?;
        finished?;
        self.energy().ok_or_else(|| Error::Dmrg {
            what: "run".into(),
            expected: "at least one sweep".into(),
            found: "none".into(),
        })
    }
}
