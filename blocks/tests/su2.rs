//! SU(2) tensors against their dense forms, on seeded random structures (half of them
//! SU(2) x U(1), with charged legs): the dense form is an invariant (every generator
//! annihilates it, and it conserves charge), the projection of a dense invariant gives
//! the tensor back, the norm is the dense norm, and permutations (with any split, any
//! directions) are exact on the dense tensor.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use tessera_blocks::Direction;
use tessera_blocks::Error;
use tessera_blocks::su2::{
    Su2Leg, Su2Structure, Su2Tensor, permutation_cache_stats, recoupling_cache_stats,
};

/// A random leg of spins up to 2; with `charged`, each spin with a charge in `-1..=1` (one
/// spin may then come with several charges).
fn random_leg(rng: &mut ChaCha8Rng, charged: bool) -> Su2Leg {
    let n = rng.gen_range(1..=3);
    let mut pool: Vec<(u32, i32)> = (0..5)
        .flat_map(|j| {
            let charges = if charged { -1..=1 } else { 0..=0 };
            charges.map(move |q| (j, q))
        })
        .collect();
    let mut sectors = Vec::new();
    for _ in 0..n {
        let sector = pool.swap_remove(rng.gen_range(0..pool.len()));
        sectors.push((sector, rng.gen_range(1..=2)));
    }
    let d = if rng.gen_bool(0.5) {
        Direction::In
    } else {
        Direction::Out
    };
    Su2Leg::with_charges(d, sectors).unwrap()
}

/// A random structure; half of them SU(2) x U(1) (charged legs).
fn random_structure(rng: &mut ChaCha8Rng, max_legs: usize) -> Su2Structure {
    let n = rng.gen_range(1..=max_legs);
    let charged = rng.gen_bool(0.5);
    let legs: Vec<Su2Leg> = (0..n).map(|_| random_leg(rng, charged)).collect();
    let split = rng.gen_range(0..=n);
    Su2Structure::new(legs, split).unwrap()
}

/// The largest dense element whose legs' charges do not add to zero (`In` legs counting
/// their charge, `Out` legs minus it): zero for a `U(1)` invariant.
fn charge_violation(s: &Su2Structure, dense: &[f64]) -> f64 {
    // Each leg's signed charge per dense index.
    let charges: Vec<Vec<i32>> = s
        .legs()
        .iter()
        .map(|l| {
            let sign = if l.direction() == Direction::In {
                1
            } else {
                -1
            };
            l.sectors()
                .iter()
                .zip(l.charges())
                .flat_map(|(&(j, copies), &q)| {
                    std::iter::repeat_n(sign * q, (j as usize + 1) * copies)
                })
                .collect()
        })
        .collect();
    let mut worst = 0.0_f64;
    for (flat, x) in dense.iter().enumerate() {
        let (mut rest, mut total) = (flat, 0);
        for c in &charges {
            total += c[rest % c.len()];
            rest /= c.len();
        }
        if total != 0 {
            worst = worst.max(x.abs());
        }
    }
    worst
}

/// `x` (column-major over `dims`) with new axis `i` being old axis `perm[i]`.
fn permute_dense(x: &[f64], dims: &[usize], perm: &[usize]) -> Vec<f64> {
    let mut strides = vec![1; dims.len()];
    for a in 1..dims.len() {
        strides[a] = strides[a - 1] * dims[a - 1];
    }
    let nd: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    let mut out = vec![0.0; x.len()];
    let mut idx = vec![0; dims.len()];
    for v in out.iter_mut() {
        *v = x[idx
            .iter()
            .zip(perm)
            .map(|(i, &p)| i * strides[p])
            .sum::<usize>()];
        for a in 0..idx.len() {
            idx[a] += 1;
            if idx[a] < nd[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    out
}

/// The spin generator `J^+` (`up`) or `J^-` on a leg's dense index, as `(to, from, value)`.
fn ladder(leg: &Su2Leg, up: bool) -> Vec<(usize, usize, f64)> {
    let mut out = Vec::new();
    let mut base = 0;
    for &(tj, copies) in leg.sectors() {
        let md = tj as usize + 1;
        let j = f64::from(tj) / 2.0;
        for a in 0..copies {
            for i in 0..md {
                let m = j - i as f64;
                if up && i > 0 {
                    let v = (j * (j + 1.0) - m * (m + 1.0)).sqrt();
                    out.push((base + a * md + i - 1, base + a * md + i, v));
                }
                if !up && i + 1 < md {
                    let v = (j * (j + 1.0) - m * (m - 1.0)).sqrt();
                    out.push((base + a * md + i + 1, base + a * md + i, v));
                }
            }
        }
        base += md * copies;
    }
    out
}

/// `sum over legs of G_leg D`, with `G = J` on `In` legs and `-J^T` on `Out` legs: zero for
/// an invariant.
fn generator_residual(s: &Su2Structure, dense: &[f64], up: bool) -> f64 {
    let dims = s.dense_dims();
    let mut out = vec![0.0; dense.len()];
    for (axis, leg) in s.legs().iter().enumerate() {
        let inner: usize = dims[..axis].iter().product();
        let d = dims[axis];
        for (to, from, v) in ladder(leg, up) {
            let (to, from, v) = match leg.direction() {
                Direction::In => (to, from, v),
                Direction::Out => (from, to, -v),
            };
            for (flat, x) in dense.iter().enumerate() {
                if (flat / inner) % d == from {
                    out[flat - from * inner + to * inner] += v * x;
                }
            }
        }
    }
    out.iter().map(|x| x.abs()).fold(0.0, f64::max)
}

#[test]
fn dense_forms_are_invariant_and_project_back() {
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    let (mut nonempty, mut charged) = (0, 0);
    for case in 0..100 {
        let s = random_structure(&mut rng, 4);
        let t = Su2Tensor::<f64>::random(s, case).unwrap();
        let dense = t.to_dense().unwrap();
        let norm = dense.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!(
            (t.norm().unwrap() - norm).abs() < 1e-12 * (1.0 + norm),
            "case {case}"
        );
        if norm == 0.0 {
            continue;
        }
        nonempty += 1;
        if t.structure()
            .legs()
            .iter()
            .any(|l| l.charges().iter().any(|&q| q != 0))
        {
            charged += 1;
        }
        assert_eq!(charge_violation(t.structure(), &dense), 0.0, "case {case}");
        for up in [true, false] {
            let r = generator_residual(t.structure(), &dense, up);
            assert!(r < 1e-12 * norm, "case {case}: J residual {r}");
        }
        let back = Su2Tensor::from_dense(t.structure().clone(), &dense).unwrap();
        let (a, b) = (
            t.data().to_blocks().unwrap(),
            back.data().to_blocks().unwrap(),
        );
        for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
            assert!((x - y).abs() < 1e-12, "case {case}: {x} vs {y}");
        }
    }
    assert!(nonempty > 50, "only {nonempty} cases had blocks");
    assert!(charged > 12, "only {charged} charged cases had blocks");
}

#[test]
fn permutations_are_exact_on_the_dense_tensor() {
    let mut rng = ChaCha8Rng::seed_from_u64(2929);
    for case in 0..60 {
        let s = random_structure(&mut rng, 4);
        let n = s.legs().len();
        let t = Su2Tensor::<f64>::random(s, case).unwrap();
        let mut perm: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            perm.swap(i, rng.gen_range(0..=i));
        }
        let split = rng.gen_range(0..=n);
        let u = t.permuted(&perm, split).unwrap();
        let want = permute_dense(&t.to_dense().unwrap(), &t.structure().dense_dims(), &perm);
        let got = u.to_dense().unwrap();
        let scale = 1.0 + want.iter().fold(0.0_f64, |m, x| m.max(x.abs()));
        for (k, (x, y)) in got.iter().zip(&want).enumerate() {
            assert!(
                (x - y).abs() < 1e-12 * scale,
                "case {case}, perm {perm:?} split {split}, element {k}: {x} vs {y}"
            );
        }
        assert!((u.norm().unwrap() - t.norm().unwrap()).abs() < 1e-12 * scale);
    }
    let stats = recoupling_cache_stats();
    assert!(stats.misses > 0 && stats.len > 0);
}

#[test]
fn permutations_of_blocks_too_large_to_gather_are_exact() {
    // Tuple (0, 0, 0, 0) holds 12^4 = 20736 elements per block: the strided path; the
    // other tuples are small and gathered. Both must agree with the dense permutation.
    let v = Su2Leg::new(Direction::In, [(0, 12), (1, 2), (2, 1)]).unwrap();
    let s = Su2Structure::new(vec![v.clone(), v.dual(), v.clone(), v.dual()], 2).unwrap();
    let t = Su2Tensor::<f64>::random(s, 5).unwrap();
    let dims = t.structure().dense_dims();
    for (perm, split) in [([3, 1, 0, 2], 1), ([1, 0, 2, 3], 3), ([2, 3, 0, 1], 2)] {
        let u = t.permuted(&perm, split).unwrap();
        let want = permute_dense(&t.to_dense().unwrap(), &dims, &perm);
        let got = u.to_dense().unwrap();
        let worst = got
            .iter()
            .zip(&want)
            .fold(0.0_f64, |m, (x, y)| m.max((x - y).abs()));
        assert!(worst < 1e-12, "perm {perm:?} split {split}: off by {worst}");
    }
}

#[test]
fn a_second_permutation_of_one_shape_is_served_from_the_cache() {
    let v = Su2Leg::new(Direction::In, [(1, 2), (3, 1)]).unwrap();
    let s = Su2Structure::new(vec![v.clone(), v.clone(), v.dual(), v.dual()], 2).unwrap();
    let t = Su2Tensor::<f64>::random(s, 1).unwrap();
    let first = t.permuted(&[2, 0, 3, 1], 1).unwrap();
    let (before, recouplings) = (permutation_cache_stats(), recoupling_cache_stats());
    let second = t.permuted(&[2, 0, 3, 1], 1).unwrap();
    let after = permutation_cache_stats();
    // Other tests may run at the same time: the second call itself adds a hit, and shares
    // the first call's structure.
    assert!(after.hits > before.hits, "{before:?} then {after:?}");
    assert!(Arc::ptr_eq(first.structure(), second.structure()));
    assert!(recouplings.len > 0);
    assert_eq!(first.to_dense().unwrap(), second.to_dense().unwrap());
}

#[test]
fn misuse_is_refused_with_what_was_expected() {
    assert!(matches!(
        Su2Leg::new(Direction::In, [(1, 0)]),
        Err(Error::ZeroDimension { segment: 0 })
    ));
    assert!(matches!(
        Su2Leg::new(Direction::In, [(1, 1), (2, 1), (1, 3)]),
        Err(Error::RepeatedSector {
            first: 0,
            second: 2,
            ..
        })
    ));
    assert!(matches!(
        Su2Leg::with_charges(Direction::Out, [((1, 1), 1), ((1, -1), 1), ((1, 1), 2)]),
        Err(Error::RepeatedSector {
            first: 0,
            second: 2,
            ..
        })
    ));
    let v = Su2Leg::new(Direction::In, [(1, 1)]).unwrap();
    assert!(matches!(
        Su2Structure::new(vec![v.clone()], 2),
        Err(Error::SplitOutOfRange {
            n_codomain: 2,
            legs: 1
        })
    ));
    let s = Su2Structure::new(vec![v.clone(), v.dual()], 1).unwrap();
    let t = Su2Tensor::<f64>::random(s, 3).unwrap();
    let before = t.data().to_blocks().unwrap();
    assert!(matches!(
        t.permuted(&[0, 0], 1),
        Err(Error::InvalidPermutation { legs: 2, .. })
    ));
    assert!(matches!(
        t.permuted(&[1, 0], 3),
        Err(Error::SplitOutOfRange {
            n_codomain: 3,
            legs: 2
        })
    ));
    assert!(matches!(
        Su2Tensor::from_dense(t.structure().clone(), &[1.0; 3]),
        Err(Error::DataLength {
            expected: 4,
            given: 3,
            ..
        })
    ));
    assert_eq!(t.data().to_blocks().unwrap(), before);
}

#[test]
fn the_adjoint_conjugate_transposes_the_dense_map() {
    let mut rng = ChaCha8Rng::seed_from_u64(2930);
    for case in 0..30 {
        let s = random_structure(&mut rng, 4);
        let (n, p) = (s.legs().len(), s.n_codomain());
        let t = Su2Tensor::<f64>::random(s, case).unwrap();
        let a = t.adjoint().unwrap();
        assert_eq!(a.structure().n_codomain(), n - p);
        // New leg i is old leg (p + i) for the old domain, then the old codomain.
        let perm: Vec<usize> = (p..n).chain(0..p).collect();
        let want = permute_dense(&t.to_dense().unwrap(), &t.structure().dense_dims(), &perm);
        for (x, y) in a.to_dense().unwrap().iter().zip(&want) {
            assert!((x - y).abs() < 1e-12, "case {case}");
        }
        for (l, m) in a.structure().legs().iter().zip(&perm) {
            assert_eq!(l.direction(), t.structure().legs()[*m].direction().flip());
        }
    }
}
