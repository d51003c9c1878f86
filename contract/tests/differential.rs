//! Pairwise contractions against a dense reference on seeded random structures of every
//! sector kind: random leg orders and splits on both operands and the output, conjugation,
//! accumulation (`beta`), mixed directions, and fermionic signs.
//!
//! The reference is written from the crate's stated semantics only: permute each operand's
//! dense tensor to its matrix form, multiply, permute to the output; every permutation of a
//! fermionic tensor multiplies each element by `(-1)^m`, `m` the pairs of odd legs crossed,
//! and the contracted pairs carry the crate's pairing sign (`(-1)` per pair of odd
//! contracted legs and per odd one whose `A` leg is `In`).

use num_complex::Complex64;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use tessera_backends::{Field, Scalar};
use tessera_blocks::testing::{Kind, random_leg, random_mask};
use tessera_blocks::{AbelianSector, AsyncArray, BlockStructure, Direction, Leg};
use tessera_contract::{Contraction, PlanCache, Spec, Strategy};
use tessera_testing::{Approx, Lazy, assert_close_in_norm, unravel_into};

/// A dense tensor: column-major, first leg fastest, with its legs.
struct Dense<T, S> {
    legs: Vec<Leg<S>>,
    data: Vec<T>,
}

fn parity_at<S: AbelianSector>(leg: &Leg<S>, i: usize) -> bool {
    (0..leg.num_segments())
        .find(|&s| leg.range(s).unwrap().contains(&i))
        .map(|s| leg.segments()[s].sector.parity())
        .unwrap()
}

impl<T: Scalar, S: AbelianSector> Dense<T, S> {
    fn dims(&self) -> Vec<usize> {
        self.legs.iter().map(|l| l.dim()).collect()
    }

    /// New leg `k` is old leg `perm[k]`, with the fermionic sign of each element.
    fn permuted(&self, perm: &[usize]) -> Self {
        let dims = self.dims();
        let legs: Vec<Leg<S>> = perm.iter().map(|&p| self.legs[p].clone()).collect();
        let new_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
        let mut data = vec![T::ZERO; self.data.len()];
        let mut idx = vec![0; dims.len()];
        for (k, &v) in self.data.iter().enumerate() {
            unravel_into(k, &dims, &mut idx);
            let odd: Vec<bool> = perm
                .iter()
                .map(|&p| parity_at(&self.legs[p], idx[p]))
                .collect();
            let mut m = 0;
            for i in 0..perm.len() {
                for j in i + 1..perm.len() {
                    m += usize::from(odd[i] && odd[j] && perm[i] > perm[j]);
                }
            }
            let at = perm
                .iter()
                .zip(&new_dims)
                .rev()
                .fold(0, |acc, (&p, &d)| acc * d + idx[p]);
            data[at] = if m % 2 == 1 { T::ZERO - v } else { v };
        }
        Self { legs, data }
    }
}

/// `A'(rows, k) B'(k, cols)` on flattened matrix forms.
fn matmul<T: Scalar>(a: &[T], b: &[T], rows: usize, inner: usize, cols: usize) -> Vec<T> {
    let mut c = vec![T::ZERO; rows * cols];
    for j in 0..cols {
        for l in 0..inner {
            let y = b[l + inner * j];
            for i in 0..rows {
                c[i + rows * j] += a[i + rows * l] * y;
            }
        }
    }
    c
}

struct Case<S: AbelianSector> {
    spec: Spec,
    conj: [bool; 2],
    a: Arc<BlockStructure<S>>,
    b: Arc<BlockStructure<S>>,
}

fn conserved_flux<S: AbelianSector>(legs: &[Leg<S>], rng: &mut ChaCha8Rng) -> S {
    legs.iter().fold(S::trivial(), |acc, l| {
        let i = rng.gen_range(0..l.num_segments());
        acc.fuse_abelian(&l.effective_sector(i).unwrap())
    })
}

fn random_case<S: Kind>(rng: &mut ChaCha8Rng) -> Case<S> {
    let leg = |rng: &mut ChaCha8Rng| loop {
        let l = random_leg::<S>(rng);
        if l.num_segments() > 0 {
            return l;
        }
    };
    let (nfa, nk, nfb) = loop {
        let t = (
            rng.gen_range(0..=2),
            rng.gen_range(0..=2),
            rng.gen_range(0..=2),
        );
        if t.0 + t.1 > 0 && t.1 + t.2 > 0 {
            break t;
        }
    };
    let conj = [rng.gen_bool(0.3), rng.gen_bool(0.3)];
    let free_a: Vec<char> = ['a', 'b'][..nfa].to_vec();
    let k: Vec<char> = ['k', 'l'][..nk].to_vec();
    let free_b: Vec<char> = ['x', 'y'][..nfb].to_vec();
    let mut la: Vec<char> = free_a.iter().chain(&k).copied().collect();
    let mut lb: Vec<char> = k.iter().chain(&free_b).copied().collect();
    // Mostly matrix form already (the common case), sometimes shuffled.
    if rng.gen_bool(0.6) {
        la.shuffle(rng);
    }
    if rng.gen_bool(0.6) {
        lb.shuffle(rng);
    }
    let own_a: Vec<Leg<S>> = (0..nfa + nk).map(|_| leg(rng)).collect();
    let legs_a: Vec<Leg<S>> = la
        .iter()
        .map(|c| {
            let i = free_a.iter().chain(&k).position(|x| x == c).unwrap();
            own_a[i].clone()
        })
        .collect();
    let legs_b: Vec<Leg<S>> = lb
        .iter()
        .map(|c| match k.iter().position(|x| x == c) {
            Some(p) => {
                // B's effective leg is the dual of A's effective leg.
                let eff_a = if conj[0] {
                    own_a[nfa + p].dual()
                } else {
                    own_a[nfa + p].clone()
                };
                let eff_b = eff_a.dual();
                if conj[1] { eff_b.dual() } else { eff_b }
            }
            None => leg(rng),
        })
        .collect();
    let fa = conserved_flux(&legs_a, rng);
    let fb = conserved_flux(&legs_b, rng);
    let na = rng.gen_range(0..=legs_a.len());
    let nb = rng.gen_range(0..=legs_b.len());
    let mut a = BlockStructure::from_legs(legs_a, na, fa).unwrap();
    let mut b = BlockStructure::from_legs(legs_b, nb, fb).unwrap();
    // Sometimes general block sparsity: a random subset of the allowed blocks.
    if rng.gen_bool(0.3) {
        a = a.with_present(&random_mask(rng, a.num_allowed())).unwrap();
    }
    if rng.gen_bool(0.3) {
        b = b.with_present(&random_mask(rng, b.num_allowed())).unwrap();
    }
    let mut out: Vec<char> = free_a.iter().chain(&free_b).copied().collect();
    if rng.gen_bool(0.5) {
        out.shuffle(rng);
    }
    let split = rng.gen_range(0..=out.len());
    let (cod, dom) = out.split_at(split);
    let text = format!(
        "{},{}->{}|{}",
        la.iter().collect::<String>(),
        lb.iter().collect::<String>(),
        cod.iter().collect::<String>(),
        dom.iter().collect::<String>()
    );
    Case {
        spec: Spec::parse(&text).unwrap(),
        conj,
        a: Arc::new(a),
        b: Arc::new(b),
    }
}

/// The reference result of `alpha op(A) op(B) + beta C0` as a dense tensor of the output.
fn reference<T: Scalar, S: AbelianSector>(
    case: &Case<S>,
    a: &[T],
    b: &[T],
    alpha: T,
    beta: T,
    c0: &[T],
) -> Vec<T> {
    let op = |data: &[T], conj: bool| -> Vec<T> {
        data.iter()
            .map(|&x| if conj { x.conj() } else { x })
            .collect()
    };
    let (la, lb) = (case.spec.a(), case.spec.b());
    let k: Vec<char> = case.spec.contracted();
    let free_a: Vec<char> = la.iter().copied().filter(|c| !k.contains(c)).collect();
    let free_b: Vec<char> = lb.iter().copied().filter(|c| !k.contains(c)).collect();
    let pos = |l: &[char], c: &char| l.iter().position(|x| x == c).unwrap();
    let da = Dense {
        legs: case.a.legs().to_vec(),
        data: op(a, case.conj[0]),
    };
    let db = Dense {
        legs: case.b.legs().to_vec(),
        data: op(b, case.conj[1]),
    };
    let pa: Vec<usize> = free_a.iter().chain(&k).map(|c| pos(la, c)).collect();
    let pb: Vec<usize> = k.iter().chain(&free_b).map(|c| pos(lb, c)).collect();
    let mut am = da.permuted(&pa);
    let bm = db.permuted(&pb);
    // The pairing sign of the contracted legs (the crate's fermionic convention), on A':
    // (-1) per pair of odd contracted legs, and per odd one whose A leg is In after `op`.
    let a_in: Vec<bool> = k
        .iter()
        .map(|c| (case.a.legs()[pos(la, c)].direction() == Direction::In) != case.conj[0])
        .collect();
    {
        let dims = am.dims();
        let mut idx = vec![0; dims.len()];
        let nfa = free_a.len();
        for (e, v) in am.data.iter_mut().enumerate() {
            unravel_into(e, &dims, &mut idx);
            let (mut odd_before, mut m) = (0, 0);
            for (i, &is_in) in a_in.iter().enumerate() {
                if parity_at(&am.legs[nfa + i], idx[nfa + i]) {
                    m += odd_before + usize::from(is_in);
                    odd_before += 1;
                }
            }
            if m % 2 == 1 {
                *v = T::ZERO - *v;
            }
        }
    }
    let dims_a = am.dims();
    let dims_b = bm.dims();
    let rows: usize = dims_a[..free_a.len()].iter().product();
    let inner: usize = dims_a[free_a.len()..].iter().product();
    let cols: usize = dims_b[k.len()..].iter().product();
    let legs: Vec<Leg<S>> = am.legs[..free_a.len()]
        .iter()
        .chain(&bm.legs[k.len()..])
        .cloned()
        .collect();
    let product = Dense {
        legs,
        data: matmul(&am.data, &bm.data, rows, inner, cols),
    };
    let cprime: Vec<char> = free_a.iter().chain(&free_b).copied().collect();
    let po: Vec<usize> = case.spec.output().iter().map(|c| pos(&cprime, c)).collect();
    let out = product.permuted(&po);
    out.data
        .iter()
        .zip(c0)
        .map(|(&x, &y)| alpha * x + beta * y)
        .collect()
}

fn differential<T: Field + Approx, S: Kind>(seed: u64, cases: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Every case runs with a small operand applied in one pass wherever that saves a
    // permutation (whatever the size), and as GEMMs on matrix forms only (what a device runs).
    let caches = [
        Arc::new(PlanCache::new().with_small_operand_min(0)),
        Arc::new(PlanCache::new().with_small_operand_min(usize::MAX)),
    ];
    let (mut sector_plans, mut pair_plans, mut small_plans) = (0, 0, 0);
    for n in 0..cases {
        let case = random_case::<S>(&mut rng);
        let a = AsyncArray::<T, S>::random(Arc::clone(&case.a), rng.r#gen());
        let b = AsyncArray::<T, S>::random(Arc::clone(&case.b), rng.r#gen());
        let (da, db) = (a.to_dense().unwrap(), b.to_dense().unwrap());
        let alpha = T::from_c64(Complex64::new(
            rng.gen_range(-2.0..2.0),
            rng.gen_range(-1.0..1.0),
        ));
        let beta = [T::ZERO, T::ONE, T::from_f64(-0.75)][n % 3];
        let acc_seed: u64 = rng.r#gen();
        for cache in &caches {
            let mut c = Contraction::from_spec(case.spec.clone()).with_cache(Arc::clone(cache));
            if case.conj[0] {
                c = c.conj_a();
            }
            if case.conj[1] {
                c = c.conj_b();
            }
            let plan = c.plan(&a, &b).unwrap();
            sector_plans += usize::from(plan.sector_gemms() > 0);
            pair_plans += usize::from(plan.gemms() > plan.sector_gemms());
            small_plans += usize::from(plan.strategy() == Strategy::SmallOperand);
            let what = || format!("{} case {n}: {plan}", std::any::type_name::<S>());
            let out = c.apply_scaled(alpha, &a, &b).unwrap();
            assert_eq!(out.structure(), plan.output());
            // The output's structure from the legs alone is the plan's.
            let unplanned = c.output_of(a.structure(), b.structure()).unwrap();
            assert_eq!(&unplanned, &**plan.output(), "{}", what());
            let got = out.to_dense().unwrap();
            let want = reference(&case, &da, &db, alpha, T::ZERO, &vec![T::ZERO; got.len()]);
            assert_close_in_norm(&got, &want, 1e-12, Lazy(&what));
            // Accumulate into an existing output, with beta in {0, 1, other}. With beta = 0
            // the old C is ignored (BLAS's rule), so it is all NaN there: any read of it
            // shows.
            let acc = AsyncArray::<T, S>::random(Arc::clone(plan.output()), acc_seed);
            if beta == T::ZERO {
                acc.scale(T::from_f64(f64::NAN));
            }
            let c0 = if beta == T::ZERO {
                vec![T::ZERO; got.len()]
            } else {
                acc.to_dense().unwrap()
            };
            c.apply_into_scaled(alpha, &a, &b, beta, &acc).unwrap();
            let want = reference(&case, &da, &db, alpha, beta, &c0);
            assert_close_in_norm(&acc.to_dense().unwrap(), &want, 1e-12, Lazy(&what));
            // Into an output with some of the blocks (as a process computes the blocks it
            // owns): those blocks are the full result's, the others are not there.
            let mask = random_mask(
                &mut ChaCha8Rng::seed_from_u64(acc_seed),
                plan.output().num_blocks(),
            );
            let some = Arc::new(plan.output().with_present(&mask).unwrap());
            let part = AsyncArray::<T, S>::random(Arc::clone(&some), acc_seed ^ 1);
            if beta == T::ZERO {
                part.scale(T::from_f64(f64::NAN));
            }
            let ones: Vec<Vec<T>> = some.blocks().map(|b| vec![T::ONE; b.len()]).collect();
            let inside: Vec<bool> = AsyncArray::<T, S>::from_blocks(Arc::clone(&some), &ones)
                .unwrap()
                .to_dense()
                .unwrap()
                .iter()
                .map(|&x| x == T::ONE)
                .collect();
            let c0 = if beta == T::ZERO {
                vec![T::ZERO; got.len()]
            } else {
                part.to_dense().unwrap()
            };
            c.apply_into_scaled(alpha, &a, &b, beta, &part).unwrap();
            let want: Vec<T> = reference(&case, &da, &db, alpha, beta, &c0)
                .into_iter()
                .zip(&inside)
                .map(|(x, &i)| if i { x } else { T::ZERO })
                .collect();
            assert_close_in_norm(&part.to_dense().unwrap(), &want, 1e-12, Lazy(&what));
        }
    }
    for cache in &caches {
        assert!(
            cache.hits() >= cases as u64,
            "every case plans once and hits twice"
        );
    }
    // Every strategy was exercised.
    assert!(
        sector_plans > cases / 10 && pair_plans > cases / 30 && small_plans > cases / 15,
        "{}: {sector_plans} plans with sector GEMMs, {pair_plans} with block pairs, \
         {small_plans} with a small operand",
        std::any::type_name::<S>()
    );
}

macro_rules! kinds {
    ($name:ident, $t:ty, $cases:expr) => {
        #[test]
        fn $name() {
            fn run<S: Kind>(seed: u64) {
                differential::<$t, S>(seed, $cases);
            }
            tessera_blocks::for_each_kind!(run);
        }
    };
}

kinds!(differential_f64, f64, 300);
kinds!(differential_c64, Complex64, 250);

/// The differential cases on a GPU (feature `cuda`): the operands moved to device 0, the
/// contraction run there through cuBLAS (the backend chosen from their domain), the result
/// moved back. Real types (cuBLAS kernels here are f32 and f64). Without a driver or device
/// it prints `skipped: ...` and returns.
#[cfg(feature = "cuda")]
#[test]
fn differential_on_the_device() {
    use tessera_backends::cuda::{CudaDevice, CudaScalar, probe_nvrtc};
    use tessera_blocks::testing::or_skip_without_cuda;
    let Some(dev) = or_skip_without_cuda(
        CudaDevice::open(0).and_then(|d| probe_nvrtc().map(|()| d)),
        "opening CUDA device 0",
    ) else {
        return;
    };
    let dev = Arc::new(dev);
    fn cases<T: Field + CudaScalar, S: Kind>(dev: &Arc<CudaDevice>, seed: u64, n: usize, tol: f64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for case in 0..n {
            let case_ = random_case::<S>(&mut rng);
            let a = AsyncArray::<T, S>::random(Arc::clone(&case_.a), rng.r#gen());
            let b = AsyncArray::<T, S>::random(Arc::clone(&case_.b), rng.r#gen());
            let mut c = Contraction::from_spec(case_.spec.clone());
            if case_.conj[0] {
                c = c.conj_a();
            }
            if case_.conj[1] {
                c = c.conj_b();
            }
            let what = || {
                format!(
                    "{} {} case {case}",
                    std::any::type_name::<T>(),
                    std::any::type_name::<S>()
                )
            };
            let (da, db) = (a.to_device(dev).unwrap(), b.to_device(dev).unwrap());
            let alpha = T::from_f64(rng.gen_range(-2.0..2.0));
            let want = c.apply_scaled(alpha, &a, &b).unwrap().to_dense().unwrap();
            let got = c
                .apply_scaled(alpha, &da, &db)
                .unwrap()
                .to_host()
                .unwrap()
                .to_dense()
                .unwrap();
            let scale: f64 = want.iter().map(|x| x.abs2().into()).sum::<f64>().sqrt();
            for (x, y) in got.iter().zip(&want) {
                let d: f64 = (*x - *y).abs2().into();
                assert!(d.sqrt() <= tol * (1.0 + scale), "{}", what());
            }
            // Accumulation, beta in {0, 1, other}, into a device output.
            let acc = AsyncArray::<T, S>::random(
                Arc::clone(c.plan(&a, &b).unwrap().output()),
                rng.r#gen(),
            );
            let dacc = acc.to_device(dev).unwrap();
            let beta = [T::ZERO, T::ONE, T::from_f64(-0.75)][case % 3];
            c.apply_into_scaled(alpha, &a, &b, beta, &acc).unwrap();
            c.apply_into_scaled(alpha, &da, &db, beta, &dacc).unwrap();
            let (got, want) = (
                dacc.to_host().unwrap().to_dense().unwrap(),
                acc.to_dense().unwrap(),
            );
            for (x, y) in got.iter().zip(&want) {
                let d: f64 = (*x - *y).abs2().into();
                assert!(d.sqrt() <= tol * (1.0 + scale), "{} (beta)", what());
            }
        }
    }
    fn run<S: Kind>(seed: u64) {
        let dev = Arc::new(CudaDevice::open(0).unwrap());
        cases::<f64, S>(&dev, seed, 100, 1e-12);
        cases::<f32, S>(&dev, seed + 1, 50, 1e-4);
    }
    drop(dev);
    tessera_blocks::for_each_kind!(run);
}
