//! The main job: two-site DMRG for the open spin-1/2 Heisenberg chain (`J = 1`) with U(1)
//! (Sz) symmetry, on Tessera's block-sparse tensors.
//!
//! Starts from the Néel state in the `Sz = 0` sector (`1/2` for odd `L`), sweeps until the
//! energy changes by less than `--tol` between sweeps or `--sweeps` have run, and prints per
//! sweep the energy, the largest discarded weight, the bond dimension and the time; a
//! progress line on stderr follows each sweep's steps. The last line is `E0 = <energy>`.
//! The machinery (MPO, environments, Lanczos, sweep) is `heisenberg.rs` beside this file.
//!
//! ```sh
//! cargo run --release --example dmrg                                  # L = 32, chi = 128
//! cargo run --release --example dmrg -- --sites 64 --chi 256 --sweeps 8 --tol 1e-9 --threads 2
//! cargo run --release --example dmrg -- --sites 16 --trace dmrg.json  # Perfetto opens it
//! ```

mod heisenberg;

use heisenberg::{Dmrg, Progress, Result, Settings, SweepStats};
use std::io::Write as _;
use std::time::Instant;
use tessera::prelude::Runtime;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str =
    "usage: dmrg [--sites L] [--chi D] [--sweeps N] [--tol E] [--threads T] [--trace FILE]";

/// The value after `name`, parsed, or `default`.
fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => {
            let v = args
                .get(i + 1)
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))?;
            v.parse()
                .map_err(|_| format!("{name}: cannot parse {v:?}\n{USAGE}").into())
        }
    }
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let known = [
        "--sites",
        "--chi",
        "--sweeps",
        "--tol",
        "--threads",
        "--trace",
    ];
    for (i, a) in args.iter().enumerate() {
        let is_value = i > 0 && known.contains(&args[i - 1].as_str());
        if !is_value && !known.contains(&a.as_str()) {
            return Err(format!("unknown argument {a:?}\n{USAGE}").into());
        }
    }
    let mut settings = Settings::new(flag(&args, "--sites", 32)?, flag(&args, "--chi", 128)?);
    settings.sweeps = flag(&args, "--sweeps", settings.sweeps)?;
    settings.tol = flag(&args, "--tol", settings.tol)?;
    let threads = flag(
        &args,
        "--threads",
        std::thread::available_parallelism()?.get(),
    )?;
    let trace: Option<String> = match args.iter().position(|a| a == "--trace") {
        None => None,
        Some(i) => Some(
            args.get(i + 1)
                .cloned()
                .ok_or_else(|| format!("--trace needs a file name\n{USAGE}"))?,
        ),
    };

    let runtime = Runtime::new(threads)?;
    println!(
        "two-site DMRG, Heisenberg chain: L = {}, chi = {}, at most {} sweeps, tol = {:e}, {} threads",
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
    if let Some(path) = &trace {
        let t = runtime.stop_trace();
        t.write_chrome(path)?;
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
