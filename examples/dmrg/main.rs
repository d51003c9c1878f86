//! The main job: two-site DMRG for the open spin-1/2 Heisenberg chain (`J = 1`) with U(1)
//! (Sz) symmetry, on Tessera's block-sparse tensors.
//!
//! Starts from the Néel state in the `Sz = 0` sector (`1/2` for odd `L`), sweeps until the
//! energy changes by less than `--tol` between sweeps or `--sweeps` have run, and prints per
//! sweep the energy, the largest discarded weight, the bond dimension and the time; a
//! progress line on stderr follows each sweep's steps. The last line is `E0 = <energy>`.
//! The machinery (MPO, environments, Lanczos, sweep) is `heisenberg.rs` beside this file.
//!
//! Flags (`--help` lists them; parsed by `examples/args/dmrg.rs`): `--sites L` (2..=4096,
//! default 32), `--chi D` (1..=16384, default 128), `--sweeps N` (1..=10000, default 20),
//! `--tol E` (finite, >= 0, default 1e-10), `--threads T` (0..=1024; 0, the default, means one
//! per available core, and the header says how many that is), `--trace FILE` (the task
//! timeline as Chrome trace-event JSON; the file is opened before the run, so an unwritable
//! path is refused at once). A bad, missing, repeated or unknown flag or value, or an
//! unwritable `--trace`, prints the usage naming the flag and exits with status 2; a failure
//! during the run exits with status 1.
//!
//! ```sh
//! cargo run --release --example dmrg                                  # L = 32, chi = 128
//! cargo run --release --example dmrg -- --sites 64 --chi 256 --sweeps 8 --tol 1e-9 --threads 2
//! cargo run --release --example dmrg -- --sites 16 --trace dmrg.json  # Perfetto opens it
//! ```

#[allow(dead_code)] // the other drivers' flags, compiled here too
#[path = "../args/mod.rs"]
mod args;
mod heisenberg;

use heisenberg::{Dmrg, Progress, Result, Settings, SweepStats};
use std::io::Write as _;
use std::time::Instant;
use tessera::prelude::Runtime;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // A bad flag, or an output that cannot be opened: the usage, exit status 2, nothing run.
    let prepared = args::parse_or_exit(args::dmrg::Args::prepare);
    match run(prepared) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(prepared: args::dmrg::Prepared) -> Result<()> {
    let args::dmrg::Prepared {
        args,
        threads,
        trace,
    } = prepared;
    let mut settings = Settings::new(args.sites, args.chi);
    settings.sweeps = args.sweeps;
    settings.tol = args.tol;
    let runtime = Runtime::new(threads.count)?;
    println!(
        "two-site DMRG, Heisenberg chain: L = {}, chi = {}, at most {} sweeps, tol = {:e}, {}",
        settings.sites, settings.chi, settings.sweeps, settings.tol, threads
    );
    println!(
        "{:>5} {:>22} {:>12} {:>6} {:>8} {:>9}",
        "sweep", "energy", "truncation", "chi", "matvecs", "time [s]"
    );
    if trace.is_some() {
        runtime.start_trace();
    }
    let start = Instant::now();
    let progress = |p: &Progress| {
        eprint!(
            "\r  sweep {} step {:>4}/{:<4} sites ({:>3},{:>3})  bond {:>5}  E = {:.12}   ",
            p.sweep,
            p.step,
            p.steps,
            p.site,
            p.site + 1,
            p.bond,
            p.energy
        );
        let _ = std::io::stderr().flush();
    };
    let report = |s: &SweepStats| {
        eprint!("\r{:100}\r", "");
        println!(
            "{:>5} {:>22.14} {:>12.3e} {:>6} {:>8} {:>9.3}",
            s.sweep,
            s.energy,
            s.truncation,
            s.max_bond,
            s.matvecs,
            s.time.as_secs_f64()
        );
    };
    let energy = runtime.enter(|| -> Result<f64> {
        let mut dmrg = Dmrg::new(settings.clone())?;
        dmrg.run(progress, report)
    })?;
    let total = start.elapsed();
    if let Some(out) = trace {
        let t = runtime.stop_trace();
        let path = out.path().display().to_string();
        out.write(t.to_chrome_json().as_bytes())?;
        println!("wrote {} task events to {path}", t.events.len());
    }
    let l = settings.sites as f64;
    println!(
        "total {:.3} s; energy per site {:.12} (1/4 - ln 2 = {:.12} for L -> infinity)",
        total.as_secs_f64(),
        energy / l,
        0.25 - std::f64::consts::LN_2
    );
    println!("E0 = {energy:.15}");
    Ok(())
}
