//! Hostile files: every truncation and every single-byte corruption of a saved checkpoint
//! either fails to load with an error or loads exactly the saved tensor (a byte the format
//! does not interpret, such as a zip timestamp); never a panic, never a different tensor.

use num_complex::Complex64;
use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera_io::Checkpoint;

fn bits(v: &[Complex64]) -> Vec<(u64, u64)> {
    v.iter().map(|z| (z.re.to_bits(), z.im.to_bits())).collect()
}

/// Loads `path` fully: the checkpoint, its tensor and its metadata.
/// The bits of a loaded dense tensor, and its metadata.
type Loaded = (Vec<(u64, u64)>, Vec<f64>);

fn load(path: &std::path::Path) -> Result<Loaded, tessera_io::Error> {
    let ck = Checkpoint::load(path)?;
    let t = ck.tensor::<Complex64, U1>("t")?;
    let s = t.structure().clone();
    Ok((bits(&t.to_dense().expect("a loaded tensor is ready")), {
        let mut e = ck.f64s("energy")?;
        e.push(s.num_blocks() as f64);
        e
    }))
}

#[test]
fn every_truncation_and_byte_flip_is_an_error_or_the_same_tensor() {
    let dir = std::env::temp_dir().join(format!("tessera-io-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = Leg::new(Direction::In, [(U1(-1), 1), (U1(0), 2), (U1(1), 1)]).unwrap();
    let b = Leg::new(Direction::Out, [(U1(0), 2), (U1(1), 1)]).unwrap();
    let c = Leg::new(Direction::In, [(U1(0), 1), (U1(1), 2)]).unwrap();
    let s = BlockStructure::new([a, b], [c], U1(1)).unwrap();
    let t = AsyncArray::<Complex64, U1>::random(s, 5);
    let mut ck = Checkpoint::new();
    ck.put_tensor("t", &t).unwrap();
    ck.put_f64s("energy", &[-0.25]);
    let good = dir.join("good.npz");
    ck.save(&good).unwrap();
    let reference = load(&good).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let bad = dir.join("bad.npz");

    let mut errors = 0;
    for len in 0..bytes.len() {
        std::fs::write(&bad, &bytes[..len]).unwrap();
        assert!(
            load(&bad).is_err(),
            "a file truncated to {len} bytes loaded"
        );
        errors += 1;
    }
    let mut same = 0;
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            std::fs::write(&bad, &b).unwrap();
            match load(&bad) {
                Err(_) => errors += 1,
                Ok(got) => {
                    assert_eq!(
                        got, reference,
                        "byte {i} ^ {flip:#x} gave a different tensor"
                    );
                    same += 1;
                }
            }
        }
    }
    println!(
        "{} bytes: {errors} corruptions refused, {same} in uninterpreted bytes loaded the same tensor",
        bytes.len()
    );
    // Most of the file is interpreted: only zip bookkeeping (times, attributes, the local
    // copies of names and sizes) is not; about a fifth of the flips land there.
    assert!(
        same * 3 < 2 * bytes.len(),
        "{same} of {} flips went unnoticed",
        2 * bytes.len()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
