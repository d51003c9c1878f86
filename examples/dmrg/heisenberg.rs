//! The open spin-1/2 Heisenberg chain with U(1) (Sz) symmetry as an MPO and the Néel state
//! as an MPS, in the conventions of `tessera::mps` (the engine, `tessera::mps::dmrg`, does
//! the rest).
//!
//! Owns: the model, written by hand as a reference independent of the MPO builder
//! (`tessera::mps::mpo`, which the driver's `--model heisenberg` uses); `tests/dmrg.rs`
//! runs the engine on it against exact diagonalisation.
//! Invariant: [`mpo`] is `H = J sum_i S_i . S_{i+1}` with `J = 1` exactly, on one-dimensional
//! trivial edges, so `<psi|H|psi>` of any MPS is the chain's energy.
//!
//! Conventions. Charges are `2 Sz`: spin down is `U1(-1)`, spin up `U1(1)`, and the physical
//! index runs (down, up). An MPO tensor is `W(a In, o In, i Out, b Out)` with
//! `W[a, o, i, b] = <o|O_ab|i>` (the crate's convention).

use tessera::blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera::mps::{Mpo, Mps};

/// The error type of this module: every layer's errors, boxed.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A result with [`BoxError`].
pub(crate) type Result<T> = std::result::Result<T, BoxError>;

/// MPO bond states, by their dense index on the bulk MPO leg (its segments are charges -2,
/// 0, 0, 0, +2): an `S-` placed, waiting for `S+` (charge -2); nothing placed yet; an `Sz`
/// placed; the term complete; an `S+` placed (charge +2).
const MPO_MINUS: usize = 0;
const MPO_START: usize = 1;
const MPO_SZ: usize = 2;
const MPO_DONE: usize = 3;
const MPO_PLUS: usize = 4;
/// The bulk MPO bond dimension.
pub(crate) const MPO_DIM: usize = 5;

/// The physical leg (`In`): spin down (`U1(-1)`) then spin up (`U1(1)`).
pub(crate) fn physical_leg() -> Result<Leg<U1>> {
    Ok(Leg::new(Direction::In, [(U1(-1), 1), (U1(1), 1)])?)
}

/// The bulk MPO's left bond leg (`In`): charges -2, 0 (three states), +2.
fn mpo_leg() -> Result<Leg<U1>> {
    Ok(Leg::new(
        Direction::In,
        [(U1(-2), 1), (U1(0), 3), (U1(2), 1)],
    )?)
}

/// The MPO tensor that keeps the bond states `rows` on its left leg and `cols` on its right
/// one: all five in the bulk, only "nothing placed" on the left edge, only "term complete"
/// on the right edge (a one-dimensional trivial leg there).
fn tensor(rows: &[usize], cols: &[usize]) -> Result<AsyncArray<f64, U1>> {
    let (p, m) = (physical_leg()?, mpo_leg()?);
    let edge = Leg::new(Direction::In, [(U1(0), 1)])?;
    let a = if rows.len() == MPO_DIM {
        m.clone()
    } else {
        edge.clone()
    };
    let b = if cols.len() == MPO_DIM {
        m.dual()
    } else {
        edge.dual()
    };
    let s = BlockStructure::new([a, p.clone()], [p.dual(), b], U1(0))?;
    // <o|O|i> for (o, i) in (down = 0, up = 1).
    let identity = |o: usize, i: usize| f64::from(u8::from(o == i));
    let sz = |o: usize, i: usize| if o == i { i as f64 - 0.5 } else { 0.0 };
    let splus = |o: usize, i: usize| f64::from(u8::from(o == 1 && i == 0));
    let sminus = |o: usize, i: usize| f64::from(u8::from(o == 0 && i == 1));
    let (nr, nc) = (rows.len(), cols.len());
    let mut dense = vec![0.0; nr * 2 * 2 * nc];
    for (o, i) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let entries = [
            (MPO_START, MPO_START, identity(o, i)),
            (MPO_DONE, MPO_DONE, identity(o, i)),
            (MPO_START, MPO_PLUS, splus(o, i)),
            (MPO_START, MPO_MINUS, sminus(o, i)),
            (MPO_START, MPO_SZ, sz(o, i)),
            (MPO_PLUS, MPO_DONE, 0.5 * sminus(o, i)),
            (MPO_MINUS, MPO_DONE, 0.5 * splus(o, i)),
            (MPO_SZ, MPO_DONE, sz(o, i)),
        ];
        for (a, b, v) in entries {
            let (Some(r), Some(c)) = (
                rows.iter().position(|&x| x == a),
                cols.iter().position(|&x| x == b),
            ) else {
                continue;
            };
            dense[r + nr * (o + 2 * (i + 2 * c))] += v;
        }
    }
    // `from_dense` rejects any nonzero outside the charge-conserving blocks.
    Ok(AsyncArray::from_dense(s, &dense)?)
}

/// The MPO of `H = sum_i S_i . S_{i+1}` on `sites` sites (at least 2): the bulk tensor of
/// bond dimension 5, its first row on site 0 and its last column on the last site.
pub(crate) fn mpo(sites: usize) -> Result<Mpo<U1>> {
    if sites < 2 {
        return Err(format!("the Heisenberg MPO needs at least 2 sites, given {sites}").into());
    }
    let all: Vec<usize> = (0..MPO_DIM).collect();
    let tensors = (0..sites)
        .map(|i| {
            let rows = if i == 0 { &[MPO_START][..] } else { &all };
            let cols = if i == sites - 1 {
                &[MPO_DONE][..]
            } else {
                &all
            };
            tensor(rows, cols)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Mpo::new(tensors)?)
}

/// The Néel product state `up, down, up, ...` (total `2 Sz` is 0 for even `sites`, 1 for
/// odd): bond dimension 1, every tensor both a left and a right isometry.
pub(crate) fn neel(sites: usize) -> Result<Mps<U1>> {
    let p = vec![physical_leg()?; sites];
    let states: Vec<usize> = (0..sites).map(|i| usize::from(i % 2 == 0)).collect();
    Ok(Mps::product_state(&p, &states)?)
}
