//! Sequential consistency: random programs give exactly the result of replaying them in
//! order on one thread.

mod common;

use common::{Replayed, accesses, kernel, random_program, replay};
use tessera_core::{Async, Runtime};

fn run(seed: u64, tasks: usize, records: usize, threads: usize) {
    let ops = random_program(seed, tasks, records, 0.0);
    let rt = Runtime::new(threads).unwrap();
    let values: Vec<Async<u64>> = (0..records as u64).map(Async::new).collect();
    for op in &ops {
        let (reads, writes) = accesses(op, &values);
        let op = op.clone();
        rt.schedule((reads, writes), move |(ins, mut outs)| {
            let ins: Vec<u64> = ins.into_iter().copied().collect();
            kernel(&op, &ins, &mut outs);
            Ok(())
        })
        .unwrap();
    }
    let expected = replay(&ops, records);
    for (r, (value, want)) in values.iter().zip(expected).enumerate() {
        assert_eq!(
            Replayed::Value(value.get().unwrap()),
            want,
            "record {r}, seed {seed}"
        );
    }
}

#[test]
fn random_programs_equal_their_sequential_replay() {
    // Under Miri, a program long enough to reach every kind of dependency (and short enough
    // to interpret: spinning workers are interpreted too).
    let (tasks, seeds) = if cfg!(miri) { (64, 1) } else { (100_000, 3) };
    for seed in 0..seeds {
        run(seed, tasks, 64, 2);
    }
}

#[test]
fn random_programs_on_one_worker_and_on_many() {
    let tasks = if cfg!(miri) { 32 } else { 20_000 };
    run(100, tasks, 64, 1);
    run(101, tasks, 8, 4);
}
