//! The DMRG engine on every model by name, against exact diagonalisation of the same terms
//! (issue 28 item 2): ground energies to `1e-9` at sizes where the bond dimension holds the
//! whole ground state, and free fermions (`V = 0`, `U = 0`) against the sum of the
//! single-particle energies at 32 sites.

use tessera_core::Runtime;
use tessera_mps::dmrg::{Dmrg, Settings};
use tessera_mps::exact;
use tessera_mps::models::{ChainModel, Model, ModelVisitor};

/// The ground energy DMRG finds for a model, and the exact one of its terms in its sector
/// (`None` past exact diagonalisation's size).
struct Ground {
    chi: usize,
    exact: bool,
}

impl ModelVisitor for Ground {
    type Output = (f64, Option<f64>);

    fn visit<M: ChainModel>(self, model: &M) -> Self::Output {
        let exact = self
            .exact
            .then(|| exact::ground_energy(&model.terms().unwrap(), &model.sector()).unwrap());
        let mut settings = Settings::new(self.chi);
        settings.sweeps = 30;
        settings.tol = 1e-12;
        let runtime = Runtime::new(2).unwrap();
        let e = runtime
            .enter(|| {
                let mut dmrg = Dmrg::new(model.mpo()?, model.initial_state()?, settings)?;
                dmrg.run(|_| {}, |_| {})
            })
            .unwrap();
        (e, exact)
    }
}

fn check(spec: &str, chi: usize) {
    let (dmrg, exact) = Model::parse(spec)
        .unwrap()
        .visit(Ground { chi, exact: true });
    let exact = exact.unwrap();
    assert!(
        (dmrg - exact).abs() < 1e-9,
        "{spec}: DMRG {dmrg:.14}, exact {exact:.14}"
    );
}

#[test]
fn spin_chains_reach_the_exact_ground_energy() {
    check("heisenberg:L=12", 64);
    check("xxz:L=10,Jxy=0.7,Jz=1.3,hz=0.4", 32);
    check("j1j2:L=10,J2=0.5", 32);
    check("heisenberg:L=7", 8); // odd length: the Sz = 1/2 sector
    check("xxz:L=7,S=1,Jz=0.5,hz=0.2", 27);
}

#[test]
fn spinless_fermions_reach_the_exact_ground_energy() {
    check("tv:L=10,t=1,V=1.5", 32);
    check("tv:L=10,t=1,V=0.5,t2=0.4,N=4", 32);
}

#[test]
fn hubbard_chains_reach_the_exact_ground_energy() {
    check("hubbard:L=6,U=4", 64);
    check("hubbard:L=6,U=2,filling=0.5", 64);
    check("hubbard:L=5,U=8,t=1", 32); // an odd electron number: Sz = 1/2
}

/// `sum` of the `n` lowest of `-2 t cos(pi k / (L + 1))`, `k = 1..=L`: the free open chain.
fn free_energy(l: usize, n: usize, t: f64) -> f64 {
    let mut e: Vec<f64> = (1..=l)
        .map(|k| -2.0 * t * (std::f64::consts::PI * k as f64 / (l + 1) as f64).cos())
        .collect();
    e.sort_by(f64::total_cmp);
    e[..n].iter().sum()
}

#[test]
fn free_fermions_at_32_sites_give_the_single_particle_sum() {
    let (e, _) = Model::parse("tv:L=32,t=1,V=0").unwrap().visit(Ground {
        chi: 64,
        exact: false,
    });
    let want = free_energy(32, 16, 1.0);
    assert!(
        (e - want).abs() < 1e-9,
        "t-V at V = 0: {e:.14} vs {want:.14}"
    );
}

#[test]
fn free_electrons_at_8_and_32_sites_give_twice_the_single_particle_sum() {
    // U = 0: two free species. At 8 sites chi = 256 holds the ground state whole; at 32
    // sites and quarter filling the product of the two species' Schmidt spectra needs more
    // than chi = 256 for 1e-9 (4e-7 there, in a minute and a half), too long for a test.
    let (e, _) = Model::parse("hubbard:L=8,t=1,U=0,filling=1")
        .unwrap()
        .visit(Ground {
            chi: 256,
            exact: false,
        });
    let want = 2.0 * free_energy(8, 4, 1.0);
    assert!(
        (e - want).abs() < 1e-9,
        "Hubbard at U = 0: {e:.14} vs {want:.14}"
    ); // At 32 sites with 4 electrons (2 of each spin) each species' Schmidt rank is at most 4
    // at any cut, so chi = 32 holds the product state of the two whole.
    let (e, _) = Model::parse("hubbard:L=32,t=1,U=0,filling=0.125")
        .unwrap()
        .visit(Ground {
            chi: 32,
            exact: false,
        });
    let want = 2.0 * free_energy(32, 2, 1.0);
    assert!(
        (e - want).abs() < 1e-9,
        "Hubbard at U = 0, L = 32: {e:.14} vs {want:.14}"
    );
}
