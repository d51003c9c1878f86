//! Distributed DMRG against one process, on 1, 2 and 3 ranks.
//!
//! One process per rank, so this test has no harness: started alone (by `cargo test`), it
//! relaunches itself under `mpirun` for each size and fails if any run fails; started by
//! mpirun, every rank runs [`DistDmrg`] on a spin chain and on two fermionic chains, and the
//! same sweeps of [`Dmrg`] in one process (every rank can: the models are the same
//! everywhere), and checks that the energy of every sweep agrees to 1e-10, and that the
//! distributed state, gathered, is normalised with the one process's bonds.

use tessera_distributed::{DistArray, World};
use tessera_mps::dmrg::{DistDmrg, Dmrg, Settings};
use tessera_mps::models::{ChainModel, Model, ModelVisitor};

fn main() {
    if !tessera_testing::under_mpirun() {
        tessera_testing::relaunch_under_mpirun(&[1, 2, 3]);
        return;
    }
    let world = World::init().expect("MPI with thread level Multiple");
    let comm = world.comm();
    for (spec, chi) in [
        ("heisenberg:L=12", 24),
        ("tv:L=10,V=1.5", 24),
        ("hubbard:L=6,U=4", 32),
    ] {
        let model = Model::parse(spec).unwrap();
        let (ours, theirs) = model.visit(Both { comm, chi });
        assert_eq!(ours.len(), theirs.len(), "{spec}: sweeps");
        for (sweep, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert!(
                (a - b).abs() < 1e-10,
                "{spec} sweep {}: {a} distributed against {b}",
                sweep + 1
            );
        }
        // An MPS of another length, or of other sites, is refused with a typed error.
        let other = Model::parse("heisenberg:L=8,S=1").unwrap();
        let mismatch = match (&model, &other) {
            (Model::Spin(m), Model::Spin(o)) => Some(
                DistDmrg::new(
                    comm,
                    m.mpo().unwrap(),
                    o.initial_state().unwrap(),
                    Settings::new(4),
                )
                .unwrap_err(),
            ),
            _ => None,
        };
        if let Some(e) = mismatch {
            assert!(matches!(e, tessera_mps::Error::Dmrg { .. }), "{e}");
        }
        println!(
            "rank {}/{}: {spec} E0 = {:.12} ok",
            comm.rank(),
            comm.size(),
            ours.last().unwrap()
        );
    }
}

/// Both runs of one model: the energies per sweep, distributed and in one process.
struct Both<'a> {
    comm: &'a tessera_distributed::Comm,
    chi: usize,
}

impl ModelVisitor for Both<'_> {
    type Output = (Vec<f64>, Vec<f64>);

    fn visit<M: ChainModel>(self, model: &M) -> Self::Output {
        let settings = Settings {
            sweeps: 6,
            tol: 1e-12,
            ..Settings::new(self.chi)
        };
        let mpo = || model.mpo().unwrap();
        let start = || model.initial_state().unwrap();
        let mut one = Dmrg::new(mpo(), start(), settings.clone()).unwrap();
        one.run(|_| {}, |_| {}).unwrap();
        let mut dist = DistDmrg::new(self.comm, mpo(), start(), settings).unwrap();
        dist.run(|_| {}).unwrap();
        // The state is normalised: a sweep ends with the centre on site 1 (site 0 is a left
        // isometry), whose tensor then has norm 1.
        let norm = dist.tensors()[1].norm().unwrap();
        assert!((norm - 1.0).abs() < 1e-10, "the centre's norm {norm}");
        let gathered: Vec<_> = dist.tensors().iter().map(DistArray::gather).collect();
        // The same bonds (the split between codomain and domain may differ).
        for (t, want) in gathered.iter().zip(one.tensors()) {
            let t = t.as_ref().unwrap();
            assert_eq!(t.structure().legs(), want.structure().legs());
        }
        (dist.energies().to_vec(), one.energies().to_vec())
    }
}
