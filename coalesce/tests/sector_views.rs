//! Coalesced sector views: what they resolve to, how they are ordered against block views of
//! the same array, and their misuse errors.

mod common;
#[path = "common/grid.rs"]
mod grid;

use common::epochs;
use grid::structure;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tessera_blocks::{AsyncArray, BitVec, BlockStructure, Direction, Leg, U1};
use tessera_coalesce::{Coalesce, Error};
use tessera_core::Runtime;

/// Spins until `flag` is set; the bound only turns a hang into a failure, nothing is timed.
fn wait_for(flag: &AtomicBool) -> bool {
    let t = std::time::Instant::now();
    while !flag.load(Ordering::Acquire) && t.elapsed().as_secs() < 30 {
        std::thread::yield_now();
    }
    flag.load(Ordering::Acquire)
}

#[test]
fn a_sector_view_is_its_blocks_laid_out_as_the_sector_matrix() {
    let s = structure();
    assert!(s.sectors().iter().any(|c| c.blocks().len() > 1));
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 3);
    let blocks = a.to_blocks().unwrap();
    for (c, sector) in s.sectors().iter().enumerate() {
        let view = a.sector(c).unwrap();
        assert_eq!(view.hazards().len(), sector.blocks().len());
        let m: Vec<Vec<f64>> = view
            .with(|m| {
                assert_eq!((m.nrows(), m.ncols()), (sector.rows(), sector.cols()));
                (0..m.ncols())
                    .map(|j| (0..m.nrows()).map(|i| m[(i, j)]).collect())
                    .collect()
            })
            .unwrap();
        for id in sector.blocks() {
            let block = s.block(id).unwrap();
            let (rows, cols) = (block.rows(), block.cols());
            for (k, &v) in blocks[id].iter().enumerate() {
                let (i, j) = (k % rows.len(), k / rows.len());
                assert_eq!(
                    m[cols.start + j][rows.start + i],
                    v,
                    "block {id}, element {k}"
                );
            }
        }
    }
}

#[test]
fn a_sector_view_shares_exactly_its_blocks_records() {
    let s = structure();
    let a = AsyncArray::<f64, U1>::zeros(Arc::clone(&s));
    for (c, sector) in s.sectors().iter().enumerate() {
        let view = a.sector(c).unwrap();
        for id in 0..a.num_blocks() {
            let block = a.block(id).unwrap();
            assert_eq!(
                view.hazards().overlaps(block.hazards()),
                sector.blocks().contains(&id),
                "sector {c}, block {id}"
            );
        }
        // Enrolling a write through the view advances every covered record, and only those.
        let before = epochs(&a);
        tessera_core::schedule(view.write(), |_| Ok(())).unwrap();
        for (id, (&epoch, now)) in before.iter().zip(epochs(&a)).enumerate() {
            let want = epoch + u64::from(sector.blocks().contains(&id));
            assert_eq!(now, want, "sector {c}, block {id}");
        }
    }
}

#[test]
fn a_sector_write_is_ordered_after_earlier_block_writes_and_before_later_block_reads() {
    let rt = Runtime::new(2).unwrap();
    let s = structure();
    let c = (0..s.sectors().len())
        .max_by_key(|&c| s.sectors()[c].blocks().len())
        .unwrap();
    let ids = s.sectors()[c].blocks();
    let a = AsyncArray::<f64, U1>::zeros(Arc::clone(&s));
    let gate = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    // Earlier block writes: block `id` becomes `id`; the first one waits for the gate, so an
    // unordered sector write would find it not yet done.
    for id in ids.clone() {
        let (gate, written) = (Arc::clone(&gate), Arc::clone(&written));
        rt.schedule(a.block(id).unwrap().overwrite(), move |mut v| {
            if id == ids.start {
                wait_for(&gate);
            }
            v.update(|_, _| id as f64);
            written.fetch_add(1, Ordering::AcqRel);
            Ok(())
        })
        .unwrap();
    }
    let n = ids.len();
    {
        let (written, violations) = (Arc::clone(&written), Arc::clone(&violations));
        rt.schedule(a.sector(c).unwrap().write(), move |mut m| {
            if written.load(Ordering::Acquire) != n {
                violations.fetch_add(1, Ordering::AcqRel);
            }
            for j in 0..m.ncols() {
                for i in 0..m.nrows() {
                    m[(i, j)] = 10.0 * m[(i, j)] + 1.0;
                }
            }
            Ok(())
        })
        .unwrap();
    }
    // Later block reads see the sector write; copies go to independent values.
    let copies: Vec<_> = ids
        .clone()
        .map(|id| {
            let out = tessera_core::Async::new(Vec::<f64>::new());
            rt.schedule((a.block(id).unwrap().read(), out.overwrite()), |(v, o)| {
                *o = v.to_vec();
                Ok(())
            })
            .unwrap();
            out
        })
        .collect();
    gate.store(true, Ordering::Release);
    for (id, copy) in ids.zip(copies) {
        let got = copy.get().unwrap();
        assert!(!got.is_empty());
        assert!(
            got.iter().all(|&v| v == 10.0 * id as f64 + 1.0),
            "block {id} read {got:?}"
        );
    }
    assert_eq!(
        violations.load(Ordering::Acquire),
        0,
        "sector write ran early"
    );
}

#[test]
fn reads_of_a_sector_and_of_its_blocks_run_together() {
    let rt = Runtime::new(2).unwrap();
    let s = structure();
    let c = (0..s.sectors().len())
        .max_by_key(|&c| s.sectors()[c].blocks().len())
        .unwrap();
    let block = s.sectors()[c].blocks().start;
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 9);
    let started = Arc::new(AtomicUsize::new(0));
    let overlapped = Arc::new(AtomicUsize::new(0));
    // Each read waits until both have started: both complete as overlapped only if the
    // runtime runs the sector read and the block read at the same time.
    let rendezvous = {
        let (started, overlapped) = (Arc::clone(&started), Arc::clone(&overlapped));
        move || {
            started.fetch_add(1, Ordering::AcqRel);
            let t = std::time::Instant::now();
            while started.load(Ordering::Acquire) < 2 && t.elapsed().as_secs() < 30 {
                std::thread::yield_now();
            }
            if started.load(Ordering::Acquire) == 2 {
                overlapped.fetch_add(1, Ordering::AcqRel);
            }
        }
    };
    let r1 = rendezvous.clone();
    let (done1, done2) = (tessera_core::Async::new(()), tessera_core::Async::new(()));
    rt.schedule(
        (a.sector(c).unwrap().read(), done1.overwrite()),
        move |(m, _)| {
            assert!(m.nrows() > 0);
            r1();
            Ok(())
        },
    )
    .unwrap();
    rt.schedule(
        (a.block(block).unwrap().read(), done2.overwrite()),
        move |_| {
            rendezvous();
            Ok(())
        },
    )
    .unwrap();
    done1.wait().unwrap();
    done2.wait().unwrap();
    assert_eq!(
        overlapped.load(Ordering::Acquire),
        2,
        "the reads did not overlap"
    );
}

#[test]
fn misuse_gives_typed_errors() {
    let s = structure();
    let a = AsyncArray::<f64, U1>::zeros(Arc::clone(&s));
    let n = s.sectors().len();
    assert_eq!(
        a.sector(n).unwrap_err(),
        Error::UnknownSector {
            sector: n,
            sectors: n
        }
    );
    // A mask that leaves a hole in a sector's rectangle makes it packed: drop one allowed
    // block after the other until that happens.
    let (masked, packed) = (0..s.num_allowed())
        .find_map(|dropped| {
            let mut mask: BitVec = std::iter::repeat_n(true, s.num_allowed()).collect();
            mask.set(dropped, false);
            let masked = Arc::new(s.with_present(&mask).unwrap());
            let packed = (0..masked.sectors().len()).find(|&k| !masked.sectors()[k].is_dense());
            packed.map(|k| (masked, k))
        })
        .expect("the structure has a sector with a 2 x 2 grid of blocks");
    let m = AsyncArray::<f64, U1>::zeros(Arc::clone(&masked));
    let sector = &masked.sectors()[packed];
    let err = m.sector(packed).unwrap_err();
    assert_eq!(
        err,
        Error::PackedSector {
            sector: packed,
            blocks: sector.blocks().len(),
            rows: sector.rows(),
            cols: sector.cols(),
        }
    );
    assert!(err.to_string().contains("expected a dense sector matrix"));
    // Dense sectors of the masked array still give views.
    for k in (0..masked.sectors().len()).filter(|&k| masked.sectors()[k].is_dense()) {
        m.sector(k).unwrap();
    }
}

#[test]
fn a_multi_sector_view_lists_each_sector_matrix_under_all_their_records() {
    let s = structure();
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 5);
    let n = s.sectors().len();
    assert!(n >= 3);
    // Out of order, with a repeat: the view lists what it was asked for, in that order.
    let cs = [n - 1, 0, n - 1, 1];
    let view = a.sectors(&cs).unwrap();
    let want: Vec<Vec<f64>> = cs
        .iter()
        .map(|&c| {
            a.sector(c)
                .unwrap()
                .with(|m| {
                    (0..m.ncols())
                        .flat_map(|j| (0..m.nrows()).map(move |i| m[(i, j)]))
                        .collect()
                })
                .unwrap()
        })
        .collect();
    let got: Vec<Vec<f64>> = view
        .with(|ms| {
            assert_eq!(ms.len(), cs.len());
            (0..ms.len())
                .map(|k| {
                    let m = ms.get(k);
                    (0..m.ncols())
                        .flat_map(|j| (0..m.nrows()).map(move |i| m[(i, j)]))
                        .collect()
                })
                .collect()
        })
        .unwrap();
    assert_eq!(got, want);
    // Its records are exactly those of the listed sectors' blocks, each once.
    let listed = |id: usize| cs.iter().any(|&c| s.sectors()[c].blocks().contains(&id));
    let covered = (0..a.num_blocks()).filter(|&id| listed(id)).count();
    assert_eq!(view.hazards().len(), covered);
    let before = epochs(&a);
    // A write through it scales every listed matrix once (the repeat resolves twice, so it
    // is scaled twice), and later block reads see it.
    tessera_core::schedule(view.write(), |mut ms| {
        for k in 0..ms.len() {
            let mut m = ms.get_mut(k);
            for j in 0..m.ncols() {
                for i in 0..m.nrows() {
                    m[(i, j)] *= 2.0;
                }
            }
        }
        Ok(())
    })
    .unwrap();
    for (id, (&old, new)) in before.iter().zip(epochs(&a)).enumerate() {
        assert_eq!(new, old + u64::from(listed(id)), "block {id}");
    }
    for (k, &c) in cs.iter().enumerate() {
        let times = if c == n - 1 { 4.0 } else { 2.0 };
        let now: Vec<f64> = a
            .sector(c)
            .unwrap()
            .with(|m| {
                (0..m.ncols())
                    .flat_map(|j| (0..m.nrows()).map(move |i| m[(i, j)]))
                    .collect()
            })
            .unwrap();
        let scaled: Vec<f64> = want[k].iter().map(|v| v * times).collect();
        assert_eq!(now, scaled, "sector {c}");
    }
    // Misuse: the first failing sector's error, and nothing enrolled.
    let before = epochs(&a);
    assert_eq!(
        a.sectors(&[0, n]).unwrap_err(),
        Error::UnknownSector {
            sector: n,
            sectors: n
        }
    );
    assert_eq!(epochs(&a), before);
}

#[test]
fn resolved_sector_batches_give_the_views_sectors_gives() {
    let s = structure();
    let n = s.sectors().len();
    let batches: Vec<Vec<usize>> = vec![(0..n).collect(), vec![n - 1, 0], vec![1, 1]];
    let resolved =
        tessera_coalesce::SectorBatches::new(&s, batches.iter().map(Vec::as_slice)).unwrap();
    assert_eq!(resolved.len(), 3);
    // An equal structure in another allocation is the same structure.
    let copy = Arc::new((*s).clone());
    let a = AsyncArray::<f64, U1>::random(copy, 7);
    let views = a.sector_batches(&resolved).unwrap();
    for (view, cs) in views.iter().zip(&batches) {
        let direct = a.sectors(cs).unwrap();
        assert_eq!(view.hazards().len(), direct.hazards().len());
        assert!(view.hazards().ids().eq(direct.hazards().ids()));
        let got = view
            .with(|m| {
                (0..m.len())
                    .map(|i| m.get(i).to_owned())
                    .collect::<Vec<_>>()
            })
            .unwrap();
        let want = direct
            .with(|m| {
                (0..m.len())
                    .map(|i| m.get(i).to_owned())
                    .collect::<Vec<_>>()
            })
            .unwrap();
        assert_eq!(got, want);
    }
}

#[test]
fn sector_batches_of_another_structure_are_refused_and_nothing_is_written() {
    let s = structure();
    let resolved = tessera_coalesce::SectorBatches::new(&s, [&[0][..]]).unwrap();
    let other = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)]).unwrap();
    let t = Arc::new(BlockStructure::new([other.clone()], [other.dual()], U1(0)).unwrap());
    let b = AsyncArray::<f64, U1>::random(t, 3);
    let before = b.to_dense().unwrap();
    let err = b.sector_batches(&resolved).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Blocks(tessera_blocks::Error::StructureMismatch { .. })
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("expected an operand with structure")
    );
    assert_eq!(b.to_dense().unwrap(), before);
    // A packed or unknown sector is refused when the batches are resolved.
    let n = s.sectors().len();
    assert_eq!(
        tessera_coalesce::SectorBatches::new(&s, [&[n][..]]).unwrap_err(),
        Error::UnknownSector {
            sector: n,
            sectors: n
        }
    );
}
