//! The DMRG engine (`tessera::mps::dmrg`) on the driver's Heisenberg chain
//! (`examples/dmrg/heisenberg.rs`) against exact diagonalisation of the dense Hamiltonian,
//! the thermodynamic limit, the task timeline it records, and a resumed and a spilled run
//! against the uninterrupted one.

// The driver's model, compiled here as it is there.
#[allow(dead_code)]
#[path = "../examples/dmrg/heisenberg.rs"]
mod heisenberg;

use tessera::core::TraceEvent;
use tessera::mps::dmrg::{Dmrg, Settings, SweepStats};
use tessera::prelude::Runtime;

/// A run of the Heisenberg chain of `sites` sites from the Néel state.
fn heisenberg_run(
    sites: usize,
    settings: Settings,
) -> heisenberg::Result<Dmrg<tessera::blocks::U1>> {
    Ok(Dmrg::new(
        heisenberg::mpo(sites)?,
        heisenberg::neel(sites)?,
        settings,
    )?)
}

/// The ground-state energy of the open spin-1/2 Heisenberg chain of `l` sites in the sector
/// with `l / 2` spins up (the ground state's sector, `Sz = 0` for even `l`), from the dense
/// Hamiltonian in the basis of bit strings (bit `i` set: spin `i` up) and faer's dense
/// Hermitian eigensolver. Built from `S_i . S_j = Sz Sz + (S+ S- + S- S+) / 2` directly,
/// independently of the MPO.
fn exact_energy(l: usize) -> f64 {
    let basis: Vec<u32> = (0..1u32 << l)
        .filter(|b| b.count_ones() as usize == l / 2)
        .collect();
    let index = |b: u32| basis.binary_search(&b).expect("a state of the sector");
    let mut h = faer::Mat::<f64>::zeros(basis.len(), basis.len());
    for (j, &b) in basis.iter().enumerate() {
        for i in 0..l - 1 {
            let (x, y) = ((b >> i) & 1, (b >> (i + 1)) & 1);
            if x == y {
                h[(j, j)] += 0.25;
            } else {
                h[(j, j)] -= 0.25;
                let flipped = b ^ (0b11 << i);
                h[(index(flipped), j)] += 0.5;
            }
        }
    }
    let values = h
        .self_adjoint_eigenvalues(faer::Side::Lower)
        .expect("the dense eigensolver converges");
    values[0]
}

fn dmrg_energy(runtime: &Runtime, sites: usize, chi: usize) -> f64 {
    runtime
        .enter(|| -> heisenberg::Result<f64> {
            Ok(heisenberg_run(sites, Settings::new(chi))?.run(|_| {}, |_| {})?)
        })
        .expect("the DMRG run succeeds")
}

#[test]
fn dmrg_equals_exact_diagonalisation_up_to_14_sites() {
    let runtime = Runtime::new(2).unwrap();
    // chi = 2^(L/2) is the largest bond the chain has: no truncation, so DMRG is exact.
    for l in [4_usize, 8, 10, 12, 14] {
        let exact = exact_energy(l);
        let dmrg = dmrg_energy(&runtime, l, 1 << (l / 2));
        println!("L = {l}: DMRG {dmrg:.15}, exact {exact:.15}");
        assert!(
            (dmrg - exact).abs() < 1e-10,
            "L = {l}: DMRG {dmrg}, exact {exact}"
        );
    }
}

#[test]
fn a_truncated_run_is_variational_and_reports_its_discarded_weight() {
    // L = 12 needs bond dimension 64 to be exact; with 8 the SVDs discard weight, the
    // energy (a Rayleigh quotient in the span of the isometries) lies above the exact one,
    // and not by much.
    let runtime = Runtime::new(2).unwrap();
    let mut sweeps: Vec<SweepStats> = Vec::new();
    let energy = runtime
        .enter(|| -> heisenberg::Result<f64> {
            Ok(heisenberg_run(12, Settings::new(8))?.run(|_| {}, |s| sweeps.push(*s))?)
        })
        .unwrap();
    let exact = exact_energy(12);
    assert!(
        energy > exact && energy - exact < 1e-3,
        "{energy} vs {exact}"
    );
    let last = sweeps.last().unwrap();
    assert_eq!(last.energy, energy);
    assert_eq!(last.max_bond, 8);
    assert!(
        last.truncation > 1e-8 && last.truncation < 1e-2,
        "{}",
        last.truncation
    );
    assert!(sweeps.windows(2).all(|w| w[1].sweep == w[0].sweep + 1));
}

#[test]
fn the_exact_energy_of_two_and_three_sites_is_the_textbook_one() {
    // Two spins: the singlet, -3/4. Three (open): -1 (Sz = 1/2 sector of the l / 2 = 1 ups).
    assert!((exact_energy(2) + 0.75).abs() < 1e-14);
    assert!((exact_energy(3) + 1.0).abs() < 1e-14);
    let runtime = Runtime::new(2).unwrap();
    assert!((dmrg_energy(&runtime, 2, 4) + 0.75).abs() < 1e-12);
    assert!((dmrg_energy(&runtime, 3, 4) + 1.0).abs() < 1e-12);
}

#[test]
fn the_energy_per_site_approaches_the_bethe_ansatz_limit() {
    // For the open chain E(L) = L e + e_s + O(1/L), with e = 1/4 - ln 2 (Hulthén) and the
    // surface energy e_s = (pi - 1 - 2 ln 2) / 4 = 0.1888 (Bethe ansatz; Hamer, Quispel and
    // Batchelor, J. Phys. A 20, 5677 (1987)). So the excess E/L - e is positive and falls
    // like e_s / L, and L (E/L - e) - e_s is the O(1/L) remainder: its coefficient is about
    // -0.15 for these lengths (-0.0186, -0.0102, -0.0071 at L = 8, 16, 24); a bound of
    // 0.25 / L leaves room for logarithmic corrections and fails for an energy wrong by
    // more than about 1e-2.
    let e = 0.25 - std::f64::consts::LN_2;
    let e_s = (std::f64::consts::PI - 1.0 - 2.0 * std::f64::consts::LN_2) / 4.0;
    let runtime = Runtime::new(2).unwrap();
    let mut previous = f64::INFINITY;
    for l in [8_usize, 16, 24] {
        let per_site = dmrg_energy(&runtime, l, 16) / l as f64;
        let excess = per_site - e;
        let remainder = l as f64 * excess - e_s;
        println!(
            "L = {l}: E/L = {per_site:.12}, E/L - e = {excess:.6}, L (E/L - e) - e_s = {remainder:.5}"
        );
        assert!(
            excess > 0.0 && excess < previous,
            "L = {l}: E/L - e = {excess}"
        );
        assert!(
            remainder.abs() < 0.25 / l as f64,
            "L = {l}: remainder {remainder}"
        );
        previous = excess;
    }
}

#[test]
fn a_dmrg_run_writes_a_chrome_trace_of_its_tasks() {
    let runtime = Runtime::new(2).unwrap();
    runtime.start_trace();
    let energy = dmrg_energy(&runtime, 6, 8);
    let trace = runtime.stop_trace();
    assert!((energy - exact_energy(6)).abs() < 1e-10);
    let path = std::env::temp_dir().join(format!("tessera-dmrg-trace-{}.json", std::process::id()));
    trace.write_chrome(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    assert_eq!(events.len(), trace.events.len());
    assert!(events.len() > 100, "{} events", events.len());
    for e in events {
        assert_eq!(e["ph"], "X");
        assert!(e["ts"].as_f64().unwrap() >= 0.0);
        assert!(e["dur"].as_f64().unwrap() >= 0.0);
        // A worker's index, or the host's track for the tasks the waiting host ran.
        let tid = e["tid"].as_u64().unwrap();
        assert!(tid < 2 || tid == TraceEvent::HOST as u64, "tid {tid}");
        assert!(e["name"].is_string());
        assert_eq!(e["args"]["failed"], false);
    }
    // Every two-site step ran its SVD as named per-sector tasks.
    let names: Vec<&str> = events.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"coalesce.svd"));
    assert!(names.contains(&"coalesce.svd.keep"));
    // Tasks are recorded in the order they finished, so end times never decrease per worker.
    for tid in 0..2 {
        let ends: Vec<f64> = events
            .iter()
            .filter(|e| e["tid"].as_u64() == Some(tid))
            .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap())
            .collect();
        assert!(ends.windows(2).all(|w| w[0] <= w[1] + 1e-2), "worker {tid}");
    }
}

/// A fresh, empty directory for this test's files.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-dmrg-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_run_resumed_from_its_checkpoint_reaches_the_uninterrupted_energy() {
    // N = 5 sweeps straight through against k = 2 sweeps, a checkpoint, and N - k = 3 more
    // from it in a new run (tol = 0: exactly the sweeps asked for).
    let runtime = Runtime::new(2).unwrap();
    let (l, chi, n, k) = (16, 24, 5, 2);
    let dir = scratch("resume");
    let settings = |sweeps| Settings {
        sweeps,
        tol: 0.0,
        ..Settings::new(chi)
    };
    runtime
        .enter(|| -> heisenberg::Result<()> {
            let mut whole = heisenberg_run(l, settings(n))?;
            let straight = whole.run(|_| {}, |_| {})?;
            let mut first = heisenberg_run(l, settings(k))?;
            first.save_every_sweep(&dir)?;
            first.run(|_| {}, |_| {})?;
            drop(first);
            let mut rest = Dmrg::resume(heisenberg::mpo(l)?, &dir, settings(n))?;
            let mut resumed_sweeps = Vec::new();
            let resumed = rest.run(|_| {}, |s| resumed_sweeps.push(s.sweep))?;
            assert_eq!(resumed_sweeps, vec![3, 4, 5]);
            assert!(
                (straight - resumed).abs() < 1e-12,
                "{straight} vs {resumed}"
            );
            assert_eq!(whole.energies().len(), rest.energies().len());
            // A checkpoint of another size or bond dimension is refused, saying which.
            let e = Dmrg::resume(heisenberg::mpo(l + 2)?, &dir, settings(n)).unwrap_err();
            assert!(
                e.to_string().contains("number of sites: expected 18"),
                "{e}"
            );
            let e = Dmrg::resume(heisenberg::mpo(l)?, &dir, Settings::new(chi + 1)).unwrap_err();
            assert!(e.to_string().contains("chi: expected 25, found 24"), "{e}");
            Ok(())
        })
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_run_with_spilled_environments_has_the_same_energies() {
    let runtime = Runtime::new(2).unwrap();
    let dir = scratch("spill");
    runtime
        .enter(|| -> heisenberg::Result<()> {
            let settings = Settings {
                sweeps: 3,
                ..Settings::new(16)
            };
            let mut plain = heisenberg_run(20, settings.clone())?;
            plain.run(|_| {}, |_| {})?;
            let mut spilled = heisenberg_run(20, settings)?;
            spilled.spill_to(&dir, 0)?;
            spilled.run(|_| {}, |_| {})?;
            assert!(spilled.resident_environments() < plain.resident_environments() / 2);
            assert_eq!(plain.energies().len(), spilled.energies().len());
            for (a, b) in plain.energies().iter().zip(spilled.energies()) {
                assert!((a - b).abs() < 1e-12, "{a} vs {b}");
            }
            Ok(())
        })
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
