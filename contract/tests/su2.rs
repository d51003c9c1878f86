//! SU(2) contractions and factorizations against the dense operations on the expanded
//! tensors, on seeded random structures (random directions, splits, leg orders and output
//! splits; every other case SU(2) x U(1), with charged legs), and their refusals.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tessera_blocks::Direction;
use tessera_blocks::su2::{Su2Leg, Su2Structure, Su2Tensor};
use tessera_contract::{Error, contract_su2};

/// A random leg of spins up to 3/2; with `charged` (SU(2) x U(1)), each spin with a charge
/// in `-1..=1` (one spin may then come with several charges).
fn random_leg(rng: &mut ChaCha8Rng, charged: bool) -> Su2Leg {
    // Charged legs take more sectors, so that more tuples conserve charge.
    let n = rng.gen_range(1 + usize::from(charged)..=3);
    let mut pool: Vec<(u32, i32)> = (0..4)
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

fn shuffle<T>(rng: &mut ChaCha8Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.gen_range(0..=i));
    }
}

/// The dense contraction `out[labels_out] = sum a[labels_a] b[labels_b]`, column-major.
fn dense_contract(
    a: &[f64],
    la: &[char],
    da: &[usize],
    b: &[f64],
    lb: &[char],
    db: &[usize],
    lo: &[char],
) -> Vec<f64> {
    let mut all: Vec<char> = la.to_vec();
    all.extend(lb.iter().filter(|l| !la.contains(l)));
    let dim = |l: &char| {
        la.iter()
            .position(|x| x == l)
            .map(|i| da[i])
            .unwrap_or_else(|| db[lb.iter().position(|x| x == l).unwrap()])
    };
    let dims: Vec<usize> = all.iter().map(dim).collect();
    let flat = |labels: &[char], ds: &[usize], idx: &[usize]| {
        labels.iter().zip(ds).rev().fold(0, |acc, (l, &d)| {
            acc * d + idx[all.iter().position(|x| x == l).unwrap()]
        })
    };
    let dout: Vec<usize> = lo.iter().map(dim).collect();
    let mut out = vec![0.0; dout.iter().product()];
    let total: usize = dims.iter().product();
    let mut idx = vec![0; all.len()];
    for _ in 0..total {
        out[flat(lo, &dout, &idx)] += a[flat(la, da, &idx)] * b[flat(lb, db, &idx)];
        for k in 0..idx.len() {
            idx[k] += 1;
            if idx[k] < dims[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

#[test]
fn contractions_match_the_dense_contraction() {
    let mut rng = ChaCha8Rng::seed_from_u64(2926);
    let names = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
    let (mut nonzero, mut charged) = (0, 0);
    for case in 0..160 {
        let (nk, nfa, nfb) = (
            rng.gen_range(0..=2),
            rng.gen_range(0..=2),
            rng.gen_range(0..=2),
        );
        let k_legs: Vec<Su2Leg> = (0..nk)
            .map(|_| random_leg(&mut rng, case % 2 == 1))
            .collect();
        let mut a_items: Vec<(char, Su2Leg)> =
            (0..nk).map(|i| (names[i], k_legs[i].clone())).collect();
        let mut b_items: Vec<(char, Su2Leg)> =
            (0..nk).map(|i| (names[i], k_legs[i].dual())).collect();
        for i in 0..nfa {
            a_items.push((names[nk + i], random_leg(&mut rng, case % 2 == 1)));
        }
        for i in 0..nfb {
            b_items.push((names[nk + nfa + i], random_leg(&mut rng, case % 2 == 1)));
        }
        shuffle(&mut rng, &mut a_items);
        shuffle(&mut rng, &mut b_items);
        if a_items.is_empty() || b_items.is_empty() {
            continue;
        }
        let split_a = rng.gen_range(0..=a_items.len());
        let split_b = rng.gen_range(0..=b_items.len());
        let sa = Su2Structure::new(a_items.iter().map(|x| x.1.clone()).collect(), split_a).unwrap();
        let sb = Su2Structure::new(b_items.iter().map(|x| x.1.clone()).collect(), split_b).unwrap();
        let a = Su2Tensor::<f64>::random(sa, 2 * case).unwrap();
        let b = Su2Tensor::<f64>::random(sb, 2 * case + 1).unwrap();
        let la: Vec<char> = a_items.iter().map(|x| x.0).collect();
        let lb: Vec<char> = b_items.iter().map(|x| x.0).collect();
        let mut lo: Vec<char> = names[nk..nk + nfa + nfb].to_vec();
        shuffle(&mut rng, &mut lo);
        let split_o = rng.gen_range(0..=lo.len());
        let out: String = lo[..split_o]
            .iter()
            .chain(['|'].iter())
            .chain(&lo[split_o..])
            .collect();
        let spec = format!(
            "{},{}->{}",
            la.iter().collect::<String>(),
            lb.iter().collect::<String>(),
            out
        );
        let c = contract_su2(&spec, &a, &b).unwrap();
        assert_eq!(c.structure().n_codomain(), split_o, "{spec}");
        let want = dense_contract(
            &a.to_dense().unwrap(),
            &la,
            &a.structure().dense_dims(),
            &b.to_dense().unwrap(),
            &lb,
            &b.structure().dense_dims(),
            &lo,
        );
        let got = c.to_dense().unwrap();
        assert_eq!(got.len(), want.len());
        let scale = 1.0 + want.iter().fold(0.0_f64, |m, x| m.max(x.abs()));
        if scale > 1.0 + 1e-9 {
            nonzero += 1;
            charged += case % 2;
        }
        for (k, (x, y)) in got.iter().zip(&want).enumerate() {
            assert!(
                (x - y).abs() < 1e-12 * scale,
                "case {case} {spec}: element {k}: {x} vs {y}"
            );
        }
    }
    assert!(
        nonzero > 40 && charged > 8,
        "only {nonzero} contractions ({charged} charged) had a nonzero result"
    );
}

#[test]
fn mismatched_pairs_are_refused_and_nothing_is_written() {
    let v = Su2Leg::new(Direction::In, [(0, 1), (1, 2)]).unwrap();
    let w = Su2Leg::new(Direction::In, [(0, 1), (1, 3)]).unwrap();
    let a = Su2Tensor::<f64>::random(Su2Structure::new(vec![v.clone(), v.dual()], 1).unwrap(), 1)
        .unwrap();
    let same =
        Su2Tensor::<f64>::random(Su2Structure::new(vec![v.dual(), v.clone()], 1).unwrap(), 2)
            .unwrap();
    let other =
        Su2Tensor::<f64>::random(Su2Structure::new(vec![w.clone(), v.dual()], 1).unwrap(), 3)
            .unwrap();
    let before = (
        a.data().to_blocks().unwrap(),
        same.data().to_blocks().unwrap(),
    );
    // `j` is Out on both (A's domain leg, `same`'s codomain leg).
    let e = contract_su2("ij,jk->ik", &a, &same).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Legs {
                label: 'j',
                a_leg: 1,
                b_leg: 0,
                source: tessera_blocks::Error::SameDirection {
                    direction: Direction::Out
                }
            }
        ),
        "{e}"
    );
    // `j`: spin 1/2 twice on A, three times on `other`.
    let e = contract_su2("ij,jk->ik", &a, &other).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Legs {
                source: tessera_blocks::Error::SegmentMismatch {
                    segment: 1,
                    left_dim: 2,
                    right_dim: 3,
                    ..
                },
                ..
            }
        ),
        "{e}"
    );
    // `j`: the same spins and multiplicities, but charged differently.
    let q = Su2Leg::with_charges(Direction::In, [((0, 1), 1), ((1, 0), 2)]).unwrap();
    let charged =
        Su2Tensor::<f64>::random(Su2Structure::new(vec![q.clone(), q.dual()], 1).unwrap(), 4)
            .unwrap();
    let e = contract_su2("ij,jk->ik", &a, &charged).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Legs {
                source: tessera_blocks::Error::SegmentMismatch {
                    segment: 0,
                    left_dim: 1,
                    right_dim: 1,
                    ..
                },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("q = 1"), "{e}");
    let e = contract_su2("ijk,jk->i", &a, &same).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Arity {
                operand: "A",
                expected: 3,
                given: 2
            }
        ),
        "{e}"
    );
    assert_eq!(
        (
            a.data().to_blocks().unwrap(),
            same.data().to_blocks().unwrap()
        ),
        before
    );
}

#[test]
fn svd_factors_reconstruct_and_truncate_by_states() {
    use tessera_coalesce::{Truncation, svd_su2};
    let mut rng = ChaCha8Rng::seed_from_u64(2931);
    let names = ['a', 'b', 'c', 'd', 'e', 'f'];
    let mut truncated = 0;
    for case in 0..30 {
        let (p, q) = (rng.gen_range(1..=2), rng.gen_range(1..=2));
        let legs: Vec<Su2Leg> = (0..p + q)
            .map(|_| random_leg(&mut rng, case % 2 == 1))
            .collect();
        let a = Su2Tensor::<f64>::random(Su2Structure::new(legs, p).unwrap(), case).unwrap();
        let dense = a.to_dense().unwrap();
        let norm2: f64 = dense.iter().map(|x| x * x).sum();
        if norm2 == 0.0 {
            continue;
        }
        let cod: String = names[..p].iter().collect();
        let dom: String = names[p..p + q].iter().collect();
        for max_dim in [None, Some(rng.gen_range(1..=6))] {
            let t = Truncation {
                max_dim,
                ..Truncation::none()
            };
            let f = svd_su2(&a, &t).unwrap();
            assert!(
                (f.total_weight - norm2).abs() < 1e-10 * norm2,
                "case {case}"
            );
            if let Some(m) = max_dim {
                assert!(
                    f.bond.dim() <= m,
                    "case {case}: {} states kept",
                    f.bond.dim()
                );
                if f.discarded_weight > 0.0 {
                    truncated += 1;
                }
            } else {
                assert!(f.discarded_weight < 1e-20);
            }
            let svt = f.s.scale_rows(f.vt.data()).unwrap();
            let svt = Su2Tensor::from_data(f.vt.structure().clone(), svt).unwrap();
            let back = contract_su2(&format!("{cod}z,z{dom}->{cod}|{dom}"), &f.u, &svt).unwrap();
            let err: f64 = back
                .to_dense()
                .unwrap()
                .iter()
                .zip(&dense)
                .map(|(x, y)| (x - y) * (x - y))
                .sum();
            assert!(
                (err - f.discarded_weight).abs() < 1e-10 * norm2,
                "case {case}: |A - U S V+|^2 = {err}, discarded {}",
                f.discarded_weight
            );
            // U is an isometry: U+ U is the identity of the bond.
            let ud = f.u.adjoint().unwrap();
            let id = contract_su2(&format!("y{cod},{cod}z->y|z"), &ud, &f.u).unwrap();
            let n = f.bond.dim();
            for (k, x) in id.to_dense().unwrap().iter().enumerate() {
                let want = if k % n == k / n { 1.0 } else { 0.0 };
                assert!((x - want).abs() < 1e-12, "case {case}: U+U at {k} is {x}");
            }
        }
    }
    assert!(truncated > 5, "only {truncated} decompositions truncated");
}

/// `x` against the identity of dimension `n` (column-major), to `1e-12`.
fn assert_identity(x: &[f64], n: usize, what: &str) {
    assert_eq!(x.len(), n * n, "{what}");
    for (k, v) in x.iter().enumerate() {
        let want = if k % n == k / n { 1.0 } else { 0.0 };
        assert!((v - want).abs() < 1e-12, "{what} at {k} is {v}");
    }
}

#[test]
fn qr_factors_reconstruct_with_an_isometry() {
    use tessera_coalesce::qr_su2;
    let mut rng = ChaCha8Rng::seed_from_u64(2932);
    let names = ['a', 'b', 'c', 'd', 'e', 'f'];
    for case in 0..30 {
        let (p, q) = (rng.gen_range(1..=2), rng.gen_range(1..=2));
        let legs: Vec<Su2Leg> = (0..p + q)
            .map(|_| random_leg(&mut rng, case % 2 == 1))
            .collect();
        let a = Su2Tensor::<f64>::random(Su2Structure::new(legs, p).unwrap(), case).unwrap();
        let dense = a.to_dense().unwrap();
        let f = qr_su2(&a).unwrap();
        let cod: String = names[..p].iter().collect();
        let dom: String = names[p..p + q].iter().collect();
        let back = contract_su2(&format!("{cod}z,z{dom}->{cod}|{dom}"), &f.q, &f.r).unwrap();
        for (k, (x, y)) in back.to_dense().unwrap().iter().zip(&dense).enumerate() {
            assert!(
                (x - y).abs() < 1e-12,
                "case {case}: QR at {k} is {x}, A {y}"
            );
        }
        if f.bond.dim() > 0 {
            let qd = f.q.adjoint().unwrap();
            let id = contract_su2(&format!("y{cod},{cod}z->y|z"), &qd, &f.q).unwrap();
            assert_identity(&id.to_dense().unwrap(), f.bond.dim(), "Q+Q");
        }
    }
}

#[test]
fn eigh_diagonalises_hermitian_maps_by_multiplet() {
    use tessera_coalesce::eigh_su2;
    let mut rng = ChaCha8Rng::seed_from_u64(2933);
    let names = ['a', 'b', 'c', 'd'];
    let mut checked = 0;
    for case in 0..30 {
        let p = rng.gen_range(1..=2);
        let cod: Vec<Su2Leg> = (0..p)
            .map(|_| random_leg(&mut rng, case % 2 == 1))
            .collect();
        let legs: Vec<Su2Leg> = cod
            .iter()
            .cloned()
            .chain(cod.iter().map(Su2Leg::dual))
            .collect();
        let s = Su2Structure::shared(legs, p).unwrap();
        // A = X + X+ (X+ has X's structure: the domain legs are the codomain's duals).
        let x = Su2Tensor::<f64>::random(s.clone(), case).unwrap();
        let sum = x.data().add(x.adjoint().unwrap().data()).unwrap();
        let a = Su2Tensor::from_data(s, sum).unwrap();
        let f = eigh_su2(&a).unwrap();
        let n = f.bond.dim();
        if n == 0 {
            continue;
        }
        checked += 1;
        let c: String = names[..p].iter().collect();
        let d: String = names[2..2 + p].iter().collect();
        // A V = V D on the dense tensors.
        let av = contract_su2(&format!("{c}{d},{d}z->{c}|z"), &a, &f.vectors).unwrap();
        let vd = contract_su2(&format!("{c}y,yz->{c}|z"), &f.vectors, &f.values).unwrap();
        let (av, vd) = (av.to_dense().unwrap(), vd.to_dense().unwrap());
        for (k, (x, y)) in av.iter().zip(&vd).enumerate() {
            assert!((x - y).abs() < 1e-11, "case {case}: AV {x}, VD {y} at {k}");
        }
        let vdag = f.vectors.adjoint().unwrap();
        let id = contract_su2(&format!("y{c},{c}z->y|z"), &vdag, &f.vectors).unwrap();
        assert_identity(&id.to_dense().unwrap(), n, "V+V");
        // The dense spectrum is each multiplet's value 2c + 1 times.
        let mut want: Vec<f64> = Vec::new();
        for (k, block) in f.values.data().to_blocks().unwrap().iter().enumerate() {
            let c = f.values.structure().coupled_of(k).unwrap();
            let m = f.values.structure().matrix().block(k).unwrap().shape()[0];
            for i in 0..m {
                let v = block[i + m * i];
                want.extend(std::iter::repeat_n(v, c as usize + 1));
            }
        }
        let dense_a = a.to_dense().unwrap();
        let dense = faer::Mat::<f64>::from_fn(n, n, |i, j| dense_a[i + n * j]);
        let mut got: Vec<f64> = dense.self_adjoint_eigenvalues(faer::Side::Lower).unwrap();
        got.sort_by(f64::total_cmp);
        want.sort_by(f64::total_cmp);
        for (x, y) in got.iter().zip(&want) {
            assert!(
                (x - y).abs() < 1e-11,
                "case {case}: dense {x}, multiplets {y}"
            );
        }
    }
    assert!(checked > 20, "only {checked} cases had blocks");
}

#[test]
fn eigh_of_a_map_between_different_spaces_is_refused() {
    use tessera_coalesce::eigh_su2;
    let v = Su2Leg::new(Direction::In, [(0, 2), (1, 1)]).unwrap();
    let w = Su2Leg::new(Direction::In, [(0, 1), (1, 1)]).unwrap();
    let a = Su2Tensor::<f64>::random(Su2Structure::new(vec![v, w.dual()], 1).unwrap(), 1).unwrap();
    let before = a.data().to_blocks().unwrap();
    let e = eigh_su2(&a).unwrap_err();
    assert!(
        matches!(e, tessera_coalesce::Error::NotEndomorphism { .. }),
        "{e}"
    );
    assert_eq!(a.data().to_blocks().unwrap(), before);
}
