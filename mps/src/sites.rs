//! Site types: the local basis of one site with its charges, and its named on-site operators.
//!
//! Owns: [`Site`], [`Operator`] and the charge type of spinful electrons, [`ElectronCharge`].
//! Invariant: every operator of a site maps each basis state to states of one charge shifted
//! by the operator's charge (checked by [`Site::new`]), so an operator is a charged tensor
//! with a definite fermion parity, and the states of one charge are contiguous, so the
//! physical leg has one segment per charge.
//!
//! Fermionic sites follow the crate's convention: a basis state is a product of creation
//! operators in a fixed order on the vacuum, here `|up dn> = c_up^+ c_dn^+ |0>`, and the
//! matrices of `Cup`, `Cdn`, ... are those of the site's own Fock space (they anticommute
//! with each other on the site). Strings between sites are never written: the graded legs of
//! the MPO carry them (see the [`mpo`](crate::mpo) module).
//!
//! ```
//! use tessera_mps::sites::Site;
//!
//! let site = Site::spin_half();
//! let sp = site.operator("Sp")?;
//! assert_eq!(sp.get(1, 0), 1.0); // |up><dn|: basis 0 is down, 1 is up
//! assert_eq!(sp.charge().0, 2); // charges are 2 Sz
//! assert!(site.operator("Cdag").is_err());
//! # Ok::<(), tessera_mps::Error>(())
//! ```

use tessera_blocks::{AbelianSector, Direction, FermionParity, FermionicU1, Leg, Product, U1};

use crate::observables::LocalOperator;
use crate::{Error, Result};

/// The charge of a spinful electron site: `((N, 2 Sz), parity)`, the particle number and
/// twice the spin projection, graded by the parity of `N`.
pub type ElectronCharge = Product<Product<U1, U1>, FermionParity>;

/// The electron charge of `n` particles with `2 Sz = two_sz`.
pub fn electron_charge(n: i32, two_sz: i32) -> ElectronCharge {
    Product(Product(U1(n), U1(two_sz)), FermionParity::new(n % 2 != 0))
}

/// The fermionic U(1) charge of `n` particles.
pub fn fermion_charge(n: i32) -> FermionicU1 {
    Product(U1(n), FermionParity::new(n % 2 != 0))
}

/// A named on-site operator: a dense `d x d` matrix `<o|O|i>` and the charge it adds.
#[derive(Clone, Debug, PartialEq)]
pub struct Operator<S> {
    name: String,
    dim: usize,
    /// Row-major: `matrix[o * dim + i] = <o|O|i>`.
    matrix: Vec<f64>,
    charge: S,
}

impl<S: AbelianSector> Operator<S> {
    /// The operator's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The matrix element `<o|O|i>`.
    pub fn get(&self, o: usize, i: usize) -> f64 {
        self.matrix[o * self.dim + i]
    }

    /// The matrix, row-major (`[o * d + i] = <o|O|i>`).
    pub fn matrix(&self) -> &[f64] {
        &self.matrix
    }

    /// The charge the operator adds: `q(o) = q(i) + charge` for every non-zero `<o|O|i>`.
    pub fn charge(&self) -> &S {
        &self.charge
    }

    /// Whether the operator is odd (changes the fermion parity).
    pub fn is_fermionic(&self) -> bool {
        self.charge.parity()
    }
}

/// A site type: basis states with their charges and named on-site operators.
#[derive(Clone, Debug, PartialEq)]
pub struct Site<S> {
    name: String,
    states: Vec<(String, S)>,
    operators: Vec<Operator<S>>,
}

/// The dense matrix of `f` on `d` states, row-major.
fn dense(d: usize, f: impl Fn(usize, usize) -> f64) -> Vec<f64> {
    (0..d * d).map(|k| f(k / d, k % d)).collect()
}

/// `a b`, both row-major `d x d`.
fn product(d: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
    dense(d, |o, i| (0..d).map(|k| a[o * d + k] * b[k * d + i]).sum())
}

impl<S: AbelianSector> Site<S> {
    /// A site named `name` with basis `states` (label and charge, states of one charge
    /// contiguous) and the named operators (row-major `d x d` matrices `<o|O|i>`); the
    /// identity `"Id"` is added when absent. Each operator's charge is read from its
    /// non-zero elements. [`Error::Operator`] for a matrix of the wrong size, a zero matrix,
    /// an element that does not conserve one charge, a repeated name, or a charge split
    /// over non-contiguous states.
    pub fn new(
        name: &str,
        states: Vec<(String, S)>,
        operators: Vec<(String, Vec<f64>)>,
    ) -> Result<Self> {
        let d = states.len();
        let bad = |op: &str, reason: String| Error::Operator {
            site_type: name.to_string(),
            name: op.to_string(),
            reason,
        };
        if d == 0 {
            return Err(bad("", "at least one basis state, found none".into()));
        }
        for (k, (label, q)) in states.iter().enumerate() {
            if let Some(j) = (0..k).find(|&j| states[j].1 == *q)
                && states[k - 1].1 != *q
            {
                return Err(bad(
                    "",
                    format!(
                        "states of one charge contiguous, but {label} ({q}) follows another charge after state {j}"
                    ),
                ));
            }
        }
        let mut ops: Vec<Operator<S>> = Vec::with_capacity(operators.len() + 1);
        if !operators.iter().any(|(n, _)| n == "Id") {
            ops.push(Operator {
                name: "Id".into(),
                dim: d,
                matrix: dense(d, |o, i| f64::from(u8::from(o == i))),
                charge: S::trivial(),
            });
        }
        for (op, matrix) in operators {
            if matrix.len() != d * d {
                return Err(bad(
                    &op,
                    format!(
                        "a {d}x{d} matrix ({} elements), found {}",
                        d * d,
                        matrix.len()
                    ),
                ));
            }
            if ops.iter().any(|o| o.name == op) {
                return Err(bad(&op, "one operator per name, found it twice".into()));
            }
            let mut charge: Option<S> = None;
            for o in 0..d {
                for i in 0..d {
                    if matrix[o * d + i] == 0.0 {
                        continue;
                    }
                    let q = states[o].1.fuse_abelian(&states[i].1.dual());
                    match &charge {
                        None => charge = Some(q),
                        Some(c) if *c == q => {}
                        Some(c) => {
                            return Err(bad(
                                &op,
                                format!(
                                    "one charge for every element, found {c} and {q} (at <{}|O|{}>)",
                                    states[o].0, states[i].0
                                ),
                            ));
                        }
                    }
                }
            }
            let charge = charge.ok_or_else(|| bad(&op, "a non-zero matrix".into()))?;
            ops.push(Operator {
                name: op,
                dim: d,
                matrix,
                charge,
            });
        }
        Ok(Self {
            name: name.to_string(),
            states,
            operators: ops,
        })
    }

    /// The site type's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The local dimension.
    pub fn dim(&self) -> usize {
        self.states.len()
    }

    /// The basis states: label and charge, in dense order.
    pub fn states(&self) -> &[(String, S)] {
        &self.states
    }

    /// The charge of basis state `state`.
    pub fn charge_of(&self, state: usize) -> &S {
        &self.states[state].1
    }

    /// The physical leg (`In`): one segment per charge, in basis order.
    pub fn physical_leg(&self) -> Result<Leg<S>> {
        let mut segments: Vec<(S, usize)> = Vec::new();
        for (_, q) in &self.states {
            match segments.last_mut() {
                Some((last, n)) if last == q => *n += 1,
                _ => segments.push((q.clone(), 1)),
            }
        }
        Ok(Leg::new(Direction::In, segments)?)
    }

    /// The operator named `name`, or [`Error::UnknownOperator`] listing the known names.
    pub fn operator(&self, name: &str) -> Result<&Operator<S>> {
        self.operators
            .iter()
            .find(|o| o.name == name)
            .ok_or_else(|| Error::UnknownOperator {
                site_type: self.name.clone(),
                name: name.to_string(),
                known: self.operator_names().join(", "),
            })
    }

    /// The operator named `name` as a tensor on this site's physical leg, for measurements
    /// ([`crate::observables`]); [`Error::UnknownOperator`] as [`operator`](Self::operator).
    ///
    /// ```
    /// use tessera_mps::sites::Site;
    /// let sz = Site::spin_half().local_operator("Sz")?;
    /// assert_eq!(sz.tensor().to_dense()?, [-0.5, 0.0, 0.0, 0.5]);
    /// # Ok::<(), tessera_mps::Error>(())
    /// ```
    pub fn local_operator(&self, name: &str) -> Result<LocalOperator<S>> {
        let op = self.operator(name)?;
        let d = self.dim();
        // The tensor's dense layout is column-major over its legs `(o, i)`.
        let mut dense = vec![0.0; d * d];
        for o in 0..d {
            for i in 0..d {
                dense[o + d * i] = op.get(o, i);
            }
        }
        LocalOperator::from_dense(&self.physical_leg()?, op.charge().clone(), &dense)
    }

    /// The operators' names.
    pub fn operator_names(&self) -> Vec<&str> {
        self.operators.iter().map(|o| o.name.as_str()).collect()
    }

    /// The operators.
    pub fn operators(&self) -> &[Operator<S>] {
        &self.operators
    }
}

/// Named operators of a spin `S = (d - 1) / 2` in the basis `m = -S, ..., S`.
fn spin_operators(d: usize) -> Vec<(String, Vec<f64>)> {
    let s = (d as f64 - 1.0) / 2.0;
    let m = |k: usize| k as f64 - s;
    let raise = |k: usize| (s * (s + 1.0) - m(k) * (m(k) + 1.0)).sqrt();
    vec![
        (
            "Sz".into(),
            dense(d, |o, i| if o == i { m(i) } else { 0.0 }),
        ),
        (
            "Sp".into(),
            dense(d, |o, i| if o == i + 1 { raise(i) } else { 0.0 }),
        ),
        (
            "Sm".into(),
            dense(d, |o, i| if i == o + 1 { raise(o) } else { 0.0 }),
        ),
    ]
}

impl Site<U1> {
    /// Spin 1/2 with U(1) charge `2 Sz`: basis `[down, up]`, operators `Id`, `Sz`, `Sp`,
    /// `Sm`.
    pub fn spin_half() -> Self {
        Self::new(
            "spin-1/2",
            vec![("down".into(), U1(-1)), ("up".into(), U1(1))],
            spin_operators(2),
        )
        .expect("the spin-1/2 operators conserve 2 Sz")
    }

    /// Spin 1 with U(1) charge `2 Sz`: basis `[-1, 0, +1]`, operators `Id`, `Sz`, `Sp`,
    /// `Sm`.
    pub fn spin_one() -> Self {
        Self::new(
            "spin-1",
            vec![
                ("-1".into(), U1(-2)),
                ("0".into(), U1(0)),
                ("+1".into(), U1(2)),
            ],
            spin_operators(3),
        )
        .expect("the spin-1 operators conserve 2 Sz")
    }
}

/// Spinless-fermion operators on `[empty, occupied]`.
fn spinless_operators() -> Vec<(String, Vec<f64>)> {
    vec![
        ("N".into(), vec![0.0, 0.0, 0.0, 1.0]),
        ("C".into(), vec![0.0, 1.0, 0.0, 0.0]),
        ("Cdag".into(), vec![0.0, 0.0, 1.0, 0.0]),
    ]
}

impl Site<FermionicU1> {
    /// A spinless fermion with U(1) particle number graded by parity: basis `[empty,
    /// occupied]`, operators `Id`, `N`, `C`, `Cdag` (`C` and `Cdag` odd).
    pub fn spinless_fermion() -> Self {
        Self::new(
            "spinless fermion",
            vec![
                ("empty".into(), fermion_charge(0)),
                ("occupied".into(), fermion_charge(1)),
            ],
            spinless_operators(),
        )
        .expect("the spinless operators conserve N")
    }
}

/// Electron operators on `[0, up, dn, up dn]` with `|up dn> = c_up^+ c_dn^+ |0>`.
fn electron_operators() -> Vec<(String, Vec<f64>)> {
    let at = |entries: &[(usize, usize, f64)]| {
        let mut m = vec![0.0; 16];
        for &(o, i, v) in entries {
            m[o * 4 + i] = v;
        }
        m
    };
    let cdag_up = at(&[(1, 0, 1.0), (3, 2, 1.0)]);
    // c_dn^+ |up> = c_dn^+ c_up^+ |0> = -|up dn>.
    let cdag_dn = at(&[(2, 0, 1.0), (3, 1, -1.0)]);
    let t = |m: &[f64]| dense(4, |o, i| m[i * 4 + o]);
    let (c_up, c_dn) = (t(&cdag_up), t(&cdag_dn));
    let n_up = product(4, &cdag_up, &c_up);
    let n_dn = product(4, &cdag_dn, &c_dn);
    let n_tot: Vec<f64> = n_up.iter().zip(&n_dn).map(|(a, b)| a + b).collect();
    let double = product(4, &n_up, &n_dn);
    let sz: Vec<f64> = n_up.iter().zip(&n_dn).map(|(a, b)| 0.5 * (a - b)).collect();
    let sp = product(4, &cdag_up, &c_dn);
    let sm = product(4, &cdag_dn, &c_up);
    vec![
        ("Cup".into(), c_up),
        ("Cdn".into(), c_dn),
        ("Cdagup".into(), cdag_up),
        ("Cdagdn".into(), cdag_dn),
        ("Nup".into(), n_up),
        ("Ndn".into(), n_dn),
        ("Ntot".into(), n_tot),
        ("NupNdn".into(), double),
        ("Sz".into(), sz),
        ("Sp".into(), sp),
        ("Sm".into(), sm),
    ]
}

/// The electron basis labels.
const ELECTRON_STATES: [&str; 4] = ["empty", "up", "down", "up down"];

impl Site<ElectronCharge> {
    /// A spinful electron with U(1) N x U(1) 2Sz graded by parity: basis `[empty, up,
    /// down, up down]` (`|up down> = c_up^+ c_dn^+ |0>`), operators `Id`, `Cup`, `Cdn`,
    /// `Cdagup`, `Cdagdn` (odd), `Nup`, `Ndn`, `Ntot`, `NupNdn`, `Sz`, `Sp`, `Sm`.
    pub fn electron() -> Self {
        let charges = [
            electron_charge(0, 0),
            electron_charge(1, 1),
            electron_charge(1, -1),
            electron_charge(2, 0),
        ];
        Self::new(
            "electron",
            ELECTRON_STATES
                .iter()
                .zip(charges)
                .map(|(l, q)| ((*l).to_string(), q))
                .collect(),
            electron_operators(),
        )
        .expect("the electron operators conserve N and Sz")
    }
}

impl Site<FermionParity> {
    /// A spinless fermion with fermion parity only (for Hamiltonians that do not conserve
    /// N): basis `[empty, occupied]`, the operators of [`Site::spinless_fermion`].
    pub fn spinless_fermion_parity() -> Self {
        Self::new(
            "spinless fermion (parity)",
            vec![
                ("empty".into(), FermionParity::EVEN),
                ("occupied".into(), FermionParity::ODD),
            ],
            spinless_operators(),
        )
        .expect("the spinless operators have a parity")
    }

    /// A spinful electron with fermion parity only: basis `[empty, up down, up, down]`
    /// (even states first), the operators of [`Site::electron`].
    pub fn electron_parity() -> Self {
        // New index k holds old state ORDER[k].
        const ORDER: [usize; 4] = [0, 3, 1, 2];
        let parity = [false, true, true, false];
        let states = ORDER
            .iter()
            .map(|&k| {
                (
                    ELECTRON_STATES[k].to_string(),
                    FermionParity::new(parity[k]),
                )
            })
            .collect();
        let ops = electron_operators()
            .into_iter()
            .map(|(n, m)| (n, dense(4, |o, i| m[ORDER[o] * 4 + ORDER[i]])))
            .collect();
        Self::new("electron (parity)", states, ops).expect("the electron operators have a parity")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anticommutator<S: AbelianSector>(site: &Site<S>, a: &str, b: &str) -> Vec<f64> {
        let d = site.dim();
        let (a, b) = (site.operator(a).unwrap(), site.operator(b).unwrap());
        let ab = product(d, a.matrix(), b.matrix());
        let ba = product(d, b.matrix(), a.matrix());
        ab.iter().zip(&ba).map(|(x, y)| x + y).collect()
    }

    fn commutator<S: AbelianSector>(site: &Site<S>, a: &str, b: &str) -> Vec<f64> {
        let d = site.dim();
        let (a, b) = (site.operator(a).unwrap(), site.operator(b).unwrap());
        let ab = product(d, a.matrix(), b.matrix());
        let ba = product(d, b.matrix(), a.matrix());
        ab.iter().zip(&ba).map(|(x, y)| x - y).collect()
    }

    fn identity(d: usize, scale: f64) -> Vec<f64> {
        dense(d, |o, i| if o == i { scale } else { 0.0 })
    }

    #[test]
    fn spin_operators_satisfy_the_su2_algebra() {
        for site in [Site::spin_half(), Site::spin_one()] {
            let d = site.dim();
            // [Sp, Sm] = 2 Sz, [Sz, Sp] = Sp.
            let two_sz: Vec<f64> = site
                .operator("Sz")
                .unwrap()
                .matrix()
                .iter()
                .map(|x| 2.0 * x)
                .collect();
            let cpm = commutator(&site, "Sp", "Sm");
            for (x, y) in cpm.iter().zip(&two_sz) {
                assert!((x - y).abs() < 1e-14, "{}: [Sp, Sm] = {cpm:?}", site.name());
            }
            let sp = site.operator("Sp").unwrap().matrix().to_vec();
            let czp = commutator(&site, "Sz", "Sp");
            for (x, y) in czp.iter().zip(&sp) {
                assert!((x - y).abs() < 1e-15);
            }
            // S^2 = S (S + 1): Sz^2 + (Sp Sm + Sm Sp) / 2.
            let s = (d as f64 - 1.0) / 2.0;
            let sz = site.operator("Sz").unwrap().matrix();
            let spm = product(d, &sp, site.operator("Sm").unwrap().matrix());
            let smp = product(d, site.operator("Sm").unwrap().matrix(), &sp);
            let sz2 = product(d, sz, sz);
            let want = identity(d, s * (s + 1.0));
            for k in 0..d * d {
                assert!((sz2[k] + 0.5 * (spm[k] + smp[k]) - want[k]).abs() < 1e-14);
            }
            assert_eq!(site.operator("Sp").unwrap().charge(), &U1(2));
            assert!(!site.operator("Sp").unwrap().is_fermionic());
        }
    }

    fn check_electron<S: AbelianSector>(site: &Site<S>) {
        let names = ["Cup", "Cdn"];
        for (x, a) in names.iter().enumerate() {
            for (y, b) in names.iter().enumerate() {
                let dag = format!("Cdag{}", &b[1..]);
                let want = identity(4, f64::from(u8::from(x == y)));
                assert_eq!(anticommutator(site, a, &dag), want, "{{{a}, {dag}}}");
                assert_eq!(anticommutator(site, a, b), vec![0.0; 16], "{{{a}, {b}}}");
                assert!(site.operator(a).unwrap().is_fermionic());
            }
        }
        let nn = product(
            4,
            site.operator("Nup").unwrap().matrix(),
            site.operator("Ndn").unwrap().matrix(),
        );
        assert_eq!(nn, site.operator("NupNdn").unwrap().matrix());
        assert!(!site.operator("Sp").unwrap().is_fermionic());
    }

    #[test]
    fn fermion_operators_satisfy_the_canonical_anticommutation_relations() {
        check_electron(&Site::electron());
        check_electron(&Site::electron_parity());
        let site = Site::spinless_fermion();
        assert_eq!(anticommutator(&site, "C", "Cdag"), identity(2, 1.0));
        assert_eq!(site.operator("Cdag").unwrap().charge(), &fermion_charge(1));
        let p = Site::spinless_fermion_parity();
        assert_eq!(anticommutator(&p, "C", "Cdag"), identity(2, 1.0));
        let e = Site::electron();
        assert_eq!(
            e.operator("Cdagdn").unwrap().charge(),
            &electron_charge(1, -1)
        );
        assert_eq!(e.physical_leg().unwrap().num_segments(), 4);
        assert_eq!(
            Site::electron_parity()
                .physical_leg()
                .unwrap()
                .num_segments(),
            2
        );
    }

    #[test]
    fn ill_formed_sites_and_unknown_operators_are_refused() {
        let e = Site::spin_half().operator("Sx").unwrap_err();
        assert!(
            matches!(&e, Error::UnknownOperator { known, .. } if known.contains("Sp")),
            "{e}"
        );
        let states = || vec![("a".to_string(), U1(0)), ("b".to_string(), U1(1))];
        // An element of each charge: no definite charge.
        let e = Site::new("x", states(), vec![("X".into(), vec![0.0, 1.0, 1.0, 0.0])]).unwrap_err();
        assert!(e.to_string().contains("one charge"), "{e}");
        let e = Site::new("x", states(), vec![("X".into(), vec![1.0; 3])]).unwrap_err();
        assert!(e.to_string().contains("2x2"), "{e}");
        let e = Site::new("x", states(), vec![("X".into(), vec![0.0; 4])]).unwrap_err();
        assert!(e.to_string().contains("non-zero"), "{e}");
        let split = vec![
            ("a".to_string(), U1(0)),
            ("b".to_string(), U1(1)),
            ("c".to_string(), U1(0)),
        ];
        let e = Site::new("x", split, vec![]).unwrap_err();
        assert!(e.to_string().contains("contiguous"), "{e}");
    }
}
