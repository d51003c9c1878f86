//! Helpers shared by the coalesce crate's integration tests.

use tessera_blocks::{AsyncArray, U1};

/// The epoch of every block's hazard record, by block id.
pub(crate) fn epochs(a: &AsyncArray<f64, U1>) -> Vec<u64> {
    (0..a.num_blocks())
        .map(|id| {
            a.block(id)
                .unwrap()
                .hazards()
                .records()
                .next()
                .unwrap()
                .epoch()
        })
        .collect()
}
