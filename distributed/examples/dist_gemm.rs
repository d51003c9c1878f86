//! Distributed block GEMM and the cost of moving a block, on however many ranks mpirun
//! starts: the figures of `docs/SCALING.md`.
//!
//! ```sh
//! cargo build --release -p tessera-distributed --features mpi --example dist_gemm
//! mpirun --allow-run-as-root --oversubscribe --bind-to none -n 2 target/release/examples/dist_gemm [reps]
//! ```
//!
//! `--bind-to none`: by default mpirun binds each rank of a small job to one core, and the
//! runtime's workers of a rank then share that core (one rank ran the U(1) product at 20 ms
//! bound, 12 ms unbound, on the 2-core machine of `docs/SCALING.md`). On a cluster, give each
//! rank its cores instead (`--map-by node:PE=<cores>`).
//!
//! Rank 0 prints, per workload, the median time of `reps` repetitions (default 5) from
//! submission to the norm of the result (which waits for every rank's blocks), the rate,
//! and the bytes this rank sent per repetition; then, on two ranks or more, the round trip
//! of one block between ranks 0 and 1 by size (half of it is the one-way time).
//!
//! The workloads: the two-site DMRG effective Hamiltonian `L W W R theta` as a chain of
//! four distributed contractions, on the structures of `benches/data/` (the contraction
//! bench's), beside the same chain in one process; a U(1) block-diagonal product (21 sectors of 256; with `B` placed on the
//! next rank, so every `B` block moves once), and a dense 1024 x 1024 product tiled 8 x 8
//! (`Trivial` sectors: every output tile needs a row of `A` tiles and a column of `B`
//! tiles), under a cyclic map and under the 2D grid of SUMMA; and one large U(1) sector,
//! by sector (one rank's GEMM) against tiled on the grid (SUMMA's).

use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, Trivial, U1};
use tessera_contract::{Contraction, Spec};
use tessera_distributed::{Comm, DistArray, ProcessMap, World, contract, tiled_leg};

// As the other drivers and the benches: large temporaries come back without page faults.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// One large sector: a U(1) matrix of sectors 256, 1536, 256. By sector, the 1536 GEMM is
/// one rank's; tiled (at most 384: the large sector 4 x 4 tiles) on the square grid, it is
/// SUMMA's, each rank computing its tiles from a row of `A` tiles and a column of `B`
/// tiles. Timed: the product (and, tiled, its re-tiling back to one block per sector) to
/// the result's norm; the operands are tiled once, outside the timing, as their layout.
fn large_sector(comm: &Comm, reps: usize) -> Result<(), Box<dyn std::error::Error>> {
    let v = Leg::new(Direction::In, [(U1(-1), 256), (U1(0), 1536), (U1(1), 256)])?;
    let m = Arc::new(BlockStructure::new([v.clone()], [v.dual()], U1(0))?);
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&m), 1);
    let b = AsyncArray::<f64, U1>::random(Arc::clone(&m), 2);
    let spec = Contraction::new("ij,jk->ik")?;
    let flops = spec.plan(&a, &b)?.flops() as f64;
    let by = ProcessMap::BySector;
    let grid = ProcessMap::square_grid(comm.size());
    let (da, db) = (
        DistArray::scatter(comm, &a, &by)?,
        DistArray::scatter(comm, &b, &by)?,
    );
    let tiled = |x: &DistArray<f64, U1>| -> Result<DistArray<f64, U1>, tessera_distributed::Error> {
        let legs = x
            .structure()
            .legs()
            .iter()
            .map(|l| tiled_leg(l, 384))
            .collect::<Result<Vec<_>, _>>()?;
        x.retile(legs, &grid)
    };
    let (ta, tb) = (tiled(&da)?, tiled(&db)?);
    for (name, summa) in [("by sector", false), ("tiled 384, grid", true)] {
        let mut times = Vec::new();
        let mut sent = 0;
        for rep in 0..=reps {
            let (before, _) = comm.sent();
            let t = Instant::now();
            let c = if summa {
                contract(&spec, &ta, &tb, &grid)?.retile(m.legs().to_vec(), &by)?
            } else {
                contract(&spec, &da, &db, &by)?
            };
            c.norm()?;
            if rep > 0 {
                times.push(t.elapsed());
                sent = comm.sent().0 - before;
            }
        }
        let t = median(times);
        if comm.rank() == 0 {
            println!(
                "{:<28} ranks {}  median {:>9.3} ms  {:>7.2} GFLOP/s  rank 0 sent {:>10} B/rep",
                format!("u1 256+1536+256, {name}"),
                comm.size(),
                t.as_secs_f64() * 1e3,
                flops / t.as_secs_f64() / 1e9,
                sent
            );
        }
    }
    Ok(())
}

/// A named tensor of the H_eff files: its leg labels and its data.
struct Named {
    labels: Vec<String>,
    array: AsyncArray<f64, U1>,
}

/// The operands and chain of `benches/data/heff_heisenberg_chi{chi}.json` (the format the
/// contraction bench and `benches/compare` read): operands by name, and the chain's steps
/// `(A, B, A's contracted labels, B's)`, tensordot-style, the running result named `T`.
type Chain = Vec<(String, String, Vec<String>, Vec<String>)>;

type Loaded = (Vec<(String, Named)>, Chain);

fn load_heff(chi: usize) -> Result<Loaded, Box<dyn std::error::Error>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../benches/data/heff_heisenberg_chi{chi}.json"));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let text = |v: &serde_json::Value| v.as_str().map(str::to_owned).ok_or("a string");
    let mut named = Vec::new();
    let ops = json["operands"].as_object().ok_or("operands")?;
    for (seed, (name, op)) in ops.iter().enumerate() {
        let (mut labels, mut legs) = (Vec::new(), Vec::new());
        for l in op["legs"].as_array().ok_or("legs")? {
            labels.push(text(&l["label"])?);
            let dir = Direction::from_sign(l["dir"].as_i64().ok_or("dir")?)?;
            let sectors = l["sectors"].as_array().ok_or("sectors")?.iter().map(|s| {
                let q = s[0].as_i64().unwrap_or(0) as i32;
                (U1(q), s[1].as_u64().unwrap_or(0) as usize)
            });
            legs.push(Leg::new(dir, sectors)?);
        }
        // Split as a DMRG code keeps them (the contraction bench does the same).
        let split = match name.as_str() {
            "LP" | "RP" => 2,
            "theta" => 1,
            _ => legs.len() / 2,
        };
        let flux = U1(op["flux"][0].as_i64().ok_or("flux")? as i32);
        let s = BlockStructure::from_legs(legs, split, flux)?;
        let array = AsyncArray::random(s, seed as u64 + 1);
        named.push((name.clone(), Named { labels, array }));
    }
    let strings = |v: &serde_json::Value| -> Result<Vec<String>, &'static str> {
        v.as_array().ok_or("labels")?.iter().map(text).collect()
    };
    let mut chain = Vec::new();
    for step in json["chain"].as_array().ok_or("chain")? {
        chain.push((
            text(&step[0])?,
            text(&step[1])?,
            strings(&step[2])?,
            strings(&step[3])?,
        ));
    }
    Ok((named, chain))
}

/// The contraction of one tensordot step and the labels of its result (`A`'s free legs,
/// then `B`'s).
fn step(
    a: &[String],
    b: &[String],
    ka: &[String],
    kb: &[String],
) -> Result<(Contraction, Vec<String>), Box<dyn std::error::Error>> {
    let pos = |l: &[String], x: &String| l.iter().position(|y| y == x).ok_or("a label");
    let axes_a = ka
        .iter()
        .map(|x| pos(a, x))
        .collect::<Result<Vec<_>, _>>()?;
    let axes_b = kb
        .iter()
        .map(|x| pos(b, x))
        .collect::<Result<Vec<_>, _>>()?;
    let spec = Spec::tensordot(a.len(), b.len(), &axes_a, &axes_b)?;
    let free_a = a.iter().filter(|l| !ka.contains(l));
    let free_b = b.iter().filter(|l| !kb.contains(l));
    Ok((
        Contraction::from_spec(spec),
        free_a.chain(free_b).cloned().collect(),
    ))
}

/// The two-site H_eff chain on the DMRG structures of bond dimension `chi`, distributed
/// (operands and every intermediate `Cyclic`, theta `BySector`), beside the same chain in
/// one process.
fn heff(comm: &Comm, chi: usize, reps: usize) -> Result<(), Box<dyn std::error::Error>> {
    let (named, chain) = load_heff(chi)?;
    let find = |n: &str| {
        named
            .iter()
            .find(|x| x.0 == n)
            .map(|x| &x.1)
            .ok_or("an operand")
    };
    let mut steps = Vec::new();
    let mut labels_t: Vec<String> = Vec::new();
    for (a, b, ka, kb) in &chain {
        let la = if a == "T" {
            &labels_t
        } else {
            &find(a)?.labels
        };
        let lb = if b == "T" {
            &labels_t
        } else {
            &find(b)?.labels
        };
        let (c, out) = step(la, lb, ka, kb)?;
        steps.push((a.clone(), b.clone(), c));
        labels_t = out;
    }
    let map_of = |n: &str| {
        if n == "theta" {
            ProcessMap::BySector
        } else {
            ProcessMap::Cyclic
        }
    };
    let dist: Vec<(String, DistArray<f64, U1>)> = named
        .iter()
        .map(|(n, x)| Ok((n.clone(), DistArray::scatter(comm, &x.array, &map_of(n))?)))
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    let dfind = |n: &str| {
        dist.iter()
            .find(|x| x.0 == n)
            .map(|x| &x.1)
            .ok_or("an operand")
    };
    let (mut times, mut local, mut sent, mut flops) = (Vec::new(), Vec::new(), 0, 0.0);
    for rep in 0..=reps {
        let (before, _) = comm.sent();
        let t = Instant::now();
        let mut running: Option<DistArray<f64, U1>> = None;
        for (a, b, c) in &steps {
            let x = if a == "T" {
                running.as_ref().ok_or("T")?
            } else {
                dfind(a)?
            };
            let y = if b == "T" {
                running.as_ref().ok_or("T")?
            } else {
                dfind(b)?
            };
            running = Some(contract(c, x, y, &ProcessMap::Cyclic)?);
        }
        running.ok_or("a chain")?.norm()?;
        let elapsed = t.elapsed();
        // The same chain in this process.
        let t = Instant::now();
        let mut one: Option<AsyncArray<f64, U1>> = None;
        let mut f = 0.0;
        for (a, b, c) in &steps {
            let x = if a == "T" {
                one.as_ref().ok_or("T")?
            } else {
                &find(a)?.array
            };
            let y = if b == "T" {
                one.as_ref().ok_or("T")?
            } else {
                &find(b)?.array
            };
            f += c.plan(x, y)?.flops() as f64;
            one = Some(c.apply(x, y)?);
        }
        one.ok_or("a chain")?.norm().get()?;
        if rep > 0 {
            times.push(elapsed);
            local.push(t.elapsed());
            sent = comm.sent().0 - before;
            flops = f;
        }
    }
    let (t, l) = (median(times), median(local));
    if comm.rank() == 0 {
        println!(
            "{:<28} ranks {}  median {:>9.3} ms  {:>7.2} GFLOP/s  rank 0 sent {:>10} B/rep  \
             (one process: {:.3} ms)",
            format!("heff chi{chi} (4 contractions)"),
            comm.size(),
            t.as_secs_f64() * 1e3,
            flops / t.as_secs_f64() / 1e9,
            sent,
            l.as_secs_f64() * 1e3
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
    let grid = ProcessMap::square_grid(size);
    gemm(comm, "dense_1024 tiled 8x8, grid", &tiles, [&grid; 3], reps)?;
    large_sector(comm, reps)?;

    for chi in [128, 256, 512] {
        heff(comm, chi, reps)?;
    }

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
