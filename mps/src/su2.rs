//! Two-site DMRG with SU(2) symmetry, on the Heisenberg chain of spin `s`.
//!
//! Owns [`heisenberg_su2`] (the driver), [`Su2Dmrg`] (its settings) and [`Su2Ground`] (its
//! result): the MPS, the MPO and the environments are [`Su2Tensor`]s, every contraction is
//! [`contract_su2`] (one GEMM per coupled spin), every split is [`svd_su2`] (multiplets kept
//! whole, `max_states` counting states). Invariants:
//!
//! - The MPO is the SU(2)-invariant form of `J sum S_i . S_(i+1)`: a bond of two singlets
//!   (start, done) and one triplet carrying the spherical components `T_q` of `S`; it is
//!   built from its dense form and checked to be invariant (projection loses nothing).
//! - Sites left of the centre are left-canonical, right of it right-canonical; the Lanczos
//!   vectors are the reduced blocks scaled by `sqrt(2c + 1)`, so their Euclidean inner
//!   product is the dense one and the effective Hamiltonian is symmetric on them.

use crate::Result;
use crate::error::Error;
use std::sync::Arc;
use tessera_blocks::AsyncArray;
use tessera_blocks::Direction;
use tessera_blocks::su2::{Su2Leg, Su2Structure, Su2Tensor};
use tessera_coalesce::{Truncation, svd_su2};
use tessera_contract::contract_su2;

/// Settings of [`heisenberg_su2`].
#[derive(Clone, Debug)]
pub struct Su2Dmrg {
    /// Sites.
    pub sites: usize,
    /// The spin of a site, as `2s` (1 for spin one half, 2 for spin one).
    pub two_s: u32,
    /// The total spin of the state sought, as `2S`: the lowest state of that total spin is
    /// found (0 for the singlet; the lowest states of two spins give gaps, such as the
    /// Haldane gap of the spin-one chain). Its parity must be that of `sites * two_s`.
    pub total_two_s: u32,
    /// The exchange `J`.
    pub j: f64,
    /// The most states (multiplets times their dimensions) a bond keeps.
    pub max_states: usize,
    /// Full sweeps (one left to right and back each).
    pub sweeps: usize,
    /// The seed of the random initial state.
    pub seed: u64,
    /// Lanczos stops when the residual norm is below this (finite, `> 0`).
    pub lanczos_tol: f64,
    /// The most Lanczos iterations per step (at least 1).
    pub lanczos_iter: usize,
}

impl Su2Dmrg {
    /// `sites` spins `two_s / 2` with `J = 1`, the lowest total spin (0, or one half for an
    /// odd number of half-integer spins), at most `max_states` states a bond, 4 sweeps from
    /// seed 1, and the U(1) engine's Lanczos defaults (a residual of `1e-8`, at most 40
    /// iterations).
    pub fn new(sites: usize, two_s: u32, max_states: usize) -> Self {
        Self {
            sites,
            two_s,
            total_two_s: (sites as u32).wrapping_mul(two_s) % 2,
            j: 1.0,
            max_states,
            sweeps: 4,
            seed: 1,
            lanczos_tol: 1e-8,
            lanczos_iter: 40,
        }
    }
}

/// What [`heisenberg_su2`] found.
#[derive(Debug)]
pub struct Su2Ground {
    /// The ground energy after the last sweep.
    pub energy: f64,
    /// The energy after each sweep.
    pub energies: Vec<f64>,
    /// The wall time of each sweep, in seconds (the first includes the initial state and
    /// environments).
    pub sweep_seconds: Vec<f64>,
    /// The largest number of states a bond kept.
    pub max_states: usize,
    /// The largest number of multiplets a bond kept.
    pub max_multiplets: usize,
    /// The largest discarded weight of the last sweep.
    pub discarded_weight: f64,
}

fn dmrg_error(what: &str, expected: &str, found: String) -> Error {
    Error::Dmrg {
        what: what.into(),
        expected: expected.into(),
        found,
    }
}

/// The MPO bond: two singlets (start, done) and the triplet of `S`.
fn mpo_bond(direction: Direction) -> Result<Su2Leg> {
    Ok(Su2Leg::new(direction, [(0, 2), (2, 1)])?)
}

/// The spherical components `T_(+1) = -S^+ / sqrt 2`, `T_0 = S^z`, `T_(-1) = S^- / sqrt 2` of a
/// spin `two_s / 2`, as dense matrices (row `p`, column `p'`, `m` from `s` down).
fn spherical(two_s: u32) -> [Vec<f64>; 3] {
    let d = two_s as usize + 1;
    let s = f64::from(two_s) / 2.0;
    let m = |i: usize| s - i as f64;
    let mut out = [vec![0.0; d * d], vec![0.0; d * d], vec![0.0; d * d]];
    for i in 0..d {
        out[1][i + d * i] = m(i);
        if i > 0 {
            // S^+ |m(i)> = sqrt(s(s+1) - m(m+1)) |m(i-1)>.
            let up = (s * (s + 1.0) - m(i) * (m(i) + 1.0)).sqrt();
            out[0][(i - 1) + d * i] = -up / 2.0_f64.sqrt();
            out[2][i + d * (i - 1)] = up / 2.0_f64.sqrt();
        }
    }
    out
}

/// The bulk MPO tensor `W[wL, p, p', wR]` (legs `In`, `In`, `Out`, `Out`).
fn mpo(two_s: u32, j: f64) -> Result<Su2Tensor<f64>> {
    let d = two_s as usize + 1;
    let p = Su2Leg::new(Direction::In, [(two_s, 1)])?;
    let s = Su2Structure::new(
        vec![
            mpo_bond(Direction::In)?,
            p.clone(),
            p.dual(),
            mpo_bond(Direction::Out)?,
        ],
        2,
    )?;
    let t = spherical(two_s);
    let at = |wl: usize, a: usize, b: usize, wr: usize| wl + 5 * (a + d * (b + d * wr));
    let mut w = vec![0.0; 25 * d * d];
    for a in 0..d {
        w[at(0, a, a, 0)] = 1.0;
        w[at(1, a, a, 1)] = 1.0;
    }
    // Channel k carries q = 1 - k: open with T_q, close with J (-1)^q T_(-q).
    for k in 0..3 {
        let sign = if k == 1 { 1.0 } else { -1.0 };
        for a in 0..d {
            for b in 0..d {
                w[at(0, a, b, 2 + k)] = t[k][a + d * b];
                w[at(2 + k, a, b, 1)] = j * sign * t[2 - k][a + d * b];
            }
        }
    }
    let tensor = Su2Tensor::from_dense(s, &w)?;
    let back = tensor.to_dense()?;
    let err = back
        .iter()
        .zip(&w)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    if err > 1e-12 {
        return Err(dmrg_error(
            "the SU(2) Heisenberg MPO",
            "an invariant dense form",
            format!("a projection that moves it by {err}"),
        ));
    }
    Ok(tensor)
}

/// An end environment selecting MPO channel `channel` (0: start, 1: done), the identity on
/// the end bond of spin `two_j / 2` (legs `[x, w, y]` with the given directions; `x` and
/// `y` the bond and its dual).
fn boundary(channel: usize, two_j: u32, dirs: [Direction; 3]) -> Result<Su2Tensor<f64>> {
    let end = |d| Su2Leg::new(d, [(two_j, 1)]);
    let s = Su2Structure::new(vec![end(dirs[0])?, mpo_bond(dirs[1])?, end(dirs[2])?], 1)?;
    let d = two_j as usize + 1;
    let mut dense = vec![0.0; d * 5 * d];
    for m in 0..d {
        dense[m + d * (channel + 5 * m)] = 1.0;
    }
    Ok(Su2Tensor::from_dense(s, &dense)?)
}

/// The spins of bond `i` of the initial state of `sites` spins `two_s / 2` of total spin
/// `total / 2`: those the sites on the left can couple to (from spin 0) and the sites on the
/// right can couple to `total` with, up to `2 s` (or the least of them, if larger). The two-site
/// updates grow the larger spins the state needs, as the U(1) engine grows its bonds from a
/// product state; starting with every reachable spin would make the first sweep pay for
/// multiplets (and their recouplings) that truncation drops at once.
fn bond_spins(i: usize, sites: usize, two_s: u32, total: u32) -> Vec<u32> {
    let left = i as u32 * two_s;
    let right = (sites - i) as u32 * two_s;
    let reachable: Vec<u32> = (0..=left)
        .filter(|&j| (left - j).is_multiple_of(2) && j.abs_diff(total) <= right)
        .collect();
    let least = reachable.first().copied().unwrap_or(0);
    reachable
        .into_iter()
        .filter(|&j| j <= least.max(2 * two_s))
        .collect()
}

/// `L' = A+ (L A W)`: the left environment one site on.
fn grow_left(l: &Su2Tensor<f64>, a: &Su2Tensor<f64>, w: &Su2Tensor<f64>) -> Result<Su2Tensor<f64>> {
    let t1 = contract_su2("xwy,ypr->xwpr", l, a)?;
    let t2 = contract_su2("xwpr,wspv->xsrv", &t1, w)?;
    // A's legs (l, p, r) are x, s, z on its adjoint.
    let ad = a.adjoint()?;
    let spec = format!("{},xsrv->z|vr", adjoint_labels(a, "xsz"));
    Ok(contract_su2(&spec, &ad, &t2)?)
}

/// `R' = (B W R) B+`: the right environment one site on.
fn grow_right(
    r: &Su2Tensor<f64>,
    b: &Su2Tensor<f64>,
    w: &Su2Tensor<f64>,
) -> Result<Su2Tensor<f64>> {
    let t1 = contract_su2("lpr,rwx->lpwx", b, r)?;
    let t2 = contract_su2("lpwx,vspw->lvsx", &t1, w)?;
    // B's legs (l, p, r) are z, s, x on its adjoint.
    let bd = b.adjoint()?;
    let spec = format!("lvsx,{}->l|vz", adjoint_labels(b, "zsx"));
    Ok(contract_su2(&spec, &t2, &bd)?)
}

/// The labels of `t.adjoint()`'s legs, given `labels` of `t`'s: its domain's, then its
/// codomain's.
fn adjoint_labels(t: &Su2Tensor<f64>, labels: &str) -> String {
    let (cod, dom) = labels.split_at(t.structure().n_codomain());
    format!("{dom}{cod}")
}

/// The effective Hamiltonian of a pair of sites as two halves, each an environment with its
/// MPO tensor: `LW[x s v | l p]` (left environment and left site) and `WR[v q r | t z]`
/// (right site and right environment). Built once per step, in the leg orders the
/// products need, so that `H_eff theta` is two GEMMs per coupled spin with one
/// permutation between them.
struct Halves {
    lw: Su2Tensor<f64>,
    wr: Su2Tensor<f64>,
}

impl Halves {
    fn new(l: &Su2Tensor<f64>, w: &Su2Tensor<f64>, r: &Su2Tensor<f64>) -> Result<Self> {
        Ok(Self {
            lw: contract_su2("xwl,wspv->xsv|lp", l, w)?,
            wr: contract_su2("vtqu,ruz->vqr|tz", w, r)?,
        })
    }

    /// `H_eff theta` for the two-site `theta[l p | q r]`, in the same form: `LW theta`
    /// needs no permutation, its product is moved once (`[x s v | q r]` to
    /// `[x s | v q r]`), and the product with `WR` is in `theta`'s form already.
    fn apply(&self, theta: &Su2Tensor<f64>) -> Result<Su2Tensor<f64>> {
        let x = contract_su2("xsvlp,lpqr->xsvqr", &self.lw, theta)?;
        Ok(contract_su2("xsvqr,vqrtz->xs|tz", &x, &self.wr)?)
    }
}

/// The reduced blocks scaled by `sqrt(2c + 1)`, flattened: the dense inner product.
fn to_vector(t: &Su2Tensor<f64>) -> Result<Vec<f64>> {
    let s = t.structure();
    let blocks = t.data().to_blocks()?;
    let mut out = Vec::new();
    for (id, b) in blocks.iter().enumerate() {
        let w = f64::from(s.coupled_of(id).expect("a block") + 1).sqrt();
        out.extend(b.iter().map(|x| x * w));
    }
    Ok(out)
}

fn from_vector(s: &Arc<Su2Structure>, v: &[f64]) -> Result<Su2Tensor<f64>> {
    let mut blocks = Vec::new();
    let mut at = 0;
    for b in s.matrix().blocks() {
        let w = f64::from(s.coupled_of(b.id()).expect("a block") + 1).sqrt();
        blocks.push(v[at..at + b.len()].iter().map(|x| x / w).collect());
        at += b.len();
    }
    let data = AsyncArray::from_blocks(Arc::clone(s.matrix()), &blocks)?;
    Ok(Su2Tensor::from_data(Arc::clone(s), data)?)
}

/// The lowest eigenpair of `H_eff` from `theta`, by Lanczos with full reorthogonalization:
/// stops when the residual norm is below `tol`, after `max_iter` products, or when the
/// Krylov space is exhausted (the rule of the U(1) engine's [`crate::dmrg::lanczos`]).
fn lowest(
    h: &Halves,
    theta: &Su2Tensor<f64>,
    tol: f64,
    max_iter: usize,
) -> Result<(f64, Su2Tensor<f64>)> {
    let s = Arc::clone(theta.structure());
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let mut v = to_vector(theta)?;
    let n = dot(&v, &v).sqrt();
    if n == 0.0 {
        return Err(dmrg_error(
            "the two-site state",
            "a nonzero state",
            "zero".into(),
        ));
    }
    v.iter_mut().for_each(|x| *x /= n);
    let max_krylov = v.len().min(max_iter).max(1);
    let (mut basis, mut alpha, mut beta) = (vec![v], Vec::new(), Vec::new());
    let best = loop {
        let k = basis.len() - 1;
        let hv = to_vector(&h.apply(&from_vector(&s, &basis[k])?)?)?;
        let a = dot(&hv, &basis[k]);
        alpha.push(a);
        let mut next = hv;
        for _ in 0..2 {
            for b in &basis {
                let c = dot(&next, b);
                next.iter_mut().zip(b).for_each(|(x, y)| *x -= c * y);
            }
        }
        let best = crate::dmrg::lowest_of_tridiagonal(&alpha, &beta)?;
        let b = dot(&next, &next).sqrt();
        // The residual norm of the Ritz vector, `||H x - e x|| = b |y_k|`.
        let residual = b * best.1[k].abs();
        if basis.len() >= max_krylov || b < 1e-14 || residual < tol {
            break best;
        }
        beta.push(b);
        next.iter_mut().for_each(|x| *x /= b);
        basis.push(next);
    };
    let mut g = vec![0.0; basis[0].len()];
    for (c, b) in best.1.iter().zip(&basis) {
        g.iter_mut().zip(b).for_each(|(x, y)| *x += c * y);
    }
    Ok((best.0, from_vector(&s, &g)?))
}

/// The ground state of the open spin-`s` Heisenberg chain `J sum S_i . S_(i+1)` by two-site
/// DMRG with SU(2) symmetry: the lowest state of total spin `total_two_s / 2`.
///
/// ```
/// use tessera_mps::su2::{Su2Dmrg, heisenberg_su2};
///
/// let mut run = Su2Dmrg::new(6, 1, 20);
/// run.sweeps = 2;
/// let g = heisenberg_su2(&run)?;
/// assert!((g.energy - -2.493577133887926).abs() < 1e-10); // exact, L = 6
/// # Ok::<(), tessera_mps::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Dmrg`] for fewer than two sites, `two_s = 0`, a total spin the chain cannot
/// couple to (above `sites * s`, or of the wrong parity), `max_states`, `sweeps` or
/// `lanczos_iter` of 0, or a `lanczos_tol` that is not finite and positive; the errors of
/// the contractions and factorizations.
pub fn heisenberg_su2(run: &Su2Dmrg) -> Result<Su2Ground> {
    let n = run.sites;
    let most = u32::try_from(n)
        .ok()
        .and_then(|n| n.checked_mul(run.two_s))
        .unwrap_or(u32::MAX);
    let (total, parity) = (run.total_two_s, most.checked_sub(run.total_two_s));
    if n < 2 || run.two_s == 0 || parity.is_none_or(|p| !p.is_multiple_of(2)) {
        return Err(dmrg_error(
            "the SU(2) Heisenberg chain",
            "at least two sites of spin s > 0 that couple to the total spin",
            format!("{n} sites of 2s = {} and a total 2S = {total}", run.two_s),
        ));
    }
    for (what, bad, found) in [
        (
            "max_states",
            run.max_states == 0,
            run.max_states.to_string(),
        ),
        ("sweeps", run.sweeps == 0, run.sweeps.to_string()),
        (
            "lanczos_iter",
            run.lanczos_iter == 0,
            run.lanczos_iter.to_string(),
        ),
    ] {
        if bad {
            return Err(dmrg_error(&format!("setting {what}"), "at least 1", found));
        }
    }
    if !(run.lanczos_tol.is_finite() && run.lanczos_tol > 0.0) {
        return Err(dmrg_error(
            "setting lanczos_tol",
            "a finite tolerance above 0",
            run.lanczos_tol.to_string(),
        ));
    }
    let mut clock = std::time::Instant::now();
    let w = mpo(run.two_s, run.j)?;
    let p = Su2Leg::new(Direction::In, [(run.two_s, 1)])?;
    let bond = |i: usize, d| {
        Su2Leg::new(
            d,
            bond_spins(i, n, run.two_s, total)
                .into_iter()
                .map(|j| (j, 1)),
        )
    };
    // A random state, then right-canonical from the right end.
    let mut m: Vec<Su2Tensor<f64>> = (0..n)
        .map(|i| {
            let s = Su2Structure::new(
                vec![
                    bond(i, Direction::In)?,
                    p.clone(),
                    bond(i + 1, Direction::Out)?,
                ],
                2,
            )?;
            Ok(Su2Tensor::random(s, run.seed + i as u64)?)
        })
        .collect::<Result<_>>()?;
    for i in (1..n).rev() {
        let f = svd_su2(&m[i].permuted(&[0, 1, 2], 1)?, &Truncation::none())?;
        let us = f.s.scale_columns(f.u.data())?;
        let us = Su2Tensor::from_data(Arc::clone(f.u.structure()), us)?;
        m[i - 1] = contract_su2("lpr,rb->lp|b", &m[i - 1], &us)?;
        m[i] = f.vt;
    }
    let l0 = boundary(0, 0, [Direction::In, Direction::Out, Direction::Out])?;
    let rn = boundary(1, total, [Direction::In, Direction::In, Direction::Out])?;
    let mut left: Vec<Option<Su2Tensor<f64>>> = (0..=n).map(|_| None).collect();
    let mut right: Vec<Option<Su2Tensor<f64>>> = (0..=n).map(|_| None).collect();
    left[0] = Some(l0);
    right[n] = Some(rn);
    for i in (2..n).rev() {
        right[i] = Some(grow_right(
            right[i + 1].as_ref().expect("built"),
            &m[i],
            &w,
        )?);
    }
    let mut out = Su2Ground {
        energy: f64::NAN,
        energies: Vec::new(),
        sweep_seconds: Vec::new(),
        max_states: 0,
        max_multiplets: 0,
        discarded_weight: 0.0,
    };
    for _ in 0..run.sweeps {
        out.discarded_weight = 0.0;
        let mut energy = f64::NAN;
        // Left to right: the centre moves from site 0 to site n - 1.
        for i in 0..n - 1 {
            let envs = (&left[i], &right[i + 2]);
            let (e, f) = solve_pair(&m[i], &m[i + 1], envs, &w, run, &mut out)?;
            energy = e;
            let svt = f.s.scale_rows(f.vt.data())?;
            m[i + 1] = Su2Tensor::from_data(Arc::clone(f.vt.structure()), svt)?;
            m[i] = f.u;
            left[i + 1] = Some(grow_left(left[i].as_ref().expect("built"), &m[i], &w)?);
        }
        // Right to left: back to site 0.
        for i in (0..n - 1).rev() {
            let envs = (&left[i], &right[i + 2]);
            let (e, f) = solve_pair(&m[i], &m[i + 1], envs, &w, run, &mut out)?;
            energy = e;
            let us = f.s.scale_columns(f.u.data())?;
            m[i] = Su2Tensor::from_data(Arc::clone(f.u.structure()), us)?;
            m[i + 1] = f.vt;
            right[i + 1] = Some(grow_right(
                right[i + 2].as_ref().expect("built"),
                &m[i + 1],
                &w,
            )?);
        }
        out.energies.push(energy);
        out.sweep_seconds.push(clock.elapsed().as_secs_f64());
        clock = std::time::Instant::now();
        out.energy = energy;
    }
    Ok(out)
}

/// The lowest state of the pair of sites `a b` between the environments `envs`, split
/// (truncated) into `U S V+`; the bond is noted in `out`.
fn solve_pair(
    a: &Su2Tensor<f64>,
    b: &Su2Tensor<f64>,
    envs: (&Option<Su2Tensor<f64>>, &Option<Su2Tensor<f64>>),
    w: &Su2Tensor<f64>,
    run: &Su2Dmrg,
    out: &mut Su2Ground,
) -> Result<(f64, tessera_coalesce::Su2Svd<f64>)> {
    let theta = contract_su2("lpr,rqs->lp|qs", a, b)?;
    let (l, r) = (
        envs.0.as_ref().expect("built"),
        envs.1.as_ref().expect("built"),
    );
    let h = Halves::new(l, w, r)?;
    let (e, g) = lowest(&h, &theta, run.lanczos_tol, run.lanczos_iter)?;
    let f = svd_su2(&g, &Truncation::max_dim(run.max_states))?;
    out.max_states = out.max_states.max(f.bond.dim());
    out.max_multiplets = out.max_multiplets.max(f.bond.reduced_dim());
    out.discarded_weight = out.discarded_weight.max(f.discarded_weight);
    Ok((e, f))
}
