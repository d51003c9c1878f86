//! Runtime overhead: empty tasks that each read one record and write another, in tasks per
//! second, beside the same closures called in a plain loop and spawned in `rayon::scope`,
//! in the same run.
//!
//! `cargo bench --bench empty_task_overhead`

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use tessera::prelude::*;

const TASKS: usize = 20_000;
const PAIRS: usize = 64;

fn empty(a: &u64, b: &mut u64) {
    *b = black_box(*a);
}

fn bench(c: &mut Criterion) {
    let threads = 2;
    let runtime = Runtime::new(threads).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let reads: Vec<Async<u64>> = (0..PAIRS as u64).map(Async::new).collect();
    let writes: Vec<Async<u64>> = (0..PAIRS).map(|_| Async::new(0)).collect();

    let mut group = c.benchmark_group("empty_task_overhead");
    group.throughput(Throughput::Elements(TASKS as u64));
    group.bench_function(BenchmarkId::new("tessera_runtime", TASKS), |bench| {
        bench.iter(|| {
            for i in 0..TASKS {
                let k = i % PAIRS;
                runtime
                    .schedule((reads[k].read(), writes[k].write()), |(a, b)| {
                        empty(a, b);
                        Ok(())
                    })
                    .unwrap();
            }
            for w in &writes {
                w.wait().unwrap();
            }
        });
    });
    group.bench_function(BenchmarkId::new("plain_loop", TASKS), |bench| {
        let a: Vec<u64> = (0..PAIRS as u64).collect();
        let mut b = vec![0_u64; PAIRS];
        bench.iter(|| {
            for i in 0..TASKS {
                let k = i % PAIRS;
                empty(&a[k], &mut b[k]);
            }
            black_box(&b);
        });
    });
    group.bench_function(BenchmarkId::new("rayon_scope", TASKS), |bench| {
        let a: Vec<u64> = (0..PAIRS as u64).collect();
        bench.iter(|| {
            pool.scope(|s| {
                for i in 0..TASKS {
                    let a = &a;
                    s.spawn(move |_| {
                        let mut b = 0;
                        empty(&a[i % PAIRS], &mut b);
                        black_box(b);
                    });
                }
            });
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
