//! Block operation bandwidth: leg permutation (re-indexed at each call, and with the
//! re-indexing planned once) beside a plain copy of the same bytes (same threads, same
//! run), and axpy and norm, in bytes moved per second.
//!
//! After each case's criterion figures, a paired line: the planned permutation and the copy
//! run in alternating batches of 30 ms for a few seconds, so that both meet
//! the same state of the machine (on a shared machine, memory bandwidth and core speed
//! drift between the moments criterion measures the two), and the median of each with the
//! median of their per-pair ratios. It runs when the bench runs without a filter, or with one that is part of its
//! name (`block_ops/paired/<case>`).
//!
//! `cargo bench --bench block_ops`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rayon::prelude::*;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;
use tessera::blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera::prelude::Runtime;

mod paired;

/// Four legs with U(1) sectors -q..=q of dimension `d` each, flux 0: blocks of d^4 elements
/// (85 blocks for q = 2, 1,469 for q = 6, one for q = 0).
fn structure(d: usize, q: i32) -> Arc<BlockStructure<U1>> {
    let leg = |dir| Leg::new(dir, (-q..=q).map(|c| (U1(c), d))).unwrap();
    Arc::new(
        BlockStructure::from_legs(
            vec![
                leg(Direction::In),
                leg(Direction::In),
                leg(Direction::Out),
                leg(Direction::Out),
            ],
            2,
            U1(0),
        )
        .unwrap(),
    )
}

fn bench(c: &mut Criterion) {
    let runtime = Runtime::new(2).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let mut group = c.benchmark_group("block_ops");
    group.sample_size(20);
    // Blocks of 4,096 elements in an array that stays in the last-level cache (2.8 MB) and
    // in one that does not (48 MB), blocks of 65,536 (44 MB), and one block of 331,776
    // (2.6 MB), which the workers move together.
    for (d, q) in [(8_usize, 2), (8, 6), (16, 2), (24, 0)] {
        let s = structure(d, q);
        let block = d.pow(4);
        let len = s.total_len();
        let bytes = (len * size_of::<f64>()) as u64;
        let x = AsyncArray::<f64, U1>::random(Arc::clone(&s), 1);
        let y = AsyncArray::<f64, U1>::random(Arc::clone(&s), 2);
        let perm = [2, 3, 0, 1];
        let p = runtime.enter(|| x.permute(&perm, 2).unwrap());
        let label = format!("block{block}_total{}MiB", bytes >> 20);

        group.throughput(Throughput::Bytes(2 * bytes));
        group.bench_function(BenchmarkId::new("permute_2301", &label), |b| {
            b.iter(|| {
                runtime.enter(|| x.permute_into(&perm, 2, &p).unwrap());
                p.wait().unwrap();
            })
        });
        // The same permutation with its re-indexing computed once (as a contraction plan
        // keeps it): the block moves alone, without rebuilding the permuted structure.
        let planned = s.permuted(&perm, 2).unwrap();
        group.bench_function(BenchmarkId::new("permute_2301_planned", &label), |b| {
            b.iter(|| {
                runtime.enter(|| x.permute_into_with(&planned, &perm, &p).unwrap());
                p.wait().unwrap();
            })
        });
        let src: Vec<f64> = (0..len).map(|i| i as f64).collect();
        let mut dst = vec![0.0_f64; len];
        // One chunk per block, but at least four chunks: a single block is copied by both
        // threads too.
        let chunk = block.min(len.div_ceil(4));
        group.bench_function(BenchmarkId::new("plain_copy_baseline", &label), |b| {
            b.iter(|| {
                pool.install(|| {
                    dst.par_chunks_mut(chunk)
                        .zip(src.par_chunks(chunk))
                        .for_each(|(d, s)| d.copy_from_slice(s))
                });
                black_box(&dst);
            })
        });
        let id = format!("block_ops/paired/{label}");
        if paired::wanted(&id) {
            let p = paired::paired(
                Duration::from_secs(3),
                || {
                    runtime.enter(|| x.permute_into_with(&planned, &perm, &p).unwrap());
                    p.wait().unwrap();
                },
                || {
                    pool.install(|| {
                        dst.par_chunks_mut(chunk)
                            .zip(src.par_chunks(chunk))
                            .for_each(|(d, s)| d.copy_from_slice(s))
                    });
                    black_box(&dst);
                },
            );
            println!(
                "{id}: permute {:.1} us, copy {:.1} us, permute at {:.2} of the copy's \
                 bandwidth (medians of {} pairs of alternating batches)",
                p.a * 1e6,
                p.b * 1e6,
                p.ratio,
                p.pairs
            );
        }
        group.throughput(Throughput::Bytes(3 * bytes));
        group.bench_function(BenchmarkId::new("axpy", &label), |b| {
            b.iter(|| {
                runtime.enter(|| y.axpy(1e-9, &x).unwrap());
                y.wait().unwrap();
            })
        });
        group.throughput(Throughput::Bytes(bytes));
        group.bench_function(BenchmarkId::new("norm", &label), |b| {
            b.iter(|| black_box(runtime.enter(|| x.norm()).get().unwrap()))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
