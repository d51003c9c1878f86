//! The engine against dense references on a spin chain built here (an XXZ chain in random
//! site fields, so no two sites are alike), its checkpoints and its spilling.

use super::*;
use std::path::PathBuf;
use std::sync::Arc;
use tessera_blocks::{
    AsyncArray, BlockStructure, Direction, FermionParity, FermionicU1, Leg, Product, U1,
};
use tessera_contract::{PlanCache, Strategy};
use tessera_core::Runtime;

/// The physical leg: spin down (`U1(-1)`), spin up (`U1(1)`).
fn spin() -> Leg<U1> {
    Leg::new(Direction::In, [(U1(-1), 1), (U1(1), 1)]).unwrap()
}

/// The model: `H = sum_i [Sz Sz + delta (S+ S- + S- S+) / 2](i, i+1) + sum_i h_i Sz_i`.
struct Xxz {
    delta: f64,
    fields: Vec<f64>,
}

impl Xxz {
    fn new(l: usize, delta: f64, seed: u64) -> Self {
        // A small linear congruential sequence: fields in [-0.5, 0.5).
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let fields = (0..l)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5
            })
            .collect();
        Self { delta, fields }
    }

    /// The MPO, bond states (S- placed, start, Sz placed, done, S+ placed) on a leg of
    /// charges (-2, 0, 0, 0, +2); site 0 keeps the start row, the last site the done column.
    fn mpo(&self) -> Mpo<U1> {
        let l = self.fields.len();
        let m = Leg::new(Direction::In, [(U1(-2), 1), (U1(0), 3), (U1(2), 1)]).unwrap();
        let edge = Leg::new(Direction::In, [(U1(0), 1)]).unwrap();
        let (minus, start, sz_, done, plus) = (0, 1, 2, 3, 4);
        let tensors = (0..l)
            .map(|i| {
                let rows: Vec<usize> = if i == 0 {
                    vec![start]
                } else {
                    (0..5).collect()
                };
                let cols: Vec<usize> = if i == l - 1 {
                    vec![done]
                } else {
                    (0..5).collect()
                };
                let a = if i == 0 { edge.clone() } else { m.clone() };
                let b = if i == l - 1 { edge.dual() } else { m.dual() };
                let s = BlockStructure::new([a, spin()], [spin().dual(), b], U1(0)).unwrap();
                let (nr, nc) = (rows.len(), cols.len());
                let mut dense = vec![0.0; nr * 4 * nc];
                for o in 0..2 {
                    for inp in 0..2 {
                        let id = f64::from(u8::from(o == inp));
                        let sz = if o == inp { inp as f64 - 0.5 } else { 0.0 };
                        let sp = f64::from(u8::from(o == 1 && inp == 0));
                        let sm = f64::from(u8::from(o == 0 && inp == 1));
                        let entry = |a: usize, b: usize| match (a, b) {
                            (x, y) if x == start && y == start => id,
                            (x, y) if x == done && y == done => id,
                            (x, y) if x == start && y == plus => sp,
                            (x, y) if x == start && y == minus => sm,
                            (x, y) if x == start && y == sz_ => sz,
                            (x, y) if x == plus && y == done => 0.5 * self.delta * sm,
                            (x, y) if x == minus && y == done => 0.5 * self.delta * sp,
                            (x, y) if x == sz_ && y == done => sz,
                            (x, y) if x == start && y == done => self.fields[i] * sz,
                            _ => 0.0,
                        };
                        for (r, &a) in rows.iter().enumerate() {
                            for (c, &b) in cols.iter().enumerate() {
                                dense[r + nr * (o + 2 * (inp + 2 * c))] = entry(a, b);
                            }
                        }
                    }
                }
                AsyncArray::from_dense(s, &dense).unwrap()
            })
            .collect();
        Mpo::new(tensors).unwrap()
    }

    /// The dense Hamiltonian in the sector of `ups` spins up (bit `i` set: spin `i` up),
    /// built from the terms directly, and its basis.
    fn dense(&self, ups: usize) -> (faer::Mat<f64>, Vec<u32>) {
        let l = self.fields.len();
        let basis: Vec<u32> = (0..1u32 << l)
            .filter(|b| b.count_ones() as usize == ups)
            .collect();
        let mut h = faer::Mat::<f64>::zeros(basis.len(), basis.len());
        for (j, &b) in basis.iter().enumerate() {
            for i in 0..l {
                let up = (b >> i) & 1 == 1;
                h[(j, j)] += self.fields[i] * if up { 0.5 } else { -0.5 };
            }
            for i in 0..l - 1 {
                let (x, y) = ((b >> i) & 1, (b >> (i + 1)) & 1);
                h[(j, j)] += if x == y { 0.25 } else { -0.25 };
                if x != y {
                    let k = basis.binary_search(&(b ^ (0b11 << i))).unwrap();
                    h[(k, j)] += 0.5 * self.delta;
                }
            }
        }
        (h, basis)
    }

    fn exact(&self, ups: usize) -> f64 {
        self.dense(ups)
            .0
            .self_adjoint_eigenvalues(faer::Side::Lower)
            .unwrap()[0]
    }

    /// A product state with `ups` spins up, spread out.
    fn start(&self, ups: usize) -> Mps<U1> {
        let l = self.fields.len();
        let states: Vec<usize> = (0..l)
            .map(|i| usize::from((i + 1) * ups / l > i * ups / l))
            .collect();
        Mps::product_state(&vec![spin(); l], &states).unwrap()
    }
}

/// The state of an MPS as a dense vector (index `sum_i s_i 2^i`).
fn dense_state(mps: &Mps<U1>) -> Vec<f64> {
    let mut psi = vec![1.0];
    let mut p = 1;
    for a in mps.tensors() {
        let legs = a.structure().legs();
        let (chi, d, next) = (legs[0].dim(), legs[1].dim(), legs[2].dim());
        let t = a.to_dense().unwrap();
        let mut out = vec![0.0; p * d * next];
        for r in 0..next {
            for s in 0..d {
                for k in 0..chi {
                    let x = t[k + chi * (s + d * r)];
                    if x != 0.0 {
                        for q in 0..p {
                            out[(q + p * s) + p * d * r] += psi[q + p * k] * x;
                        }
                    }
                }
            }
        }
        psi = out;
        p *= d;
    }
    psi
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-dmrg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn settings(chi: usize, sweeps: usize, tol: f64) -> Settings {
    Settings {
        sweeps,
        tol,
        ..Settings::new(chi)
    }
}

#[test]
fn the_ground_state_and_its_spectra_are_the_dense_ones() {
    let rt = Runtime::new(2).unwrap();
    rt.enter(|| {
        let (l, ups) = (8, 3);
        let model = Xxz::new(l, 0.8, 3);
        let exact = model.exact(ups);
        // chi = 16 = 2^(L/2): no truncation, so DMRG is exact.
        let mut run = Dmrg::new(model.mpo(), model.start(ups), settings(16, 20, 1e-12)).unwrap();
        let mut sweeps = Vec::new();
        let e = run.run(|_| {}, |s| sweeps.push(*s)).unwrap();
        assert!((e - exact).abs() < 1e-10, "{e} vs {exact}");
        assert_eq!(run.energies().len(), sweeps.len());
        assert!(
            sweeps
                .iter()
                .zip(run.energies())
                .all(|(s, e)| s.energy == *e)
        );
        assert!(run.discarded_weights().iter().all(|&w| w < 1e-20));
        // The MPS is the dense ground state: its energy and its Schmidt values.
        let psi = dense_state(&run.mps().unwrap());
        let (h, basis) = model.dense(ups);
        let mut norm = 0.0;
        let mut energy = 0.0;
        for (j, &b) in basis.iter().enumerate() {
            norm += psi[b as usize].powi(2);
            for (k, &c) in basis.iter().enumerate() {
                energy += psi[c as usize] * h[(k, j)] * psi[b as usize];
            }
        }
        assert!((norm - 1.0).abs() < 1e-10, "{norm}");
        assert!((energy - exact).abs() < 1e-9, "{energy} vs {exact}");
        for bond in 0..l - 1 {
            let rows = 1usize << (bond + 1);
            let m = faer::Mat::<f64>::from_fn(rows, (1 << l) / rows, |i, j| psi[i + rows * j]);
            let want = m.singular_values().unwrap();
            let got = run.spectrum(bond).unwrap().sorted();
            assert_eq!(got.len(), run.bond_dims()[bond]);
            for (k, &w) in want.iter().enumerate() {
                let g = got.get(k).copied().unwrap_or(0.0);
                assert!((g - w).abs() < 1e-8, "bond {bond}, value {k}: {g} vs {w}");
            }
        }
    });
}

#[test]
fn a_truncated_run_is_variational_and_reports_its_discarded_weight() {
    let rt = Runtime::new(2).unwrap();
    rt.enter(|| {
        let model = Xxz::new(12, 1.0, 5);
        let exact = model.exact(6);
        let mut run = Dmrg::new(model.mpo(), model.start(6), settings(6, 10, 1e-10)).unwrap();
        let e = run.run(|_| {}, |_| {}).unwrap();
        assert!(e > exact && e - exact < 1e-2, "{e} vs {exact}");
        assert!(run.bond_dims().iter().all(|&d| d <= 6));
        let worst = run.discarded_weights().iter().copied().fold(0.0, f64::max);
        assert!(worst > 1e-8 && worst < 1e-2, "{worst}");
        // The spectra are normalised: the kept weight is 1.
        for b in 0..11 {
            let w: f64 = run
                .spectrum(b)
                .unwrap()
                .sorted()
                .iter()
                .map(|x| x * x)
                .sum();
            assert!((w - 1.0).abs() < 1e-12, "bond {b}: {w}");
        }
    });
}

#[test]
fn early_sweeps_take_fewer_products_and_the_run_ends_on_full_solves() {
    let rt = Runtime::new(2).unwrap();
    rt.enter(|| {
        let model = Xxz::new(12, 0.8, 11);
        let exact = model.exact(6);
        let run = |early: usize| {
            let s = Settings {
                lanczos_iter_early: early,
                ..settings(64, 20, 1e-11)
            };
            let mut run = Dmrg::new(model.mpo(), model.start(6), s).unwrap();
            let mut sweeps = Vec::new();
            let e = run.run(|_| {}, |s| sweeps.push(*s)).unwrap();
            (e, sweeps)
        };
        let (full, full_sweeps) = run(40);
        let (capped, capped_sweeps) = run(2);
        // chi = 64 = 2^(L/2): both runs are exact, to the same energy.
        assert!((full - exact).abs() < 1e-9, "{full} vs {exact}");
        assert!((capped - exact).abs() < 1e-9, "{capped} vs {exact}");
        assert!(full_sweeps.iter().all(|s| s.lanczos_iter == 40));
        // The first two sweeps are early: two products a step, most of them cut short.
        for s in &capped_sweeps[..2] {
            assert_eq!(s.lanczos_iter, 2);
            assert!(s.unconverged > 0 && s.matvecs <= 2 * 22, "{s:?}");
        }
        // The last sweep's solves are the full budget's.
        let last = capped_sweeps.last().unwrap();
        assert!(last.lanczos_iter == 40 || last.unconverged == 0, "{last:?}");
        let products = |v: &[SweepStats]| v.iter().map(|s| s.matvecs).sum::<usize>();
        assert!(
            products(&capped_sweeps) < products(&full_sweeps),
            "{} vs {}",
            products(&capped_sweeps),
            products(&full_sweeps)
        );
        // A step called by hand takes the full budget.
        let s = Settings {
            lanczos_iter_early: 1,
            ..settings(64, 20, 1e-11)
        };
        let mut by_hand = Dmrg::new(model.mpo(), model.start(6), s).unwrap();
        let step = by_hand.step(0, Toward::Right).unwrap();
        assert!(step.matvecs > 1 && step.converged, "{step:?}");
        // A zero budget is refused.
        let s = Settings {
            lanczos_iter_early: 0,
            ..Settings::new(4)
        };
        let e = Dmrg::new(model.mpo(), model.start(6), s).unwrap_err();
        assert!(e.to_string().contains("lanczos_iter_early"), "{e}");
    });
}

#[test]
fn a_run_stops_on_the_energy_only_after_a_sweep_nothing_was_cut_short_in() {
    // Two sweeps that agree, the last with a step an early budget cut short: not yet.
    assert!(!converged(&[-1.0, -1.0], &[0, 3], 1e-10));
    assert!(converged(&[-1.0, -1.0], &[3, 0], 1e-10));
    assert!(!converged(&[-1.0, -1.1], &[0, 0], 1e-10));
    assert!(!converged(&[-1.0], &[0], 1e-10));
    // The budget: early for the first two sweeps and while a sweep changes the energy by
    // more than 1e-6 per site (1e-5 on 10 sites), the full one after.
    let s = Settings::new(8);
    assert_eq!(lanczos_budget(&s, &[], 10), LANCZOS_ITER_EARLY);
    assert_eq!(lanczos_budget(&s, &[-3.0], 10), LANCZOS_ITER_EARLY);
    assert_eq!(lanczos_budget(&s, &[-3.0, -3.1], 10), LANCZOS_ITER_EARLY);
    assert_eq!(
        lanczos_budget(&s, &[-3.0, -3.000_02], 10),
        LANCZOS_ITER_EARLY
    );
    assert_eq!(lanczos_budget(&s, &[-3.0, -3.000_002], 10), LANCZOS_ITER);
    // An early budget above the full one is the full one; an early sweep that cut nothing
    // short counts as full.
    let wide = Settings {
        lanczos_iter_early: 100,
        ..s.clone()
    };
    assert_eq!(lanczos_budget(&wide, &[], 10), LANCZOS_ITER);
    assert_eq!(cut_short(&s, LANCZOS_ITER_EARLY, 5), 5);
    assert_eq!(cut_short(&s, LANCZOS_ITER, 5), 0);
}

#[test]
fn misuse_is_refused_with_what_was_expected() {
    let rt = Runtime::new(2).unwrap();
    rt.enter(|| {
        let model = Xxz::new(6, 1.0, 1);
        let e = Dmrg::new(model.mpo(), Xxz::new(5, 1.0, 1).start(2), Settings::new(4)).unwrap_err();
        assert!(e.to_string().contains("MPO's length (6)"), "{e}");
        let e = Dmrg::new(model.mpo(), model.start(3), Settings::new(0)).unwrap_err();
        assert!(e.to_string().contains("chi"), "{e}");
        let mut run = Dmrg::new(model.mpo(), model.start(3), Settings::new(4)).unwrap();
        // The centre is at the pair (0, 1): (3, 4) has no environments.
        let e = run.step(3, Toward::Right).unwrap_err();
        assert!(
            matches!(e, Error::Dmrg { .. }) && e.to_string().contains("orthogonality centre"),
            "{e}"
        );
        // Moving along is allowed.
        for i in 0..3 {
            run.step(i, Toward::Right).unwrap();
        }
        run.step(3, Toward::Left).unwrap();
        assert!(run.step(0, Toward::Right).is_err());
    });
}

#[test]
fn a_resumed_run_reaches_the_energies_of_the_uninterrupted_one() {
    let rt = Runtime::new(2).unwrap();
    rt.enter(|| {
        let model = Xxz::new(10, 0.9, 7);
        let start = || model.start(5);
        // tol = 0: exactly the sweeps asked for.
        let mut whole = Dmrg::new(model.mpo(), start(), settings(8, 6, 0.0)).unwrap();
        whole.run(|_| {}, |_| {}).unwrap();
        let dir = temp_dir("resume");
        let mut first = Dmrg::new(model.mpo(), start(), settings(8, 2, 0.0)).unwrap();
        first.save_every_sweep(&dir).unwrap();
        first.run(|_| {}, |_| {}).unwrap();
        drop(first);
        let mut rest = Dmrg::resume(model.mpo(), &dir, settings(8, 6, 0.0)).unwrap();
        assert_eq!(rest.sweeps_done(), 2);
        let mut later = Vec::new();
        rest.run(|_| {}, |s| later.push(s.sweep)).unwrap();
        assert_eq!(later, vec![3, 4, 5, 6]);
        assert_eq!(rest.energies().len(), 6);
        for (a, b) in whole.energies().iter().zip(rest.energies()) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
        let (x, y) = (
            dense_state(&whole.mps().unwrap()),
            dense_state(&rest.mps().unwrap()),
        );
        assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() < 1e-10));
        for b in 0..9 {
            let (p, q) = (whole.spectrum(b).unwrap(), rest.spectrum(b).unwrap());
            assert!(
                p.sorted()
                    .iter()
                    .zip(q.sorted())
                    .all(|(a, b)| (a - b).abs() < 1e-10)
            );
        }
        // The checkpoint of the last sweep resumes with nothing to do: its spectra and
        // energies are the run's.
        rest.save_every_sweep(&dir).unwrap();
        rest.set_stopping(7, 0.0).unwrap();
        rest.run(|_| {}, |_| {}).unwrap();
        let done = Dmrg::resume(model.mpo(), &dir, settings(8, 7, 0.0)).unwrap();
        assert_eq!(done.energies(), rest.energies());
        assert_eq!(done.spectrum(4), rest.spectrum(4));
        assert_eq!(done.discarded_weights(), rest.discarded_weights());
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

#[test]
fn a_checkpoint_of_another_run_is_refused_with_what_differs() {
    let rt = Runtime::new(2).unwrap();
    rt.enter(|| {
        let model = Xxz::new(6, 1.0, 2);
        let dir = temp_dir("mismatch");
        let mut run = Dmrg::new(model.mpo(), model.start(3), settings(4, 1, 0.0)).unwrap();
        run.save_every_sweep(&dir).unwrap();
        run.run(|_| {}, |_| {}).unwrap();
        let resume = |mpo: Mpo<U1>, s: Settings| Dmrg::resume(mpo, &dir, s).unwrap_err();
        let check = |e: Error, what: &str, expected: &str, found: &str| {
            let text = e.to_string();
            assert!(
                matches!(&e, Error::Resume { what: w, .. } if w == what)
                    && text.contains(expected)
                    && text.contains(found),
                "{text}"
            );
        };
        check(
            resume(model.mpo(), settings(8, 2, 0.0)),
            "bond dimension chi",
            "expected 8",
            "found 4",
        );
        check(
            resume(Xxz::new(8, 1.0, 2).mpo(), settings(4, 2, 0.0)),
            "number of sites",
            "expected 8 (the MPO's)",
            "found 6",
        );
        check(
            resume(Xxz::new(6, 0.5, 2).mpo(), settings(4, 2, 0.0)),
            "model",
            "the MPO of this run (site 1",
            "other MPO values at site 1",
        );
        // Another model with other MPO legs: the identity.
        let e1 = Leg::new(Direction::In, [(U1(0), 1)]).unwrap();
        let id = BlockStructure::new([e1.clone(), spin()], [spin().dual(), e1.dual()], U1(0));
        let id = AsyncArray::<f64, U1>::from_dense(id.unwrap(), &[1.0, 0.0, 0.0, 1.0]).unwrap();
        let identity = Mpo::new((0..6).map(|_| id.duplicate()).collect()).unwrap();
        check(
            resume(identity, settings(4, 2, 0.0)),
            "model",
            "the MPO of this run (site 0",
            "another MPO tensor at site 0",
        );
        let mut lanczos = settings(4, 2, 0.0);
        lanczos.lanczos_iter = 10;
        check(
            resume(model.mpo(), lanczos),
            "Lanczos iterations",
            "10",
            "40",
        );
        let mut early = settings(4, 2, 0.0);
        early.lanczos_iter_early = 3;
        check(
            resume(model.mpo(), early),
            "Lanczos iterations of an early sweep",
            "expected 3",
            "found 12",
        );
        // Another sector type: an identity MPO of fermions.
        let f = |n: i32| Product(U1(n), FermionParity::new(n % 2 != 0));
        let p = Leg::new(Direction::In, [(f(0), 1), (f(1), 1)]).unwrap();
        let e = Leg::new(Direction::In, [(f(0), 1)]).unwrap();
        let id = BlockStructure::new([e.clone(), p.clone()], [p.dual(), e.dual()], f(0)).unwrap();
        let w = || AsyncArray::<f64, FermionicU1>::from_dense(id.clone(), &[1.0, 0.0, 0.0, 1.0]);
        let mpo = Mpo::new((0..6).map(|_| w().unwrap()).collect()).unwrap();
        let e = Dmrg::resume(mpo, &dir, settings(4, 2, 0.0)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("sector type")
                && text.contains("expected Product(U1,FermionParity)")
                && text.contains("found U1"),
            "{text}"
        );
        // No checkpoint at all.
        let e = Dmrg::resume(model.mpo(), dir.join("nothing"), settings(4, 2, 0.0)).unwrap_err();
        assert!(matches!(e, Error::Io(_)), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

#[test]
fn spilled_environments_give_the_same_run_and_leave_few_in_memory() {
    let rt = Runtime::new(2).unwrap();
    rt.enter(|| {
        let model = Xxz::new(12, 1.0, 9);
        let s = settings(12, 4, 0.0);
        let mut plain = Dmrg::new(model.mpo(), model.start(6), s.clone()).unwrap();
        plain.run(|_| {}, |_| {}).unwrap();
        let dir = temp_dir("spill");
        let mut spilled = Dmrg::new(model.mpo(), model.start(6), s).unwrap();
        spilled.spill_to(&dir, 0).unwrap();
        let mut most = 0;
        for _ in 0..4 {
            spilled.sweep(|_| {}).unwrap();
            most = most.max(spilled.resident_environments());
            let files = std::fs::read_dir(&dir).unwrap().count();
            assert!(files >= 6, "{files} spill files");
        }
        // The edges and the environments of the next two steps.
        assert!(most <= 6, "{most} resident");
        assert!(plain.resident_environments() >= 12);
        for (a, b) in plain.energies().iter().zip(spilled.energies()) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
        // An effective Hamiltonian of a spilled run loads what it needs.
        let (x, y) = (spilled.pair(1).unwrap(), plain.pair(1).unwrap());
        let hx = spilled.effective_hamiltonian(1).unwrap().apply(&x).unwrap();
        let hy = plain.effective_hamiltonian(1).unwrap().apply(&y).unwrap();
        let (a, b) = (hx.to_dense().unwrap(), hy.to_dense().unwrap());
        assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-10));
        drop(spilled);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "files left behind"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    });
}

#[test]
fn the_effective_hamiltonian_keeps_its_operands_in_the_layouts_it_reads() {
    let rt = Runtime::new(2).unwrap();
    rt.enter(|| {
        let model = Xxz::new(10, 0.7, 2);
        let mut run = Dmrg::new(model.mpo(), model.start(5), settings(12, 2, 0.0)).unwrap();
        run.run(|_| {}, |_| {}).unwrap();
        // The centre moved to a bulk pair, where `L theta` outgrows `W` (as the chain
        // needs for its one-pass operator step).
        let start = *run.envs.pairs().start();
        let mut last = f64::NAN;
        for j in start..start + 3 {
            last = run.step(j, Toward::Right).unwrap().energy;
        }
        let i = start + 3;
        let lanczos_form = run
            .c
            .pair_lanczos
            .apply(&run.mps[i], &run.mps[i + 1])
            .unwrap();
        let svd_form = run.pair(i).unwrap();
        let c = Contractions::new().unwrap();
        let h = run.effective_hamiltonian(i).unwrap();
        // In Lanczos form, in turn: no pass but the product re-split to theta's form after
        // the last GEMM (the constant operands are read as they are held; the operator step
        // reads the first GEMM's product in place and writes what the last GEMM reads). That
        // step takes its one pass from SMALL_OPERAND_MIN_ELEMS elements on, a large bond; the
        // plans here are made as at any size.
        let cache = Arc::new(PlanCache::new().with_small_operand_min(0));
        let operands = [&h.left, &h.w, &*h.right];
        let mut x: Option<Tensor<U1>> = None;
        let mut passes = Vec::new();
        let mut strategies = Vec::new();
        for (step, operand) in c.heff[0].steps().iter().zip(operands) {
            let step = step.clone().with_cache(Arc::clone(&cache));
            let (a, b) = match &x {
                None => (operand, &lanczos_form),
                Some(x) => (x, operand),
            };
            let plan = step.plan(a, b).unwrap();
            strategies.push(plan.strategy());
            passes.push([
                plan.permutes_operand(0),
                plan.permutes_operand(1),
                plan.permutes_output(),
            ]);
            x = Some(step.apply(a, b).unwrap());
        }
        // (At this small bond R's blocks may be small operands too: then the last step is a
        // one-pass product that writes theta's form as it goes.)
        let resplit = strategies[2] != Strategy::SmallOperand;
        let want = [
            [false, false, false],
            [false, false, false],
            [false, false, resplit],
        ];
        assert_eq!(passes, want, "{strategies:?}");
        assert_eq!(strategies[1], Strategy::SmallOperand);
        // Fused (as from FUSE_MIN_ELEMS elements on), the last GEMMs write theta's form
        // directly: no pass at all.
        let chain = c.heff[0].clone().with_fused_min(0);
        let structures = [&h.left, &lanczos_form, &h.w, &*h.right].map(|x| x.structure());
        assert!(chain.fuses::<f64, U1>(structures).unwrap());
        let fused = chain
            .apply(&h.left, &lanczos_form, &h.w, &*h.right)
            .unwrap();
        assert_eq!(fused.structure(), lanczos_form.structure());
        // Both splits give the same H theta, in the split they came in.
        let (hl, hp) = (h.apply(&lanczos_form).unwrap(), h.apply(&svd_form).unwrap());
        assert_eq!(hl.structure().n_codomain(), 1);
        assert_eq!(hp.structure().n_codomain(), 2);
        let rows_form = lanczos_form.permute(&[0, 1, 2, 3], 3).unwrap();
        let hr = h.apply(&rows_form).unwrap();
        assert_eq!(hr.structure(), rows_form.structure());
        let (hl, hp) = (hl.to_dense().unwrap(), hp.to_dense().unwrap());
        for other in [&hp, &hr.to_dense().unwrap(), &fused.to_dense().unwrap()] {
            assert!(hl.iter().zip(other).all(|(a, b)| (a - b).abs() < 1e-12));
        }
        // ... and it is H: <theta|H theta> is the converged energy.
        let theta = lanczos_form.to_dense().unwrap();
        let e: f64 = theta.iter().zip(&hl).map(|(a, b)| a * b).sum();
        let n: f64 = theta.iter().map(|a| a * a).sum();
        assert!((e / n - last).abs() < 1e-8, "{} vs {last}", e / n);
        // A tensor of another split is refused by type, not by a panic.
        let wrong = lanczos_form.permute(&[0, 1, 2, 3], 4).unwrap();
        assert!(matches!(h.apply(&wrong), Err(Error::Dmrg { .. })));
    });
}
