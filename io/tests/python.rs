//! The Python round trip: `io/python/tessera_io.py roundtrip` reads a file Tessera wrote,
//! rebuilds every tensor from its dense array, writes a file back, and Tessera reads it:
//! the dense values agree to the last bit. Skipped (with a message) without python3 and
//! numpy.

use num_complex::Complex64;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::process::Command;
use tessera_blocks::testing::random_structure;
use tessera_blocks::{AsyncArray, Product, U1, Z2};
use tessera_io::Checkpoint;

mod common;
use common::assert_holds;

#[test]
fn python_reads_and_writes_back_bit_exact() {
    let numpy = Command::new("python3")
        .args(["-c", "import numpy"])
        .status();
    if !numpy.is_ok_and(|s| s.success()) {
        println!("skipped: python3 with numpy is not available");
        return;
    }
    let dir = std::env::temp_dir().join(format!("tessera-io-py-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(27);
    let mut ck = Checkpoint::new();
    let mut reals = Vec::new();
    let mut complexes = Vec::new();
    for k in 0..6 {
        let s = random_structure::<U1>(&mut rng);
        let a = AsyncArray::<f64, U1>::random(s, k);
        ck.put_tensor(&format!("u1/{k}"), &a).unwrap();
        reals.push(a);
        let s = random_structure::<Product<U1, Z2>>(&mut rng);
        let s = s
            .with_present(&tessera_blocks::testing::random_mask(
                &mut rng,
                s.num_allowed(),
            ))
            .unwrap();
        let z = AsyncArray::<Complex64, Product<U1, Z2>>::random(s, k);
        ck.put_tensor(&format!("prod/{k}"), &z).unwrap();
        complexes.push(z);
    }
    ck.put_f64s("energies", &[-0.4431471805599453]);
    ck.put_str("note", "from Rust");
    let (a, b) = (dir.join("a.npz"), dir.join("b.npz"));
    ck.save(&a).unwrap();
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
    println!("{}", String::from_utf8_lossy(&out.stdout));
    let back = Checkpoint::load(&b).unwrap();
    for (k, a) in reals.iter().enumerate() {
        assert_holds(&back, &format!("u1/{k}"), a);
    }
    for (k, z) in complexes.iter().enumerate() {
        assert_holds(&back, &format!("prod/{k}"), z);
    }
    assert_eq!(back.f64s("energies").unwrap(), [-0.4431471805599453]);
    assert_eq!(back.string("note").unwrap(), "from Rust");
    std::fs::remove_dir_all(&dir).unwrap();
}
