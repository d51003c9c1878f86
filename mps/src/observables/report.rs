//! The serialisable measurement report of a converged state, written as JSON.
//!
//! Owns: [`Report`], [`BondReport`], [`SectorSpectrum`], [`CorrelationReport`]. Invariant: a
//! report holds plain numbers and strings only (sectors by their `Display` form), so it
//! reads back equal to what was written ([`Report::from_json`]) and any tool can read it;
//! `examples/dmrg/plot.py` draws its entropy profile, one-site profiles and correlation
//! decay.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tessera_blocks::AbelianSector;

use super::entanglement::BondEntanglement;
use super::measure::Observables;
use super::operator::LocalOperator;
use crate::{Error, Result};

/// The Schmidt values of one charge sector of a bond.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SectorSpectrum {
    /// The charge of the left part, in its `Display` form (`"U1(2)"`, `"(U1(3), odd)"`).
    pub sector: String,
    /// Its Schmidt values, non-increasing.
    pub values: Vec<f64>,
}

/// The entanglement of one bond.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BondReport {
    /// The bond: between sites `bond` and `bond + 1`.
    pub bond: usize,
    /// The von Neumann entropy (natural log).
    pub entropy: f64,
    /// The Schmidt values per charge sector of the left part.
    pub spectrum: Vec<SectorSpectrum>,
}

impl<S: AbelianSector> From<&BondEntanglement<S>> for BondReport {
    fn from(b: &BondEntanglement<S>) -> Self {
        Self {
            bond: b.bond,
            entropy: b.entropy(),
            spectrum: b
                .spectrum
                .iter()
                .map(|(q, v)| SectorSpectrum {
                    sector: q.to_string(),
                    values: v.clone(),
                })
                .collect(),
        }
    }
}

/// A two-point correlation matrix `C[i][j] = <O_i P_j>` (diagonal: `<(O P)_i>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CorrelationReport {
    /// The name of `O` (the operator on the first index).
    pub left: String,
    /// The name of `P`.
    pub right: String,
    /// The matrix, row `i` for `O`'s site.
    pub matrix: Vec<Vec<f64>>,
}

/// What a run measured on its final state, for the JSON file next to the human-readable
/// summary.
///
/// ```
/// use tessera_blocks::{Direction, Leg, U1};
/// use tessera_mps::Mps;
/// use tessera_mps::observables::{LocalOperator, Observables, Report};
///
/// let p = Leg::new(Direction::In, [(U1(-1), 1), (U1(1), 1)])?;
/// let mps = Mps::product_state(&vec![p.clone(); 3], &[1, 0, 1])?;
/// let sz = LocalOperator::from_dense(&p, U1(0), &[-0.5, 0.0, 0.0, 0.5])?;
/// let obs = Observables::new(&mps)?;
/// let report = Report::measure(&obs, &[("Sz", &sz)], &[("Sz", "Sz")])?
///     .with_energies(-0.5, vec![-0.4, -0.5]);
/// let json = report.to_json()?;
/// assert_eq!(Report::from_json(&json)?, report);
/// assert_eq!(report.one_site["Sz"], vec![0.5, -0.5, 0.5]);
/// assert!(report.entanglement[0].entropy.abs() < 1e-12); // a product state
/// # Ok::<(), tessera_mps::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The number of sites.
    pub sites: usize,
    /// The total charge of the state, in its `Display` form.
    pub charge: String,
    /// The norm of the state as given (every value below is of the normalised state).
    pub norm: f64,
    /// The final energy, when a run computed one.
    pub energy: Option<f64>,
    /// The energy after each sweep.
    pub sweep_energies: Vec<f64>,
    /// Per bond `0..L-1`, the entropy and Schmidt spectrum.
    pub entanglement: Vec<BondReport>,
    /// `<O_i>` for every site, by operator name.
    pub one_site: BTreeMap<String, Vec<f64>>,
    /// Two-point correlation matrices, in the order asked for.
    pub correlations: Vec<CorrelationReport>,
}

impl Report {
    /// Measures `obs`: the entanglement of every bond, `<O_i>` of every named operator and
    /// the correlation matrix of every pair of names (names from `operators`). No energy
    /// yet ([`with_energies`](Self::with_energies)).
    ///
    /// # Errors
    ///
    /// [`Error::LocalOperator`] for a pair naming an operator that is not in `operators`, or an
    /// operator that does not act on the chain's physical legs; the measurements' errors.
    pub fn measure<S: AbelianSector>(
        obs: &Observables<S>,
        operators: &[(&str, &LocalOperator<S>)],
        pairs: &[(&str, &str)],
    ) -> Result<Self> {
        let find = |name: &str| {
            operators
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, op)| *op)
                .ok_or_else(|| Error::LocalOperator {
                    what: format!("\"{name}\" in a correlation pair"),
                    expected: format!(
                        "one of the named operators {:?}",
                        operators.iter().map(|(n, _)| *n).collect::<Vec<_>>()
                    ),
                    found: "no operator of that name".into(),
                })
        };
        let mut one_site = BTreeMap::new();
        for (name, op) in operators {
            one_site.insert((*name).to_string(), obs.one_site(op)?);
        }
        let mut correlations = Vec::with_capacity(pairs.len());
        for &(left, right) in pairs {
            correlations.push(CorrelationReport {
                left: left.into(),
                right: right.into(),
                matrix: obs.correlations(find(left)?, find(right)?)?,
            });
        }
        Ok(Self {
            sites: obs.len(),
            charge: obs.charge().to_string(),
            norm: obs.norm(),
            energy: None,
            sweep_energies: Vec::new(),
            entanglement: obs.entanglement()?.iter().map(BondReport::from).collect(),
            one_site,
            correlations,
        })
    }

    /// The report with the run's final energy and its energy after each sweep.
    #[must_use]
    pub fn with_energies(mut self, energy: f64, sweep_energies: Vec<f64>) -> Self {
        self.energy = Some(energy);
        self.sweep_energies = sweep_energies;
        self
    }

    /// The report as pretty-printed JSON (a non-finite number is written as `null`).
    ///
    /// # Errors
    ///
    /// [`Error::Report`] if serialisation fails.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(|e| Error::Report(e.to_string()))
    }

    /// A report read back from JSON.
    ///
    /// # Errors
    ///
    /// [`Error::Report`] naming what does not parse.
    pub fn from_json(json: &str) -> Result<Self> {
        serde_json::from_str(json).map_err(|e| Error::Report(e.to_string()))
    }

    /// Writes the JSON to `path` (with a final newline).
    ///
    /// # Errors
    ///
    /// [`Error::Report`] naming the path and the failure.
    pub fn write_json(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let mut json = self.to_json()?;
        json.push('\n');
        std::fs::write(path, json)
            .map_err(|e| Error::Report(format!("writing {}: {e}", path.display())))
    }
}
