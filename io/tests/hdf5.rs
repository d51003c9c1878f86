//! The HDF5 container (feature `hdf5`): round trips of tensors and metadata, and the Python
//! round trip through h5py when python3 has numpy and h5py (skipped otherwise).
#![cfg(feature = "hdf5")]

use num_complex::Complex64;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::process::Command;
use tessera_blocks::testing::{random_mask, random_structure};
use tessera_blocks::{AsyncArray, Product, Trivial, U1, Z2};
use tessera_io::Checkpoint;

mod common;
use common::{assert_holds, bytes};

#[test]
fn hdf5_round_trips_and_python_reads_it() {
    let dir = std::env::temp_dir().join(format!("tessera-io-h5-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut ck = Checkpoint::new();
    let (mut reals, mut complexes, mut tilings) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..5 {
        let a = AsyncArray::<f64, U1>::random(random_structure::<U1>(&mut rng), k);
        ck.put_tensor(&format!("u1/{k}"), &a).unwrap();
        reals.push(a);
        let s = random_structure::<Product<U1, Z2>>(&mut rng);
        let s = s
            .with_present(&random_mask(&mut rng, s.num_allowed()))
            .unwrap();
        let z = AsyncArray::<Complex64, Product<U1, Z2>>::random(s, k);
        ck.put_tensor(&format!("prod/{k}"), &z).unwrap();
        complexes.push(z);
        let t = AsyncArray::<f64, Trivial>::random(random_structure::<Trivial>(&mut rng), k);
        ck.put_tensor(&format!("tiled/{k}"), &t).unwrap();
        tilings.push(t);
    }
    ck.put_f64s("energies", &[-1.25, 0.5]);
    ck.put_str("note", "h5");
    let check = |back: &Checkpoint| {
        for (k, a) in reals.iter().enumerate() {
            assert_holds(back, &format!("u1/{k}"), a);
        }
        for (k, z) in complexes.iter().enumerate() {
            assert_holds(back, &format!("prod/{k}"), z);
        }
        for (k, t) in tilings.iter().enumerate() {
            let got = back.tensor::<f64, Trivial>(&format!("tiled/{k}")).unwrap();
            assert_eq!(got.structure(), t.structure());
            assert_eq!(
                bytes(&got.to_blocks().unwrap().concat()),
                bytes(&t.to_blocks().unwrap().concat())
            );
        }
        assert_eq!(back.f64s("energies").unwrap(), [-1.25, 0.5]);
        assert_eq!(back.string("note").unwrap(), "h5");
    };
    let (a, b) = (dir.join("a.h5"), dir.join("b.h5"));
    ck.save_h5(&a).unwrap();
    check(&Checkpoint::load_h5(&a).unwrap());
    // An npz file is not an HDF5 file, and the reverse: errors, not panics.
    assert!(Checkpoint::load(&a).is_err());

    let h5py = Command::new("python3")
        .args(["-c", "import numpy, h5py"])
        .status();
    if !h5py.is_ok_and(|s| s.success()) {
        println!("skipped the Python part: python3 with numpy and h5py is not available");
    } else {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/tessera_io.py");
        let out = Command::new("python3")
            .arg(script)
            .arg("roundtrip")
            .arg(&a)
            .arg(&b)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        check(&Checkpoint::load_h5(&b).unwrap());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
