//! The `dmrg` driver's flags. Owns their ranges; invariant: a [`Prepared`] run has every flag
//! in range, its `--trace` file (if any) open for writing, its `--save` and `--spill`
//! directories (if any) existing and writable, and its `--resume` directory (if any) holding
//! a checkpoint file, and its `--model` parsed into a [`Model`] on `--sites` sites.

use super::block_gemm::Backend;
use super::{MAX_THREADS, Output, Threads, in_range, non_negative, threads_parser, usage_error};
use clap::Parser;
use std::path::{Path, PathBuf};
use tessera::mps::dmrg::CHECKPOINT_FILE;
use tessera::mps::models::{MODELS, Model};

/// The longest chain `--sites` takes.
pub(crate) const MAX_SITES: u64 = 4096;
/// The largest bond dimension `--chi` takes.
pub(crate) const MAX_CHI: u64 = 16384;
/// The most sweeps `--sweeps` takes.
pub(crate) const MAX_SWEEPS: u64 = 10_000;

/// Two-site DMRG for open chains with abelian symmetries: spin chains (Heisenberg, XXZ in a
/// field, J1-J2), spinless t-V fermions and the Fermi-Hubbard chain.
#[derive(Parser, Debug, Clone)]
#[command(name = "dmrg", allow_negative_numbers = true)]
pub(crate) struct Args {
    /// The model: NAME or NAME:key=value,... (heisenberg, xxz, j1j2, tv, hubbard; the chain
    /// length is --sites, not a key). Keys and defaults: heisenberg J hz S Sz; xxz Jxy Jz hz
    /// S Sz; j1j2 J1 J2 hz S Sz; tv t V t2 N; hubbard t U filling Sz.
    #[arg(long, value_name = "SPEC", default_value = "heisenberg")]
    pub(crate) model: String,
    /// Chain length L (2..=4096).
    #[arg(long, value_name = "L", default_value_t = 32, value_parser = in_range(2, MAX_SITES))]
    pub(crate) sites: usize,
    /// The largest bond dimension kept (1..=16384).
    #[arg(long, value_name = "D", default_value_t = 128, value_parser = in_range(1, MAX_CHI))]
    pub(crate) chi: usize,
    /// The most sweeps run (1..=10000).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = in_range(1, MAX_SWEEPS))]
    pub(crate) sweeps: usize,
    /// Stop once a sweep changes the energy by less than this (finite, >= 0).
    #[arg(long, value_name = "E", default_value_t = 1e-10, value_parser = non_negative, allow_hyphen_values = true)]
    pub(crate) tol: f64,
    /// The most Lanczos products per step (1..=1000).
    #[arg(long, value_name = "N", default_value_t = tessera::mps::dmrg::LANCZOS_ITER, value_parser = in_range(1, 1000))]
    pub(crate) lanczos_iter: usize,
    /// The most Lanczos products per step of an early sweep (1..=1000): the first two, and
    /// those after a sweep that changed the energy by more than 1e-6 per site.
    #[arg(long, value_name = "N", default_value_t = tessera::mps::dmrg::LANCZOS_ITER_EARLY, value_parser = in_range(1, 1000))]
    pub(crate) lanczos_iter_early: usize,
    /// Worker threads (0..=1024; 0: one per available core).
    #[arg(long, value_name = "T", default_value_t = 0, value_parser = threads_parser())]
    pub(crate) threads: usize,
    /// Write the runtime's task timeline here as Chrome trace-event JSON (Perfetto opens it);
    /// opened before the run.
    #[arg(long, value_name = "FILE")]
    pub(crate) trace: Option<PathBuf>,
    /// Write a checkpoint to DIR after every sweep (DIR/dmrg.npz, replaced atomically;
    /// DIR is created if missing).
    #[arg(long, value_name = "DIR")]
    pub(crate) save: Option<PathBuf>,
    /// Continue from the checkpoint in DIR (written by --save with the same --sites and
    /// --chi); --sweeps counts its sweeps too.
    #[arg(long, value_name = "DIR")]
    pub(crate) resume: Option<PathBuf>,
    /// Write the converged state's measurements here as JSON (energy per sweep, entanglement
    /// per bond, one-site values, correlation matrices; examples/dmrg/plot.py draws them);
    /// opened before the run.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Keep the environment tensors the current step does not touch in files in DIR
    /// (created if missing; the files are removed at the end).
    #[arg(long, value_name = "DIR")]
    pub(crate) spill: Option<PathBuf>,
    /// Where the sweeps run: cpu (host memory, the runtime's workers) or cuda (device 0:
    /// every tensor, contraction, Lanczos vector and SVD on the GPU; needs the `cuda`
    /// feature, and no --save, --resume or --spill, which are host-side).
    #[arg(long, value_name = "DEVICE", value_enum, default_value_t = Backend::Cpu)]
    pub(crate) device: Backend,
    /// Run on the ranks of an MPI job (start it with mpirun; each rank holds the blocks of
    /// some coupled sectors of every tensor, and every rank prints the same E0). Needs the
    /// `mpi` feature, and no --device cuda, --save, --resume, --spill, --json or --trace.
    #[arg(long)]
    pub(crate) distributed: bool,
}

/// A run the flags allow.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The flags.
    pub(crate) args: Args,
    /// The workers, `--threads` resolved.
    pub(crate) threads: Threads,
    /// `--trace`, open.
    pub(crate) trace: Option<Output>,
    /// `--json`, open.
    pub(crate) json: Option<Output>,
    /// `--model` on `--sites` sites.
    pub(crate) model: Model,
}

/// `dir` as a directory this process can write files in, created if missing, or the usage
/// error naming `flag`.
fn writable_dir(flag: &str, dir: &Path) -> Result<(), clap::Error> {
    let refuse = |why: String| usage_error::<Args>(flag, format!("{}: {why}", dir.display()));
    std::fs::create_dir_all(dir)
        .map_err(|e| refuse(format!("cannot create the directory: {e}")))?;
    let probe = dir.join(format!(".tessera-dmrg-probe-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .map_err(|e| refuse(format!("cannot write files in the directory: {e}")))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

impl Args {
    /// Resolves `--threads`, checks `--resume`, opens `--trace` and makes sure `--save` and
    /// `--spill` can be written, or the usage error naming the flag.
    pub(crate) fn prepare(self) -> Result<Prepared, clap::Error> {
        debug_assert!(self.threads <= MAX_THREADS);
        let model = self.parse_model()?;
        if self.device == Backend::Cuda {
            if !cfg!(feature = "cuda") {
                return Err(usage_error::<Args>(
                    "--device",
                    "cuda is not part of this build: it needs the `cuda` feature \
                     (cargo run --features cuda ...); available: cpu",
                ));
            }
            for (flag, given) in [
                ("--save", self.save.is_some()),
                ("--resume", self.resume.is_some()),
                ("--spill", self.spill.is_some()),
            ] {
                if given {
                    return Err(usage_error::<Args>(
                        flag,
                        "checkpoints and spilled environments are host-side: use --device cpu",
                    ));
                }
            }
        }
        if self.distributed {
            if !cfg!(feature = "mpi") {
                return Err(usage_error::<Args>(
                    "--distributed",
                    "MPI is not part of this build: it needs the `mpi` feature \
                     (cargo build --release --features mpi --example dmrg, then mpirun)",
                ));
            }
            for (flag, given) in [
                ("--device", self.device == Backend::Cuda),
                ("--save", self.save.is_some()),
                ("--resume", self.resume.is_some()),
                ("--spill", self.spill.is_some()),
                ("--json", self.json.is_some()),
                ("--trace", self.trace.is_some()),
            ] {
                if given {
                    return Err(usage_error::<Args>(
                        flag,
                        "a distributed run has no checkpoints, spilling, measurements, \
                         traces or device yet: leave it out, or --distributed",
                    ));
                }
            }
        }
        if let Some(dir) = &self.resume {
            let file = dir.join(CHECKPOINT_FILE);
            if !file.is_file() {
                return Err(usage_error::<Args>(
                    "--resume",
                    format!("no checkpoint {} (write one with --save)", file.display()),
                ));
            }
        }
        for (flag, dir) in [("--save", &self.save), ("--spill", &self.spill)] {
            if let Some(dir) = dir {
                writable_dir(flag, dir)?;
            }
        }
        let trace = match &self.trace {
            Some(path) => Some(Output::open::<Args>("--trace", path)?),
            None => None,
        };
        let json = match &self.json {
            Some(path) => Some(Output::open::<Args>("--json", path)?),
            None => None,
        };
        Ok(Prepared {
            threads: Threads::resolve(self.threads),
            trace,
            json,
            model,
            args: self,
        })
    }

    /// `--model` with `L` from `--sites`, or the usage error naming `--model` (an unknown
    /// name or key, a value out of range, an `L` key: the length is `--sites`).
    fn parse_model(&self) -> Result<Model, clap::Error> {
        let refuse = |why: String| usage_error::<Args>("--model", why);
        let (name, params) = match self.model.split_once(':') {
            Some((name, params)) => (name.trim(), params.trim()),
            None => (self.model.trim(), ""),
        };
        if params
            .split(',')
            .any(|kv| kv.split('=').next().is_some_and(|k| k.trim() == "L"))
        {
            return Err(refuse(format!(
                "{:?}: the chain length is --sites, not a model parameter",
                self.model
            )));
        }
        let spec = if params.is_empty() {
            format!("{name}:L={}", self.sites)
        } else {
            format!("{name}:L={},{params}", self.sites)
        };
        Model::parse(&spec).map_err(|e| {
            let known: Vec<String> = MODELS.iter().map(|(n, k)| format!("{n} ({k})")).collect();
            refuse(format!("{e}\n  models: {}", known.join("; ")))
        })
    }
}
