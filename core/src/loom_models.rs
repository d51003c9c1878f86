//! Loom models of the hazard record, of composite enrollment, of reader gates, of taking
//! a queued node and of a deferred task completed by another thread than the one that
//! started it.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p tessera-core --release --lib loom`.
//! Under loom a run holds one read directly, so the second read of a run joins its gate:
//! every model with two reads of a record since a write goes through a gate.
//! Each model enrolls host-style nodes (woken through a latch) in program order on one
//! thread, then lets loom threads run them in every interleaving it explores. The accesses
//! check exclusion with counters; loom itself reports any deadlock.

use crate::access::AccessList;
use crate::enroll::enroll;
use crate::error::TaskId;
use crate::hazard::{HazardRecord, HazardSet, Mode, RecordTable};
use crate::primitive::{Arc, Latch};
use crate::task::{TaskNode, Work};
use loom::sync::atomic::{AtomicUsize, Ordering};

/// Exclusion counters of one record: active readers and writers, and the value's version.
#[derive(Default)]
struct Probe {
    readers: AtomicUsize,
    writers: AtomicUsize,
    version: AtomicUsize,
}

struct Pending {
    node: Arc<TaskNode>,
    latch: std::sync::Arc<Latch>,
}

fn enroll_wake(accesses: &[(&HazardRecord, Mode)]) -> Pending {
    let mut list = AccessList::new();
    for (record, mode) in accesses {
        list.push(record, *mode);
    }
    enroll_list(list)
}

fn enroll_sets(accesses: &[(&HazardSet, Mode)]) -> Pending {
    let mut list = AccessList::new();
    for (set, mode) in accesses {
        list.push_set(set, *mode);
    }
    enroll_list(list)
}

fn enroll_list(mut list: AccessList) -> Pending {
    list.normalize().expect("models declare no aliasing");
    let latch = std::sync::Arc::new(Latch::new());
    let node = TaskNode::new(TaskId(0));
    enroll(&node, &list);
    node.attach(Work::Wake(std::sync::Arc::clone(&latch)));
    if let Some(ready) = TaskNode::finish_enrollment(Arc::clone(&node)) {
        wake(&ready);
    }
    Pending { node, latch }
}

fn wake(node: &TaskNode) {
    match node.take_work() {
        Some(Work::Wake(latch)) => latch.set(),
        _ => panic!("models only enroll wake nodes"),
    }
}

/// Waits for the grant, runs `body`, completes the node and wakes what it made ready.
fn run(p: Pending, body: impl FnOnce()) {
    p.latch.wait();
    body();
    let mut ready = Vec::new();
    p.node.complete(&mut ready);
    for n in ready {
        wake(&n);
    }
}

fn read(probe: &Probe, expect_version: usize) {
    probe.readers.fetch_add(1, Ordering::AcqRel);
    assert_eq!(
        probe.writers.load(Ordering::Acquire),
        0,
        "a read overlapped a write"
    );
    assert_eq!(
        probe.version.load(Ordering::Acquire),
        expect_version,
        "a read saw another epoch than the last write enrolled before it"
    );
    probe.readers.fetch_sub(1, Ordering::AcqRel);
}

fn write(probe: &Probe, new_version: usize) {
    assert_eq!(
        probe.writers.fetch_add(1, Ordering::AcqRel),
        0,
        "two writes overlapped"
    );
    assert_eq!(
        probe.readers.load(Ordering::Acquire),
        0,
        "a write overlapped a read"
    );
    assert_eq!(
        probe.version.load(Ordering::Acquire),
        new_version - 1,
        "writes out of order"
    );
    probe.version.store(new_version, Ordering::Release);
    probe.writers.fetch_sub(1, Ordering::AcqRel);
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

#[test]
fn loom_record_write_read_read_write() {
    model(|| {
        let r = HazardRecord::new();
        let probe = Arc::new(Probe::default());
        // Program order, on this thread: W1, R, R, W2.
        let w1 = enroll_wake(&[(&r, Mode::Overwrite)]);
        let ra = enroll_wake(&[(&r, Mode::Read)]);
        let rb = enroll_wake(&[(&r, Mode::Read)]);
        let w2 = enroll_wake(&[(&r, Mode::Update)]);
        let threads: Vec<_> = [(ra, false), (rb, false), (w2, true)]
            .into_iter()
            .map(|(p, is_write)| {
                let probe = Arc::clone(&probe);
                loom::thread::spawn(move || {
                    run(p, || {
                        if is_write {
                            write(&probe, 2)
                        } else {
                            read(&probe, 1)
                        }
                    })
                })
            })
            .collect();
        run(w1, || write(&probe, 1));
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(probe.version.load(Ordering::Acquire), 2);
    });
}

#[test]
fn loom_enrollment_races_completion() {
    // A write completes on another thread while this thread enrolls a read behind it:
    // the read must either find it done or be released by it (never lost).
    model(|| {
        let r = HazardRecord::new();
        let probe = Arc::new(Probe::default());
        let w1 = enroll_wake(&[(&r, Mode::Overwrite)]);
        let p2 = Arc::clone(&probe);
        let t = loom::thread::spawn(move || run(w1, || write(&p2, 1)));
        let rd = enroll_wake(&[(&r, Mode::Read)]);
        run(rd, || read(&probe, 1));
        t.join().unwrap();
    });
}

#[test]
fn loom_composite_enrollments_race_each_other_and_single_block_enrollments() {
    // Two threads enroll composite writes on {a, b} (a coalesced view over two blocks),
    // declared in opposite orders, while this thread enrolls single-block accesses: a read
    // of `a`, then a write of `b`. Every enrollment is atomic, so whatever the interleaving,
    // all four finish (no deadlock), a composite write excludes the single-block accesses of
    // both of its blocks, and the writes of `b` (two composite, one single) never overlap.
    model(|| {
        let a = HazardRecord::new();
        let b = HazardRecord::new();
        let pa = Arc::new(Probe::default());
        let pb = Arc::new(Probe::default());
        let done = Arc::new(AtomicUsize::new(0));
        let spawn_writer = |first: &HazardRecord, second: &HazardRecord| {
            let (first, second) = (first.clone(), second.clone());
            let (pa, pb, done) = (Arc::clone(&pa), Arc::clone(&pb), Arc::clone(&done));
            loom::thread::spawn(move || {
                let p = enroll_wake(&[(&first, Mode::Update), (&second, Mode::Update)]);
                run(p, || {
                    for probe in [&pa, &pb] {
                        assert_eq!(probe.writers.fetch_add(1, Ordering::AcqRel), 0);
                        assert_eq!(probe.readers.load(Ordering::Acquire), 0);
                        probe.version.fetch_add(1, Ordering::AcqRel);
                    }
                    for probe in [&pa, &pb] {
                        probe.writers.fetch_sub(1, Ordering::AcqRel);
                    }
                });
                done.fetch_add(1, Ordering::AcqRel);
            })
        };
        let t1 = spawn_writer(&a, &b);
        let t2 = spawn_writer(&b, &a);
        let rd = enroll_wake(&[(&a, Mode::Read)]);
        let wr = enroll_wake(&[(&b, Mode::Update)]);
        run(rd, || {
            pa.readers.fetch_add(1, Ordering::AcqRel);
            assert_eq!(
                pa.writers.load(Ordering::Acquire),
                0,
                "a block read overlapped a composite write"
            );
            pa.readers.fetch_sub(1, Ordering::AcqRel);
        });
        run(wr, || {
            assert_eq!(
                pb.writers.fetch_add(1, Ordering::AcqRel),
                0,
                "a block write overlapped a composite write"
            );
            assert_eq!(pb.readers.load(Ordering::Acquire), 0);
            pb.version.fetch_add(1, Ordering::AcqRel);
            pb.writers.fetch_sub(1, Ordering::AcqRel);
        });
        t1.join().unwrap();
        t2.join().unwrap();
        assert_eq!(done.load(Ordering::Acquire), 2);
        assert_eq!(
            pa.version.load(Ordering::Acquire),
            2,
            "a write of `a` was lost"
        );
        assert_eq!(
            pb.version.load(Ordering::Acquire),
            3,
            "a write of `b` was lost"
        );
    });
}

#[test]
fn loom_overlapping_spans_of_one_table_race_and_split_its_runs() {
    // A table of three records (an array's blocks). Two threads enroll writes of the
    // overlapping spans 0..2 and 1..3 (coalesced views over neighbouring blocks), while this
    // thread reads record 1 alone and then writes the whole table. Each enrollment splits
    // and merges the table's runs; whatever the interleaving, the writes of record 1 never
    // overlap each other or the read, and none is lost.
    model(|| {
        let table = RecordTable::new(3);
        let probe = Arc::new(Probe::default());
        let spawn_writer = |span: std::ops::Range<usize>| {
            let set = HazardSet::span(&table, span);
            let probe = Arc::clone(&probe);
            loom::thread::spawn(move || {
                let p = enroll_sets(&[(&set, Mode::Update)]);
                run(p, || {
                    assert_eq!(probe.writers.fetch_add(1, Ordering::AcqRel), 0);
                    assert_eq!(probe.readers.load(Ordering::Acquire), 0);
                    probe.version.fetch_add(1, Ordering::AcqRel);
                    probe.writers.fetch_sub(1, Ordering::AcqRel);
                });
            })
        };
        let t1 = spawn_writer(0..2);
        let t2 = spawn_writer(1..3);
        let rd = enroll_wake(&[(&HazardRecord::of(&table, 1), Mode::Read)]);
        let all = HazardSet::span(&table, 0..3);
        let wr = enroll_sets(&[(&all, Mode::Overwrite)]);
        run(rd, || {
            probe.readers.fetch_add(1, Ordering::AcqRel);
            assert_eq!(
                probe.writers.load(Ordering::Acquire),
                0,
                "a read overlapped a write"
            );
            probe.readers.fetch_sub(1, Ordering::AcqRel);
        });
        run(wr, || {
            assert_eq!(probe.writers.fetch_add(1, Ordering::AcqRel), 0);
            assert_eq!(probe.readers.load(Ordering::Acquire), 0);
            probe.version.fetch_add(1, Ordering::AcqRel);
            probe.writers.fetch_sub(1, Ordering::AcqRel);
        });
        t1.join().unwrap();
        t2.join().unwrap();
        assert_eq!(probe.version.load(Ordering::Acquire), 3, "a write was lost");
    });
}

#[test]
fn loom_a_queued_node_is_taken_once_by_its_worker_or_a_waiting_host() {
    // A ready node's work is marked queued by the thread that made it ready, which then pops
    // it as a worker would; a host that waits for the node tries to claim it meanwhile. Just
    // one of them takes it, and the host never takes it before it is queued.
    model(|| {
        let node = TaskNode::new(TaskId(0));
        node.attach(Work::Wake(std::sync::Arc::new(Latch::new())));
        let taken = Arc::new(AtomicUsize::new(0));
        // Set before the node is queued: a host that took the work must see it.
        let ready = Arc::new(AtomicUsize::new(0));
        let (n, t, r) = (Arc::clone(&node), Arc::clone(&taken), Arc::clone(&ready));
        let host = loom::thread::spawn(move || {
            if n.take_queued(|_| true).is_some() {
                assert_eq!(r.load(Ordering::Relaxed), 1, "taken before it was queued");
                t.fetch_add(1, Ordering::AcqRel);
            }
        });
        ready.store(1, Ordering::Relaxed);
        assert!(node.queue_or_take(|_| true).is_none(), "queued, not taken");
        if node.take_queued(|_| true).is_some() {
            taken.fetch_add(1, Ordering::AcqRel);
        }
        host.join().unwrap();
        assert_eq!(taken.load(Ordering::Acquire), 1);
    });
}

#[test]
fn loom_a_write_closes_a_gate_while_its_reads_complete() {
    // Two reads of a fresh record (the second joins the run's gate) run on other threads
    // while this thread enrolls a write behind them, which closes the gate: the last read
    // may release the gate before it is closed, while it is closed, or after. The write
    // never overlaps a read and always runs (the gate completes exactly once).
    model(|| {
        let r = HazardRecord::new();
        let probe = Arc::new(Probe::default());
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let p = enroll_wake(&[(&r, Mode::Read)]);
                let probe = Arc::clone(&probe);
                loom::thread::spawn(move || run(p, || read(&probe, 0)))
            })
            .collect();
        let w = enroll_wake(&[(&r, Mode::Overwrite)]);
        run(w, || write(&probe, 1));
        for t in readers {
            t.join().unwrap();
        }
        assert_eq!(probe.version.load(Ordering::Acquire), 1);
    });
}

#[test]
fn loom_splitting_a_run_hands_its_gate_to_both_halves() {
    // Two reads of a whole table of two records (the second joins the gate), then a write of
    // record 1 alone (it splits the run: each half gets a gate waiting for the old one) and
    // a write of record 0 alone. The reads run on other threads meanwhile. Each write waits
    // for both reads, and neither write waits for the other.
    model(|| {
        let table = RecordTable::new(2);
        let all = HazardSet::span(&table, 0..2);
        let probes = Arc::new([Probe::default(), Probe::default()]);
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let p = enroll_sets(&[(&all, Mode::Read)]);
                let probes = Arc::clone(&probes);
                loom::thread::spawn(move || {
                    run(p, || {
                        for probe in probes.iter() {
                            probe.readers.fetch_add(1, Ordering::AcqRel);
                        }
                        for probe in probes.iter() {
                            assert_eq!(probe.writers.load(Ordering::Acquire), 0);
                            probe.readers.fetch_sub(1, Ordering::AcqRel);
                        }
                    })
                })
            })
            .collect();
        let w1 = enroll_wake(&[(&HazardRecord::of(&table, 1), Mode::Overwrite)]);
        let w0 = enroll_wake(&[(&HazardRecord::of(&table, 0), Mode::Overwrite)]);
        let p1 = Arc::clone(&probes);
        let t1 = loom::thread::spawn(move || run(w1, || write(&p1[1], 1)));
        run(w0, || write(&probes[0], 1));
        t1.join().unwrap();
        for t in readers {
            t.join().unwrap();
        }
    });
}

#[test]
fn loom_a_deferred_write_started_on_one_thread_completes_on_another() {
    // A deferred task: its start runs on one thread (the worker that found it ready) and
    // hands the node over; another thread (a communication thread) does the write and
    // completes it, while this thread enrolls a read and a write behind it. The read must
    // see the deferred write, the later write must follow the read, and no release is lost.
    model(|| {
        let r = HazardRecord::new();
        let probe = Arc::new(Probe::default());
        let deferred = enroll_wake(&[(&r, Mode::Overwrite)]);
        let slot: Arc<loom::sync::Mutex<Option<Arc<TaskNode>>>> =
            Arc::new(loom::sync::Mutex::new(None));
        let (s1, s2) = (Arc::clone(&slot), Arc::clone(&slot));
        let starter = loom::thread::spawn(move || {
            deferred.latch.wait();
            *s1.lock().unwrap() = Some(deferred.node);
        });
        let p = Arc::clone(&probe);
        let finisher = loom::thread::spawn(move || {
            let node = loop {
                if let Some(node) = s2.lock().unwrap().take() {
                    break node;
                }
                loom::thread::yield_now();
            };
            write(&p, 1);
            let mut ready = Vec::new();
            node.complete(&mut ready);
            for n in ready {
                wake(&n);
            }
        });
        let rd = enroll_wake(&[(&r, Mode::Read)]);
        let w2 = enroll_wake(&[(&r, Mode::Update)]);
        let p = Arc::clone(&probe);
        let later = loom::thread::spawn(move || run(w2, || write(&p, 2)));
        run(rd, || read(&probe, 1));
        for t in [starter, finisher, later] {
            t.join().unwrap();
        }
        assert_eq!(probe.version.load(Ordering::Acquire), 2);
    });
}
