//! The SU(2) coefficients against dense spin matrices, exact identities and each other.

use super::*;

/// Spins up to 2 (twice: 0..=4) for the dense checks.
const SPINS: std::ops::RangeInclusive<u32> = 0..=4;

/// A dense real matrix, row-major.
#[derive(Clone)]
struct Dense {
    n: usize,
    a: Vec<f64>,
}

impl Dense {
    fn zeros(n: usize) -> Self {
        Self {
            n,
            a: vec![0.0; n * n],
        }
    }

    fn identity(n: usize) -> Self {
        let mut m = Self::zeros(n);
        (0..n).for_each(|i| m.a[i * n + i] = 1.0);
        m
    }

    fn kron(&self, o: &Self) -> Self {
        let n = self.n * o.n;
        let mut m = Self::zeros(n);
        for i in 0..self.n {
            for j in 0..self.n {
                for k in 0..o.n {
                    for l in 0..o.n {
                        m.a[(i * o.n + k) * n + j * o.n + l] =
                            self.a[i * self.n + j] * o.a[k * o.n + l];
                    }
                }
            }
        }
        m
    }

    fn add(&self, o: &Self) -> Self {
        Self {
            n: self.n,
            a: self.a.iter().zip(&o.a).map(|(x, y)| x + y).collect(),
        }
    }

    fn mul(&self, o: &Self) -> Self {
        let n = self.n;
        let mut m = Self::zeros(n);
        for i in 0..n {
            for k in 0..n {
                let x = self.a[i * n + k];
                for j in 0..n {
                    m.a[i * n + j] += x * o.a[k * n + j];
                }
            }
        }
        m
    }

    fn apply(&self, v: &[f64]) -> Vec<f64> {
        (0..self.n)
            .map(|i| (0..self.n).map(|j| self.a[i * self.n + j] * v[j]).sum())
            .collect()
    }

    fn transpose(&self) -> Self {
        let n = self.n;
        let mut m = Self::zeros(n);
        for i in 0..n {
            for j in 0..n {
                m.a[j * n + i] = self.a[i * n + j];
            }
        }
        m
    }
}

/// `(J_z, J_+)` of spin `two_j / 2` in the basis `m = j, j - 1, ..., -j`.
fn spin_matrices(two_j: u32) -> (Dense, Dense) {
    let n = two_j as usize + 1;
    let j = f64::from(two_j) / 2.0;
    let m_of = |i: usize| j - i as f64;
    let mut z = Dense::zeros(n);
    let mut up = Dense::zeros(n);
    for i in 0..n {
        z.a[i * n + i] = m_of(i);
        if i > 0 {
            let m = m_of(i);
            up.a[(i - 1) * n + i] = (j * (j + 1.0) - m * (m + 1.0)).sqrt();
        }
    }
    (z, up)
}

/// `J^2` from `J_z` and `J_+`.
fn casimir(z: &Dense, up: &Dense) -> Dense {
    let down = up.transpose();
    let half = |m: Dense| Dense {
        n: m.n,
        a: m.a.iter().map(|x| 0.5 * x).collect(),
    };
    z.mul(z).add(&half(up.mul(&down).add(&down.mul(up))))
}

/// The index of `two_m` in the basis of spin `two_j / 2`.
fn index(two_j: u32, two_m: i32) -> usize {
    ((two_j as i32 - two_m) / 2) as usize
}

/// `|(j1 j2) J M>` in the product basis, from the coefficients.
fn coupled(j1: u32, j2: u32, j: u32, m: i32) -> Vec<f64> {
    let n2 = j2 as usize + 1;
    let mut v = vec![0.0; (j1 as usize + 1) * n2];
    for m1 in (-(j1 as i32)..=j1 as i32).step_by(2) {
        for m2 in (-(j2 as i32)..=j2 as i32).step_by(2) {
            v[index(j1, m1) * n2 + index(j2, m2)] = clebsch_gordan(j1, m1, j2, m2, j, m).to_f64();
        }
    }
    v
}

fn dot(x: &[f64], y: &[f64]) -> f64 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

fn close(x: &[f64], y: &[f64]) -> bool {
    x.iter().zip(y).all(|(a, b)| (a - b).abs() < 1e-12)
}

/// Every coupled state is an eigenvector of the total `J^2` and `J_z` with the right
/// eigenvalues, they are orthonormal and complete, the top state of each `J` has a positive
/// `m1 = j1` component (Condon-Shortley), and `J_-` steps down with the positive factor.
#[test]
fn clebsch_gordan_coefficients_couple_dense_spins() {
    for j1 in SPINS {
        for j2 in SPINS {
            let (z1, u1) = spin_matrices(j1);
            let (z2, u2) = spin_matrices(j2);
            let (i1, i2) = (Dense::identity(z1.n), Dense::identity(z2.n));
            let z = z1.kron(&i2).add(&i1.kron(&z2));
            let up = u1.kron(&i2).add(&i1.kron(&u2));
            let down = up.transpose();
            let c = casimir(&z, &up);
            let mut states = Vec::new();
            for j in SU2::half(j1).fuse(&SU2::half(j2)).map(SU2::two_j) {
                let jj = f64::from(j) / 2.0;
                for m in (-(j as i32)..=j as i32).step_by(2) {
                    let v = coupled(j1, j2, j, m);
                    let mm = f64::from(m) / 2.0;
                    let scaled = |s: f64| v.iter().map(|x| s * x).collect::<Vec<_>>();
                    assert!(
                        close(&c.apply(&v), &scaled(jj * (jj + 1.0))),
                        "{j1} {j2} {j} {m}"
                    );
                    assert!(close(&z.apply(&v), &scaled(mm)), "{j1} {j2} {j} {m}");
                    if m > -(j as i32) {
                        let lower = coupled(j1, j2, j, m - 2);
                        let factor = (jj * (jj + 1.0) - mm * (mm - 1.0)).sqrt();
                        let want: Vec<f64> = lower.iter().map(|x| factor * x).collect();
                        assert!(close(&down.apply(&v), &want), "J- {j1} {j2} {j} {m}");
                    }
                    states.push(v);
                }
                let top = clebsch_gordan(j1, j1 as i32, j2, j as i32 - j1 as i32, j, j as i32);
                assert!(!top.is_zero() && !top.is_negative(), "{j1} {j2} {j}");
            }
            assert_eq!(states.len(), z.n, "complete");
            for (a, x) in states.iter().enumerate() {
                for (b, y) in states.iter().enumerate() {
                    let want = if a == b { 1.0 } else { 0.0 };
                    assert!((dot(x, y) - want).abs() < 1e-12);
                }
            }
        }
    }
}

/// Selection rules give exact zeros.
#[test]
fn broken_selection_rules_give_zero() {
    assert!(clebsch_gordan(1, 1, 1, 1, 0, 0).is_zero()); // m1 + m2 != M
    assert!(clebsch_gordan(1, 1, 1, -1, 4, 0).is_zero()); // no triangle
    assert!(clebsch_gordan(1, 3, 1, -3, 0, 0).is_zero()); // |m| > j
    assert!(clebsch_gordan(2, 1, 1, -1, 1, 0).is_zero()); // m and j of different parity
    assert!(clebsch_gordan(1, 1, 1, 1, 0, 2).is_zero()); // |M| > J
    assert!(six_j(1, 1, 1, 1, 1, 1).is_zero()); // three halves cannot couple to one half
    assert_eq!(r_symbol(1, 1, 3), None);
}

/// Exact: for each `(J, M)` the squares of the coefficients sum to one, as rationals, up to
/// spin 20 (factorials of about 80).
#[test]
fn squares_sum_to_one_exactly_at_large_spin() {
    for (j1, j2) in [(40_u32, 40_u32), (39, 21), (17, 30)] {
        for j in [j1.abs_diff(j2), j1.abs_diff(j2) + 2, j1 + j2] {
            // The lowest, the middle (0 or 1/2) and the highest M.
            for m in [-(j as i32), j as i32 % 2, j as i32] {
                let mut total = BigRational::zero();
                for m1 in (-(j1 as i32)..=j1 as i32).step_by(2) {
                    total += clebsch_gordan(j1, m1, j2, m - m1, j, m).square;
                }
                assert_eq!(total, BigRational::one(), "{j1} {j2} {j} {m}");
            }
        }
    }
}

/// The 6j symbols are the overlaps of the two ways to couple three spins, computed from
/// dense coupled states: `<((j1 j2) j12, j3) J | (j1, (j2 j3) j23) J>`, which is the
/// F-symbol.
#[test]
fn six_j_symbols_recouple_dense_states() {
    let spins = 0..=3_u32;
    for j1 in spins.clone() {
        for j2 in spins.clone() {
            for j3 in spins.clone() {
                let (n1, n2, n3) = (j1 as usize + 1, j2 as usize + 1, j3 as usize + 1);
                let at = |m1: i32, m2: i32, m3: i32| {
                    (index(j1, m1) * n2 + index(j2, m2)) * n3 + index(j3, m3)
                };
                let ms = |j: u32| (-(j as i32)..=j as i32).step_by(2);
                for j12 in SU2::half(j1).fuse(&SU2::half(j2)).map(SU2::two_j) {
                    for j in SU2::half(j12).fuse(&SU2::half(j3)).map(SU2::two_j) {
                        let m = j as i32; // the top state of J
                        let mut left = vec![0.0; n1 * n2 * n3];
                        for m1 in ms(j1) {
                            for m2 in ms(j2) {
                                let m3 = m - m1 - m2;
                                let a = clebsch_gordan(j1, m1, j2, m2, j12, m1 + m2).to_f64();
                                let b = clebsch_gordan(j12, m1 + m2, j3, m3, j, m).to_f64();
                                if m3.unsigned_abs() <= j3 && a * b != 0.0 {
                                    left[at(m1, m2, m3)] = a * b;
                                }
                            }
                        }
                        for j23 in SU2::half(j2).fuse(&SU2::half(j3)).map(SU2::two_j) {
                            let mut right = vec![0.0; n1 * n2 * n3];
                            for m2 in ms(j2) {
                                for m3 in ms(j3) {
                                    let m1 = m - m2 - m3;
                                    let a = clebsch_gordan(j2, m2, j3, m3, j23, m2 + m3).to_f64();
                                    let b = clebsch_gordan(j1, m1, j23, m2 + m3, j, m).to_f64();
                                    if m1.unsigned_abs() <= j1 && a * b != 0.0 {
                                        right[at(m1, m2, m3)] = a * b;
                                    }
                                }
                            }
                            let want = dot(&left, &right);
                            let f = f_symbol(j1, j2, j3, j, j12, j23).to_f64();
                            assert!(
                                (f - want).abs() < 1e-12,
                                "F^({j1} {j2} {j3})_{j}[{j12}, {j23}] = {f}, overlap {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// `sum_x (2x + 1)(2f + 1) {a b x; c d f} {a b x; c d f'} = delta(f, f')`.
#[test]
fn six_j_symbols_are_orthogonal() {
    let spins = 0..=4_u32;
    for a in spins.clone() {
        for b in spins.clone() {
            for c in spins.clone() {
                for d in spins.clone() {
                    for f in 0..=8_u32 {
                        for g in 0..=8_u32 {
                            let xs = SU2::half(a).fuse(&SU2::half(b)).map(SU2::two_j);
                            let sum: f64 = xs
                                .map(|x| {
                                    f64::from(x + 1)
                                        * f64::from(f + 1)
                                        * six_j(a, b, x, c, d, f).to_f64()
                                        * six_j(a, b, x, c, d, g).to_f64()
                                })
                                .sum();
                            let allowed = triangle(a.into(), d.into(), f.into())
                                && triangle(c.into(), b.into(), f.into());
                            let want = if f == g && allowed { 1.0 } else { 0.0 };
                            // A sum with no admissible x is zero on both sides.
                            if sum != 0.0 || want != 0.0 {
                                assert!((sum - want).abs() < 1e-12, "{a} {b} {c} {d} {f} {g}");
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Exchanging the two spins: `<j2 m2; j1 m1 | J M> = R^(j1 j2)_J <j1 m1; j2 m2 | J M>`.
#[test]
fn r_symbols_are_the_exchange_signs() {
    for j1 in SPINS {
        for j2 in SPINS {
            for j in SU2::half(j1).fuse(&SU2::half(j2)).map(SU2::two_j) {
                let r = f64::from(r_symbol(j1, j2, j).expect("an admissible coupling"));
                for m1 in (-(j1 as i32)..=j1 as i32).step_by(2) {
                    for m2 in (-(j2 as i32)..=j2 as i32).step_by(2) {
                        let ab = clebsch_gordan(j1, m1, j2, m2, j, m1 + m2).to_f64();
                        let ba = clebsch_gordan(j2, m2, j1, m1, j, m1 + m2).to_f64();
                        assert!((ba - r * ab).abs() < 1e-14);
                    }
                }
            }
        }
    }
}

/// A coefficient asked twice is computed once and served from the cache after.
#[test]
fn coefficients_are_cached() {
    let first = six_j(7, 9, 8, 5, 11, 6);
    let before = coefficient_cache_stats();
    let again = six_j(7, 9, 8, 5, 11, 6);
    let after = coefficient_cache_stats();
    assert_eq!(first, again);
    assert!(after.hits > before.hits);
    assert!(after.len >= 1);
}

/// The sector: fusion rules, dimensions and the trait's contract.
#[test]
fn the_sector_fuses_as_spins_do() {
    let one = SU2::spin(1);
    let out: Vec<SU2> = one.fuse(&SU2::half(3)).collect();
    assert_eq!(out, [SU2::half(1), SU2::half(3), SU2::half(5)]);
    let total: f64 = out.iter().map(Sector::qdim).sum();
    assert_eq!(total, one.qdim() * SU2::half(3).qdim());
    assert_eq!(one.dual(), one);
    assert!(SU2::trivial().is_trivial() && !<SU2 as Sector>::is_abelian());
    assert_eq!(SU2::half(3).to_string(), "j=3/2");
    assert_eq!(SU2::spin(2).to_string(), "j=2");
    let mut words = Vec::new();
    SU2::half(5).encode(&mut words);
    assert_eq!(words, [5]);
}
