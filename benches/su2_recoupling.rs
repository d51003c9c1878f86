//! SU(2) recoupling cost beside the GEMM it serves: in an SU(2) DMRG product
//! `H_eff theta`, the intermediate `X[x s v | q r]` is moved to `[x s | v q r]` (a
//! recoupling of every segment tuple: the MPO leg changes sides) and then multiplied by
//! `WR[v q r | t z]` (one GEMM per coupled spin). Same run, same tensors:
//!
//! - `recoupling/compute`: one recoupling computed without the cache (a cache miss), and
//!   `recoupling/cached`: the same served from the cache (a hit);
//! - `permute/m`: the move of `X`, through its cached plan (what every Lanczos product
//!   pays), beside `gemm/m`: the product with `WR` it prepares. The ratio of their medians
//!   is the recoupling overhead of a step;
//! - the recoupling and permutation-plan cache counters of the whole run, printed at the
//!   end (hits against misses).
//!
//! `cargo bench --bench su2_recoupling`

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use tessera::blocks::Direction;
use tessera::blocks::su2::{
    Recoupling, RecouplingKey, Su2Leg, Su2Structure, Su2Tensor, permutation_cache_stats,
    recoupling_cache_stats,
};
use tessera::contract::contract_su2;
use tessera::prelude::Runtime;

/// A bond of a spin-1/2 chain at an even site: integer spins 0..=3, `m` multiplets each.
fn bond(direction: Direction, m: usize) -> Su2Leg {
    Su2Leg::new(direction, (0..4).map(|j| (2 * j, m))).unwrap()
}

fn bench(c: &mut Criterion) {
    let runtime = Runtime::new(2).unwrap();
    let site = Su2Leg::new(Direction::In, [(1, 1)]).unwrap();
    let mpo = Su2Leg::new(Direction::Out, [(0, 2), (2, 1)]).unwrap();
    let mut group = c.benchmark_group("su2_recoupling");
    group.sample_size(20);

    // The recoupling of one segment tuple of X (spins 2, 1/2, 1 | 1/2, 2): the MPO leg, an
    // `Out` leg stored flipped in the codomain, moves to the domain unflipped.
    let key = RecouplingKey {
        spins: vec![4, 1, 2, 1, 4],
        n_codomain: 3,
        perm: vec![0, 1, 2, 3, 4],
        new_n_codomain: 2,
        flipped: vec![false, false, true, false, false],
        new_flipped: vec![false; 5],
    };
    group.bench_function("recoupling/compute", |b| {
        b.iter(|| black_box(Recoupling::new(black_box(&key))))
    });
    group.bench_function("recoupling/cached", |b| {
        b.iter(|| black_box(Recoupling::of(black_box(&key))))
    });

    for m in [8_usize, 24] {
        runtime.enter(|| {
            let x = Su2Tensor::<f64>::random(
                Su2Structure::new(
                    vec![
                        bond(Direction::In, m),
                        site.clone(),
                        mpo.clone(),
                        site.dual(),
                        bond(Direction::Out, m),
                    ],
                    3,
                )
                .unwrap(),
                1,
            )
            .unwrap();
            let wr = Su2Tensor::<f64>::random(
                Su2Structure::new(
                    vec![
                        mpo.dual(),
                        site.clone(),
                        bond(Direction::In, m),
                        site.dual(),
                        bond(Direction::Out, m),
                    ],
                    3,
                )
                .unwrap(),
                2,
            )
            .unwrap();
            let moved = x.permuted(&[0, 1, 2, 3, 4], 2).unwrap();
            group.bench_with_input(BenchmarkId::new("permute", m), &m, |b, _| {
                b.iter(|| {
                    let y = x.permuted(&[0, 1, 2, 3, 4], 2).unwrap();
                    y.data().wait().unwrap();
                    black_box(y)
                })
            });
            group.bench_with_input(BenchmarkId::new("gemm", m), &m, |b, _| {
                b.iter(|| {
                    let y = contract_su2("xsvqr,vqrtz->xs|tz", &moved, &wr).unwrap();
                    y.data().wait().unwrap();
                    black_box(y)
                })
            });
        });
    }
    group.finish();
    let (p, r) = (permutation_cache_stats(), recoupling_cache_stats());
    println!(
        "su2_recoupling caches: permutation plans {} made, {} reused; recouplings {} made, \
         {} reused ({} held)",
        p.misses, p.hits, r.misses, r.hits, r.len
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
