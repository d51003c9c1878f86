//! Checkpoint throughput: saving a tensor to an npz file (snapshot, encode, atomic write with
//! fsync) and loading it (read, checks, CRC, rebuild), beside a raw write (with fsync) and
//! read of a file of the same size, in bytes per second.
//!
//! After the criterion figures, a paired line per direction: the checkpoint operation and the
//! raw one alternate for a few rounds, so that both meet the same state of the machine and
//! its page cache, and the median of their per-pair ratios is printed (checkpoint time over
//! raw time: 1.0 means the format costs nothing beyond the I/O).
//!
//! `cargo bench --bench checkpoint`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tessera::blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera::io::Checkpoint;

/// A U(1) matrix of sectors -2..=2, each of dimension `d`: 5 d^2 elements.
fn tensor(d: usize) -> AsyncArray<f64, U1> {
    let leg = Leg::new(Direction::In, (-2..=2).map(|c| (U1(c), d))).unwrap();
    AsyncArray::random(
        BlockStructure::new([leg.clone()], [leg.dual()], U1(0)).unwrap(),
        1,
    )
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-bench-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn save(path: &Path, a: &AsyncArray<f64, U1>) {
    let mut ck = Checkpoint::new();
    ck.put_tensor("t", a).unwrap();
    ck.save(path).unwrap();
}

fn load(path: &Path) -> AsyncArray<f64, U1> {
    Checkpoint::load(path).unwrap().tensor("t").unwrap()
}

fn raw_write(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

fn bench(c: &mut Criterion) {
    let dir = dir();
    let (ck_path, raw_path) = (dir.join("t.npz"), dir.join("raw.bin"));
    for d in [256usize, 1024] {
        let a = tensor(d);
        let bytes: Vec<u8> = a
            .to_blocks()
            .unwrap()
            .concat()
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let mut g = c.benchmark_group(format!("checkpoint/{}MB", bytes.len() >> 20));
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.sample_size(10);
        g.bench_function("save", |b| b.iter(|| save(&ck_path, &a)));
        g.bench_function("raw_write", |b| b.iter(|| raw_write(&raw_path, &bytes)));
        g.bench_function("load", |b| b.iter(|| black_box(load(&ck_path))));
        g.bench_function("raw_read", |b| {
            b.iter(|| black_box(std::fs::read(&raw_path).unwrap()))
        });
        g.finish();

        let time = |f: &dyn Fn()| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        };
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (mut save_r, mut load_r) = (Vec::new(), Vec::new());
        for _ in 0..7 {
            save_r.push(time(&|| save(&ck_path, &a)) / time(&|| raw_write(&raw_path, &bytes)));
            load_r.push(
                time(&|| drop(black_box(load(&ck_path))))
                    / time(&|| drop(black_box(std::fs::read(&raw_path).unwrap()))),
            );
        }
        println!(
            "checkpoint/{}MB paired: save / raw write = {:.2}, load / raw read = {:.2} (median of 7)",
            bytes.len() >> 20,
            median(save_r),
            median(load_r)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

criterion_group!(benches, bench);
criterion_main!(benches);
