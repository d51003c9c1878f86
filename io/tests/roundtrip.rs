//! Round trips through files against dense references, on seeded random structures of every
//! sector kind, masked and unmasked, real and complex; and the asynchronous save.

use num_complex::Complex64;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;
use tessera_blocks::AsyncArray;
use tessera_blocks::testing::{Kind, for_each_kind, random_mask, random_structure};
use tessera_io::{Checkpoint, Element, SectorCodec};

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-io-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn same<T: Element>(a: &[T], b: &[T]) -> bool {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    T::put(a, &mut x);
    T::put(b, &mut y);
    x == y
}

fn check<S: Kind + SectorCodec>(seed: u64) {
    let dir = scratch(&format!("rt{seed}"));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for round in 0..12u64 {
        let full = random_structure::<S>(&mut rng);
        let s = if round % 2 == 1 {
            full.with_present(&random_mask(&mut rng, full.num_allowed()))
                .unwrap()
        } else {
            full
        };
        let a = AsyncArray::<f64, S>::random(s.clone(), seed + round);
        let z = AsyncArray::<Complex64, S>::random(s.clone(), seed ^ round);
        let mut ck = Checkpoint::new();
        ck.put_tensor("group/real", &a).unwrap();
        ck.put_tensor("group/complex", &z).unwrap();
        ck.put_f64s("energies", &[-1.5, f64::MIN_POSITIVE]);
        let path = dir.join("t.npz");
        ck.save(&path).unwrap();
        let back = Checkpoint::load(&path).unwrap();
        assert_eq!(back.tensor_names(), ["group/complex", "group/real"]);
        let b = back.tensor::<f64, S>("group/real").unwrap();
        let w = back.tensor::<Complex64, S>("group/complex").unwrap();
        assert_eq!(**b.structure(), s, "{}", S::type_name());
        assert_eq!(**w.structure(), s);
        assert!(same(
            &b.to_blocks().unwrap().concat(),
            &a.to_blocks().unwrap().concat()
        ));
        if s.dense_len().is_ok_and(|n| n < 1 << 16) {
            assert!(same(&b.to_dense().unwrap(), &a.to_dense().unwrap()));
            assert!(same(&w.to_dense().unwrap(), &z.to_dense().unwrap()));
        }
        assert_eq!(back.f64s("energies").unwrap(), [-1.5, f64::MIN_POSITIVE]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_kind_round_trips_against_dense() {
    for_each_kind!(check);
}

#[test]
fn metadata_round_trips() {
    let dir = scratch("meta");
    let mut ck = Checkpoint::new();
    ck.put_i64s("sweep", &[4, -1]);
    ck.put_str("note", "χ = 512");
    ck.save(dir.join("m.npz")).unwrap();
    let back = Checkpoint::load(dir.join("m.npz")).unwrap();
    assert_eq!(back.i64s("sweep").unwrap(), [4, -1]);
    assert_eq!(back.string("note").unwrap(), "χ = 512");
    assert!(back.f64s("sweep").is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn async_save_snapshots_before_later_writes() {
    use tessera_blocks::{BlockStructure, Direction, Leg, U1};
    let dir = scratch("async");
    let row = Leg::new(Direction::In, [(U1(0), 30), (U1(1), 20)]).unwrap();
    let col = Leg::new(Direction::Out, [(U1(0), 30), (U1(1), 20)]).unwrap();
    let s = BlockStructure::new([row], [col], U1(0)).unwrap();
    let a = AsyncArray::<f64, U1>::random(s.clone(), 1);
    let before = a.to_dense().unwrap();
    let mut meta = Checkpoint::new();
    meta.put_i64s("sweep", &[1]);
    let saving = meta.save_async(dir.join("a.npz"), &[("a", &a)]).unwrap();
    // A write enrolled after the save waits for its snapshot.
    tessera_core::schedule(a.overwrite(), |mut views| {
        for v in views.iter_mut() {
            v.for_each_run_mut(|_, run| run.fill(7.0));
        }
        Ok(())
    })
    .unwrap();
    saving.wait().unwrap();
    let back = Checkpoint::load(dir.join("a.npz")).unwrap();
    assert_eq!(
        back.tensor::<f64, U1>("a").unwrap().to_dense().unwrap(),
        before
    );
    assert_eq!(back.i64s("sweep").unwrap(), [1]);
    assert!(a.to_blocks().unwrap().concat().iter().all(|&x| x == 7.0));
    std::fs::remove_dir_all(&dir).unwrap();
}
