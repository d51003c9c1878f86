//! Fermionic networks against a dense reference that applies the Koszul signs of the whole
//! network, written from the convention's definition only (not from the crate's kernels):
//! the network is the graded product of its tensors in list order; an element's sign is
//! `(-1)` to the number of pairs of odd legs that cross when the legs are rearranged into
//! the output legs (in network order) followed by each contracted pair as `(Out leg, In
//! leg)`, where a pair is evaluated without sign.
//!
//! Every pairwise order (both operand orders of every step) for up to 4 tensors, every
//! order of pairs for 5, and the optimal, greedy and random orders for 6 agree with it to
//! `1e-12` relative; a ring of identities gives the supertrace in every order.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use tessera_blocks::{
    AbelianSector, AsyncArray, BlockStructure, Direction, FermionParity, FermionicU1, Leg, Product,
    U1,
};
use tessera_contract::{Network, Order};

/// A sector kind for these tests: graded sectors with a pool of labels.
trait Graded: AbelianSector {
    fn pool() -> Vec<Self>;
}

impl Graded for FermionParity {
    fn pool() -> Vec<Self> {
        vec![FermionParity::EVEN, FermionParity::ODD]
    }
}

impl Graded for FermionicU1 {
    fn pool() -> Vec<Self> {
        (-1..=2)
            .map(|n| Product(U1(n), FermionParity::new(n % 2 != 0)))
            .collect()
    }
}

/// `U1 x U1 x parity`: a product whose grading sits in its last factor.
impl Graded for Product<U1, Product<U1, FermionParity>> {
    fn pool() -> Vec<Self> {
        let mut v = Vec::new();
        for a in -1..=1 {
            for p in [false, true] {
                v.push(Product(
                    U1(a),
                    Product(U1(i32::from(p)), FermionParity::new(p)),
                ));
            }
        }
        v
    }
}

/// A random leg: one to three distinct sectors of dimension 1 or 2, random direction.
fn random_leg<S: Graded>(rng: &mut ChaCha8Rng) -> Leg<S> {
    let mut pool = S::pool();
    pool.shuffle(rng);
    let n = rng.gen_range(1..=3.min(pool.len()));
    let dir = if rng.gen_bool(0.5) {
        Direction::In
    } else {
        Direction::Out
    };
    Leg::new(
        dir,
        pool[..n].iter().map(|s| (s.clone(), rng.gen_range(1..=2))),
    )
    .unwrap()
}

/// A network: per tensor its labels and structure; per label its leg on first appearance.
struct Net<S: AbelianSector> {
    labels: Vec<Vec<char>>,
    structures: Vec<Arc<BlockStructure<S>>>,
}

/// `n` tensors joined by a random spanning tree plus a few extra bonds (closed loops), and
/// up to three open legs; legs shuffled on each tensor, random splits, random allowed flux
/// (odd ones included).
fn random_network<S: Graded>(rng: &mut ChaCha8Rng, n: usize) -> Net<S> {
    let mut legs: Vec<Vec<(char, Leg<S>)>> = vec![Vec::new(); n];
    let mut next = b'a';
    let mut label = || {
        let c = char::from(next);
        next += 1;
        c
    };
    let mut bond = |legs: &mut Vec<Vec<(char, Leg<S>)>>, i: usize, j: usize, rng: &mut _| {
        let l = random_leg::<S>(rng);
        let c = label();
        legs[i].push((c, l.dual()));
        legs[j].push((c, l));
    };
    for j in 1..n {
        let i = rng.gen_range(0..j);
        bond(&mut legs, i, j, rng);
    }
    for _ in 0..rng.gen_range(0..=2) {
        let i = rng.gen_range(0..n);
        let j = (i + rng.gen_range(1..n)) % n;
        bond(&mut legs, i, j, rng);
    }
    let open = rng.gen_range(0..=3);
    for _ in 0..open {
        let i = rng.gen_range(0..n);
        legs[i].push((label(), random_leg::<S>(rng)));
    }
    let mut labels = Vec::new();
    let mut structures = Vec::new();
    for mut t in legs {
        t.shuffle(rng);
        let flux = t.iter().fold(S::trivial(), |acc, (_, l)| {
            let i = rng.gen_range(0..l.num_segments());
            acc.fuse_abelian(&l.effective_sector(i).unwrap())
        });
        let split = rng.gen_range(0..=t.len());
        labels.push(t.iter().map(|(c, _)| *c).collect());
        let legs: Vec<Leg<S>> = t.into_iter().map(|(_, l)| l).collect();
        structures.push(Arc::new(
            BlockStructure::from_legs(legs, split, flux).unwrap(),
        ));
    }
    Net { labels, structures }
}

fn parity_at<S: AbelianSector>(leg: &Leg<S>, i: usize) -> bool {
    (0..leg.num_segments())
        .find(|&s| leg.range(s).unwrap().contains(&i))
        .map(|s| leg.segments()[s].sector.parity())
        .unwrap()
}

/// The network's value by the definition, its output legs in network order (the order in
/// which the open labels appear along the tensors). Dense tensors are column-major, first
/// leg fastest.
fn reference<S: AbelianSector>(net: &Net<S>, dense: &[Vec<f64>]) -> (Vec<char>, Vec<f64>) {
    reference_to(net, dense, None)
}

/// [`reference`] with the output legs in the order `output` (the open labels, permuted;
/// `None`: network order): the legs are rearranged into that order, so its crossings of odd
/// open legs count.
fn reference_to<S: AbelianSector>(
    net: &Net<S>,
    dense: &[Vec<f64>],
    output: Option<&[char]>,
) -> (Vec<char>, Vec<f64>) {
    // Every label once, with its dimension; open labels (on one leg) in network order.
    let mut all: Vec<(char, usize)> = Vec::new();
    let mut count = std::collections::HashMap::new();
    for (labels, s) in net.labels.iter().zip(&net.structures) {
        for (c, l) in labels.iter().zip(s.legs()) {
            *count.entry(*c).or_insert(0) += 1;
            if !all.iter().any(|(x, _)| x == c) {
                all.push((*c, l.dim()));
            }
        }
    }
    let mut open: Vec<char> = all
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| count[c] == 1)
        .collect();
    if let Some(output) = output {
        let mut sorted = output.to_vec();
        sorted.sort_unstable();
        let mut want = open.clone();
        want.sort_unstable();
        assert_eq!(sorted, want, "the output is the open labels, permuted");
        open = output.to_vec();
    }
    let out_dims: Vec<usize> = open
        .iter()
        .map(|c| all.iter().find(|(x, _)| x == c).unwrap().1)
        .collect();
    let mut out = vec![0.0; out_dims.iter().product()];
    let total: usize = all.iter().map(|(_, d)| d).product();
    let mut value = vec![0usize; all.len()];
    let idx_of = |c: char, value: &[usize]| value[all.iter().position(|(x, _)| *x == c).unwrap()];
    for e in 0..total {
        let mut r = e;
        for (v, (_, d)) in value.iter_mut().zip(&all) {
            *v = r % d;
            r /= d;
        }
        // The product of the elements, and the legs in network order: (target key, odd).
        let mut x = 1.0;
        let mut seq: Vec<((usize, usize, usize), bool)> = Vec::new();
        for (t, (labels, s)) in net.labels.iter().zip(&net.structures).enumerate() {
            let legs = s.legs();
            let at = labels
                .iter()
                .zip(legs)
                .rev()
                .fold(0, |acc, (c, l)| acc * l.dim() + idx_of(*c, &value));
            x *= dense[t][at];
            for (c, l) in labels.iter().zip(legs) {
                let odd = parity_at(l, idx_of(*c, &value));
                let key = match open.iter().position(|o| o == c) {
                    Some(p) => (0, p, 0),
                    None => {
                        let pair = all.iter().position(|(y, _)| y == c).unwrap();
                        (1, pair, usize::from(l.direction() == Direction::In))
                    }
                };
                seq.push((key, odd));
            }
        }
        if x == 0.0 {
            continue;
        }
        let mut crossings = 0;
        for i in 0..seq.len() {
            for j in i + 1..seq.len() {
                crossings += usize::from(seq[i].1 && seq[j].1 && seq[i].0 > seq[j].0);
            }
        }
        let at = open
            .iter()
            .zip(&out_dims)
            .rev()
            .fold(0, |acc, (c, d)| acc * d + idx_of(*c, &value));
        out[at] += if crossings % 2 == 1 { -x } else { x };
    }
    (open, out)
}

/// Every sequence of pairwise steps over `n` nodes; with `both`, each step in both operand
/// orders.
fn all_orders(n: usize, both: bool) -> Vec<Vec<(usize, usize)>> {
    fn go(
        live: &mut Vec<usize>,
        next: usize,
        steps: &mut Vec<(usize, usize)>,
        both: bool,
        out: &mut Vec<Vec<(usize, usize)>>,
    ) {
        if live.len() == 1 {
            out.push(steps.clone());
            return;
        }
        for i in 0..live.len() {
            for j in 0..live.len() {
                if i == j || (!both && j < i) {
                    continue;
                }
                let (x, y) = (live[i], live[j]);
                let saved = live.clone();
                live.retain(|&v| v != x && v != y);
                live.push(next);
                steps.push((x, y));
                go(live, next + 1, steps, both, out);
                steps.pop();
                *live = saved;
            }
        }
    }
    let mut out = Vec::new();
    go(&mut (0..n).collect(), n, &mut Vec::new(), both, &mut out);
    out
}

/// A random order: random pairs of live nodes, in random operand order.
fn random_order(rng: &mut ChaCha8Rng, n: usize) -> Vec<(usize, usize)> {
    let mut live: Vec<usize> = (0..n).collect();
    let mut steps = Vec::new();
    while live.len() > 1 {
        live.shuffle(rng);
        let (x, y) = (live.pop().unwrap(), live.pop().unwrap());
        steps.push((x, y));
        live.push(n + steps.len() - 1);
    }
    steps
}

fn check<S: AbelianSector>(
    net: &Net<S>,
    arrays: &[AsyncArray<f64, S>],
    want: &(Vec<char>, Vec<f64>),
    steps: Vec<(usize, usize)>,
    what: &dyn Fn() -> String,
) {
    let network = Network::new(
        net.labels
            .iter()
            .map(|l| l.iter().collect::<String>())
            .zip(&net.structures)
            .map(|(l, s)| (l, Arc::clone(s)))
            .collect::<Vec<_>>()
            .iter()
            .map(|(l, s)| (l.as_str(), Arc::clone(s)))
            .collect(),
    )
    .unwrap();
    let refs: Vec<&AsyncArray<f64, S>> = arrays.iter().collect();
    let order = Order {
        steps: steps.clone(),
        flops: 0,
    };
    let (got, labels) = network.contract(&refs, &order).unwrap();
    assert_eq!(labels, want.0, "{} {steps:?}", what());
    let got = got.to_dense().unwrap();
    let scale = want.1.iter().map(|x| x * x).sum::<f64>().sqrt();
    for (i, (x, y)) in got.iter().zip(&want.1).enumerate() {
        assert!(
            (x - y).abs() <= 1e-12 * (1.0 + scale),
            "element {i}: {x} != {y} in order {steps:?}\n{}",
            what()
        );
    }
}

fn networks<S: Graded>(seed: u64, sizes: &[(usize, usize)]) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut checked = 0;
    for &(n, count) in sizes {
        for case in 0..count {
            let net = random_network::<S>(&mut rng, n);
            let arrays: Vec<AsyncArray<f64, S>> = net
                .structures
                .iter()
                .map(|s| AsyncArray::random(Arc::clone(s), rng.r#gen()))
                .collect();
            let dense: Vec<Vec<f64>> = arrays.iter().map(|a| a.to_dense().unwrap()).collect();
            let want = reference(&net, &dense);
            let what = || {
                format!(
                    "{}: {n} tensors, case {case}, labels {:?}, fluxes {:?}",
                    std::any::type_name::<S>(),
                    net.labels,
                    net.structures.iter().map(|s| s.flux()).collect::<Vec<_>>()
                )
            };
            let mut orders = match n {
                0..=4 => all_orders(n, true),
                5 => all_orders(n, false),
                _ => (0..12).map(|_| random_order(&mut rng, n)).collect(),
            };
            if n == 5 {
                // Both operand orders are covered by random flips of every step.
                for o in &mut orders {
                    for step in o.iter_mut() {
                        if rng.gen_bool(0.5) {
                            *step = (step.1, step.0);
                        }
                    }
                }
                orders.shuffle(&mut rng);
                orders.truncate(60);
            }
            let network = Network::new(
                net.labels
                    .iter()
                    .zip(&net.structures)
                    .map(|(l, s)| (l.iter().collect::<String>(), Arc::clone(s)))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(|(l, s)| (l.as_str(), Arc::clone(s)))
                    .collect(),
            )
            .unwrap();
            orders.push(network.greedy().unwrap().steps);
            orders.push(network.optimal().unwrap().steps);
            for steps in orders {
                check(&net, &arrays, &want, steps, &what);
                checked += 1;
            }
        }
    }
    checked
}

#[test]
fn graded_networks_agree_with_the_koszul_reference_in_every_order() {
    let sizes = [(3, 25), (4, 4), (5, 3), (6, 3)];
    let mut checked = networks::<FermionParity>(0xfe1, &sizes);
    checked += networks::<FermionicU1>(0xfe2, &sizes);
    checked += networks::<Product<U1, Product<U1, FermionParity>>>(0xfe3, &sizes);
    assert!(checked > 2000, "{checked} contractions checked");
}

/// The identity map of `v` (legs `[v, v.dual()]`, `v` an `In` leg).
fn identity<S: AbelianSector>(v: &Leg<S>) -> AsyncArray<f64, S> {
    let s = BlockStructure::new([v.clone()], [v.dual()], S::trivial()).unwrap();
    let d = v.dim();
    let dense: Vec<f64> = (0..d * d)
        .map(|k| f64::from(u8::from(k % (d + 1) == 0)))
        .collect();
    AsyncArray::from_dense(s, &dense).unwrap()
}

/// The ring `A(i,j) B(j,k) C(k,i)` in every order.
fn ring<S: AbelianSector>(m: [&AsyncArray<f64, S>; 3]) -> Vec<f64> {
    let net = Network::new(vec![
        ("ij", Arc::clone(m[0].structure())),
        ("jk", Arc::clone(m[1].structure())),
        ("ki", Arc::clone(m[2].structure())),
    ])
    .unwrap();
    all_orders(3, true)
        .into_iter()
        .map(|steps| {
            let order = Order { steps, flops: 0 };
            let (t, labels) = net.contract(&m, &order).unwrap();
            assert!(labels.is_empty());
            t.to_dense().unwrap()[0]
        })
        .collect()
}

#[test]
fn a_ring_of_identities_is_the_supertrace_in_every_order() {
    // Pins the bug: one even and one odd state gave 0 in four orders and 2 for (A C) B.
    for (even, odd) in [(1, 1), (3, 2), (1, 4)] {
        let v = Leg::new(
            Direction::In,
            [(FermionParity::EVEN, even), (FermionParity::ODD, odd)],
        )
        .unwrap();
        let id = identity(&v);
        let values = ring([&id, &id, &id]);
        assert_eq!(values.len(), 12);
        for x in values {
            assert_eq!(x, even as f64 - odd as f64, "even {even}, odd {odd}");
        }
        // The identity written on the dual space (legs [Out, In]) closes with the plain
        // trace: the loop meets each of its pairs ket-first twice and bra-first once.
        let w = v.dual();
        let s = BlockStructure::new([w.clone()], [v.clone()], FermionParity::EVEN).unwrap();
        let d = v.dim();
        let dense: Vec<f64> = (0..d * d)
            .map(|k| f64::from(u8::from(k % (d + 1) == 0)))
            .collect();
        let id_dual = AsyncArray::from_dense(s, &dense).unwrap();
        for x in ring([&id_dual, &id_dual, &id_dual]) {
            assert_eq!(x, (even + odd) as f64);
        }
    }
    let v = Leg::new(
        Direction::In,
        (-1..=2).map(|n| (Product(U1(n), FermionParity::new(n % 2 != 0)), 2)),
    )
    .unwrap();
    let id = identity::<FermionicU1>(&v);
    for x in ring([&id, &id, &id]) {
        assert_eq!(x, 0.0, "two even and two odd charges of dimension 2");
    }
}

#[test]
fn a_network_refuses_a_label_twice_on_one_tensor() {
    let v = Leg::new(Direction::In, [(FermionParity::ODD, 2)]).unwrap();
    let s = Arc::new(BlockStructure::new([v.clone()], [v.dual()], FermionParity::EVEN).unwrap());
    let err = Network::new(vec![("aa", Arc::clone(&s)), ("bc", s)]).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("'a'") && text.contains("tensor 0"),
        "the error names the label and the tensor: {text}"
    );
}

/// `Network::contract_to` against the dense reference rearranged into the output order
/// (its odd open legs' crossings counted by the definition), and against `contract`
/// followed by `permute`: the leg order asked for carries the Koszul sign of the odd legs it
/// moves past each other, in every order of steps.
fn outputs_in_order<S: Graded>(seed: u64, cases: usize) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut checked = 0;
    for case in 0..cases {
        let n = rng.gen_range(2..=4);
        let net = random_network::<S>(&mut rng, n);
        let arrays: Vec<AsyncArray<f64, S>> = net
            .structures
            .iter()
            .map(|s| AsyncArray::random(Arc::clone(s), rng.r#gen()))
            .collect();
        let refs: Vec<&AsyncArray<f64, S>> = arrays.iter().collect();
        let dense: Vec<Vec<f64>> = arrays.iter().map(|a| a.to_dense().unwrap()).collect();
        let labels: Vec<String> = net.labels.iter().map(|l| l.iter().collect()).collect();
        let network = Network::new(
            labels
                .iter()
                .zip(&net.structures)
                .map(|(l, s)| (l.as_str(), Arc::clone(s)))
                .collect(),
        )
        .unwrap();
        let open = network.open_labels();
        let orders = [network.greedy().unwrap().steps, random_order(&mut rng, n)];
        for steps in orders {
            let order = Order { steps, flops: 0 };
            let (default, default_labels) = network.contract(&refs, &order).unwrap();
            assert_eq!(default_labels, open);
            let mut output = open.clone();
            output.shuffle(&mut rng);
            let split = rng.gen_range(0..=output.len());
            let spec = format!(
                "{}|{}",
                output[..split].iter().collect::<String>(),
                output[split..].iter().collect::<String>()
            );
            let what = || format!("case {case}: {labels:?} -> {spec:?}, order {order:?}");
            let got = network.contract_to(&refs, &order, &spec).unwrap();
            assert_eq!(got.structure().n_codomain(), split, "{}", what());
            // contract, then permute.
            let perm: Vec<usize> = output
                .iter()
                .map(|c| open.iter().position(|o| o == c).unwrap())
                .collect();
            let permuted = default.permute(&perm, split).unwrap();
            assert_eq!(got.structure(), permuted.structure(), "{}", what());
            let (g, p) = (got.to_dense().unwrap(), permuted.to_dense().unwrap());
            let (labels_want, want) = reference_to(&net, &dense, Some(&output));
            assert_eq!(labels_want, output);
            let scale = 1.0 + want.iter().map(|x| x * x).sum::<f64>().sqrt();
            for (i, ((g, p), w)) in g.iter().zip(&p).zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-12 * scale,
                    "element {i}: {g} vs {w}, {}",
                    what()
                );
                assert!(
                    (g - p).abs() <= 1e-12 * scale,
                    "element {i}: {g} vs {p}, {}",
                    what()
                );
            }
            // Without a split: the one `contract` gives.
            let plain: String = output.iter().collect();
            let got = network.contract_to(&refs, &order, &plain).unwrap();
            assert_eq!(
                got.structure().n_codomain(),
                default.structure().n_codomain(),
                "{}",
                what()
            );
            checked += 1;
        }
    }
    checked
}

#[test]
fn network_outputs_in_a_given_order_carry_the_koszul_sign_of_the_reordering() {
    let mut checked = outputs_in_order::<FermionParity>(0x0de1, 60);
    checked += outputs_in_order::<FermionicU1>(0x0de2, 40);
    assert!(checked > 100, "{checked} contractions checked");
}

#[test]
fn a_permutation_of_two_odd_legs_is_negative_and_of_even_ones_is_not() {
    // A dense reference for the sign alone: T(x, y) with both legs (even 1 | odd 1).
    let v = Leg::new(
        Direction::In,
        [(FermionParity::EVEN, 1), (FermionParity::ODD, 1)],
    )
    .unwrap();
    let s = BlockStructure::new([v.clone(), v.clone()], [], FermionParity::EVEN).unwrap();
    // Column-major: (0,0) even-even = 1, (1,1) odd-odd = 2.
    let t = AsyncArray::from_dense(s, &[1.0, 0.0, 0.0, 2.0]).unwrap();
    let swapped = t.permute(&[1, 0], 2).unwrap();
    assert_eq!(swapped.to_dense().unwrap(), vec![1.0, 0.0, 0.0, -2.0]);
}

#[test]
fn output_labels_that_are_not_the_open_legs_are_refused_before_anything_runs() {
    let v = Leg::new(
        Direction::In,
        [(FermionParity::EVEN, 2), (FermionParity::ODD, 1)],
    )
    .unwrap();
    let m = Arc::new(BlockStructure::new([v.clone()], [v.dual()], FermionParity::EVEN).unwrap());
    let net = Network::new(vec![("ab", Arc::clone(&m)), ("bc", Arc::clone(&m))]).unwrap();
    let a = AsyncArray::<f64, _>::random(Arc::clone(&m), 1);
    let b = AsyncArray::<f64, _>::random(m, 2);
    let (da, db) = (a.to_dense().unwrap(), b.to_dense().unwrap());
    let order = net.greedy().unwrap();
    for (output, why) in [
        ("a", "open leg 'c' is missing"),
        ("abc", "label 'b' is not an open leg"),
        ("acx", "label 'x' is not an open leg"),
        ("aca", "label 'a' is given twice"),
        ("a|c|", "'|' is given twice"),
        ("", "open leg 'a' is missing"),
    ] {
        let err = net.contract_to(&[&a, &b], &order, output).unwrap_err();
        let tessera_contract::Error::OutputLabels {
            expected,
            given,
            reason,
        } = &err
        else {
            panic!("{output:?}: expected OutputLabels, got {err}")
        };
        assert_eq!((expected.as_str(), given.as_str()), ("ac", output));
        assert_eq!(reason, why, "{output:?}");
        assert!(err.to_string().contains("expected the network's open legs"));
    }
    // One tensor: its legs permuted, with the sign of the odd legs crossed.
    let one = Network::new(vec![("xy", Arc::clone(a.structure()))]).unwrap();
    let none = Order {
        steps: vec![],
        flops: 0,
    };
    let yx = one.contract_to(&[&a], &none, "y|x").unwrap();
    assert_eq!(
        yx.to_dense().unwrap(),
        a.permute(&[1, 0], 1).unwrap().to_dense().unwrap()
    );
    // Nothing was written: the operands are as they were.
    assert_eq!((a.to_dense().unwrap(), b.to_dense().unwrap()), (da, db));
}
