//! Network ordering: the exhaustive order is never worse than greedy or than the order a
//! dense library would choose, is strictly better on some seeded cases, agrees with brute
//! force, and contracting in any order gives the dense chain product.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera_contract::{Error, Network};

/// A random U(1) leg: a few charges from -2..=2 with dimensions 1..=12.
fn leg(rng: &mut ChaCha8Rng) -> Leg<U1> {
    let mut q: Vec<i32> = (-2..=2).collect();
    q.shuffle(rng);
    let n = rng.gen_range(1..=4);
    Leg::new(
        Direction::In,
        q[..n].iter().map(|&c| (U1(c), rng.gen_range(1..=12))),
    )
    .unwrap()
}

/// A chain of `n` matrices `M_i : leg_i -> leg_{i+1}` with labels `ab`, `bc`, ...
fn chain(rng: &mut ChaCha8Rng, n: usize) -> (Vec<String>, Vec<Arc<BlockStructure<U1>>>) {
    let legs: Vec<Leg<U1>> = (0..=n).map(|_| leg(rng)).collect();
    let labels = (0..n)
        .map(|i| {
            let c = |k: usize| char::from(b'a' + k as u8);
            format!("{}{}", c(i), c(i + 1))
        })
        .collect();
    let structures = (0..n)
        .map(|i| {
            let flux = U1(rng.gen_range(-1..=1));
            Arc::new(
                BlockStructure::new(vec![legs[i].clone()], vec![legs[i + 1].dual()], flux).unwrap(),
            )
        })
        .collect();
    (labels, structures)
}

fn network(labels: &[String], s: &[Arc<BlockStructure<U1>>]) -> Network<U1> {
    Network::new(
        labels
            .iter()
            .map(String::as_str)
            .zip(s.iter().cloned())
            .collect(),
    )
    .unwrap()
}

#[test]
fn the_block_sparse_order_beats_the_dense_one() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
    let mut strictly_better = 0;
    for case in 0..200 {
        let n = rng.gen_range(3..=6);
        let (labels, s) = chain(&mut rng, n);
        let net = network(&labels, &s);
        let best = net.optimal().unwrap();
        let greedy = net.greedy().unwrap();
        let dense = net.dense_order().unwrap();
        assert_eq!(best.steps.len(), n - 1);
        assert_eq!(net.cost(&best.steps).unwrap(), best.flops, "case {case}");
        assert_eq!(
            net.cost(&greedy.steps).unwrap(),
            greedy.flops,
            "case {case}"
        );
        assert!(
            best.flops <= greedy.flops,
            "case {case}: {best} vs greedy {greedy}"
        );
        assert!(
            best.flops <= dense.flops,
            "case {case}: {best} vs dense {dense}"
        );
        strictly_better += usize::from(best.flops < dense.flops);
    }
    assert!(
        strictly_better >= 10,
        "block-sparse ordering beat the dense order in {strictly_better} of 200 cases"
    );
}

#[test]
fn the_exhaustive_order_is_the_brute_force_minimum_for_three() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for _ in 0..50 {
        let (labels, s) = chain(&mut rng, 3);
        let net = network(&labels, &s);
        let all = [
            vec![(0, 1), (3, 2)],
            vec![(1, 2), (0, 3)],
            vec![(0, 2), (3, 1)],
        ];
        let min = all.iter().map(|o| net.cost(o).unwrap()).min().unwrap();
        assert_eq!(net.optimal().unwrap().flops, min);
    }
}

#[test]
fn contracting_in_any_order_gives_the_chain_product() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for case in 0..40 {
        let n = rng.gen_range(2..=5);
        let (labels, s) = chain(&mut rng, n);
        let net = network(&labels, &s);
        let arrays: Vec<AsyncArray<f64, U1>> = s
            .iter()
            .map(|x| AsyncArray::random(Arc::clone(x), rng.r#gen()))
            .collect();
        let refs: Vec<&AsyncArray<f64, U1>> = arrays.iter().collect();
        // The dense chain product, rows x cols column-major.
        let mut acc = arrays[0].to_dense().unwrap();
        let rows = s[0].legs()[0].dim();
        let mut inner = s[0].legs()[1].dim();
        for (a, st) in arrays.iter().zip(&s).skip(1) {
            let cols = st.legs()[1].dim();
            let b = a.to_dense().unwrap();
            let mut c = vec![0.0; rows * cols];
            for j in 0..cols {
                for k in 0..inner {
                    for i in 0..rows {
                        c[i + rows * j] += acc[i + rows * k] * b[k + inner * j];
                    }
                }
            }
            acc = c;
            inner = cols;
        }
        let (first, last) = (
            labels[0].chars().next().unwrap(),
            labels[n - 1].chars().nth(1).unwrap(),
        );
        for order in [
            net.optimal().unwrap(),
            net.greedy().unwrap(),
            net.dense_order().unwrap(),
        ] {
            let (out, out_labels) = net.contract(&refs, &order).unwrap();
            let got = out.to_dense().unwrap();
            let transposed = out_labels == vec![last, first];
            assert!(
                transposed || out_labels == vec![first, last],
                "{out_labels:?}"
            );
            for j in 0..inner {
                for i in 0..rows {
                    let g = if transposed {
                        got[j + inner * i]
                    } else {
                        got[i + rows * j]
                    };
                    assert!(
                        (g - acc[i + rows * j]).abs() < 1e-9,
                        "case {case} order {order}"
                    );
                }
            }
        }
    }
}

#[test]
fn bad_networks_are_refused() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (_, s) = chain(&mut rng, 3);
    let err = Network::new(vec![("abc", s[0].clone())]).unwrap_err();
    assert!(matches!(err, Error::Network { given: 1, .. }), "{err:?}");
    let err = Network::new(vec![
        ("ab", s[0].clone()),
        ("ab", s[1].clone()),
        ("ba", s[2].clone()),
    ])
    .unwrap_err();
    assert!(err.to_string().contains("at most two"), "{err}");
    let net = network(&["ab".into(), "bc".into(), "cd".into()], &s);
    assert!(matches!(net.cost(&[(0, 1)]), Err(Error::Network { .. })));
    assert!(matches!(
        net.cost(&[(0, 1), (0, 2)]),
        Err(Error::Network { .. })
    ));
}
