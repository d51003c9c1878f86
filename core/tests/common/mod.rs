//! Random programs over `Async<u64>` records, and their in-order replay on one thread.

#![allow(dead_code, unreachable_pub)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tessera_core::{Async, ReadBuffer, ValueRegion, WriteBuffer};

/// One operation of a random program.
#[derive(Clone, Debug)]
pub struct Op {
    pub reads: Vec<usize>,
    pub writes: Vec<usize>,
    /// Overwrite (does not read the outputs) rather than update.
    pub overwrite: bool,
    pub salt: u64,
    /// Fault injection: the kernel returns an error (1) or panics (2).
    pub fault: u8,
}

/// A random program of `tasks` operations over `records` records.
pub fn random_program(seed: u64, tasks: usize, records: usize, fault_rate: f64) -> Vec<Op> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..tasks)
        .map(|t| {
            let mut picked = Vec::new();
            let n = rng.gen_range(1..=5).min(records);
            while picked.len() < n {
                let r = rng.gen_range(0..records);
                if !picked.contains(&r) {
                    picked.push(r);
                }
            }
            let n_writes = rng.gen_range(1..=2.min(n));
            let writes = picked.split_off(n - n_writes);
            let fault = if rng.gen_bool(fault_rate) {
                rng.gen_range(1..=2)
            } else {
                0
            };
            Op {
                reads: picked,
                writes,
                overwrite: rng.gen_bool(0.3),
                salt: t as u64,
                fault,
            }
        })
        .collect()
}

/// The kernel of an op: a deterministic mix of its inputs (and old outputs, for an update).
pub fn kernel(op: &Op, inputs: &[u64], outputs: &mut [&mut u64]) {
    let mut h = op.salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for &v in inputs {
        h = (h ^ v).wrapping_mul(0x100_0000_01B3).rotate_left(13);
    }
    for (k, out) in outputs.iter_mut().enumerate() {
        let old = if op.overwrite { 0 } else { **out };
        **out = (h ^ old.rotate_left(7)).wrapping_add(k as u64);
    }
}

/// The outcome of one record after an in-order replay: a value, or poisoned by a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replayed {
    Value(u64),
    Poisoned { origin: usize },
}

/// Replays the program in order on one thread, with the runtime's poison rules.
pub fn replay(ops: &[Op], records: usize) -> Vec<Replayed> {
    let mut state: Vec<Replayed> = (0..records as u64).map(Replayed::Value).collect();
    for (t, op) in ops.iter().enumerate() {
        let mut read_set: Vec<usize> = op.reads.clone();
        if !op.overwrite {
            read_set.extend(&op.writes);
        }
        // The runtime checks inputs in record order; the first poisoned one (by record id,
        // which follows creation order here) is the origin it carries.
        read_set.sort_unstable();
        let inherited = read_set.iter().find_map(|&r| match state[r] {
            Replayed::Poisoned { origin } => Some(origin),
            Replayed::Value(_) => None,
        });
        let origin = inherited.or((op.fault != 0).then_some(t));
        match origin {
            Some(origin) => {
                for &w in &op.writes {
                    state[w] = Replayed::Poisoned { origin };
                }
            }
            None => {
                let inputs: Vec<u64> = op
                    .reads
                    .iter()
                    .map(|&r| match state[r] {
                        Replayed::Value(v) => v,
                        Replayed::Poisoned { .. } => unreachable!(),
                    })
                    .collect();
                let mut outs: Vec<u64> = op
                    .writes
                    .iter()
                    .map(|&w| match state[w] {
                        Replayed::Value(v) => v,
                        Replayed::Poisoned { .. } => 0,
                    })
                    .collect();
                let mut refs: Vec<&mut u64> = outs.iter_mut().collect();
                kernel(op, &inputs, &mut refs);
                for (&w, v) in op.writes.iter().zip(outs) {
                    state[w] = Replayed::Value(v);
                }
            }
        }
    }
    state
}

/// An op's declared buffers: reads of its inputs, writes of its outputs.
pub type OpBuffers = (
    Vec<ReadBuffer<ValueRegion<u64>>>,
    Vec<WriteBuffer<ValueRegion<u64>>>,
);

/// The buffers an op declares over `values`: reads of its inputs, writes (update or
/// overwrite) of its outputs.
pub fn accesses(op: &Op, values: &[Async<u64>]) -> OpBuffers {
    let reads = op.reads.iter().map(|&r| values[r].read()).collect();
    let writes = op
        .writes
        .iter()
        .map(|&w| {
            if op.overwrite {
                values[w].overwrite()
            } else {
                values[w].write()
            }
        })
        .collect();
    (reads, writes)
}
