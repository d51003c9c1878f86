//! SU(2) two-site DMRG of the open Heisenberg chain beside the U(1) engine at the same number
//! of kept states: `cargo run --release --example su2_dmrg -- [sites] [two_s] [states] [sweeps]`
//! (defaults 32 1 64 4). Prints both ground energies and wall times.

use std::time::Instant;
use tessera_mps::dmrg::{Dmrg, Settings};
use tessera_mps::models::{ChainModel, Model, ModelVisitor};
use tessera_mps::su2::{Su2Dmrg, heisenberg_su2};

struct U1Run {
    states: usize,
    sweeps: usize,
}

impl ModelVisitor for U1Run {
    type Output = tessera_mps::Result<f64>;

    fn visit<M: ChainModel>(self, model: &M) -> Self::Output {
        let mut settings = Settings::new(self.states);
        settings.sweeps = self.sweeps;
        settings.tol = 0.0;
        let mut dmrg = Dmrg::new(model.mpo()?, model.initial_state()?, settings)?;
        dmrg.run(|_| {}, |_| {})
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let (sites, two_s, states, sweeps) = (arg(0, 32), arg(1, 1) as u32, arg(2, 64), arg(3, 4));
    let run = Su2Dmrg {
        sites,
        two_s,
        j: 1.0,
        max_states: states,
        sweeps,
        seed: 7,
    };
    let t = Instant::now();
    let su2 = heisenberg_su2(&run)?;
    let t_su2 = t.elapsed().as_secs_f64();
    println!(
        "SU(2): E0 = {:.12}  {t_su2:.2} s  (at most {} states in {} multiplets)",
        su2.energy, su2.max_states, su2.max_multiplets
    );
    let spec = if two_s == 1 {
        format!("heisenberg:L={sites}")
    } else {
        format!("xxz:L={sites},S={},Jz=1", f64::from(two_s) / 2.0)
    };
    let t = Instant::now();
    let u1 = Model::parse(&spec)?.visit(U1Run { states, sweeps })?;
    let t_u1 = t.elapsed().as_secs_f64();
    println!("U(1):  E0 = {u1:.12}  {t_u1:.2} s  ({states} states)");
    println!(
        "|dE| = {:.2e}, time U(1) / SU(2) = {:.2}",
        (su2.energy - u1).abs(),
        t_u1 / t_su2
    );
    Ok(())
}
