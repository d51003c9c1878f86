//! A contraction too small for any of its GEMMs to use more than one core enrolls sequential
//! tasks: a host that waits for the result runs them itself when no worker has started them,
//! so the result arrives even while the only worker is held, and it is the product.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera_contract::Contraction;
use tessera_core::{Async, Runtime};

#[test]
fn a_small_product_is_run_by_the_host_that_waits_while_the_worker_is_held() {
    let rt = Runtime::new(1).unwrap();
    let leg = Leg::new(Direction::In, (0..5).map(|q| (U1(q), 3 + 2 * q as usize))).unwrap();
    let s = Arc::new(BlockStructure::new(vec![leg.clone()], vec![leg.dual()], U1(0)).unwrap());
    let a = rt.enter(|| AsyncArray::<f64, U1>::random(Arc::clone(&s), 1));
    let b = rt.enter(|| AsyncArray::<f64, U1>::random(Arc::clone(&s), 2));
    let (da, db) = (a.to_dense().unwrap(), b.to_dense().unwrap());

    // The only worker, held until the gate opens (by the test, or after 20 s by a watchdog,
    // so that a wait that needs the worker fails the test instead of hanging it).
    let gate = Arc::new(AtomicBool::new(false));
    let held = Async::new(0_u8);
    let g = Arc::clone(&gate);
    rt.schedule(held.write(), move |h| {
        while !g.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        *h = 1;
        Ok(())
    })
    .unwrap();
    let watchdog = {
        let g = Arc::clone(&gate);
        std::thread::spawn(move || {
            for _ in 0..2000 {
                if g.load(Ordering::Acquire) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            !g.swap(true, Ordering::AcqRel)
        })
    };

    let mm = Contraction::new("ab,bc->ac").unwrap();
    let c = rt.enter(|| mm.apply(&a, &b).unwrap());
    c.wait().unwrap();
    let opened_by_test = !gate.swap(true, Ordering::AcqRel);
    assert!(
        opened_by_test,
        "the wait returned only once the worker was free"
    );
    assert!(!watchdog.join().unwrap());
    assert_eq!(held.get().unwrap(), 1);

    let n = leg.dim();
    let got = c.to_dense().unwrap();
    for i in 0..n {
        for j in 0..n {
            let want: f64 = (0..n).map(|k| da[i + n * k] * db[k + n * j]).sum();
            assert!((got[i + n * j] - want).abs() <= 1e-12 * (1.0 + want.abs()));
        }
    }
}
