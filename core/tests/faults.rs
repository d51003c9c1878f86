//! Fault injection: failed kernels poison exactly the dependent results, with the origin
//! named; no deadlock, nothing leaked.

mod common;

use common::{Replayed, accesses, kernel, random_program, replay};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_core::{Async, Error, FailureCause, Runtime, TaskId};

/// Counts live kernel closures: each captures one.
struct Live(Arc<AtomicUsize>);

impl Live {
    fn new(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(counter))
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[test]
fn injected_failures_reach_exactly_the_dependent_results() {
    std::panic::set_hook(Box::new(|_| {})); // injected panics are expected; keep output clean
    // Under Miri, a short program with faults frequent enough that it has some.
    let (tasks, seeds, rate) = if cfg!(miri) {
        (64, 1, 0.05)
    } else {
        (20_000, 4, 0.002)
    };
    let records = 64;
    for seed in 0..seeds {
        let ops = random_program(1000 + seed, tasks, records, rate);
        assert!(ops.iter().any(|o| o.fault != 0));
        let rt = Runtime::new(2).unwrap();
        let live = Arc::new(AtomicUsize::new(0));
        let values: Vec<Async<u64>> = (0..records as u64).map(Async::new).collect();
        let mut ids: Vec<TaskId> = Vec::with_capacity(ops.len());
        for op in &ops {
            let (reads, writes) = accesses(op, &values);
            let op = op.clone();
            let guard = Live::new(&live);
            let id = rt
                .schedule((reads, writes), move |(ins, mut outs)| {
                    let _guard = guard;
                    match op.fault {
                        1 => return Err(format!("injected error in salt {}", op.salt).into()),
                        2 => panic!("injected panic in salt {}", op.salt),
                        _ => {}
                    }
                    let ins: Vec<u64> = ins.into_iter().copied().collect();
                    kernel(&op, &ins, &mut outs);
                    Ok(())
                })
                .unwrap();
            ids.push(id);
        }
        let expected = replay(&ops, records);
        for (r, (value, want)) in values.iter().zip(&expected).enumerate() {
            match (value.get(), want) {
                (Ok(v), Replayed::Value(w)) => assert_eq!(v, *w, "record {r}"),
                (Err(Error::Poisoned { origin }), Replayed::Poisoned { origin: t }) => {
                    assert_eq!(origin.task, ids[*t], "record {r} names its origin");
                    let fault = ops[*t].fault;
                    match (&origin.cause, fault) {
                        (FailureCause::Error(e), 1) => {
                            assert!(e.to_string().contains("injected error"))
                        }
                        (FailureCause::Panic(m), 2) => assert!(m.contains("injected panic")),
                        (cause, f) => panic!("record {r}: cause {cause} for fault kind {f}"),
                    }
                    assert!(
                        Error::Poisoned {
                            origin: origin.clone()
                        }
                        .to_string()
                        .contains("failed")
                    );
                }
                (got, want) => panic!("record {r}, seed {seed}: got {got:?}, expected {want:?}"),
            }
        }
        // A host update waits for every earlier access (reads included); after it, every
        // kernel closure has been dropped.
        for v in &values {
            let _ = v.alias().with_mut(|_| ());
        }
        assert_eq!(
            live.load(Ordering::Acquire),
            0,
            "kernels leaked, seed {seed}"
        );
    }
    let _ = std::panic::take_hook();
}

#[test]
fn an_overwrite_starts_a_clean_epoch_and_independent_work_is_unaffected() {
    let a = Async::new(1_u32);
    let b = Async::new(2_u32);
    let c = Async::new(0_u32);
    tessera_core::schedule(a.write(), |_| Err("boom".into())).unwrap();
    tessera_core::schedule((a.read(), c.overwrite()), |(a, c)| {
        *c = *a;
        Ok(())
    })
    .unwrap();
    tessera_core::schedule(b.write(), |b| {
        *b += 1;
        Ok(())
    })
    .unwrap();
    assert!(matches!(a.get(), Err(Error::Poisoned { .. })));
    let Err(Error::Poisoned { origin }) = c.get() else {
        panic!("the dependant must be poisoned")
    };
    assert_eq!(origin.name, "task");
    assert_eq!(b.get().unwrap(), 3, "independent work is unaffected");
    // An update of a poisoned value stays poisoned; an overwrite starts a clean epoch.
    tessera_core::schedule(a.write(), |a| {
        *a = 5;
        Ok(())
    })
    .unwrap();
    assert!(a.get().is_err());
    a.set(7);
    assert_eq!(a.get().unwrap(), 7);
    tessera_core::schedule((a.read(), c.overwrite()), |(a, c)| {
        *c = *a * 2;
        Ok(())
    })
    .unwrap();
    assert_eq!(c.get().unwrap(), 14);
}
