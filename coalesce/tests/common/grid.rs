//! The structure the block-set and sector-view tests share (included by `#[path]` in the two
//! test files that use it, so no other test binary carries an unused helper).

use std::sync::Arc;
use tessera_blocks::{BlockStructure, Direction, Leg, U1};

/// Two codomain and two domain legs of U(1) charges: several sectors, charge 1 with a 2 x 2
/// grid of blocks (two codomain tuples, two domain tuples).
pub(crate) fn structure() -> Arc<BlockStructure<U1>> {
    let a = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)]).unwrap();
    let b = Leg::new(Direction::In, [(U1(0), 1), (U1(1), 2)]).unwrap();
    let c = Leg::new(Direction::Out, [(U1(0), 2), (U1(1), 3)]).unwrap();
    let d = Leg::new(Direction::Out, [(U1(0), 1), (U1(1), 1)]).unwrap();
    Arc::new(BlockStructure::new([a, b], [c, d], U1(0)).unwrap())
}
