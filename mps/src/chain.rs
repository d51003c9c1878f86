//! The chain containers: a matrix product state and a matrix product operator.
//!
//! Owns: [`Mps`] and [`Mpo`]. Invariant: every tensor follows the crate's leg conventions
//! (see the crate docs): the constructors check the directions, the fluxes, the edges and
//! that neighbouring bonds are each other's duals, and nothing hands out a mutable tensor,
//! so a chain that exists is well formed.

use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure, Direction, Leg};

use crate::{Error, Result};

/// The directions of an MPS tensor's legs `(k, s, r)`.
const MPS_DIRECTIONS: [Direction; 3] = [Direction::In, Direction::In, Direction::Out];
/// The directions of an MPO tensor's legs `(a, o, i, b)`.
const MPO_DIRECTIONS: [Direction; 4] =
    [Direction::In, Direction::In, Direction::Out, Direction::Out];

/// A leg as its direction and `sector x dim` segments, for error messages.
pub(crate) fn describe<S: AbelianSector>(leg: &Leg<S>) -> String {
    let segments: Vec<String> = leg
        .segments()
        .iter()
        .map(|s| format!("{}x{}", s.sector, s.dim))
        .collect();
    format!("{:?} [{}]", leg.direction(), segments.join(", "))
}

/// Checks the legs shared by both chains: the directions, a trivial flux, and that each
/// tensor's last leg is the dual of the next tensor's first.
fn check_links<S: AbelianSector>(
    chain: &'static str,
    tensors: &[AsyncArray<f64, S>],
    directions: &[Direction],
) -> Result<()> {
    let error = |site, expected: String, found: String| Error::Chain {
        chain,
        site,
        expected,
        found,
    };
    if tensors.is_empty() {
        return Err(error(0, "at least one tensor".into(), "none".into()));
    }
    for (site, t) in tensors.iter().enumerate() {
        let s = t.structure();
        let found: Vec<Direction> = s.legs().iter().map(Leg::direction).collect();
        if found != directions {
            return Err(error(
                site,
                format!("legs with directions {directions:?}"),
                format!("{found:?}"),
            ));
        }
        if !s.flux().is_trivial() {
            return Err(error(
                site,
                format!("the trivial flux {}", S::trivial()),
                format!("flux {}", s.flux()),
            ));
        }
        if let Some(next) = tensors.get(site + 1) {
            let (right, left) = (&s.legs()[directions.len() - 1], &next.structure().legs()[0]);
            if *right != left.dual() {
                return Err(error(
                    site,
                    format!(
                        "a right bond dual to site {}'s left bond {}",
                        site + 1,
                        describe(left)
                    ),
                    describe(right),
                ));
            }
        }
    }
    Ok(())
}

/// Whether `leg` is one-dimensional with the trivial sector.
fn is_trivial_edge<S: AbelianSector>(leg: &Leg<S>) -> bool {
    leg.dim() == 1 && leg.segments()[0].sector.is_trivial()
}

/// A matrix product state: one tensor `A_i(k In, s In, r Out)` per site, trivial fluxes, a
/// one-dimensional trivial left edge and a one-dimensional right edge carrying the total
/// charge.
#[derive(Debug)]
pub struct Mps<S: AbelianSector> {
    tensors: Vec<AsyncArray<f64, S>>,
}

impl<S: AbelianSector> Mps<S> {
    /// The chain of `tensors`, or [`Error::Chain`] naming the first site that breaks the
    /// conventions.
    pub fn new(tensors: Vec<AsyncArray<f64, S>>) -> Result<Self> {
        check_links("MPS", &tensors, &MPS_DIRECTIONS)?;
        let left = &tensors[0].structure().legs()[0];
        if !is_trivial_edge(left) {
            return Err(Error::Chain {
                chain: "MPS",
                site: 0,
                expected: format!("a one-dimensional left edge with sector {}", S::trivial()),
                found: describe(left),
            });
        }
        let last = tensors.len() - 1;
        let right = &tensors[last].structure().legs()[2];
        if right.dim() != 1 {
            return Err(Error::Chain {
                chain: "MPS",
                site: last,
                expected: "a one-dimensional right edge".into(),
                found: describe(right),
            });
        }
        Ok(Self { tensors })
    }

    /// The product state with site `i` in the basis state `states[i]` (a dense index on
    /// `physical[i]`, an `In` leg): bond dimension 1, every tensor both a left and a right
    /// isometry, the charges accumulated left to right.
    pub fn product_state(physical: &[Leg<S>], states: &[usize]) -> Result<Self> {
        if physical.len() != states.len() {
            return Err(Error::Chain {
                chain: "MPS",
                site: physical.len().min(states.len()),
                expected: format!("one basis state per site ({} sites)", physical.len()),
                found: format!("{} states", states.len()),
            });
        }
        let mut charge = S::trivial();
        let mut tensors = Vec::with_capacity(states.len());
        for (site, (p, &state)) in physical.iter().zip(states).enumerate() {
            if p.direction() != Direction::In || state >= p.dim() {
                return Err(Error::Chain {
                    chain: "MPS",
                    site,
                    expected: "an In physical leg and a state below its dimension".into(),
                    found: format!("state {state} on {}", describe(p)),
                });
            }
            // The sector of the segment that holds `state`.
            let mut start = 0;
            let q = p
                .segments()
                .iter()
                .find(|seg| {
                    start += seg.dim;
                    state < start
                })
                .map(|seg| seg.sector.clone())
                .expect("a state below the dimension lies in a segment");
            let next = charge.fuse_abelian(&q);
            let l = Leg::new(Direction::In, [(charge, 1)])?;
            let r = Leg::new(Direction::Out, [(next.clone(), 1)])?;
            let s = BlockStructure::new([l, p.clone()], [r], S::trivial())?;
            // Dense (1, dim, 1), column-major: the basis state is element `state`.
            let mut dense = vec![0.0; p.dim()];
            dense[state] = 1.0;
            tensors.push(AsyncArray::from_dense(s, &dense)?);
            charge = next;
        }
        Self::new(tensors)
    }

    /// A deep copy (new allocations, the values as of every pending write).
    pub fn duplicate(&self) -> Self {
        Self {
            tensors: self.tensors.iter().map(AsyncArray::duplicate).collect(),
        }
    }

    /// The number of sites.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Always `false`: a chain has at least one site.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The tensors, site by site.
    pub fn tensors(&self) -> &[AsyncArray<f64, S>] {
        &self.tensors
    }

    /// The tensors, to be changed and checked again by [`Mps::new`].
    pub fn into_tensors(self) -> Vec<AsyncArray<f64, S>> {
        self.tensors
    }

    /// The total charge: the sector of the right edge.
    pub fn charge(&self) -> S {
        self.tensors[self.len() - 1].structure().legs()[2].segments()[0]
            .sector
            .clone()
    }

    /// The physical leg of site `i` (`In`), or `None` past the end.
    pub fn physical_leg(&self, i: usize) -> Option<&Leg<S>> {
        self.tensors.get(i).map(|a| &a.structure().legs()[1])
    }
}

/// A matrix product operator: one tensor `W_i(a In, o In, i Out, b Out)` per site with
/// `W[a, o, i, b] = <o|O_ab|i>`, trivial fluxes and one-dimensional trivial edges.
#[derive(Debug)]
pub struct Mpo<S: AbelianSector> {
    tensors: Vec<AsyncArray<f64, S>>,
}

impl<S: AbelianSector> Mpo<S> {
    /// The chain of `tensors`, or [`Error::Chain`] naming the first site that breaks the
    /// conventions (each tensor's input leg must be the dual of its output leg).
    pub fn new(tensors: Vec<AsyncArray<f64, S>>) -> Result<Self> {
        check_links("MPO", &tensors, &MPO_DIRECTIONS)?;
        for (site, w) in tensors.iter().enumerate() {
            let legs = w.structure().legs();
            if legs[2] != legs[1].dual() {
                return Err(Error::Chain {
                    chain: "MPO",
                    site,
                    expected: format!("an input leg dual to the output leg {}", describe(&legs[1])),
                    found: describe(&legs[2]),
                });
            }
        }
        let last = tensors.len() - 1;
        for (site, leg) in [(0, 0), (last, 3)] {
            let edge = &tensors[site].structure().legs()[leg];
            if !is_trivial_edge(edge) {
                return Err(Error::Chain {
                    chain: "MPO",
                    site,
                    expected: format!("a one-dimensional edge with sector {}", S::trivial()),
                    found: describe(edge),
                });
            }
        }
        Ok(Self { tensors })
    }

    /// A deep copy (new allocations, the values as of every pending write).
    pub fn duplicate(&self) -> Self {
        Self {
            tensors: self.tensors.iter().map(AsyncArray::duplicate).collect(),
        }
    }

    /// The number of sites.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Always `false`: a chain has at least one site.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The tensors, site by site.
    pub fn tensors(&self) -> &[AsyncArray<f64, S>] {
        &self.tensors
    }

    /// The physical (output, `In`) leg of site `i`, or `None` past the end.
    pub fn physical_leg(&self, i: usize) -> Option<&Leg<S>> {
        self.tensors.get(i).map(|w| &w.structure().legs()[1])
    }

    /// The largest bond dimension.
    pub fn max_bond(&self) -> usize {
        self.tensors
            .iter()
            .map(|w| w.structure().legs()[3].dim())
            .max()
            .unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_blocks::U1;

    fn spin() -> Leg<U1> {
        Leg::new(Direction::In, [(U1(-1), 1), (U1(1), 1)]).unwrap()
    }

    #[test]
    fn a_product_state_accumulates_its_charge_and_reads_back_its_basis_states() {
        let p = vec![spin(); 4];
        let mps = Mps::product_state(&p, &[1, 0, 1, 1]).unwrap();
        assert_eq!(mps.len(), 4);
        assert_eq!(mps.charge(), U1(2));
        for (a, s) in mps.tensors().iter().zip([1, 0, 1, 1]) {
            let mut want = vec![0.0; 2];
            want[s] = 1.0;
            assert_eq!(a.to_dense().unwrap(), want);
        }
    }

    #[test]
    fn broken_chains_are_refused_with_the_site_and_what_was_found() {
        let p = vec![spin(); 3];
        let mps = Mps::product_state(&p, &[1, 0, 1]).unwrap();
        let mut t = mps.into_tensors();
        t.swap(1, 2);
        let e = Mps::new(t).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Chain {
                    chain: "MPS",
                    site: 0,
                    ..
                }
            ),
            "{e}"
        );
        let e = Mps::product_state(&p, &[1, 2, 0]).unwrap_err();
        assert!(e.to_string().contains("state 2"), "{e}");
        let e = Mps::<U1>::new(Vec::new()).unwrap_err();
        assert!(e.to_string().contains("at least one tensor"), "{e}");
        // An MPS tensor is not an MPO tensor.
        let a = Mps::product_state(&p, &[1, 0, 1]).unwrap().into_tensors();
        let e = Mpo::new(a).unwrap_err();
        assert!(e.to_string().contains("directions"), "{e}");
    }

    #[test]
    fn an_identity_mpo_is_accepted_and_a_charged_edge_is_not() {
        let p = spin();
        let edge = |d, q| Leg::new(d, [(U1(q), 1)]).unwrap();
        let identity = |left: i32| {
            let s = BlockStructure::new(
                [edge(Direction::In, left), p.clone()],
                [p.dual(), edge(Direction::Out, left)],
                U1(0),
            )
            .unwrap();
            AsyncArray::<f64, U1>::from_dense(s, &[1.0, 0.0, 0.0, 1.0]).unwrap()
        };
        let mpo = Mpo::new(vec![identity(0), identity(0)]).unwrap();
        assert_eq!((mpo.len(), mpo.max_bond()), (2, 1));
        let e = Mpo::new(vec![identity(2), identity(2)]).unwrap_err();
        assert!(e.to_string().contains("one-dimensional edge"), "{e}");
    }
}
