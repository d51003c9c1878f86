//! The main job for now: a dependent task graph on the CPU runtime.
//!
//! A ring of `--records` values is swept `--rounds` times in program order; task `(r, i)`
//! reads its two neighbours and updates value `i` (a Gauss-Seidel sweep, so every task depends
//! on tasks of the current and the previous sweep). The runtime overlaps what it may; the
//! result must equal the same program replayed in order on one thread, which this driver
//! checks and prints, with the timings.
//!
//! Flags (`--help` lists them; parsed by `examples/args/task_graph.rs`): `--records N`
//! (3..=1048576, default 64), `--rounds N` (1..=16777216, default 2000; records x rounds at
//! most 2^26 tasks, all enrolled before the first read), `--threads T` (0..=1024; 0, the
//! default, means one per available core, and the report says how many that is),
//! `--trace FILE` (opened before the run). A bad, missing, repeated or unknown flag or value,
//! or an unwritable `--trace`, prints the usage naming the flag and exits with status 2.
//!
//! ```sh
//! cargo run --release --example task_graph -- --records 64 --rounds 2000 --threads 2
//! cargo run --release --example task_graph -- --rounds 50 --trace trace.json  # Perfetto opens it
//! ```

#[allow(dead_code)] // the other drivers' flags, compiled here too
#[path = "args/mod.rs"]
mod args;

use std::time::Instant;
use tessera::prelude::*;

fn step(left: u64, right: u64, own: u64, round: u64) -> u64 {
    own.wrapping_mul(6364136223846793005)
        .wrapping_add(left ^ right.rotate_left(17))
        .wrapping_add(round)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A bad flag, or an output that cannot be opened: the usage, exit status 2, nothing run.
    let args::task_graph::Prepared {
        args,
        tasks,
        threads,
        trace,
    } = args::parse_or_exit(args::task_graph::Args::prepare);
    let (records, rounds) = (args.records, args.rounds);
    let runtime = Runtime::new(threads.count)?;
    if trace.is_some() {
        runtime.start_trace();
    }

    let start = Instant::now();
    let values: Vec<Async<u64>> = (0..records as u64).map(Async::new).collect();
    for round in 0..rounds as u64 {
        for i in 0..records {
            let (l, r) = ((i + records - 1) % records, (i + 1) % records);
            runtime.schedule(
                (values[l].read(), values[r].read(), values[i].write()),
                move |(l, r, own)| {
                    *own = step(*l, *r, *own, round);
                    Ok(())
                },
            )?;
        }
    }
    let enrolled = start.elapsed();
    let result: Vec<u64> = values.iter().map(Async::get).collect::<Result<_, _>>()?;
    let total = start.elapsed();
    if let Some(out) = trace {
        let t = runtime.stop_trace();
        let path = out.path().display().to_string();
        out.write(t.to_chrome_json().as_bytes())?;
        println!("wrote {} task events to {path}", t.events.len());
    }

    let replay_start = Instant::now();
    let mut replay: Vec<u64> = (0..records as u64).collect();
    for round in 0..rounds as u64 {
        for i in 0..records {
            let (l, r) = ((i + records - 1) % records, (i + 1) % records);
            replay[i] = step(replay[l], replay[r], replay[i], round);
        }
    }
    let replay_time = replay_start.elapsed();

    let checksum = result.iter().fold(0u64, |a, v| a ^ v.rotate_left(7));
    println!("task graph: {records} records x {rounds} sweeps = {tasks} tasks on {threads}");
    println!(
        "enrolled in {:.3} s, done in {:.3} s: {:.2} M tasks/s",
        enrolled.as_secs_f64(),
        total.as_secs_f64(),
        tasks as f64 / total.as_secs_f64() / 1e6
    );
    println!(
        "sequential replay on one thread: {:.3} s",
        replay_time.as_secs_f64()
    );
    println!("checksum = {checksum:#018x}");
    if result != replay {
        return Err("the runtime's result differs from the sequential replay".into());
    }
    println!("result equals the sequential replay: yes");
    Ok(())
}
