//! The SU(2) DMRG (issue 29 item 5) against exact diagonalisation of the same chain and
//! against the U(1) engine: the same ground energy, for spin one half and spin one.

use tessera_blocks::U1;
use tessera_core::Runtime;
use tessera_mps::dmrg::{Dmrg, Settings};
use tessera_mps::exact;
use tessera_mps::models::{ChainModel, Model, ModelVisitor};
use tessera_mps::su2::{Su2Dmrg, heisenberg_su2};

/// The exact ground energy of a model, and the U(1) engine's at `chi` states.
struct Reference {
    chi: usize,
}

impl ModelVisitor for Reference {
    type Output = (f64, f64);

    fn visit<M: ChainModel>(self, model: &M) -> Self::Output {
        let exact = exact::ground_energy(&model.terms().unwrap(), &model.sector()).unwrap();
        let mut settings = Settings::new(self.chi);
        settings.sweeps = 20;
        settings.tol = 1e-12;
        let runtime = Runtime::new(2).unwrap();
        let e = runtime
            .enter(|| {
                let mut dmrg = Dmrg::new(model.mpo()?, model.initial_state()?, settings)?;
                dmrg.run(|_| {}, |_| {})
            })
            .unwrap();
        (exact, e)
    }
}

fn check(spec: &str, sites: usize, two_s: u32, states: usize) {
    let (exact, u1) = Model::parse(spec).unwrap().visit(Reference { chi: states });
    let run = Su2Dmrg {
        seed: 7,
        ..Su2Dmrg::new(sites, two_s, states)
    };
    let su2 = heisenberg_su2(&run).unwrap();
    assert!(
        (su2.energy - exact).abs() < 1e-9,
        "{spec}: SU(2) DMRG {:.14}, exact {exact:.14}",
        su2.energy
    );
    assert!(
        (su2.energy - u1).abs() < 1e-9,
        "{spec}: SU(2) DMRG {:.14}, U(1) DMRG {u1:.14}",
        su2.energy
    );
    assert!(su2.max_states <= states);
    // Multiplets: fewer stored than the states they stand for.
    assert!(su2.max_multiplets < su2.max_states, "{su2:?}");
}

#[test]
fn spin_one_half_matches_exact_and_u1() {
    check("heisenberg:L=12", 12, 1, 64);
}

#[test]
fn spin_one_matches_exact_and_u1() {
    check("xxz:L=8,S=1,Jz=1", 8, 2, 81);
}

/// The lowest state of total spin `S` against exact diagonalisation in the sector
/// `S_z = S` (whose lowest state has total spin `S`: energies rise with the total spin on
/// these bipartite chains).
fn check_spin(spec: &str, sites: usize, two_s: u32, total: u32) -> f64 {
    struct Exact(i32);
    impl ModelVisitor for Exact {
        type Output = f64;
        fn visit<M: ChainModel>(self, model: &M) -> f64 {
            // Spin chains are charged by U1(2 S_z).
            let any: &dyn std::any::Any = &U1(self.0);
            let sector = any.downcast_ref::<M::Charge>().expect("a spin chain");
            exact::ground_energy(&model.terms().unwrap(), sector).unwrap()
        }
    }
    let exact = Model::parse(spec)
        .unwrap()
        .visit(Exact(i32::try_from(total).unwrap()));
    let run = Su2Dmrg {
        total_two_s: total,
        sweeps: 6,
        ..Su2Dmrg::new(sites, two_s, 200)
    };
    let e = heisenberg_su2(&run).unwrap().energy;
    assert!(
        (e - exact).abs() < 1e-9,
        "{spec}, 2S = {total}: SU(2) DMRG {e:.14}, exact {exact:.14}"
    );
    e
}

#[test]
fn the_lowest_state_of_each_total_spin_matches_exact() {
    // Spin one half, L = 10 (odd total spins need an odd chain: L = 9).
    check_spin("heisenberg:L=10", 10, 1, 2);
    check_spin("heisenberg:L=10", 10, 1, 4);
    check_spin("heisenberg:L=9", 9, 1, 1);
    check_spin("heisenberg:L=9", 9, 1, 3);
    // Spin one, L = 8: the open chain's edge spins make S = 0 and S = 1 nearly degenerate,
    // the bulk (Haldane) gap opens above them: E(2) - E(1) is several times E(1) - E(0)
    // (0.87 and 0.20 here; the edge splitting falls as exp(-L / 6), the gap tends to 0.41).
    let e: Vec<f64> = (0..3)
        .map(|t| check_spin("xxz:L=8,S=1,Jz=1", 8, 2, 2 * t))
        .collect();
    assert!(e[2] - e[1] > 3.0 * (e[1] - e[0]), "{e:?}");
}

#[test]
fn misuse_is_refused() {
    let mut runs: Vec<Su2Dmrg> = [(1, 1), (4, 0)]
        .into_iter()
        .map(|(sites, two_s)| Su2Dmrg::new(sites, two_s, 8))
        .collect();
    let good = Su2Dmrg::new(4, 1, 8);
    // A total spin of the wrong parity, or above what four spins one half reach.
    for total_two_s in [1, 3, 6] {
        runs.push(Su2Dmrg {
            total_two_s,
            ..good.clone()
        });
    }
    runs.push(Su2Dmrg {
        max_states: 0,
        ..good.clone()
    });
    runs.push(Su2Dmrg {
        sweeps: 0,
        ..good.clone()
    });
    runs.push(Su2Dmrg {
        lanczos_iter: 0,
        ..good.clone()
    });
    for tol in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        runs.push(Su2Dmrg {
            lanczos_tol: tol,
            ..good.clone()
        });
    }
    for run in &runs {
        let e = heisenberg_su2(run).unwrap_err();
        assert!(matches!(e, tessera_mps::Error::Dmrg { .. }), "{run:?}: {e}");
    }
}
