//! The left and right environments of a two-site sweep: their edges, their growth by one
//! site, and where each one lives (in memory, or on disk through a [`SpillStore`]).
//!
//! Owns: [`Environments`] and the graded operands of an environment update (the bra of an
//! MPS tensor, the twist of a right environment). Invariant: `left[i]` (the environment of
//! sites `0..i`) is valid for `i <= left_valid` and `right[i]` (that of sites `i..L`) for
//! `i >= right_valid`; a valid environment is either resident or held by the spill store,
//! an invalid one is neither (it is dropped the moment a step invalidates it). A step on the
//! pair `(i, i + 1)` needs `left[i]` and `right[i + 2]`, so it is allowed exactly when
//! `i <= left_valid` and `i + 2 >= right_valid`.

use tessera_backends::{Host, Placement};
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure};
use tessera_contract::Executor;

use super::Bra;
use super::heff::{Contractions, Pair, Signed, Tensor};
use super::spill::SpillStore;
use crate::{Error, Mpo, Result, graded};

/// Which environment: the side and the index (`left[i]`: sites `0..i`; `right[i]`: sites
/// `i..L`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// `left[i]`.
    Left(usize),
    /// `right[i]`.
    Right(usize),
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Left(i) => write!(f, "left-{i}"),
            Key::Right(i) => write!(f, "right-{i}"),
        }
    }
}

/// Where one environment is.
#[derive(Debug)]
enum Slot<S: AbelianSector, P: Placement<f64> = Host> {
    /// Not valid (never built, or invalidated by a step).
    Empty,
    /// In memory.
    Resident(Tensor<S, P>),
    /// Held by the spill store (on disk, or being loaded back).
    Spilled,
}

/// The environments of a chain of `L` sites.
#[derive(Debug)]
pub(crate) struct Environments<S: AbelianSector, P: Placement<f64> = Host> {
    left: Vec<Slot<S, P>>,
    right: Vec<Slot<S, P>>,
    left_valid: usize,
    right_valid: usize,
    spill: Option<Box<dyn SpillStore<S, P>>>,
    /// Environments smaller than this stay in memory even with a spill store.
    spill_min_bytes: usize,
}

/// The operand whose in-place conjugate is the bra of `a`: the reversal-signed copy for the
/// graded adjoint, `a` itself otherwise (the reversal sign is the identity on bosonic
/// sectors, so no copy is made for them).
pub(crate) fn bra_of<S: AbelianSector, P: Placement<f64>>(
    a: &Tensor<S, P>,
    bra: Bra,
) -> Result<Signed<'_, S, P>> {
    if !S::GRADED || bra == Bra::InPlaceConjugate {
        return Ok(Signed::Borrowed(a));
    }
    Ok(Signed::Owned(graded::reversal_signed(a)?))
}

/// A right environment twisted on its bra leg (the open `Out` leg of `H theta`): `r` itself
/// for bosonic sectors, where the twist is the identity.
pub(crate) fn twisted_right<S: AbelianSector, P: Placement<f64>>(
    r: &Tensor<S, P>,
) -> Result<Signed<'_, S, P>> {
    if !S::GRADED {
        return Ok(Signed::Borrowed(r));
    }
    Ok(Signed::Owned(graded::twisted(r, 2)?))
}

/// The edge environments of `mps` (its first and last tensors) under `mpo`: the left edge
/// `(k Out, a Out, y In)` and the right edge `(r In, b In, z Out)`, every leg the dual of
/// the one-dimensional edge it meets, value 1; the right edge is twisted on its bra leg (it
/// pairs the ket's edge, which carries the total charge, with the bra's).
pub(crate) fn edges<S: AbelianSector, P: Placement<f64>>(
    first: &Tensor<S, P>,
    last: &Tensor<S, P>,
    mpo: &Mpo<S>,
) -> Result<(Tensor<S, P>, Tensor<S, P>)> {
    let placement = first.placement();
    let w = mpo.tensors();
    let k = first.structure().legs()[0].clone();
    let a = w[0].structure().legs()[0].clone();
    let left = BlockStructure::new([k.dual(), a.dual()], [k], S::trivial())?;
    let r = last.structure().legs()[2].clone();
    let b = w[w.len() - 1].structure().legs()[3].clone();
    let right = BlockStructure::new([r.dual(), b.dual()], [r], S::trivial())?;
    let left = AsyncArray::from_dense(left, &[1.0])?.to_placement(&placement)?;
    let right = AsyncArray::from_dense(right, &[1.0])?.to_placement(&placement)?;
    let right = graded::twisted(&right, 2)?;
    Ok((left, right))
}

/// `left[i + 1]` from `left[i]`, the left isometry `a` at site `i` and its MPO tensor `w`.
pub(crate) fn grow_left<S: AbelianSector, P: Executor<f64>>(
    c: &Contractions,
    l: &Tensor<S, P>,
    a: &Tensor<S, P>,
    w: &Tensor<S, P>,
    bra: Bra,
) -> Result<Tensor<S, P>> {
    let t = c.left[0].apply(l, a)?;
    let t = c.left[1].apply(&t, w)?;
    let bra = bra_of(a, bra)?;
    Ok(c.left[2].apply(&t, &*bra)?)
}

/// `right[i]` from `right[i + 1]`, the right isometry `b` at site `i` and its MPO tensor
/// `w`.
pub(crate) fn grow_right<S: AbelianSector, P: Executor<f64>>(
    c: &Contractions,
    r: &Tensor<S, P>,
    b: &Tensor<S, P>,
    w: &Tensor<S, P>,
    bra: Bra,
) -> Result<Tensor<S, P>> {
    let t = c.right[0].apply(b, r)?;
    let t = c.right[1].apply(&t, w)?;
    let bra = bra_of(b, bra)?;
    Ok(c.right[2].apply(&t, &*bra)?)
}

impl<S: AbelianSector, P: Placement<f64>> Environments<S, P> {
    /// The edges of a chain of `sites` sites; nothing else is valid yet.
    pub(crate) fn new(sites: usize, left_edge: Tensor<S, P>, right_edge: Tensor<S, P>) -> Self {
        let mut left: Vec<Slot<S, P>> = (0..=sites).map(|_| Slot::Empty).collect();
        let mut right: Vec<Slot<S, P>> = (0..=sites).map(|_| Slot::Empty).collect();
        left[0] = Slot::Resident(left_edge);
        right[sites] = Slot::Resident(right_edge);
        Self {
            left,
            right,
            left_valid: 0,
            right_valid: sites,
            spill: None,
            spill_min_bytes: 0,
        }
    }

    /// The number of sites.
    fn sites(&self) -> usize {
        self.left.len() - 1
    }

    fn slot(&mut self, key: Key) -> &mut Slot<S, P> {
        match key {
            Key::Left(i) => &mut self.left[i],
            Key::Right(i) => &mut self.right[i],
        }
    }

    fn is_valid(&self, key: Key) -> bool {
        match key {
            Key::Left(i) => i <= self.left_valid,
            Key::Right(i) => i >= self.right_valid && i <= self.sites(),
        }
    }

    /// Whether a step on the pair `(i, i + 1)` has its environments.
    pub(crate) fn has_pair(&self, i: usize) -> bool {
        i + 2 <= self.sites() && i <= self.left_valid && i + 2 >= self.right_valid
    }

    /// The pairs a step may optimise now, as a range of left sites.
    pub(crate) fn pairs(&self) -> std::ops::RangeInclusive<usize> {
        self.right_valid.saturating_sub(2)..=self.left_valid.min(self.sites() - 2)
    }

    /// Environment `key`, loaded back (waiting for it) if it was spilled.
    pub(crate) fn get(&mut self, key: Key) -> Result<&Tensor<S, P>> {
        if !self.is_valid(key) {
            return Err(Error::Dmrg {
                what: format!("environment {key}"),
                expected: format!(
                    "left environments 0..={} or right environments {}..={}",
                    self.left_valid,
                    self.right_valid,
                    self.sites()
                ),
                found: "an environment the last step invalidated".into(),
            });
        }
        if matches!(self.slot(key), Slot::Spilled) {
            let t = self
                .spill
                .as_mut()
                .expect("a spilled environment has a spill store")
                .take(key)?;
            *self.slot(key) = Slot::Resident(t);
        }
        match self.slot(key) {
            Slot::Resident(t) => Ok(t),
            _ => unreachable!("a valid environment is resident or spilled"),
        }
    }

    /// `left[i]` and `right[i + 2]`, the environments of the pair `(i, i + 1)`.
    pub(crate) fn pair(&mut self, i: usize) -> Result<Pair<'_, S, P>> {
        self.get(Key::Left(i))?;
        self.get(Key::Right(i + 2))?;
        match (&self.left[i], &self.right[i + 2]) {
            (Slot::Resident(l), Slot::Resident(r)) => Ok((l, r)),
            _ => unreachable!("both were just made resident"),
        }
    }

    /// Records `left[j]`, just built from the MPS tensors left of site `j`, the last of
    /// which may have changed: the right environments of sites `j` and below are invalid
    /// now, and so are the left ones past `j`.
    pub(crate) fn set_left(&mut self, j: usize, left: Tensor<S, P>) {
        self.left_valid = j;
        self.left[j] = Slot::Resident(left);
        self.right_valid = self.right_valid.max(j + 1);
        self.drop_invalid();
    }

    /// Records `right[j]`, just built from the MPS tensors from site `j` on, the first of
    /// which may have changed: the left environments of sites `j` and above are invalid
    /// now, and so are the right ones before `j`.
    pub(crate) fn set_right(&mut self, j: usize, right: Tensor<S, P>) {
        self.right_valid = j;
        self.right[j] = Slot::Resident(right);
        self.left_valid = self.left_valid.min(j - 1);
        self.drop_invalid();
    }

    /// Drops every invalid environment (from memory and from the spill store).
    fn drop_invalid(&mut self) {
        let n = self.sites();
        let invalid: Vec<Key> = (self.left_valid + 1..=n)
            .map(Key::Left)
            .chain((0..self.right_valid).map(Key::Right))
            .collect();
        for key in invalid {
            let was = std::mem::replace(self.slot(key), Slot::Empty);
            if let (Slot::Spilled, Some(store)) = (was, self.spill.as_mut()) {
                store.forget(key);
            }
        }
    }

    /// Starts loading `key` back if it is spilled (a task that overlaps what runs now).
    pub(crate) fn prefetch(&mut self, key: Key) -> Result<()> {
        if self.is_valid(key)
            && matches!(self.slot(key), Slot::Spilled)
            && let Some(store) = self.spill.as_mut()
        {
            store.prefetch(key)?;
        }
        Ok(())
    }

    /// With a spill store, writes every resident environment except the edges, `keep` and
    /// those below the store's size threshold to it (asynchronously) and drops it from
    /// memory; without one, does nothing.
    pub(crate) fn spill_except(&mut self, keep: &[Key]) -> Result<()> {
        let Some(mut store) = self.spill.take() else {
            return Ok(());
        };
        let n = self.sites();
        let candidates: Vec<Key> = (1..=self.left_valid)
            .map(Key::Left)
            .chain((self.right_valid..n).map(Key::Right))
            .filter(|k| !keep.contains(k))
            .collect();
        let mut result = Ok(());
        for key in candidates {
            let min = self.spill_min_bytes;
            if let Slot::Resident(t) = self.slot(key)
                && t.structure().total_len() * std::mem::size_of::<f64>() >= min
            {
                let Slot::Resident(t) = std::mem::replace(self.slot(key), Slot::Spilled) else {
                    unreachable!()
                };
                if let Err(e) = store.write(key, t) {
                    result = Err(e);
                    break;
                }
            }
        }
        self.spill = Some(store);
        result
    }

    /// Hands the environments of at least `min_bytes` bytes to `store` from now on (those
    /// resident stay resident until the next [`spill_except`](Self::spill_except)); a
    /// previous store's environments are loaded back first.
    pub(crate) fn set_spill(
        &mut self,
        store: Box<dyn SpillStore<S, P>>,
        min_bytes: usize,
    ) -> Result<()> {
        if self.spill.is_some() {
            let keys: Vec<Key> = (0..=self.left_valid)
                .map(Key::Left)
                .chain((self.right_valid..=self.sites()).map(Key::Right))
                .collect();
            for key in keys {
                self.get(key)?;
            }
        }
        self.spill = Some(store);
        self.spill_min_bytes = min_bytes;
        Ok(())
    }

    /// How many environments are in memory now.
    pub(crate) fn resident(&self) -> usize {
        self.left
            .iter()
            .chain(&self.right)
            .filter(|s| matches!(s, Slot::Resident(_)))
            .count()
    }
}
