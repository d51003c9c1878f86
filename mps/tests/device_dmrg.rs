//! DMRG on a GPU (feature `cuda`): the same engine with every tensor, contraction, Lanczos
//! vector and SVD on device 0 reaches the host run's energy to 1e-10, for a bosonic and a
//! fermionic model. Without a driver, cuSOLVER, NVRTC or a device the test prints
//! `skipped: ...` and returns.
#![cfg(feature = "cuda")]

use tessera_backends::Host;
use tessera_backends::cuda::{Cuda, probe_cusolver, probe_nvrtc};
use tessera_core::Runtime;
use tessera_mps::dmrg::{Backend, Dmrg, Settings};
use tessera_mps::models::{ChainModel, Model, ModelVisitor};

/// Device 0 with what the engine needs there, or `None` having said why the test skips.
fn gpu() -> Option<Cuda> {
    let skip = |e: &dyn std::fmt::Display| println!("skipped: no usable CUDA device ({e})");
    let cuda = match Cuda::open(0) {
        Ok(c) => c,
        Err(e) => {
            skip(&e);
            return None;
        }
    };
    if let Err(e) = probe_cusolver().and_then(|()| probe_nvrtc()) {
        skip(&e);
        return None;
    }
    Some(cuda)
}

/// The ground energy of a model at `placement`.
struct Ground<'a, P> {
    placement: &'a P,
}

impl<P: Backend> ModelVisitor for Ground<'_, P> {
    type Output = f64;

    fn visit<M: ChainModel>(self, model: &M) -> f64 {
        let mut settings = Settings::new(48);
        settings.sweeps = 12;
        settings.tol = 1e-13;
        Runtime::new(2)
            .unwrap()
            .enter(|| {
                let start = model.initial_state()?;
                let mut dmrg = Dmrg::on(self.placement, model.mpo()?, start, settings)?;
                dmrg.run(|_| {}, |_| {})
            })
            .unwrap()
    }
}

#[test]
fn dmrg_on_the_device_reaches_the_host_energy() {
    let Some(gpu) = gpu() else { return };
    for spec in ["heisenberg:L=16", "tv:L=12,V=1.5", "hubbard:L=8,U=4"] {
        let host = Model::parse(spec)
            .unwrap()
            .visit(Ground { placement: &Host });
        let device = Model::parse(spec)
            .unwrap()
            .visit(Ground { placement: &gpu });
        assert!(
            (host - device).abs() < 1e-10,
            "{spec}: host {host:.14}, device {device:.14}"
        );
    }
}
