//! Observables of random matrix product states against dense references.
//!
//! Every state is a seeded random MPS (`AsyncArray::random` on chained legs with several
//! charge sectors per bond), contracted here to its dense amplitudes by plain matrix
//! products of the tensors' dense forms (an independent route: no library contraction).
//! For graded sectors the chain is the plain product, so those amplitudes are the Fock
//! amplitudes in the occupation basis in site order; the first test checks that claim on
//! hand-built states. The dense operators carry explicit Jordan-Wigner strings: an operator
//! of odd charge on site `i` is `Z_0 ... Z_{i-1} O_i` with `Z = (-1)^parity`. Norms,
//! expectations, correlation matrices (both orders, odd pairs included), entropies and
//! Schmidt spectra (dense SVD of the reshaped state, per charge of the left part) agree to
//! `1e-10`.

use std::collections::{BTreeMap, BTreeSet};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tessera_blocks::{
    AbelianSector, AsyncArray, BlockStructure, Direction, FermionParity, FermionicU1, Leg, Product,
    U1,
};
use tessera_contract::Contraction;
use tessera_mps::observables::{LocalOperator, Observables, Report};
use tessera_mps::{Error, Mps};

const TOL: f64 = 1e-10;

fn fermion(n: i32) -> FermionicU1 {
    Product(U1(n), FermionParity::new(n % 2 != 0))
}

/// The charge of every dense index of a leg, segment by segment.
fn charges<S: AbelianSector>(leg: &Leg<S>) -> Vec<S> {
    leg.segments()
        .iter()
        .flat_map(|s| std::iter::repeat_n(s.sector.clone(), s.dim))
        .collect()
}

/// A random MPS on `physical` (In legs) of total charge `total`: every bond carries each
/// charge that is reachable from the left edge and can still reach `total`, with a random
/// dimension in `1..=max_dim`; the tensors are `AsyncArray::random` with split `(k s | r)`.
fn random_mps<S: AbelianSector>(
    physical: &[Leg<S>],
    total: &S,
    max_dim: usize,
    seed: u64,
) -> Mps<S> {
    let l = physical.len();
    let site_charges: Vec<BTreeSet<S>> = physical
        .iter()
        .map(|p| p.segments().iter().map(|s| s.sector.clone()).collect())
        .collect();
    // forward[i]: the charges after site i reachable from the left edge.
    let mut forward: Vec<BTreeSet<S>> = Vec::with_capacity(l);
    let mut reach = BTreeSet::from([S::trivial()]);
    for cs in &site_charges {
        reach = reach
            .iter()
            .flat_map(|c| cs.iter().map(move |s| c.fuse_abelian(s)))
            .collect();
        forward.push(reach.clone());
    }
    // Keep those that can still reach `total`.
    let mut bonds: Vec<BTreeSet<S>> = vec![BTreeSet::new(); l];
    bonds[l - 1] = BTreeSet::from([total.clone()]);
    assert!(forward[l - 1].contains(total), "the charge is reachable");
    for i in (0..l - 1).rev() {
        bonds[i] = forward[i]
            .iter()
            .filter(|c| {
                site_charges[i + 1]
                    .iter()
                    .any(|s| bonds[i + 1].contains(&c.fuse_abelian(s)))
            })
            .cloned()
            .collect();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut left = Leg::new(Direction::In, [(S::trivial(), 1)]).unwrap();
    let mut tensors = Vec::with_capacity(l);
    for (i, p) in physical.iter().enumerate() {
        let right = if i + 1 == l {
            Leg::new(Direction::Out, [(total.clone(), 1)]).unwrap()
        } else {
            Leg::new(
                Direction::Out,
                bonds[i]
                    .iter()
                    .map(|c| (c.clone(), rng.gen_range(1..=max_dim))),
            )
            .unwrap()
        };
        let s =
            BlockStructure::new([left.clone(), p.clone()], [right.clone()], S::trivial()).unwrap();
        tensors.push(AsyncArray::random(s, seed * 1000 + i as u64));
        left = right.dual();
    }
    Mps::new(tensors).unwrap()
}

/// The dense amplitudes of `mps`, site 0 fastest, by plain matrix products of the dense
/// tensors (column-major `(k, s, r)`).
fn dense_state<S: AbelianSector>(mps: &Mps<S>) -> Vec<f64> {
    // psi[c + n * r]: configuration c of the sites so far (n of them), bond r.
    let mut psi = vec![1.0];
    let mut n = 1;
    for a in mps.tensors() {
        let legs = a.structure().legs();
        let (dk, ds, dr) = (legs[0].dim(), legs[1].dim(), legs[2].dim());
        let t = a.to_dense().unwrap();
        let mut next = vec![0.0; n * ds * dr];
        for r in 0..dr {
            for s in 0..ds {
                for k in 0..dk {
                    let x = t[k + dk * (s + ds * r)];
                    if x == 0.0 {
                        continue;
                    }
                    for c in 0..n {
                        next[c + n * (s + ds * r)] += psi[c + n * k] * x;
                    }
                }
            }
        }
        psi = next;
        n *= ds;
    }
    psi
}

/// What the dense reference knows of a chain: the dimension and the parity of every basis
/// state of every site.
struct Dense {
    dims: Vec<usize>,
    odd: Vec<Vec<bool>>,
}

impl Dense {
    fn new<S: AbelianSector>(physical: &[Leg<S>]) -> Self {
        Self {
            dims: physical.iter().map(Leg::dim).collect(),
            odd: physical
                .iter()
                .map(|p| charges(p).iter().map(|c| c.parity()).collect())
                .collect(),
        }
    }

    fn len(&self) -> usize {
        self.dims.iter().product()
    }

    fn digits(&self, mut x: usize) -> Vec<usize> {
        self.dims
            .iter()
            .map(|&d| {
                let s = x % d;
                x /= d;
                s
            })
            .collect()
    }

    /// `O_site psi`, with the Jordan-Wigner string of an odd `O` (`Z` on every site before).
    fn apply(&self, op: &[f64], odd: bool, site: usize, psi: &[f64]) -> Vec<f64> {
        let d = self.dims[site];
        let stride: usize = self.dims[..site].iter().product();
        let mut out = vec![0.0; psi.len()];
        for (x, &amp) in psi.iter().enumerate() {
            if amp == 0.0 {
                continue;
            }
            let digits = self.digits(x);
            let string = (0..site).filter(|&k| self.odd[k][digits[k]]).count();
            let sign = if odd && string % 2 == 1 { -1.0 } else { 1.0 };
            let i = digits[site];
            for o in 0..d {
                let y = x - i * stride + o * stride;
                out[y] += sign * op[o + d * i] * amp;
            }
        }
        out
    }

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// `<psi|O_i P_j|psi> / <psi|psi>`.
    fn correlation<S: AbelianSector>(
        &self,
        psi: &[f64],
        o: &Op<S>,
        i: usize,
        p: &Op<S>,
        j: usize,
    ) -> f64 {
        let pj = self.apply(&p.dense, p.odd, j, psi);
        let opj = self.apply(&o.dense, o.odd, i, &pj);
        Self::dot(psi, &opj) / Self::dot(psi, psi)
    }

    fn expectation<S: AbelianSector>(&self, psi: &[f64], o: &Op<S>, i: usize) -> f64 {
        Self::dot(psi, &self.apply(&o.dense, o.odd, i, psi)) / Self::dot(psi, psi)
    }

    /// The Schmidt values of the cut after site `bond`, by charge of the left part (the
    /// fusion of the charges of its sites' states), from dense SVDs, normalised.
    fn spectrum<S: AbelianSector>(
        &self,
        physical: &[Leg<S>],
        psi: &[f64],
        bond: usize,
    ) -> BTreeMap<S, Vec<f64>> {
        let left: usize = self.dims[..=bond].iter().product();
        let right = psi.len() / left;
        let norm = Self::dot(psi, psi).sqrt();
        let mut rows: BTreeMap<S, Vec<usize>> = BTreeMap::new();
        for l in 0..left {
            let digits = self.digits(l);
            let q = S::fuse_all(
                physical[..=bond]
                    .iter()
                    .zip(&digits)
                    .map(|(p, &s)| charges(p)[s].clone())
                    .collect::<Vec<_>>()
                    .iter(),
            );
            rows.entry(q).or_default().push(l);
        }
        rows.into_iter()
            .map(|(q, ls)| {
                let m = faer::Mat::<f64>::from_fn(ls.len(), right, |a, r| psi[ls[a] + left * r]);
                let mut s = m.singular_values().expect("dense SVD converges");
                s.iter_mut().for_each(|x| *x /= norm);
                s.sort_by(|a, b| b.total_cmp(a));
                (q, s)
            })
            .collect()
    }
}

/// An operator both ways: the library's and the dense matrix.
struct Op<S: AbelianSector> {
    local: LocalOperator<S>,
    dense: Vec<f64>,
    odd: bool,
}

impl<S: AbelianSector> Op<S> {
    fn random(p: &Leg<S>, flux: S, seed: u64) -> Self {
        let s = BlockStructure::new([p.clone()], [p.dual()], flux).unwrap();
        Self::of(LocalOperator::new(AsyncArray::random(s, seed)).unwrap())
    }

    fn from_dense(p: &Leg<S>, flux: S, dense: &[f64]) -> Self {
        Self::of(LocalOperator::from_dense(p, flux, dense).unwrap())
    }

    fn of(local: LocalOperator<S>) -> Self {
        Self {
            dense: local.tensor().to_dense().unwrap(),
            odd: local.is_odd(),
            local,
        }
    }
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() < TOL,
        "{what}: got {got}, want {want} (off by {:e})",
        got - want
    );
}

/// Compares everything on one random state: norm, the closing at every bond, `<O_i>` of
/// each operator, the full correlation matrix of each pair (and single entries in both
/// orders), entropies and spectra.
fn check_state<S: AbelianSector>(
    physical: &[Leg<S>],
    mps: &Mps<S>,
    ops: &[Op<S>],
    pairs: &[(usize, usize)],
) {
    let dense = Dense::new(physical);
    let psi = dense_state(mps);
    assert_eq!(psi.len(), dense.len());
    let obs = Observables::new(mps).unwrap();
    let norm = Dense::dot(&psi, &psi).sqrt();
    assert!(
        (obs.norm() - norm).abs() < TOL * norm,
        "norm {} vs {norm}",
        obs.norm()
    );
    for i in 0..=mps.len() {
        close(
            obs.closed_norm(i).unwrap(),
            1.0,
            &format!("closed at bond {i}"),
        );
    }
    let l = mps.len();
    for (k, op) in ops.iter().enumerate() {
        let got = obs.one_site(&op.local).unwrap();
        for (i, g) in got.into_iter().enumerate() {
            close(g, dense.expectation(&psi, op, i), &format!("<O{k}_{i}>"));
        }
    }
    let mut nonzero = 0;
    for &(a, b) in pairs {
        let (o, p) = (&ops[a], &ops[b]);
        let c = obs.correlations(&o.local, &p.local).unwrap();
        assert_eq!(c.len(), l);
        for (i, row) in c.iter().enumerate() {
            for (j, &got) in row.iter().enumerate() {
                let want = dense.correlation(&psi, o, i, p, j);
                close(got, want, &format!("<O{a}_{i} O{b}_{j}>"));
                nonzero += usize::from(want.abs() > 1e-3);
            }
        }
        // Single entries, both orders, agree with the matrix.
        for (i, j) in [(0, l - 1), (l - 1, 0), (1, 1), (l / 2, 1)] {
            close(
                obs.correlation(&o.local, i, &p.local, j).unwrap(),
                c[i][j],
                &format!("single <O{a}_{i} O{b}_{j}>"),
            );
        }
    }
    assert!(
        pairs.is_empty() || nonzero > l,
        "the references are not all zero"
    );
    let bonds = obs.entanglement().unwrap();
    assert_eq!(bonds.len(), l - 1);
    for b in &bonds {
        let want = dense.spectrum(physical, &psi, b.bond);
        let mut entropy = 0.0;
        for (q, values) in &want {
            let got: Vec<f64> = b
                .spectrum
                .iter()
                .find(|(c, _)| c == q)
                .map(|(_, v)| v.iter().copied().filter(|&x| x > 1e-12).collect())
                .unwrap_or_default();
            let values: Vec<f64> = values.iter().copied().filter(|&x| x > 1e-12).collect();
            assert_eq!(got.len(), values.len(), "bond {}, sector {q}", b.bond);
            for (g, w) in got.iter().zip(&values) {
                close(
                    *g,
                    *w,
                    &format!("Schmidt value, bond {}, sector {q}", b.bond),
                );
            }
            entropy -= values.iter().map(|x| x * x * (x * x).ln()).sum::<f64>();
        }
        // No sector that the dense state lacks carries weight.
        for (q, v) in &b.spectrum {
            if !want.contains_key(q) {
                assert!(v.iter().all(|&x| x < 1e-12), "bond {}, sector {q}", b.bond);
            }
        }
        close(b.entropy(), entropy, &format!("entropy at bond {}", b.bond));
    }
}

#[test]
fn dense_entries_are_fock_amplitudes_in_site_order() {
    // Two sites: c^+ applied to one site tensor by the library's graded contraction. The
    // tensors before that site are even (trivial flux), so acting on the site tensor is
    // acting on the chain. c_1^+ on c_2^+|0> gives c_1^+ c_2^+|0>: amplitude +1 at (1, 1);
    // c_2^+ on c_1^+|0> gives c_2^+ c_1^+|0> = -c_1^+ c_2^+|0>: amplitude -1, the sign
    // coming from the odd left bond of site 2 that the operator crosses.
    let p = Leg::new(Direction::In, [(fermion(0), 1), (fermion(1), 1)]).unwrap();
    let create = LocalOperator::from_dense(&p, fermion(1), &[0.0, 1.0, 0.0, 0.0]).unwrap();
    let apply = Contraction::new("oi,kir->ko|r").unwrap();
    let amplitude_11 = |occupied: usize, site: usize| {
        let mut states = [0, 0];
        states[occupied] = 1;
        let mut t = Mps::product_state(&[p.clone(), p.clone()], &states)
            .unwrap()
            .into_tensors();
        t[site] = apply.apply(create.tensor(), &t[site]).unwrap();
        // The dense state of the two tensors (the one acted on has odd flux now), by
        // plain products.
        let a = t[0].to_dense().unwrap(); // (1, 2, 1)
        let b = t[1].to_dense().unwrap();
        a[1] * b[1]
    };
    assert_eq!(amplitude_11(1, 0), 1.0, "c_1^+ c_2^+|0>");
    assert_eq!(amplitude_11(0, 1), -1.0, "c_2^+ c_1^+|0>");

    // Three sites: the state with site-order amplitudes psi[110] = 1, psi[011] = -1 is
    // c_1^+ c_2^+|0> - c_2^+ c_3^+|0> = (c_1^+ + c_3^+) c_2^+|0>, so <c_1^+ c_3> = +1/2
    // (hard-core bosons with the same amplitudes would give -1/2).
    let leg = |d, a: i32, b: i32| Leg::new(d, [(fermion(a), 1), (fermion(b), 1)]).unwrap();
    let edge = |d, n: i32| Leg::new(d, [(fermion(n), 1)]).unwrap();
    let tensor =
        |k: Leg<FermionicU1>, r: Leg<FermionicU1>, entries: &[((usize, usize, usize), f64)]| {
            let (dk, dr) = (k.dim(), r.dim());
            let s = BlockStructure::new([k, p.clone()], [r], fermion(0)).unwrap();
            let mut dense = vec![0.0; dk * 2 * dr];
            for &((k, s, r), x) in entries {
                dense[k + dk * (s + 2 * r)] = x;
            }
            AsyncArray::from_dense(s, &dense).unwrap()
        };
    // Bond after site 1: charges (0, 1); after site 2: (1, 2).
    let mps = Mps::new(vec![
        tensor(
            edge(Direction::In, 0),
            leg(Direction::Out, 0, 1),
            &[((0, 0, 0), 1.0), ((0, 1, 1), 1.0)],
        ),
        tensor(
            leg(Direction::In, 0, 1),
            leg(Direction::Out, 1, 2),
            &[((0, 1, 0), 1.0), ((1, 1, 1), 1.0)],
        ),
        tensor(
            leg(Direction::In, 1, 2),
            edge(Direction::Out, 2),
            &[((0, 1, 0), -1.0), ((1, 0, 0), 1.0)],
        ),
    ])
    .unwrap();
    let psi = dense_state(&mps);
    let mut want = vec![0.0; 8];
    want[0b011] = 1.0; // s_1 = s_2 = 1 (site 0 is the lowest bit)
    want[0b110] = -1.0;
    assert_eq!(psi, want);
    let obs = Observables::new(&mps).unwrap();
    let annihilate = create.adjoint().unwrap();
    let got = obs.correlation(&create, 0, &annihilate, 2).unwrap();
    close(got, 0.5, "<c_1^+ c_3>");
    close(
        obs.correlation(&annihilate, 2, &create, 0).unwrap(),
        -0.5,
        "<c_3 c_1^+>",
    );
    let dense = Dense::new(&[p.clone(), p.clone(), p.clone()]);
    let (c, a) = (Op::of(create.clone()), Op::of(annihilate.clone()));
    close(
        dense.correlation(&psi, &c, 0, &a, 2),
        0.5,
        "dense <c_1^+ c_3>",
    );
}

/// Physical operators of spin 1/2 with U(1) charge `2 Sz` (index 0: down, 1: up).
fn spin_half() -> (Leg<U1>, Vec<Op<U1>>) {
    let p = Leg::new(Direction::In, [(U1(-1), 1), (U1(1), 1)]).unwrap();
    let sz = Op::from_dense(&p, U1(0), &[-0.5, 0.0, 0.0, 0.5]);
    let sp = Op::from_dense(&p, U1(2), &[0.0, 1.0, 0.0, 0.0]);
    let sm = Op::of(sp.local.adjoint().unwrap());
    (p, vec![sz, sp, sm])
}

#[test]
fn spin_half_u1_states_match_the_dense_references() {
    let (p, mut ops) = spin_half();
    // Random operators: charge 0, and a charged pair (+2, -2).
    ops.push(Op::random(&p, U1(0), 71));
    ops.push(Op::random(&p, U1(2), 72));
    ops.push(Op::random(&p, U1(-2), 73));
    for (l, total, max_dim, seed) in [(7, 1, 3, 1), (8, 0, 2, 2), (6, -2, 3, 3), (2, 0, 2, 4)] {
        let physical = vec![p.clone(); l];
        let mps = random_mps(&physical, &U1(total), max_dim, seed);
        check_state(
            &physical,
            &mps,
            &ops,
            &[(0, 0), (1, 2), (2, 1), (3, 3), (4, 5), (3, 0)],
        );
    }
}

#[test]
fn spin_one_u1_states_match_the_dense_references() {
    let p = Leg::new(Direction::In, [(U1(-1), 1), (U1(0), 1), (U1(1), 1)]).unwrap();
    let ops = vec![
        Op::random(&p, U1(0), 81),
        Op::random(&p, U1(1), 82),
        Op::random(&p, U1(-1), 83),
        Op::random(&p, U1(2), 84),
        Op::random(&p, U1(-2), 85),
    ];
    let physical = vec![p.clone(); 6];
    let mps = random_mps(&physical, &U1(1), 3, 5);
    check_state(&physical, &mps, &ops, &[(0, 0), (1, 2), (2, 1), (3, 4)]);
}

/// Spinless fermions: `c^+`, `c`, `n`, and random operators of charge 0, +1, -1.
fn spinless() -> (Leg<FermionicU1>, Vec<Op<FermionicU1>>) {
    let p = Leg::new(Direction::In, [(fermion(0), 1), (fermion(1), 1)]).unwrap();
    let create = Op::from_dense(&p, fermion(1), &[0.0, 1.0, 0.0, 0.0]);
    let annihilate = Op::of(create.local.adjoint().unwrap());
    let number = Op::of(create.local.product(&annihilate.local).unwrap());
    let ops = vec![
        create,
        annihilate,
        number,
        Op::random(&p, fermion(0), 91),
        Op::random(&p, fermion(1), 92),
        Op::random(&p, fermion(-1), 93),
    ];
    (p, ops)
}

#[test]
fn spinless_fermions_match_explicit_jordan_wigner_strings() {
    let (p, ops) = spinless();
    for (l, n, max_dim, seed) in [(8, 3, 3, 11), (7, 4, 2, 12), (6, 3, 3, 13), (5, 1, 2, 14)] {
        let physical = vec![p.clone(); l];
        let mps = random_mps(&physical, &fermion(n), max_dim, seed);
        // <c_i^+ c_j> (i < j and i > j), <c_i c_j^+>, <n_i n_j>, random odd pairs.
        check_state(
            &physical,
            &mps,
            &ops,
            &[(0, 1), (1, 0), (2, 2), (4, 5), (5, 4), (3, 2)],
        );
    }
}

#[test]
fn the_jordan_wigner_string_is_needed_and_the_bosonic_answer_differs() {
    // The same amplitudes read as hard-core bosons give another <c_i^+ c_j> at distance
    // two or more: the references are not sign-blind.
    let (p, ops) = spinless();
    let l = 6;
    let physical = vec![p.clone(); l];
    let mps = random_mps(&physical, &fermion(3), 3, 21);
    let psi = dense_state(&mps);
    let dense = Dense::new(&physical);
    let bosons = Dense {
        dims: dense.dims.clone(),
        odd: vec![vec![false; 2]; l],
    };
    let obs = Observables::new(&mps).unwrap();
    let c = obs.correlations(&ops[0].local, &ops[1].local).unwrap();
    let mut differs = 0;
    for (i, row) in c.iter().enumerate() {
        for (j, &got) in row.iter().enumerate() {
            let fermions = dense.correlation(&psi, &ops[0], i, &ops[1], j);
            let hard_core = bosons.correlation(&psi, &ops[0], i, &ops[1], j);
            close(got, fermions, &format!("<c_{i}^+ c_{j}>"));
            differs += usize::from((fermions - hard_core).abs() > 1e-3);
        }
    }
    assert!(differs > 0, "the string changes some correlator");
}

#[test]
fn spinful_electrons_match_explicit_jordan_wigner_strings() {
    // Site basis |0>, |up>, |dn>, |up dn>: charges 0, 1, 1, 2 (two odd states).
    let p = Leg::new(
        Direction::In,
        [(fermion(0), 1), (fermion(1), 2), (fermion(2), 1)],
    )
    .unwrap();
    let ops = vec![
        Op::random(&p, fermion(0), 31),
        Op::random(&p, fermion(1), 32),
        Op::random(&p, fermion(-1), 33),
        Op::random(&p, fermion(2), 34),
        Op::random(&p, fermion(-2), 35),
    ];
    let physical = vec![p.clone(); 5];
    let mps = random_mps(&physical, &fermion(5), 3, 41);
    check_state(&physical, &mps, &ops, &[(0, 0), (1, 2), (2, 1), (3, 4)]);
}

#[test]
fn parity_only_fermions_pair_two_creators() {
    // With only the parity conserved, <c_i^+ c_j^+> is allowed and odd-odd.
    let p = Leg::new(
        Direction::In,
        [(FermionParity::EVEN, 2), (FermionParity::ODD, 2)],
    )
    .unwrap();
    let ops = vec![
        Op::random(&p, FermionParity::EVEN, 51),
        Op::random(&p, FermionParity::ODD, 52),
        Op::random(&p, FermionParity::ODD, 53),
    ];
    let physical = vec![p.clone(); 5];
    for (total, seed) in [(FermionParity::ODD, 61), (FermionParity::EVEN, 62)] {
        let mps = random_mps(&physical, &total, 3, seed);
        check_state(
            &physical,
            &mps,
            &ops,
            &[(0, 0), (1, 2), (2, 1), (1, 1), (0, 1)],
        );
    }
}

#[test]
fn a_charged_operator_has_zero_expectation_by_symmetry() {
    let (p, ops) = spinless();
    let physical = vec![p.clone(); 6];
    let mps = random_mps(&physical, &fermion(3), 3, 71);
    let psi = dense_state(&mps);
    let dense = Dense::new(&physical);
    let obs = Observables::new(&mps).unwrap();
    for op in [&ops[0], &ops[1], &ops[4]] {
        assert!(op.local.flux() != &fermion(0));
        for (i, got) in obs.one_site(&op.local).unwrap().into_iter().enumerate() {
            assert_eq!(got, 0.0);
            assert_eq!(dense.expectation(&psi, op, i), 0.0, "the reference agrees");
            assert_eq!(obs.expectation(&op.local, i).unwrap(), 0.0);
        }
    }
    // A pair of total charge 2 likewise.
    let c = obs.correlations(&ops[0].local, &ops[0].local).unwrap();
    assert!(c.iter().flatten().all(|&x| x == 0.0));
    assert_eq!(dense.correlation(&psi, &ops[0], 1, &ops[0], 4), 0.0);
}

#[test]
fn values_do_not_depend_on_the_gauge_or_the_norm() {
    // Scale one tensor and insert X X^-1 on a bond (a diagonal rescaling per sector):
    // the normalised values stay, the norm scales.
    let (p, ops) = spinless();
    let physical = vec![p.clone(); 6];
    let mps = random_mps(&physical, &fermion(3), 3, 81);
    let base = Observables::new(&mps).unwrap();
    let t = mps.duplicate().into_tensors();
    t[2].scale(3.0);
    // Bond 3 (after site 3): multiply A_3's r by 2 on its first sector, A_4's k by 1/2.
    let first = t[3].structure().legs()[2].segments()[0].sector;
    let ids = |a: &AsyncArray<f64, FermionicU1>, leg: usize| -> Vec<usize> {
        a.structure()
            .blocks()
            .filter(|b| b.sectors()[leg] == first)
            .map(|b| b.id())
            .collect()
    };
    let (r, k) = (ids(&t[3], 2), ids(&t[4], 0));
    t[3].scale_blocks(2.0, tessera_blocks::Blocks::Only(&r))
        .unwrap();
    t[4].scale_blocks(0.5, tessera_blocks::Blocks::Only(&k))
        .unwrap();
    let gauged = Observables::new(&Mps::new(t).unwrap()).unwrap();
    close(gauged.norm() / base.norm(), 3.0, "the norm scales");
    let (a, b) = (
        base.correlations(&ops[0].local, &ops[1].local).unwrap(),
        gauged.correlations(&ops[0].local, &ops[1].local).unwrap(),
    );
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        close(*x, *y, "gauge-invariant correlation");
    }
    let (a, b) = (base.entanglement().unwrap(), gauged.entanglement().unwrap());
    for (x, y) in a.iter().zip(&b) {
        close(x.entropy(), y.entropy(), "gauge-invariant entropy");
    }
}

#[test]
fn misuse_is_refused_with_what_was_expected() {
    let (p, ops) = spin_half();
    let physical = vec![p.clone(); 4];
    let mps = random_mps(&physical, &U1(0), 2, 91);
    let obs = Observables::new(&mps).unwrap();
    let e = obs.expectation(&ops[0].local, 4).unwrap_err();
    assert!(matches!(e, Error::Site { site: 4, len: 4 }), "{e}");
    // An operator on another leg (spin 1).
    let q = Leg::new(Direction::In, [(U1(-1), 1), (U1(0), 1), (U1(1), 1)]).unwrap();
    let other = LocalOperator::identity(&q).unwrap();
    let e = obs.one_site(&other).unwrap_err();
    assert!(matches!(e, Error::LocalOperator { .. }), "{e}");
    assert!(e.to_string().contains("physical leg of site 0"), "{e}");
    let e = obs.correlation(&ops[0].local, 0, &other, 2).unwrap_err();
    assert!(e.to_string().contains("site 2"), "{e}");
    // Not an operator: an MPS tensor, and a map between different legs.
    let e = LocalOperator::new(mps.tensors()[1].duplicate()).unwrap_err();
    assert!(e.to_string().contains("two legs"), "{e}");
    let s = BlockStructure::new([p.clone()], [q.dual()], U1(0)).unwrap();
    let e = LocalOperator::new(AsyncArray::<f64, U1>::random(s, 1)).unwrap_err();
    assert!(e.to_string().contains("dual of the output leg"), "{e}");
    // A state of norm zero.
    let t = mps.duplicate().into_tensors();
    t[1].scale(0.0);
    let e = Observables::new(&Mps::new(t).unwrap()).unwrap_err();
    assert!(matches!(e, Error::ZeroNorm { norm } if norm == 0.0), "{e}");
    // A report pair naming an unknown operator.
    let e = Report::measure(&obs, &[("Sz", &ops[0].local)], &[("Sz", "Sx")]).unwrap_err();
    assert!(e.to_string().contains("\"Sx\""), "{e}");
}

#[test]
fn the_report_holds_the_measurements_and_reads_back_from_json() {
    let (p, ops) = spinless();
    let physical = vec![p.clone(); 6];
    let mps = random_mps(&physical, &fermion(3), 3, 101);
    let obs = Observables::new(&mps).unwrap();
    let named = [
        ("Cdag", &ops[0].local),
        ("C", &ops[1].local),
        ("N", &ops[2].local),
    ];
    let report = Report::measure(&obs, &named, &[("Cdag", "C"), ("N", "N")])
        .unwrap()
        .with_energies(-2.5, vec![-2.0, -2.4, -2.5]);
    assert_eq!(report.sites, 6);
    assert_eq!(report.charge, fermion(3).to_string());
    assert_eq!(report.energy, Some(-2.5));
    assert_eq!(report.one_site["N"], obs.one_site(&ops[2].local).unwrap());
    assert_eq!(
        report.correlations[0].matrix,
        obs.correlations(&ops[0].local, &ops[1].local).unwrap()
    );
    assert_eq!(
        (
            report.correlations[1].left.as_str(),
            report.correlations[1].right.as_str()
        ),
        ("N", "N")
    );
    let bonds = obs.entanglement().unwrap();
    assert_eq!(report.entanglement.len(), 5);
    for (r, b) in report.entanglement.iter().zip(&bonds) {
        assert_eq!(r.entropy, b.entropy());
        assert_eq!(r.spectrum.len(), b.spectrum.len());
        assert_eq!(r.spectrum[0].sector, b.spectrum[0].0.to_string());
    }
    let dir = std::env::temp_dir().join(format!("tessera-observables-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report.json");
    report.write_json(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(Report::from_json(&text).unwrap(), report);
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["sweep_energies"][2], -2.5);
    assert!(value["entanglement"][2]["spectrum"][0]["sector"].is_string());
    std::fs::remove_dir_all(&dir).unwrap();
    let e = Report::from_json("{\"sites\": 1}").unwrap_err();
    assert!(matches!(e, Error::Report(_)), "{e}");
    let e = report
        .write_json(dir.join("missing").join("r.json"))
        .unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}

/// The MPO of `H = sum_i A_i + sum_i B_i C_{i+1}` (`A` of trivial charge, `C` of the charge
/// opposite to `B`'s): bond states START and DONE (trivial), CARRY (the charge of `B`).
fn pair_mpo<S: AbelianSector>(l: usize, a: &Op<S>, b: &Op<S>, c: &Op<S>) -> tessera_mps::Mpo<S> {
    let p = a.local.physical_leg().clone();
    let d = p.dim();
    let q = b.local.flux().clone();
    let bond = Leg::new(Direction::In, [(S::trivial(), 2), (q, 1)]).unwrap();
    let (start, done, carry) = (0, 1, 2);
    let edge = |dir, state: usize| (Leg::new(dir, [(S::trivial(), 1)]).unwrap(), Some(state));
    let bulk = |dir| {
        (
            if dir == Direction::In {
                bond.clone()
            } else {
                bond.dual()
            },
            None,
        )
    };
    let mut tensors = Vec::with_capacity(l);
    for i in 0..l {
        let (left, fixed_a) = if i == 0 {
            edge(Direction::In, start)
        } else {
            bulk(Direction::In)
        };
        let (right, fixed_b) = if i + 1 == l {
            edge(Direction::Out, done)
        } else {
            bulk(Direction::Out)
        };
        let (da, db) = (left.dim(), right.dim());
        let s = BlockStructure::new([left, p.clone()], [p.dual(), right], S::trivial()).unwrap();
        let mut dense = vec![0.0; da * d * d * db];
        let mut put = |x: usize, y: usize, m: &dyn Fn(usize, usize) -> f64| {
            // A bond state on a one-dimensional edge exists only if it is the edge's.
            let ia = match fixed_a {
                Some(f) if f != x => return,
                Some(_) => 0,
                None => x,
            };
            let ib = match fixed_b {
                Some(f) if f != y => return,
                Some(_) => 0,
                None => y,
            };
            for o in 0..d {
                for k in 0..d {
                    dense[ia + da * (o + d * (k + d * ib))] += m(o, k);
                }
            }
        };
        let identity = |o: usize, k: usize| f64::from(u8::from(o == k));
        put(start, start, &identity);
        put(done, done, &identity);
        put(start, done, &|o, k| a.dense[o + d * k]);
        put(start, carry, &|o, k| b.dense[o + d * k]);
        put(carry, done, &|o, k| c.dense[o + d * k]);
        tensors.push(AsyncArray::from_dense(s, &dense).unwrap());
    }
    tessera_mps::Mpo::new(tensors).unwrap()
}

#[test]
fn an_mpo_expectation_is_the_sum_of_its_terms() {
    // Spinless fermions with a hopping c_i^+ c_{i+1} and a random one-site term, and
    // spin 1/2 with S^+_i S^-_{i+1}: the MPO route, the correlators and the dense state
    // agree.
    let (p, ops) = spinless();
    let physical = vec![p.clone(); 7];
    let mps = random_mps(&physical, &fermion(3), 3, 111);
    let (dense, psi) = (Dense::new(&physical), dense_state(&mps));
    let obs = Observables::new(&mps).unwrap();
    for (a, b, c) in [(3, 0, 1), (2, 1, 0), (3, 4, 5)] {
        let mpo = pair_mpo(7, &ops[a], &ops[b], &ops[c]);
        let got = obs.mpo_expectation(&mpo).unwrap();
        let mut want = 0.0;
        for i in 0..7 {
            want += dense.expectation(&psi, &ops[a], i);
            if i + 1 < 7 {
                want += dense.correlation(&psi, &ops[b], i, &ops[c], i + 1);
            }
        }
        close(got, want, &format!("<H> with terms {a}, {b} {c}"));
    }
    let (p, ops) = spin_half();
    let physical = vec![p.clone(); 6];
    let mps = random_mps(&physical, &U1(0), 3, 112);
    let obs = Observables::new(&mps).unwrap();
    let mpo = pair_mpo(6, &ops[0], &ops[1], &ops[2]);
    let c = obs.correlations(&ops[1].local, &ops[2].local).unwrap();
    let want: f64 = obs.one_site(&ops[0].local).unwrap().iter().sum::<f64>()
        + (0..5).map(|i| c[i][i + 1]).sum::<f64>();
    close(obs.mpo_expectation(&mpo).unwrap(), want, "<H> of spins");
    let short = pair_mpo(5, &ops[0], &ops[1], &ops[2]);
    let e = obs.mpo_expectation(&short).unwrap_err();
    assert!(e.to_string().contains("6 sites"), "{e}");
}
