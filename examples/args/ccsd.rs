//! The `ccsd` driver's flags. Owns their ranges, the orbital counts per D2h irrep and the
//! memory a run needs; invariant: a [`Prepared`] run has every flag in range, at least one
//! occupied and one virtual orbital, a memory need (computed in checked arithmetic) within
//! `--max-memory`, and its `--json` file (if any) open for writing, all before anything is
//! allocated.

use super::block_gemm::{FALLBACK_MEMORY_GIB, MAX_MEMORY_GIB, machine_memory_gib};
use super::{Output, Threads, in_range, threads_parser, usage_error};
use clap::{Parser, ValueEnum};
use std::fmt;
use std::path::PathBuf;

/// The irreps of D2h in Cotton order; an irrep's position is its index `h`, and the direct
/// product of irreps `g` and `h` is irrep `g ^ h` (bitwise xor).
pub(crate) const IRREP_NAMES: [&str; 8] = ["Ag", "B1g", "B2g", "B3g", "Au", "B1u", "B2u", "B3u"];
/// The most orbitals of one irrep `--occ` and `--virt` take.
pub(crate) const MAX_PER_IRREP: usize = 4096;
/// The most timed repetitions `--reps` takes.
pub(crate) const MAX_REPS: u64 = 1000;
/// The default `--occ`: benzene, all 21 doubly occupied orbitals (see [`Args::occ`]).
pub(crate) const BENZENE_OCC: &str = "6,3,1,1,0,1,4,5";
/// The default `--virt`: benzene in cc-pVDZ, the 93 virtual orbitals (see [`Args::virt`]).
pub(crate) const BENZENE_VIRT: &str = "18,15,8,5,6,8,14,19";

const GIB: u128 = 1 << 30;
/// Bytes of one `f64`.
const F64_BYTES: u128 = 8;

/// The CCSD doubles contractions (the particle-particle ladder and a particle-hole ring term)
/// on D2h-symmetric block-sparse tensors, each beside a dense einsum of the same tensors.
///
/// Orbital counts are given per D2h irrep in Cotton order: Ag,B1g,B2g,B3g,Au,B1u,B2u,B3u.
/// The defaults are benzene in cc-pVDZ (all electrons; the molecule in the xy plane, the x
/// axis through two carbons). The amplitudes and integrals are random (seeded), real and
/// totally symmetric: they have the blocks of real ones.
#[derive(Parser, Debug, Clone)]
#[command(name = "ccsd", allow_negative_numbers = true)]
pub(crate) struct Args {
    /// Occupied orbitals per irrep: 8 counts in the order Ag,B1g,B2g,B3g,Au,B1u,B2u,B3u (each
    /// 0..=4096, at least one in all).
    #[arg(long, value_name = "N0,..,N7", default_value = BENZENE_OCC, value_parser = Irreps::parse)]
    pub(crate) occ: Irreps,
    /// Virtual orbitals per irrep, as --occ (each 0..=4096, at least one in all).
    #[arg(long, value_name = "N0,..,N7", default_value = BENZENE_VIRT, value_parser = Irreps::parse)]
    pub(crate) virt: Irreps,
    /// Which contractions run.
    #[arg(long, value_name = "TERM", value_enum, default_value_t = Terms::Both)]
    pub(crate) term: Terms,
    /// Timed repetitions of each contraction; the median is reported (1..=1000).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = in_range(1, MAX_REPS))]
    pub(crate) reps: usize,
    /// Worker threads (0..=1024; 0: one per available core).
    #[arg(long, value_name = "T", default_value_t = 0, value_parser = threads_parser())]
    pub(crate) threads: usize,
    /// Seed of the random amplitudes and integrals.
    #[arg(long, value_name = "S", default_value_t = 7)]
    pub(crate) seed: u64,
    /// Write the measured figures here as JSON; opened before the run.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Refuse a run whose tensors (block-sparse and dense, with the temporaries) need more
    /// than this many GiB (1..=1048576; default: the machine's memory, or 16 where it cannot
    /// be read).
    #[arg(long, value_name = "GIB", value_parser = clap::value_parser!(u64).range(1..=MAX_MEMORY_GIB))]
    pub(crate) max_memory: Option<u64>,
}

/// Orbital counts per D2h irrep (index `h` in Cotton order, [`IRREP_NAMES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Irreps(pub(crate) [usize; 8]);

impl Irreps {
    /// Parses 8 comma-separated counts, each `0..=MAX_PER_IRREP`.
    pub(crate) fn parse(spec: &str) -> Result<Self, String> {
        let parts: Vec<&str> = spec.split(',').collect();
        if parts.len() != 8 {
            return Err(format!(
                "expected 8 comma-separated counts ({}), given {}",
                IRREP_NAMES.join(","),
                parts.len()
            ));
        }
        let mut counts = [0; 8];
        for (h, part) in parts.iter().enumerate() {
            counts[h] = match part.trim().parse::<usize>() {
                Ok(n) if n <= MAX_PER_IRREP => n,
                _ => {
                    return Err(format!(
                        "the count of {} is {part:?}, not an integer in 0..={MAX_PER_IRREP}",
                        IRREP_NAMES[h]
                    ));
                }
            };
        }
        Ok(Self(counts))
    }

    /// All orbitals.
    pub(crate) fn total(&self) -> usize {
        self.0.iter().sum()
    }
}

impl fmt::Display for Irreps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (h, n) in self.0.iter().enumerate() {
            if h > 0 {
                f.write_str(",")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

/// The `--term` values.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Terms {
    /// The particle-particle ladder and the particle-hole ring term.
    Both,
    /// The particle-particle ladder `R(i,j,c,d) = sum_ab T2(i,j,a,b) V(a,b,c,d)`.
    Ladder,
    /// The particle-hole ring term `R(i,j,a,b) = sum_kc T2(i,k,a,c) W(k,b,c,j)`.
    Ring,
}

impl Terms {
    /// Whether the ladder runs.
    pub(crate) fn ladder(self) -> bool {
        matches!(self, Terms::Both | Terms::Ladder)
    }

    /// Whether the ring term runs.
    pub(crate) fn ring(self) -> bool {
        matches!(self, Terms::Both | Terms::Ring)
    }
}

impl fmt::Display for Terms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self
            .to_possible_value()
            .map_or_else(String::new, |p| p.get_name().to_owned());
        f.write_str(&name)
    }
}

/// The elements of a four-leg tensor whose legs have `counts` orbitals per irrep and whose
/// irreps multiply to the totally symmetric one (`h1 ^ h2 ^ h3 ^ h4 = 0`), or `None` on
/// overflow.
pub(crate) fn symmetric_elements(counts: [&Irreps; 4]) -> Option<u128> {
    let mut total: u128 = 0;
    for h1 in 0..8 {
        for h2 in 0..8 {
            for h3 in 0..8 {
                let h4 = h1 ^ h2 ^ h3;
                let block = [h1, h2, h3, h4]
                    .iter()
                    .zip(counts)
                    .try_fold(1u128, |acc, (&h, c)| acc.checked_mul(c.0[h] as u128))?;
                total = total.checked_add(block)?;
            }
        }
    }
    Some(total)
}

/// The elements of the dense four-leg tensor with legs of `counts`, or `None` on overflow.
pub(crate) fn dense_elements(counts: [&Irreps; 4]) -> Option<u128> {
    counts
        .iter()
        .try_fold(1u128, |acc, c| acc.checked_mul(c.total() as u128))
}

/// What a run's tensors take, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Memory {
    /// The block-sparse tensors: the operands, the results, and the temporaries that bring
    /// operands and results into matrix form (counted as one more copy of each).
    pub(crate) symmetric: u128,
    /// The dense tensors: the operands, the results, the permuted copies of the ring term,
    /// and the block-sparse results expanded for the comparison.
    pub(crate) dense: u128,
}

impl Memory {
    /// The need of `terms` over `occ` and `virt` orbitals, in checked arithmetic (`None`:
    /// not even representable).
    pub(crate) fn of(occ: &Irreps, virt: &Irreps, terms: Terms) -> Option<Self> {
        let (o, v) = (occ, virt);
        let sum = |xs: &[Option<u128>]| -> Option<u128> {
            xs.iter()
                .try_fold(0u128, |acc, x| acc.checked_add((*x)?))?
                .checked_mul(F64_BYTES)
        };
        // T2(i,j,a,b), shared by both terms; R has its shape in both.
        let oovv_sym = symmetric_elements([o, o, v, v]);
        let oovv_dense = dense_elements([o, o, v, v]);
        let mut symmetric = vec![oovv_sym];
        let mut dense = vec![oovv_dense];
        if terms.ladder() {
            // V, R, and one temporary of each operand and the result.
            let vvvv_sym = symmetric_elements([v, v, v, v]);
            symmetric.extend([vvvv_sym, oovv_sym, vvvv_sym, oovv_sym, oovv_sym]);
            // V, R, the block-sparse R expanded.
            dense.extend([dense_elements([v, v, v, v]), oovv_dense, oovv_dense]);
        }
        if terms.ring() {
            // W(k,b,c,j), R, and their temporaries (T2's included).
            let ovvo_sym = symmetric_elements([o, v, v, o]);
            symmetric.extend([ovvo_sym, oovv_sym, ovvo_sym, oovv_sym, oovv_sym]);
            // W, the permuted T2 and W, the product before its permutation, R, R expanded.
            let ovvo_dense = dense_elements([o, v, v, o]);
            dense.extend([ovvo_dense; 2]);
            dense.extend([oovv_dense; 4]);
        }
        Some(Self {
            symmetric: sum(&symmetric)?,
            dense: sum(&dense)?,
        })
    }

    /// Both, in bytes.
    pub(crate) fn total(&self) -> u128 {
        self.symmetric.saturating_add(self.dense)
    }
}

/// A run the flags allow.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The flags.
    pub(crate) args: Args,
    /// What the tensors take.
    pub(crate) memory: Memory,
    /// The workers, `--threads` resolved.
    pub(crate) threads: Threads,
    /// `--json`, open.
    pub(crate) json: Option<Output>,
}

impl Args {
    /// Checks that there are occupied and virtual orbitals, checks the memory the run needs
    /// against `--max-memory`, resolves `--threads` and opens `--json`, or the usage error
    /// naming the flag. Nothing large is allocated here.
    pub(crate) fn prepare(self) -> Result<Prepared, clap::Error> {
        for (flag, counts) in [("--occ", &self.occ), ("--virt", &self.virt)] {
            if counts.total() == 0 {
                return Err(usage_error::<Args>(
                    flag,
                    format!("{counts} gives no orbital at all; at least one is needed"),
                ));
            }
        }
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
        // The dense V(a,b,c,d) dominates: name --virt (or --occ for the ring term alone).
        let flag = if self.term.ladder() {
            "--virt"
        } else {
            "--occ"
        };
        let too_big = |need: String| {
            usage_error::<Args>(
                flag,
                format!(
                    "the run (--occ {} --virt {} --term {}) needs {need}, above the limit of \
                     {limit} GiB ({whose}); lower --occ or --virt, or pick one --term",
                    self.occ, self.virt, self.term
                ),
            )
        };
        let memory = Memory::of(&self.occ, &self.virt, self.term)
            .ok_or_else(|| too_big("more bytes than 2^128".to_owned()))?;
        if memory.total() > u128::from(limit) * GIB {
            return Err(too_big(format!(
                "{:.1} GiB (block-sparse {:.1} GiB, dense {:.1} GiB)",
                memory.total() as f64 / GIB as f64,
                memory.symmetric as f64 / GIB as f64,
                memory.dense as f64 / GIB as f64,
            )));
        }
        let json = match &self.json {
            Some(path) => Some(Output::open::<Args>("--json", path)?),
            None => None,
        };
        Ok(Prepared {
            memory,
            threads: Threads::resolve(self.threads),
            json,
            args: self,
        })
    }
}
