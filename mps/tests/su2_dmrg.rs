//! The SU(2) DMRG (issue 29 item 5) against exact diagonalisation of the same chain and
//! against the U(1) engine: the same ground energy, for spin one half and spin one.

use tessera_blocks::U1;
use tessera_core::Runtime;
use tessera_mps::dmrg::{Dmrg, Settings};
use tessera_mps::exact;
use tessera_mps::models::{ChainModel, Model, ModelVisitor};
use tessera_mps::su2::{Su2Dmrg, dmrg_su2};

/// The exact ground energy of a model (with `exact`, else NaN), and the abelian engine's at
/// `chi` states.
struct Reference {
    chi: usize,
    exact: bool,
}

impl ModelVisitor for Reference {
    type Output = (f64, f64);

    fn visit<M: ChainModel>(self, model: &M) -> Self::Output {
        let exact = if self.exact {
            exact::ground_energy(&model.terms().unwrap(), &model.sector()).unwrap()
        } else {
            f64::NAN
        };
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
    let (exact, u1) = Model::parse(spec).unwrap().visit(Reference {
        chi: states,
        exact: true,
    });
    let run = Su2Dmrg {
        seed: 7,
        ..Su2Dmrg::new(sites, two_s, states)
    };
    let su2 = dmrg_su2(&run).unwrap();
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
    let e = dmrg_su2(&run).unwrap().energy;
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
        let e = dmrg_su2(run).unwrap_err();
        assert!(matches!(e, tessera_mps::Error::Dmrg { .. }), "{run:?}: {e}");
    }
}

/// The SU(2) x U(1) Hubbard DMRG of `run` against exact diagonalisation of `spec` (the same
/// chain, in the sector `S_z = S`, whose lowest state has total spin `S` on these chains).
fn check_hubbard(spec: &str, run: Su2Dmrg) -> tessera_mps::su2::Su2Ground {
    struct Exact;
    impl ModelVisitor for Exact {
        type Output = f64;
        fn visit<M: ChainModel>(self, model: &M) -> f64 {
            exact::ground_energy(&model.terms().unwrap(), &model.sector()).unwrap()
        }
    }
    let exact = Model::parse(spec).unwrap().visit(Exact);
    let g = dmrg_su2(&run).unwrap();
    assert!(
        (g.energy - exact).abs() < 1e-9,
        "{spec}, 2S = {}: SU(2) x U(1) DMRG {:.14}, exact {exact:.14}",
        run.total_two_s,
        g.energy
    );
    g
}

#[test]
fn hubbard_chains_match_exact_in_every_spin_and_filling() {
    let run = |sites, u, electrons| Su2Dmrg {
        sweeps: 6,
        seed: 3,
        ..Su2Dmrg::hubbard(sites, 1.0, u, electrons, 200)
    };
    // Half filling, the singlet and the triplet.
    let g = check_hubbard("hubbard:L=6,U=4", run(6, 4.0, 6));
    assert!(g.max_multiplets < g.max_states, "{g:?}");
    check_hubbard(
        "hubbard:L=6,U=4,Sz=1",
        Su2Dmrg {
            total_two_s: 2,
            ..run(6, 4.0, 6)
        },
    );
    // An odd electron number (a doublet), and a doped chain.
    check_hubbard("hubbard:L=5,U=8", run(5, 8.0, 5));
    check_hubbard("hubbard:L=6,U=2,filling=0.5", run(6, 2.0, 3));
    check_hubbard(
        "hubbard:L=6,U=4,filling=1.5,Sz=1.5",
        Su2Dmrg {
            total_two_s: 3,
            ..run(6, 4.0, 9)
        },
    );
}

#[test]
fn hubbard_matches_the_u1_x_u1_engine_and_free_electrons() {
    // L = 10 at half filling, U = 4: both engines at 128 states.
    let (_, u1) = Model::parse("hubbard:L=10,U=4").unwrap().visit(Reference {
        chi: 128,
        exact: false,
    });
    let g = dmrg_su2(&Su2Dmrg {
        sweeps: 6,
        ..Su2Dmrg::hubbard(10, 1.0, 4.0, 10, 128)
    })
    .unwrap();
    assert!(
        (g.energy - u1).abs() < 1e-8,
        "SU(2) x U(1) {:.14}, U(1) x U(1) {u1:.14}",
        g.energy
    );
    // U = 0 at 32 sites and 4 electrons: twice the two lowest single-particle levels.
    let g = dmrg_su2(&Su2Dmrg {
        sweeps: 4,
        ..Su2Dmrg::hubbard(32, 1.0, 0.0, 4, 64)
    })
    .unwrap();
    let level = |k: f64| -2.0 * (std::f64::consts::PI * k / 33.0).cos();
    let want = 2.0 * (level(1.0) + level(2.0));
    assert!(
        (g.energy - want).abs() < 1e-9,
        "{:.14} vs {want:.14}",
        g.energy
    );
}

#[test]
fn hubbard_misuse_is_refused() {
    let good = Su2Dmrg::hubbard(4, 1.0, 4.0, 4, 16);
    let runs = [
        // More than two electrons a site.
        Su2Dmrg::hubbard(4, 1.0, 4.0, 9, 16),
        // A total spin of the wrong parity, or above what 4 electrons (or 4 holes) reach.
        Su2Dmrg {
            total_two_s: 1,
            ..good.clone()
        },
        Su2Dmrg {
            total_two_s: 6,
            ..good.clone()
        },
        Su2Dmrg {
            total_two_s: 4,
            ..Su2Dmrg::hubbard(4, 1.0, 4.0, 6, 16)
        },
        Su2Dmrg::hubbard(4, f64::NAN, 4.0, 4, 16),
        Su2Dmrg::hubbard(4, 1.0, f64::INFINITY, 4, 16),
        Su2Dmrg::hubbard(1, 1.0, 4.0, 2, 16),
    ];
    for run in &runs {
        let e = dmrg_su2(run).unwrap_err();
        assert!(matches!(e, tessera_mps::Error::Dmrg { .. }), "{run:?}: {e}");
    }
    // The edges are allowed: empty, full, and every spin up.
    for (electrons, total_two_s, want) in [(0, 0, 0.0), (8, 0, 16.0), (4, 4, 0.0)] {
        let g = dmrg_su2(&Su2Dmrg {
            total_two_s,
            ..Su2Dmrg::hubbard(4, 1.0, 4.0, electrons, 16)
        })
        .unwrap();
        assert!(
            (g.energy - want).abs() < 1e-12,
            "N = {electrons}: {}",
            g.energy
        );
    }
}
