//! Distributed block GEMM and the cost of moving a block, on however many ranks mpirun
//! starts: the figures of `docs/SCALING.md`.
//!
//! ```sh
//! cargo build --release -p tessera-distributed --features mpi --example dist_gemm
//! mpirun --allow-run-as-root --oversubscribe -n 2 target/release/examples/dist_gemm [reps]
//! ```
//!
//! Rank 0 prints, per workload, the median time of `reps` repetitions (default 5) from
//! submission to the norm of the result (which waits for every rank's blocks), the rate,
//! and the bytes this rank sent per repetition; then, on two ranks or more, the round trip
//! of one block between ranks 0 and 1 by size (half of it is the one-way time).
//!
//! The workloads: a U(1) block-diagonal product (21 sectors of 256; with `B` placed on the
//! next rank, so every `B` block moves once), and a dense 1024 x 1024 product tiled 8 x 8
//! (`Trivial` sectors: every output tile needs a row of `A` tiles and a column of `B`
//! tiles), under a cyclic map and under the 2D grid of SUMMA.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, Trivial, U1};
use tessera_contract::Contraction;
use tessera_distributed::{Comm, DistArray, ProcessMap, World, contract};

fn median(mut t: Vec<Duration>) -> Duration {
    t.sort();
    t[t.len() / 2]
}

/// Times `reps` distributed products `A B` (after one warm-up) under the given maps.
fn gemm<S: tessera_blocks::AbelianSector>(
    comm: &Comm,
    name: &str,
    m: &Arc<BlockStructure<S>>,
    maps: [&ProcessMap; 3],
    reps: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let a = AsyncArray::<f64, S>::random(Arc::clone(m), 1);
    let b = AsyncArray::<f64, S>::random(Arc::clone(m), 2);
    let spec = Contraction::new("ij,jk->ik")?;
    let flops = spec.plan(&a, &b)?.flops() as f64;
    let (da, db) = (
        DistArray::scatter(comm, &a, maps[0])?,
        DistArray::scatter(comm, &b, maps[1])?,
    );
    let mut times = Vec::new();
    let mut sent = 0;
    for rep in 0..=reps {
        let (before, _) = comm.sent();
        let t = Instant::now();
        let c = contract(&spec, &da, &db, maps[2])?;
        c.norm()?;
        if rep > 0 {
            times.push(t.elapsed());
            sent = comm.sent().0 - before;
        }
    }
    let t = median(times);
    // The baseline: the same product on whole arrays in this process, no MPI (on one rank,
    // the distributed run's overhead; on more, each rank runs it at once, sharing the cores).
    let mut local = Vec::new();
    for rep in 0..=reps {
        let t = Instant::now();
        spec.apply(&a, &b)?.norm().get()?;
        if rep > 0 {
            local.push(t.elapsed());
        }
    }
    let local = median(local);
    if comm.rank() == 0 {
        println!(
            "{:<28} ranks {}  median {:>9.3} ms  (local baseline, every rank at once)",
            "",
            comm.size(),
            local.as_secs_f64() * 1e3
        );
        println!(
            "{name:<28} ranks {}  median {:>9.3} ms  {:>7.2} GFLOP/s  rank 0 sent {:>10} B/rep",
            comm.size(),
            t.as_secs_f64() * 1e3,
            flops / t.as_secs_f64() / 1e9,
            sent
        );
    }
    Ok(())
}

/// The round trip of one block of `n` doubles between ranks 0 and 1.
fn round_trip(
    comm: &Comm,
    n: usize,
    reps: usize,
    print: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let leg = Leg::new(Direction::In, [(Trivial, n)])?;
    let s = Arc::new(BlockStructure::new([leg], [], Trivial)?);
    let on = |r: usize| ProcessMap::Explicit(vec![r].into());
    let x = DistArray::scatter(comm, &AsyncArray::<f64, Trivial>::random(s, 3), &on(0))?;
    let mut times = Vec::new();
    for rep in 0..=reps {
        let t = Instant::now();
        let there = x.redistribute(&on(1))?;
        let back = there.redistribute(&on(0))?;
        match comm.rank() {
            0 => drop(back.local().to_blocks()?), // waits for the block's return
            // Rank 1 waits for the block to arrive, so that it does not race ahead through
            // the next repetitions (allocating and scheduling) while rank 0 measures.
            1 => drop(there.local().to_blocks()?),
            _ => {}
        }
        if rep > 0 {
            times.push(t.elapsed());
        }
    }
    if comm.rank() == 0 && print {
        let t = median(times).as_secs_f64();
        let bytes = 8 * n;
        println!(
            "round trip {bytes:>9} B   median {:>9.1} us   one way {:>8.1} us   {:>8.3} GB/s",
            t * 1e6,
            t * 5e5,
            2.0 * bytes as f64 / t / 1e9
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let reps: usize = std::env::args()
        .nth(1)
        .map_or(Ok(5), |s| s.parse())
        .map_err(|e| format!("reps: {e}"))?;
    let world = World::init()?;
    let comm = world.comm();
    let size = comm.size();

    let v = Leg::new(Direction::In, (0..21).map(|q| (U1(q), 256)))?;
    let diag = Arc::new(BlockStructure::new([v.clone()], [v.dual()], U1(0))?);
    let next = ProcessMap::Explicit((0..diag.num_blocks()).map(|g| (g + 1) % size).collect());
    gemm(
        comm,
        "u1_21x256 (B on next rank)",
        &diag,
        [&ProcessMap::Cyclic, &next, &ProcessMap::Cyclic],
        reps,
    )?;
    gemm(
        comm,
        "u1_21x256 (aligned maps)",
        &diag,
        [&ProcessMap::Cyclic; 3],
        reps,
    )?;

    let t = Leg::tiled(Direction::In, (0..8).map(|_| (Trivial, 128)))?;
    let tiles = Arc::new(BlockStructure::new([t.clone()], [t.dual()], Trivial)?);
    gemm(
        comm,
        "dense_1024 tiled 8x8, cyclic",
        &tiles,
        [&ProcessMap::Cyclic; 3],
        reps,
    )?;
    let rows = (1..=size)
        .filter(|r| size.is_multiple_of(*r) && r * r <= size)
        .max()
        .unwrap_or(1);
    let grid = ProcessMap::Grid {
        rows,
        cols: size / rows,
    };
    gemm(comm, "dense_1024 tiled 8x8, grid", &tiles, [&grid; 3], reps)?;

    if size >= 2 {
        // A first pass unprinted: the first frames between two ranks set up their channel.
        for print in [false, true] {
            for n in [1, 1 << 10, 1 << 14, 1 << 17, 1 << 20] {
                round_trip(comm, n, reps.max(5) * 4, print)?;
            }
        }
    }
    drop(world);
    Ok(())
}
