//! Distributed arrays against one process, on 1, 2 and 4 ranks.
//!
//! One process per rank, so this test has no harness: started alone (by `cargo test`), it
//! relaunches itself under `mpirun --allow-run-as-root --oversubscribe -n N` for N = 1, 2, 4
//! and fails if any run fails; started by mpirun, it runs every check once, on every rank.
//! The checks compare each distributed result, gathered, with the same operation on whole
//! arrays in one process (every rank holds those too, from the same seeds), on random
//! structures of every sector kind, fermionic ones included, and under every kind of
//! process map. The fault checks come last: after a rank fails, the ranks disagree on what
//! comes next, which is the point of those checks.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use tessera_blocks::testing::{Kind, random_leg, random_structure};
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure, Leg};
use tessera_coalesce::Truncation;
use tessera_contract::Contraction;
use tessera_distributed::{Comm, DistArray, Error, ProcessMap, World, contract, svd, tiled_leg};

fn main() {
    if !tessera_testing::under_mpirun() {
        tessera_testing::relaunch_under_mpirun(&[1, 2, 4]);
        return;
    }
    let world = World::init().expect("MPI with thread level Multiple");
    let comm = world.comm().clone();
    let say = |what: &str| println!("rank {}/{}: {what} ok", comm.rank(), comm.size());
    for_each_kind(&comm, round_trips);
    say("scatter, gather, redistribute, norm, inner");
    for_each_kind(&comm, contractions);
    say("contractions");
    for_each_kind(&comm, factorizations);
    say("SVD with global truncation, local vector operations");
    for_each_kind(&comm, retiling);
    say("re-tiling, SUMMA-style products on tiles");
    overlap(&comm);
    say("overlap");
    an_error_on_every_rank_leaves_them_in_step(&comm);
    say("an error on every rank");
    a_failed_task_fails_every_rank(&comm);
    say("a failed task");
    a_bad_input_on_one_rank_fails_every_rank(&comm);
    say("a bad input on one rank");
    let left = after_the_world(&comm);
    drop(world);
    // Work submitted after MPI is gone fails instead of waiting for frames.
    if comm.size() > 1 {
        let full = left.gather().unwrap();
        assert!(
            full.to_dense().is_err(),
            "rank {}: a gather after the World",
            comm.rank()
        );
        assert!(left.norm().is_err());
    }
    say("after the World");
}

/// `for_each_kind!` with the communicator.
fn for_each_kind(comm: &Comm, check: fn(&Comm, &mut ChaCha8Rng, Kinds)) {
    for (seed, kind) in [
        (0x11, Kinds::Trivial),
        (0x22, Kinds::U1),
        (0x33, Kinds::Z3),
        (0x44, Kinds::U1U1),
        (0x66, Kinds::U1Fermion),
    ] {
        check(comm, &mut ChaCha8Rng::seed_from_u64(seed), kind);
    }
}

#[derive(Clone, Copy, Debug)]
enum Kinds {
    Trivial,
    U1,
    Z3,
    U1U1,
    U1Fermion,
}

macro_rules! dispatch {
    ($kind:expr, $f:ident($($arg:expr),*)) => {{
        use tessera_blocks::sector::{FermionParity, Product, Trivial, U1, Zn};
        match $kind {
            Kinds::Trivial => $f::<Trivial>($($arg),*),
            Kinds::U1 => $f::<U1>($($arg),*),
            Kinds::Z3 => $f::<Zn<3>>($($arg),*),
            Kinds::U1U1 => $f::<Product<U1, U1>>($($arg),*),
            Kinds::U1Fermion => $f::<Product<U1, FermionParity>>($($arg),*),
        }
    }};
}

/// The three kinds of map, the explicit one random (the same on every rank: seeded).
fn maps<S: AbelianSector>(
    s: &BlockStructure<S>,
    size: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<ProcessMap> {
    let explicit: Arc<[usize]> = (0..s.num_blocks())
        .map(|_| rng.gen_range(0..size))
        .collect();
    vec![
        ProcessMap::Cyclic,
        ProcessMap::BySector,
        ProcessMap::Explicit(explicit),
        ProcessMap::square_grid(size),
    ]
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-12 * want.abs().max(1.0),
        "{what}: {got} against {want}"
    );
}

fn round_trips(comm: &Comm, rng: &mut ChaCha8Rng, kind: Kinds) {
    fn run<S: Kind>(comm: &Comm, rng: &mut ChaCha8Rng) {
        for case in 0..4 {
            let s = Arc::new(random_structure::<S>(rng));
            let x = AsyncArray::<f64, S>::random(Arc::clone(&s), rng.r#gen());
            let y = AsyncArray::<f64, S>::random(Arc::clone(&s), rng.r#gen());
            let want = x.to_dense().unwrap();
            let ms = maps(&s, comm.size(), rng);
            for (m, map) in ms.iter().enumerate() {
                let what = format!("{} case {case} map {m}", std::any::type_name::<S>());
                let dx = DistArray::scatter(comm, &x, map).unwrap();
                // A handle on a block is this rank's to take only if it owns the block.
                for g in 0..s.num_blocks() {
                    let mine = dx.owners().of(g) == comm.rank();
                    match dx.block(g) {
                        Ok(_) => assert!(mine, "{what}: a handle on another rank's block {g}"),
                        Err(Error::Map { given, .. }) => {
                            assert!(!mine, "{what}: block {g} refused to its owner");
                            assert!(
                                given.contains(&format!("block {g}, owned by rank")),
                                "{given}"
                            );
                        }
                        Err(e) => panic!("{what}: {e}"),
                    }
                }
                assert_eq!(
                    dx.gather().unwrap().to_dense().unwrap(),
                    want,
                    "{what}: gather"
                );
                let other = &ms[(m + 1) % ms.len()];
                let moved = dx.redistribute(other).unwrap();
                assert_eq!(
                    moved.gather().unwrap().to_dense().unwrap(),
                    want,
                    "{what}: moved"
                );
                close(dx.norm().unwrap(), x.norm().get().unwrap(), &what);
                let dy = DistArray::scatter(comm, &y, map).unwrap();
                close(
                    dx.inner(&dy).unwrap(),
                    x.inner(&y).unwrap().get().unwrap(),
                    &what,
                );
                // Arrays under different maps are refused, on every rank alike.
                let mixed = moved.inner(&dy);
                if moved.owners() == dy.owners() {
                    close(mixed.unwrap(), x.inner(&y).unwrap().get().unwrap(), &what);
                } else {
                    assert!(
                        matches!(mixed, Err(Error::Mismatch { .. })),
                        "{what}: {mixed:?}"
                    );
                }
            }
        }
    }
    dispatch!(kind, run(comm, rng));
}

/// A random contraction spec and operand structures that fit it.
fn random_contraction<S: Kind>(
    rng: &mut ChaCha8Rng,
) -> (Contraction, BlockStructure<S>, BlockStructure<S>) {
    let leg = |rng: &mut ChaCha8Rng| loop {
        let l = random_leg::<S>(rng);
        if l.num_segments() > 0 {
            return l;
        }
    };
    let (nfa, nk, nfb) = (
        rng.gen_range(0..=2),
        rng.gen_range(1..=2),
        rng.gen_range(0..=2),
    );
    let conj_a = rng.gen_bool(0.25);
    let k_legs: Vec<Leg<S>> = (0..nk).map(|_| leg(rng)).collect();
    let mut a: Vec<(char, Leg<S>)> = (0..nfa).map(|i| (['a', 'b'][i], leg(rng))).collect();
    let mut b: Vec<(char, Leg<S>)> = (0..nfb).map(|i| (['x', 'y'][i], leg(rng))).collect();
    for (i, l) in k_legs.iter().enumerate() {
        let c = ['k', 'l'][i];
        a.push((c, l.clone()));
        b.push((c, if conj_a { l.clone() } else { l.dual() }));
    }
    a.shuffle(rng);
    b.shuffle(rng);
    let mut out: Vec<char> = a
        .iter()
        .chain(&b)
        .map(|x| x.0)
        .filter(|c| !['k', 'l'].contains(c))
        .collect();
    out.shuffle(rng);
    let structure = |legs: &[(char, Leg<S>)], rng: &mut ChaCha8Rng| {
        let legs: Vec<Leg<S>> = legs.iter().map(|x| x.1.clone()).collect();
        let flux = legs.iter().fold(S::trivial(), |acc, l| {
            let i = rng.gen_range(0..l.num_segments());
            acc.fuse_abelian(&l.effective_sector(i).unwrap())
        });
        let n = rng.gen_range(0..=legs.len());
        BlockStructure::from_legs(legs, n, flux).unwrap()
    };
    let (sa, sb) = (structure(&a, rng), structure(&b, rng));
    let labels = |l: &[(char, Leg<S>)]| l.iter().map(|x| x.0).collect::<String>();
    let split = rng.gen_range(0..=out.len());
    let spec = format!(
        "{},{}->{}|{}",
        labels(&a),
        labels(&b),
        out[..split].iter().collect::<String>(),
        out[split..].iter().collect::<String>()
    );
    let mut c = Contraction::new(&spec).unwrap();
    if conj_a {
        c = c.conj_a();
    }
    (c, sa, sb)
}

fn contractions(comm: &Comm, rng: &mut ChaCha8Rng, kind: Kinds) {
    fn run<S: Kind>(comm: &Comm, rng: &mut ChaCha8Rng) {
        for case in 0..12 {
            let (c, sa, sb) = random_contraction::<S>(rng);
            let (sa, sb) = (Arc::new(sa), Arc::new(sb));
            let a = AsyncArray::<f64, S>::random(Arc::clone(&sa), rng.r#gen());
            let b = AsyncArray::<f64, S>::random(Arc::clone(&sb), rng.r#gen());
            let want = c.apply(&a, &b).unwrap().to_dense().unwrap();
            let (ma, mb) = (maps(&sa, comm.size(), rng), maps(&sb, comm.size(), rng));
            // The output under a cyclic, by-sector or grid map (an explicit one is sized for A).
            let out = [ProcessMap::Cyclic, ProcessMap::BySector, ma[3].clone()][case % 3].clone();
            let da = DistArray::scatter(comm, &a, &ma[case % 4]).unwrap();
            let db = DistArray::scatter(comm, &b, &mb[(case / 4) % 4]).unwrap();
            let dc = contract(&c, &da, &db, &out).unwrap();
            let got = dc.gather().unwrap().to_dense().unwrap();
            let what = format!("{} case {case}: {:?}", std::any::type_name::<S>(), c.spec());
            assert_eq!(got.len(), want.len(), "{what}");
            let scale = want.iter().fold(1.0_f64, |m, x| m.max(x.abs()));
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-12 * scale, "{what}: {g} against {w}");
            }
        }
    }
    dispatch!(kind, run(comm, rng));
}

/// The distributed SVD under every map (those that split sectors are redistributed by
/// sector first), untruncated and truncated, against the one-process SVD: the same kept
/// values on every rank, the same factors once gathered. Then the local vector operations
/// (`duplicate`, `scale`, `axpy`) against one process, and a NaN in one rank's sector:
/// that rank returns the factorization's error, every other rank that rank's failure.
fn factorizations(comm: &Comm, rng: &mut ChaCha8Rng, kind: Kinds) {
    fn dense_close<S: Kind>(got: &DistArray<f64, S>, want: &AsyncArray<f64, S>, what: &str) {
        assert_eq!(got.structure(), want.structure(), "{what}: structure");
        let (g, w) = (
            got.gather().unwrap().to_dense().unwrap(),
            want.to_dense().unwrap(),
        );
        for (x, y) in g.iter().zip(&w) {
            assert!((x - y).abs() <= 1e-12, "{what}: {x} against {y}");
        }
    }
    fn run<S: Kind>(comm: &Comm, rng: &mut ChaCha8Rng) {
        for case in 0..4 {
            let s = Arc::new(random_structure::<S>(rng));
            let x = AsyncArray::<f64, S>::random(Arc::clone(&s), rng.r#gen());
            let n: usize = s.sectors().iter().map(|c| c.rows().min(c.cols())).sum();
            for (m, map) in maps(&s, comm.size(), rng).iter().enumerate() {
                let what = format!("{} case {case} map {m}", std::any::type_name::<S>());
                let dx = DistArray::scatter(comm, &x, map).unwrap();
                for t in [
                    Truncation::none(),
                    Truncation::max_dim(n.div_ceil(2).max(1)),
                ] {
                    let got = svd(&dx, &t).unwrap();
                    let want = tessera_coalesce::svd(&x, &t).unwrap();
                    assert_eq!(got.s.leg(), want.s.leg(), "{what}: bond");
                    for ((_, p), (_, q)) in got.s.iter().zip(want.s.iter()) {
                        assert_eq!(p, q, "{what}: singular values");
                    }
                    close(got.total_weight, want.total_weight, &what);
                    close(got.discarded_weight, want.discarded_weight, &what);
                    dense_close(&got.u, &want.u, &format!("{what}: U"));
                    dense_close(&got.vt, &want.vt, &format!("{what}: V†"));
                }
                // y = 2 x + 0.5 x, through a copy.
                let y = dx.duplicate();
                y.scale(2.0);
                y.axpy(0.5, &dx).unwrap();
                let want = x.duplicate();
                want.scale(2.5);
                dense_close(&y, &want, &format!("{what}: axpy"));
                let other = dx.redistribute(&ProcessMap::Cyclic).unwrap();
                if other.owners() != dx.owners() {
                    assert!(matches!(y.axpy(1.0, &other), Err(Error::Mismatch { .. })));
                }
            }
        }
        // A NaN in the first block, owned by the last rank.
        let s = loop {
            let s = random_structure::<S>(rng);
            if s.num_blocks() > 0 {
                break Arc::new(s);
            }
        };
        let mut blocks = AsyncArray::<f64, S>::random(Arc::clone(&s), 7)
            .to_blocks()
            .unwrap();
        blocks[0][0] = f64::NAN;
        let b = s.block(0).unwrap();
        let x = AsyncArray::<f64, S>::from_blocks(Arc::clone(&s), &blocks).unwrap();
        let last = comm.size() - 1;
        let owners: Arc<[usize]> = (0..s.num_blocks())
            .map(|g| {
                if s.block(g).unwrap().coupled() == b.coupled() {
                    last
                } else {
                    0
                }
            })
            .collect();
        let dx = DistArray::scatter(comm, &x, &ProcessMap::Explicit(owners)).unwrap();
        match svd(&dx, &Truncation::none()) {
            Err(Error::Coalesce(e)) if comm.rank() == last => {
                assert!(e.to_string().contains("NaN"), "{e}")
            }
            Err(Error::Remote { rank, message }) if comm.rank() != last => {
                assert_eq!(rank, last);
                assert!(message.contains("NaN"), "{message}");
            }
            other => panic!("rank {}: {other:?}", comm.rank()),
        }
        // The ranks are still in step.
        let y = DistArray::scatter(comm, &x, &ProcessMap::Cyclic).unwrap();
        assert!(y.gather().is_ok());
    }
    dispatch!(kind, run(comm, rng));
}

/// Re-tiling keeps every element where it was (to tiles and back, under every map), and a
/// contraction of tiled operands on a grid, re-tiled back, is the one-process product; a
/// leg that cuts another space is refused on every rank alike.
fn retiling(comm: &Comm, rng: &mut ChaCha8Rng, kind: Kinds) {
    fn tiles<S: Kind>(s: &BlockStructure<S>, max: usize) -> Vec<Leg<S>> {
        s.legs()
            .iter()
            .map(|l| tiled_leg(l, max).unwrap())
            .collect()
    }
    fn run<S: Kind>(comm: &Comm, rng: &mut ChaCha8Rng) {
        let grid = ProcessMap::square_grid(comm.size());
        for case in 0..4 {
            let s = Arc::new(random_structure::<S>(rng));
            let x = AsyncArray::<f64, S>::random(Arc::clone(&s), rng.r#gen());
            let want = x.to_dense().unwrap();
            for (m, map) in maps(&s, comm.size(), rng).iter().enumerate() {
                let what = format!("{} case {case} map {m}", std::any::type_name::<S>());
                let dx = DistArray::scatter(comm, &x, map).unwrap();
                let tiled = dx.retile(tiles(&s, 1 + case % 2), &grid).unwrap();
                let got = tiled.gather().unwrap().to_dense().unwrap();
                assert_eq!(got, want, "{what}: tiled");
                let back = tiled
                    .retile(s.legs().to_vec(), &ProcessMap::BySector)
                    .unwrap();
                assert_eq!(back.structure(), &s, "{what}: structure back");
                assert_eq!(
                    back.gather().unwrap().to_dense().unwrap(),
                    want,
                    "{what}: back"
                );
            }
        }
        for case in 0..6 {
            let (c, sa, sb) = random_contraction::<S>(rng);
            let a = AsyncArray::<f64, S>::random(sa.clone(), rng.r#gen());
            let b = AsyncArray::<f64, S>::random(sb.clone(), rng.r#gen());
            let want = c.apply(&a, &b).unwrap();
            let da = DistArray::scatter(comm, &a, &ProcessMap::BySector).unwrap();
            let db = DistArray::scatter(comm, &b, &ProcessMap::BySector).unwrap();
            let (ta, tb) = (
                da.retile(tiles(&sa, 2), &grid).unwrap(),
                db.retile(tiles(&sb, 2), &grid).unwrap(),
            );
            let tc = contract(&c, &ta, &tb, &grid).unwrap();
            let dc = tc
                .retile(want.structure().legs().to_vec(), &ProcessMap::BySector)
                .unwrap();
            let got = dc.gather().unwrap().to_dense().unwrap();
            let want = want.to_dense().unwrap();
            let what = format!("{} case {case}: {:?}", std::any::type_name::<S>(), c.spec());
            let scale = want.iter().fold(1.0_f64, |m, x| m.max(x.abs()));
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-12 * scale, "{what}: {g} against {w}");
            }
        }
        // A leg of another dimension: refused alike, and the ranks stay in step.
        let s = loop {
            let s = random_structure::<S>(rng);
            if s.num_legs() > 0 {
                break Arc::new(s);
            }
        };
        let x = AsyncArray::<f64, S>::random(Arc::clone(&s), 3);
        let dx = DistArray::scatter(comm, &x, &ProcessMap::Cyclic).unwrap();
        let mut legs = s.legs().to_vec();
        let l = &legs[0];
        let mut segs: Vec<(S, usize)> = l
            .segments()
            .iter()
            .map(|g| (g.sector.clone(), g.dim))
            .collect();
        segs[0].1 += 1;
        legs[0] = Leg::tiled(l.direction(), segs).unwrap();
        assert!(matches!(
            dx.retile(legs, &ProcessMap::Cyclic),
            Err(Error::Mismatch { .. })
        ));
        assert_eq!(
            dx.gather().unwrap().to_dense().unwrap(),
            x.to_dense().unwrap()
        );
    }
    dispatch!(kind, run(comm, rng));
}

/// The operations return before their messages arrive: work scheduled after a contraction
/// on blocks it does not touch runs while its receives wait, and a trace of the runtime
/// shows sends and receives among the tasks.
fn overlap(comm: &Comm) {
    use tessera_blocks::U1;
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let leg = Leg::new(
        tessera_blocks::Direction::In,
        (-3..=3).map(|q| (U1(q), 24)).collect::<Vec<_>>(),
    )
    .unwrap();
    let m = Arc::new(BlockStructure::new([leg.clone()], [leg.dual()], U1(0)).unwrap());
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&m), rng.r#gen());
    let runtime = tessera_core::Runtime::current();
    runtime.start_trace();
    let da = DistArray::scatter(comm, &a, &ProcessMap::Cyclic).unwrap();
    // Every block to the next rank: everything moves.
    let next = ProcessMap::Explicit((0..m.num_blocks()).map(|g| (g + 1) % comm.size()).collect());
    let db = da.redistribute(&next).unwrap();
    let dc = contract(
        &Contraction::new("ij,jk->ik").unwrap(),
        &da,
        &db,
        &ProcessMap::Cyclic,
    )
    .unwrap();
    let want = Contraction::new("ij,jk->ik")
        .unwrap()
        .apply(&a, &a)
        .unwrap();
    close(dc.norm().unwrap(), want.norm().get().unwrap(), "overlap");
    let trace = runtime.stop_trace();
    if comm.size() > 1 {
        let names: Vec<&str> = trace.events.iter().map(|e| e.name).collect();
        assert!(
            names.contains(&"mpi send") && names.contains(&"mpi receive"),
            "{names:?}"
        );
    }
}

/// An array to use once the World is dropped (made while it lives).
fn after_the_world(comm: &Comm) -> DistArray<f64, tessera_blocks::U1> {
    use tessera_blocks::U1;
    let leg = Leg::new(tessera_blocks::Direction::In, [(U1(0), 2), (U1(1), 3)]).unwrap();
    let s = Arc::new(BlockStructure::new([leg.clone()], [leg.dual()], U1(0)).unwrap());
    DistArray::scatter(comm, &AsyncArray::random(s, 8), &ProcessMap::Cyclic).unwrap()
}

/// A map that fits no rank's job is refused on every rank alike, with a typed error that
/// says what was expected, and the ranks stay in step: the next operation works.
fn an_error_on_every_rank_leaves_them_in_step(comm: &Comm) {
    use tessera_blocks::U1;
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let s = Arc::new(random_structure::<U1>(&mut rng));
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 3);
    let da = DistArray::scatter(comm, &a, &ProcessMap::Cyclic).unwrap();
    let grid = ProcessMap::Grid {
        rows: comm.size() + 1,
        cols: 1,
    };
    match da.redistribute(&grid) {
        Err(Error::Map { expected, given }) => {
            assert!(
                expected.contains(&format!("a grid of {} ranks", comm.size())),
                "{expected}"
            );
            assert!(
                given.contains(&format!("{} x 1", comm.size() + 1)),
                "{given}"
            );
        }
        other => panic!("rank {}: expected a map error, got {other:?}", comm.rank()),
    }
    // Nothing was written: the array is whole, and the ranks go on together.
    close(
        da.norm().unwrap(),
        a.norm().get().unwrap(),
        "after a refused map",
    );
    assert_eq!(
        da.gather().unwrap().to_dense().unwrap(),
        a.to_dense().unwrap()
    );
}

/// A kernel fails on the last rank, poisoning every block it owns of `A`: a contraction that
/// needs them, and its norm, fail on every rank, each naming the failure.
fn a_failed_task_fails_every_rank(comm: &Comm) {
    use tessera_blocks::U1;
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let s = Arc::new(random_structure::<U1>(&mut rng));
    let s = if s.num_blocks() == 0 {
        Arc::new(random_structure::<U1>(&mut rng))
    } else {
        s
    };
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 1);
    let da = DistArray::scatter(comm, &a, &ProcessMap::Cyclic).unwrap();
    if comm.rank() == comm.size() - 1 {
        tessera_core::schedule_named("injected failure", da.local().write(), |_| {
            Err("injected on the last rank".into())
        })
        .unwrap();
    }
    let n = da.norm();
    assert!(
        n.is_err() || s.num_blocks() == 0,
        "rank {}: {n:?}",
        comm.rank()
    );
    if let Err(e) = n {
        assert!(
            e.to_string().contains("injected"),
            "rank {}: {e}",
            comm.rank()
        );
    }
    let gathered = da.gather().unwrap();
    if s.num_blocks() > 0 {
        assert!(
            gathered.to_dense().is_err(),
            "rank {}: a poisoned block gathered clean",
            comm.rank()
        );
    }
}

/// The last rank passes a map that does not fit: its redistribution returns the error at
/// once, and it stops there, as a program would. Every other rank's next collective returns
/// the error of that rank instead of waiting for it.
fn a_bad_input_on_one_rank_fails_every_rank(comm: &Comm) {
    use tessera_blocks::U1;
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let s = Arc::new(random_structure::<U1>(&mut rng));
    let a = AsyncArray::<f64, U1>::random(Arc::clone(&s), 2);
    let da = DistArray::scatter(comm, &a, &ProcessMap::Cyclic).unwrap();
    let last = comm.size() - 1;
    let map = if comm.rank() == last {
        ProcessMap::Explicit(vec![0; s.num_blocks() + 1].into())
    } else {
        ProcessMap::BySector
    };
    match da.redistribute(&map) {
        Err(Error::Map { .. }) if comm.rank() == last => {}
        Ok(moved) if comm.rank() != last => match moved.norm() {
            Err(Error::Remote { rank, message }) => {
                assert_eq!(rank, last);
                assert!(message.contains("one rank per block"), "{message}");
            }
            other => panic!(
                "rank {}: expected rank {last}'s error, got {other:?}",
                comm.rank()
            ),
        },
        other => panic!("rank {}: {other:?}", comm.rank()),
    }
}
