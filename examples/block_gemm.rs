//! Block-GEMM benchmark driver: a U(1) block-sparse matrix product `C = A B` (one block per
//! sector, `d_q x d_q`), timed beside one dense GEMM of the same total flops in the same run:
//! faer on the CPU, or (`--backend cuda`, built with `--features cuda`) both on CUDA device 0
//! through cuBLAS, timed to the end of the device's work.
//!
//! Flags: `--sectors N`, `--sizes DIST` (`fixed:D`, `uniform:MIN-MAX` drawn per sector from
//! `--seed`, or `list:D1,D2,...` cycled over the sectors), `--type f32|f64|c32|c64`,
//! `--backend cpu|cuda`, `--reps N` (timed repetitions; the median is reported),
//! `--threads T`, `--lanes L` (cuda: side streams for independent GEMMs, default 4),
//! `--json FILE` (default `block_gemm.json`). Flops count real arithmetic: a
//! `m x k x n` product is `2 m k n` flops, `8 m k n` for complex types.
//!
//! ```sh
//! cargo run --release --example block_gemm -- --sectors 16 --sizes uniform:64-512 --type c64
//! cargo run --release --features cuda --example block_gemm -- --backend cuda --sizes fixed:1024
//! ```

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, Par};
use rand::{Rng, SeedableRng};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera::backends::{Field, Scalar};
use tessera::blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera::contract::Contraction;
use tessera::prelude::Runtime;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage: block_gemm [--sectors N] [--sizes fixed:D|uniform:MIN-MAX|list:D1,D2,..] \
[--type f32|f64|c32|c64] [--backend cpu|cuda] [--reps N] [--threads T] [--lanes L] [--seed S] \
[--json FILE]";

/// What the driver reports instead of running.
#[derive(Debug)]
enum DriverError {
    /// A flag's value could not be used.
    Flag { flag: String, reason: String },
    /// The backend exists in the design but is not part of this build.
    #[cfg_attr(feature = "cuda", allow(dead_code))]
    BackendNotBuilt {
        backend: String,
        needs: &'static str,
    },
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Flag { flag, reason } => write!(f, "{flag}: {reason}\n{USAGE}"),
            DriverError::BackendNotBuilt { backend, needs } => write!(
                f,
                "backend {backend:?} is not built: it needs {needs}, which this build does not \
                 have (available: cpu)"
            ),
        }
    }
}

impl std::error::Error for DriverError {}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn flag_error(flag: &str, reason: impl Into<String>) -> DriverError {
    DriverError::Flag {
        flag: flag.to_owned(),
        reason: reason.into(),
    }
}

fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => {
            let v = args
                .get(i + 1)
                .ok_or_else(|| flag_error(name, "needs a value"))?;
            Ok(v.parse()
                .map_err(|_| flag_error(name, format!("cannot parse {v:?}")))?)
        }
    }
}

/// The block size of each sector, from `--sizes`.
fn sizes(spec: &str, sectors: usize, seed: u64) -> Result<Vec<usize>> {
    let bad = |reason: &str| flag_error("--sizes", format!("{spec:?}: {reason}"));
    let num = |s: &str| -> Result<usize> {
        match s.trim().parse::<usize>() {
            Ok(d) if d > 0 => Ok(d),
            _ => Err(bad("sizes are positive integers").into()),
        }
    };
    let (kind, rest) = spec
        .split_once(':')
        .ok_or_else(|| bad("expected fixed:D, uniform:MIN-MAX or list:D1,D2,..."))?;
    Ok(match kind {
        "fixed" => vec![num(rest)?; sectors],
        "uniform" => {
            let (lo, hi) = rest
                .split_once('-')
                .ok_or_else(|| bad("expected MIN-MAX"))?;
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo > hi {
                return Err(bad("MIN is above MAX").into());
            }
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            (0..sectors).map(|_| rng.gen_range(lo..=hi)).collect()
        }
        "list" => {
            let list = rest.split(',').map(num).collect::<Result<Vec<_>>>()?;
            (0..sectors).map(|q| list[q % list.len()]).collect()
        }
        _ => return Err(bad("unknown distribution").into()),
    })
}

/// The median of the timings of `reps` runs of `f`.
fn median_time(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<Duration> {
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok(times[times.len() / 2])
}

/// One measured row of the table.
struct Row {
    what: &'static str,
    shape: String,
    flops: f64,
    time: Duration,
}

impl Row {
    fn gflops(&self) -> f64 {
        self.flops / self.time.as_secs_f64() / 1e9
    }
}

/// The block-sparse product and its dense baseline for element type `T`.
fn measure<T: Field>(
    runtime: &Runtime,
    dims: &[usize],
    reps: usize,
    threads: usize,
) -> Result<(Row, Row, String)> {
    let per_mac = if T::IS_COMPLEX { 8.0 } else { 2.0 };
    let leg = Leg::new(
        Direction::In,
        dims.iter().enumerate().map(|(q, &d)| (U1(q as i32), d)),
    )?;
    let s = Arc::new(BlockStructure::new([leg.clone()], [leg.dual()], U1(0))?);
    let a = AsyncArray::<T, U1>::random(Arc::clone(&s), 1);
    let b = AsyncArray::<T, U1>::random(s, 2);
    let mm = Contraction::new("ab,bc->ac")?;
    let plan = mm.plan(&a, &b)?;
    let c = AsyncArray::<T, U1>::zeros(Arc::clone(plan.output()));
    let flops: f64 = dims.iter().map(|&d| per_mac * (d as f64).powi(3)).sum();
    let product = || -> Result<()> {
        runtime.enter(|| mm.apply_into(T::ONE, &a, &b, T::ZERO, &c))?;
        c.wait()?;
        Ok(())
    };
    product()?; // warm-up: the plan is cached, the pages touched
    let block = Row {
        what: "tessera block GEMM",
        shape: format!("{} blocks", dims.len()),
        flops,
        time: median_time(reps, product)?,
    };

    let n = ((flops / per_mac).cbrt().round() as usize).max(1);
    let da = Mat::<T>::from_fn(n, n, |i, j| {
        T::from_f64(((i * 7 + j * 3) % 11) as f64 - 5.0)
    });
    let db = Mat::<T>::from_fn(n, n, |i, j| T::from_f64(((i * 5 + j) % 13) as f64 - 6.0));
    let mut dc = Mat::<T>::from_fn(n, n, |_, _| T::ZERO);
    let par = if threads > 1 {
        Par::rayon(threads)
    } else {
        Par::Seq
    };
    let mut dense_gemm = || -> Result<()> {
        runtime.install(|| {
            matmul(
                dc.as_mut(),
                Accum::Replace,
                da.as_ref(),
                db.as_ref(),
                <T as Scalar>::ONE,
                par,
            )
        });
        Ok(())
    };
    dense_gemm()?;
    let dense = Row {
        what: "dense faer GEMM",
        shape: format!("{n}x{n}x{n}"),
        flops: per_mac * (n as f64).powi(3),
        time: median_time(reps, dense_gemm)?,
    };
    Ok((block, dense, plan.to_string()))
}

/// The block-sparse product and one dense cuBLAS GEMM of the same flops, on device 0: each
/// timed from submission to the end of the device's work (the stream synchronized).
#[cfg(feature = "cuda")]
fn measure_cuda<T: Field + tessera::backends::cuda::CudaScalar>(
    runtime: &Runtime,
    dims: &[usize],
    reps: usize,
    lanes: usize,
) -> Result<(Row, Row, String)> {
    use tessera::backends::cuda::{CudaDevice, MatLayout, Op};
    use tessera::blocks::DeviceArray;
    let dev = Arc::new(CudaDevice::open(0)?.with_lanes(lanes));
    let leg = Leg::new(
        Direction::In,
        dims.iter().enumerate().map(|(q, &d)| (U1(q as i32), d)),
    )?;
    let s = Arc::new(BlockStructure::new([leg.clone()], [leg.dual()], U1(0))?);
    let a = AsyncArray::<T, U1>::random(Arc::clone(&s), 1).to_device(&dev)?;
    let b = AsyncArray::<T, U1>::random(s, 2).to_device(&dev)?;
    let mm = Contraction::new("ab,bc->ac")?;
    let plan = mm.plan(&a, &b)?;
    let c = DeviceArray::<T, U1>::zeros(Arc::clone(plan.output()), &dev)?;
    let flops: f64 = dims.iter().map(|&d| 2.0 * (d as f64).powi(3)).sum();
    let product = || -> Result<()> {
        runtime.enter(|| mm.apply_into(T::ONE, &a, &b, T::ZERO, &c))?;
        c.wait()?; // enqueued
        dev.synchronize()?; // done
        Ok(())
    };
    product()?;
    let block = Row {
        what: "tessera block GEMM",
        shape: format!("{} blocks", dims.len()),
        flops,
        time: median_time(reps, product)?,
    };
    let n = ((flops / 2.0).cbrt().round() as usize).max(1);
    let da = dev.upload(&vec![T::from_f64(0.5); n * n])?;
    let db = dev.upload(&vec![T::from_f64(0.25); n * n])?;
    let mut dc = dev.alloc_zeros::<T>(n * n)?;
    let full = MatLayout::contiguous(n, n);
    let mut dense_gemm = || -> Result<()> {
        dev.gemm(
            dc.mat_mut(full),
            T::ZERO,
            da.mat(full),
            Op::Identity,
            db.mat(full),
            Op::Identity,
            T::ONE,
        )?;
        dev.synchronize()?;
        Ok(())
    };
    dense_gemm()?;
    let dense = Row {
        what: "dense cuBLAS GEMM",
        shape: format!("{n}x{n}x{n}"),
        flops: 2.0 * (n as f64).powi(3),
        time: median_time(reps, dense_gemm)?,
    };
    Ok((block, dense, plan.to_string()))
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
        "--sectors",
        "--sizes",
        "--type",
        "--backend",
        "--reps",
        "--threads",
        "--lanes",
        "--seed",
        "--json",
    ];
    for (i, a) in args.iter().enumerate() {
        let is_value = i > 0 && known.contains(&args[i - 1].as_str());
        if !is_value && !known.contains(&a.as_str()) {
            return Err(flag_error(a, "unknown argument").into());
        }
    }
    let sectors: usize = flag(&args, "--sectors", 8)?;
    if sectors == 0 {
        return Err(flag_error("--sectors", "at least 1").into());
    }
    let seed: u64 = flag(&args, "--seed", 7)?;
    let size_spec: String = flag(&args, "--sizes", "fixed:256".to_owned())?;
    let dims = sizes(&size_spec, sectors, seed)?;
    let scalar: String = flag(&args, "--type", "f64".to_owned())?;
    let backend: String = flag(&args, "--backend", "cpu".to_owned())?;
    let reps: usize = flag(&args, "--reps", 5)?;
    let reps = reps.max(1);
    let threads: usize = flag(
        &args,
        "--threads",
        std::thread::available_parallelism()?.get(),
    )?;
    let json_path: String = flag(&args, "--json", "block_gemm.json".to_owned())?;
    #[cfg(feature = "cuda")]
    let lanes: usize = flag(&args, "--lanes", tessera::backends::cuda::LANES)?;
    let runtime = Runtime::new(threads)?;
    let unknown_type = || flag_error("--type", format!("unknown type {scalar:?}"));
    let (block, dense, plan) = match (backend.as_str(), scalar.as_str()) {
        ("cpu", "f32") => measure::<f32>(&runtime, &dims, reps, threads)?,
        ("cpu", "f64") => measure::<f64>(&runtime, &dims, reps, threads)?,
        ("cpu", "c32") => measure::<faer::c32>(&runtime, &dims, reps, threads)?,
        ("cpu", "c64") => measure::<faer::c64>(&runtime, &dims, reps, threads)?,
        ("cpu", _) => return Err(unknown_type().into()),
        #[cfg(feature = "cuda")]
        ("cuda", "f32") => measure_cuda::<f32>(&runtime, &dims, reps, lanes)?,
        #[cfg(feature = "cuda")]
        ("cuda", "f64") => measure_cuda::<f64>(&runtime, &dims, reps, lanes)?,
        #[cfg(feature = "cuda")]
        ("cuda", _) => {
            return Err(flag_error("--type", "the cuda backend takes f32 or f64").into());
        }
        #[cfg(not(feature = "cuda"))]
        ("cuda", _) => {
            return Err(DriverError::BackendNotBuilt {
                backend,
                needs: "the `cuda` feature (cargo run --features cuda ...)",
            }
            .into());
        }
        _ => return Err(flag_error("--backend", format!("unknown backend {backend:?}")).into()),
    };
    let ratio = block.gflops() / dense.gflops();
    let (min, max) = (dims.iter().min().unwrap(), dims.iter().max().unwrap());
    let mean = dims.iter().sum::<usize>() as f64 / dims.len() as f64;
    println!(
        "block GEMM: {sectors} sectors, sizes {size_spec} (min {min}, mean {mean:.1}, max {max}), \
         {scalar}, backend {backend}, {threads} threads, median of {reps}"
    );
    println!("plan: {plan}");
    println!(
        "{:<20} {:>16} {:>12} {:>12} {:>10} {:>8}",
        "what", "shape", "GFLOP", "time [ms]", "GFLOP/s", "ratio"
    );
    for (row, r) in [(&block, ratio), (&dense, 1.0)] {
        println!(
            "{:<20} {:>16} {:>12.3} {:>12.3} {:>10.2} {:>8.3}",
            row.what,
            row.shape,
            row.flops / 1e9,
            row.time.as_secs_f64() * 1e3,
            row.gflops(),
            r
        );
    }
    let row_json = |r: &Row| {
        serde_json::json!({
            "shape": r.shape,
            "flops": r.flops,
            "seconds": r.time.as_secs_f64(),
            "gflops_per_s": r.gflops(),
        })
    };
    let report = serde_json::json!({
        "sectors": sectors,
        "sizes": size_spec,
        "block_dims": dims,
        "type": scalar,
        "backend": backend,
        "threads": threads,
        "reps": reps,
        "seed": seed,
        "block_gemm": row_json(&block),
        "dense_gemm": row_json(&dense),
        "ratio": ratio,
    });
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)? + "\n")?;
    println!("wrote {json_path}");
    Ok(())
}
