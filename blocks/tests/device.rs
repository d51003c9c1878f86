//! Device arrays against their host counterparts, on a GPU (feature `cuda`): transfers,
//! placement, scale, axpy, norm, inner product and leg permutation over every sector kind,
//! and misuse. Without a driver or device each test prints `skipped: ...` and returns.
//! Built with `--features cuda,testing`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use tessera_backends::cuda::{CudaDevice, probe_nvrtc};
use tessera_blocks::testing::{Kind, or_skip_without_cuda, random_perm, random_structure};
use tessera_blocks::{AsyncArray, Blocks, DeviceArray, Error};
use tessera_core::Domain;
use tessera_testing::assert_close_to_max;

/// Device `ordinal`, or `None` having said why the test is skipped.
fn device(ordinal: usize) -> Option<Arc<CudaDevice>> {
    or_skip_without_cuda(
        CudaDevice::open(ordinal).map(Arc::new),
        &format!("opening CUDA device {ordinal}"),
    )
}

/// Transfers are exact both ways; blocks carry the placement; operations match the host's.
#[test]
fn device_arrays_match_host_arrays() {
    let Some(dev) = device(0) else { return };
    fn run<S: Kind>(seed: u64) {
        let dev = device(0).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for case in 0..60 {
            let s = Arc::new(random_structure::<S>(&mut rng));
            let what = format!("{} case {case}", std::any::type_name::<S>());
            let a = AsyncArray::<f64, S>::random(Arc::clone(&s), rng.r#gen());
            let b = AsyncArray::<f64, S>::random(Arc::clone(&s), rng.r#gen());
            let da = a.to_device(&dev).unwrap();
            assert_eq!(
                da.to_host().unwrap().to_dense().unwrap(),
                a.to_dense().unwrap(),
                "{what}"
            );
            assert_eq!(da.domain(), Domain::Cuda { ordinal: 0 });
            if s.num_blocks() > 0 {
                assert_eq!(da.region(&[0]).unwrap().region().extents().len(), 1);
            }
            // A subset of the blocks, and all of them.
            let some: Vec<usize> = (0..s.num_blocks()).filter(|_| rng.gen_bool(0.5)).collect();
            for blocks in [Blocks::All, Blocks::Only(&some)] {
                let (x, y) = (a.duplicate(), b.duplicate());
                let (dx, dy) = (x.to_device(&dev).unwrap(), y.to_device(&dev).unwrap());
                y.axpy_blocks(0.5, &x, blocks).unwrap();
                dy.axpy_blocks(0.5, &dx, blocks).unwrap();
                x.scale_blocks(-1.25, blocks).unwrap();
                dx.scale_blocks(-1.25, blocks).unwrap();
                assert_close_to_max(
                    &dy.to_host().unwrap().to_dense().unwrap(),
                    &y.to_dense().unwrap(),
                    1e-12,
                    &what,
                );
                assert_close_to_max(
                    &dx.to_host().unwrap().to_dense().unwrap(),
                    &x.to_dense().unwrap(),
                    1e-12,
                    &what,
                );
                let (n, dn) = (
                    x.norm_blocks(blocks).unwrap().get().unwrap(),
                    dx.norm_blocks(blocks).unwrap().get().unwrap(),
                );
                assert!(
                    (n - dn).abs() <= 1e-12 * (1.0 + n),
                    "{what}: norm {dn} vs {n}"
                );
                let (p, dp) = (
                    x.inner_blocks(&y, blocks).unwrap().get().unwrap(),
                    dx.inner_blocks(&dy, blocks).unwrap().get().unwrap(),
                );
                assert!(
                    (p - dp).abs() <= 1e-12 * (1.0 + p.abs() + n * n),
                    "{what}: inner {dp} vs {p}"
                );
            }
            if probe_nvrtc().is_ok() {
                let perm = random_perm(&mut rng, s.num_legs());
                let nc = rng.gen_range(0..=s.num_legs());
                let want = a.permute(&perm, nc).unwrap();
                let got = da.permute(&perm, nc).unwrap();
                assert_eq!(got.structure(), want.structure(), "{what}");
                assert_eq!(
                    got.to_host().unwrap().to_dense().unwrap(),
                    want.to_dense().unwrap(),
                    "{what}: permute {perm:?} | {nc}"
                );
            }
        }
    }
    drop(dev);
    tessera_blocks::for_each_kind!(run);
}

/// A copy to another device (or the same one, with one GPU) is exact, and a later write of
/// the source does not reach the copy.
#[test]
fn copies_between_devices_are_ordered() {
    let Some(d0) = device(0) else { return };
    let d1 = match CudaDevice::count() {
        Ok(n) if n > 1 => device(1).unwrap(),
        _ => {
            println!("one device: copying to the same device");
            Arc::clone(&d0)
        }
    };
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let s = Arc::new(random_structure::<tessera_blocks::U1>(&mut rng));
    let a = AsyncArray::<f64, _>::random(Arc::clone(&s), 3);
    let da = a.to_device(&d0).unwrap();
    let db = da.to_device(&d1).unwrap();
    da.scale(2.0);
    assert_eq!(
        db.to_host().unwrap().to_dense().unwrap(),
        a.to_dense().unwrap()
    );
    assert_eq!(
        db.domain(),
        Domain::Cuda {
            ordinal: d1.ordinal() as u32
        }
    );
}

/// Misuse gives typed errors and writes nothing.
#[test]
fn device_misuse_is_refused_and_writes_nothing() {
    let Some(dev) = device(0) else { return };
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let s = Arc::new(random_structure::<tessera_blocks::U1>(&mut rng));
    let other = loop {
        let o = Arc::new(random_structure::<tessera_blocks::U1>(&mut rng));
        if o != s {
            break o;
        }
    };
    let a = AsyncArray::<f64, _>::random(Arc::clone(&s), 1);
    let da = a.to_device(&dev).unwrap();
    let dx = DeviceArray::<f64, _>::zeros(other, &dev).unwrap();
    assert!(matches!(
        da.axpy(1.0, &dx),
        Err(Error::StructureMismatch { .. })
    ));
    assert!(matches!(
        da.axpy(1.0, &da),
        Err(Error::AliasedOperands { .. })
    ));
    let n = s.num_blocks();
    assert_eq!(
        da.scale_blocks(0.0, Blocks::Only(&[n])).unwrap_err(),
        Error::UnknownBlock {
            block: n,
            blocks: n
        }
    );
    assert!(matches!(da.region(&[n]), Err(Error::UnknownBlock { .. })));
    // The selection variants and the permutations refuse as the host's do.
    let unknown = Error::UnknownBlock {
        block: n,
        blocks: n,
    };
    assert_eq!(da.norm_blocks(Blocks::Only(&[n])).unwrap_err(), unknown);
    assert_eq!(
        da.inner_blocks(&da, Blocks::Only(&[n])).unwrap_err(),
        unknown
    );
    let dy = DeviceArray::<f64, _>::zeros(Arc::clone(&s), &dev).unwrap();
    assert_eq!(
        dy.axpy_blocks(1.0, &da, Blocks::Only(&[n])).unwrap_err(),
        unknown
    );
    if s.num_legs() > 0 {
        let perm: Vec<usize> = (0..s.num_legs()).rev().collect();
        assert_eq!(
            da.permute_blocks(&perm, 0, Blocks::Only(&[n])).unwrap_err(),
            unknown
        );
        assert!(matches!(
            da.permute_into(&perm, 0, &dx),
            Err(Error::StructureMismatch { .. })
        ));
    }
    assert!(
        dy.to_host()
            .unwrap()
            .to_dense()
            .unwrap()
            .iter()
            .all(|&v| v == 0.0)
    );
    assert!(
        dx.to_host()
            .unwrap()
            .to_dense()
            .unwrap()
            .iter()
            .all(|&v| v == 0.0)
    );
    assert_eq!(
        da.to_host().unwrap().to_dense().unwrap(),
        a.to_dense().unwrap()
    );
}

/// A fan-out over every device: the same program, one array per device, each enqueued
/// without waiting for the others (tasks return once their work is enqueued), gathered at
/// the end by the host transfers. With one device it runs on that one.
#[test]
fn fan_out_over_devices_gathers_every_result() {
    let Some(_) = device(0) else { return };
    let count = CudaDevice::count().unwrap();
    let devices: Vec<Arc<CudaDevice>> = (0..count).map(|i| device(i).unwrap()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let s = Arc::new(random_structure::<tessera_blocks::U1>(&mut rng));
    let a = AsyncArray::<f64, _>::random(Arc::clone(&s), 5);
    let on: Vec<DeviceArray<f64, _>> = devices.iter().map(|d| a.to_device(d).unwrap()).collect();
    for (k, x) in on.iter().enumerate() {
        x.scale(k as f64 + 1.0);
    }
    let want = a.to_dense().unwrap();
    for (k, x) in on.iter().enumerate() {
        let got = x.to_host().unwrap().to_dense().unwrap();
        let scaled: Vec<f64> = want.iter().map(|v| v * (k as f64 + 1.0)).collect();
        assert_close_to_max(&got, &scaled, 1e-12, format!("device {k}"));
    }
}
