//! Process maps: which rank owns each block of a distributed array.
//!
//! Owns: [`ProcessMap`] and its resolution into one owner per block ([`Owners`]).
//! Invariant: an `Owners` has one rank below the job's size per block of the structure it was
//! resolved for, and every rank resolves the same map to the same owners (the rules read the
//! structure alone).

use crate::error::Error;
use std::sync::Arc;
use tessera_blocks::{AbelianSector, BlockStructure};

/// How the blocks of a distributed array are placed on the ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessMap {
    /// Block `i` on rank `i % size`: balances block counts.
    Cyclic,
    /// Every block of coupled sector `s` (a block of the matrix form) on rank `s % size`:
    /// the GEMMs of one sector stay on one rank.
    BySector,
    /// Blocks on a `rows x cols` grid of ranks (`rows * cols` must be the job's size): the
    /// block whose codomain tuple has number `r` and domain tuple number `c` (see
    /// [`Block::tuple_numbers`](tessera_blocks::Block::tuple_numbers)) on rank
    /// `(r % rows) * cols + c % cols`. This is the 2D block-cyclic placement of SUMMA: in a
    /// product of tiled matrices under it, an `A` block travels along one grid row and a
    /// `B` block along one grid column, not to every rank.
    Grid {
        /// Grid rows.
        rows: usize,
        /// Grid columns.
        cols: usize,
    },
    /// The owner of each block, in block order, as the user gives it.
    Explicit(Arc<[usize]>),
}

/// One owner per block: a [`ProcessMap`] resolved for a structure and a job size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owners {
    owner: Arc<[usize]>,
    size: usize,
}

impl Owners {
    /// The rank that owns block `id`.
    pub fn of(&self, id: usize) -> usize {
        self.owner[id]
    }

    /// The job size the owners were resolved for.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The owners, in block order.
    pub fn as_slice(&self) -> &[usize] {
        &self.owner
    }

    /// The blocks `rank` owns, in block order.
    pub fn owned_by(&self, rank: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.owner.len()).filter(move |&i| self.owner[i] == rank)
    }
}

impl ProcessMap {
    /// The squarest [`Grid`](ProcessMap::Grid) of `size` ranks: `rows` the largest divisor
    /// of `size` at most its square root (1 x 1, 1 x 2, 2 x 2, 2 x 3, ...), which makes
    /// SUMMA's volume `(cols - 1)|A| + (rows - 1)|B|` smallest.
    pub fn square_grid(size: usize) -> Self {
        let rows = (1..=size)
            .filter(|r| size.is_multiple_of(*r) && r * r <= size)
            .max()
            .unwrap_or(1);
        ProcessMap::Grid {
            rows,
            cols: size.max(1) / rows,
        }
    }

    /// The owner of every block of `structure` in a job of `size` ranks.
    ///
    /// # Errors
    ///
    /// [`Error::Map`] when an explicit map has not one rank per block, or names a rank
    /// outside the job, or a grid does not have the job's size.
    pub fn resolve<S: AbelianSector>(
        &self,
        structure: &BlockStructure<S>,
        size: usize,
    ) -> Result<Owners, Error> {
        let n = structure.num_blocks();
        let owner: Arc<[usize]> = match self {
            ProcessMap::Cyclic => (0..n).map(|i| i % size).collect(),
            ProcessMap::BySector => structure.blocks().map(|b| b.coupled() % size).collect(),
            &ProcessMap::Grid { rows, cols } => {
                if rows.checked_mul(cols) != Some(size) {
                    return Err(Error::Map {
                        expected: format!("a grid of {size} ranks"),
                        given: format!("a grid of {rows} x {cols}"),
                    });
                }
                structure
                    .blocks()
                    .map(|b| {
                        let (r, c) = b.tuple_numbers();
                        (r % rows) * cols + c % cols
                    })
                    .collect()
            }
            ProcessMap::Explicit(owner) => {
                if owner.len() != n {
                    return Err(Error::Map {
                        expected: format!("one rank per block ({n} blocks)"),
                        given: format!("{} ranks", owner.len()),
                    });
                }
                if let Some((block, &rank)) = owner.iter().enumerate().find(|(_, r)| **r >= size) {
                    return Err(Error::Map {
                        expected: format!("ranks below the job's size {size}"),
                        given: format!("rank {rank} for block {block}"),
                    });
                }
                Arc::clone(owner)
            }
        };
        Ok(Owners { owner, size })
    }
}

#[cfg(test)]
mod tests {
    use super::ProcessMap;

    #[test]
    fn the_square_grid_has_the_largest_rows_up_to_the_square_root() {
        for (size, rows, cols) in [
            (1, 1, 1),
            (2, 1, 2),
            (4, 2, 2),
            (6, 2, 3),
            (7, 1, 7),
            (9, 3, 3),
            (12, 3, 4),
        ] {
            assert_eq!(
                ProcessMap::square_grid(size),
                ProcessMap::Grid { rows, cols },
                "{size}"
            );
        }
    }
}
