//! Operator sums: a Hamiltonian written as a sum of coefficients times products of named
//! on-site operators.
//!
//! Owns: [`Terms`], [`Term`] and the site-ordered form of a term, [`Placed`]. Invariant:
//! every term a `Terms` holds names operators of its site type, on sites of the chain, whose
//! charges fuse to the trivial charge ([`Terms::add`] checks all three), so every consumer
//! (the [MPO builder](crate::mpo), [exact diagonalisation](crate::exact)) may build it
//! without checking again.
//!
//! Operators are written in any site order, as operator products: `[("C", 3), ("Cdag",
//! 1)]` is `c_3 c_1^+`. No Jordan-Wigner string is written: [`Terms::placed`] brings a
//! product into site order with the sign of every two odd operators it swaps, and the graded
//! legs of the MPO supply the strings.
//!
//! ```
//! use tessera_mps::sites::Site;
//! use tessera_mps::terms::Terms;
//!
//! let mut h = Terms::new(Site::spinless_fermion(), 4)?;
//! h.add(-1.0, [("Cdag", 0), ("C", 1)])?;
//! h.add(-1.0, [("Cdag", 1), ("C", 0)])?; // c_1^+ c_0 = -c_0 c_1^+: reordered, sign -1
//! assert_eq!(h.placed()[1].coefficient, 1.0);
//! assert!(h.add(1.0, [("Cdag", 0)]).is_err()); // changes N
//! assert!(h.add(1.0, [("N", 4)]).is_err()); // past the end
//! # Ok::<(), tessera_mps::Error>(())
//! ```

use std::fmt;

use tessera_blocks::AbelianSector;

use crate::sites::Site;
use crate::{Error, Result};

/// One term as written: a coefficient times the product of named operators at sites, in the
/// order given (the rightmost acts first).
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    /// The coefficient.
    pub coefficient: f64,
    /// `(operator name, site)`, in product order.
    pub operators: Vec<(String, usize)>,
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.coefficient)?;
        for (name, site) in &self.operators {
            write!(f, " {name}({site})")?;
        }
        Ok(())
    }
}

/// One factor of a site-ordered term: the product of a term's operators on one site.
#[derive(Clone, Debug, PartialEq)]
pub struct Factor {
    /// The site.
    pub site: usize,
    /// The operator names multiplied on the site, joined by `*` (a key: equal keys on one
    /// site are equal operators).
    pub key: String,
    /// The product's matrix, row-major `d x d` (`[o * d + i] = <o|O|i>`).
    pub matrix: Vec<f64>,
}

/// A term in site order: `coefficient * factor_1 factor_2 ...`, sites strictly increasing,
/// identity factors dropped (a constant keeps one identity factor on site 0).
#[derive(Clone, Debug, PartialEq)]
pub struct Placed {
    /// The coefficient, with the sign of the reordering.
    pub coefficient: f64,
    /// The factors, by increasing site.
    pub factors: Vec<Factor>,
}

/// A sum of terms on an open chain of `len` sites of one site type.
#[derive(Clone, Debug, PartialEq)]
pub struct Terms<S> {
    site: Site<S>,
    len: usize,
    terms: Vec<Term>,
}

impl<S: AbelianSector> Terms<S> {
    /// An empty sum on `len` sites of type `site`; [`Error::Chain`] for no site.
    pub fn new(site: Site<S>, len: usize) -> Result<Self> {
        if len == 0 {
            return Err(Error::Chain {
                chain: "MPO",
                site: 0,
                expected: "at least one site".into(),
                found: "0 sites".into(),
            });
        }
        Ok(Self {
            site,
            len,
            terms: Vec::new(),
        })
    }

    /// Adds `coefficient` times the product of `operators` (`(name, site)`, rightmost acting
    /// first). [`Error::UnknownOperator`], [`Error::SiteOutOfRange`] or
    /// [`Error::ChargeViolation`] (nothing added) for an unknown name, a site past the end,
    /// or a product whose charge is not trivial. An empty product is a constant.
    pub fn add<'a>(
        &mut self,
        coefficient: f64,
        operators: impl IntoIterator<Item = (&'a str, usize)>,
    ) -> Result<&mut Self> {
        let term = Term {
            coefficient,
            operators: operators
                .into_iter()
                .map(|(n, s)| (n.to_string(), s))
                .collect(),
        };
        let mut charge = S::trivial();
        for (name, site) in &term.operators {
            let op = self.site.operator(name)?;
            if *site >= self.len {
                return Err(Error::SiteOutOfRange {
                    term: term.to_string(),
                    site: *site,
                    len: self.len,
                });
            }
            charge = charge.fuse_abelian(op.charge());
        }
        if !charge.is_trivial() {
            return Err(Error::ChargeViolation {
                term: term.to_string(),
                charge: charge.to_string(),
            });
        }
        self.terms.push(term);
        Ok(self)
    }

    /// The site type.
    pub fn site(&self) -> &Site<S> {
        &self.site
    }

    /// The number of sites.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: a chain has at least one site.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The terms as written.
    pub fn terms(&self) -> &[Term] {
        &self.terms
    }

    /// The terms in site order (see [`Placed`]): each product sorted by site, stably, with
    /// `(-1)` for every two odd operators that cross, the operators of one site multiplied
    /// in their order; zero terms and zero products dropped.
    pub fn placed(&self) -> Vec<Placed> {
        let d = self.site.dim();
        let mut out = Vec::with_capacity(self.terms.len());
        for term in &self.terms {
            if term.coefficient == 0.0 {
                continue;
            }
            let ops: Vec<(usize, &str, bool)> = term
                .operators
                .iter()
                .map(|(n, s)| {
                    let op = self.site.operator(n).expect("checked by add");
                    (*s, n.as_str(), op.is_fermionic())
                })
                .collect();
            // The sign of the stable sort: every pair out of site order, both odd.
            let mut sign = 1.0;
            for (p, a) in ops.iter().enumerate() {
                for b in &ops[p + 1..] {
                    if a.0 > b.0 && a.2 && b.2 {
                        sign = -sign;
                    }
                }
            }
            let mut sorted = ops.clone();
            sorted.sort_by_key(|o| o.0);
            let mut factors: Vec<Factor> = Vec::new();
            for (site, name, _) in sorted {
                if name == "Id" {
                    continue;
                }
                let m = self.site.operator(name).expect("checked by add").matrix();
                match factors.last_mut() {
                    Some(f) if f.site == site => {
                        f.key = format!("{}*{name}", f.key);
                        f.matrix = (0..d * d)
                            .map(|k| {
                                let (o, i) = (k / d, k % d);
                                (0..d).map(|j| f.matrix[o * d + j] * m[j * d + i]).sum()
                            })
                            .collect();
                    }
                    _ => factors.push(Factor {
                        site,
                        key: name.to_string(),
                        matrix: m.to_vec(),
                    }),
                }
            }
            if factors.iter().any(|f| f.matrix.iter().all(|&x| x == 0.0)) {
                continue;
            }
            if factors.is_empty() {
                factors.push(Factor {
                    site: 0,
                    key: "Id".into(),
                    matrix: self
                        .site
                        .operator("Id")
                        .expect("every site")
                        .matrix()
                        .to_vec(),
                });
            }
            out.push(Placed {
                coefficient: sign * term.coefficient,
                factors,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sites::fermion_charge;
    use tessera_blocks::U1;

    #[test]
    fn odd_operators_pay_a_sign_for_each_crossing_and_even_ones_do_not() {
        let mut h = Terms::new(Site::electron(), 5).unwrap();
        // c_3up c_1up^+: one crossing of two odd operators.
        h.add(2.0, [("Cup", 3), ("Cdagup", 1)]).unwrap();
        // n_4 c_2dn^+ c_0dn: the even Ntot crosses two odd ones freely, the odd pair once.
        h.add(1.5, [("Ntot", 4), ("Cdagdn", 2), ("Cdn", 0)])
            .unwrap();
        // c_4up c_3dn c_1dn^+ c_0up^+: reversed, 6 crossings of odd pairs.
        h.add(1.0, [("Cup", 4), ("Cdn", 3), ("Cdagdn", 1), ("Cdagup", 0)])
            .unwrap();
        // c_2dn c_0up^+ c_2dn^+ c_1up: sites (2, 0, 2, 1) sorted to (0, 1, 2, 2).
        h.add(1.0, [("Cdn", 2), ("Cdagup", 0), ("Cdagdn", 2), ("Cup", 1)])
            .unwrap();
        let p = h.placed();
        assert_eq!(p[0].coefficient, -2.0);
        assert_eq!(
            p[0].factors.iter().map(|f| f.site).collect::<Vec<_>>(),
            vec![1, 3]
        );
        assert_eq!(p[1].coefficient, -1.5);
        assert_eq!(p[2].coefficient, 1.0);
        // Sorted (0: Cdagup) (1: Cup) (2: Cdn*Cdagdn); crossings: Cdn-Cdagup(0), Cdn-Cup(1),
        // Cdagdn(2)-Cup(1): three, sign -1.
        assert_eq!(p[3].coefficient, -1.0);
        assert_eq!(p[3].factors[2].key, "Cdn*Cdagdn");
        let sites: Vec<usize> = p[3].factors.iter().map(|f| f.site).collect();
        assert_eq!(sites, vec![0, 1, 2]);
    }

    #[test]
    fn spin_terms_are_reordered_without_sign_and_identities_dropped() {
        let mut h = Terms::new(Site::spin_half(), 3).unwrap();
        h.add(0.5, [("Sm", 2), ("Id", 1), ("Sp", 0)]).unwrap();
        h.add(0.0, [("Sz", 2)]).unwrap();
        h.add(3.0, []).unwrap();
        let p = h.placed();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].coefficient, 0.5);
        let keys: Vec<&str> = p[0].factors.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, vec!["Sp", "Sm"]);
        assert_eq!(p[1].factors[0].key, "Id");
    }

    #[test]
    fn misuse_is_refused_with_what_was_given() {
        let mut h = Terms::new(Site::spinless_fermion(), 3).unwrap();
        let e = h.add(1.0, [("Cdag", 0), ("C", 3)]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::SiteOutOfRange {
                    site: 3,
                    len: 3,
                    ..
                }
            ),
            "{e}"
        );
        let e = h.add(1.0, [("Sp", 0)]).unwrap_err();
        assert!(
            matches!(&e, Error::UnknownOperator { name, .. } if name == "Sp"),
            "{e}"
        );
        let e = h.add(1.0, [("Cdag", 0), ("Cdag", 1)]).unwrap_err();
        assert!(
            matches!(&e, Error::ChargeViolation { charge, .. } if *charge == fermion_charge(2).to_string()),
            "{e}"
        );
        assert!(h.terms().is_empty());
        let mut s = Terms::new(Site::spin_half(), 2).unwrap();
        let e = s.add(1.0, [("Sp", 0), ("Sp", 1)]).unwrap_err();
        assert!(e.to_string().contains(&U1(4).to_string()), "{e}");
        assert!(Terms::new(Site::spin_half(), 0).is_err());
    }
}
