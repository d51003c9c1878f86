//! The main job: two-site DMRG on Tessera's block-sparse tensors, for a model by name
//! (`--model`, default the open spin-1/2 Heisenberg chain with `J = 1` and U(1) Sz symmetry;
//! also XXZ in a field, J1-J2, spin 1, spinless t-V fermions and the Fermi-Hubbard chain,
//! built by `tessera::mps::models` and checked against exact diagonalisation in
//! mps/tests/dmrg_models.rs).
//!
//! Starts from the model's product state in its charge sector (for the Heisenberg chain the
//! Néel state, `Sz = 0`, `1/2` for odd `L`), sweeps until the
//! energy changes by less than `--tol` between sweeps or `--sweeps` have run, and prints per
//! sweep the energy, the largest discarded weight, the bond dimension and the time. Progress
//! goes to stderr: a progress bar when stderr is a terminal, otherwise a plain line at most
//! once a second (no carriage returns, so logs stay readable). The last line is
//! `E0 = <energy>`. The engine is `tessera::mps::dmrg`; with `--json FILE` the converged
//! state's entanglement, one-site values and correlations (`tessera::mps::observables`) are
//! written there for `examples/dmrg/plot.py`.
//!
//! Flags (`--help` lists them; parsed by `examples/args/dmrg.rs`): `--model SPEC`
//! (`NAME` or `NAME:key=value,...`, e.g. `hubbard:U=8,filling=0.5`), `--sites L` (2..=4096,
//! default 32), `--chi D` (1..=16384, default 128), `--sweeps N` (1..=10000, default 20;
//! a resumed run counts its checkpoint's sweeps), `--tol E` (finite, >= 0, default 1e-10),
//! `--lanczos-iter N` and `--lanczos-iter-early N` (the most Lanczos products per step,
//! in every sweep and in the early ones, 1..=1000; defaults 40 and 12),
//! `--threads T` (0..=1024; 0, the default, means one per available core, and the header
//! says how many that is), `--trace FILE` (the task timeline as Chrome trace-event JSON; the
//! file is opened before the run, so an unwritable path is refused at once), `--save DIR`
//! (a checkpoint after every sweep, `DIR/dmrg.npz`), `--resume DIR` (continue from that
//! checkpoint; it must be of the same model, `--sites` and `--chi`), `--json FILE`, `--spill DIR` (environments
//! the current step does not touch live in files in `DIR`). A bad, missing, repeated or
//! unknown flag or value, an unwritable `--trace`, `--save` or `--spill`, or a `--resume`
//! without a checkpoint prints the usage naming the flag and exits with status 2; a failure
//! during the run (a checkpoint of another model, size or bond dimension included) exits
//! with status 1. `--distributed` (a build with the `mpi` feature, started by mpirun) runs
//! the sweeps with every tensor distributed over the ranks (`tessera::mps::dmrg::DistDmrg`);
//! rank 0 prints, and the energies are the one process's.
//!
//! ```sh
//! cargo run --release --example dmrg                                  # L = 32, chi = 128
//! cargo run --release --example dmrg -- --sites 64 --chi 256 --sweeps 8 --tol 1e-9 --threads 2
//! cargo run --release --example dmrg -- --sites 16 --trace dmrg.json  # Perfetto opens it
//! cargo run --release --example dmrg -- --sweeps 3 --save ck          # then, to go on:
//! cargo run --release --example dmrg -- --resume ck --save ck
//! cargo run --release --example dmrg -- --sites 64 --chi 512 --sweeps 6 --spill /tmp/envs
//! cargo run --release --example dmrg -- --model hubbard:U=4 --sites 16 --chi 256 --json h.json
//! cargo run --release --example dmrg -- --model tv:V=1.5 --sites 32 --chi 64
//! cargo build --release --features mpi --example dmrg                # then, on 2 ranks:
//! mpirun -n 2 --bind-to none target/release/examples/dmrg --distributed --sites 16 --chi 64
//! ```

#[allow(dead_code)] // the other drivers' flags, compiled here too
#[path = "../args/mod.rs"]
mod args;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};
use tessera::mps::dmrg::{Backend, Dmrg, Progress, Settings, SweepStats};
use tessera::mps::models::{ChainModel, ModelVisitor};
use tessera::mps::observables::{LocalOperator, Observables, Report};
use tessera::prelude::Runtime;

/// The error type of the driver: every layer's errors, boxed.
type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The one-site operators measured when the site type has them.
const ONE_SITE: [&str; 6] = ["Sz", "N", "Ntot", "Nup", "Ndn", "NupNdn"];
/// The correlation pairs measured when the site type has both operators.
const PAIRS: [(&str, &str); 4] = [("Sz", "Sz"), ("Sp", "Sm"), ("Cdag", "C"), ("Cdagup", "Cup")];

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
        json,
        model,
    } = prepared;
    let settings = Settings {
        sweeps: args.sweeps,
        tol: args.tol,
        lanczos_iter: args.lanczos_iter,
        lanczos_iter_early: args.lanczos_iter_early,
        ..Settings::new(args.chi)
    };
    // Under --distributed: MPI for this process, and only rank 0 prints (every rank
    // computes the same energies).
    #[cfg(feature = "mpi")]
    let world = if args.distributed {
        Some(tessera::distributed::World::init()?)
    } else {
        None
    };
    #[cfg(feature = "mpi")]
    let (comm, lead) = match &world {
        Some(w) => (Some(w.comm().clone()), w.comm().rank() == 0),
        None => (None, true),
    };
    #[cfg(not(feature = "mpi"))]
    let lead = true;
    let runtime = Runtime::new(threads.count)?;
    if lead {
        println!(
            "two-site DMRG, {model}: chi = {}, at most {} sweeps, tol = {:e}, {}",
            settings.chi, settings.sweeps, settings.tol, threads
        );
    }
    #[cfg(feature = "mpi")]
    if let (Some(c), true) = (&comm, lead) {
        println!(
            "distributed over {} ranks of an MPI job, blocks placed by coupled sector",
            c.size()
        );
    }
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
    let energy = runtime.enter(|| {
        model.visit(Run {
            args: &args,
            settings,
            json,
            #[cfg(feature = "mpi")]
            comm: comm.as_ref(),
        })
    })?;
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
    if lead {
        println!(
            "total {:.3} s; energy per site {:.12}",
            total.as_secs_f64(),
            energy / args.sites as f64,
        );
        println!("E0 = {energy:.15}");
    }
    Ok(())
}

/// One run on a typed model: the sweeps, then the measurements for `--json`.
struct Run<'a> {
    args: &'a args::dmrg::Args,
    settings: Settings,
    json: Option<args::Output>,
    /// This rank, under `--distributed`.
    #[cfg(feature = "mpi")]
    comm: Option<&'a tessera::distributed::Comm>,
}

impl ModelVisitor for Run<'_> {
    type Output = Result<f64>;

    fn visit<M: ChainModel>(self, model: &M) -> Result<f64> {
        let Run {
            args,
            settings,
            json,
            #[cfg(feature = "mpi")]
            comm,
        } = self;
        let mpo = model.mpo()?;
        #[cfg(feature = "mpi")]
        if let Some(comm) = comm {
            return distributed(comm, mpo, model.initial_state()?, settings);
        }
        if args.device == args::block_gemm::Backend::Cuda {
            #[cfg(feature = "cuda")]
            {
                let gpu = tessera::backends::cuda::Cuda::open(0)?;
                println!("on CUDA device 0 ({})", gpu.device().name()?);
                let dmrg = Dmrg::on(&gpu, mpo, model.initial_state()?, settings)?;
                return sweeps(dmrg, model, json);
            }
            #[cfg(not(feature = "cuda"))]
            unreachable!("--device cuda is refused without the cuda feature");
        }
        let mut dmrg = match &args.resume {
            Some(dir) => {
                let dmrg = Dmrg::resume(mpo, dir, settings)?;
                println!(
                    "resumed from {} after sweep {} (E = {:.14})",
                    dir.display(),
                    dmrg.sweeps_done(),
                    dmrg.energy().unwrap_or(f64::NAN)
                );
                dmrg
            }
            None => Dmrg::new(mpo, model.initial_state()?, settings)?,
        };
        if let Some(dir) = &args.save {
            dmrg.save_every_sweep(dir)?;
        }
        if let Some(dir) = &args.spill {
            dmrg.spill_to(dir, tessera::mps::dmrg::SPILL_MIN_BYTES)?;
        }
        sweeps(dmrg, model, json)
    }
}

/// The sweeps of a distributed run (`--distributed`); rank 0 prints the table.
#[cfg(feature = "mpi")]
fn distributed<S: tessera::blocks::AbelianSector>(
    comm: &tessera::distributed::Comm,
    mpo: tessera::mps::Mpo<S>,
    start: tessera::mps::Mps<S>,
    settings: Settings,
) -> Result<f64> {
    let lead = comm.rank() == 0;
    if lead {
        print_header();
    }
    let mut dmrg = tessera::mps::dmrg::DistDmrg::new(comm, mpo, start, settings)?;
    Ok(dmrg.run(|s| {
        if lead {
            print_sweep(s);
        }
    })?)
}

/// The header of the table of sweeps.
fn print_header() {
    println!(
        "{:>5} {:>22} {:>12} {:>6} {:>8} {:>7} {:>9}",
        "sweep", "energy", "truncation", "chi", "matvecs", "capped", "time [s]"
    );
}

/// One sweep's line of the table.
fn print_sweep(s: &SweepStats) {
    println!(
        "{:>5} {:>22.14} {:>12.3e} {:>6} {:>8} {:>7} {:>9.3}",
        s.sweep,
        s.energy,
        s.truncation,
        s.max_bond,
        s.matvecs,
        s.unconverged,
        s.time.as_secs_f64()
    );
}

/// The sweeps of a prepared run at any placement, then the measurements for `--json`.
fn sweeps<M: ChainModel, P: Backend>(
    mut dmrg: Dmrg<M::Charge, P>,
    model: &M,
    json: Option<args::Output>,
) -> Result<f64> {
    let reporter = std::cell::RefCell::new(Reporter::new());
    let progress = |p: &Progress| reporter.borrow_mut().step(p);
    let report = |s: &SweepStats| {
        reporter.borrow_mut().sweep_done();
        print_sweep(s);
    };
    print_header();
    let energy = dmrg.run(progress, report)?;
    reporter.borrow_mut().sweep_done();
    if let Some(out) = json {
        let site = model.site();
        let names: Vec<&str> = ONE_SITE
            .into_iter()
            .chain(PAIRS.iter().flat_map(|&(a, b)| [a, b]))
            .filter(|n| site.operator(n).is_ok())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let ops: Vec<(&str, LocalOperator<M::Charge>)> = names
            .iter()
            .map(|&n| Ok((n, site.local_operator(n)?)))
            .collect::<tessera::mps::Result<_>>()?;
        let named: Vec<(&str, &LocalOperator<M::Charge>)> =
            ops.iter().map(|(n, o)| (*n, o)).collect();
        let pairs: Vec<(&str, &str)> = PAIRS
            .into_iter()
            .filter(|(a, b)| names.contains(a) && names.contains(b))
            .collect();
        let measured = Report::measure(&Observables::new(&dmrg.mps()?)?, &named, &pairs)?
            .with_energies(energy, dmrg.energies().to_vec());
        let path = out.path().display().to_string();
        out.write(measured.to_json()?.as_bytes())?;
        let entropy = measured
            .entanglement
            .iter()
            .map(|b| b.entropy)
            .fold(0.0, f64::max);
        println!("wrote the measurements to {path} (largest entanglement entropy {entropy:.6})");
    }
    Ok(energy)
}
