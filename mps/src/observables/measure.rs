//! Expectation values of a matrix product state: its norm, one-site expectations and
//! two-point correlation functions.
//!
//! Owns: [`Observables`]. Invariant: it holds the state left-canonicalised and normalised
//! (one QR sweep with the library's `qr`; the input's norm kept aside), and the left and right
//! environments of the identity at every bond, so an expectation is one transfer per site
//! it spans and one closing, and every value is that of the normalised state, `<psi|O|psi>
//! / <psi|psi>`, whatever the input's gauge and norm.
//!
//! Operators at different sites are embedded by the graded tensor product in site order
//! (the crate's chain convention), so for `i < j` the network of `O` at `i` and `P` at `j`
//! is `O_i P_j` with the Jordan-Wigner string of a fermionic pair included, and `O_i P_j =
//! (-1)^{|O| |P|} P_j O_i` gives the other order. A product whose total charge is not
//! trivial changes the state's charge, so its expectation is zero by symmetry: it is
//! returned as zero without a contraction.

use tessera_blocks::{AbelianSector, AsyncArray};
use tessera_coalesce::qr;
use tessera_contract::Contraction;

use super::network::{Network, scalar};
use super::operator::{LocalOperator, describe};
use crate::{Error, Mpo, Mps, Result, graded};

/// Measurements on one state: build once ([`Observables::new`]), then ask for the norm,
/// one-site expectations ([`one_site`](Self::one_site)), correlations
/// ([`correlations`](Self::correlations)), the expectation of an MPO
/// ([`mpo_expectation`](Self::mpo_expectation)) and the entanglement of every bond
/// ([`entanglement`](Self::entanglement)).
///
/// ```
/// use tessera_blocks::{Direction, Leg, U1};
/// use tessera_mps::Mps;
/// use tessera_mps::observables::{LocalOperator, Observables};
///
/// // Spin-1/2 with U(1) charge 2 Sz; the Neel state.
/// let p = Leg::new(Direction::In, [(U1(-1), 1), (U1(1), 1)])?;
/// let mps = Mps::product_state(&vec![p.clone(); 4], &[1, 0, 1, 0])?;
/// let sz = LocalOperator::from_dense(&p, U1(0), &[-0.5, 0.0, 0.0, 0.5])?;
/// let obs = Observables::new(&mps)?;
/// assert_eq!(obs.norm(), 1.0);
/// assert_eq!(obs.one_site(&sz)?, vec![0.5, -0.5, 0.5, -0.5]);
/// let c = obs.correlations(&sz, &sz)?;
/// assert!((c[0][3] + 0.25).abs() < 1e-15 && (c[1][1] - 0.25).abs() < 1e-15);
/// # Ok::<(), tessera_mps::Error>(())
/// ```
pub struct Observables<S: AbelianSector> {
    /// The state, left-canonical and normalised (`<psi|psi> = 1`).
    sites: Vec<AsyncArray<f64, S>>,
    /// The reversal-signed copies of `sites`, whose in-place conjugates are the bras.
    bras: Vec<AsyncArray<f64, S>>,
    /// The input's norm.
    norm: f64,
    /// The total charge.
    charge: S,
    /// `left[i]`: the environment of sites `0..i` with identities (`i` in `0..=L`).
    left: Vec<AsyncArray<f64, S>>,
    /// `right[i]`: the environment of sites `i..L` with identities.
    right: Vec<AsyncArray<f64, S>>,
    network: Network,
}

impl<S: AbelianSector> std::fmt::Debug for Observables<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observables")
            .field("sites", &self.sites.len())
            .field("norm", &self.norm)
            .field("charge", &self.charge)
            .finish_non_exhaustive()
    }
}

impl<S: AbelianSector> Observables<S> {
    /// Prepares the measurements of `mps` (any gauge, any norm): left-canonicalises and
    /// normalises a copy, and computes the identity environments at every bond. Waits on
    /// the host once, for the norm.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroNorm`] for a state of norm zero (or not finite); a lower layer's error
    /// otherwise.
    pub fn new(mps: &Mps<S>) -> Result<Self> {
        let (sites, norm) = left_canonical(mps)?;
        let network = Network::new()?;
        let l = sites.len();
        let bras = sites
            .iter()
            .map(graded::reversal_signed)
            .collect::<Result<Vec<_>>>()?;
        let identities = (0..l)
            .map(|i| {
                let p = mps.physical_leg(i).expect("a site of the chain");
                Ok(LocalOperator::identity(p)?.wrapped(&S::trivial())?.0)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut left = vec![Network::left_edge()?];
        for i in 0..l {
            let next = network.extend_left(&left[i], &sites[i], &identities[i], &bras[i])?;
            left.push(next);
        }
        let mut right = vec![Network::right_edge(&mps.charge())?];
        for i in (0..l).rev() {
            let next = network.extend_right(&right[0], &sites[i], &identities[i], &bras[i])?;
            right.insert(0, next);
        }
        Ok(Self {
            sites,
            bras,
            norm,
            charge: mps.charge(),
            left,
            right,
            network,
        })
    }

    /// The number of sites.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// Always `false`: a chain has at least one site.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The norm `sqrt(<psi|psi>)` of the state given to [`new`](Self::new); every other
    /// value is that of the normalised state.
    pub fn norm(&self) -> f64 {
        self.norm
    }

    /// The total charge of the state.
    pub fn charge(&self) -> &S {
        &self.charge
    }

    /// The state as measured: left-canonical and normalised, site by site.
    pub fn tensors(&self) -> &[AsyncArray<f64, S>] {
        &self.sites
    }

    /// `<psi|psi>` of the normalised state closed at bond `i` (between sites `i - 1` and
    /// `i`, `i` in `0..=L`): one at every bond up to rounding. The closing of the
    /// environments, exposed as a check of the network's signs.
    ///
    /// # Errors
    ///
    /// [`Error::Site`] for `i > L` (its `len` is then `L + 1`, the number of closings).
    pub fn closed_norm(&self, i: usize) -> Result<f64> {
        if i > self.len() {
            return Err(Error::Site {
                site: i,
                len: self.len() + 1,
            });
        }
        scalar(&self.network.close(&self.left[i], &self.right[i])?)
    }

    fn check_site(&self, site: usize) -> Result<()> {
        if site >= self.len() {
            return Err(Error::Site {
                site,
                len: self.len(),
            });
        }
        Ok(())
    }

    fn physical(&self, site: usize) -> &tessera_blocks::Leg<S> {
        &self.sites[site].structure().legs()[1]
    }

    /// `left[i]` extended through `op` at site `i` with incoming bond charge `incoming`;
    /// also the outgoing charge.
    fn through(
        &self,
        env: &AsyncArray<f64, S>,
        site: usize,
        op: &LocalOperator<S>,
        incoming: &S,
    ) -> Result<(AsyncArray<f64, S>, S)> {
        let (w, out) = op.wrapped(incoming)?;
        let env = self
            .network
            .extend_left(env, &self.sites[site], &w, &self.bras[site])?;
        Ok((env, out))
    }

    /// `<O_site>`: zero when `O` has a nontrivial charge.
    ///
    /// # Errors
    ///
    /// [`Error::Site`] past the end; [`Error::LocalOperator`] when `op` does not act on the
    /// site's physical leg.
    pub fn expectation(&self, op: &LocalOperator<S>, site: usize) -> Result<f64> {
        self.check_site(site)?;
        op.check_leg("expectation", site, self.physical(site))?;
        if !op.flux().is_trivial() {
            return Ok(0.0);
        }
        let (env, _) = self.through(&self.left[site], site, op, &S::trivial())?;
        scalar(&self.network.close(&env, &self.right[site + 1])?)
    }

    /// `<O_i>` at every site `i` (the same operator on every site).
    ///
    /// # Errors
    ///
    /// As [`expectation`](Self::expectation).
    pub fn one_site(&self, op: &LocalOperator<S>) -> Result<Vec<f64>> {
        let mut closed = Vec::with_capacity(self.len());
        for i in 0..self.len() {
            op.check_leg("one_site", i, self.physical(i))?;
            if op.flux().is_trivial() {
                let (env, _) = self.through(&self.left[i], i, op, &S::trivial())?;
                closed.push(Some(self.network.close(&env, &self.right[i + 1])?));
            } else {
                closed.push(None);
            }
        }
        closed
            .iter()
            .map(|c| c.as_ref().map_or(Ok(0.0), scalar))
            .collect()
    }

    /// `<O_i P_j>` for any two sites: for `i < j` the graded product in site order, for
    /// `i > j` `(-1)^{|O| |P|} <P_j O_i>`, for `i == j` the one-site product `O P`.
    ///
    /// # Errors
    ///
    /// As [`expectation`](Self::expectation), for either operator.
    pub fn correlation(
        &self,
        o: &LocalOperator<S>,
        i: usize,
        p: &LocalOperator<S>,
        j: usize,
    ) -> Result<f64> {
        self.check_site(i)?;
        self.check_site(j)?;
        o.check_leg("correlation (left operator)", i, self.physical(i))?;
        p.check_leg("correlation (right operator)", j, self.physical(j))?;
        if i == j {
            return self.expectation(&o.product(p)?, i);
        }
        let (first, a, second, b, sign) = if i < j {
            (o, i, p, j, 1.0)
        } else {
            (p, j, o, i, exchange_sign(o, p))
        };
        if !first.flux().fuse_abelian(second.flux()).is_trivial() {
            return Ok(0.0);
        }
        let (mut env, q) = self.through(&self.left[a], a, first, &S::trivial())?;
        for k in a + 1..b {
            let (w, _) = LocalOperator::identity(self.physical(k))?.wrapped(&q)?;
            env = self
                .network
                .extend_left(&env, &self.sites[k], &w, &self.bras[k])?;
        }
        let (env, _) = self.through(&env, b, second, &q)?;
        Ok(sign * scalar(&self.network.close(&env, &self.right[b + 1])?)?)
    }

    /// The matrix `C[i][j] = <O_i P_j>` over all pairs of sites, as
    /// [`correlation`](Self::correlation) gives each entry (the diagonal is `<(O P)_i>`),
    /// computed with one transfer per pair of sites and triangle (one triangle when `o`
    /// and `p` are the same reference: the other is its transpose times the exchange sign).
    ///
    /// # Errors
    ///
    /// As [`correlation`](Self::correlation).
    pub fn correlations(
        &self,
        o: &LocalOperator<S>,
        p: &LocalOperator<S>,
    ) -> Result<Vec<Vec<f64>>> {
        let l = self.len();
        for i in 0..l {
            o.check_leg("correlations (left operator)", i, self.physical(i))?;
            p.check_leg("correlations (right operator)", i, self.physical(i))?;
        }
        let mut c = vec![vec![0.0; l]; l];
        // Upper triangle: O first; lower: P first, with the exchange sign. For one operator
        // twice the lower triangle is the upper one's transpose times that sign.
        let same = std::ptr::eq(o, p);
        let sign = exchange_sign(o, p);
        for (a, row) in self.ordered_pairs(o, p)?.into_iter().enumerate() {
            for (b, value) in row {
                c[a][b] = value;
                if same {
                    c[b][a] = sign * value;
                }
            }
        }
        if !same {
            for (a, row) in self.ordered_pairs(p, o)?.into_iter().enumerate() {
                for (b, value) in row {
                    c[b][a] = sign * value;
                }
            }
        }
        let diagonal = self.one_site(&o.product(p)?)?;
        for (i, d) in diagonal.into_iter().enumerate() {
            c[i][i] = d;
        }
        Ok(c)
    }

    /// For every site `a`, the values `<X_a Y_b>` for `b > a` (the graded product in site
    /// order): all contractions are submitted before the first value is read.
    fn ordered_pairs(
        &self,
        x: &LocalOperator<S>,
        y: &LocalOperator<S>,
    ) -> Result<Vec<Vec<(usize, f64)>>> {
        let l = self.len();
        if !x.flux().fuse_abelian(y.flux()).is_trivial() {
            return Ok((0..l)
                .map(|a| (a + 1..l).map(|b| (b, 0.0)).collect())
                .collect());
        }
        let q = x.flux().clone();
        // The identity W of every site with the bond charge q, and Y's W.
        let carry = (0..l)
            .map(|k| Ok(LocalOperator::identity(self.physical(k))?.wrapped(&q)?.0))
            .collect::<Result<Vec<_>>>()?;
        let (y_w, _) = y.wrapped(&q)?;
        let mut pending = Vec::with_capacity(l);
        for a in 0..l {
            let mut row = Vec::with_capacity(l - a);
            let (mut env, _) = self.through(&self.left[a], a, x, &S::trivial())?;
            let rest = self.sites.iter().zip(&self.bras).zip(&carry).enumerate();
            for (b, ((site, bra), carry)) in rest.skip(a + 1) {
                let closed = self.network.extend_left(&env, site, &y_w, bra)?;
                row.push((b, self.network.close(&closed, &self.right[b + 1])?));
                if b + 1 < l {
                    env = self.network.extend_left(&env, site, carry, bra)?;
                }
            }
            pending.push(row);
        }
        pending
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|(b, c)| Ok((b, scalar(&c)?)))
                    .collect::<Result<Vec<_>>>()
            })
            .collect()
    }

    /// `<psi|H|psi>` of a matrix product operator on the same chain (the energy of a
    /// Hamiltonian, for example), through the same network.
    ///
    /// # Errors
    ///
    /// [`Error::LocalOperator`] when the MPO has another length or acts on other physical legs.
    pub fn mpo_expectation(&self, mpo: &Mpo<S>) -> Result<f64> {
        if mpo.len() != self.len() {
            return Err(Error::LocalOperator {
                what: "MPO".into(),
                expected: format!("{} sites", self.len()),
                found: format!("{} sites", mpo.len()),
            });
        }
        let mut env = Network::left_edge()?;
        for (i, w) in mpo.tensors().iter().enumerate() {
            let leg = mpo.physical_leg(i).expect("a site of the MPO");
            if leg != self.physical(i) {
                return Err(Error::LocalOperator {
                    what: "MPO".into(),
                    expected: format!(
                        "the physical leg of site {i}, {}",
                        describe(self.physical(i))
                    ),
                    found: describe(leg),
                });
            }
            env = self
                .network
                .extend_left(&env, &self.sites[i], w, &self.bras[i])?;
        }
        scalar(&self.network.close(&env, &self.right[self.len()])?)
    }
}

/// `(-1)^{|O| |P|}`: the sign of exchanging two operators on different sites.
fn exchange_sign<S: AbelianSector>(o: &LocalOperator<S>, p: &LocalOperator<S>) -> f64 {
    if o.is_odd() && p.is_odd() { -1.0 } else { 1.0 }
}

/// A left-canonical, normalised copy of `mps` and its norm: QR of every site but the last
/// (as the matrix `(k s | r)`), the triangular factor pushed into the next site, and the
/// last site divided by its norm. Each `Q` is an isometry as a plain matrix, which is the
/// Hilbert-space inner product of the site-ordered amplitudes, so the last site's norm is
/// the state's.
pub(crate) fn left_canonical<S: AbelianSector>(
    mps: &Mps<S>,
) -> Result<(Vec<AsyncArray<f64, S>>, f64)> {
    let absorb = Contraction::new("mk,ksr->ms|r")?;
    let l = mps.len();
    let mut sites = Vec::with_capacity(l);
    let mut carry: Option<AsyncArray<f64, S>> = None;
    for (i, a) in mps.tensors().iter().enumerate() {
        let a = match carry.take() {
            Some(r) => absorb.apply(&r, a)?,
            None => split_as_matrix(a)?,
        };
        if i + 1 < l {
            let f = qr(&a)?;
            sites.push(f.q);
            carry = Some(f.r);
        } else {
            sites.push(a);
        }
    }
    let last = sites.last().expect("a chain has a site");
    let norm = last.norm().get()?;
    if norm == 0.0 || !norm.is_finite() {
        return Err(Error::ZeroNorm { norm });
    }
    last.scale(1.0 / norm);
    Ok((sites, norm))
}

/// `a` with the split `(k s | r)` (a copy; the identity permutation carries no sign).
pub(crate) fn split_as_matrix<S: AbelianSector>(
    a: &AsyncArray<f64, S>,
) -> Result<AsyncArray<f64, S>> {
    if a.structure().n_codomain() == 2 {
        Ok(a.duplicate())
    } else {
        Ok(a.permute(&[0, 1, 2], 2)?)
    }
}
