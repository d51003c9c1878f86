//! `Chain`: three contractions run fused by row panels against the same three applied in
//! turn and against a dense reference, on seeded random DMRG-shaped structures
//! (`H_eff theta = ((L theta) W) R`), and the cases it must leave to the steps in turn.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tessera_blocks::testing::random_mask;
use tessera_blocks::{
    AbelianSector, AsyncArray, BlockStructure, Direction, FermionParity, Leg, U1,
};
use tessera_contract::{Chain, Contraction, Error, SMALL_COEFFICIENTS};
use tessera_testing::{assert_close_in_norm, unravel_into};

/// `out[l_out] = sum a[l_a] b[l_b]` over dense column-major tensors (first leg fastest).
fn einsum(
    (la, da, a): (&str, &[usize], &[f64]),
    (lb, db, b): (&str, &[usize], &[f64]),
    lo: &str,
) -> (Vec<usize>, Vec<f64>) {
    let mut labels: Vec<char> = la.chars().collect();
    for c in lb.chars() {
        if !labels.contains(&c) {
            labels.push(c);
        }
    }
    let dim = |c: char| {
        la.chars()
            .position(|x| x == c)
            .map(|i| da[i])
            .or_else(|| lb.chars().position(|x| x == c).map(|i| db[i]))
            .expect("a label of an operand")
    };
    let dims: Vec<usize> = labels.iter().map(|&c| dim(c)).collect();
    let d_out: Vec<usize> = lo.chars().map(dim).collect();
    let at = |l: &str, d: &[usize], idx: &[usize]| {
        let chars: Vec<char> = l.chars().collect();
        let mut k = 0;
        for (n, c) in chars.iter().enumerate().rev() {
            let i = idx[labels.iter().position(|x| x == c).unwrap()];
            k = k * d[n] + i;
        }
        k
    };
    let mut out = vec![0.0; d_out.iter().product()];
    let mut idx = vec![0; labels.len()];
    for k in 0..dims.iter().product() {
        unravel_into(k, &dims, &mut idx);
        out[at(lo, &d_out, &idx)] += a[at(la, da, &idx)] * b[at(lb, db, &idx)];
    }
    (d_out, out)
}

fn leg_dims<S: AbelianSector>(x: &AsyncArray<f64, S>) -> Vec<usize> {
    x.structure().legs().iter().map(Leg::dim).collect()
}

/// A leg with `charges` of random dimensions 1 to `max`.
fn leg(rng: &mut ChaCha8Rng, dir: Direction, charges: &[i32], max: usize) -> Leg<U1> {
    Leg::new(
        dir,
        charges.iter().map(|&q| (U1(q), rng.gen_range(1..=max))),
    )
    .unwrap()
}

struct Operands<S: AbelianSector> {
    l: AsyncArray<f64, S>,
    theta: AsyncArray<f64, S>,
    w: AsyncArray<f64, S>,
    r: AsyncArray<f64, S>,
}

/// `L(y, a | k)`, `theta(k, s, t | r)` (or split after `k`), `W(a, s, t | u, v, c)` (some
/// blocks absent when `masked`) and `R(r, c | z)` on the legs given.
fn operands<S: AbelianSector>(
    [vl, vr, p, ml, mr]: [&Leg<S>; 5],
    theta_split: usize,
    flux: S,
    masked: Option<&mut ChaCha8Rng>,
    seed: u64,
) -> Operands<S> {
    let zero = S::trivial();
    let l = BlockStructure::new([vl.clone(), ml.clone()], [vl.clone()], zero.clone()).unwrap();
    let theta_legs = vec![vl.dual(), p.clone(), p.clone(), vr.clone()];
    let theta = BlockStructure::from_legs(theta_legs, theta_split, flux).unwrap();
    let mut w = BlockStructure::new(
        [ml.dual(), p.dual(), p.dual()],
        [p.dual(), p.dual(), mr.clone()],
        zero.clone(),
    )
    .unwrap();
    if let Some(rng) = masked {
        w = w.with_present(&random_mask(rng, w.num_allowed())).unwrap();
    }
    let r = BlockStructure::new([vr.dual(), mr.dual()], [vr.clone()], zero).unwrap();
    Operands {
        l: AsyncArray::random(l, seed),
        theta: AsyncArray::random(theta, seed + 1),
        w: AsyncArray::random(w, seed + 2),
        r: AsyncArray::random(r, seed + 3),
    }
}

/// The DMRG chain, its result split `(y, u, v | z)`.
fn steps() -> [Contraction; 3] {
    steps_into(3)
}

/// The DMRG chain with its result split after `split` legs: 3 as the product, 1 a re-split
/// the fused chain writes directly, 2 one it cannot (then it runs in turn).
fn steps_into(split: usize) -> [Contraction; 3] {
    let out = ["y|uvz", "yu|vz", "yuv|z"][split - 1];
    [
        Contraction::new("yak,kstr->ya|str").unwrap(),
        Contraction::new("yastr,astuvc->yuv|rc").unwrap(),
        Contraction::new(&format!("yuvrc,rcz->{out}")).unwrap(),
    ]
}

fn in_turn<S: AbelianSector>(x: &Operands<S>) -> AsyncArray<f64, S> {
    in_turn_by(x, steps())
}

fn in_turn_by<S: AbelianSector>(x: &Operands<S>, steps: [Contraction; 3]) -> AsyncArray<f64, S> {
    let [first, second, last] = steps;
    let t = first.apply(&x.l, &x.theta).unwrap();
    let u = second.apply(&t, &x.w).unwrap();
    last.apply(&u, &x.r).unwrap()
}

fn dense_reference<S: AbelianSector>(x: &Operands<S>) -> Vec<f64> {
    let (l, th, w, r) = (
        x.l.to_dense().unwrap(),
        x.theta.to_dense().unwrap(),
        x.w.to_dense().unwrap(),
        x.r.to_dense().unwrap(),
    );
    let (dl, dth, dw, dr) = (
        leg_dims(&x.l),
        leg_dims(&x.theta),
        leg_dims(&x.w),
        leg_dims(&x.r),
    );
    let (dt, t) = einsum(("yak", &dl, &l), ("kstr", &dth, &th), "yastr");
    let (du, u) = einsum(("yastr", &dt, &t), ("astuvc", &dw, &w), "yuvrc");
    einsum(("yuvrc", &du, &u), ("rcz", &dr, &r), "yuvz").1
}

#[test]
fn fused_dmrg_chains_match_the_dense_reference_and_the_steps_in_turn() {
    for seed in 0..8_u64 {
        // The result as the product, or re-split `(y | u, v, z)` (written directly).
        let out_split = if seed % 4 < 2 { 3 } else { 1 };
        let chain = Chain::new(steps_into(out_split)).with_fused_min(0);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let vl = leg(&mut rng, Direction::In, &[-2, -1, 0, 1, 2], 3);
        let vr = leg(&mut rng, Direction::In, &[-2, -1, 0, 1, 2, 3], 3);
        // Spin one half, or a site with a doubly degenerate middle state (then MPO bonds
        // of at most 2 per sector, so W's blocks stay small operands).
        let (p, m) = if seed % 2 == 0 {
            (leg(&mut rng, Direction::In, &[-1, 1], 1), 3)
        } else {
            (
                Leg::new(Direction::In, [(U1(-1), 1), (U1(0), 2), (U1(1), 1)]).unwrap(),
                2,
            )
        };
        let ml = leg(&mut rng, Direction::In, &[-2, 0, 2], m);
        let mr = leg(&mut rng, Direction::In, &[-2, 0, 2], m);
        let flux = U1([0, 1, -1, 0][seed as usize % 4]);
        let split = if seed % 3 == 0 { 1 } else { 3 };
        let masked = (seed % 4 == 3).then_some(&mut rng);
        let x = operands([&vl, &vr, &p, &ml, &mr], split, flux, masked, 10 * seed);
        let structures = [&x.l, &x.theta, &x.w, &x.r].map(|a| a.structure());
        // Panels in one chunk, and in chunks of 1 or 2 rows of `y` (the last shorter).
        let chain = match seed % 3 {
            0 => chain.clone(),
            k => chain.clone().with_chunk_rows(k as usize),
        };
        let small =
            x.w.structure()
                .blocks()
                .all(|b| b.len() <= SMALL_COEFFICIENTS);
        assert!(small, "seed {seed}: W's blocks are small operands");
        assert!(chain.fuses::<f64, U1>(structures).unwrap(), "seed {seed}");
        let got = chain.apply(&x.l, &x.theta, &x.w, &x.r).unwrap();
        let want = in_turn_by(&x, steps_into(out_split));
        assert_eq!(got.structure(), want.structure(), "seed {seed}");
        assert_eq!(got.structure().n_codomain(), out_split);
        let got = got.to_dense().unwrap();
        assert_close_in_norm(
            &got,
            &want.to_dense().unwrap(),
            1e-12,
            format!("seed {seed}: in turn"),
        );
        assert_close_in_norm(
            &got,
            &dense_reference(&x),
            1e-12,
            format!("seed {seed}: dense"),
        );
    }
}

#[test]
fn a_repeated_chain_keeps_its_plan_and_gives_the_same_result() {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let vl = leg(&mut rng, Direction::In, &[-1, 0, 1], 5);
    let vr = leg(&mut rng, Direction::In, &[-1, 0, 1], 5);
    let p = leg(&mut rng, Direction::In, &[-1, 1], 1);
    let m = leg(&mut rng, Direction::In, &[-2, 0, 2], 2);
    let x = operands([&vl, &vr, &p, &m, &m], 3, U1(0), None, 7);
    let structures = [&x.l, &x.theta, &x.w, &x.r].map(|a| a.structure());
    // Operands this small run in turn unless the chain is told to fuse from any size.
    assert!(!Chain::new(steps()).fuses::<f64, U1>(structures).unwrap());
    let chain = Chain::new(steps()).with_fused_min(0);
    assert!(chain.fuses::<f64, U1>(structures).unwrap());
    let once = chain
        .apply(&x.l, &x.theta, &x.w, &x.r)
        .unwrap()
        .to_dense()
        .unwrap();
    for _ in 0..3 {
        let again = chain
            .apply(&x.l, &x.theta, &x.w, &x.r)
            .unwrap()
            .to_dense()
            .unwrap();
        assert_eq!(once, again);
    }
}

#[test]
fn a_graded_chain_runs_in_turn_with_the_fermionic_signs() {
    let leg = |dims: [usize; 2]| {
        Leg::new(
            Direction::In,
            [
                (FermionParity::EVEN, dims[0]),
                (FermionParity::ODD, dims[1]),
            ],
        )
        .unwrap()
    };
    let (vl, vr, p, m) = (leg([3, 2]), leg([2, 3]), leg([1, 1]), leg([2, 1]));
    let x = operands([&vl, &vr, &p, &m, &m], 3, FermionParity::ODD, None, 3);
    runs_in_turn(&x);
}

/// That the chain (told to fuse from any size) runs `x` in turn, with the steps' result.
fn runs_in_turn<S: AbelianSector>(x: &Operands<S>) {
    let chain = Chain::new(steps()).with_fused_min(0);
    let structures = [&x.l, &x.theta, &x.w, &x.r].map(|a| a.structure());
    assert!(!chain.fuses::<f64, S>(structures).unwrap());
    let got = chain.apply(&x.l, &x.theta, &x.w, &x.r).unwrap();
    assert_eq!(got.to_dense().unwrap(), in_turn(x).to_dense().unwrap());
}

#[test]
fn a_chain_on_operands_that_do_not_fit_refuses_them_and_writes_nothing() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let vl = leg(&mut rng, Direction::In, &[-1, 0, 1], 3);
    let p = leg(&mut rng, Direction::In, &[-1, 1], 1);
    let m = leg(&mut rng, Direction::In, &[0], 2);
    let x = operands([&vl, &vl, &p, &m, &m], 3, U1(0), None, 1);
    let before = [&x.l, &x.theta, &x.w, &x.r].map(|a| a.to_dense().unwrap());
    let chain = Chain::new(steps()).with_fused_min(0);
    // `R` in place of `W`: the middle step's legs do not match.
    let err = chain.apply(&x.l, &x.theta, &x.r, &x.r).unwrap_err();
    assert!(
        matches!(err, Error::Arity { .. } | Error::Legs { .. }),
        "{err}"
    );
    let after = [&x.l, &x.theta, &x.w, &x.r].map(|a| a.to_dense().unwrap());
    assert_eq!(before, after);
}

#[test]
fn a_chain_whose_middle_operand_is_not_small_runs_in_turn() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let v = leg(&mut rng, Direction::In, &[-1, 0, 1], 3);
    let p = Leg::new(Direction::In, [(U1(-1), 2), (U1(1), 2)]).unwrap();
    let m = Leg::new(Direction::In, [(U1(0), 3)]).unwrap();
    let x = operands([&v, &v, &p, &m, &m], 3, U1(0), None, 11);
    assert!(
        x.w.structure()
            .blocks()
            .any(|b| b.len() > SMALL_COEFFICIENTS)
    );
    runs_in_turn(&x);
}

#[test]
fn a_re_split_result_is_fused_only_where_its_blocks_fold_as_the_products() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let v = leg(&mut rng, Direction::In, &[-2, -1, 0, 1, 2], 8);
    // A `y` leg with a sector twice: a block of `(y | u, v, z)` then holds part of its
    // sector matrix's rows, and its `u` steps by the sector's rows, not by `y`'s extent:
    // the product's rows `(y, u, v)` do not fold there (nor in `(y, u | v, z)`, for any
    // `y`) once `u` and `v` have segments of extent 2.
    let tiled = Leg::tiled(
        Direction::In,
        [
            (U1(-2), 3),
            (U1(-1), 5),
            (U1(0), 6),
            (U1(1), 5),
            (U1(0), 4),
            (U1(2), 3),
        ],
    )
    .unwrap();
    let p = Leg::new(Direction::In, [(U1(-1), 1), (U1(0), 2), (U1(1), 1)]).unwrap();
    let m = leg(&mut rng, Direction::In, &[-2, 0, 2], 2);
    for (vl, fused_resplit) in [(&v, true), (&tiled, false)] {
        let x = operands([vl, &v, &p, &m, &m], 1, U1(0), None, 5);
        let structures = [&x.l, &x.theta, &x.w, &x.r].map(|a| a.structure());
        for split in [1, 2, 3] {
            let chain = Chain::new(steps_into(split)).with_fused_min(0);
            let fuses = split == 3 || (split == 1 && fused_resplit);
            assert_eq!(
                chain.fuses::<f64, U1>(structures).unwrap(),
                fuses,
                "split {split}, tiled {}",
                !fused_resplit
            );
            let got = chain.apply(&x.l, &x.theta, &x.w, &x.r).unwrap();
            let want = in_turn_by(&x, steps_into(split));
            assert_eq!(got.structure(), want.structure());
            assert_close_in_norm(
                &got.to_dense().unwrap(),
                &want.to_dense().unwrap(),
                1e-13,
                format!("split {split}"),
            );
        }
    }
}

#[test]
fn a_chains_traffic_model_counts_its_panels_reads() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let v = leg(&mut rng, Direction::In, &[-2, -1, 0, 1, 2], 6);
    let p = leg(&mut rng, Direction::In, &[-1, 1], 1);
    let m = leg(&mut rng, Direction::In, &[-2, 0, 2], 2);
    let x = operands([&v, &v, &p, &m, &m], 1, U1(0), None, 4);
    let s = [&x.l, &x.theta, &x.w, &x.r].map(|a| a.structure());
    let whole = Chain::new(steps_into(1))
        .with_fused_min(0)
        .with_chunk_rows(usize::MAX);
    let rows = Chain::new(steps_into(1))
        .with_fused_min(0)
        .with_chunk_rows(1);
    let (w, r) = (
        whole.traffic::<f64, U1>(s).unwrap().unwrap(),
        rows.traffic::<f64, U1>(s).unwrap().unwrap(),
    );
    let result = whole.apply(&x.l, &x.theta, &x.w, &x.r).unwrap();
    // Every element of A (here every row meets theta) is read once, and the result
    // written once, however the panels are chunked.
    assert_eq!(w.reads[0], s[0].total_len());
    assert_eq!(r.reads[0], w.reads[0]);
    assert_eq!(
        (w.written, r.written),
        (result.structure().total_len(), w.written)
    );
    // theta (its own matrix form) and R are read at least once in whole panels, and again
    // for every chunk of rows; W once per pair, per chunk.
    assert!(
        w.reads[1] >= s[1].total_len() && w.reads[3] >= s[3].total_len(),
        "{w:?}"
    );
    for i in 1..4 {
        assert!(r.reads[i] > w.reads[i], "{i}: {r:?} {w:?}");
    }
    assert!(r.scratch < w.scratch);
    // In turn: no model.
    assert!(
        Chain::new(steps_into(1))
            .traffic::<f64, U1>(s)
            .unwrap()
            .is_none()
    );
}

/// Small enough for Miri (CI runs it there: the panels' scratch views are made by hand).
#[test]
fn a_tiny_fused_chain_matches_the_steps_in_turn() {
    let leg = |charges: &[(i32, usize)]| {
        Leg::new(Direction::In, charges.iter().map(|&(q, d)| (U1(q), d))).unwrap()
    };
    let v = leg(&[(-1, 2), (0, 3), (1, 2)]);
    let p = leg(&[(-1, 1), (1, 1)]);
    let m = leg(&[(-2, 1), (0, 1), (2, 1)]);
    let x = operands([&v, &v, &p, &m, &m], 3, U1(0), None, 2);
    // Chunks of one and two rows, into the product's split and re-split `(y | u, v, z)`.
    for (rows, split) in [(1, 3), (2, 1)] {
        let chain = Chain::new(steps_into(split))
            .with_fused_min(0)
            .with_chunk_rows(rows);
        let structures = [&x.l, &x.theta, &x.w, &x.r].map(|a| a.structure());
        assert!(chain.fuses::<f64, U1>(structures).unwrap());
        let got = chain.apply(&x.l, &x.theta, &x.w, &x.r).unwrap();
        let want = in_turn_by(&x, steps_into(split));
        let (got, want) = (got.to_dense().unwrap(), want.to_dense().unwrap());
        assert_close_in_norm(&got, &want, 1e-13, format!("chunks of {rows}"));
    }
}
