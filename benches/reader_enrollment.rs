//! Enrolling reads of one value behind a pending write: 10^3, 10^4 and 10^5 reads, in
//! reads per second. The write is held back until they are all enrolled, so every read is
//! still pending when the next one enrolls; the figure per read stays flat as their number
//! grows tenfold, that is the total grows linearly (a scan of the pending reads at each
//! enrollment made it quadratic: 10^5 reads took 11-14 s). A write enrolled behind them
//! (waiting for all of them) is part of each measurement.
//!
//! `cargo bench --bench reader_enrollment`

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::{Duration, Instant};
use tessera::prelude::*;

fn bench(c: &mut Criterion) {
    let runtime = Runtime::new(2).unwrap();
    let mut group = c.benchmark_group("reader_enrollment");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    for reads in [1_000_u64, 10_000, 100_000] {
        group.throughput(Throughput::Elements(reads));
        group.bench_function(BenchmarkId::new("behind_a_pending_write", reads), |bench| {
            bench.iter_custom(|iters| {
                let mut enrolling = Duration::ZERO;
                for _ in 0..iters {
                    let value = Async::new(0_u64);
                    let (release, held) = std::sync::mpsc::channel::<()>();
                    runtime
                        .schedule(value.write(), move |v| {
                            held.recv().unwrap();
                            *v = 1;
                            Ok(())
                        })
                        .unwrap();
                    let start = Instant::now();
                    for _ in 0..reads {
                        runtime
                            .schedule(value.read(), |v| {
                                black_box(*v);
                                Ok(())
                            })
                            .unwrap();
                    }
                    runtime
                        .schedule(value.write(), |v| {
                            *v += 1;
                            Ok(())
                        })
                        .unwrap();
                    enrolling += start.elapsed();
                    release.send(()).unwrap();
                    assert_eq!(value.get().unwrap(), 2);
                }
                enrolling
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
