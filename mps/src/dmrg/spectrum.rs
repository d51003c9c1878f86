//! The Schmidt spectrum of one bond: the singular values a two-site step kept, by charge.
//!
//! Owns: [`BondSpectrum`]. Invariant: the values are those of a normalised state (their
//! squares sum to 1 up to rounding), non-increasing within each charge, and every charge
//! appears once.

use tessera_blocks::AbelianSector;
use tessera_coalesce::SingularValues;

/// The singular values kept on one bond of the MPS, normalised (their squares sum to 1),
/// by the charge of the bond segment they belong to: the Schmidt coefficients of the state
/// across that bond, from which entanglement entropies and spectra follow.
#[derive(Clone, Debug, PartialEq)]
pub struct BondSpectrum<S> {
    charges: Vec<S>,
    values: Vec<Vec<f64>>,
}

impl<S: AbelianSector> BondSpectrum<S> {
    /// The spectrum of `s`, every value divided by `norm` (the norm of the kept part).
    pub(crate) fn from_singular_values(s: &SingularValues<f64, S>, norm: f64) -> Self {
        let (charges, values) = s
            .iter()
            .map(|(q, v)| (q.clone(), v.iter().map(|x| x / norm).collect()))
            .unzip();
        Self { charges, values }
    }

    /// A spectrum from its charges and values (each list non-increasing), as a checkpoint
    /// stores it.
    pub(crate) fn from_parts(charges: Vec<S>, values: Vec<Vec<f64>>) -> Self {
        Self { charges, values }
    }

    /// Every charge with its values (non-increasing), in the order of the bond leg's
    /// segments.
    pub fn iter(&self) -> impl Iterator<Item = (&S, &[f64])> {
        self.charges
            .iter()
            .zip(self.values.iter().map(Vec::as_slice))
    }

    /// The values of `charge`, or `None` when the bond keeps none of that charge.
    pub fn values_of(&self, charge: &S) -> Option<&[f64]> {
        let i = self.charges.iter().position(|q| q == charge)?;
        Some(&self.values[i])
    }

    /// The bond dimension (how many values are kept).
    pub fn len(&self) -> usize {
        self.values.iter().map(Vec::len).sum()
    }

    /// Whether no value is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every value, all charges together, non-increasing.
    pub fn sorted(&self) -> Vec<f64> {
        let mut all: Vec<f64> = self.values.iter().flatten().copied().collect();
        all.sort_by(|a, b| b.total_cmp(a));
        all
    }
}
