//! Entanglement of a matrix product state at every bond: the Schmidt values per charge
//! sector and the von Neumann entropy.
//!
//! Owns: [`BondEntanglement`] and [`Observables::entanglement`]. Invariant: the Schmidt
//! values of bond `b` (between sites `b` and `b + 1`) are the singular values of the
//! normalised state's amplitudes reshaped to (sites `0..=b` | sites `b+1..L`), grouped by the
//! charge of the left part, each group non-increasing, their squares summing to one.
//!
//! They come from one right-to-left SVD sweep over the left-canonical state that
//! [`Observables`] holds: at site `i` the tensor, as the matrix `(k | s r)`, is `U S V†`;
//! everything left of the bond is an isometry (left-canonical sites times `U`) and
//! everything right of it is one too (the `V†`s), so `S` is the Schmidt spectrum. For graded
//! sectors the chain is the plain product, so the amplitudes are the Fock amplitudes in the
//! occupation basis in site order and no sign enters: this is the usual fermionic mode
//! entanglement of the first `b + 1` sites with the rest.

use tessera_blocks::AbelianSector;
use tessera_coalesce::{Truncation, svd};
use tessera_contract::Contraction;

use super::measure::Observables;
use crate::Result;

/// The Schmidt spectrum and entropy of one bond.
#[derive(Clone, Debug, PartialEq)]
pub struct BondEntanglement<S> {
    /// The bond: between sites `bond` and `bond + 1`.
    pub bond: usize,
    /// Per charge of the left part (`sites 0..=bond`), its Schmidt values, non-increasing,
    /// in increasing order of the charge. Values the decomposition finds zero are kept.
    pub spectrum: Vec<(S, Vec<f64>)>,
}

impl<S> BondEntanglement<S> {
    /// The von Neumann entropy `-sum p ln p` of `p = lambda^2` (natural log; `0 ln 0 = 0`).
    pub fn entropy(&self) -> f64 {
        self.spectrum
            .iter()
            .flat_map(|(_, v)| v)
            .map(|&l| l * l)
            .filter(|&p| p > 0.0)
            .map(|p| -p * p.ln())
            .sum()
    }

    /// Every Schmidt value of the bond, non-increasing, charges forgotten.
    pub fn values(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self.spectrum.iter().flat_map(|(_, v)| v.clone()).collect();
        v.sort_by(|a, b| b.total_cmp(a));
        v
    }
}

impl<S: AbelianSector> Observables<S> {
    /// The Schmidt spectrum of every bond, `0..L-1` (none for one site). Waits on the host
    /// once per bond (the SVD's values decide the next bond's shape).
    ///
    /// # Errors
    ///
    /// A factorization's error (a non-finite value in the state).
    pub fn entanglement(&self) -> Result<Vec<BondEntanglement<S>>> {
        let absorb = Contraction::new("ksm,mb->ks|b")?;
        let sites = self.tensors();
        let l = sites.len();
        let mut bonds = Vec::with_capacity(l.saturating_sub(1));
        let mut current = sites.last().expect("a chain has a site").duplicate();
        for i in (1..l).rev() {
            // (k | s r): the left bond against the rest.
            let m = current.permute(&[0, 1, 2], 1)?;
            let f = svd(&m, &Truncation::none())?;
            let scale = 1.0 / f.total_weight.sqrt();
            let spectrum =
                f.s.iter()
                    .map(|(q, v)| (q.clone(), v.iter().map(|x| x * scale).collect()))
                    .collect();
            bonds.push(BondEntanglement {
                bond: i - 1,
                spectrum,
            });
            let us = f.s.scale_columns(&f.u)?;
            current = absorb.apply(&sites[i - 1], &us)?;
        }
        bonds.reverse();
        Ok(bonds)
    }
}
