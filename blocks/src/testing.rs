//! Seeded random structures over the one shared list of sector kinds, for tests (this
//! crate's, and other crates' through the `testing` feature).
//!
//! Owns: the [`Kind`] list and the generators every differential test loops over
//! ([`for_each_kind!`](crate::for_each_kind)), and (with `cuda`) the one rule by which a
//! GPU test skips. Invariant: a generator's output depends only on its seed. Helpers that
//! need no library type are in the dev-only `tessera-testing` crate.

use crate::leg::{Direction, Leg};
use crate::sector::{AbelianSector, FermionParity, Product, Trivial, U1, Z2, Zn};
use crate::structure::BlockStructure;
use bitvec::prelude::BitVec;
use rand::Rng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// A sector kind under test: a pool of labels to draw legs from, and whether its legs are
/// tilings (repeated sectors) rather than symmetric legs.
pub trait Kind: AbelianSector {
    /// Whether legs of this kind are tilings (one sector, several segments).
    const TILED: bool = false;
    /// The labels legs are drawn from.
    fn pool() -> Vec<Self>;
}
impl Kind for Trivial {
    const TILED: bool = true;
    fn pool() -> Vec<Self> {
        vec![Trivial]
    }
}
impl Kind for U1 {
    fn pool() -> Vec<Self> {
        (-2..=2).map(U1).collect()
    }
}
impl Kind for Zn<3> {
    fn pool() -> Vec<Self> {
        (0..3).map(Zn::new).collect()
    }
}
impl Kind for Product<U1, U1> {
    fn pool() -> Vec<Self> {
        (-1..=1)
            .flat_map(|a| (-1..=1).map(move |b| Product(U1(a), U1(b))))
            .collect()
    }
}
impl Kind for Product<U1, Z2> {
    fn pool() -> Vec<Self> {
        (-1..=1)
            .flat_map(|a| (0..2).map(move |b| Product(U1(a), Z2::new(b))))
            .collect()
    }
}
impl Kind for Product<U1, FermionParity> {
    fn pool() -> Vec<Self> {
        (-1..=1)
            .flat_map(|a| [false, true].map(|p| Product(U1(a), FermionParity::new(p))))
            .collect()
    }
}

/// Runs a generic check `check::<S>(seed)` for every sector kind: the one shared list.
#[macro_export]
macro_rules! for_each_kind {
    ($check:ident) => {{
        use $crate::sector::{FermionParity, Product, Trivial, U1, Z2, Zn};
        $check::<Trivial>(0x11);
        $check::<U1>(0x22);
        $check::<Zn<3>>(0x33);
        $check::<Product<U1, U1>>(0x44);
        $check::<Product<U1, Z2>>(0x55);
        $check::<Product<U1, FermionParity>>(0x66);
    }};
}
pub use crate::for_each_kind;

/// A random leg: a direction and up to five segments of dimension 1 to 3 (rarely none).
pub fn random_leg<S: Kind>(rng: &mut ChaCha8Rng) -> Leg<S> {
    let dir = if rng.gen_bool(0.5) {
        Direction::In
    } else {
        Direction::Out
    };
    if rng.gen_ratio(1, 40) {
        return Leg::new(dir, []).unwrap();
    }
    let mut pool = S::pool();
    if S::TILED {
        let n = rng.gen_range(1..=4);
        let segs: Vec<_> = (0..n)
            .map(|_| (pool[0].clone(), rng.gen_range(1..=3)))
            .collect();
        return Leg::tiled(dir, segs).unwrap();
    }
    pool.shuffle(rng);
    // Biased towards many segments, so that sectors have several rows and columns.
    let most = pool.len().min(5);
    let n = rng.gen_range(1..=most).max(rng.gen_range(1..=most));
    let segs: Vec<_> = pool
        .into_iter()
        .take(n)
        .map(|s| (s, rng.gen_range(1..=3)))
        .collect();
    Leg::new(dir, segs).unwrap()
}

/// A random structure of up to four legs with a mostly conserved flux.
pub fn random_structure<S: Kind>(rng: &mut ChaCha8Rng) -> BlockStructure<S> {
    // Mostly three or four legs, split near the middle: sector matrices with several
    // rows and columns.
    let n = [0, 1, 2, 2, 3, 3, 3, 4, 4, 4][rng.gen_range(0..10)];
    let legs: Vec<Leg<S>> = (0..n).map(|_| random_leg(rng)).collect();
    let n_codomain = if rng.gen_bool(0.8) {
        n / 2 + rng.gen_range(0..=n % 2)
    } else {
        rng.gen_range(0..=n)
    };
    // Mostly a flux that some block conserves, sometimes any label.
    let flux = if rng.gen_bool(0.85) && legs.iter().all(|l| l.num_segments() > 0) {
        legs.iter().fold(S::trivial(), |acc, l| {
            let i = rng.gen_range(0..l.num_segments());
            acc.fuse_abelian(&l.effective_sector(i).unwrap())
        })
    } else {
        S::pool().choose(rng).unwrap().clone()
    };
    BlockStructure::from_legs(legs, n_codomain, flux).unwrap()
}

/// A random presence mask of `n` bits.
pub fn random_mask(rng: &mut ChaCha8Rng, n: usize) -> BitVec {
    let p = rng.gen_range(0.0..1.0);
    (0..n).map(|_| rng.gen_bool(p)).collect()
}

/// A random permutation of `0..n`.
pub fn random_perm(rng: &mut ChaCha8Rng, n: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    p.shuffle(rng);
    p
}

/// The value of a CUDA call a GPU test needs (opening a device, probing NVRTC), or `None`
/// having printed `skipped: ...` when the machine has no driver, library or device: the one
/// rule by which GPU tests skip. Any other error is a failure and panics, naming `what`.
#[cfg(feature = "cuda")]
pub fn or_skip_without_cuda<T>(
    result: Result<T, tessera_backends::cuda::CudaError>,
    what: &str,
) -> Option<T> {
    use tessera_backends::cuda::CudaError;
    match result {
        Ok(v) => Some(v),
        Err(
            e @ (CudaError::Unavailable { .. }
            | CudaError::MissingSymbol { .. }
            | CudaError::NoDevice { .. }),
        ) => {
            println!("skipped: {e}");
            None
        }
        Err(e) => panic!("{what} failed: {e}"),
    }
}
