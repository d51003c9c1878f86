//! Models, the MPO builder and exact diagonalisation against dense references.
//!
//! The MPO of every model (and of seeded random operator sums with reordered, long-range
//! and same-site fermionic products), contracted to a dense matrix through Tessera's
//! graded contractions, must equal the Hamiltonian that `exact` builds independently
//! (explicit Jordan-Wigner signs, operators applied in the order written) in every charge
//! sector; the exact ground energies must match textbook results.

use std::collections::BTreeSet;

use faer::Mat;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tessera_blocks::{AbelianSector, U1};
use tessera_mps::exact;
use tessera_mps::models::{ChainModel, Hubbard, Model, Spin, SpinChain, SpinlessFermions};
use tessera_mps::mpo;
use tessera_mps::sites::{Site, electron_charge, fermion_charge};
use tessera_mps::terms::Terms;
use tessera_mps::{Error, Mpo};

/// Every total charge of the product states of `len` sites.
fn sectors<S: AbelianSector>(site: &Site<S>, len: usize) -> Vec<S> {
    let mut all = BTreeSet::new();
    let d = site.dim();
    for code in 0..d.pow(len as u32) {
        let mut q = S::trivial();
        let mut c = code;
        for _ in 0..len {
            q = q.fuse_abelian(site.charge_of(c % d));
            c /= d;
        }
        all.insert(q);
    }
    all.into_iter().collect()
}

fn max_diff(a: &Mat<f64>, b: &Mat<f64>) -> f64 {
    assert_eq!((a.nrows(), a.ncols()), (b.nrows(), b.ncols()));
    let mut m = 0.0_f64;
    for j in 0..a.ncols() {
        for i in 0..a.nrows() {
            m = m.max((a[(i, j)] - b[(i, j)]).abs());
        }
    }
    m
}

fn frobenius2(a: &Mat<f64>) -> f64 {
    let mut s = 0.0;
    for j in 0..a.ncols() {
        for i in 0..a.nrows() {
            s += a[(i, j)] * a[(i, j)];
        }
    }
    s
}

/// The MPO of `terms` equals the exact Hamiltonian in every sector, and has no element
/// between sectors. Returns the number of sectors checked.
fn check_mpo_against_exact<S: AbelianSector>(terms: &Terms<S>, what: &str) -> usize {
    let w = mpo::build(terms).expect("the MPO builds");
    check_given_mpo(&w, terms, what)
}

fn check_given_mpo<S: AbelianSector>(w: &Mpo<S>, terms: &Terms<S>, what: &str) -> usize {
    let full = exact::mpo_matrix(w).expect("the MPO contracts");
    let mut inside = 0.0;
    let all = sectors(terms.site(), terms.len());
    for q in &all {
        let (basis, h) = exact::hamiltonian(terms, q).expect("the sector builds");
        let restricted = exact::restrict(&full, &basis);
        let diff = max_diff(&restricted, &h);
        assert!(diff < 1e-12, "{what}, sector {q}: |MPO - exact| = {diff}");
        inside += frobenius2(&restricted);
    }
    let total = frobenius2(&full);
    assert!(
        (total - inside).abs() <= 1e-12 * total.max(1.0),
        "{what}: elements between sectors ({total} vs {inside})"
    );
    assert!(total > 0.0, "{what}: a zero Hamiltonian checks nothing");
    all.len()
}

#[test]
fn every_model_mpo_equals_the_exact_hamiltonian_in_every_sector() {
    let mut rng = ChaCha8Rng::seed_from_u64(28);
    let mut r = |lo: f64, hi: f64| rng.gen_range(lo..hi);
    let spins = [
        (8, Spin::Half, 1.0, 1.0, 0.0, 0.0),
        (10, Spin::Half, 1.0, 1.0, 0.5, 0.0),
        (8, Spin::Half, r(0.5, 1.5), r(-1.0, 2.0), 0.0, r(-1.0, 1.0)),
        (
            9,
            Spin::Half,
            r(0.5, 1.5),
            r(0.5, 1.5),
            r(0.2, 0.8),
            r(-1.0, 1.0),
        ),
        (
            6,
            Spin::One,
            r(0.5, 1.5),
            r(-1.0, 2.0),
            r(0.2, 0.8),
            r(-1.0, 1.0),
        ),
    ];
    for (len, spin, jxy, jz, j2, hz) in spins {
        let m = SpinChain {
            len,
            spin,
            jxy,
            jz,
            j2,
            hz,
            two_sz: 0,
        };
        let n = check_mpo_against_exact(&m.terms().unwrap(), &format!("{m:?}"));
        assert_eq!(
            n,
            if spin == Spin::Half {
                len + 1
            } else {
                2 * len + 1
            }
        );
    }
    for (len, t2, v) in [
        (8, 0.0, r(0.5, 2.0)),
        (8, r(-1.0, 1.0), r(0.5, 2.0)),
        (7, r(0.2, 1.0), 0.0),
    ] {
        let m = SpinlessFermions {
            len,
            t: r(0.5, 1.5),
            t2,
            v,
            n: 0,
        };
        check_mpo_against_exact(&m.terms().unwrap(), &format!("{m:?}"));
    }
    for len in [2, 3, 4, 5] {
        let m = Hubbard {
            len,
            t: r(0.5, 1.5),
            u: r(1.0, 8.0),
            n: len,
            two_sz: 0,
        };
        let n = check_mpo_against_exact(&m.terms().unwrap(), &format!("{m:?}"));
        // Sectors (N, 2Sz): every Nup, Ndn in 0..=L.
        assert_eq!(n, (len + 1) * (len + 1));
    }
}

/// A random charge-conserving product: the operators of one template at random sites, in a
/// random order.
fn random_product<'a>(
    rng: &mut ChaCha8Rng,
    templates: &[&[&'a str]],
    len: usize,
) -> Vec<(&'a str, usize)> {
    let t = templates[rng.gen_range(0..templates.len())];
    let mut ops: Vec<(&str, usize)> = t.iter().map(|&o| (o, rng.gen_range(0..len))).collect();
    ops.shuffle(rng);
    ops
}

#[test]
fn random_operator_sums_with_reordered_fermions_match_exact_diagonalisation() {
    let mut rng = ChaCha8Rng::seed_from_u64(2801);
    let spinless: [&[&str]; 5] = [
        &["Cdag", "C"],
        &["Cdag", "C"],
        &["Cdag", "Cdag", "C", "C"],
        &["N", "Cdag", "C"],
        &["N"],
    ];
    for len in [3, 5, 6] {
        let mut h = Terms::new(Site::spinless_fermion(), len).unwrap();
        for _ in 0..25 {
            let ops = random_product(&mut rng, &spinless, len);
            h.add(rng.gen_range(-1.0..1.0), ops).unwrap();
        }
        check_mpo_against_exact(&h, &format!("random spinless L={len}"));
        let w = mpo::build(&h).unwrap();
        println!(
            "random spinless L={len}: bonds {:?}",
            mpo::bond_dimensions(&w)
        );
    }
    let electrons: [&[&str]; 7] = [
        &["Cdagup", "Cup"],
        &["Cdagdn", "Cdn"],
        &["Cdagup", "Cdagdn", "Cdn", "Cup"],
        &["Cdagup", "Cdn", "Cdagdn", "Cup"],
        &["Sp", "Cdagdn", "Cup"],
        &["NupNdn", "Sz"],
        &["Sp", "Sm"],
    ];
    for len in [2, 3, 4] {
        let mut h = Terms::new(Site::electron(), len).unwrap();
        for _ in 0..25 {
            let ops = random_product(&mut rng, &electrons, len);
            h.add(rng.gen_range(-1.0..1.0), ops).unwrap();
        }
        check_mpo_against_exact(&h, &format!("random electrons L={len}"));
        // The same sum on parity-only sites: the sectors are the two parities.
        let mut p = Terms::new(Site::electron_parity(), len).unwrap();
        for t in h.terms() {
            p.add(
                t.coefficient,
                t.operators.iter().map(|(n, s)| (n.as_str(), *s)),
            )
            .unwrap();
        }
        assert_eq!(check_mpo_against_exact(&p, "parity-only electrons"), 2);
    }
}

/// The largest bond dimension inside the chain.
fn bulk<S: AbelianSector>(w: &Mpo<S>) -> usize {
    mpo::bond_dimensions(w)[1..w.len()]
        .iter()
        .copied()
        .max()
        .unwrap()
}

#[test]
fn bond_dimensions_are_those_of_the_automaton() {
    let spin = |j2: f64| SpinChain {
        len: 10,
        spin: Spin::Half,
        jxy: 1.0,
        jz: 1.0,
        j2,
        hz: 0.3,
        two_sz: 0,
    };
    let heisenberg = spin(0.0).mpo().unwrap();
    // The field's "done" state at the first bond is a multiple of the "Sz placed" one.
    assert_eq!(
        mpo::bond_dimensions(&heisenberg),
        [1, 4, 5, 5, 5, 5, 5, 5, 5, 4, 1]
    );
    assert_eq!(bulk(&spin(0.5).mpo().unwrap()), 8);
    let tv = |t2: f64| SpinlessFermions {
        len: 10,
        t: 1.0,
        t2,
        v: 1.0,
        n: 5,
    };
    assert_eq!(bulk(&tv(0.0).mpo().unwrap()), 5);
    assert_eq!(bulk(&tv(0.5).mpo().unwrap()), 7);
    let hubbard = Hubbard {
        len: 10,
        t: 1.0,
        u: 4.0,
        n: 10,
        two_sz: 0,
    };
    let w = hubbard.mpo().unwrap();
    assert_eq!(bulk(&w), 6);
    // Long chains build quickly: the automaton is linear in the number of terms.
    let start = std::time::Instant::now();
    let long = Hubbard {
        len: 256,
        ..hubbard.clone()
    }
    .mpo()
    .unwrap();
    assert_eq!(bulk(&long), 6);
    println!("Hubbard L=256 MPO built in {:?}", start.elapsed());
    println!(
        "bond dimensions: Heisenberg {}, J1-J2 {}, t-V {}, t-V-t2 {}, Hubbard {}",
        bulk(&heisenberg),
        bulk(&spin(0.5).mpo().unwrap()),
        bulk(&tv(0.0).mpo().unwrap()),
        bulk(&tv(0.5).mpo().unwrap()),
        bulk(&w)
    );
}

#[test]
fn long_range_exponential_couplings_compress_to_the_nearest_neighbour_bond_dimension() {
    // H = sum_{i<j} lambda^(j-i-1) (S+_i S-_j / 2 + h.c. + Sz_i Sz_j): the automaton has a
    // state per placed site, the deparallelisation folds them into one per operator.
    let (len, lambda) = (8, 0.6);
    let mut h = Terms::new(Site::spin_half(), len).unwrap();
    for i in 0..len {
        for j in i + 1..len {
            let c = lambda_pow(lambda, j - i - 1);
            h.add(0.5 * c, [("Sp", i), ("Sm", j)]).unwrap();
            h.add(0.5 * c, [("Sm", i), ("Sp", j)]).unwrap();
            h.add(c, [("Sz", i), ("Sz", j)]).unwrap();
        }
    }
    let w = mpo::build(&h).unwrap();
    assert_eq!(bulk(&w), 5, "{:?}", mpo::bond_dimensions(&w));
    check_given_mpo(&w, &h, "exponential couplings");
    // Fermions too: long-range hopping with a decaying amplitude, strings and all.
    let mut f = Terms::new(Site::spinless_fermion(), len).unwrap();
    for i in 0..len {
        for j in i + 1..len {
            let c = -lambda_pow(lambda, j - i - 1);
            f.add(c, [("Cdag", i), ("C", j)]).unwrap();
            f.add(c, [("Cdag", j), ("C", i)]).unwrap();
        }
    }
    let w = mpo::build(&f).unwrap();
    assert_eq!(bulk(&w), 4, "{:?}", mpo::bond_dimensions(&w));
    check_given_mpo(&w, &f, "exponential hopping");
}

fn lambda_pow(lambda: f64, k: usize) -> f64 {
    (0..k).fold(1.0, |x, _| x * lambda)
}

#[test]
fn exact_ground_energies_are_the_textbook_ones() {
    // The two-site Heisenberg singlet.
    let Model::Spin(m) = Model::parse("heisenberg:L=2").unwrap() else {
        panic!("a spin chain")
    };
    let e = exact::ground_energy(&m.terms().unwrap(), &U1(0)).unwrap();
    assert!((e + 0.75).abs() < 1e-14, "{e}");
    // Its triplet: 1/4 in the Sz = 1 sector.
    let e = exact::ground_energy(&m.terms().unwrap(), &U1(2)).unwrap();
    assert!((e - 0.25).abs() < 1e-14, "{e}");
    // Free fermions: the sum of the lowest single-particle energies, every filling.
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for len in [6, 9, 10] {
        let (t, t2) = (rng.gen_range(0.5..1.5), rng.gen_range(-0.8..0.8));
        let hop = Mat::<f64>::from_fn(len, len, |i, j| match i.abs_diff(j) {
            1 => -t,
            2 => -t2,
            _ => 0.0,
        });
        let eps = hop.self_adjoint_eigenvalues(faer::Side::Lower).unwrap();
        for n in 0..=len {
            let m = SpinlessFermions {
                len,
                t,
                t2,
                v: 0.0,
                n,
            };
            let e = exact::ground_energy(&m.terms().unwrap(), &m.sector()).unwrap();
            let free: f64 = eps[..n].iter().sum();
            assert!((e - free).abs() < 1e-11, "L {len}, N {n}: {e} vs {free}");
        }
    }
    // Two-site Hubbard at half filling: (U - sqrt(U^2 + 16 t^2)) / 2.
    for (t, u) in [(1.0, 4.0), (0.7, 0.0), (1.3, 10.0)] {
        let m = Hubbard {
            len: 2,
            t,
            u,
            n: 2,
            two_sz: 0,
        };
        let e = exact::ground_energy(&m.terms().unwrap(), &m.sector()).unwrap();
        let want = (u - (u * u + 16.0 * t * t).sqrt()) / 2.0;
        assert!((e - want).abs() < 1e-13, "t {t}, U {u}: {e} vs {want}");
    }
    // Free spinful fermions: U = 0 is two copies of the spinless chain.
    let m = Hubbard {
        len: 6,
        t: 1.0,
        u: 0.0,
        n: 6,
        two_sz: 0,
    };
    let eps = Mat::<f64>::from_fn(6, 6, |i, j| if i.abs_diff(j) == 1 { -1.0 } else { 0.0 })
        .self_adjoint_eigenvalues(faer::Side::Lower)
        .unwrap();
    let e = exact::ground_energy(&m.terms().unwrap(), &m.sector()).unwrap();
    let free = 2.0 * eps[..3].iter().sum::<f64>();
    assert!((e - free).abs() < 1e-12, "{e} vs {free}");
}

#[test]
fn lanczos_on_large_sectors_agrees_with_the_dense_eigensolver_and_free_fermions() {
    let mut rng = ChaCha8Rng::seed_from_u64(81);
    // 1225 states (4 up, 3 down on 7 sites): past the dense threshold.
    let m = Hubbard {
        len: 7,
        t: rng.gen_range(0.5..1.5),
        u: rng.gen_range(1.0..8.0),
        n: 7,
        two_sz: 1,
    };
    let terms = m.terms().unwrap();
    let (basis, _) = exact::sparse_hamiltonian(&terms, &m.sector()).unwrap();
    assert!(basis.len() > exact::DENSE_GROUND_ENERGY_DIM);
    let lanczos = exact::ground_energy(&terms, &m.sector()).unwrap();
    let dense = exact::spectrum(&terms, &m.sector()).unwrap()[0];
    assert!((lanczos - dense).abs() < 1e-11, "{lanczos} vs {dense}");
    // 3432 states of free fermions with a hop over a site.
    let (len, t, t2) = (14, 1.0, rng.gen_range(-0.8..0.8));
    let f = SpinlessFermions {
        len,
        t,
        t2,
        v: 0.0,
        n: 7,
    };
    let eps = Mat::<f64>::from_fn(len, len, |i, j| match i.abs_diff(j) {
        1 => -t,
        2 => -t2,
        _ => 0.0,
    })
    .self_adjoint_eigenvalues(faer::Side::Lower)
    .unwrap();
    let e = exact::ground_energy(&f.terms().unwrap(), &f.sector()).unwrap();
    let free: f64 = eps[..7].iter().sum();
    assert!((e - free).abs() < 1e-11, "{e} vs {free}");
}

#[test]
fn fermionic_operators_anticommute_across_sites_in_the_exact_basis() {
    let site = Site::spinless_fermion();
    let len = 4;
    for i in 0..len {
        for j in 0..len {
            let a = exact::operator_matrix(&site, len, &[("C", j), ("Cdag", i)]).unwrap();
            let b = exact::operator_matrix(&site, len, &[("Cdag", i), ("C", j)]).unwrap();
            let mut sum = Mat::<f64>::zeros(a.nrows(), a.ncols());
            for c in 0..a.ncols() {
                for r in 0..a.nrows() {
                    sum[(r, c)] = a[(r, c)] + b[(r, c)];
                }
            }
            // {c_j, c_i^+} = delta_ij: c_j c_i^+ = -c_i^+ c_j for i != j.
            let want = Mat::<f64>::from_fn(a.nrows(), a.ncols(), |r, c| {
                if r == c && i == j { 1.0 } else { 0.0 }
            });
            assert_eq!(max_diff(&sum, &want), 0.0, "i {i}, j {j}");
            if i != j {
                assert!(frobenius2(&a) > 0.0);
            }
        }
    }
    let site = Site::electron();
    let ops = ["Cup", "Cdn", "Cdagup", "Cdagdn"];
    for (x, a) in ops.iter().enumerate() {
        for b in &ops[x..] {
            for i in 0..3 {
                for j in 0..3 {
                    let ab = exact::operator_matrix(&site, 3, &[(*a, i), (*b, j)]).unwrap();
                    let ba = exact::operator_matrix(&site, 3, &[(*b, j), (*a, i)]).unwrap();
                    let dagger_pair = a.len() != b.len() && a.ends_with(&b[b.len() - 2..]);
                    let delta = f64::from(u8::from(i == j && dagger_pair));
                    let mut worst = 0.0_f64;
                    for c in 0..ab.ncols() {
                        for r in 0..ab.nrows() {
                            let want = if r == c { delta } else { 0.0 };
                            worst = worst.max((ab[(r, c)] + ba[(r, c)] - want).abs());
                        }
                    }
                    assert_eq!(worst, 0.0, "{{{a}_{i}, {b}_{j}}}");
                }
            }
        }
    }
}

#[test]
fn a_term_written_out_of_order_is_the_same_operator_in_the_mpo_and_in_exact() {
    // c_2 c_0^+ written as is, and -c_0^+ c_2 written in site order: one Hamiltonian.
    let site = Site::spinless_fermion;
    let mut a = Terms::new(site(), 4).unwrap();
    a.add(0.7, [("C", 2), ("Cdag", 0)]).unwrap();
    a.add(0.7, [("Cdag", 2), ("C", 0)]).unwrap();
    let mut b = Terms::new(site(), 4).unwrap();
    b.add(-0.7, [("Cdag", 0), ("C", 2)]).unwrap();
    b.add(-0.7, [("C", 0), ("Cdag", 2)]).unwrap();
    let (wa, wb) = (mpo::build(&a).unwrap(), mpo::build(&b).unwrap());
    let (ma, mb) = (
        exact::mpo_matrix(&wa).unwrap(),
        exact::mpo_matrix(&wb).unwrap(),
    );
    assert_eq!(max_diff(&ma, &mb), 0.0);
    for n in 0..=4 {
        let (_, ha) = exact::hamiltonian(&a, &fermion_charge(n)).unwrap();
        let (_, hb) = exact::hamiltonian(&b, &fermion_charge(n)).unwrap();
        assert_eq!(max_diff(&ha, &hb), 0.0, "N {n}");
    }
    // And it is a hop over an occupied site with the string: <1 1 0 0| c_0^+ c_2 ... >.
    check_mpo_against_exact(&a, "reordered hop");
    // A hop written without its sign differs (the check can fail).
    let mut c = Terms::new(site(), 4).unwrap();
    c.add(0.7, [("Cdag", 0), ("C", 2)]).unwrap();
    c.add(0.7, [("C", 0), ("Cdag", 2)]).unwrap();
    let mc = exact::mpo_matrix(&mpo::build(&c).unwrap()).unwrap();
    assert!(max_diff(&ma, &mc) > 1.0);
}

#[test]
fn initial_states_lie_in_the_requested_sector() {
    for spec in [
        "heisenberg:L=10",
        "heisenberg:L=9",
        "xxz:L=8,Sz=2,Jz=0.5",
        "j1j2:L=11,Sz=-1.5",
        "j1j2:L=8,S=1,Sz=-3",
        "xxz:L=6,S=1,Sz=-6",
        "tv:L=10,N=3,t2=0.4",
        "tv:L=5,N=0",
        "hubbard:L=8",
        "hubbard:L=8,filling=0.75,Sz=1",
        "hubbard:L=6,filling=1.5,Sz=-1.5",
        "hubbard:L=5,filling=1.4,Sz=-1/2",
        "hubbard:L=4,filling=2",
    ] {
        let model = Model::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        match &model {
            Model::Spin(m) => {
                let psi = m.initial_state().unwrap();
                assert_eq!(psi.charge(), m.sector(), "{spec}");
                assert_eq!(psi.len(), m.len);
            }
            Model::SpinlessFermions(m) => {
                assert_eq!(m.initial_state().unwrap().charge(), m.sector(), "{spec}");
            }
            Model::Hubbard(m) => {
                assert_eq!(m.initial_state().unwrap().charge(), m.sector(), "{spec}");
            }
        }
    }
    // Spread evenly: a Néel state, and every second site occupied.
    let Model::Spin(m) = Model::parse("heisenberg:L=6").unwrap() else {
        panic!()
    };
    assert_eq!(m.initial_states(), [0, 1, 0, 1, 0, 1]);
    let Model::Hubbard(m) = Model::parse("hubbard:L=4,filling=0.5").unwrap() else {
        panic!()
    };
    assert_eq!(m.initial_states(), [0, 2, 0, 1]);
    assert_eq!(m.sector(), electron_charge(2, 0));
}

#[test]
fn models_parse_with_defaults_and_refuse_what_they_do_not_take() {
    let m = Model::parse("xxz:L=12,Jxy=0.5,Jz=2,hz=0.1").unwrap();
    let Model::Spin(s) = &m else { panic!() };
    assert_eq!((s.len, s.jxy, s.jz, s.hz, s.two_sz), (12, 0.5, 2.0, 0.1, 0));
    assert_eq!(m, "xxz L=12 Jxy=0.5 Jz=2 hz=0.1".parse().unwrap());
    let Model::Hubbard(h) = Model::parse("hubbard").unwrap() else {
        panic!()
    };
    assert_eq!((h.len, h.t, h.u, h.n, h.two_sz), (8, 1.0, 4.0, 8, 0));
    let Model::SpinlessFermions(f) = Model::parse("tv:L=9").unwrap() else {
        panic!()
    };
    assert_eq!(f.n, 4);
    let e = Model::parse("ising").unwrap_err();
    assert!(
        matches!(&e, Error::UnknownModel { known, .. } if known.contains("hubbard")),
        "{e}"
    );
    let e = Model::parse("hubbard:L=8,V=1").unwrap_err();
    assert!(
        matches!(&e, Error::UnknownParameter { given, accepted, .. } if given == "V" && accepted.contains("filling")),
        "{e}"
    );
    for (spec, key) in [
        ("heisenberg:L=1", "L"),
        ("heisenberg:L=ten", "L"),
        ("heisenberg:J=nan", "J"),
        ("heisenberg:L=8,Sz=0.5", "Sz"),
        ("heisenberg:L=8,Sz=5", "Sz"),
        ("heisenberg:S=3/2", "S"),
        ("tv:L=6,N=7", "N"),
        ("hubbard:L=5,filling=0.5", "filling"),
        ("hubbard:L=4,filling=2.5", "filling"),
        ("hubbard:L=4,filling=1,Sz=0.5", "Sz"),
        ("hubbard:L=4,filling=0.5,Sz=2", "Sz"),
        ("hubbard:L=4,t", "t"),
    ] {
        let e = Model::parse(spec).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidParameter { key: k, .. } if k == key),
            "{spec}: {e}"
        );
        assert!(e.to_string().contains("expected"), "{e}");
    }
    println!("{m}");
}

#[test]
fn exact_refuses_what_it_cannot_hold() {
    let big = Terms::new(Site::electron(), 7).unwrap();
    let mut big = big;
    big.add(1.0, [("NupNdn", 0)]).unwrap();
    let e = exact::mpo_matrix(&mpo::build(&big).unwrap()).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
    let e = exact::hamiltonian(&big, &electron_charge(9, 9)).unwrap_err();
    assert!(matches!(e, Error::EmptySector { .. }), "{e}");
    let mut spins = Terms::new(Site::spin_half(), 16).unwrap();
    spins.add(1.0, [("Sz", 0)]).unwrap();
    let e = exact::hamiltonian(&spins, &U1(0)).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
}
