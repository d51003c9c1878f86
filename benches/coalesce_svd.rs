//! Block-sparse SVD overhead: `tessera::coalesce::svd` (one scheduled task per coupled
//! sector, the host truncation decision, the copies into U and V†) beside faer's thin SVD
//! called directly on each sector matrix, in a plain loop on one thread and in a rayon loop
//! on the same two threads as the runtime, same run. The runtime's overhead is the ratio of
//! the medians.
//!
//! `cargo bench --bench coalesce_svd`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rayon::prelude::*;
use std::hint::black_box;
use std::sync::Arc;
use tessera::blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera::coalesce::{Coalesce, Truncation, svd};
use tessera::prelude::Runtime;

/// A DMRG two-site tensor: bond legs with U(1) charges -3..=3 of dimension `d` each, two
/// spin-1/2 physical legs; codomain (left bond, site), domain (site, right bond), flux 0.
fn structure(d: usize) -> Arc<BlockStructure<U1>> {
    let bond = |dir| Leg::new(dir, (-3..=3).map(|q| (U1(q), d))).unwrap();
    let site = |dir| Leg::new(dir, [(U1(0), 1), (U1(1), 1)]).unwrap();
    Arc::new(
        BlockStructure::new(
            [bond(Direction::In), site(Direction::In)],
            [site(Direction::Out), bond(Direction::Out)],
            U1(0),
        )
        .unwrap(),
    )
}

/// A rough flop count of a thin SVD of every sector matrix: the throughput figure, which
/// criterion prints as elements per second (read: flop/s).
fn svd_flops(s: &BlockStructure<U1>) -> u64 {
    s.sectors()
        .iter()
        .map(|c| {
            let (m, n) = (c.rows().max(c.cols()) as u64, c.rows().min(c.cols()) as u64);
            4 * m * n * n + 8 * n * n * n
        })
        .sum()
}

fn bench(c: &mut Criterion) {
    let runtime = Runtime::new(2).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let mut group = c.benchmark_group("coalesce_svd");
    group.sample_size(10);
    for d in [8_usize, 24] {
        let s = structure(d);
        let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 1);
        let mats: Vec<_> = (0..s.sectors().len())
            .map(|k| a.sector(k).unwrap().with(|m| m.to_owned()).unwrap())
            .collect();
        let chi = s
            .sectors()
            .iter()
            .map(|c| c.rows().min(c.cols()))
            .sum::<usize>()
            / 2;
        let label = format!(
            "sectors{}_largest{}x{}_chi{chi}",
            s.sectors().len(),
            s.sectors().iter().map(|c| c.rows()).max().unwrap(),
            s.sectors().iter().map(|c| c.cols()).max().unwrap(),
        );
        group.throughput(Throughput::Elements(svd_flops(&s)));
        group.bench_function(BenchmarkId::new("tessera_svd", &label), |b| {
            b.iter(|| {
                let r = runtime.enter(|| svd(&a, &Truncation::max_dim(chi)).unwrap());
                r.u.wait().unwrap();
                r.vt.wait().unwrap();
                black_box(r.discarded_weight)
            })
        });
        group.bench_function(BenchmarkId::new("faer_loop_baseline", &label), |b| {
            b.iter(|| {
                for m in &mats {
                    black_box(m.thin_svd().unwrap());
                }
            })
        });
        group.bench_function(BenchmarkId::new("faer_rayon_loop_baseline", &label), |b| {
            b.iter(|| {
                pool.install(|| {
                    mats.par_iter().for_each(|m| {
                        black_box(m.thin_svd().unwrap());
                    })
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
