//! Block-set views: zero-copy where the blocks are one strided matrix, an explicit gather
//! otherwise, and their misuse errors.

#[path = "common/grid.rs"]
mod grid;

use grid::structure;
use std::sync::Arc;
use tessera_blocks::{AsyncArray, BitVec, BlockStructure, U1};
use tessera_coalesce::{Coalesce, Error};

/// The sector with a 2 x 2 grid of blocks.
fn grid(s: &BlockStructure<U1>) -> usize {
    s.sector_index(&U1(1)).unwrap()
}

/// The value of every element of a matrix view, column by column.
fn columns(m: faer::MatRef<'_, f64>) -> Vec<Vec<f64>> {
    (0..m.ncols())
        .map(|j| (0..m.nrows()).map(|i| m[(i, j)]).collect())
        .collect()
}

#[test]
fn a_run_of_block_columns_is_a_zero_copy_view() {
    let s = structure();
    let c = grid(&s);
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 5);
    let whole = a.sector(c).unwrap().with(columns).unwrap();
    let ids: Vec<usize> = s.sectors()[c].blocks().collect();
    assert_eq!(ids.len(), 4);
    // The whole sector, in any order of ids.
    let mut shuffled = ids.clone();
    shuffled.reverse();
    let all = a.blocks_view(&shuffled).unwrap();
    assert_eq!(all.with(columns).unwrap(), whole);
    assert_eq!(all.hazards().len(), 4);
    // The blocks of one column range: a run of full columns of the sector matrix.
    let first_cols = s.block(ids[0]).unwrap().cols();
    let strip: Vec<usize> = ids
        .iter()
        .copied()
        .filter(|&id| s.block(id).unwrap().cols() == first_cols)
        .collect();
    assert_eq!(strip.len(), 2);
    let view = a.blocks_view(&strip).unwrap();
    let got = view.with(columns).unwrap();
    assert_eq!(got, whole[first_cols.clone()].to_vec());
    // The view's buffer is the array's allocation (no copy): a write through it is a write
    // of exactly those blocks.
    let before = a.to_blocks().unwrap();
    view.with_mut(|mut m| m.fill(-1.0)).unwrap();
    let after = a.to_blocks().unwrap();
    for id in 0..a.num_blocks() {
        if strip.contains(&id) {
            assert!(after[id].iter().all(|&v| v == -1.0), "block {id}");
        } else {
            assert_eq!(after[id], before[id], "block {id}");
        }
    }
    // A single block of a dense sector is a view too, with its one record.
    let one = a.blocks_view(&[ids[3]]).unwrap();
    assert!(one.hazards().overlaps(a.block(ids[3]).unwrap().hazards()));
    assert_eq!(one.hazards().len(), 1);
}

#[test]
fn misuse_gives_typed_errors_and_writes_nothing() {
    let s = structure();
    let c = grid(&s);
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 6);
    let before = a.to_blocks().unwrap();
    let ids: Vec<usize> = s.sectors()[c].blocks().collect();
    let (b0, b3) = (ids[0], ids[3]);
    assert_eq!(a.blocks_view(&[]).unwrap_err(), Error::EmptyBlockSet);
    assert_eq!(a.gather_blocks(&[]).unwrap_err(), Error::EmptyBlockSet);
    assert_eq!(
        a.blocks_view(&[b0, b0]).unwrap_err(),
        Error::RepeatedBlock { block: b0 }
    );
    let n = a.num_blocks();
    assert_eq!(
        a.gather_blocks(&[b0, n]).unwrap_err(),
        Error::Blocks(tessera_blocks::Error::UnknownBlock {
            block: n,
            blocks: n
        })
    );
    let other = (0..n)
        .find(|&id| s.block(id).unwrap().coupled() != c)
        .unwrap();
    let other_sector = s.block(other).unwrap().coupled();
    assert_eq!(
        a.gather_blocks(&[b0, other]).unwrap_err(),
        Error::MixedSectors {
            first: b0,
            first_sector: c,
            other,
            other_sector
        }
    );
    // Diagonal blocks of the grid leave holes: not one matrix.
    let err = a.blocks_view(&[b0, b3]).unwrap_err();
    assert!(matches!(err, Error::NotOneMatrix { .. }), "{err}");
    assert!(err.to_string().contains("gather_blocks"));
    assert_eq!(a.to_blocks().unwrap(), before);
}

#[test]
fn a_gather_copies_into_a_temporary_and_a_scatter_writes_back_in_order() {
    let s = structure();
    let c = grid(&s);
    let ids: Vec<usize> = s.sectors()[c].blocks().collect();
    // Mask out one block of the grid: the sector becomes packed, which only a gather takes.
    let mut mask: BitVec = std::iter::repeat_n(true, s.num_allowed()).collect();
    mask.set(s.block(ids[1]).unwrap().allowed_index(), false);
    let m = Arc::new(s.with_present(&mask).unwrap());
    let c = m.sector_index(&U1(1)).unwrap();
    assert!(!m.sectors()[c].is_dense());
    let kept: Vec<usize> = m.sectors()[c].blocks().collect();
    assert_eq!(kept.len(), 3);
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&m), 8);
    let err = a.blocks_view(&kept).unwrap_err();
    assert!(matches!(err, Error::NotOneMatrix { .. }), "{err}");
    // An earlier block write is seen by the gather.
    a.block(kept[0])
        .unwrap()
        .with_mut(|mut v| v.update(|_, _| 7.0))
        .unwrap();
    let blocks = a.to_blocks().unwrap();
    tessera_core::schedule(a.block(kept[2]).unwrap().write(), |mut v| {
        v.update(|_, x| x + 100.0);
        Ok(())
    })
    .unwrap();
    let g = a.gather_blocks(&kept).unwrap();
    assert_eq!(g.num_blocks(), 3);
    let sector = &m.sectors()[c];
    let temp = g.matrix().get().unwrap();
    assert_eq!((temp.nrows(), temp.ncols()), (sector.rows(), sector.cols()));
    let mut covered = vec![vec![false; sector.cols()]; sector.rows()];
    for &id in &kept {
        let block = m.block(id).unwrap();
        let (rows, cols) = (block.rows(), block.cols());
        for (k, &v) in blocks[id].iter().enumerate() {
            let (i, j) = (rows.start + k % rows.len(), cols.start + k / rows.len());
            let want = if id == kept[2] { v + 100.0 } else { v };
            assert_eq!(temp[(i, j)], want, "block {id}, element {k}");
            covered[i][j] = true;
        }
    }
    for i in 0..sector.rows() {
        for j in 0..sector.cols() {
            if !covered[i][j] {
                assert_eq!(temp[(i, j)], 0.0, "a hole of the packed sector");
            }
        }
    }
    // Work on the temporary, then scatter: later block reads see it.
    tessera_core::schedule(g.matrix().write(), |t| {
        for j in 0..t.ncols() {
            for i in 0..t.nrows() {
                t[(i, j)] = (i + 10 * j) as f64;
            }
        }
        Ok(())
    })
    .unwrap();
    g.scatter().unwrap();
    let after = a.to_blocks().unwrap();
    for &id in &kept {
        let block = m.block(id).unwrap();
        let (rows, cols) = (block.rows(), block.cols());
        for (k, &v) in after[id].iter().enumerate() {
            let (i, j) = (rows.start + k % rows.len(), cols.start + k / rows.len());
            assert_eq!(v, (i + 10 * j) as f64, "block {id}, element {k}");
        }
    }
    for id in (0..a.num_blocks()).filter(|id| !kept.contains(id)) {
        assert_eq!(after[id], blocks[id], "block {id} outside the set");
    }
}

#[test]
fn updates_through_overlapping_views_keep_program_order() {
    // v <- 3 v + k does not commute: any two of these updates that ran out of program order,
    // or at the same time, would change the result. Each goes through another kind of view
    // of overlapping storage: the whole sector, a strip of its columns, one block, a gather.
    let rt = tessera_core::Runtime::new(2).unwrap();
    let s = structure();
    let c = grid(&s);
    let ids: Vec<usize> = s.sectors()[c].blocks().collect();
    let first_cols = s.block(ids[0]).unwrap().cols();
    let strip: Vec<usize> = ids
        .iter()
        .copied()
        .filter(|&id| s.block(id).unwrap().cols() == first_cols)
        .collect();
    let a = AsyncArray::<f64, U1>::zeros(Arc::clone(&s));
    let step = |k: usize, v: f64| 3.0 * v + k as f64;
    let mut want: Vec<Vec<f64>> = a.to_blocks().unwrap();
    rt.enter(|| {
        for k in 0..40 {
            let touched: Vec<usize> = match k % 4 {
                0 => {
                    tessera_core::schedule(a.sector(c).unwrap().write(), move |mut m| {
                        let (r, n) = (m.nrows(), m.ncols());
                        for j in 0..n {
                            for i in 0..r {
                                m[(i, j)] = step(k, m[(i, j)]);
                            }
                        }
                        Ok(())
                    })
                    .unwrap();
                    ids.clone()
                }
                1 => {
                    tessera_core::schedule(a.blocks_view(&strip).unwrap().write(), move |mut m| {
                        let (r, n) = (m.nrows(), m.ncols());
                        for j in 0..n {
                            for i in 0..r {
                                m[(i, j)] = step(k, m[(i, j)]);
                            }
                        }
                        Ok(())
                    })
                    .unwrap();
                    strip.clone()
                }
                2 => {
                    let id = ids[k % ids.len()];
                    tessera_core::schedule(a.block(id).unwrap().write(), move |mut v| {
                        v.update(|_, x| step(k, x));
                        Ok(())
                    })
                    .unwrap();
                    vec![id]
                }
                _ => {
                    let set = [ids[0], ids[3]];
                    let g = a.gather_blocks(&set).unwrap();
                    tessera_core::schedule(g.matrix().write(), move |m| {
                        for j in 0..m.ncols() {
                            for i in 0..m.nrows() {
                                m[(i, j)] = step(k, m[(i, j)]);
                            }
                        }
                        Ok(())
                    })
                    .unwrap();
                    g.scatter().unwrap();
                    set.to_vec()
                }
            };
            for id in touched {
                want[id].iter_mut().for_each(|v| *v = step(k, *v));
            }
        }
    });
    assert_eq!(a.to_blocks().unwrap(), want);
}
