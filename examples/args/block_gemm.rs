//! The `block_gemm` driver's flags. Owns their ranges, the block sizes drawn from `--sizes`
//! and the memory a run needs; invariant: a [`Prepared`] run has every flag in range, its
//! block sizes drawn, a memory need (computed in checked arithmetic) within `--max-memory`,
//! and its `--json` file open for writing, all before anything is allocated.

use super::{Output, Threads, in_range, threads_parser, usage_error};
use clap::{Parser, ValueEnum};
use rand::{Rng, SeedableRng};
use std::fmt;
use std::path::PathBuf;

/// The most sectors (blocks) `--sectors` takes.
pub(crate) const MAX_SECTORS: u64 = 1 << 16;
/// The largest block side a `--sizes` distribution takes.
pub(crate) const MAX_SIDE: usize = 1 << 20;
/// The most timed repetitions `--reps` takes.
pub(crate) const MAX_REPS: u64 = 10_000;
/// The most side streams `--lanes` takes.
pub(crate) const MAX_LANES: u64 = 64;
/// The largest `--max-memory` (GiB).
pub(crate) const MAX_MEMORY_GIB: u64 = 1 << 20;
/// The memory limit where the machine's memory cannot be read (GiB).
pub(crate) const FALLBACK_MEMORY_GIB: u64 = 16;

const GIB: u128 = 1 << 30;

/// A block-sparse matrix product `C = A B` (one block per sector) timed beside one dense
/// GEMM of the same total flops.
#[derive(Parser, Debug, Clone)]
#[command(name = "block_gemm", allow_negative_numbers = true)]
pub(crate) struct Args {
    /// Sectors, one `d x d` block each (1..=65536).
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = in_range(1, MAX_SECTORS))]
    pub(crate) sectors: usize,
    /// Block sides: fixed:D, uniform:MIN-MAX (drawn per sector from --seed) or list:D1,D2,..
    /// (cycled over the sectors); every side 1..=1048576.
    #[arg(long, value_name = "DIST", default_value = "fixed:256", value_parser = SizeDist::parse)]
    pub(crate) sizes: SizeDist,
    /// Element type.
    #[arg(long = "type", value_name = "TYPE", value_enum, default_value_t = ScalarType::F64)]
    pub(crate) scalar: ScalarType,
    /// Where both products run (cuda: device 0 and cuBLAS, f32 or f64, in a build with
    /// `--features cuda`).
    #[arg(long, value_name = "BACKEND", value_enum, default_value_t = Backend::Cpu)]
    pub(crate) backend: Backend,
    /// Timed repetitions; the median is reported (1..=10000).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = in_range(1, MAX_REPS))]
    pub(crate) reps: usize,
    /// Worker threads (0..=1024; 0: one per available core).
    #[arg(long, value_name = "T", default_value_t = 0, value_parser = threads_parser())]
    pub(crate) threads: usize,
    /// Side streams for independent GEMMs (cuda only; 1..=64, default 4).
    #[arg(long, value_name = "L", value_parser = in_range(1, MAX_LANES))]
    pub(crate) lanes: Option<usize>,
    /// Seed of the uniform size distribution.
    #[arg(long, value_name = "S", default_value_t = 7)]
    pub(crate) seed: u64,
    /// The JSON report; opened before the run.
    #[arg(long, value_name = "FILE", default_value = "block_gemm.json")]
    pub(crate) json: PathBuf,
    /// Refuse a run whose matrices (A, B, C and the three dense ones) need more than this many
    /// GiB (1..=1048576; default: the machine's memory, or 16 where it cannot be read).
    #[arg(long, value_name = "GIB", value_parser = clap::value_parser!(u64).range(1..=MAX_MEMORY_GIB))]
    pub(crate) max_memory: Option<u64>,
}

/// The element types.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScalarType {
    /// Real, single precision.
    F32,
    /// Real, double precision.
    F64,
    /// Complex, single precision.
    C32,
    /// Complex, double precision.
    C64,
}

impl ScalarType {
    /// Bytes per element.
    pub(crate) fn bytes(self) -> u128 {
        match self {
            ScalarType::F32 => 4,
            ScalarType::F64 | ScalarType::C32 => 8,
            ScalarType::C64 => 16,
        }
    }

    /// Whether the type is complex.
    pub(crate) fn is_complex(self) -> bool {
        matches!(self, ScalarType::C32 | ScalarType::C64)
    }
}

/// The backends.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// faer and the runtime's workers.
    Cpu,
    /// CUDA device 0 and cuBLAS.
    Cuda,
}

/// The flag's spelling of a value-enum value.
fn name(v: &impl ValueEnum) -> String {
    v.to_possible_value()
        .map_or_else(String::new, |p| p.get_name().to_owned())
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&name(self))
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&name(self))
    }
}

/// A `--sizes` distribution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SizeDist {
    /// Every block `d x d`.
    Fixed(usize),
    /// Sides drawn uniformly from `min..=max`.
    Uniform(usize, usize),
    /// Sides cycled from the list.
    List(Vec<usize>),
}

impl SizeDist {
    /// Parses `fixed:D`, `uniform:MIN-MAX` or `list:D1,D2,..` (every side `1..=MAX_SIDE`).
    pub(crate) fn parse(spec: &str) -> Result<Self, String> {
        let side = |s: &str| -> Result<usize, String> {
            match s.trim().parse::<usize>() {
                Ok(d) if (1..=MAX_SIDE).contains(&d) => Ok(d),
                Ok(d) => Err(format!("block side {d} is not in 1..={MAX_SIDE}")),
                Err(_) => Err(format!(
                    "block side {s:?} is not an integer in 1..={MAX_SIDE}"
                )),
            }
        };
        let (kind, rest) = spec
            .split_once(':')
            .ok_or("expected fixed:D, uniform:MIN-MAX or list:D1,D2,..")?;
        match kind {
            "fixed" => Ok(SizeDist::Fixed(side(rest)?)),
            "uniform" => {
                let (lo, hi) = rest.split_once('-').ok_or("expected uniform:MIN-MAX")?;
                let (lo, hi) = (side(lo)?, side(hi)?);
                if lo > hi {
                    return Err(format!("MIN {lo} is above MAX {hi}"));
                }
                Ok(SizeDist::Uniform(lo, hi))
            }
            "list" => Ok(SizeDist::List(
                rest.split(',').map(side).collect::<Result<_, _>>()?,
            )),
            _ => Err(format!(
                "unknown distribution {kind:?} (expected fixed, uniform or list)"
            )),
        }
    }

    /// The side of each of `sectors` blocks (`Uniform` drawn from `seed`).
    pub(crate) fn draw(&self, sectors: usize, seed: u64) -> Vec<usize> {
        match self {
            SizeDist::Fixed(d) => vec![*d; sectors],
            SizeDist::Uniform(lo, hi) => {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
                (0..sectors).map(|_| rng.gen_range(*lo..=*hi)).collect()
            }
            SizeDist::List(list) => (0..sectors).map(|q| list[q % list.len()]).collect(),
        }
    }
}

impl fmt::Display for SizeDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeDist::Fixed(d) => write!(f, "fixed:{d}"),
            SizeDist::Uniform(lo, hi) => write!(f, "uniform:{lo}-{hi}"),
            SizeDist::List(list) => {
                f.write_str("list:")?;
                for (i, d) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{d}")?;
                }
                Ok(())
            }
        }
    }
}

/// What a run's matrices take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Memory {
    /// Bytes of the block-sparse A, B and C.
    pub(crate) blocks: u128,
    /// Side of the dense baseline's square matrices (same total flops).
    pub(crate) dense_side: usize,
    /// Bytes of the dense A, B and C.
    pub(crate) dense: u128,
}

impl Memory {
    /// The need of blocks of sides `dims` of `scalar`, in checked arithmetic (`None`: not
    /// even representable).
    pub(crate) fn of(dims: &[usize], scalar: ScalarType) -> Option<Self> {
        let mut squares: u128 = 0;
        let mut cubes: u128 = 0;
        for &d in dims {
            let d = d as u128;
            let sq = d.checked_mul(d)?;
            squares = squares.checked_add(sq)?;
            cubes = cubes.checked_add(sq.checked_mul(d)?)?;
        }
        let dense_side = ((cubes as f64).cbrt().round() as usize).max(1);
        let side = dense_side as u128;
        let es = scalar.bytes();
        Some(Self {
            blocks: squares.checked_mul(3)?.checked_mul(es)?,
            dense_side,
            dense: side.checked_mul(side)?.checked_mul(3)?.checked_mul(es)?,
        })
    }

    /// Both, in bytes.
    pub(crate) fn total(&self) -> u128 {
        self.blocks.saturating_add(self.dense)
    }
}

/// The machine's memory in GiB (`MemTotal` of `/proc/meminfo`), where it can be read.
pub(crate) fn machine_memory_gib() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((kib >> 20).max(1))
}

/// A run the flags allow.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The flags.
    pub(crate) args: Args,
    /// The side of each sector's block.
    pub(crate) dims: Vec<usize>,
    /// What the matrices take.
    pub(crate) memory: Memory,
    /// The workers, `--threads` resolved.
    pub(crate) threads: Threads,
    /// `--json`, open.
    pub(crate) json: Output,
}

impl Args {
    /// Checks the backend and type, draws the block sizes, checks the memory they need
    /// against `--max-memory` and opens `--json`, or the usage error naming the flag. Nothing
    /// large is allocated here: the sizes vector has at most `MAX_SECTORS` entries.
    pub(crate) fn prepare(self) -> Result<Prepared, clap::Error> {
        if self.backend == Backend::Cuda {
            if !cfg!(feature = "cuda") {
                return Err(usage_error::<Args>(
                    "--backend",
                    "cuda is not part of this build: it needs the `cuda` feature \
                     (cargo run --features cuda ...); available: cpu",
                ));
            }
            if self.scalar.is_complex() {
                return Err(usage_error::<Args>(
                    "--type",
                    format!("the cuda backend takes f32 or f64, not {}", self.scalar),
                ));
            }
        } else if let Some(lanes) = self.lanes {
            return Err(usage_error::<Args>(
                "--lanes",
                format!(
                    "{lanes} given, but lanes are side streams of --backend cuda, not of {}",
                    self.backend
                ),
            ));
        }
        let dims = self.sizes.draw(self.sectors, self.seed);
        let (limit, whose) = match self.max_memory {
            Some(g) => (g, "--max-memory"),
            None => match machine_memory_gib() {
                Some(g) => (g, "the machine's memory; raise it with --max-memory"),
                None => (
                    FALLBACK_MEMORY_GIB,
                    "the default where the machine's memory is unknown; raise it with --max-memory",
                ),
            },
        };
        let too_big = |need: String| {
            usage_error::<Args>(
                "--sizes",
                format!(
                    "the run (--sizes {} over --sectors {}, --type {}) needs {need}, above the \
                     limit of {limit} GiB ({whose}); lower --sizes or --sectors",
                    self.sizes, self.sectors, self.scalar
                ),
            )
        };
        let memory = Memory::of(&dims, self.scalar)
            .ok_or_else(|| too_big("more bytes than 2^128".to_owned()))?;
        if memory.total() > u128::from(limit) * GIB {
            return Err(too_big(format!(
                "{:.1} GiB (block-sparse A, B, C: {:.1} GiB; dense {n}x{n} A, B, C: {:.1} GiB)",
                memory.total() as f64 / GIB as f64,
                memory.blocks as f64 / GIB as f64,
                memory.dense as f64 / GIB as f64,
                n = memory.dense_side,
            )));
        }
        let json = Output::open::<Args>("--json", &self.json)?;
        Ok(Prepared {
            dims,
            memory,
            threads: Threads::resolve(self.threads),
            json,
            args: self,
        })
    }
}
