//! The `ccsd` driver: its D2h sectors against the D2h character table, its default orbital
//! counts against the symmetry of benzene's cc-pVDZ basis, its contractions (the ladder and
//! the ring term, `examples/ccsd/cc.rs`) and its dense reference against a plain loop einsum
//! on small seeded orbital distributions (irreps without orbitals among them), its flop and
//! memory counts against the structures, and its command line (`--help`, refusals with exit
//! status 2 naming the flag), in the style of `tests/drivers.rs`.

mod common;
// The driver's modules, compiled here as they are there; the driver uses all of them, this
// test only part.
#[allow(dead_code)]
#[path = "../examples/args/mod.rs"]
mod args;
#[allow(dead_code)]
#[path = "../examples/ccsd/cc.rs"]
mod cc;

use args::ccsd::{self, Irreps, Memory, Terms, dense_elements, symmetric_elements};
use args::with_usage;
use cc::{Dense4, DenseTerm, IRREPS, Orbitals, Problem, Term, irrep, irrep_index};
use clap::{CommandFactory, Parser};
use std::path::PathBuf;
use tessera::blocks::{AbelianSector, Sector};
use tessera::contract::Network;
use tessera::prelude::Runtime;

/// The D2h character table in Cotton order (rows: Ag, B1g, B2g, B3g, Au, B1u, B2u, B3u;
/// columns: E, C2(z), C2(y), C2(x), i, σ(xy), σ(xz), σ(yz)).
const CHARACTERS: [[i32; 8]; 8] = [
    [1, 1, 1, 1, 1, 1, 1, 1],
    [1, 1, -1, -1, 1, 1, -1, -1],
    [1, -1, 1, -1, 1, -1, 1, -1],
    [1, -1, -1, 1, 1, -1, -1, 1],
    [1, 1, 1, 1, -1, -1, -1, -1],
    [1, 1, -1, -1, -1, -1, 1, 1],
    [1, -1, 1, -1, -1, 1, -1, 1],
    [1, -1, -1, 1, -1, 1, 1, -1],
];

/// The operations of [`CHARACTERS`]' columns as the signs they give x, y and z.
const OPERATIONS: [[i32; 3]; 8] = [
    [1, 1, 1],    // E
    [-1, -1, 1],  // C2(z)
    [-1, 1, -1],  // C2(y)
    [1, -1, -1],  // C2(x)
    [-1, -1, -1], // i
    [1, 1, -1],   // σ(xy)
    [1, -1, 1],   // σ(xz)
    [-1, 1, 1],   // σ(yz)
];

#[test]
fn d2h_sectors_multiply_as_the_character_table() {
    assert_eq!(IRREPS, ccsd::IRREP_NAMES);
    for g in 0..8 {
        assert_eq!(irrep_index(&irrep(g)), g);
        for h in 0..8 {
            let product = irrep_index(&irrep(g).fuse_abelian(&irrep(h)));
            let characters: Vec<i32> = (0..8)
                .map(|op| CHARACTERS[g][op] * CHARACTERS[h][op])
                .collect();
            assert_eq!(
                characters, CHARACTERS[product],
                "{} x {} is not {}",
                IRREPS[g], IRREPS[h], IRREPS[product]
            );
            assert_eq!(product, g ^ h);
        }
    }
    // Every irrep is its own dual, Ag is the trivial sector.
    for h in 0..8 {
        assert_eq!(irrep(h).dual(), irrep(h));
    }
    assert_eq!(irrep(0), Sector::trivial());
}

/// Orbitals per irrep of a basis of atoms at `positions`, each with `shells` (s, p, d counts),
/// from the characters of the basis: `n_h = 1/8 sum_R chi(R) chi_h(R)`.
fn basis_per_irrep(atoms: &[([f64; 3], [i32; 3])]) -> [usize; 8] {
    let gamma: Vec<i32> = OPERATIONS
        .iter()
        .map(|signs| {
            atoms
                .iter()
                .filter(|(x, _)| (0..3).all(|k| (x[k] * f64::from(signs[k]) - x[k]).abs() < 1e-9))
                .map(|(_, [s, p, d])| {
                    // s: 1; p: the trace of the operation; d (l = 2, even): 5 for E and i,
                    // 1 for a C2 or a mirror.
                    let trace: i32 = signs.iter().sum();
                    let chi_d = if trace.abs() == 3 { 5 } else { 1 };
                    s + p * trace + d * chi_d
                })
                .sum()
        })
        .collect();
    let mut counts = [0; 8];
    for h in 0..8 {
        let n: i32 = (0..8).map(|op| gamma[op] * CHARACTERS[h][op]).sum();
        assert_eq!(n % 8, 0, "the basis reduces to whole irreps");
        counts[h] = (n / 8) as usize;
    }
    counts
}

#[test]
fn default_orbitals_are_benzene_in_cc_pvdz() {
    // Benzene in the xy plane, carbons at 0, 60, ..., 300 degrees (two on the x axis);
    // cc-pVDZ: carbon 3s2p1d, hydrogen 2s1p.
    let ring = |r: f64, shells: [i32; 3]| {
        (0..6).map(move |k| {
            let t = std::f64::consts::PI / 3.0 * f64::from(k);
            ([r * t.cos(), r * t.sin(), 0.0], shells)
        })
    };
    let atoms: Vec<_> = ring(1.39, [3, 2, 1]).chain(ring(2.47, [2, 1, 0])).collect();
    let basis = basis_per_irrep(&atoms);
    assert_eq!(basis.iter().sum::<usize>(), 6 * 14 + 6 * 5);
    let a = ccsd::Args::try_parse_from(["ccsd"]).unwrap();
    for h in 0..8 {
        assert_eq!(a.occ.0[h] + a.virt.0[h], basis[h], "{}", IRREPS[h]);
    }
    // 42 electrons; three pi orbitals (a2u and e1g of D6h: odd under the molecular plane).
    assert_eq!(a.occ.total(), 21);
    let pi: usize = (0..8)
        .filter(|&h| CHARACTERS[h][5] == -1)
        .map(|h| a.occ.0[h])
        .sum();
    assert_eq!(pi, 3);
}

/// `R` by plain loops over the dense operands of `term`.
fn loop_einsum(term: Term, a: &Dense4, b: &Dense4) -> Vec<f64> {
    let [o, _, v, _] = a.dims;
    let at = |t: &Dense4, x: [usize; 4]| {
        let d = t.dims;
        t.data[x[0] + d[0] * (x[1] + d[1] * (x[2] + d[2] * x[3]))]
    };
    let mut r = vec![0.0; o * o * v * v];
    for i in 0..o {
        for j in 0..o {
            for x in 0..v {
                for y in 0..v {
                    let mut sum = 0.0;
                    match term {
                        // R(i,j,c,d) = sum_ab T2(i,j,a,b) V(a,b,c,d), (c, d) = (x, y).
                        Term::Ladder => {
                            for aa in 0..v {
                                for bb in 0..v {
                                    sum += at(a, [i, j, aa, bb]) * at(b, [aa, bb, x, y]);
                                }
                            }
                        }
                        // R(i,j,a,b) = sum_kc T2(i,k,a,c) W(k,b,c,j), (a, b) = (x, y).
                        Term::Ring => {
                            for k in 0..o {
                                for c in 0..v {
                                    sum += at(a, [i, k, x, c]) * at(b, [k, y, c, j]);
                                }
                            }
                        }
                    }
                    r[i + o * (j + o * (x + v * y))] = sum;
                }
            }
        }
    }
    r
}

/// Small orbital distributions, irreps without orbitals among them.
const SMALL: [([usize; 8], [usize; 8]); 4] = [
    ([2, 0, 1, 1, 0, 1, 0, 1], [3, 1, 0, 2, 2, 0, 1, 2]),
    ([1, 0, 0, 0, 0, 0, 0, 0], [2, 0, 0, 0, 0, 0, 0, 3]),
    ([0, 0, 0, 2, 0, 0, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1]),
    ([1, 1, 0, 0, 2, 1, 1, 0], [0, 2, 3, 0, 1, 0, 2, 1]),
];

#[test]
fn both_terms_match_a_loop_einsum_on_small_irreps() {
    let runtime = Runtime::new(2).unwrap();
    for (n, (occ, virt)) in SMALL.into_iter().enumerate() {
        let orbitals = Orbitals::new(occ, virt).unwrap();
        for term in Term::ALL {
            let what = format!("{} on distribution {n}", term.name());
            let problem = Problem::new(term, &orbitals, 11 + n as u64).unwrap();
            problem.run(&runtime).unwrap();
            let got = problem.out.to_dense().unwrap();
            let (a, b) = (
                Dense4::of(&problem.a).unwrap(),
                Dense4::of(&problem.b).unwrap(),
            );
            let want = loop_einsum(term, &a, &b);
            assert!(want.iter().any(|&x| x != 0.0), "{what}: a zero result");
            let err = cc::relative_error(&got, &want);
            assert!(err < 1e-13, "{what}: block-sparse vs loops {err:e}");

            let mut dense = DenseTerm::new(&problem).unwrap();
            for par in [faer::Par::Seq, faer::Par::rayon(2)] {
                dense.out.data.fill(f64::NAN); // every element is written
                runtime.install(|| dense.run(par));
                let err = cc::relative_error(&dense.out.data, &want);
                assert!(err < 1e-13, "{what}: dense einsum vs loops {err:e}");
            }
            // Run again into the same output: the old contents are overwritten.
            problem.run(&runtime).unwrap();
            assert_eq!(problem.out.to_dense().unwrap(), got, "{what}: repeated run");
        }
    }
}

#[test]
fn a_changed_operand_changes_the_result_the_check_sees() {
    // The comparison the driver makes is not blind: one changed integral is seen.
    let runtime = Runtime::new(1).unwrap();
    let orbitals = Orbitals::new(SMALL[0].0, SMALL[0].1).unwrap();
    let problem = Problem::new(Term::Ladder, &orbitals, 3).unwrap();
    problem.run(&runtime).unwrap();
    let mut dense = DenseTerm::new(&problem).unwrap();
    dense.run(faer::Par::Seq);
    let got = problem.out.to_dense().unwrap();
    assert!(cc::relative_error(&got, &dense.out.data) < 1e-13);
    problem.b.scale(1.0 + 1e-6);
    problem.run(&runtime).unwrap();
    let err = cc::relative_error(&problem.out.to_dense().unwrap(), &dense.out.data);
    assert!((err - 1e-6).abs() < 1e-9, "{err:e}");
}

#[test]
fn the_network_gives_the_contractions_result() {
    let runtime = Runtime::new(2).unwrap();
    let orbitals = Orbitals::new(SMALL[3].0, SMALL[3].1).unwrap();
    for (term, labels) in [
        (Term::Ladder, ["ijab", "abcd"]),
        (Term::Ring, ["ikac", "kbcj"]),
    ] {
        let problem = Problem::new(term, &orbitals, 5).unwrap();
        problem.run(&runtime).unwrap();
        let net = Network::new(vec![
            (labels[0], problem.a.structure().clone()),
            (labels[1], problem.b.structure().clone()),
        ])
        .unwrap();
        let output = term.spec().split_once("->").unwrap().1;
        let r = runtime
            .enter(|| net.contract_to(&[&problem.a, &problem.b], &net.optimal().unwrap(), output))
            .unwrap();
        assert_eq!(r.structure(), problem.out.structure());
        let err = cc::relative_error(&r.to_dense().unwrap(), &problem.out.to_dense().unwrap());
        assert!(err < 1e-14, "{}: {err:e}", term.name());
    }
}

#[test]
fn flops_and_elements_are_counted_from_the_irreps() {
    for (occ, virt) in SMALL
        .into_iter()
        .chain([([6, 3, 1, 1, 0, 1, 4, 5], [18, 15, 8, 5, 6, 8, 14, 19])])
    {
        let orbitals = Orbitals::new(occ, virt).unwrap();
        let (o, v) = (Irreps(occ), Irreps(virt));
        // Elements: the structures' storage is the count by irreps.
        for (structure, legs) in [
            (orbitals.oovv().unwrap(), [&o, &o, &v, &v]),
            (orbitals.vvvv().unwrap(), [&v, &v, &v, &v]),
            (orbitals.ovvo().unwrap(), [&o, &v, &v, &o]),
        ] {
            assert_eq!(
                structure.total_len() as u128,
                symmetric_elements(legs).unwrap()
            );
            assert_eq!(
                structure.dense_len().unwrap() as u128,
                dense_elements(legs).unwrap()
            );
        }
        // Flops: 2 m n k per pair of blocks that meet, summed over the irreps of the legs.
        let mut ladder = 0usize;
        let mut ring = 0usize;
        for h in 0..8usize.pow(5) {
            let x: Vec<usize> = (0..5).map(|k| (h >> (3 * k)) & 7).collect();
            // Ladder: i j a b c, d fixed by T2's and V's symmetry (i^j = a^b = c^d).
            let (i, j, a, b, c) = (x[0], x[1], x[2], x[3], x[4]);
            if i ^ j == a ^ b {
                let d = a ^ b ^ c;
                ladder += 2 * occ[i] * occ[j] * virt[a] * virt[b] * virt[c] * virt[d];
            }
            // Ring: i k a c b, j fixed by W's symmetry (k^b = c^j) and T2's (i^k = a^c).
            let (i, k, a, c, b) = (x[0], x[1], x[2], x[3], x[4]);
            if i ^ k == a ^ c {
                let j = k ^ b ^ c;
                ring += 2 * occ[i] * occ[k] * virt[a] * virt[c] * virt[b] * occ[j];
            }
        }
        for (term, want) in [(Term::Ladder, ladder), (Term::Ring, ring)] {
            let p = Problem::new(term, &orbitals, 1).unwrap();
            assert_eq!(p.flops(), want as f64, "{}", term.name());
            let (no, nv) = (o.total() as f64, v.total() as f64);
            let dense = match term {
                Term::Ladder => 2.0 * no * no * nv * nv * nv * nv,
                Term::Ring => 2.0 * no * no * no * nv * nv * nv,
            };
            assert_eq!(term.dense_flops(o.total(), v.total()), dense);
            assert!(p.flops() <= dense);
        }
    }
}

#[test]
fn memory_need_is_counted_checked() {
    let (o, v) = (Irreps([1; 8]), Irreps([2; 8]));
    // oovv: 8^3 blocks of 1*1*2*2; dense 8*8*16*16.
    assert_eq!(symmetric_elements([&o, &o, &v, &v]), Some(512 * 4));
    assert_eq!(dense_elements([&o, &o, &v, &v]), Some(64 * 256));
    let m = Memory::of(&o, &v, Terms::Ladder).unwrap();
    let (oovv, vvvv) = (512 * 4, 512 * 16);
    assert_eq!(m.symmetric, 8 * (oovv + 2 * vvvv + 3 * oovv));
    assert_eq!(m.dense, 8 * (3 * 64 * 256 + 16 * 16 * 16 * 16));
    let both = Memory::of(&o, &v, Terms::Both).unwrap();
    let ring = Memory::of(&o, &v, Terms::Ring).unwrap();
    assert!(both.total() > m.total() && both.total() > ring.total());
    // The largest counts the flags take are counted exactly, far past any memory.
    let big = Irreps([ccsd::MAX_PER_IRREP; 8]);
    let m = Memory::of(&big, &big, Terms::Both).unwrap();
    assert!(m.total() > u128::from(args::block_gemm::MAX_MEMORY_GIB) << 30);
}

/// A fresh, empty directory for this test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-ccsd-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn bad_flags_are_refused_naming_them() {
    let dir = scratch("flags");
    let json = dir.join("r.json");
    let json = json.to_str().unwrap();
    let missing = dir.join("no-such-dir").join("r.json");
    let missing = missing.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--occ", "1,2,3"], "--occ"),
        (&["--occ", "1,2,3,4,5,6,7,8,9"], "--occ"),
        (&["--occ", "1,2,3,4,5,6,7,-8"], "--occ"),
        (&["--occ", "1,2,3,4,5,6,7,x"], "--occ"),
        (&["--occ", "1,2,3,4,5,6,7,4097"], "--occ"),
        (&["--occ", "0,0,0,0,0,0,0,0"], "--occ"),
        (&["--virt", "0,0,0,0,0,0,0,0"], "--virt"),
        (&["--virt", "1,,1,1,1,1,1,1"], "--virt"),
        (&["--virt"], "--virt"),
        (
            &["--virt", "4096,4096,4096,4096,4096,4096,4096,4096"],
            "--virt",
        ),
        (
            &[
                "--occ",
                "4096,4096,4096,4096,4096,4096,4096,4096",
                "--term",
                "ring",
            ],
            "--occ",
        ),
        (
            &["--virt", "40,40,40,40,40,40,40,40", "--max-memory", "1"],
            "--virt",
        ),
        (&["--max-memory", "0"], "--max-memory"),
        (&["--term", "triples"], "--term"),
        (&["--reps", "0"], "--reps"),
        (&["--reps", "1001"], "--reps"),
        (&["--threads", "1025"], "--threads"),
        (&["--seed", "-1"], "--seed"),
        (&["--reps", "2", "--reps", "3"], "--reps"),
        (&["--json", missing], "--json"),
        (&["--json", json, "--json", json], "--json"),
        (&["--ocupied", "3"], "--ocupied"),
        (&["extra"], "extra"),
    ];
    for &(argv, flag) in cases {
        let line = std::iter::once("ccsd").chain(argv.iter().copied());
        let (code, text) = match ccsd::Args::try_parse_from(line).and_then(ccsd::Args::prepare) {
            Ok(p) => panic!("ccsd {argv:?} was accepted: {p:?}"),
            Err(e) => (
                e.exit_code(),
                with_usage::<ccsd::Args>(e).expect("an error, not help"),
            ),
        };
        assert_eq!(code, 2, "ccsd {argv:?}: exit status, message:\n{text}");
        assert!(
            text.contains(flag),
            "ccsd {argv:?}: {flag} not named in:\n{text}"
        );
        assert!(
            text.contains("Usage: ccsd"),
            "ccsd {argv:?}: no usage in:\n{text}"
        );
        assert!(!text.contains("panicked"), "ccsd {argv:?}:\n{text}");
    }
    // Refused before --json was opened (or where it cannot be): nothing was created.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn defaults_and_range_edges_are_accepted() {
    ccsd::Args::command().debug_assert();
    let a = ccsd::Args::try_parse_from(["ccsd"]).unwrap();
    assert_eq!(a.occ, Irreps::parse(ccsd::BENZENE_OCC).unwrap());
    assert_eq!(a.virt.total(), 93);
    assert_eq!((a.term, a.reps, a.threads, a.seed), (Terms::Both, 3, 0, 7));
    assert!(a.json.is_none());
    let p = ccsd::Args::try_parse_from([
        "ccsd",
        "--occ",
        "0,0,0,0,0,0,0,1",
        "--virt",
        " 1,0,0,0,0,0,0,0",
        "--reps",
        "1000",
        "--term",
        "ladder",
        "--max-memory",
        "1",
    ])
    .unwrap()
    .prepare()
    .unwrap();
    assert_eq!(p.args.occ.0, [0, 0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(
        Irreps([4, 0, 1, 2, 0, 0, 9, 3]).to_string(),
        "4,0,1,2,0,0,9,3"
    );
    assert!(Irreps::parse("4096,0,0,0,0,0,0,0").is_ok());
    assert!(Terms::Ring.ring() && !Terms::Ring.ladder());
}

/// `cargo run --example ccsd -- argv`: status, stdout, stderr.
fn run_driver(argv: &[&str]) -> (Option<i32>, String, String) {
    common::run_example("ccsd", argv)
}

/// End to end: `--help` exits with 0 and lists the flags, a bad flag exits with 2 naming it,
/// and a small run passes its check and writes its figures.
#[test]
fn the_driver_end_to_end() {
    let (code, stdout, stderr) = run_driver(&["--help"]);
    assert_eq!(code, Some(0), "stderr:\n{stderr}");
    for flag in [
        "--occ",
        "--virt",
        "--term",
        "--reps",
        "--threads",
        "--seed",
        "--json",
    ] {
        assert!(stdout.contains(flag), "{flag} not in --help:\n{stdout}");
    }

    let (code, stdout, stderr) = run_driver(&["--virt", "1,2,3"]);
    assert_eq!(code, Some(2), "stderr:\n{stderr}");
    assert!(stderr.contains("--virt"), "stderr:\n{stderr}");
    assert!(stderr.contains("Usage: ccsd"), "stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "stderr:\n{stderr}");
    assert!(stdout.is_empty(), "nothing ran: {stdout}");

    let dir = scratch("run");
    let json = dir.join("r.json");
    let (code, stdout, stderr) = run_driver(&[
        "--occ",
        "2,1,0,1,0,1,1,0",
        "--virt",
        "3,2,2,1,0,2,2,3",
        "--reps",
        "1",
        "--threads",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("symmetric speed-up"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for term in ["ladder", "ring"] {
        let t = &report["terms"][term];
        assert!(t["relative_difference"].as_f64().unwrap() <= 1e-10, "{t}");
        assert!(t["speedup"].as_f64().unwrap() > 0.0, "{t}");
        let (sym, dense) = (
            t["symmetric"]["flops"].as_f64().unwrap(),
            t["dense"]["flops"].as_f64().unwrap(),
        );
        assert!(0.0 < sym && sym < dense, "{t}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
