//! Two-site DMRG with SU(2) symmetry: the Heisenberg chain of spin `s`, and the Fermi-Hubbard
//! chain with SU(2) x U(1) (spin and electron number).
//!
//! Owns [`dmrg_su2`] (the driver), [`Su2Dmrg`] (its settings), [`Su2Model`] (the chains it
//! solves) and [`Su2Ground`] (its result): the MPS, the MPO and the environments are
//! [`Su2Tensor`]s, every contraction is [`contract_su2`] (one GEMM per coupled spin and
//! charge), every split is [`svd_su2`] (multiplets kept whole, `max_states` counting
//! states). Invariants:
//!
//! - The MPO is built from its dense form and checked to be invariant (projection loses
//!   nothing). Its bond starts with two singlets of charge 0 (start, done); the channels
//!   between carry tensor operators: the triplet of `S` for Heisenberg (the spherical
//!   components `T_q`), for Hubbard the spinors `c+ P` and `P c` (charges `+1` and `-1`,
//!   `P` the site's parity: the Jordan-Wigner string, itself a scalar, so the fermionic
//!   signs need no braiding of the tensors).
//! - Sites left of the centre are left-canonical, right of it right-canonical; the Lanczos
//!   vectors are the reduced blocks scaled by `sqrt(2c + 1)`, so their Euclidean inner
//!   product is the dense one and the effective Hamiltonian is symmetric on them.

use crate::Result;
use crate::error::Error;
use crate::sites::Site;
use std::collections::BTreeSet;
use std::sync::Arc;
use tessera_blocks::Direction;
use tessera_blocks::su2::{Su2Leg, Su2Structure, Su2Tensor};
use tessera_blocks::{AsyncArray, Sector as _};
use tessera_coalesce::{Truncation, svd_su2};
use tessera_contract::contract_su2;

/// The chain an SU(2) DMRG solves (open boundaries).
#[derive(Clone, Debug, PartialEq)]
pub enum Su2Model {
    /// The Heisenberg chain `J sum S_i . S_(i+1)` of spins `two_s / 2` (1 for spin one
    /// half, 2 for spin one).
    Heisenberg {
        /// The spin of a site, as `2s`.
        two_s: u32,
        /// The exchange `J`.
        j: f64,
    },
    /// The Fermi-Hubbard chain `-t sum_(i,s) (c+_(i,s) c_(i+1,s) + h.c.) + U sum_i
    /// n_(i,up) n_(i,dn)` with `electrons` electrons: SU(2) x U(1), a site's sectors the
    /// empty singlet, the one-electron doublet and the two-electron singlet.
    Hubbard {
        /// The hopping `t`.
        t: f64,
        /// The on-site interaction `U`.
        u: f64,
        /// The number of electrons (at most two per site).
        electrons: u32,
    },
}

/// Settings of [`dmrg_su2`].
#[derive(Clone, Debug)]
pub struct Su2Dmrg {
    /// Sites.
    pub sites: usize,
    /// The chain.
    pub model: Su2Model,
    /// The total spin of the state sought, as `2S`: the lowest state of that total spin is
    /// found (0 for the singlet; the lowest states of two spins give gaps, such as the
    /// Haldane gap of the spin-one chain). Its parity must be that of the number of
    /// half-integer spins (`sites * two_s`, or the electrons).
    pub total_two_s: u32,
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
    /// `sites` spins `two_s / 2` of the Heisenberg chain with `J = 1`, the lowest total
    /// spin (0, or one half for an odd number of half-integer spins), at most `max_states`
    /// states a bond, 4 sweeps from seed 1, and the U(1) engine's Lanczos defaults (a
    /// residual of `1e-8`, at most 40 iterations).
    pub fn new(sites: usize, two_s: u32, max_states: usize) -> Self {
        Self {
            sites,
            model: Su2Model::Heisenberg { two_s, j: 1.0 },
            total_two_s: (sites as u32).wrapping_mul(two_s) % 2,
            max_states,
            sweeps: 4,
            seed: 1,
            lanczos_tol: 1e-8,
            lanczos_iter: 40,
        }
    }

    /// The Hubbard chain of `sites` sites and `electrons` electrons with hopping `t` and
    /// interaction `u`, the lowest total spin (0, or one half for an odd number of
    /// electrons), and the other settings of [`new`](Self::new).
    ///
    /// ```
    /// use tessera_mps::su2::{Su2Dmrg, dmrg_su2};
    ///
    /// // Two sites at half filling: (U - sqrt(U^2 + 16 t^2)) / 2.
    /// let g = dmrg_su2(&Su2Dmrg::hubbard(2, 1.0, 4.0, 2, 16))?;
    /// assert!((g.energy - (4.0 - 32.0_f64.sqrt()) / 2.0).abs() < 1e-10);
    /// # Ok::<(), tessera_mps::Error>(())
    /// ```
    pub fn hubbard(sites: usize, t: f64, u: f64, electrons: u32, max_states: usize) -> Self {
        Self {
            model: Su2Model::Hubbard { t, u, electrons },
            total_two_s: electrons % 2,
            ..Self::new(sites, 1, max_states)
        }
    }
}

/// What [`dmrg_su2`] found.
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

/// A sector of a leg: `(two_j, charge)`.
type Sector = (u32, i32);

/// A chain as the driver needs it: the site, the bulk MPO tensor and its bond, and the
/// sector of the state sought.
struct Chain {
    /// The physical leg (`In`).
    site: Su2Leg,
    /// The bulk MPO tensor `W[wL, p, p', wR]` (legs `In`, `In`, `Out`, `Out`).
    w: Su2Tensor<f64>,
    /// The MPO bond (`In`): its first sector is `(0, 0)` with the channels start (dense 0)
    /// and done (dense 1).
    mpo_bond: Su2Leg,
    /// The total spin and charge of the state.
    target: Sector,
}

impl Chain {
    /// The chain of `run`, with its settings checked.
    fn of(run: &Su2Dmrg) -> Result<Self> {
        let n = run.sites;
        let total = run.total_two_s;
        let (site, (dense, mpo_bond), target, what) = match run.model {
            Su2Model::Heisenberg { two_s, j } => {
                let most = u32::try_from(n)
                    .ok()
                    .and_then(|n| n.checked_mul(two_s))
                    .unwrap_or(u32::MAX);
                let parity = most.checked_sub(total);
                if n < 2 || two_s == 0 || parity.is_none_or(|p| !p.is_multiple_of(2)) {
                    return Err(dmrg_error(
                        "the SU(2) Heisenberg chain",
                        "at least two sites of spin s > 0 that couple to the total spin",
                        format!("{n} sites of 2s = {two_s} and a total 2S = {total}"),
                    ));
                }
                finite("J", j)?;
                (
                    Su2Leg::new(Direction::In, [(two_s, 1)])?,
                    heisenberg_mpo(two_s, j),
                    (total, 0),
                    "the SU(2) Heisenberg MPO",
                )
            }
            Su2Model::Hubbard { t, u, electrons } => {
                // At most min(N, 2L - N) electrons are unpaired.
                let free = u32::try_from(n)
                    .ok()
                    .and_then(|n| n.checked_mul(2))
                    .and_then(|m| m.checked_sub(electrons))
                    .map(|holes| holes.min(electrons));
                if n < 2 || free.is_none_or(|f| total > f || !(f - total).is_multiple_of(2)) {
                    return Err(dmrg_error(
                        "the SU(2) Hubbard chain",
                        "at least two sites, at most two electrons a site, and a total spin \
                         the electrons couple to",
                        format!("{n} sites, {electrons} electrons and a total 2S = {total}"),
                    ));
                }
                finite("t", t)?;
                finite("U", u)?;
                (
                    Su2Leg::with_charges(Direction::In, [((0, 0), 1), ((1, 1), 1), ((0, 2), 1)])?,
                    hubbard_mpo(t, u)?,
                    (total, electrons as i32),
                    "the SU(2) Hubbard MPO",
                )
            }
        };
        let w = invariant_mpo(&site, &mpo_bond, &dense, what)?;
        Ok(Self {
            site,
            w,
            mpo_bond,
            target,
        })
    }

    /// The sectors of a site, with multiplicity.
    fn site_sectors(&self) -> Vec<Sector> {
        self.site
            .sectors()
            .iter()
            .zip(self.site.charges())
            .map(|(&(j, _), &q)| (j, q))
            .collect()
    }
}

fn finite(what: &str, x: f64) -> Result<()> {
    if x.is_finite() {
        Ok(())
    } else {
        Err(dmrg_error(
            &format!("coupling {what}"),
            "a finite number",
            x.to_string(),
        ))
    }
}

/// The bulk MPO `W[wL, p, p', wR]` of `dense` (column-major, `p` the row of each
/// operator) over `site` and `mpo_bond`, checked to be invariant.
fn invariant_mpo(
    site: &Su2Leg,
    mpo_bond: &Su2Leg,
    dense: &[f64],
    what: &str,
) -> Result<Su2Tensor<f64>> {
    let s = Su2Structure::new(
        vec![mpo_bond.clone(), site.clone(), site.dual(), mpo_bond.dual()],
        2,
    )?;
    let tensor = Su2Tensor::from_dense(s, dense)?;
    let back = tensor.to_dense()?;
    let err = back
        .iter()
        .zip(dense)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    if err > 1e-12 {
        return Err(dmrg_error(
            what,
            "an invariant dense form",
            format!("a projection that moves it by {err}"),
        ));
    }
    Ok(tensor)
}

/// A dense MPO `W[wl, a, b, wr]` (column-major) of bond dimension `k` over a site of
/// dimension `d`, filled operator by operator.
struct DenseMpo {
    d: usize,
    k: usize,
    w: Vec<f64>,
}

impl DenseMpo {
    fn new(d: usize, k: usize) -> Self {
        Self {
            d,
            k,
            w: vec![0.0; k * d * d * k],
        }
    }

    /// `W[wl, a, b, wr] += x op[a + d b]` for every `a`, `b` (`op` column-major, `a` the
    /// row: the state the operator leads to).
    fn set(&mut self, wl: usize, wr: usize, op: &[f64], x: f64) {
        let (d, k) = (self.d, self.k);
        for a in 0..d {
            for b in 0..d {
                self.w[wl + k * (a + d * (b + d * wr))] += x * op[a + d * b];
            }
        }
    }
}

fn identity(d: usize) -> Vec<f64> {
    let mut m = vec![0.0; d * d];
    (0..d).for_each(|i| m[i + d * i] = 1.0);
    m
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

/// The dense Heisenberg MPO and its bond: two singlets (start, done) and the triplet of
/// `S`; channel `k` carries `q = 1 - k`, opened with `T_q` and closed with
/// `J (-1)^q T_(-q)`.
fn heisenberg_mpo(two_s: u32, j: f64) -> (Vec<f64>, Su2Leg) {
    let d = two_s as usize + 1;
    let t = spherical(two_s);
    let mut w = DenseMpo::new(d, 5);
    w.set(0, 0, &identity(d), 1.0);
    w.set(1, 1, &identity(d), 1.0);
    for k in 0..3 {
        let sign = if k == 1 { 1.0 } else { -1.0 };
        w.set(0, 2 + k, &t[k], 1.0);
        w.set(2 + k, 1, &t[2 - k], j * sign);
    }
    let bond = Su2Leg::new(Direction::In, [(0, 2), (2, 1)]).expect("valid sectors");
    (w.w, bond)
}

/// The dense Hubbard MPO and its bond, from the operators of [`Site::electron`] (the U(1)
/// engine's electron, `|up dn> = c+_up c+_dn |0>`), taken to the SU(2) site's dense order:
/// `|0>`, `|up dn>` (the singlets of charge 0 and 2), `|up>`, `|dn>` (the doublet). The
/// bond: start, done (charge 0), the spinor `P c` (charge -1: `m = 1/2` is `P c_dn`,
/// `m = -1/2` is `-P c_up`) closed by `c+_dn`, `-c+_up`, and the spinor `c+ P` (charge +1:
/// `c+_up P`, `c+_dn P`) closed by `c_up`, `c_dn`; each pair times `-t` is a hop, the
/// parity `P` between them the Jordan-Wigner string.
fn hubbard_mpo(t: f64, u: f64) -> Result<(Vec<f64>, Su2Leg)> {
    let d = 4;
    let electron = Site::electron();
    // SU(2) dense state `a` is the electron's state `order[a]`.
    let order = [0, 3, 1, 2];
    // The operator `name` column-major in the SU(2) order, times `P` on the left (rows
    // signed) or on the right (columns signed) if asked.
    let op = |name: &str, p_left: bool, p_right: bool| -> Result<Vec<f64>> {
        let o = electron.operator(name)?;
        let parity = |a: usize| {
            if electron.charge_of(order[a]).parity() {
                -1.0
            } else {
                1.0
            }
        };
        Ok((0..d * d)
            .map(|k| {
                let (a, b) = (k % d, k / d);
                let mut x = o.get(order[a], order[b]);
                if p_left {
                    x *= parity(a);
                }
                if p_right {
                    x *= parity(b);
                }
                x
            })
            .collect())
    };
    let mut w = DenseMpo::new(d, 6);
    w.set(0, 0, &identity(d), 1.0);
    w.set(1, 1, &identity(d), 1.0);
    w.set(0, 1, &op("NupNdn", false, false)?, u);
    // Charge -1 (dense 2, 3): P c, closed by c+.
    w.set(0, 2, &op("Cdn", true, false)?, 1.0);
    w.set(0, 3, &op("Cup", true, false)?, -1.0);
    w.set(2, 1, &op("Cdagdn", false, false)?, -t);
    w.set(3, 1, &op("Cdagup", false, false)?, t);
    // Charge +1 (dense 4, 5): c+ P, closed by c.
    w.set(0, 4, &op("Cdagup", false, true)?, 1.0);
    w.set(0, 5, &op("Cdagdn", false, true)?, 1.0);
    w.set(4, 1, &op("Cup", false, false)?, -t);
    w.set(5, 1, &op("Cdn", false, false)?, -t);
    let bond = Su2Leg::with_charges(Direction::In, [((0, 0), 2), ((1, -1), 1), ((1, 1), 1)])?;
    Ok((w.w, bond))
}

/// An end environment selecting MPO channel `channel` (0: start, 1: done), the identity on
/// the end bond of sector `end` (legs `[x, w, y]` with the given directions; `x` and `y` the
/// bond and its dual).
fn boundary(
    chain: &Chain,
    channel: usize,
    end: Sector,
    dirs: [Direction; 3],
) -> Result<Su2Tensor<f64>> {
    let leg = |d| Su2Leg::with_charges(d, [(end, 1)]);
    let w = match dirs[1] {
        Direction::In => chain.mpo_bond.clone(),
        Direction::Out => chain.mpo_bond.dual(),
    };
    let k = w.dim();
    let s = Su2Structure::new(vec![leg(dirs[0])?, w, leg(dirs[2])?], 1)?;
    let d = end.0 as usize + 1;
    let mut dense = vec![0.0; d * k * d];
    for m in 0..d {
        dense[m + d * (channel + k * m)] = 1.0;
    }
    Ok(Su2Tensor::from_dense(s, &dense)?)
}

/// The sectors of every bond of the initial state (bond `i` left of site `i`): those the
/// sites on the left can couple to from `(0, 0)` and the sites on the right can couple to
/// the target with. Of those, the charges nearest the target's even share (within one) and
/// the spins up to twice the largest site spin (or the least of them, if larger): the
/// two-site updates grow the sectors the state needs, as the U(1) engine grows its bonds
/// from a product state; starting with every reachable sector would make the first sweep
/// pay for multiplets (and their recouplings) that truncation drops at once.
///
/// The reachable sets are built within that window only (charges within a site's largest
/// charge plus one of the share, spins up to the target's plus twice the widest site's):
/// the full sets grow as `i^2` sectors a bond for Hubbard, and a 400-site chain spent 3.7 s
/// on them (1.5 ms within the window). A sector of the window is reachable within the window
/// (the share moves by at most a site's largest charge per site, and a spin can be reached
/// without passing above it or the widest site spin), so the window loses nothing.
fn bond_sectors(chain: &Chain, sites: usize) -> Vec<Vec<Sector>> {
    let site = chain.site_sectors();
    let widest = site.iter().map(|s| s.0).max().unwrap_or(0);
    let most_charge = site.iter().map(|s| i64::from(s.1.abs())).max().unwrap_or(0);
    let (n, total) = (sites as i64, i64::from(chain.target.1));
    // |q - total i / n|, in units of 1 / n.
    let off = |i: usize, q: i32| (i64::from(q) * n - total * i as i64).abs();
    let spin_cap = chain.target.0 + 2 * widest;
    let in_window = |i: usize, (j, q): Sector| j <= spin_cap && off(i, q) <= (most_charge + 1) * n;
    let fuse = |a: Sector, b: Sector, sign: i32| {
        let (lo, hi) = (a.0.abs_diff(b.0), a.0 + b.0);
        (lo..=hi).step_by(2).map(move |j| (j, a.1 + sign * b.1))
    };
    let mut left = vec![BTreeSet::from([(0, 0)])];
    for i in 0..sites {
        let next = left[i]
            .iter()
            .flat_map(|&a| site.iter().flat_map(move |&b| fuse(a, b, 1)))
            .filter(|&x| in_window(i + 1, x))
            .collect();
        left.push(next);
    }
    let mut right = vec![BTreeSet::new(); sites + 1];
    right[sites].insert(chain.target);
    for i in (0..sites).rev() {
        right[i] = right[i + 1]
            .iter()
            .flat_map(|&a| site.iter().flat_map(move |&b| fuse(a, b, -1)))
            .filter(|&x| in_window(i, x))
            .collect();
    }
    (0..=sites)
        .map(|i| {
            let allowed: Vec<Sector> = left[i].intersection(&right[i]).copied().collect();
            let best = allowed.iter().map(|s| off(i, s.1)).min().unwrap_or(0);
            let near: Vec<Sector> = allowed
                .into_iter()
                .filter(|s| off(i, s.1) <= best + n)
                .collect();
            near.iter()
                .copied()
                .filter(|&(j, q)| {
                    let least = near.iter().filter(|s| s.1 == q).map(|s| s.0).min();
                    j <= least.unwrap_or(0).max(2 * widest)
                })
                .collect()
        })
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

/// The ground state of a chain by two-site DMRG with SU(2) symmetry (SU(2) x U(1) for
/// Hubbard): the lowest state of total spin `total_two_s / 2` (and, for Hubbard, of the
/// given electron number).
///
/// ```
/// use tessera_mps::su2::{Su2Dmrg, dmrg_su2};
///
/// let mut run = Su2Dmrg::new(6, 1, 20);
/// run.sweeps = 2;
/// let g = dmrg_su2(&run)?;
/// assert!((g.energy - -2.493577133887926).abs() < 1e-10); // exact, L = 6
/// # Ok::<(), tessera_mps::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Dmrg`] for fewer than two sites, a Heisenberg spin `two_s = 0`, more than two
/// electrons a site, a total spin the chain cannot couple to (too large, or of the wrong
/// parity), a coupling that is not finite, `max_states`, `sweeps` or `lanczos_iter` of 0,
/// or a `lanczos_tol` that is not finite and positive; the errors of the contractions and
/// factorizations.
pub fn dmrg_su2(run: &Su2Dmrg) -> Result<Su2Ground> {
    let n = run.sites;
    let chain = Chain::of(run)?;
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
    let w = &chain.w;
    let p = &chain.site;
    let sectors = bond_sectors(&chain, n);
    let bond = |i: usize, d| Su2Leg::with_charges(d, sectors[i].iter().map(|&s| (s, 1)));
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
    let l0 = boundary(
        &chain,
        0,
        (0, 0),
        [Direction::In, Direction::Out, Direction::Out],
    )?;
    let rn = boundary(
        &chain,
        1,
        chain.target,
        [Direction::In, Direction::In, Direction::Out],
    )?;
    let mut left: Vec<Option<Su2Tensor<f64>>> = (0..=n).map(|_| None).collect();
    let mut right: Vec<Option<Su2Tensor<f64>>> = (0..=n).map(|_| None).collect();
    left[0] = Some(l0);
    right[n] = Some(rn);
    for i in (2..n).rev() {
        right[i] = Some(grow_right(right[i + 1].as_ref().expect("built"), &m[i], w)?);
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
            let (e, f) = solve_pair(&m[i], &m[i + 1], envs, w, run, &mut out)?;
            energy = e;
            let svt = f.s.scale_rows(f.vt.data())?;
            m[i + 1] = Su2Tensor::from_data(Arc::clone(f.vt.structure()), svt)?;
            m[i] = f.u;
            left[i + 1] = Some(grow_left(left[i].as_ref().expect("built"), &m[i], w)?);
        }
        // Right to left: back to site 0.
        for i in (0..n - 1).rev() {
            let envs = (&left[i], &right[i + 2]);
            let (e, f) = solve_pair(&m[i], &m[i + 1], envs, w, run, &mut out)?;
            energy = e;
            let us = f.s.scale_columns(f.u.data())?;
            m[i] = Su2Tensor::from_data(Arc::clone(f.u.structure()), us)?;
            m[i + 1] = f.vt;
            right[i + 1] = Some(grow_right(
                right[i + 2].as_ref().expect("built"),
                &m[i + 1],
                w,
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
