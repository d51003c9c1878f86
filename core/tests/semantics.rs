//! The ordering rules of the runtime, observed (never timed).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_core::{Async, Error, Mode, Runtime};

/// Spins until `counter` reaches `target`; gives up after a generous bound so that a
/// broken runtime fails the test instead of hanging it. No sleeps: yields only.
fn spin_until(counter: &AtomicUsize, target: usize) -> bool {
    let start = std::time::Instant::now();
    while counter.load(Ordering::Acquire) < target {
        if start.elapsed() > std::time::Duration::from_secs(30) {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

#[test]
fn reads_between_two_writes_run_concurrently() {
    let rt = Runtime::new(2).unwrap();
    let a = Async::new(5_u64);
    let started = Arc::new(AtomicUsize::new(0));
    let out: Vec<Async<bool>> = (0..2).map(|_| Async::new(false)).collect();
    for o in &out {
        let started = Arc::clone(&started);
        // Each read waits until both reads have started: this only finishes if the runtime
        // runs the two reads at the same time.
        rt.schedule((a.read(), o.overwrite()), move |(a, o)| {
            started.fetch_add(1, Ordering::AcqRel);
            *o = spin_until(&started, 2) && *a == 5;
            Ok(())
        })
        .unwrap();
    }
    for o in &out {
        assert!(o.get().unwrap(), "the two reads did not overlap");
    }
}

#[test]
fn writes_wait_for_earlier_reads_and_reads_for_earlier_writes() {
    let rt = Runtime::new(2).unwrap();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let a = Async::new(0_u64);
    let sinks: Vec<Async<u64>> = (0..8).map(|_| Async::new(0)).collect();
    for (i, sink) in sinks.iter().enumerate() {
        let log = Arc::clone(&log);
        if i % 3 == 0 {
            rt.schedule(a.write(), move |a| {
                *a += 1;
                log.lock().unwrap().push(('w', *a));
                Ok(())
            })
            .unwrap();
        } else {
            rt.schedule((a.read(), sink.overwrite()), move |(a, s)| {
                *s = *a;
                log.lock().unwrap().push(('r', *a));
                Ok(())
            })
            .unwrap();
        }
    }
    // Program: w r r w r r w r. Each read sees the write enrolled just before it.
    let expected = [0, 1, 1, 0, 2, 2, 0, 3];
    for (i, sink) in sinks.iter().enumerate() {
        if i % 3 != 0 {
            assert_eq!(sink.get().unwrap(), expected[i], "read {i}");
        }
    }
    assert_eq!(a.get().unwrap(), 3);
    let log = log.lock().unwrap();
    let writes: Vec<u64> = log.iter().filter(|e| e.0 == 'w').map(|e| e.1).collect();
    assert_eq!(writes, vec![1, 2, 3]);
    assert_eq!(a.epoch(), 3, "three writes were enrolled");
}

#[test]
fn an_output_sharing_a_record_with_an_input_is_refused_and_nothing_is_enrolled() {
    let a = Async::new(1.0_f64);
    let before = a.epoch();
    let err = tessera_core::schedule((a.read(), a.write()), |(_, a)| {
        *a = 99.0;
        Ok(())
    })
    .unwrap_err();
    match err {
        Error::Alias {
            record,
            first,
            second,
        } => {
            assert_eq!(record, a.record_id());
            assert!(matches!(
                (first, second),
                ("a read", "an update") | ("an update", "a read")
            ));
        }
        other => panic!("expected an alias error, got {other}"),
    }
    let alias = a.alias();
    assert!(matches!(
        tessera_core::schedule((alias.overwrite(), a.write()), |_| Ok(())),
        Err(Error::Alias { .. })
    ));
    assert_eq!(a.epoch(), before, "nothing was enrolled");
    assert_eq!(a.get().unwrap(), 1.0, "nothing was written");
}

#[test]
fn two_reads_of_one_record_in_one_task_are_one_read() {
    let a = Async::new(2_u32);
    let b = Async::new(0_u32);
    tessera_core::schedule((a.read(), a.view().read(), b.overwrite()), |(x, y, b)| {
        *b = x + y;
        Ok(())
    })
    .unwrap();
    assert_eq!(b.get().unwrap(), 4);
}

#[test]
fn aliases_share_the_exact_record_and_order_with_the_parent() {
    let a = Async::new(0_u64);
    let alias = a.alias();
    let clone = alias.clone();
    assert_eq!(
        alias.hazards().records().next().unwrap().id(),
        a.record_id()
    );
    assert_eq!(
        clone.hazards().records().next().unwrap().id(),
        a.record_id()
    );
    for i in 0..100 {
        // Consuming a fresh clone (`into_write`, `into_overwrite`) orders the same way.
        let target = match i % 5 {
            0 => a.write(),
            1 => alias.write(),
            2 => clone.write(),
            3 => alias.clone().into_write(),
            _ => clone.clone().into_overwrite(),
        };
        tessera_core::schedule(target, move |v| {
            *v = v.wrapping_mul(31).wrapping_add(i);
            Ok(())
        })
        .unwrap();
    }
    let expected = (0..100).fold(0_u64, |v, i| v.wrapping_mul(31).wrapping_add(i));
    assert_eq!(a.get().unwrap(), expected);
    assert_eq!(clone.read_only().with(|v| *v).unwrap(), expected);
    let seen = Async::new(0_u64);
    tessera_core::schedule((alias.into_read(), seen.overwrite()), |(v, s)| {
        *s = *v;
        Ok(())
    })
    .unwrap();
    assert_eq!(seen.get().unwrap(), expected);
}

#[test]
fn a_handle_dropped_after_submission_changes_nothing() {
    let live = Arc::new(AtomicUsize::new(0));
    struct Payload(Vec<u64>, Arc<AtomicUsize>);
    impl Drop for Payload {
        fn drop(&mut self) {
            self.1.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let out = Async::new(0_u64);
    {
        live.fetch_add(1, Ordering::AcqRel);
        let tmp = Async::new(Payload(vec![1, 2, 3], Arc::clone(&live)));
        tessera_core::schedule(tmp.write(), |p| {
            p.0.push(4);
            Ok(())
        })
        .unwrap();
        tessera_core::schedule((tmp.read(), out.overwrite()), |(p, o)| {
            *o = p.0.iter().sum();
            Ok(())
        })
        .unwrap();
        // `tmp` is dropped here, with both tasks possibly still pending.
    }
    assert_eq!(out.get().unwrap(), 10);
    assert_eq!(
        live.load(Ordering::Acquire),
        0,
        "the storage was released once done"
    );
}

#[test]
fn duplicate_is_a_scheduled_copy_onto_a_new_timeline() {
    let a = Async::new(vec![1, 2, 3]);
    let b = a.duplicate().unwrap();
    assert_ne!(a.record_id(), b.record_id());
    tessera_core::schedule(a.write(), |a| {
        a.push(4);
        Ok(())
    })
    .unwrap();
    assert_eq!(b.get().unwrap(), vec![1, 2, 3]);
    assert_eq!(a.get().unwrap(), vec![1, 2, 3, 4]);
}

#[test]
fn a_host_wait_inside_a_task_is_refused() {
    let a = Async::new(1_u8);
    let result = Arc::new(std::sync::Mutex::new(None));
    let a2 = Async::new(0_u8);
    let view = a.view();
    let r = Arc::clone(&result);
    tessera_core::schedule(a2.write(), move |_| {
        *r.lock().unwrap() = Some(view.wait());
        Ok(())
    })
    .unwrap();
    a2.wait().unwrap();
    assert!(matches!(
        result.lock().unwrap().take(),
        Some(Err(Error::WaitInsideTask { .. }))
    ));
}

#[test]
fn a_host_wait_waits_for_exactly_its_last_write() {
    // `b` depends on nothing pending, so waiting for it must not wait for `a`'s blocked
    // writer (which is released only after `b` was read).
    let rt = Runtime::new(2).unwrap();
    let gate = Arc::new(AtomicUsize::new(0));
    let a = Async::new(0_u64);
    let b = Async::new(7_u64);
    let g = Arc::clone(&gate);
    rt.schedule(a.write(), move |a| {
        *a = u64::from(spin_until(&g, 1));
        Ok(())
    })
    .unwrap();
    assert_eq!(b.get().unwrap(), 7);
    gate.store(1, Ordering::Release);
    assert_eq!(a.get().unwrap(), 1);
}

#[test]
fn host_update_through_with_mut_is_ordered() {
    let a = Async::new(1_i64);
    tessera_core::schedule(a.write(), |a| {
        *a *= 10;
        Ok(())
    })
    .unwrap();
    a.alias().with_mut(|a| *a += 1).unwrap();
    tessera_core::schedule(a.write(), |a| {
        *a *= 2;
        Ok(())
    })
    .unwrap();
    assert_eq!(a.get().unwrap(), 22);
    assert!(Mode::Update.reads() && Mode::Update.writes() && !Mode::Overwrite.reads());
}

#[test]
fn a_host_wait_on_a_worker_thread_is_refused_instead_of_parking_the_worker() {
    let rt = Runtime::new(1).unwrap();
    let a = Async::new(1_u32);
    let result = rt.install(|| {
        rt.schedule(a.write(), |a| {
            *a += 1;
            Ok(())
        })
        .unwrap();
        a.get()
    });
    assert!(
        matches!(result, Err(Error::WaitOnWorker { .. })),
        "got {result:?}"
    );
    assert_eq!(a.get().unwrap(), 2, "the task still ran");
}

#[test]
fn a_panicking_host_write_poisons_what_it_wrote() {
    let a = Async::new(vec![1, 2, 3]);
    let alias = a.alias();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        alias
            .with_mut(|v| {
                v.push(4);
                panic!("host closure failed halfway");
            })
            .ok()
    }));
    assert!(caught.is_err());
    match a.get() {
        Err(Error::Poisoned { origin }) => {
            assert!(
                matches!(&origin.cause, tessera_core::FailureCause::Panic(m) if m.contains("halfway"))
            );
        }
        other => panic!("expected the half-written value to be poisoned, got {other:?}"),
    }
    a.set(vec![9]);
    assert_eq!(
        a.get().unwrap(),
        vec![9],
        "an overwrite starts a clean epoch"
    );
}

#[test]
fn a_composite_set_keeps_each_record_once() {
    let a = Async::new(0_u8);
    let r = a.alias().hazards().records().next().unwrap();
    let set = tessera_core::HazardSet::composite([r.clone(), r]);
    assert_eq!(set.len(), 1);
}

#[test]
fn an_eager_task_runs_here_when_ready_and_on_a_worker_when_it_must_wait() {
    let rt = Runtime::new(2).unwrap();
    let caller = std::thread::current().id();
    let a = Async::new(1_u64);
    let on_caller = Async::new(false);
    rt.schedule_eager_named(
        "ready",
        (a.write(), on_caller.overwrite()),
        move |(a, h)| {
            *a *= 10;
            *h = std::thread::current().id() == caller;
            Ok(())
        },
    )
    .unwrap();
    // Ran before the call returned: the value is final without any wait.
    assert!(on_caller.get().unwrap());
    assert_eq!(a.get().unwrap(), 10);

    // Behind a writer that is held back, an eager task cannot run here: the call returns,
    // the task runs later on a worker, after its predecessor, and its own successor (an
    // ordinary task) follows it.
    let gate = Arc::new(AtomicUsize::new(0));
    let g = Arc::clone(&gate);
    rt.schedule(a.write(), move |a| {
        spin_until(&g, 1);
        *a += 1;
        Ok(())
    })
    .unwrap();
    let on_caller = Async::new(true);
    rt.schedule_eager_named(
        "waits",
        (a.write(), on_caller.overwrite()),
        move |(a, h)| {
            *a *= 3;
            *h = std::thread::current().id() == caller;
            Ok(())
        },
    )
    .unwrap();
    let b = Async::new(0_u64);
    rt.schedule((a.read(), b.overwrite()), |(a, b)| {
        *b = *a + 1;
        Ok(())
    })
    .unwrap();
    gate.store(1, Ordering::Release);
    assert_eq!(b.get().unwrap(), 34);
    assert!(!on_caller.get().unwrap(), "it had to wait: a worker ran it");
}

#[test]
fn an_eager_task_is_a_task_for_waits_and_failures() {
    let rt = Runtime::new(1).unwrap();
    let a = Async::new(1_u8);
    let b = Async::new(0_u8);
    let view = a.view();
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s = Arc::clone(&seen);
    // A host wait inside an eager kernel is refused, as in any task, even on the host thread.
    rt.schedule_eager_named("waits", b.write(), move |_| {
        *s.lock().unwrap() = Some(view.wait());
        Ok(())
    })
    .unwrap();
    assert!(matches!(
        seen.lock().unwrap().take(),
        Some(Err(Error::WaitInsideTask { .. }))
    ));
    // A failing eager kernel poisons what it was to write, and a reader after it skips.
    rt.schedule_eager_named("fails", b.write(), |b| {
        *b = 7;
        Err("no".into())
    })
    .unwrap();
    let c = Async::new(0_u8);
    rt.schedule_eager_named("skipped", (b.read(), c.overwrite()), |(_, c)| {
        *c = 1;
        Ok(())
    })
    .unwrap();
    assert!(matches!(c.get(), Err(Error::Poisoned { .. })));
}

#[test]
fn a_host_wait_runs_its_queued_sequential_predecessor_and_leaves_other_tasks_to_workers() {
    // One worker, held by a task that waits for a gate: nothing else can start on a worker.
    let rt = Runtime::new(1).unwrap();
    let caller = std::thread::current().id();
    let gate = Arc::new(AtomicUsize::new(0));
    let g = Arc::clone(&gate);
    let held = Async::new(0_u8);
    rt.schedule(held.write(), move |h| {
        spin_until(&g, 1);
        *h = 1;
        Ok(())
    })
    .unwrap();
    // A sequential task that waits for nothing is queued behind it; the host that waits for
    // its result runs it (the worker cannot), and the wait returns while the gate is shut.
    let a = Async::new(20_u64);
    let on_caller = Async::new(false);
    rt.schedule_sequential_named(
        "double",
        (a.write(), on_caller.overwrite()),
        move |(a, h)| {
            *a = *a * 2 + 2;
            *h = std::thread::current().id() == caller;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(a.get().unwrap(), 42);
    assert!(on_caller.get().unwrap(), "the waiting host ran it");
    assert_eq!(gate.load(Ordering::Acquire), 0, "while the worker was held");
    // A failing sequential kernel run by the host poisons what it was to write, as on a
    // worker.
    rt.schedule_sequential_named("fails", a.write(), |a| {
        *a = 0;
        Err("no".into())
    })
    .unwrap();
    assert!(matches!(a.get(), Err(Error::Poisoned { .. })));
    // An ordinary task is never run by the host: it waits for the worker.
    let b = Async::new(0_u8);
    let on_caller = Async::new(true);
    rt.schedule((b.overwrite(), on_caller.overwrite()), move |(b, h)| {
        *b = 1;
        *h = std::thread::current().id() == caller;
        Ok(())
    })
    .unwrap();
    gate.store(1, Ordering::Release);
    assert_eq!(b.get().unwrap(), 1);
    assert!(!on_caller.get().unwrap(), "a worker ran it");
    assert_eq!(held.get().unwrap(), 1);
}

/// Schedules an eager task on `rt` whose kernel schedules the next one, `left` levels in all
/// (each on a fresh value, so each is ready at once), and checks in every kernel that it
/// runs on `caller`'s thread and inside no other kernel (`inside` counts the kernels running).
fn nest_eager(
    rt: Runtime,
    levels: usize,
    left: usize,
    caller: std::thread::ThreadId,
    inside: Arc<AtomicUsize>,
    ran: Arc<AtomicUsize>,
) {
    let value = Async::new(0_u8);
    let runtime = rt.clone();
    rt.schedule_eager_named("nested", value.overwrite(), move |v| {
        assert_eq!(
            inside.fetch_add(1, Ordering::Relaxed),
            0,
            "nested on the stack"
        );
        assert_eq!(std::thread::current().id(), caller);
        *v = 1;
        assert_eq!(
            ran.fetch_add(1, Ordering::Relaxed),
            levels - left,
            "out of order"
        );
        if left > 1 {
            nest_eager(runtime, levels, left - 1, caller, Arc::clone(&inside), ran);
        }
        inside.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
}

// Runs in every `cargo test` (3 s in a debug build); far too slow to interpret under Miri.
#[test]
#[cfg_attr(miri, ignore)]
fn a_million_nested_eager_schedules_run_on_the_host_without_nesting() {
    // Each level used to run inside the kernel that scheduled it: 10^5 levels overflowed the
    // host's stack and aborted the process.
    let rt = Runtime::new(1).unwrap();
    let levels = 1_000_000;
    let inside = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let caller = std::thread::current().id();
    nest_eager(
        rt.clone(),
        levels,
        levels,
        caller,
        Arc::clone(&inside),
        Arc::clone(&ran),
    );
    // Every level ran, here, before the outermost call returned.
    assert_eq!(ran.load(Ordering::Relaxed), levels);
    assert_eq!(inside.load(Ordering::Relaxed), 0);
    // The thread's eager loop has ended: a new eager task runs at once again, before the
    // call returns.
    let after = Async::new(0_u8);
    let r = Arc::clone(&ran);
    rt.schedule_eager_named("after", after.overwrite(), move |a| {
        *a = 2;
        r.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), levels + 1);
    assert_eq!(after.get().unwrap(), 2);
}

#[test]
fn eager_tasks_scheduled_by_an_eager_kernel_run_after_it_in_program_order() {
    let rt = Runtime::new(1).unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = Async::new(0_u32);
    let (o, r) = (Arc::clone(&order), rt.clone());
    let scratch: Vec<Async<u32>> = (0..3).map(|_| Async::new(0)).collect();
    let views: Vec<_> = scratch.iter().map(Async::alias).collect();
    rt.schedule_eager_named("outer", out.overwrite(), move |out| {
        for (k, v) in views.into_iter().enumerate() {
            let o = Arc::clone(&o);
            r.schedule_eager_named("inner", v.write(), move |v| {
                *v = k as u32;
                o.lock().unwrap().push(k + 1);
                Ok(())
            })
            .unwrap();
        }
        // None has run yet: they wait for this kernel to return.
        o.lock().unwrap().push(0);
        *out = 7;
        Ok(())
    })
    .unwrap();
    // All ran, on this thread, before the outermost call returned, in the order scheduled.
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
    let values: Vec<u32> = scratch.iter().map(|s| s.get().unwrap()).collect();
    assert_eq!(values, [0, 1, 2]);
    assert_eq!(out.get().unwrap(), 7);
}
