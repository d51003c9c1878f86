//! Contraction throughput and planning time, each beside its baseline in the same run. One
//! criterion group per workload, named for what it measures (`contract/<what>/<size>`), and
//! in each group the Tessera run and its baseline:
//!
//! - `contract/block_gemm/u1_{sectors}x{d}`: a U(1) block-sparse matrix product with many
//!   sectors (and with one), over one dense faer GEMM of the same total flops;
//! - `contract/block_gemm/u1_41_upto32`: a U(1) matrix product of 41 sectors of 4 to 32
//!   (a DMRG bond's profile, `benches/data/block_gemm_u1_41.json`), over a sequential loop
//!   of faer calls on the same blocks (all that such a product needs, with no task at all);
//! - `contract/small_blocks/2048_of_32x32x32`: many small block products, over a plain rayon
//!   loop of faer calls on the same blocks (no runtime);
//! - `contract/plan/pairs_1e4`: planning a contraction of 10,000 block pairs, fresh and from
//!   the cache, and building its output structure;
//! - `contract/plan/tiles_1e4` .. `tiles_1e6`: planning products of full tilings of 10^4 to
//!   10^6 blocks, beside building the output structure alone;
//! - `contract/heff/chi{chi}`: the DMRG two-site effective Hamiltonian `L W W R theta` on the
//!   U(1) Heisenberg structures of `benches/data/heff_heisenberg_chi*.json`, over one dense
//!   faer GEMM of the same total flops: in the files' chain (L theta, W, W, R, as TeNPy runs
//!   it), in the order [`Network::optimal`] picks from the same structures, and as the DMRG
//!   engine (`tessera_mps::dmrg`) prepares it: constant operands held in the layouts its three
//!   steps read, the two MPO tensors as one operator, the steps applied in turn
//!   (`tessera_dmrg_layouts`) and as the engine applies them, one [`Chain`] fused by row
//!   panels (`tessera_dmrg_chain`); each group prints the modelled memory traffic of one
//!   application of both chains beside the least the layouts' three GEMM steps move with
//!   nothing permuted, and after the group a paired line (`contract/heff/chi{chi}/paired`,
//!   see `benches/paired`): the engine's chain and the dense GEMM in alternating batches,
//!   with the median of their per-pair ratio, the figure least moved by a shared machine's
//!   drift;
//! - `contract/cuda/block_gemm/16x{d}_{type}` and `contract/cuda/heff/chi{chi}`: with
//!   `--features cuda`, on CUDA device 0, block GEMM and H_eff beside one dense cuBLAS GEMM.
//!
//! Every "dense faer GEMM of the same flops" runs on one core or on all, whichever is faster
//! here (see [`Dense`]; each group prints both), and every faer baseline's matrices have
//! their padding zeroed (see [`mat`]).
//!
//! Throughputs are in flops per second (criterion's "elem/s").
//!
//! `cargo bench --bench contract` (`-- contract/heff` for one workload; `--features cuda --
//! contract/cuda` for the GPU groups; the H_eff data from `TESSERA_DATA` when set, else
//! `benches/data/` in this repository)

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, Par};
use rayon::prelude::*;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tessera::blocks::{AsyncArray, BlockStructure, Direction, Leg, Trivial, U1};
use tessera::contract::{Chain, Contraction, Network, Operand, Order, Plan, PlanCache, Spec};
use tessera::prelude::Runtime;

mod paired;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A U(1) matrix with `sectors` sectors of dimension `d` each: one `d x d` block per sector.
fn matrix(sectors: i32, d: usize, seed: u64) -> AsyncArray<f64, U1> {
    let v = Leg::new(Direction::In, (0..sectors).map(|q| (U1(q), d))).unwrap();
    let s = BlockStructure::new(vec![v.clone()], vec![v.dual()], U1(0)).unwrap();
    AsyncArray::random(s, seed)
}

/// A faer matrix from `f`, whose padding rows (past `rows`, up to faer's column stride) hold
/// zeros.
///
/// faer rounds each column up to whole SIMD vectors and leaves those rows uninitialised, and
/// its AVX-512 kernels read them at a matrix's lower edge (the results are dropped). Memory
/// the process recycles can hold subnormal numbers there, and an FMA on a subnormal takes a
/// microcode assist. On the Intel dev VM (2026-12-07) the same `n = 172` product ran 8 to 14
/// GFLOP/s on recycled memory and 82 to 103 with only its padding zeroed, and the chi 512
/// dense baseline (`n = 636`) 24 to 135 depending on the allocation. Tessera's own block
/// views have no padding (a block's column stride is its rows).
fn mat(rows: usize, cols: usize, f: impl Fn(usize, usize) -> f64) -> Mat<f64> {
    let stride = Mat::<f64>::zeros(rows, 1).col_stride() as usize;
    let mut m = Mat::from_fn(stride, cols, |i, j| if i < rows { f(i, j) } else { 0.0 });
    m.truncate(rows, cols);
    assert_eq!(
        m.col_stride() as usize,
        stride,
        "faer's column stride for {rows} rows"
    );
    m
}

/// The dense baseline: one `n x n x n` faer GEMM of `flops` (rounded to the cube), on one
/// core or on all of the runtime's, whichever runs faster here.
struct Dense {
    a: Mat<f64>,
    b: Mat<f64>,
    c: Mat<f64>,
    par: Par,
    /// `2 n^3`.
    flops: u64,
    /// The speeds on one core and on all, in GFLOP/s.
    tried: [f64; 2],
}

impl Dense {
    fn new(runtime: &Runtime, flops: u64) -> Self {
        let n = ((flops as f64 / 2.0).cbrt().round() as usize).max(1);
        let flops = 2 * (n as u64).pow(3);
        let a = mat(n, n, |i, j| ((i * 7 + j * 3) % 11) as f64 - 5.0);
        let b = mat(n, n, |i, j| ((i * 5 + j) % 13) as f64 - 6.0);
        let mut c = mat(n, n, |_, _| 0.0);
        let pars = [Par::Seq, Par::rayon(runtime.threads())];
        let tried = pars.map(|par| {
            flops as f64 / paired::batch(&mut || gemm(runtime, &a, &b, &mut c, par)) / 1e9
        });
        let par = if tried[1] > tried[0] {
            pars[1]
        } else {
            pars[0]
        };
        Self {
            a,
            b,
            c,
            par,
            flops,
            tried,
        }
    }

    fn run(&mut self, runtime: &Runtime) {
        gemm(runtime, &self.a, &self.b, &mut self.c, self.par)
    }

    /// What was chosen, and why: for the bench's output.
    fn describe(&self) -> String {
        format!(
            "n = {} on {} ({:.0} GFLOP/s on one core, {:.0} on all)",
            self.a.nrows(),
            if self.par == Par::Seq {
                "one core"
            } else {
                "all cores"
            },
            self.tried[0],
            self.tried[1]
        )
    }
}

fn gemm(runtime: &Runtime, a: &Mat<f64>, b: &Mat<f64>, c: &mut Mat<f64>, par: Par) {
    runtime.install(|| matmul(c.as_mut(), Accum::Replace, a.as_ref(), b.as_ref(), 1.0, par));
}

fn block_gemm(c: &mut Criterion) {
    let runtime = Runtime::new(2).unwrap();
    let mm = Contraction::new("ab,bc->ac").unwrap();
    // Eight sectors, and one lone sector (its GEMM must use both cores by itself).
    for (sectors, d) in [(8, 128_usize), (8, 256), (8, 512), (1, 256)] {
        let mut group = c.benchmark_group(format!("contract/block_gemm/u1_{sectors}x{d}"));
        group.sample_size(10);
        let (a, b) = (matrix(sectors, d, 1), matrix(sectors, d, 2));
        let out = AsyncArray::zeros(Arc::clone(mm.plan(&a, &b).unwrap().output()));
        let flops = mm.plan(&a, &b).unwrap().flops();
        group.throughput(Throughput::Elements(flops));
        group.bench_function("tessera", |bch| {
            bch.iter(|| {
                runtime.enter(|| mm.apply_into(&a, &b, &out).unwrap());
                out.wait().unwrap();
            })
        });
        let mut dense = Dense::new(&runtime, flops);
        println!(
            "contract/block_gemm/u1_{sectors}x{d}: dense baseline {}",
            dense.describe()
        );
        group.throughput(Throughput::Elements(dense.flops));
        group.bench_function("dense_faer_same_flops", |bch| {
            bch.iter(|| dense.run(&runtime))
        });
        group.finish();
    }
}

/// The blocks of a matrix (two legs) as faer matrices, for the baselines without a runtime.
fn block_mats(x: &AsyncArray<f64, U1>) -> Vec<Mat<f64>> {
    let shapes: Vec<Vec<usize>> = x.structure().blocks().map(|b| b.shape().to_vec()).collect();
    x.to_blocks()
        .unwrap()
        .iter()
        .zip(shapes)
        .map(|(v, d)| mat(d[0], d[1], |i, j| v[i + d[0] * j]))
        .collect()
}

/// `c <- a b`, one sequential faer call (a baseline's unit of work).
fn block_product(c: &mut Mat<f64>, a: &Mat<f64>, b: &Mat<f64>) {
    matmul(
        c.as_mut(),
        Accum::Replace,
        a.as_ref(),
        b.as_ref(),
        1.0,
        Par::Seq,
    )
}

fn small_sectors(c: &mut Criterion) {
    let runtime = Runtime::new(2).unwrap();
    let mut group = c.benchmark_group("contract/block_gemm/u1_41_upto32");
    group.sample_size(20);
    let (tensors, _) = load_structures("block_gemm_u1_41.json", 1);
    let [(_, a), (_, b)] = &tensors[..] else {
        panic!("two operands, A and B")
    };
    let (a, b) = (&a.array, &b.array);
    let mm = Contraction::new("ab,bc->ac").unwrap();
    let plan = mm.plan(a, b).unwrap();
    let out = AsyncArray::zeros(Arc::clone(plan.output()));
    group.throughput(Throughput::Elements(plan.flops()));
    group.bench_function("tessera", |bch| {
        bch.iter(|| {
            runtime.enter(|| mm.apply_into(a, b, &out).unwrap());
            out.wait().unwrap();
        })
    });
    let (ma, mb) = (block_mats(a), block_mats(b));
    let mut mc: Vec<Mat<f64>> = ma
        .iter()
        .map(|m| mat(m.nrows(), m.ncols(), |_, _| 0.0))
        .collect();
    group.bench_function("loop_of_faer", |bch| {
        bch.iter(|| {
            for (c, (a, b)) in mc.iter_mut().zip(ma.iter().zip(&mb)) {
                block_product(c, a, b);
            }
        })
    });
    group.finish();
}

fn small_blocks(c: &mut Criterion) {
    let runtime = Runtime::new(2).unwrap();
    let (sectors, d) = (2048, 32);
    let mut group = c.benchmark_group(format!("contract/small_blocks/{sectors}_of_{d}x{d}x{d}"));
    group.sample_size(10);
    let mm = Contraction::new("ab,bc->ac").unwrap();
    let (a, b) = (matrix(sectors, d, 1), matrix(sectors, d, 2));
    let plan = mm.plan(&a, &b).unwrap();
    let out = AsyncArray::zeros(Arc::clone(plan.output()));
    group.throughput(Throughput::Elements(plan.flops()));
    group.bench_function("tessera", |bch| {
        bch.iter(|| {
            runtime.enter(|| mm.apply_into(&a, &b, &out).unwrap());
            out.wait().unwrap();
        })
    });
    let (ma, mb) = (block_mats(&a), block_mats(&b));
    let mut mc: Vec<Mat<f64>> = (0..ma.len()).map(|_| mat(d, d, |_, _| 0.0)).collect();
    group.bench_function("rayon_loop_of_faer", |bch| {
        bch.iter(|| {
            runtime.install(|| {
                mc.par_iter_mut()
                    .zip(ma.par_iter().zip(&mb))
                    .for_each(|(c, (a, b))| block_product(c, a, b))
            })
        })
    });
    group.finish();
}

fn planning(c: &mut Criterion) {
    let mut group = c.benchmark_group("contract/plan/pairs_1e4");
    let (a, b) = (matrix(10_000, 2, 1), matrix(10_000, 2, 2));
    let spec = Spec::parse("ab,bc->ac").unwrap();
    let fresh = Contraction::from_spec(spec.clone());
    group.bench_function("fresh", |bch| {
        bch.iter(|| {
            let cache = Arc::new(PlanCache::new());
            let plan = fresh.clone().with_cache(cache).plan(&a, &b).unwrap();
            assert_eq!(plan.gemms(), 10_000);
            black_box(plan)
        })
    });
    // The part of planning that builds the output's descriptor table.
    let legs = vec![
        a.structure().legs()[0].clone(),
        b.structure().legs()[1].clone(),
    ];
    group.bench_function("output_structure", |bch| {
        bch.iter(|| black_box(BlockStructure::from_legs(legs.clone(), 1, U1(0)).unwrap()))
    });
    let cached = Contraction::from_spec(spec).with_cache(Arc::new(PlanCache::new()));
    cached.plan(&a, &b).unwrap();
    group.bench_function("cached", |bch| {
        bch.iter(|| black_box(cached.plan(&a, &b).unwrap()))
    });
    group.finish();
}

/// Planning a product of full tilings of `n x n` tiles (`n^2` blocks per operand, `n^3`
/// block pairs that the plan never forms), beside its baseline in the same run: building
/// the product's descriptor table alone. Their ratio stays flat as the blocks grow 100-fold.
fn plan_scaling(c: &mut Criterion) {
    for n in [100_usize, 316, 1000] {
        // 10^4, 10^5 (316^2 = 99,856) and 10^6 blocks per operand.
        let tiles = format!("1e{}", ((n * n) as f64).log10().round());
        let mut group = c.benchmark_group(format!("contract/plan/tiles_{tiles}"));
        group.sample_size(10);
        let leg = Leg::<Trivial>::tiling(&vec![1; n]).unwrap();
        let s = Arc::new(BlockStructure::new([leg.clone()], [leg.dual()], Trivial).unwrap());
        let a = AsyncArray::<f64, Trivial>::empty(Arc::clone(&s));
        let fresh = Contraction::new("ij,jk->ik").unwrap();
        group.bench_function("plan", |bch| {
            bch.iter(|| {
                let cache = Arc::new(PlanCache::new());
                black_box(fresh.clone().with_cache(cache).plan(&a, &a).unwrap())
            })
        });
        let legs = vec![leg.clone(), leg.dual()];
        group.bench_function("output_structure", |bch| {
            bch.iter(|| black_box(BlockStructure::from_legs(legs.clone(), 1, Trivial).unwrap()))
        });
        group.finish();
    }
}

/// One step of the chain: operands `A` and `B` (by name, `T` the running result) and the
/// labels contracted on each.
type Step = (String, String, Vec<String>, Vec<String>);

/// One operand of the data files: its leg labels and the array (on the host, or with the
/// `cuda` feature on a device).
struct Tensor<A = AsyncArray<f64, U1>> {
    labels: Vec<String>,
    array: A,
}

/// The operands and chain of `heff_heisenberg_chi{chi}.json`, with every virtual leg's
/// sector dimensions multiplied by `scale` (1: the file's structures; more: a proxy for a
/// larger bond dimension with the same sectors).
fn load_heff(chi: usize, scale: usize) -> (Vec<(String, Tensor)>, Vec<Step>) {
    load_structures(&format!("heff_heisenberg_chi{chi}.json"), scale)
}

/// The operands and chain of the structure file `name` in `benches/data` (the format of
/// the H_eff files, which `benches/compare/compare.py` reads too).
fn load_structures(name: &str, scale: usize) -> (Vec<(String, Tensor)>, Vec<Step>) {
    // The files live in the repository, beside the benches; `TESSERA_DATA` names another
    // folder (a machine the bench binary was carried to without the repository).
    let dir = std::env::var_os("TESSERA_DATA").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/data"),
        PathBuf::from,
    );
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut tensors = Vec::new();
    for (seed, (name, op)) in json["operands"].as_object().unwrap().iter().enumerate() {
        let mut labels = Vec::new();
        let legs: Vec<Leg<U1>> = op["legs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let label = l["label"].as_str().unwrap().to_owned();
                let factor = if label.starts_with('v') { scale } else { 1 };
                labels.push(label);
                let dir = Direction::from_sign(l["dir"].as_i64().unwrap()).unwrap();
                let sectors = l["sectors"].as_array().unwrap().iter().map(|s| {
                    (
                        U1(s[0].as_i64().unwrap() as i32),
                        s[1].as_u64().unwrap() as usize * factor,
                    )
                });
                Leg::new(dir, sectors).unwrap()
            })
            .collect();
        let flux = U1(op["flux"][0].as_i64().unwrap() as i32);
        // Stored in the layout a DMRG code keeps them in: split as their first contraction
        // in the chain takes them (L and R with their virtual and MPO legs as rows, W with
        // its MPO legs as rows, theta with its left virtual leg as rows).
        let split = match name.as_str() {
            "LP" | "RP" => 2,
            "theta" => 1,
            _ => legs.len() / 2,
        };
        let s = BlockStructure::from_legs(legs, split, flux).unwrap();
        let array = AsyncArray::random(s, seed as u64 + 1);
        tensors.push((name.clone(), Tensor { labels, array }));
    }
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_owned())
            .collect()
    };
    let chain = json["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            (
                step[0].as_str().unwrap().to_owned(),
                step[1].as_str().unwrap().to_owned(),
                strings(&step[2]),
                strings(&step[3]),
            )
        })
        .collect();
    (tensors, chain)
}

/// The elements one contraction moves through memory, in the model of issue 26: an operand
/// is read once, or read, written to a permuted temporary and read again (three passes) when
/// its matrix form is permuted; the product is written once, or written, read and written
/// permuted. Caches are ignored, so a small operand that stays in cache counts in full.
fn traffic(plan: &Plan<U1>, a: usize, b: usize) -> u64 {
    let passes = |permuted: bool| if permuted { 3 } else { 1 };
    let out = plan.output().total_len();
    (passes(plan.permutes_operand(0)) * a
        + passes(plan.permutes_operand(1)) * b
        + passes(plan.permutes_output()) * out) as u64
}

/// The chain of contractions, run by the operands' backend; returns the result, the total
/// flops and the modelled memory traffic in bytes of f64 (see [`traffic`]).
fn apply_heff<A: Operand<Scalar = f64, Symmetry = U1>>(
    tensors: &[(String, Tensor<A>)],
    chain: &[Step],
) -> (A, u64, u64) {
    let mut running: Option<Tensor<A>> = None;
    let (mut flops, mut bytes) = (0, 0);
    for (x, y, ax, ay) in chain {
        let previous = running.take();
        let operand = |name: &str| -> &Tensor<A> {
            if name == "T" {
                previous.as_ref().expect("T is the running result")
            } else {
                &tensors
                    .iter()
                    .find(|(n, _)| n == name)
                    .expect("an operand")
                    .1
            }
        };
        let (a, b) = (operand(x), operand(y));
        let pos = |t: &Tensor<A>, l: &String| t.labels.iter().position(|x| x == l).unwrap();
        let axes_a: Vec<usize> = ax.iter().map(|l| pos(a, l)).collect();
        let axes_b: Vec<usize> = ay.iter().map(|l| pos(b, l)).collect();
        let spec = Spec::tensordot(a.labels.len(), b.labels.len(), &axes_a, &axes_b).unwrap();
        let c = Contraction::from_spec(spec);
        let plan = c.plan(&a.array, &b.array).unwrap();
        flops += plan.flops();
        let len = |x: &A| x.structure().total_len();
        bytes += 8 * traffic(&plan, len(&a.array), len(&b.array));
        let array = c.apply(&a.array, &b.array).unwrap();
        let labels = a
            .labels
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes_a.contains(i))
            .chain(
                b.labels
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| !axes_b.contains(j)),
            )
            .map(|(_, l)| l.clone())
            .collect();
        running = Some(Tensor { labels, array });
    }
    (running.unwrap().array, flops, bytes)
}

/// The chain's tensors as a [`Network`]: legs contracted by some step share a label, every
/// other leg has its own. Returns the network and the operands in its order.
fn heff_network<'t>(
    tensors: &'t [(String, Tensor)],
    chain: &[Step],
) -> (Network<U1>, Vec<&'t AsyncArray<f64, U1>>) {
    // Legs are (tensor index, leg index); the running result's legs are a list of those.
    let index = |name: &str| tensors.iter().position(|(n, _)| n == name).unwrap();
    let mut label: Vec<Vec<Option<char>>> = tensors
        .iter()
        .map(|(_, t)| vec![None; t.labels.len()])
        .collect();
    let mut next = 'a';
    let mut fresh = || {
        let c = next;
        next = char::from_u32(next as u32 + 1).unwrap();
        c
    };
    let mut running: Vec<(usize, usize)> = Vec::new();
    for (x, y, ax, ay) in chain {
        let legs_of = |name: &str, running: &[(usize, usize)]| -> Vec<(usize, usize)> {
            if name == "T" {
                running.to_vec()
            } else {
                let i = index(name);
                (0..tensors[i].1.labels.len()).map(|l| (i, l)).collect()
            }
        };
        let (la, lb) = (legs_of(x, &running), legs_of(y, &running));
        let name_of = |(i, l): (usize, usize)| &tensors[i].1.labels[l];
        let pos = |legs: &[(usize, usize)], want: &String| {
            legs.iter().position(|&g| name_of(g) == want).unwrap()
        };
        let (ka, kb): (Vec<usize>, Vec<usize>) = ax
            .iter()
            .zip(ay)
            .map(|(p, q)| (pos(&la, p), pos(&lb, q)))
            .unzip();
        for (&i, &j) in ka.iter().zip(&kb) {
            let c = fresh();
            label[la[i].0][la[i].1] = Some(c);
            label[lb[j].0][lb[j].1] = Some(c);
        }
        running = la
            .iter()
            .enumerate()
            .filter(|(i, _)| !ka.contains(i))
            .chain(lb.iter().enumerate().filter(|(j, _)| !kb.contains(j)))
            .map(|(_, &g)| g)
            .collect();
    }
    let labels: Vec<String> = label
        .into_iter()
        .map(|ls| {
            ls.into_iter()
                .map(|c| c.unwrap_or_else(&mut fresh))
                .collect()
        })
        .collect();
    let net = Network::new(
        tensors
            .iter()
            .zip(&labels)
            .map(|((_, t), l)| (l.as_str(), Arc::clone(t.array.structure())))
            .collect(),
    )
    .unwrap();
    (net, tensors.iter().map(|(_, t)| &t.array).collect())
}

/// The operand `name` with its legs in the order `labels`, split after `split` of them.
fn arranged(
    tensors: &[(String, Tensor)],
    name: &str,
    labels: &[&str],
    split: usize,
) -> AsyncArray<f64, U1> {
    let t = &tensors
        .iter()
        .find(|(n, _)| n == name)
        .expect("an operand")
        .1;
    let perm: Vec<usize> = labels
        .iter()
        .map(|l| t.labels.iter().position(|x| x == l).expect("a leg"))
        .collect();
    t.array.permute(&perm, split).unwrap()
}

/// H_eff as the DMRG engine applies it (`mps/src/dmrg/heff.rs`): `L(y, a | k)`, the pair's
/// MPO tensors contracted into `W(a, s, t | u, v, c)` and `R(r, c | z)` prepared once (as
/// the engine does once per step), then three steps on `theta(k | s, t, r)` (the engine's
/// Lanczos form), each writing the next one's matrix form, the last `theta`'s form (a
/// re-split of its product in turn; written directly by the fused chain). Returns the
/// prepared operands and the steps.
fn heff_in_layouts(tensors: &[(String, Tensor)]) -> ([AsyncArray<f64, U1>; 4], [Contraction; 3]) {
    let left = arranged(tensors, "LP", &["vR*", "wR", "vR"], 2);
    let w0 = arranged(tensors, "W0", &["wL", "p0*", "p0", "wR"], 2);
    let w1 = arranged(tensors, "W1", &["wL", "p1*", "p1", "wR"], 2);
    let w = Contraction::new("asub,btvc->ast|uvc")
        .unwrap()
        .apply(&w0, &w1)
        .unwrap();
    let right = arranged(tensors, "RP", &["vL", "wL", "vL*"], 2);
    let theta = arranged(tensors, "theta", &["vL", "p0", "p1", "vR"], 1);
    let steps = [
        Contraction::new("yak,kstr->ya|str").unwrap(),
        Contraction::new("yastr,astuvc->yuv|rc").unwrap(),
        Contraction::new("yuvrc,rcz->y|uvz").unwrap(),
    ];
    ([left, w, right, theta], steps)
}

/// One application of H_eff in the DMRG layouts, from the plans alone (nothing is
/// computed): its flops, its modelled memory traffic (see [`traffic`]) and the least the
/// same three GEMM steps move with nothing permuted (every operand and intermediate read
/// once, written once), the traffic in bytes of f64.
fn layouts_profile(operands: &[AsyncArray<f64, U1>; 4], steps: &[Contraction; 3]) -> [u64; 3] {
    let len = |x: &AsyncArray<f64, U1>| x.structure().total_len();
    let [left, w, right, theta] = operands;
    let first = steps[0].plan(left, theta).unwrap();
    let t = AsyncArray::zeros(Arc::clone(first.output()));
    let second = steps[1].plan(&t, w).unwrap();
    let u = AsyncArray::zeros(Arc::clone(second.output()));
    let plans = [
        (first, len(left), len(theta)),
        (second, len(&t), len(w)),
        (steps[2].plan(&u, right).unwrap(), len(&u), len(right)),
    ];
    let flops = plans.iter().map(|(p, _, _)| p.flops()).sum();
    let layouts: u64 = plans.iter().map(|(p, a, b)| traffic(p, *a, *b)).sum();
    let least: u64 = plans
        .iter()
        .map(|(p, a, b)| (a + b + p.output().total_len()) as u64)
        .sum();
    [flops, 8 * layouts, 8 * least]
}

fn apply_in_layouts(
    [left, w, right, theta]: &[AsyncArray<f64, U1>; 4],
    [first, second, last]: &[Contraction; 3],
) -> AsyncArray<f64, U1> {
    let t = first.apply(left, theta).unwrap();
    let t = second.apply(&t, w).unwrap();
    last.apply(&t, right).unwrap()
}

fn heff(c: &mut Criterion) {
    let runtime = Runtime::new(2).unwrap();
    for chi in [128_usize, 256, 512, 1024] {
        let mut group = c.benchmark_group(format!("contract/heff/chi{chi}"));
        group.sample_size(10);
        let (tensors, chain) = load_heff(chi, 1);
        let (_, flops, files) = runtime.enter(|| apply_heff(&tensors, &chain));
        group.throughput(Throughput::Elements(flops));
        group.bench_function("tessera", |bch| {
            bch.iter(|| {
                let (t, _, _) = runtime.enter(|| apply_heff(&tensors, &chain));
                t.wait().unwrap();
            })
        });
        let (operands, steps) = runtime.enter(|| heff_in_layouts(&tensors));
        // The same H theta as the chain (whose legs come out as (p0, vR*, p1, vL*)).
        runtime.enter(|| {
            let (chain_result, _, _) = apply_heff(&tensors, &chain);
            let want = chain_result
                .permute(&[1, 0, 2, 3], 3)
                .unwrap()
                .to_dense()
                .unwrap();
            let got = apply_in_layouts(&operands, &steps).to_dense().unwrap();
            let scale = want.iter().fold(0.0_f64, |m, x| m.max(x.abs()));
            assert!(
                want.iter()
                    .zip(&got)
                    .all(|(a, b)| (a - b).abs() <= 1e-10 * scale)
            );
        });
        let [flops, layouts, least] = runtime.enter(|| layouts_profile(&operands, &steps));
        let mb = |b: u64| b as f64 / 1e6;
        println!(
            "contract/heff/chi{chi}: memory traffic per application (model): files' chain \
             {:.1} MB, DMRG layouts {:.1} MB, least {:.1} MB",
            mb(files),
            mb(layouts),
            mb(least)
        );
        group.throughput(Throughput::Elements(flops));
        group.bench_function("tessera_dmrg_layouts", |bch| {
            bch.iter(|| {
                runtime
                    .enter(|| apply_in_layouts(&operands, &steps))
                    .wait()
                    .unwrap()
            })
        });
        // The same three steps as one `Chain` (what the engine runs): fused by row panels,
        // each task computing both intermediates on one sector of `y` in its own scratch.
        let fused_chain = Chain::new(steps.clone());
        let [left, w, right, theta] = &operands;
        let s = operands.each_ref().map(|x| x.structure());
        let fused = runtime.enter(|| {
            let want = apply_in_layouts(&operands, &steps).to_dense().unwrap();
            let got = fused_chain.apply(left, theta, w, right).unwrap();
            let got = got.to_dense().unwrap();
            let scale = want.iter().fold(0.0_f64, |m, x| m.max(x.abs()));
            assert!(
                want.iter()
                    .zip(&got)
                    .all(|(a, b)| (a - b).abs() <= 1e-10 * scale)
            );
            fused_chain
                .fuses::<f64, U1>([s[0], s[3], s[1], s[2]])
                .unwrap()
        });
        // The fused chain's traffic, modelled from its panel plan (each operand block once
        // per GEMM or kernel call that reads it: theta's and R's sectors once per chunk of
        // every panel that meets them).
        if let Some(t) = fused_chain
            .traffic::<f64, U1>([s[0], s[3], s[1], s[2]])
            .unwrap()
        {
            let mb = |e: usize| e as f64 * 8e-6;
            println!(
                "contract/heff/chi{chi}: fused chain traffic per application (model): reads L \
                 {:.1} MB, theta {:.1} MB ({:.1}x its size), W {:.2} MB, R {:.1} MB ({:.1}x), \
                 writes {:.1} MB; scratch per task {:.1} MB",
                mb(t.reads[0]),
                mb(t.reads[1]),
                t.reads[1] as f64 / s[3].total_len() as f64,
                mb(t.reads[2]),
                mb(t.reads[3]),
                t.reads[3] as f64 / s[2].total_len() as f64,
                mb(t.written),
                mb(t.scratch)
            );
        }
        group.bench_function("tessera_dmrg_chain", |bch| {
            bch.iter(|| {
                runtime
                    .enter(|| fused_chain.apply(left, theta, w, right).unwrap())
                    .wait()
                    .unwrap()
            })
        });
        // The same chain with every step run as GEMMs on matrix forms (what a device runs):
        // the baseline of the operator step's one pass.
        let gemm_only = Arc::new(PlanCache::new().with_small_operand_min(usize::MAX));
        let gemm_steps = steps.clone().map(|s| s.with_cache(Arc::clone(&gemm_only)));
        group.bench_function("tessera_dmrg_layouts_gemm_only", |bch| {
            bch.iter(|| {
                runtime
                    .enter(|| apply_in_layouts(&operands, &gemm_steps))
                    .wait()
                    .unwrap()
            })
        });
        // The operator step alone, as the host plans it (one pass, no matrix forms) and as
        // GEMMs on matrix forms (permuted operand and product).
        let x = runtime.enter(|| steps[0].apply(&operands[0], &operands[3]).unwrap());
        x.wait().unwrap();
        let gemm_only = Arc::new(PlanCache::new().with_small_operand_min(usize::MAX));
        for (name, step) in [
            (
                "operator_step_small_operand",
                steps[1]
                    .clone()
                    .with_cache(Arc::new(PlanCache::new().with_small_operand_min(0))),
            ),
            ("operator_step_gemm", steps[1].clone().with_cache(gemm_only)),
        ] {
            group.bench_function(name, |bch| {
                bch.iter(|| {
                    runtime
                        .enter(|| step.apply(&x, &operands[1]).unwrap())
                        .wait()
                })
            });
        }
        let (net, arrays) = heff_network(&tensors, &chain);
        let order: Order = net.optimal().unwrap();
        group.throughput(Throughput::Elements(order.flops));
        group.bench_function("tessera_network_order", |bch| {
            bch.iter(|| {
                let (t, _) = runtime.enter(|| net.contract(&arrays, &order).unwrap());
                t.wait().unwrap();
            })
        });
        let mut dense = Dense::new(&runtime, flops);
        println!(
            "contract/heff/chi{chi}: dense baseline {}",
            dense.describe()
        );
        group.throughput(Throughput::Elements(dense.flops));
        group.bench_function("dense_faer_same_flops", |bch| {
            bch.iter(|| dense.run(&runtime))
        });
        group.finish();
        let id = format!("contract/heff/chi{chi}/paired");
        if paired::wanted(&id) {
            let p = paired::paired(
                Duration::from_secs(3),
                || {
                    runtime
                        .enter(|| fused_chain.apply(left, theta, w, right).unwrap())
                        .wait()
                        .unwrap()
                },
                || dense.run(&runtime),
            );
            // Speed, not time: the cube's flops are the chain's rounded to `2 n^3`.
            println!(
                "{id}: DMRG chain ({}) {:.3} ms, dense faer {:.3} ms, chain at {:.2} of the \
                 dense GEMM's speed (medians of {} pairs of alternating batches)",
                if fused { "fused" } else { "in turn" },
                p.a * 1e3,
                p.b * 1e3,
                p.ratio * flops as f64 / dense.flops as f64,
                p.pairs
            );
        }
    }
}

/// With the `cuda` feature, on CUDA device 0 (`contract/cuda/..`): the block GEMM of
/// `contract/block_gemm` with 16 blocks of 256 and 1024 (f64 and f32) and the H_eff chain of
/// `contract/heff` at chi 256 to 4096 (2048 and 4096: the chi 1024 sectors scaled), each
/// beside one dense cuBLAS GEMM of the same flops, all timed to the end of the device's work.
/// Skipped (with a line on stderr) without a driver or device.
#[cfg(feature = "cuda")]
fn on_the_device(c: &mut Criterion) {
    use tessera::backends::cuda::{CudaDevice, CudaScalar, MatLayout, Op};
    use tessera::blocks::DeviceArray;
    let dev = match CudaDevice::open(0) {
        Ok(dev) => Arc::new(dev),
        Err(e) => {
            eprintln!("contract/cuda skipped: {e}");
            return;
        }
    };
    let runtime = Runtime::new(2).unwrap();
    fn dense<T: CudaScalar>(dev: &CudaDevice, flops: u64) -> (impl FnMut() + '_, u64) {
        let n = ((flops as f64 / 2.0).cbrt().round() as usize).max(1);
        let a = dev.upload(&vec![T::from_f64(0.5); n * n]).unwrap();
        let b = dev.upload(&vec![T::from_f64(0.25); n * n]).unwrap();
        let mut out = dev.alloc_zeros::<T>(n * n).unwrap();
        let m = MatLayout::contiguous(n, n);
        let run = move || {
            dev.gemm(
                out.mat_mut(m),
                T::ZERO,
                a.mat(m),
                Op::Identity,
                b.mat(m),
                Op::Identity,
                T::ONE,
            )
            .unwrap();
            dev.synchronize().unwrap();
        };
        (run, 2 * (n as u64).pow(3))
    }
    fn block<T: CudaScalar + tessera::backends::Field>(
        c: &mut Criterion,
        runtime: &Runtime,
        dev: &Arc<CudaDevice>,
        d: usize,
    ) {
        let name = std::any::type_name::<T>();
        let v = Leg::new(Direction::In, (0..16).map(|q| (U1(q), d))).unwrap();
        let s = Arc::new(BlockStructure::new(vec![v.clone()], vec![v.dual()], U1(0)).unwrap());
        let a = AsyncArray::<T, U1>::random(Arc::clone(&s), 1)
            .to_device(dev)
            .unwrap();
        let b = AsyncArray::<T, U1>::random(Arc::clone(&s), 2)
            .to_device(dev)
            .unwrap();
        let mm = Contraction::new("ab,bc->ac").unwrap();
        let plan = mm.plan(&a, &b).unwrap();
        let out = DeviceArray::<T, U1>::zeros(Arc::clone(plan.output()), dev).unwrap();
        let mut group = c.benchmark_group(format!("contract/cuda/block_gemm/16x{d}_{name}"));
        group.sample_size(10);
        group.throughput(Throughput::Elements(plan.flops()));
        group.bench_function("tessera", |bch| {
            bch.iter(|| {
                runtime.enter(|| mm.apply_into(&a, &b, &out)).unwrap();
                out.wait().unwrap();
                dev.synchronize().unwrap();
            })
        });
        let (mut run, flops) = dense::<T>(dev, plan.flops());
        group.throughput(Throughput::Elements(flops));
        group.bench_function("dense_cublas_same_flops", |bch| bch.iter(&mut run));
        group.finish();
    }
    for d in [256, 1024] {
        block::<f64>(c, &runtime, &dev, d);
        block::<f32>(c, &runtime, &dev, d);
    }
    // The files' chi 256 to 1024, then chi 2048 and 4096 as the chi 1024 structures with
    // every virtual sector 2 and 4 times as large.
    for (file, scale) in [(256_usize, 1), (512, 1), (1024, 1), (1024, 2), (1024, 4)] {
        let chi = file * scale;
        let (tensors, chain) = load_heff(file, scale);
        let tensors: Vec<(String, Tensor<DeviceArray<f64, U1>>)> = tensors
            .into_iter()
            .map(|(n, t)| {
                let array = t.array.to_device(&dev).unwrap();
                (
                    n,
                    Tensor {
                        labels: t.labels,
                        array,
                    },
                )
            })
            .collect();
        let (_, flops, _) = runtime.enter(|| apply_heff(&tensors, &chain));
        let mut group = c.benchmark_group(format!("contract/cuda/heff/chi{chi}"));
        group.sample_size(10);
        group.throughput(Throughput::Elements(flops));
        group.bench_function("tessera", |bch| {
            bch.iter(|| {
                let (t, _, _) = runtime.enter(|| apply_heff(&tensors, &chain));
                t.wait().unwrap();
                dev.synchronize().unwrap();
            })
        });
        let (mut run, dflops) = dense::<f64>(&dev, flops);
        group.throughput(Throughput::Elements(dflops));
        group.bench_function("dense_cublas_same_flops", |bch| bch.iter(&mut run));
        group.finish();
    }
}

#[cfg(not(feature = "cuda"))]
fn on_the_device(_: &mut Criterion) {}

criterion_group!(
    benches,
    block_gemm,
    small_sectors,
    small_blocks,
    planning,
    plan_scaling,
    heff,
    on_the_device
);
criterion_main!(benches);
