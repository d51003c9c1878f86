//! Deferred tasks: completed from other threads, in program order with every other access;
//! abandoned, failed or poisoned ones poison exactly what they write, and nothing waits
//! forever.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::mpsc;
use tessera_core::{Async, Completion, Error, FailureCause, Runtime, WriteBuffer};

type Handoff<T> = mpsc::Sender<Completion<WriteBuffer<tessera_core::ValueRegion<T>>>>;

#[test]
fn a_deferred_write_orders_later_reads_and_writes_and_completes_on_another_thread() {
    let rt = Runtime::new(2).unwrap();
    let a = Async::new(1.0_f64);
    let b = Async::new(0.0_f64);
    let (tx, rx): (Handoff<f64>, _) = mpsc::channel();
    rt.schedule_deferred_named("arrives", a.write(), move |done| {
        tx.send(done).unwrap();
    })
    .unwrap();
    // Both wait for the deferred write of `a`, which is held by another thread.
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&ran);
    rt.schedule((a.read(), b.overwrite()), move |(a, b)| {
        flag.store(true, std::sync::atomic::Ordering::Release);
        *b = *a * 2.0;
        Ok(())
    })
    .unwrap();
    rt.schedule(a.write(), |a| {
        *a += 1.0;
        Ok(())
    })
    .unwrap();
    let done = rx.recv().unwrap();
    assert!(done.poisoned().is_none());
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(
        !ran.load(std::sync::atomic::Ordering::Acquire),
        "a reader ran before the deferred write completed"
    );
    let finisher = std::thread::spawn(move || {
        done.complete(|a| {
            *a = 21.0;
            Ok(())
        })
    });
    assert_eq!(b.get().unwrap(), 42.0);
    assert_eq!(a.get().unwrap(), 22.0);
    finisher.join().unwrap();
}

#[test]
fn a_deferred_read_holds_back_a_later_write_until_it_completes() {
    let rt = Runtime::new(2).unwrap();
    let a = Async::new(5_u64);
    let (tx, rx) = mpsc::channel();
    rt.schedule_deferred_named("send", a.read(), move |done| tx.send(done).unwrap())
        .unwrap();
    rt.schedule(a.write(), |a| {
        *a = 7;
        Ok(())
    })
    .unwrap();
    let done = rx.recv().unwrap();
    let (seen_tx, seen_rx) = mpsc::channel();
    std::thread::spawn(move || {
        done.complete(move |a| {
            seen_tx.send(*a).unwrap();
            Ok(())
        })
    });
    assert_eq!(
        seen_rx.recv().unwrap(),
        5,
        "the write ran before the read completed"
    );
    assert_eq!(a.get().unwrap(), 7);
}

#[test]
fn a_dropped_completion_poisons_its_outputs_and_writes_nothing() {
    let rt = Runtime::new(1).unwrap();
    let a = Async::new(3_i32);
    let b = Async::new(0_i32);
    rt.schedule_deferred_named("abandoned", a.write(), drop)
        .unwrap();
    rt.schedule((a.read(), b.write()), |(a, b)| {
        *b = *a;
        Ok(())
    })
    .unwrap();
    match b.get() {
        Err(Error::Poisoned { origin }) => {
            assert_eq!(origin.name, "abandoned");
            assert!(
                origin.to_string().contains("dropped before it completed"),
                "{origin}"
            );
        }
        other => panic!("expected the abandoned task's poison, got {other:?}"),
    }
    // An overwrite starts clean; the abandoned task wrote nothing.
    rt.schedule(a.overwrite(), |a| {
        *a += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(a.get().unwrap(), 4);
}

#[test]
fn a_failed_completion_names_its_error_and_a_panicking_start_fails_the_task() {
    let rt = Runtime::new(2).unwrap();
    let a = Async::new(0_u8);
    rt.schedule_deferred_named("refused", a.write(), |done| {
        done.fail("the peer refused".into());
    })
    .unwrap();
    let err = a.get().unwrap_err();
    assert!(err.to_string().contains("the peer refused"), "{err}");

    std::panic::set_hook(Box::new(|_| {}));
    let c = Async::new(0_u8);
    rt.schedule_deferred_named("panics", c.write(), |_done| panic!("start failed"))
        .unwrap();
    let _ = std::panic::take_hook();
    match c.get() {
        Err(Error::Poisoned { origin }) => assert_eq!(origin.name, "panics"),
        other => panic!("expected poison, got {other:?}"),
    }
}

#[test]
fn a_poisoned_input_still_starts_the_task_and_its_outputs_carry_the_origin() {
    let rt = Runtime::new(2).unwrap();
    let a = Async::new(0.0_f64);
    let b = Async::new(1.0_f64);
    rt.schedule_named("fails", a.write(), |_| Err("bad input".into()))
        .unwrap();
    let (tx, rx) = mpsc::channel();
    rt.schedule_deferred_named("forward", (a.read(), b.write()), move |done| {
        let origin = done.poisoned().map(|f| f.name);
        tx.send(origin).unwrap();
        done.complete(|(_, b)| {
            *b = 99.0; // never runs: an input is poisoned
            Ok(())
        });
    })
    .unwrap();
    assert_eq!(rx.recv().unwrap(), Some("fails"));
    match b.get() {
        Err(Error::Poisoned { origin }) => {
            assert_eq!(origin.name, "fails");
            assert!(matches!(origin.cause, FailureCause::Error(_)));
        }
        other => panic!("expected the origin's poison, got {other:?}"),
    }
}

/// Chains of deferred increments over several values, completed by several threads in a
/// random order: every value ends at its count, whatever the order of completion.
#[test]
fn deferred_chains_completed_out_of_order_keep_program_order() {
    let rt = Runtime::new(2).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let values: Vec<Async<u64>> = (0..8).map(|_| Async::new(0)).collect();
    let mut expected = [0u64; 8];
    let (tx, rx): (Handoff<u64>, _) = mpsc::channel();
    let n = if cfg!(miri) { 40 } else { 400 };
    for _ in 0..n {
        let i = rng.gen_range(0..values.len());
        expected[i] += 1;
        let tx = tx.clone();
        rt.schedule_deferred_named("inc", values[i].write(), move |done| tx.send(done).unwrap())
            .unwrap();
    }
    drop(tx);
    // Completions arrive as their tasks become ready; finish each batch in a shuffled order
    // from several threads.
    let mut handled = 0;
    while handled < n {
        let mut batch: Vec<_> = rx.try_iter().collect();
        if batch.is_empty() {
            batch.push(rx.recv().unwrap());
        }
        handled += batch.len();
        batch.shuffle(&mut rng);
        let threads: Vec<_> = batch
            .into_iter()
            .map(|done| {
                std::thread::spawn(move || {
                    done.complete(|v| {
                        *v += 1;
                        Ok(())
                    })
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
    }
    for (v, e) in values.iter().zip(expected) {
        assert_eq!(v.get().unwrap(), e);
    }
}

#[test]
fn a_trace_shows_a_deferred_task_from_its_start_to_its_completion() {
    let rt = Runtime::new(2).unwrap();
    let a = Async::new(0_u32);
    rt.start_trace();
    let (tx, rx) = mpsc::channel();
    rt.schedule_deferred_named("held", a.write(), move |done| tx.send(done).unwrap())
        .unwrap();
    let done = rx.recv().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    done.complete(|a| {
        *a = 1;
        Ok(())
    });
    assert_eq!(a.get().unwrap(), 1);
    let trace = rt.stop_trace();
    let held: Vec<_> = trace.events.iter().filter(|e| e.name == "held").collect();
    assert_eq!(held.len(), 1, "{:?}", trace.events);
    assert!(held[0].duration >= std::time::Duration::from_millis(5));
}
