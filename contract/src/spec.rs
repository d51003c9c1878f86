//! Contraction specs: which legs of two operands are contracted, and the output's legs.
//!
//! Owns: [`Spec`], parsed from einsum-style strings or built from tensordot axes. Invariant:
//! a spec that exists is a pairwise contraction: every label appears once per operand, each
//! is either contracted (on both operands, not in the output) or free (on one operand and in
//! the output), and the output split lies within the output's legs.

use crate::error::Error;
use std::fmt;

/// The most legs a [`Spec`] gives an operand or the output. A block-sparse tensor of that
/// many legs is far beyond any structure that can be enumerated; the limit keeps the spec's
/// checks (quadratic in the labels) and its label alphabet bounded.
pub const MAX_LEGS: usize = 1024;

/// A pairwise contraction by labels: `"abc,cd->abd"` contracts `c`; the output legs follow
/// the output's label order. A `|` in the output sets the codomain/domain split of the result
/// (`"abc,cd->a|bd"`: one codomain leg); without it the first as many output legs as `A` has
/// free legs form the codomain.
///
/// ```
/// use tessera_contract::Spec;
///
/// let s = Spec::parse("abc,cd->a|bd")?;
/// assert_eq!(s.contracted(), vec!['c']);
/// assert_eq!(s.output_codomain(), 1);
/// let t = Spec::tensordot(3, 2, &[2], &[0])?; // the same contraction, by axes
/// assert_eq!((t.contracted().len(), t.output().len(), t.output_codomain()), (1, 3, 2));
/// # Ok::<(), tessera_contract::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Spec {
    a: Vec<char>,
    b: Vec<char>,
    out: Vec<char>,
    n_codomain: usize,
}

fn syntax(spec: &str, reason: impl Into<String>) -> Error {
    Error::Syntax {
        spec: spec.to_owned(),
        reason: reason.into(),
    }
}

fn labels(spec: &str, part: &str) -> Result<Vec<char>, Error> {
    part.chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '\'' {
                Ok(c)
            } else {
                Err(syntax(spec, format!("{c:?} is not a label")))
            }
        })
        .collect()
}

impl Spec {
    /// Parses `"A labels,B labels->output labels"`.
    ///
    /// # Errors
    ///
    /// [`Error::Syntax`] for a malformed string, [`Error::Label`] for a trace, a batch index,
    /// or an output label that is on no operand, [`Error::TooManyLegs`] for an operand or
    /// output of more than [`MAX_LEGS`] labels.
    pub fn parse(spec: &str) -> Result<Self, Error> {
        let (inputs, out) = spec
            .split_once("->")
            .ok_or_else(|| syntax(spec, "there is no \"->\""))?;
        let (a, b) = inputs
            .split_once(',')
            .ok_or_else(|| syntax(spec, "there is no ',' between the operands"))?;
        let (out, split) = match out.split_once('|') {
            Some((cod, dom)) => {
                let cod = labels(spec, cod)?;
                let n = cod.len();
                (cod.into_iter().chain(labels(spec, dom)?).collect(), Some(n))
            }
            None => (labels(spec, out)?, None),
        };
        Self::new(labels(spec, a)?, labels(spec, b)?, out, split)
    }

    /// The spec of `tensordot(A, B, axes_a, axes_b)` for operands with `na` and `nb` legs:
    /// `axes_a[i]` of `A` is contracted with `axes_b[i]` of `B`; the output is `A`'s free legs
    /// in order (the codomain), then `B`'s (the domain).
    ///
    /// # Errors
    ///
    /// [`Error::TooManyLegs`] for an operand of more than [`MAX_LEGS`] legs;
    /// [`Error::Axes`] for axes out of range, repeated, or of unequal counts.
    pub fn tensordot(
        na: usize,
        nb: usize,
        axes_a: &[usize],
        axes_b: &[usize],
    ) -> Result<Self, Error> {
        for (operand, given) in [("A", na), ("B", nb)] {
            if given > MAX_LEGS {
                return Err(Error::TooManyLegs {
                    operand,
                    limit: MAX_LEGS,
                    given,
                });
            }
        }
        let check = |operand, legs: usize, axes: &[usize]| {
            let distinct = axes.iter().enumerate().all(|(i, x)| !axes[..i].contains(x));
            if axes.len() == axes_a.len().min(axes_b.len())
                && distinct
                && axes.iter().all(|&x| x < legs)
            {
                Ok(())
            } else {
                Err(Error::Axes {
                    operand,
                    legs,
                    given: axes.to_vec(),
                })
            }
        };
        check("A", na, axes_a)?;
        check("B", nb, axes_b)?;
        if axes_a.len() != axes_b.len() {
            return Err(Error::Axes {
                operand: "B",
                legs: nb,
                given: axes_b.to_vec(),
            });
        }
        // Labels: A's legs are 0..na, B's free legs na.., contracted B legs take A's label.
        // At most 2 * MAX_LEGS labels from U+0100 on: below the surrogates (U+D800).
        let label = |i: usize| char::from_u32(0x100 + i as u32).expect("a valid code point");
        let a: Vec<char> = (0..na).map(label).collect();
        let b: Vec<char> = (0..nb)
            .map(|j| match axes_b.iter().position(|&x| x == j) {
                Some(p) => label(axes_a[p]),
                None => label(na + j),
            })
            .collect();
        let out: Vec<char> = a
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes_a.contains(i))
            .map(|(_, &c)| c)
            .chain(
                b.iter()
                    .enumerate()
                    .filter(|(j, _)| !axes_b.contains(j))
                    .map(|(_, &c)| c),
            )
            .collect();
        Self::new(a, b, out, None)
    }

    fn new(
        a: Vec<char>,
        b: Vec<char>,
        out: Vec<char>,
        split: Option<usize>,
    ) -> Result<Self, Error> {
        for (operand, side) in [("A", &a), ("B", &b), ("the output", &out)] {
            if side.len() > MAX_LEGS {
                return Err(Error::TooManyLegs {
                    operand,
                    limit: MAX_LEGS,
                    given: side.len(),
                });
            }
        }
        let label = |label, reason| Err(Error::Label { label, reason });
        for side in [&a, &b, &out] {
            let repeated = side
                .iter()
                .enumerate()
                .find(|(i, c)| side[..*i].contains(c));
            if let Some((_, &c)) = repeated {
                return label(c, "appears twice on one operand or in the output");
            }
        }
        for &c in a.iter().chain(&b) {
            match (a.contains(&c), b.contains(&c), out.contains(&c)) {
                (true, true, true) => {
                    return label(c, "is on both operands and in the output (a batch index)");
                }
                (true, false, false) | (false, true, false) => {
                    return label(
                        c,
                        "is on one operand only and not in the output (a partial trace)",
                    );
                }
                _ => {}
            }
        }
        if let Some(&c) = out.iter().find(|c| !a.contains(c) && !b.contains(c)) {
            return label(c, "is in the output but on no operand");
        }
        let free_a = a.iter().filter(|c| !b.contains(c)).count();
        Ok(Self {
            n_codomain: split.unwrap_or(free_a),
            a,
            b,
            out,
        })
    }

    /// The labels of `A`'s legs.
    pub fn a(&self) -> &[char] {
        &self.a
    }

    /// The labels of `B`'s legs.
    pub fn b(&self) -> &[char] {
        &self.b
    }

    /// The labels of the output's legs.
    pub fn output(&self) -> &[char] {
        &self.out
    }

    /// How many of the output's legs form its codomain.
    pub fn output_codomain(&self) -> usize {
        self.n_codomain
    }

    /// The contracted labels, in `A`'s order.
    pub fn contracted(&self) -> Vec<char> {
        self.a
            .iter()
            .copied()
            .filter(|c| self.b.contains(c))
            .collect()
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = |v: &[char]| v.iter().collect::<String>();
        let (cod, dom) = self.out.split_at(self.n_codomain);
        write!(f, "{},{}->{}|{}", s(&self.a), s(&self.b), s(cod), s(dom))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_splits() {
        let s = Spec::parse(" ab c , cd -> a b d").unwrap();
        assert_eq!(
            (s.a(), s.b(), s.output()),
            (&['a', 'b', 'c'][..], &['c', 'd'][..], &['a', 'b', 'd'][..])
        );
        assert_eq!(s.output_codomain(), 2);
        assert_eq!(s.to_string(), "abc,cd->ab|d");
        assert_eq!(Spec::parse(&s.to_string()).unwrap(), s);
        assert_eq!(Spec::parse("ab,bc->|ca").unwrap().output_codomain(), 0);
        assert_eq!(
            Spec::parse("a,b->ab").unwrap().contracted(),
            Vec::<char>::new()
        );
    }

    #[test]
    fn refuses_what_is_not_a_pairwise_contraction() {
        let label = |s: &str| match Spec::parse(s) {
            Err(Error::Label { label, .. }) => label,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(label("aab,b->a"), 'a');
        assert_eq!(label("ab,bc->abc"), 'b');
        assert_eq!(label("abx,bc->ac"), 'x');
        assert_eq!(label("ab,bc->acz"), 'z');
        assert_eq!(label("ab,bc->aca"), 'a');
        for bad in ["ab,bc", "abbc->ac", "a-b,bc->ac", "ab,bc->a|c|"] {
            assert!(
                matches!(Spec::parse(bad), Err(Error::Syntax { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn tensordot_axes() {
        let s = Spec::tensordot(3, 3, &[0, 2], &[1, 0]).unwrap();
        assert_eq!(s.contracted().len(), 2);
        assert_eq!(s.output().len(), 2);
        assert_eq!(s.output_codomain(), 1);
        assert_eq!(s.b()[1], s.a()[0]);
        assert!(matches!(
            Spec::tensordot(2, 2, &[0, 0], &[0, 1]),
            Err(Error::Axes { operand: "A", .. })
        ));
        assert!(matches!(
            Spec::tensordot(2, 2, &[0], &[2]),
            Err(Error::Axes { operand: "B", .. })
        ));
        assert!(matches!(
            Spec::tensordot(2, 2, &[0], &[0, 1]),
            Err(Error::Axes { .. })
        ));
    }

    #[test]
    fn refuses_more_legs_than_the_limit_instead_of_panicking() {
        // 60,000 legs once ran the label alphabet into the surrogates and panicked.
        for (na, nb) in [(60_000, 2), (2, MAX_LEGS + 1)] {
            assert!(
                matches!(
                    Spec::tensordot(na, nb, &[0], &[0]),
                    Err(Error::TooManyLegs { limit: MAX_LEGS, given, .. }) if given == na.max(nb)
                ),
                "{na} x {nb}"
            );
        }
        let half = MAX_LEGS / 2 + 2;
        let s = Spec::tensordot(half, half, &[0, 5], &[1, 0]).unwrap();
        assert_eq!(s.output().len(), MAX_LEGS);
        assert!(matches!(
            Spec::tensordot(half + 1, half, &[0, 5], &[1, 0]),
            Err(Error::TooManyLegs { operand: "the output", given, .. }) if given == MAX_LEGS + 1
        ));
        let many: String = (0..=MAX_LEGS)
            .map(|i| char::from_u32(0x4e00 + i as u32).unwrap())
            .collect();
        assert!(matches!(
            Spec::parse(&format!("{many},a->{many}a")),
            Err(Error::TooManyLegs { operand: "A", .. })
        ));
    }
}
