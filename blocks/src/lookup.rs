//! Looking blocks and coupled sectors up by their charges.
//!
//! Owns: [`BlockStructure::block_of`] (a block by the charge of each leg) and
//! [`BlockStructure::sector_of`] (a coupled sector by its coupled charge). Invariant: a
//! lookup either names exactly one present block or sector, or is a typed error that says
//! which charges were asked and which exist; it never falls back to a position.

use crate::error::Error;
use crate::sector::AbelianSector;
use crate::structure::BlockStructure;

/// At most this many present charge tuples are listed in a lookup error.
const LISTED: usize = 8;

/// `Display` forms, comma-separated.
fn list<'a, S: std::fmt::Display + 'a>(items: impl IntoIterator<Item = &'a S>) -> String {
    items
        .into_iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl<S: AbelianSector> BlockStructure<S> {
    /// The id of the present block whose legs carry these charges (one per leg, in leg
    /// order), for legs that carry each charge in one segment.
    ///
    /// ```
    /// use tessera_blocks::{BlockStructure, Direction, Leg, U1};
    ///
    /// let v = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)])?;
    /// let s = BlockStructure::new([v.clone()], [v.dual()], U1(0))?;
    /// let id = s.block_of(&[U1(1), U1(1)])?; // the 3 x 3 block of charge 1
    /// assert_eq!(s.block(id).map(|b| b.shape().to_vec()), Some(vec![3, 3]));
    /// let err = s.block_of(&[U1(0), U1(1)]).unwrap_err();
    /// assert!(err.to_string().contains("(U1(0), U1(0)), (U1(1), U1(1))"), "{err}");
    /// # Ok::<(), tessera_blocks::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ArityMismatch`] unless there is one charge per leg;
    /// [`Error::AmbiguousSector`] when a leg carries a charge in several segments (look the
    /// block up by segments then: [`block_id`](Self::block_id));
    /// [`Error::NoBlockWithCharges`] when a leg does not carry its charge (the error lists
    /// the leg's charges) or the charges name no present block (it lists the present
    /// blocks' charges, the first few).
    pub fn block_of(&self, charges: &[S]) -> Result<usize, Error> {
        let legs = self.legs();
        if charges.len() != legs.len() {
            return Err(Error::ArityMismatch {
                expected: legs.len(),
                given: charges.len(),
            });
        }
        let asked = || list(charges);
        let mut segments = Vec::with_capacity(legs.len());
        for (k, (leg, c)) in legs.iter().zip(charges).enumerate() {
            let mut found = leg.segments_of(c);
            let Some(first) = found.next() else {
                return Err(Error::NoBlockWithCharges {
                    asked: asked(),
                    reason: format!(
                        "leg {k} carries no charge {c}; it carries {}",
                        list(leg.segments().iter().map(|s| &s.sector))
                    ),
                });
            };
            if found.next().is_some() {
                return Err(Error::AmbiguousSector {
                    leg: k,
                    sector: c.to_string(),
                });
            }
            segments.push(first);
        }
        self.block_id(&segments).ok_or_else(|| {
            let present: Vec<String> = self
                .blocks()
                .take(LISTED)
                .map(|b| format!("({})", list(b.sectors())))
                .collect();
            let more = self.num_blocks().saturating_sub(LISTED);
            let tail = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            Error::NoBlockWithCharges {
                asked: asked(),
                reason: if present.is_empty() {
                    "name no block: the structure has none".into()
                } else {
                    format!(
                        "name no present block; the present blocks have {}{tail}",
                        present.join(", ")
                    )
                },
            }
        })
    }

    /// The index (into [`sectors`](Self::sectors)) of the coupled sector whose codomain
    /// charges fuse to `charge`, the index the coalesced views and the per-sector
    /// factorizations take.
    ///
    /// ```
    /// use tessera_blocks::{BlockStructure, Direction, Leg, U1};
    ///
    /// let v = Leg::new(Direction::In, [(U1(0), 2), (U1(1), 3)])?;
    /// let s = BlockStructure::new([v.clone()], [v.dual()], U1(0))?;
    /// assert_eq!(s.sector_of(&U1(1))?, 1);
    /// assert!(s.sector_of(&U1(7)).unwrap_err().to_string().contains("one of U1(0), U1(1)"));
    /// # Ok::<(), tessera_blocks::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoSectorWithCharge`] when no coupled sector has that charge (it lists the
    /// charges that have one).
    pub fn sector_of(&self, charge: &S) -> Result<usize, Error> {
        self.sector_index(charge)
            .ok_or_else(|| Error::NoSectorWithCharge {
                asked: charge.to_string(),
                present: list(self.sectors().iter().map(|c| c.sector())),
            })
    }
}

#[cfg(test)]
mod tests {
    use crate::{BlockStructure, Direction, Error, FermionParity, Leg, U1};

    fn structure() -> BlockStructure<U1> {
        let v = Leg::new(Direction::In, [(U1(-1), 2), (U1(0), 3), (U1(1), 1)]).unwrap();
        let p = Leg::new(Direction::In, [(U1(-1), 1), (U1(1), 1)]).unwrap();
        BlockStructure::new([v.clone(), p], [v.dual()], U1(0)).unwrap()
    }

    #[test]
    fn every_block_and_sector_is_found_by_its_charges() {
        let s = structure();
        for b in s.blocks() {
            assert_eq!(s.block_of(b.sectors()), Ok(b.id()));
        }
        for (i, c) in s.sectors().iter().enumerate() {
            assert_eq!(s.sector_of(c.sector()), Ok(i));
        }
        let fp = Leg::new(
            Direction::In,
            [(FermionParity::EVEN, 2), (FermionParity::ODD, 1)],
        )
        .unwrap();
        let f = BlockStructure::new([fp.clone()], [fp.dual()], FermionParity::EVEN).unwrap();
        assert_eq!(
            f.block_of(&[FermionParity::ODD, FermionParity::ODD]),
            Ok(f.sector_of(&FermionParity::ODD).unwrap())
        );
    }

    #[test]
    fn charges_that_name_nothing_are_typed_errors_that_list_what_exists() {
        let s = structure();
        // Wrong arity.
        assert_eq!(
            s.block_of(&[U1(0)]),
            Err(Error::ArityMismatch {
                expected: 3,
                given: 1
            })
        );
        // A charge the leg does not carry: the leg's charges are listed.
        let Err(Error::NoBlockWithCharges { asked, reason }) = s.block_of(&[U1(0), U1(5), U1(0)])
        else {
            panic!("expected NoBlockWithCharges")
        };
        assert_eq!(asked, "U1(0), U1(5), U1(0)");
        assert!(
            reason.contains("leg 1 carries no charge U1(5); it carries U1(-1), U1(1)"),
            "{reason}"
        );
        // Charges every leg carries that break the flux: the present blocks are listed.
        let err = s.block_of(&[U1(0), U1(1), U1(0)]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("(U1(0), U1(1), U1(0))"), "{text}");
        assert!(
            text.contains("the present blocks have (U1(0), U1(-1), U1(-1))"),
            "{text}"
        );
        // A coupled charge with no sector.
        assert_eq!(
            s.sector_of(&U1(4)),
            Err(Error::NoSectorWithCharge {
                asked: "U1(4)".into(),
                present: "U1(-1), U1(0), U1(1)".into()
            })
        );
    }

    #[test]
    fn a_charge_in_several_segments_of_a_leg_is_ambiguous() {
        let v = Leg::tiled(Direction::In, [(U1(0), 2), (U1(0), 1)]).unwrap();
        let s = BlockStructure::new([v.clone()], [v.dual()], U1(0)).unwrap();
        assert_eq!(
            s.block_of(&[U1(0), U1(0)]),
            Err(Error::AmbiguousSector {
                leg: 0,
                sector: "U1(0)".into()
            })
        );
    }
}
