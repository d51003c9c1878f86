//! Block-GEMM benchmark driver: a U(1) block-sparse matrix product `C = A B` (one block per
//! sector, `d_q x d_q`), timed beside one dense GEMM of the same total flops in the same run:
//! faer on the CPU, or (`--backend cuda`, built with `--features cuda`) both on CUDA device 0
//! through cuBLAS, timed to the end of the device's work.
//!
//! Flags (`--help` lists them; parsed by `examples/args/block_gemm.rs`): `--sectors N`
//! (1..=65536, default 8), `--sizes DIST` (`fixed:D`, `uniform:MIN-MAX` drawn per sector from
//! `--seed`, or `list:D1,D2,...` cycled over the sectors; every side 1..=1048576, default
//! `fixed:256`), `--type f32|f64|c32|c64`, `--backend cpu|cuda`, `--reps N` (timed
//! repetitions, 1..=10000, default 5; the median is reported), `--threads T` (0..=1024; 0, the
//! default, means one per available core, and the report says how many that is), `--lanes L`
//! (cuda only: side streams for independent GEMMs, 1..=64, default 4), `--seed S`,
//! `--json FILE` (default `block_gemm.json`, opened before the run), `--max-memory GIB`. Before
//! allocating anything the driver computes, in checked arithmetic, the bytes of A, B, C and
//! the dense baseline's three matrices, and refuses a run that needs more than `--max-memory`
//! (default: the machine's memory, or 16 GiB where `/proc/meminfo` cannot be read). A bad,
//! missing, repeated or unknown flag or value, a run too big, or an unwritable `--json` prints
//! the usage naming the flag and exits with status 2. Flops count real arithmetic: a
//! `m x k x n` product is `2 m k n` flops, `8 m k n` for complex types.
//!
//! ```sh
//! cargo run --release --example block_gemm -- --sectors 16 --sizes uniform:64-512 --type c64
//! cargo run --release --features cuda --example block_gemm -- --backend cuda --sizes fixed:1024
//! ```

#[allow(dead_code)] // the other drivers' flags, compiled here too
#[path = "args/mod.rs"]
mod args;

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, Par};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera::backends::{Field, Scalar};
use tessera::blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera::contract::Contraction;
use tessera::prelude::Runtime;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

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
        runtime.enter(|| mm.apply_into(&a, &b, &c))?;
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
        runtime.enter(|| mm.apply_into(&a, &b, &c))?;
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
    // A bad flag, a run too big for the memory, or an output that cannot be opened: the
    // usage, exit status 2, nothing allocated.
    let prepared = args::parse_or_exit(args::block_gemm::Args::prepare);
    match run(prepared) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(prepared: args::block_gemm::Prepared) -> Result<()> {
    use args::block_gemm::{Backend, ScalarType};
    let args::block_gemm::Prepared {
        args,
        dims,
        memory,
        threads,
        json,
    } = prepared;
    let (sectors, reps, seed, scalar, backend) = (
        args.sectors,
        args.reps,
        args.seed,
        args.scalar,
        args.backend,
    );
    #[cfg(feature = "cuda")]
    let lanes = args.lanes.unwrap_or(tessera::backends::cuda::LANES);
    let runtime = Runtime::new(threads.count)?;
    let threads_n = threads.count;
    let (block, dense, plan) = match (backend, scalar) {
        (Backend::Cpu, ScalarType::F32) => measure::<f32>(&runtime, &dims, reps, threads_n)?,
        (Backend::Cpu, ScalarType::F64) => measure::<f64>(&runtime, &dims, reps, threads_n)?,
        (Backend::Cpu, ScalarType::C32) => measure::<faer::c32>(&runtime, &dims, reps, threads_n)?,
        (Backend::Cpu, ScalarType::C64) => measure::<faer::c64>(&runtime, &dims, reps, threads_n)?,
        #[cfg(feature = "cuda")]
        (Backend::Cuda, ScalarType::F32) => measure_cuda::<f32>(&runtime, &dims, reps, lanes)?,
        #[cfg(feature = "cuda")]
        (Backend::Cuda, ScalarType::F64) => measure_cuda::<f64>(&runtime, &dims, reps, lanes)?,
        // `prepare` refuses these (cuda in a build without it, or with a complex type).
        (Backend::Cuda, _) => {
            return Err(
                format!("backend cuda with {scalar} is not available in this build").into(),
            );
        }
    };
    let ratio = block.gflops() / dense.gflops();
    let (min, max) = (dims.iter().min().unwrap(), dims.iter().max().unwrap());
    let mean = dims.iter().sum::<usize>() as f64 / dims.len() as f64;
    let size_spec = args.sizes.to_string();
    println!(
        "block GEMM: {sectors} sectors, sizes {size_spec} (min {min}, mean {mean:.1}, max {max}), \
         {scalar}, backend {backend}, {threads}, median of {reps}"
    );
    println!(
        "memory: block-sparse A, B, C {:.3} GiB, dense {n}x{n} A, B, C {:.3} GiB",
        memory.blocks as f64 / (1u64 << 30) as f64,
        memory.dense as f64 / (1u64 << 30) as f64,
        n = memory.dense_side
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
        "type": scalar.to_string(),
        "backend": backend.to_string(),
        "threads": threads.count,
        "reps": reps,
        "seed": seed,
        "block_gemm": row_json(&block),
        "dense_gemm": row_json(&dense),
        "ratio": ratio,
    });
    let json_path = json.path().display().to_string();
    json.write((serde_json::to_string_pretty(&report)? + "\n").as_bytes())?;
    println!("wrote {json_path}");
    Ok(())
}
