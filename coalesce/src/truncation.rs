//! Global truncation of singular values across coupled sectors.
//!
//! Owns [`Truncation`] (the settings) and the selection that, given every sector's singular
//! values, decides how many each sector keeps. Invariant: the selection is global: it ranks
//! the singular values of all sectors together and keeps a prefix of that ranking, so a
//! sector keeps its `k` largest values exactly when they are among the largest overall (what
//! DMRG needs: the kept subspace is the best one of its total dimension). Ties are broken by
//! sector index, then by position, so the choice is deterministic.

use crate::error::Error;

/// How a singular value decomposition is truncated. Every bound applies to the values of
/// all sectors together; the default keeps everything.
///
/// - `max_dim`: keep at most this many singular values in total (the bond dimension).
/// - `cutoff`: discard singular values below it.
/// - `max_discarded_weight`: then discard the smallest remaining values as long as the
///   discarded weight (the sum of their squares, including what the other bounds dropped)
///   stays at most this fraction of the total weight (the sum of all squares). For a
///   normalised state this is the usual DMRG truncation error.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Truncation {
    /// The most singular values kept over all sectors; `None` for no bound.
    pub max_dim: Option<usize>,
    /// Singular values below this are discarded; `None` for no cutoff.
    pub cutoff: Option<f64>,
    /// The largest discarded fraction of the total weight; `None` for no bound.
    pub max_discarded_weight: Option<f64>,
}

/// What a [`Truncation`] keeps of a set of per-sector singular values
/// ([`Truncation::select`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Kept {
    /// How many values each sector keeps (its largest ones).
    pub per_sector: Vec<usize>,
    /// The sum of the squares of the discarded values.
    pub discarded_weight: f64,
    /// The sum of the squares of all values.
    pub total_weight: f64,
}

impl Truncation {
    /// No truncation: the thin decomposition.
    pub fn none() -> Self {
        Self::default()
    }

    /// Keeps at most `max_dim` singular values in total.
    pub fn max_dim(max_dim: usize) -> Self {
        Self {
            max_dim: Some(max_dim),
            ..Self::default()
        }
    }

    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTruncation`] for a `max_dim` of 0, a cutoff that is negative or not
    /// finite, or a discarded fraction outside `[0, 1]`.
    pub fn check(&self) -> Result<(), Error> {
        if self.max_dim == Some(0) {
            return Err(Error::InvalidTruncation {
                what: "max_dim",
                expected: "at least 1 (None for no bound)",
                given: "0".to_owned(),
            });
        }
        if let Some(c) = self.cutoff
            && !(c >= 0.0 && c.is_finite())
        {
            return Err(Error::InvalidTruncation {
                what: "cutoff",
                expected: "a finite singular value of at least 0",
                given: c.to_string(),
            });
        }
        if let Some(w) = self.max_discarded_weight
            && !(0.0..=1.0).contains(&w)
        {
            return Err(Error::InvalidTruncation {
                what: "max_discarded_weight",
                expected: "a fraction of the total weight in [0, 1]",
                given: w.to_string(),
            });
        }
        Ok(())
    }

    /// How many values each sector keeps when `values[c]` are the singular values of sector
    /// `c` (each non-increasing), with the discarded and total weights: the decision
    /// [`svd`](crate::svd) makes, for callers that gather the values themselves (a
    /// factorization whose sectors were computed in several places, as a distributed one is,
    /// with [`svd_sectors`](crate::svd_sectors)). The same values give the same decision
    /// everywhere.
    ///
    /// ```
    /// use tessera_coalesce::Truncation;
    ///
    /// let kept = Truncation::max_dim(3).select(&[vec![5.0, 1.0], vec![4.0, 3.0, 0.5]])?;
    /// assert_eq!(kept.per_sector, [1, 2]);
    /// assert!((kept.total_weight - (25.0 + 1.0 + 16.0 + 9.0 + 0.25)).abs() < 1e-12);
    /// assert!((kept.discarded_weight - (1.0 + 0.25)).abs() < 1e-12);
    /// # Ok::<(), tessera_coalesce::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check); [`Error::BadValues`] when a value is negative or not
    /// finite, or a sector's values increase.
    pub fn select(&self, values: &[Vec<f64>]) -> Result<Kept, Error> {
        self.check()?;
        for (c, v) in values.iter().enumerate() {
            if let Some(i) = v.iter().position(|x| !(x.is_finite() && *x >= 0.0)) {
                return Err(Error::BadValues {
                    expected: "finite singular values of at least 0".into(),
                    given: format!("value {i} of sector {c} is {}", v[i]),
                });
            }
            if let Some(i) = v.windows(2).position(|w| w[1] > w[0]) {
                return Err(Error::BadValues {
                    expected: "each sector's values non-increasing".into(),
                    given: format!(
                        "values {i} and {} of sector {c} are {} < {}",
                        i + 1,
                        v[i],
                        v[i + 1]
                    ),
                });
            }
        }
        let (per_sector, discarded_weight, total_weight) =
            self.select_weighted(values, &vec![1.0; values.len()]);
        Ok(Kept {
            per_sector,
            discarded_weight,
            total_weight,
        })
    }

    /// [`select_weighted`](Self::select_weighted) with every weight 1, as a tuple.
    #[cfg(test)]
    pub(crate) fn select_unweighted(&self, values: &[Vec<f64>]) -> (Vec<usize>, f64, f64) {
        self.select_weighted(values, &vec![1.0; values.len()])
    }

    /// How many values each sector keeps, the discarded weight (sum of the squares of the
    /// discarded values) and the total weight (of all values). `values[c]` are sector `c`'s
    /// singular values, non-increasing and finite (the callers check), and every value of
    /// sector `c` stands for `weights[c]` states (the quantum dimension of a non-abelian
    /// sector: a multiplet is kept or dropped whole): it counts `weights[c]` towards
    /// `max_dim` and `weights[c] s^2` towards the weights. The ranking is by value, and the
    /// kept values are a prefix of it: the first multiplet that does not fit in `max_dim`
    /// ends the prefix.
    ///
    /// The weights are summed in units of the largest value, so the decision depends only on
    /// the values' ratios: values near `1e200` or `1e-200`, whose squares overflow or vanish
    /// in `f64`, are truncated as their rescaled copies are. The weights returned are then
    /// scaled back (infinite only when the true weight exceeds `f64`'s range).
    pub(crate) fn select_weighted(
        &self,
        values: &[Vec<f64>],
        weights: &[f64],
    ) -> (Vec<usize>, f64, f64) {
        // The sector tasks fail on a value that is not finite (`Error::NonFinite`) before
        // their values reach the ranking.
        debug_assert!(values.iter().flatten().all(|s| s.is_finite()));
        debug_assert_eq!(values.len(), weights.len());
        let mut ranked: Vec<(f64, usize, usize)> = values
            .iter()
            .enumerate()
            .flat_map(|(c, v)| v.iter().enumerate().map(move |(i, &s)| (s, c, i)))
            .collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let scale = match ranked.first() {
            Some(r) if r.0 > 0.0 => r.0,
            _ => 1.0,
        };
        let square = |r: &(f64, usize, usize)| weights[r.1] * (r.0 / scale) * (r.0 / scale);
        let total: f64 = ranked.iter().map(square).sum();
        let mut keep = ranked.len();
        if let Some(cutoff) = self.cutoff {
            keep = ranked.iter().take_while(|r| r.0 >= cutoff).count();
        }
        if let Some(max_dim) = self.max_dim {
            let mut states = 0.0;
            let fits = ranked[..keep]
                .iter()
                .take_while(|r| {
                    states += weights[r.1];
                    states <= max_dim as f64
                })
                .count();
            keep = keep.min(fits);
        }
        let mut discarded: f64 = ranked[keep..].iter().map(square).sum();
        if let Some(fraction) = self.max_discarded_weight {
            let bound = fraction * total;
            while keep > 0 && discarded + square(&ranked[keep - 1]) <= bound {
                keep -= 1;
                discarded += square(&ranked[keep]);
            }
        }
        let mut kept = vec![0; values.len()];
        for r in &ranked[..keep] {
            kept[r.1] += 1;
        }
        // `x * scale * scale`, not `x * scale^2`: the square of a large scale may overflow
        // where the weight does not.
        (kept, discarded * scale * scale, total * scale * scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_selection_keeps_multiplets_whole() {
        // Sector 1 is a triplet: each of its values stands for three states.
        let v = vec![vec![5.0, 1.0], vec![4.0, 3.0]];
        let w = [1.0, 3.0];
        // 5 (1 state), 4 (3 states): 4 states; the triplet at 3 would make 7.
        assert_eq!(Truncation::max_dim(6).select_weighted(&v, &w).0, vec![1, 1]);
        assert_eq!(Truncation::max_dim(7).select_weighted(&v, &w).0, vec![1, 2]);
        let (kept, discarded, total) = Truncation::max_dim(4).select_weighted(&v, &w);
        assert_eq!(kept, vec![1, 1]);
        assert!((total - (25.0 + 1.0 + 3.0 * (16.0 + 9.0))).abs() < 1e-12);
        assert!((discarded - (1.0 + 27.0)).abs() < 1e-12);
        // The discarded weight counts every state of a multiplet.
        let t = Truncation {
            max_discarded_weight: Some(28.0 / 101.0),
            ..Truncation::none()
        };
        assert_eq!(t.select_weighted(&v, &w).0, vec![1, 1]);
        assert_eq!(
            Truncation::none().select_weighted(&v, &[1.0, 1.0]),
            Truncation::none().select_unweighted(&v)
        );
    }

    #[test]
    fn selection_is_global_across_sectors() {
        let v = vec![vec![5.0, 1.0, 0.5], vec![4.0, 3.0], vec![0.1]];
        assert_eq!(Truncation::none().select_unweighted(&v).0, vec![3, 2, 1]);
        let (kept, w, total) = Truncation::max_dim(3).select_unweighted(&v);
        assert!((total - 51.26).abs() < 1e-12);
        assert_eq!(kept, vec![1, 2, 0]);
        assert!((w - (1.0 + 0.25 + 0.01)).abs() < 1e-12);
        let cut = Truncation {
            cutoff: Some(0.5),
            ..Truncation::none()
        };
        assert_eq!(cut.select_unweighted(&v).0, vec![3, 2, 0]);
        // Total weight 51.26; 1% of it is 0.5126: 0.1^2 and 0.5^2 go, 1.0^2 would exceed it.
        let weight = Truncation {
            max_discarded_weight: Some(0.01),
            ..Truncation::none()
        };
        let (kept, w, _) = weight.select_unweighted(&v);
        assert_eq!(kept, vec![2, 2, 0]);
        assert!((w - 0.26).abs() < 1e-12);
    }

    #[test]
    fn the_decision_depends_only_on_ratios_even_where_squares_leave_f64() {
        let v = vec![vec![5.0, 1.0, 0.5], vec![4.0, 3.0], vec![0.1, 1e-9]];
        for t in [
            Truncation::max_dim(4),
            Truncation {
                max_discarded_weight: Some(0.01),
                ..Truncation::none()
            },
            Truncation {
                max_discarded_weight: Some(1e-17),
                ..Truncation::none()
            },
        ] {
            let (kept, w, total) = t.select_unweighted(&v);
            // 1e200^2 overflows and 1e-200^2 underflows; the ratios are those of `v`.
            for factor in [1e200, 1e-200, 1e150] {
                let scaled: Vec<Vec<f64>> = v
                    .iter()
                    .map(|s| s.iter().map(|x| x * factor).collect())
                    .collect();
                let (k, ws, ts) = t.select_unweighted(&scaled);
                assert_eq!(k, kept, "{t:?} at {factor:e}");
                let f2 = factor * factor;
                if f2.is_finite() && f2 > 0.0 {
                    assert!((ws / f2 - w).abs() <= 1e-12 * w.max(1e-300), "{ws} vs {w}");
                    assert!((ts / f2 - total).abs() <= 1e-12 * total);
                } else if factor > 1.0 {
                    assert!(ts.is_infinite(), "a total above f64's range is infinite");
                } else {
                    assert_eq!(ts, 0.0, "a total below f64's range underflows");
                }
            }
        }
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        assert!(Truncation::max_dim(0).check().is_err());
        for c in [-1.0, f64::NAN, f64::INFINITY] {
            let t = Truncation {
                cutoff: Some(c),
                ..Truncation::none()
            };
            assert!(matches!(
                t.check(),
                Err(Error::InvalidTruncation { what: "cutoff", .. })
            ));
        }
        for w in [-0.1, 1.5, f64::NAN] {
            let t = Truncation {
                max_discarded_weight: Some(w),
                ..Truncation::none()
            };
            assert!(t.check().is_err());
        }
        assert!(Truncation::max_dim(4).check().is_ok());
    }
}
