//! The main job: two-site DMRG for the open spin-1/2 Heisenberg chain (`J = 1`) with U(1)
//! (Sz) symmetry, on Tessera's block-sparse tensors.
//!
//! Starts from the Néel state in the `Sz = 0` sector (`1/2` for odd `L`), sweeps until the
//! energy changes by less than `--tol` between sweeps or `--sweeps` have run, and prints per
//! sweep the energy, the largest discarded weight, the bond dimension and the time. Progress
//! goes to stderr: a progress bar when stderr is a terminal, otherwise a plain line at most
//! once a second (no carriage returns, so logs stay readable). The last line is
//! `E0 = <energy>`. The model (MPO and Néel state) is `heisenberg.rs` beside this file; the
//! engine is `tessera::mps::dmrg`.
//!
//! Flags (`--help` lists them; parsed by `examples/args/dmrg.rs`): `--sites L` (2..=4096,
//! default 32), `--chi D` (1..=16384, default 128), `--sweeps N` (1..=10000, default 20;
//! a resumed run counts its checkpoint's sweeps), `--tol E` (finite, >= 0, default 1e-10),
//! `--threads T` (0..=1024; 0, the default, means one per available core, and the header
//! says how many that is), `--trace FILE` (the task timeline as Chrome trace-event JSON; the
//! file is opened before the run, so an unwritable path is refused at once), `--save DIR`
//! (a checkpoint after every sweep, `DIR/dmrg.npz`), `--resume DIR` (continue from that
//! checkpoint; it must be of the same `--sites` and `--chi`), `--spill DIR` (environments
//! the current step does not touch live in files in `DIR`). A bad, missing, repeated or
//! unknown flag or value, an unwritable `--trace`, `--save` or `--spill`, or a `--resume`
//! without a checkpoint prints the usage naming the flag and exits with status 2; a failure
//! during the run (a checkpoint of another model, size or bond dimension included) exits
//! with status 1.
//!
//! ```sh
//! cargo run --release --example dmrg                                  # L = 32, chi = 128
//! cargo run --release --example dmrg -- --sites 64 --chi 256 --sweeps 8 --tol 1e-9 --threads 2
//! cargo run --release --example dmrg -- --sites 16 --trace dmrg.json  # Perfetto opens it
//! cargo run --release --example dmrg -- --sweeps 3 --save ck          # then, to go on:
//! cargo run --release --example dmrg -- --resume ck --save ck
//! cargo run --release --example dmrg -- --sites 64 --chi 512 --sweeps 3 --spill /tmp/envs
//! ```

#[allow(dead_code)] // the other drivers' flags, compiled here too
#[path = "../args/mod.rs"]
mod args;
#[allow(dead_code)] // the test uses more of the model than the driver
mod heisenberg;

use heisenberg::Result;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};
use tessera::mps::dmrg::{Dmrg, Progress, Settings, SweepStats};
use tessera::prelude::Runtime;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The buffer pool's byte limit under `--spill`.
const SPILL_POOL_BYTES: usize = 64 << 20;

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

/// Progress on stderr: a bar on a terminal, plain lines otherwise.
enum Reporter {
    /// The bar of the sweep under way (a new one per sweep).
    Bar(Option<ProgressBar>),
    /// When the last plain line was printed.
    Lines(Option<Instant>),
}

impl Reporter {
    fn new() -> Self {
        if std::io::stderr().is_terminal() {
            Reporter::Bar(None)
        } else {
            Reporter::Lines(None)
        }
    }

    fn step(&mut self, p: &Progress) {
        match self {
            Reporter::Bar(bar) => {
                let bar = bar.get_or_insert_with(|| {
                    let bar = ProgressBar::new(p.steps as u64);
                    bar.set_style(
                        ProgressStyle::with_template(
                            "  sweep {prefix:>3} [{bar:40}] {pos:>4}/{len:4} {msg} ({elapsed})",
                        )
                        .expect("a valid template")
                        .progress_chars("=> "),
                    );
                    bar.set_prefix(p.sweep.to_string());
                    bar
                });
                bar.set_position(p.step as u64);
                bar.set_message(format!(
                    "sites ({:>3},{:>3})  bond {:>5}  E = {:.12}",
                    p.site,
                    p.site + 1,
                    p.bond,
                    p.energy
                ));
            }
            Reporter::Lines(last) => {
                let due = last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
                if due {
                    eprintln!(
                        "  sweep {} step {}/{} sites ({},{}) bond {} E = {:.12}",
                        p.sweep,
                        p.step,
                        p.steps,
                        p.site,
                        p.site + 1,
                        p.bond,
                        p.energy
                    );
                    *last = Some(Instant::now());
                }
            }
        }
    }

    /// The sweep is over: the bar goes (the summary line follows on stdout).
    fn sweep_done(&mut self) {
        if let Reporter::Bar(bar) = self
            && let Some(bar) = bar.take()
        {
            bar.finish_and_clear();
        }
    }
}

fn run(prepared: args::dmrg::Prepared) -> Result<()> {
    let args::dmrg::Prepared {
        args,
        threads,
        trace,
    } = prepared;
    let settings = Settings {
        sweeps: args.sweeps,
        tol: args.tol,
        ..Settings::new(args.chi)
    };
    let runtime = Runtime::new(threads.count)?;
    println!(
        "two-site DMRG, Heisenberg chain: L = {}, chi = {}, at most {} sweeps, tol = {:e}, {}",
        args.sites, settings.chi, settings.sweeps, settings.tol, threads
    );
    if args.spill.is_some() {
        // Dropped environments would otherwise wait in the buffer pool (512 MiB by default)
        // for a tensor of their size: with the environments on disk, keep the pool small.
        tessera::core::set_buffer_pool_limits(SPILL_POOL_BYTES, tessera::core::POOL_ENTRIES);
        println!(
            "environments of 1 MiB and more spill to {}; buffer pool limited to {} MiB",
            args.spill
                .as_ref()
                .map_or(String::new(), |d| d.display().to_string()),
            SPILL_POOL_BYTES >> 20
        );
    }
    if trace.is_some() {
        runtime.start_trace();
    }
    let start = Instant::now();
    let reporter = std::cell::RefCell::new(Reporter::new());
    let progress = |p: &Progress| reporter.borrow_mut().step(p);
    let report = |s: &SweepStats| {
        reporter.borrow_mut().sweep_done();
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
        let mpo = heisenberg::mpo(args.sites)?;
        let mut dmrg = match &args.resume {
            Some(dir) => {
                let dmrg = Dmrg::resume(mpo, dir, settings.clone())?;
                println!(
                    "resumed from {} after sweep {} (E = {:.14})",
                    dir.display(),
                    dmrg.sweeps_done(),
                    dmrg.energy().unwrap_or(f64::NAN)
                );
                dmrg
            }
            None => Dmrg::new(mpo, heisenberg::neel(args.sites)?, settings.clone())?,
        };
        if let Some(dir) = &args.save {
            dmrg.save_every_sweep(dir)?;
        }
        if let Some(dir) = &args.spill {
            dmrg.spill_to(dir, tessera::mps::dmrg::SPILL_MIN_BYTES)?;
        }
        println!(
            "{:>5} {:>22} {:>12} {:>6} {:>8} {:>9}",
            "sweep", "energy", "truncation", "chi", "matvecs", "time [s]"
        );
        Ok(dmrg.run(progress, report)?)
    })?;
    reporter.borrow_mut().sweep_done();
    let total = start.elapsed();
    if let Some(out) = trace {
        let t = runtime.stop_trace();
        let path = out.path().display().to_string();
        out.write(t.to_chrome_json().as_bytes())?;
        println!("wrote {} task events to {path}", t.events.len());
    }
    if let Some(dir) = &args.save {
        println!(
            "checkpoint: {}",
            dir.join(tessera::mps::dmrg::CHECKPOINT_FILE).display()
        );
    }
    let l = args.sites as f64;
    println!(
        "total {:.3} s; energy per site {:.12} (1/4 - ln 2 = {:.12} for L -> infinity)",
        total.as_secs_f64(),
        energy / l,
        0.25 - std::f64::consts::LN_2
    );
    println!("E0 = {energy:.15}");
    Ok(())
}
