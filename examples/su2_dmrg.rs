//! SU(2) two-site DMRG of the open Heisenberg chain beside the U(1) engine at the same number
//! of kept states:
//! `cargo run --release --example su2_dmrg -- [sites] [two_s] [states] [sweeps] [engines]
//! [total_two_s]` (defaults 32 1 64 4 both, and the lowest total spin; `engines` is `both`,
//! `su2` or `u1`; a total spin other than the lowest is for `su2` alone). With `two_s = 0`,
//! the Hubbard chain at half filling and `U = 4` instead: SU(2) x U(1) beside the U(1) x U(1)
//! engine. Prints the ground energies and wall times.

use std::time::Instant;
use tessera::blocks::su2::{permutation_cache_stats, recoupling_cache_stats};
use tessera_mps::dmrg::{Dmrg, Settings};
use tessera_mps::models::{ChainModel, Model, ModelVisitor};
use tessera_mps::su2::{Su2Dmrg, dmrg_su2};

struct U1Run {
    states: usize,
    sweeps: usize,
}

impl ModelVisitor for U1Run {
    /// Per sweep: the energy and the cumulative wall time.
    type Output = tessera_mps::Result<Vec<(f64, f64)>>;

    fn visit<M: ChainModel>(self, model: &M) -> Self::Output {
        let start = Instant::now();
        let mut settings = Settings::new(self.states);
        settings.sweeps = self.sweeps;
        settings.tol = 0.0;
        let mut dmrg = Dmrg::new(model.mpo()?, model.initial_state()?, settings)?;
        let mut out = Vec::new();
        dmrg.run(
            |_| {},
            |s| out.push((s.energy, start.elapsed().as_secs_f64())),
        )?;
        Ok(out)
    }
}

/// The wall time at which a run's energy first comes within `tol` of `target`.
fn time_to(run: &[(f64, f64)], target: f64, tol: f64) -> Option<f64> {
    run.iter().find(|(e, _)| e - target < tol).map(|&(_, t)| t)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let engines = if args.len() > 4 {
        args.remove(4)
    } else {
        "both".to_owned()
    };
    if !["both", "su2", "u1"].contains(&engines.as_str()) {
        return Err(format!("engines: expected both, su2 or u1, given {engines}").into());
    }
    let args: Vec<usize> = args.iter().map(|a| a.parse()).collect::<Result<_, _>>()?;
    let arg = |i: usize, d: usize| args.get(i).copied().unwrap_or(d);
    let (sites, two_s, states, sweeps) = (arg(0, 32), arg(1, 1) as u32, arg(2, 64), arg(3, 4));
    let base = if two_s == 0 {
        Su2Dmrg::hubbard(sites, 1.0, 4.0, u32::try_from(sites)?, states)
    } else {
        Su2Dmrg::new(sites, two_s, states)
    };
    let lowest = base.total_two_s;
    let total_two_s = u32::try_from(arg(4, lowest as usize))?;
    if total_two_s != lowest && engines != "su2" {
        return Err("a total spin other than the lowest is for the su2 engine alone".into());
    }
    let mut runs: Vec<(&str, Vec<(f64, f64)>)> = Vec::new();
    if engines != "u1" {
        let run = Su2Dmrg {
            sweeps,
            seed: 7,
            total_two_s,
            ..base
        };
        let g = dmrg_su2(&run)?;
        let mut t = 0.0;
        let per_sweep = g.energies.iter().zip(&g.sweep_seconds).map(|(&e, &s)| {
            t += s;
            (e, t)
        });
        runs.push(("SU(2)", per_sweep.collect()));
        println!(
            "SU(2): at most {} states in {} multiplets",
            g.max_states, g.max_multiplets
        );
        let (p, r) = (permutation_cache_stats(), recoupling_cache_stats());
        println!(
            "SU(2): permutation plans {} made, {} reused; recouplings {} made, {} reused",
            p.misses, p.hits, r.misses, r.hits
        );
    }
    if engines != "su2" {
        let spec = if two_s == 0 {
            format!("hubbard:L={sites},U=4")
        } else if two_s == 1 {
            format!("heisenberg:L={sites}")
        } else {
            format!("xxz:L={sites},S={},Jz=1", f64::from(two_s) / 2.0)
        };
        runs.push((
            "U(1)",
            Model::parse(&spec)?.visit(U1Run { states, sweeps })?,
        ));
        println!("U(1):  at most {states} states");
    }
    println!(
        "sweep  {}",
        runs.iter()
            .map(|(n, _)| format!("{n:>6} E0            time/s"))
            .collect::<Vec<_>>()
            .join("  ")
    );
    for k in 0..sweeps {
        let cells: Vec<String> = runs
            .iter()
            .filter_map(|(_, r)| r.get(k))
            .map(|(e, t)| format!("{e:>20.12}  {t:>8.3}"))
            .collect();
        println!("{:>5}  {}", k + 1, cells.join("  "));
    }
    // Equal accuracy: the time each engine takes to come within 1e-8 of the lowest energy
    // either reached.
    let best = runs
        .iter()
        .flat_map(|(_, r)| r.iter().map(|x| x.0))
        .fold(f64::INFINITY, f64::min);
    for (name, r) in &runs {
        match time_to(r, best, 1e-8) {
            Some(t) => println!("{name}: within 1e-8 of {best:.12} after {t:.3} s"),
            None => println!("{name}: not within 1e-8 of {best:.12}"),
        }
    }
    if let [(_, a), (_, b)] = runs.as_slice()
        && let (Some(ta), Some(tb)) = (time_to(a, best, 1e-8), time_to(b, best, 1e-8))
    {
        println!("time U(1) / SU(2) at equal accuracy: {:.2}", tb / ta);
    }
    Ok(())
}
