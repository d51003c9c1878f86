//! Planning costs what the plan holds: a product of tiled matrices whose sectors are full
//! plans one GEMM per sector from the blocks alone, never forming the block pairs (a
//! product of 1000 x 1000 tiles has 10^9 of them: it asked for 12 GB and aborted).

use std::sync::Arc;
use tessera_blocks::{AsyncArray, BlockStructure, Leg, Trivial, U1};
use tessera_contract::{Contraction, Strategy};

/// A matrix of `tiles x tiles` tiles of `dim x dim`, `In` rows (`flip`: `Out` rows).
fn tiled_matrix(tiles: usize, dim: usize, flip: bool) -> AsyncArray<f64, Trivial> {
    let leg = Leg::<Trivial>::tiling(&vec![dim; tiles]).unwrap();
    let (r, c) = if flip {
        (leg.dual(), leg)
    } else {
        (leg.clone(), leg.dual())
    };
    let s = BlockStructure::new([r], [c], Trivial).unwrap();
    AsyncArray::empty(Arc::new(s))
}

#[test]
fn a_product_of_full_tilings_is_one_sector_gemm_without_block_pairs() {
    for tiles in [10, 300, 1000] {
        let start = std::time::Instant::now();
        let a = tiled_matrix(tiles, 1, false);
        let plan = Contraction::new("ij,jk->ik").unwrap().plan(&a, &a).unwrap();
        assert_eq!(plan.strategy(), Strategy::SectorGemms, "{tiles} tiles");
        assert_eq!((plan.gemms(), plan.tasks()), (1, 1), "{tiles} tiles");
        assert_eq!(plan.flops(), 2 * (tiles as u64).pow(3));
        // The plan's own tables: no pair, no group, whatever the tile count.
        assert!(
            plan.memory_bytes() < 4096,
            "{tiles} tiles: {} bytes",
            plan.memory_bytes()
        );
        assert!(plan.to_string().contains("plan "), "{plan}");
        eprintln!("{tiles} x {tiles} tiles: {:?}", start.elapsed());
    }
    // Permuted operands: the plan holds their block maps, linear in the blocks.
    let (a, b) = (tiled_matrix(300, 2, false), tiled_matrix(300, 2, true));
    let plan = Contraction::new("ji,jk->ik").unwrap().plan(&a, &b).unwrap();
    assert_eq!(plan.strategy(), Strategy::SectorGemms);
    assert!(plan.permutes_operand(0));
    let blocks = 300 * 300;
    assert!(
        plan.memory_bytes() < 24 * blocks,
        "{} bytes for {blocks} blocks",
        plan.memory_bytes()
    );
}

#[test]
fn full_symmetric_sectors_take_the_same_path_and_the_same_answer() {
    // U(1) matrices: every product sector full; the product against the dense one.
    let leg = Leg::new(
        tessera_blocks::Direction::In,
        (-3..=3).map(|q| (U1(q), 3 + q.unsigned_abs() as usize)),
    )
    .unwrap();
    let s = Arc::new(BlockStructure::new([leg.clone()], [leg.dual()], U1(0)).unwrap());
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 1);
    let b = AsyncArray::<f64, U1>::random(s, 2);
    let c = Contraction::new("ij,jk->ik").unwrap();
    let plan = c.plan(&a, &b).unwrap();
    assert_eq!(plan.strategy(), Strategy::SectorGemms);
    assert_eq!(plan.gemms(), 7);
    let got = c.apply(&a, &b).unwrap().to_dense().unwrap();
    let (da, db) = (a.to_dense().unwrap(), b.to_dense().unwrap());
    let n = leg.dim();
    for i in 0..n {
        for k in 0..n {
            let want: f64 = (0..n).map(|j| da[i + n * j] * db[j + n * k]).sum();
            assert!((got[i + n * k] - want).abs() < 1e-12);
        }
    }
}
