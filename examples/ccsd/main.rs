//! Quantum-chemistry driver: the coupled-cluster doubles contractions that dominate CCSD, with
//! orbitals labelled by the point group D2h (the product of three Z2 sectors), each run on
//! Tessera's block-sparse tensors and, in the same run, as a dense einsum of the same tensors
//! (faer GEMM after reshaping). The terms:
//!
//! - the particle-particle ladder `R(i,j,c,d) = sum_ab T2(i,j,a,b) V(a,b,c,d)`
//!   (`o^2 v^4`, the most expensive term of CCSD);
//! - the particle-hole ring term `R(i,j,a,b) = sum_kc T2(i,k,a,c) W(k,b,c,j)` (`o^3 v^3`),
//!   whose operands and result are permuted into matrix form and back.
//!
//! The amplitudes and integrals are random (uniform in `[-1, 1)`, from `--seed`), real, with
//! the point-group symmetry of real ones: every tensor is totally symmetric (flux Ag), so a
//! block is present exactly when its irreps multiply to Ag. For each term the driver prints
//! the flops (block-sparse: those of the block products the plan runs; dense: `2 o^2 v^4`
//! and `2 o^3 v^3`), the median time of `--reps` repetitions, the GFLOP/s, and the symmetric
//! speed-up (dense time / block-sparse time, measured in the same run), and checks that the
//! block-sparse result equals the dense one to 1e-10 relative (Frobenius norm); a larger
//! difference is a failure (exit status 1). The machinery is `cc.rs` beside this file, which
//! `tests/ccsd.rs` checks against a plain loop einsum.
//!
//! Flags (`--help` lists them; parsed by `examples/args/ccsd.rs`): `--occ N0,..,N7` and
//! `--virt N0,..,N7` (orbitals per irrep in Cotton order Ag,B1g,B2g,B3g,Au,B1u,B2u,B3u, each
//! 0..=4096, at least one in all; default benzene in cc-pVDZ, all electrons:
//! `6,3,1,1,0,1,4,5` occupied and `18,15,8,5,6,8,14,19` virtual), `--term both|ladder|ring`,
//! `--reps N` (1..=1000, default 3), `--threads T` (0..=1024; 0, the default, means one per
//! available core), `--seed S`, `--json FILE` (the figures as JSON, opened before the run),
//! `--max-memory GIB` (refuse a run whose tensors, block-sparse and dense, need more;
//! default: the machine's memory). A bad, missing, repeated or unknown flag or value, or a
//! run too big, prints the usage naming the flag and exits with status 2.
//!
//! ```sh
//! cargo run --release --example ccsd                           # benzene, cc-pVDZ
//! cargo run --release --example ccsd -- --occ 3,1,1,1,0,2,1,1 --virt 12,6,8,8,4,12,8,8 --term ring
//! ```

#[allow(dead_code)] // the other drivers' flags, compiled here too
#[path = "../args/mod.rs"]
mod args;
mod cc;

use cc::{D2h, DenseTerm, IRREPS, Orbitals, Problem, Result, Term, irrep_index, relative_error};
use std::time::{Duration, Instant};
use tessera::blocks::Leg;
use tessera::prelude::Runtime;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The largest relative difference (Frobenius norm) between the block-sparse and the dense
/// result that passes.
const TOLERANCE: f64 = 1e-10;

fn main() -> std::process::ExitCode {
    // A bad flag, a run too big for the memory, or an output that cannot be opened: the
    // usage, exit status 2, nothing allocated.
    let prepared = args::parse_or_exit(args::ccsd::Args::prepare);
    match run(prepared) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The median of the timings of `reps` runs of `f`, after one untimed run (plans cached,
/// pages touched).
fn median_time(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<Duration> {
    f()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok(times[times.len() / 2])
}

/// One term's measured figures.
struct Measured {
    term: Term,
    symmetric_flops: f64,
    symmetric_time: Duration,
    dense_flops: f64,
    dense_time: Duration,
    error: f64,
}

impl Measured {
    fn symmetric_gflops(&self) -> f64 {
        self.symmetric_flops / self.symmetric_time.as_secs_f64() / 1e9
    }
    fn dense_gflops(&self) -> f64 {
        self.dense_flops / self.dense_time.as_secs_f64() / 1e9
    }
    /// Dense time over block-sparse time.
    fn speedup(&self) -> f64 {
        self.dense_time.as_secs_f64() / self.symmetric_time.as_secs_f64()
    }
}

/// One term: built, timed both ways, compared.
fn measure(
    term: Term,
    orbitals: &Orbitals,
    seed: u64,
    reps: usize,
    runtime: &Runtime,
) -> Result<Measured> {
    let problem = Problem::new(term, orbitals, seed)?;
    println!("\n{}: {}", term.name(), term.formula());
    print!("{}", indent(&problem.plan.to_string()));
    let symmetric_time = median_time(reps, || problem.run(runtime))?;

    let mut dense = DenseTerm::new(&problem)?;
    let threads = runtime.threads();
    let par = if threads > 1 {
        faer::Par::rayon(threads)
    } else {
        faer::Par::Seq
    };
    let dense_time = median_time(reps, || {
        runtime.install(|| dense.run(par));
        Ok(())
    })?;
    let error = relative_error(&problem.out.to_dense()?, &dense.out.data);
    let m = Measured {
        term,
        symmetric_flops: problem.flops(),
        symmetric_time,
        dense_flops: term.dense_flops(orbitals.n_occ(), orbitals.n_virt()),
        dense_time,
        error,
    };
    println!(
        "  {:<22} {:>12} {:>12} {:>10}",
        "", "GFLOP", "time [ms]", "GFLOP/s"
    );
    for (what, flops, time, rate) in [
        (
            "tessera, D2h blocks",
            m.symmetric_flops,
            m.symmetric_time,
            m.symmetric_gflops(),
        ),
        (
            "dense einsum (faer)",
            m.dense_flops,
            m.dense_time,
            m.dense_gflops(),
        ),
    ] {
        println!(
            "  {what:<22} {:>12.3} {:>12.3} {rate:>10.2}",
            flops / 1e9,
            time.as_secs_f64() * 1e3
        );
    }
    println!(
        "  flops dense / symmetric {:.2}; symmetric speed-up (dense time / tessera time) {:.2}; \
         relative difference {:.1e}",
        m.dense_flops / m.symmetric_flops,
        m.speedup(),
        m.error
    );
    // A NaN difference fails too.
    if m.error.is_nan() || m.error > TOLERANCE {
        return Err(format!(
            "{}: the block-sparse result differs from the dense one by {:.3e} (relative), \
             above {TOLERANCE:e}",
            term.name(),
            m.error
        )
        .into());
    }
    Ok(m)
}

/// `text` with every line indented by two spaces.
fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// The orbitals of `leg` per irrep, as `Ag 6, B1g 3, ...` (every irrep, none where the leg
/// has no segment).
fn per_irrep(leg: &Leg<D2h>) -> String {
    let mut counts = [0; 8];
    for segment in leg.segments() {
        counts[irrep_index(&segment.sector)] = segment.dim;
    }
    IRREPS
        .iter()
        .zip(counts)
        .map(|(name, n)| format!("{name} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn run(prepared: args::ccsd::Prepared) -> Result<()> {
    let args::ccsd::Prepared {
        args,
        memory,
        threads,
        json,
    } = prepared;
    let orbitals = Orbitals::new(args.occ.0, args.virt.0)?;
    let runtime = Runtime::new(threads.count)?;
    println!(
        "ccsd: D2h doubles contractions, {threads}, median of {} (after one untimed run)",
        args.reps
    );
    println!(
        "occupied {} ({})",
        orbitals.n_occ(),
        per_irrep(&orbitals.occ)
    );
    println!(
        "virtual  {} ({})",
        orbitals.n_virt(),
        per_irrep(&orbitals.virt)
    );
    println!(
        "amplitudes and integrals: random, uniform in [-1, 1) from seed {}, totally symmetric \
         (blocks whose irreps multiply to Ag)",
        args.seed
    );
    println!(
        "memory: block-sparse {:.3} GiB, dense {:.3} GiB (with temporaries)",
        memory.symmetric as f64 / (1u64 << 30) as f64,
        memory.dense as f64 / (1u64 << 30) as f64
    );
    let terms: Vec<Term> = Term::ALL
        .into_iter()
        .filter(|t| match t {
            Term::Ladder => args.term.ladder(),
            Term::Ring => args.term.ring(),
        })
        .collect();
    let mut measured = Vec::new();
    for term in terms {
        measured.push(measure(term, &orbitals, args.seed, args.reps, &runtime)?);
    }
    if let Some(json) = json {
        let term_json = |m: &Measured| {
            serde_json::json!({
                "formula": m.term.formula(),
                "symmetric": {
                    "flops": m.symmetric_flops,
                    "seconds": m.symmetric_time.as_secs_f64(),
                    "gflops_per_s": m.symmetric_gflops(),
                },
                "dense": {
                    "flops": m.dense_flops,
                    "seconds": m.dense_time.as_secs_f64(),
                    "gflops_per_s": m.dense_gflops(),
                },
                "speedup": m.speedup(),
                "relative_difference": m.error,
            })
        };
        let report = serde_json::json!({
            "irreps": IRREPS,
            "occ": orbitals.occ_counts,
            "virt": orbitals.virt_counts,
            "threads": threads.count,
            "reps": args.reps,
            "seed": args.seed,
            "terms": measured
                .iter()
                .map(|m| (m.term.name().to_owned(), term_json(m)))
                .collect::<serde_json::Map<_, _>>(),
        });
        let path = json.path().display().to_string();
        json.write((serde_json::to_string_pretty(&report)? + "\n").as_bytes())?;
        println!("\nwrote {path}");
    }
    Ok(())
}
