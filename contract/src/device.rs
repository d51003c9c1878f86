//! Running a plan on a CUDA device (feature `cuda`).
//!
//! Owns: the [`Operand`] implementation of `DeviceArray` and the lowering of a [`Plan`] to
//! cuBLAS GEMM calls ([`gemm_calls`]). Invariants:
//!
//! - The lowering reads only the plan and the structures: every call's matrices are blocks
//!   (or dense coupled sectors) of `A'`, `B'` and the GEMMs' target, at the structure's
//!   offsets and leading dims, so the bounds the backend checks always hold.
//! - Each output block's calls are in the plan's pair order, the first with the starting
//!   `beta` and the rest accumulating (`beta = 1`), and they are launched in layers
//!   ([`layers`]: the `n`-th call into every output in layer `n`, batched by shape; a
//!   batch large enough to pay for its own launch ([`launches_alone`]) gets one, as a
//!   single GEMM, one strided-batched GEMM when evenly spaced, or a pointer-array batch;
//!   the small ones of a layer share one grouped GEMM where cuBLAS has it; a layer's
//!   single and strided launches run side by side on the device's lanes), so no launch
//!   writes a matrix twice and, each layer ending before the next starts on the stream,
//!   the sums are those of the CPU backend's tasks.
//! - Every temporary is allocated, and NVRTC probed when a permute is needed, before the
//!   first task is enrolled, so an error enrolls nothing.
//! - The work is enrolled as one task per step (operand permutes, the GEMMs on the composite
//!   of all blocks of `A'`, `B'` and the target, the output permute); each task enqueues on
//!   the device's stream and returns, so a contraction costs no host wait.

use crate::error::Error;
use crate::plan::Plan;
use hashbrown::HashMap;
use std::sync::Arc;
use tessera_backends::cuda::with_buffers;
use tessera_backends::cuda::{
    BatchBuffers, CudaScalar, GemmEntry, GemmGroup, IndependentGemm, LANES, MatLayout, Op,
    StridedBatch, probe_grouped,
};
use tessera_blocks::{AbelianSector, BlockStructure, DeviceArray};
use tessera_core::schedule_eager_named;

/// One cuBLAS GEMM of a lowered plan: `C <- alpha A B + beta C` on matrices of `A'`, `B'`
/// and the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GemmCall {
    pub(crate) a: MatLayout,
    pub(crate) b: MatLayout,
    pub(crate) c: MatLayout,
    /// Whether this call starts its output block (`beta` is the starting one) or adds to it.
    pub(crate) first: bool,
}

/// The plan's GEMMs as cuBLAS calls on `A'` (`am`), `B'` (`bm`) and the target (`cm`):
/// per output block its pairs in order, then one call per sector GEMM.
pub(crate) fn gemm_calls<S: AbelianSector>(
    plan: &Plan<S>,
    am: &BlockStructure<S>,
    bm: &BlockStructure<S>,
    cm: &BlockStructure<S>,
) -> Vec<GemmCall> {
    let [rows_a, rows_b] = plan.rows;
    let block = |s: &BlockStructure<S>, id: usize, rows: usize| {
        tessera_blocks::block_matrix(s, id, rows).expect("the plan's blocks exist")
    };
    let mut calls = Vec::with_capacity(plan.gemms());
    for group in &plan.groups {
        for (local, pairs) in &group.products {
            let c = block(cm, group.c[*local], cm.n_codomain());
            for (n, &(ia, ib)) in group.pairs[pairs.clone()].iter().enumerate() {
                calls.push(GemmCall {
                    a: block(am, group.a[ia], rows_a),
                    b: block(bm, group.b[ib], rows_b),
                    c,
                    first: n == 0,
                });
            }
        }
    }
    for g in &plan.sector_gemms {
        calls.push(GemmCall {
            a: tessera_blocks::sector_matrix(am, g.a),
            b: tessera_blocks::sector_matrix(bm, g.b),
            c: tessera_blocks::sector_matrix(cm, g.c),
            first: true,
        });
    }
    calls
}

/// One launch of a lowered plan: calls of one shape (dims and leading dims) and one starting
/// kind, as one pointer-array batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Batch {
    pub(crate) first: bool,
    pub(crate) entries: Vec<GemmEntry>,
}

/// The calls in layers (layer `n`: the `n`-th call into each output matrix, so no layer
/// writes one matrix twice and each matrix's calls keep their order across layers), each
/// layer split into batches of one shape and starting kind, in first-seen order.
pub(crate) fn layers(calls: &[GemmCall]) -> Vec<Vec<Batch>> {
    let mut seen: HashMap<usize, usize> = HashMap::new();
    let mut layers: Vec<Vec<Batch>> = Vec::new();
    for call in calls {
        let n = seen.entry(call.c.offset).or_insert(0);
        if layers.len() <= *n {
            layers.push(Vec::new());
        }
        let layer = &mut layers[*n];
        *n += 1;
        let shape = |e: &GemmEntry| [e.a, e.b, e.c].map(|m| (m.rows, m.cols, m.ld));
        let entry = GemmEntry {
            a: call.a,
            b: call.b,
            c: call.c,
        };
        match layer
            .iter_mut()
            .find(|b| b.first == call.first && shape(&b.entries[0]) == shape(&entry))
        {
            Some(batch) => batch.entries.push(entry),
            None => layer.push(Batch {
                first: call.first,
                entries: vec![entry],
            }),
        }
    }
    layers
}

/// A batch whose matrices lie at equal distances (A, B and C each: offsets in arithmetic
/// progression, increasing, the C matrices at least one extent apart), as one strided batch
/// from its first entry: cuBLAS's strided-batched GEMM then needs no pointer arrays. `None`
/// for a batch of one, or when the offsets do not progress so.
pub(crate) fn as_strided(entries: &[GemmEntry]) -> Option<StridedBatch> {
    let [first, second, ..] = entries else {
        return None;
    };
    let stride = |f: fn(&GemmEntry) -> usize| f(second).checked_sub(f(first));
    let (sa, sb, sc) = (
        stride(|e| e.a.offset)?,
        stride(|e| e.b.offset)?,
        stride(|e| e.c.offset)?,
    );
    let even = entries.iter().enumerate().all(|(i, e)| {
        e.a.offset == first.a.offset + i * sa
            && e.b.offset == first.b.offset + i * sb
            && e.c.offset == first.c.offset + i * sc
    });
    // cuBLAS's strided batch takes C matrices at least one extent apart; blocks stacked in
    // one sector (columns interleaved) are apart but closer: they go as pointer arrays.
    let apart = first.c.extent().is_some_and(|extent| sc >= extent);
    (even && apart).then_some(StridedBatch {
        count: entries.len(),
        stride_a: sa,
        stride_b: sb,
        stride_c: sc,
    })
}

/// Whether a batch is worth a launch of its own: about 5 µs of work or more on a current
/// GPU (2^28 flops, or 16 MiB of its matrices' elements: an H200 does FP64 matrix products
/// at about 50 TFLOP/s and moves about 3 TB/s), so a launch's few microseconds are noise
/// beside it and cuBLAS's kernel for exactly its shape pays. Grouped GEMM is for the small
/// ones. Measured on an H200: with every batch of a layer in one grouped call, the sector
/// GEMMs of a chi = 4096 H_eff ran at 30 to 40% of one dense GEMM's rate; launched alone
/// (and side by side on the lanes) they run at about 53 TFLOP/s, near dense cuBLAS.
pub(crate) fn launches_alone<T>(batch: &Batch) -> bool {
    const FLOPS: u128 = 1 << 28;
    const BYTES: u128 = 16 << 20;
    let Some(e) = batch.entries.first() else {
        return false;
    };
    let (m, n, k) = (e.c.rows as u128, e.c.cols as u128, e.a.cols as u128);
    let count = batch.entries.len() as u128;
    let flops = 2 * m * n * k * count;
    let bytes = (m * k + k * n + m * n) * count * size_of::<T>() as u128;
    flops >= FLOPS || bytes >= BYTES
}

/// One product, or a uniform strided batch of products, of an independent launch
/// (`first`: it starts its outputs, with the starting `beta`; else it accumulates, with
/// `beta = 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lone {
    pub(crate) first: bool,
    /// The first product.
    pub(crate) entry: GemmEntry,
    /// How many from `entry` on, how far apart (a count of 1 for one product).
    pub(crate) strided: StridedBatch,
}

/// One cuBLAS call of a lowered plan (`first` as for [`Lone`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Launch {
    /// Products of one layer that each take a launch of their own (one GEMM, or a strided
    /// batch when evenly spaced), side by side on the device's lanes
    /// ([`CudaDevice::gemm_independent`]).
    Independent(Vec<Lone>),
    /// One pointer-array batched GEMM.
    Batched(Batch),
    /// One grouped GEMM, a group per batch.
    Grouped(Vec<Batch>),
}

/// How many small batches may join a layer's large ones on the lanes, a launch each, rather
/// than share one grouped call (which runs before the lanes start).
const SHADOWED: usize = 4 * LANES;

/// The layers as launches, in stream order: per layer, its small batches in one grouped
/// call when `grouped` (cuBLAS has grouped GEMM) and there are several (unless at most
/// [`SHADOWED`] of them sit beside large ones), every other batch that is unevenly spaced in
/// a pointer-array batch of its own, and the rest (single products and strided batches) in
/// one independent launch, so that the layer's products run side by side. Within a layer
/// the order is free: no two of its calls write one matrix.
pub(crate) fn launches<T>(layers: Vec<Vec<Batch>>, grouped: bool) -> Vec<Launch> {
    let mut out = Vec::new();
    for layer in layers {
        let (alone, small): (Vec<Batch>, Vec<Batch>) =
            layer.into_iter().partition(launches_alone::<T>);
        // Beside large products on the lanes, a few small ones cost a launch each but run
        // in their shadow; many go in one grouped call.
        let shadowed = !alone.is_empty() && small.len() <= SHADOWED;
        let small = if grouped && small.len() > 1 && !shadowed {
            out.push(Launch::Grouped(small));
            Vec::new()
        } else {
            small
        };
        let mut lones = Vec::new();
        for batch in alone.into_iter().chain(small) {
            let first = batch.first;
            match (batch.entries.as_slice(), as_strided(&batch.entries)) {
                ([entry], _) => lones.push(Lone {
                    first,
                    entry: *entry,
                    strided: StridedBatch::ONE,
                }),
                ([entry, ..], Some(strided)) => lones.push(Lone {
                    first,
                    entry: *entry,
                    strided,
                }),
                _ => out.push(Launch::Batched(batch)),
            }
        }
        if !lones.is_empty() {
            out.push(Launch::Independent(lones));
        }
    }
    out
}

/// A batch as cuBLAS's group: real types, matrix forms (no op), the starting `beta` for a
/// batch of first calls and 1 for one that accumulates.
fn group_of<T: CudaScalar>(batch: &Batch, alpha: T, first_beta: T) -> GemmGroup<'_, T> {
    GemmGroup {
        op_a: Op::Identity,
        op_b: Op::Identity,
        alpha,
        beta: if batch.first { first_beta } else { T::ONE },
        entries: &batch.entries,
    }
}

/// The temporary for `x`'s matrix form on its device, when it is permuted (allocated only:
/// every allocation comes before the first task, so an error enrolls nothing).
fn matrix_temp<T: CudaScalar, S: AbelianSector>(
    plan: &Plan<S>,
    which: usize,
    x: &DeviceArray<T, S>,
) -> Result<Option<DeviceArray<T, S>>, Error> {
    match &plan.operands[which].permute {
        Some(_) => Ok(Some(DeviceArray::zeros(
            Arc::clone(&plan.operands[which].matrix),
            x.device(),
        )?)),
        None => Ok(None),
    }
}

/// Enrolls a plan's work on a device: `c <- alpha a b + beta c` (`fresh`: `c` is new,
/// written in full), through cuBLAS on `c`'s device's stream (see the module docs).
#[allow(clippy::too_many_arguments)]
pub(crate) fn submit<T: CudaScalar, S: AbelianSector>(
    plan: &Arc<Plan<S>>,
    alpha: T,
    a: &DeviceArray<T, S>,
    b: &DeviceArray<T, S>,
    beta: T,
    c: &DeviceArray<T, S>,
    fresh: bool,
) -> Result<(), Error> {
    let permutes =
        plan.operands.iter().any(|o| o.permute.is_some()) || plan.output_permute.is_some();
    if permutes {
        tessera_backends::cuda::probe_nvrtc().map_err(tessera_blocks::Error::from)?;
    }
    // Every temporary first: an allocation that fails enrolls nothing.
    let a_tmp = matrix_temp(plan, 0, a)?;
    let b_tmp = matrix_temp(plan, 1, b)?;
    let product_tmp = match &plan.output_permute {
        Some(_) => Some(DeviceArray::<T, S>::zeros(
            Arc::clone(&plan.product),
            c.device(),
        )?),
        None => None,
    };
    let moved = match product_tmp {
        Some(_) if !(fresh || beta == T::ZERO) => Some(DeviceArray::<T, S>::zeros(
            Arc::clone(plan.output()),
            c.device(),
        )?),
        _ => None,
    };
    for (which, x, tmp) in [(0, a, &a_tmp), (1, b, &b_tmp)] {
        if let (Some((perm, permuted)), Some(tmp)) = (&plan.operands[which].permute, tmp) {
            x.permute_into_with(permuted, perm, tmp)?;
        }
    }
    let am = a_tmp.as_ref().unwrap_or(a);
    let bm = b_tmp.as_ref().unwrap_or(b);
    let target = product_tmp.as_ref().unwrap_or(c);
    let overwrite = fresh || product_tmp.is_some() || beta == T::ZERO;
    let first_beta = if overwrite { T::ZERO } else { beta };
    // Real types only: conjugation is the identity, and every operand is already in
    // its matrix form, so no call transposes.
    // Small batches grouped where cuBLAS has grouped GEMM (12.5+).
    let launches = launches::<T>(
        layers(&gemm_calls(
            plan,
            am.structure(),
            bm.structure(),
            target.structure(),
        )),
        probe_grouped().is_ok(),
    );
    let all = |x: &DeviceArray<T, S>| x.region(&(0..x.num_blocks()).collect::<Vec<_>>());
    let out = all(target)?;
    let out = if overwrite {
        out.into_overwrite()
    } else {
        out.into_write()
    };
    let n = target.structure().n_codomain();
    let idle: Vec<MatLayout> = plan
        .idle
        .iter()
        .map(|&i| {
            tessera_blocks::block_matrix(target.structure(), i, n).expect("idle blocks exist")
        })
        .collect();
    let access = (all(am)?.into_read(), all(bm)?.into_read(), out);
    schedule_eager_named("device.contract", access, move |(xa, xb, xc)| {
        with_buffers(
            Some(xc.storage()),
            &[xa.storage(), xb.storage()],
            |dev, cbuf, srcs| {
                let cbuf = cbuf.expect("a write was given");
                let beta_of = |first: bool| if first { first_beta } else { T::ONE };
                for launch in &launches {
                    let bufs = BatchBuffers {
                        c: &mut *cbuf,
                        a: srcs[0],
                        b: srcs[1],
                    };
                    match launch {
                        Launch::Independent(lones) => {
                            let gemms: Vec<_> = lones
                                .iter()
                                .map(|l| IndependentGemm {
                                    entry: l.entry,
                                    batch: l.strided,
                                    op_a: Op::Identity,
                                    op_b: Op::Identity,
                                    alpha,
                                    beta: beta_of(l.first),
                                })
                                .collect();
                            dev.gemm_independent(bufs, &gemms)?
                        }
                        Launch::Batched(batch) => {
                            dev.gemm_batched(bufs, group_of(batch, alpha, first_beta))?
                        }
                        Launch::Grouped(batches) => {
                            let groups: Vec<_> = batches
                                .iter()
                                .map(|b| group_of(b, alpha, first_beta))
                                .collect();
                            dev.gemm_grouped(bufs, &groups)?
                        }
                    }
                }
                // Blocks no pair writes: zero where the GEMMs overwrite, else beta C.
                for layout in &idle {
                    if overwrite {
                        dev.zero(cbuf, *layout)?;
                    } else if beta != T::ONE {
                        // One call for a contiguous block, else one per column.
                        for run in layout.runs() {
                            let run = tessera_backends::cuda::VecLayout {
                                offset: run.start,
                                ..tessera_backends::cuda::VecLayout::contiguous(run.len())
                            };
                            dev.scal(beta, cbuf.vec_mut(run))?;
                        }
                    }
                }
                Ok(())
            },
        )?;
        Ok(())
    })?;
    if let (Some(product), Some((perm, permuted))) = (&product_tmp, &plan.output_permute) {
        match &moved {
            None => product.permute_into_with(permuted, perm, c)?,
            Some(moved) => {
                product.permute_into_with(permuted, perm, moved)?;
                if beta != T::ONE {
                    c.scale(beta);
                }
                c.axpy(T::ONE, moved)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Contraction, Spec};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use tessera_backends::cuda::may_overlap;
    use tessera_blocks::testing::{Kind, random_leg, random_mask};
    use tessera_blocks::{AsyncArray, Leg};

    /// The flat allocation of a host array (every element at its structure offset).
    fn flat<S: AbelianSector>(x: &AsyncArray<f64, S>) -> Vec<f64> {
        let s = x.structure();
        let mut out = vec![0.0; s.total_len()];
        for (block, values) in s.blocks().zip(x.to_blocks().unwrap()) {
            let strides: Vec<isize> = block.strides().iter().map(|&v| v as isize).collect();
            tessera_core::for_each_offset(block.shape(), &strides, |k, at| {
                out[block.offset() + at as usize] = values[k];
            });
        }
        out
    }

    /// The host array of `s` whose allocation is `data`.
    fn unflat<S: AbelianSector>(s: &Arc<BlockStructure<S>>, data: &[f64]) -> AsyncArray<f64, S> {
        let blocks: Vec<Vec<f64>> = s
            .blocks()
            .map(|block| {
                let mut v = vec![0.0; block.len()];
                let strides: Vec<isize> = block.strides().iter().map(|&x| x as isize).collect();
                tessera_core::for_each_offset(block.shape(), &strides, |k, at| {
                    v[k] = data[block.offset() + at as usize];
                });
                v
            })
            .collect();
        AsyncArray::from_blocks(Arc::clone(s), &blocks).unwrap()
    }

    /// `C <- alpha A B + (first ? 0 : C)` on flat allocations, by the definition.
    fn reference_gemm(c: &mut [f64], call: GemmCall, alpha: f64, a: &[f64], b: &[f64]) {
        let k = call.a.cols;
        assert_eq!(
            (call.a.rows, call.b.rows, call.b.cols),
            (call.c.rows, k, call.c.cols)
        );
        for j in 0..call.c.cols {
            for i in 0..call.c.rows {
                let at = call.c.offset + j * call.c.ld + i;
                let sum: f64 = (0..k)
                    .map(|p| {
                        a[call.a.offset + p * call.a.ld + i] * b[call.b.offset + j * call.b.ld + p]
                    })
                    .sum();
                c[at] = alpha * sum + if call.first { 0.0 } else { c[at] };
            }
        }
    }

    /// Operands that fit `spec`: a random leg per label, each contracted leg of B the dual
    /// of A's, random splits and a conserved flux, sometimes a random presence mask.
    fn operands<S: Kind>(spec: &Spec, rng: &mut ChaCha8Rng) -> Option<[Arc<BlockStructure<S>>; 2]> {
        let labels: Vec<(char, Leg<S>)> = spec
            .a()
            .iter()
            .map(|&c| (c, random_leg::<S>(rng)))
            .collect();
        let b_legs: Vec<Leg<S>> = spec
            .b()
            .iter()
            .map(|c| match labels.iter().find(|(l, _)| l == c) {
                Some((_, leg)) => leg.dual(),
                None => random_leg::<S>(rng),
            })
            .collect();
        let a_legs: Vec<Leg<S>> = labels.into_iter().map(|(_, l)| l).collect();
        let mut out = Vec::new();
        for legs in [a_legs, b_legs] {
            if legs.iter().any(|l| l.num_segments() == 0) {
                return None;
            }
            let flux = legs.iter().fold(S::trivial(), |acc, l| {
                let i = rng.gen_range(0..l.num_segments());
                acc.fuse_abelian(&l.effective_sector(i).unwrap())
            });
            let split = rng.gen_range(0..=legs.len());
            let mut s = BlockStructure::from_legs(legs, split, flux).ok()?;
            if rng.gen_bool(0.5) {
                s = s.with_present(&random_mask(rng, s.num_allowed())).ok()?;
            }
            out.push(Arc::new(s));
        }
        Some([out.remove(0), out.remove(0)])
    }

    /// The products one launch computes, as calls: a strided batch expanded from its first
    /// entry by its strides (so its entries are what cuBLAS will compute, not the batch's
    /// own list).
    fn products(launch: &Launch) -> Vec<GemmCall> {
        let call = |e: &GemmEntry, first: bool| GemmCall {
            a: e.a,
            b: e.b,
            c: e.c,
            first,
        };
        match launch {
            Launch::Independent(lones) => lones
                .iter()
                .flat_map(|l| {
                    (0..l.strided.count).map(move |i| {
                        let at = |m: MatLayout, stride: usize| MatLayout {
                            offset: m.offset + i * stride,
                            ..m
                        };
                        GemmCall {
                            a: at(l.entry.a, l.strided.stride_a),
                            b: at(l.entry.b, l.strided.stride_b),
                            c: at(l.entry.c, l.strided.stride_c),
                            first: l.first,
                        }
                    })
                })
                .collect(),
            Launch::Batched(batch) => batch.entries.iter().map(|e| call(e, batch.first)).collect(),
            Launch::Grouped(batches) => batches
                .iter()
                .flat_map(|b| b.entries.iter().map(|e| call(e, b.first)))
                .collect(),
        }
    }

    /// Large batches (by flops or by bytes, as a skinny MPO product is) launch alone; a
    /// batch of small blocks does not, however many layers it shares.
    #[test]
    fn large_batches_launch_alone() {
        let batch = |m: usize, k: usize, n: usize, count: usize| Batch {
            first: true,
            entries: (0..count)
                .map(|i| GemmEntry {
                    a: MatLayout::contiguous(m, k),
                    b: MatLayout::contiguous(k, n),
                    c: MatLayout {
                        offset: i * m * n,
                        ..MatLayout::contiguous(m, n)
                    },
                })
                .collect(),
        };
        assert!(launches_alone::<f64>(&batch(1024, 1024, 1024, 1)));
        assert!(launches_alone::<f64>(&batch(256, 256, 256, 16)));
        assert!(
            launches_alone::<f64>(&batch(4, 4, 1 << 20, 1)),
            "skinny: by bytes"
        );
        assert!(!launches_alone::<f64>(&batch(4, 4, 1 << 16, 1)));
        assert!(!launches_alone::<f32>(&batch(64, 64, 64, 32)));
        assert!(!launches_alone::<f64>(&batch(128, 128, 128, 1)));
        // A layer of one large product and some small single ones (C apart: distinct
        // offsets): a few join the large one on the lanes; many share a grouped call.
        let layer = |small: usize| {
            let mut l = vec![batch(1024, 1024, 1024, 1)];
            l.extend((0..small).map(|i| {
                let mut b = batch(8 + i, 8, 8, 1);
                b.entries[0].c.offset = (1 << 20) + 1024 * i;
                b
            }));
            l
        };
        let kinds = |small: usize| -> Vec<(char, usize)> {
            launches::<f64>(vec![layer(small)], true)
                .iter()
                .map(|l| match l {
                    Launch::Independent(lones) => ('i', lones.len()),
                    Launch::Grouped(batches) => ('g', batches.len()),
                    Launch::Batched(_) => ('b', 1),
                })
                .collect()
        };
        assert_eq!(kinds(3), [('i', 4)]);
        assert_eq!(kinds(SHADOWED), [('i', SHADOWED + 1)]);
        assert_eq!(kinds(SHADOWED + 1), [('g', SHADOWED + 1), ('i', 1)]);
    }

    /// Runs everywhere: the lowered calls, evaluated by a reference GEMM on the flat host
    /// allocations of `A'` and `B'` (made by the CPU backend's permutes, as the device makes
    /// them with its own), give the CPU backend's result: the layouts, leading dims, pair
    /// order and starting betas the device runs are right for every strategy.
    #[test]
    fn lowered_gemm_calls_reproduce_the_cpu_contraction() {
        fn run<S: Kind>(seed: u64) {
            let specs = [
                "ab,bc->ac",
                "abk,kc->acb",
                "abk,ck->ab|c",
                "kab,lkc->|bcal",
                "ak,k->a",
                "ab,ab->",
            ];
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let (mut cases, mut sectors, mut pairs, mut strided) = (0, 0, 0, 0);
            for n in 0..120 {
                let spec = Spec::parse(specs[n % specs.len()]).unwrap();
                let Some([sa, sb]) = operands::<S>(&spec, &mut rng) else {
                    continue;
                };
                let mm = Contraction::from_spec(spec.clone());
                let a = AsyncArray::<f64, S>::random(sa, rng.r#gen());
                let b = AsyncArray::<f64, S>::random(sb, rng.r#gen());
                let plan = mm.plan(&a, &b).unwrap();
                let want = mm.apply_scaled(1.5, &a, &b).unwrap().to_dense().unwrap();
                let am = crate::execute::matrix_form(&plan, 0, &a).unwrap();
                let bm = crate::execute::matrix_form(&plan, 1, &b).unwrap();
                let (am, bm) = (am.as_ref().unwrap_or(&a), bm.as_ref().unwrap_or(&b));
                let calls = gemm_calls(&plan, am.structure(), bm.structure(), &plan.product);
                let launched = layers(&calls);
                for batch in launched.iter().flatten() {
                    let first = batch.entries[0];
                    let same = |m: MatLayout, n: MatLayout| {
                        (m.rows, m.cols, m.ld) == (n.rows, n.cols, n.ld)
                    };
                    for e in &batch.entries {
                        assert!(same(e.a, first.a) && same(e.b, first.b) && same(e.c, first.c));
                    }
                }
                // Evaluated as launched, with grouped GEMM and without, each product of each
                // launch by the definition; NaN where nothing writes, so a call that reads
                // before its first write shows.
                let (fa, fb) = (flat(am), flat(bm));
                let results: Vec<Vec<f64>> = [false, true]
                    .into_iter()
                    .map(|grouped| {
                        let mut fc = vec![f64::NAN; plan.product.total_len()];
                        let mut count = 0;
                        for launch in launches::<f64>(launched.clone(), grouped) {
                            if let Launch::Grouped(batches) = &launch {
                                assert!(grouped && batches.len() > 1);
                            }
                            for call in products(&launch) {
                                reference_gemm(&mut fc, call, 1.5, &fa, &fb);
                                count += 1;
                            }
                        }
                        assert_eq!(count, calls.len(), "every call launched once");
                        fc
                    })
                    .collect();
                for batch in launched.iter().flatten() {
                    if let Some(st) = as_strided(&batch.entries) {
                        let e0 = batch.entries[0];
                        assert!(st.stride_c >= e0.c.extent().unwrap());
                        for (i, e) in batch.entries.iter().enumerate() {
                            assert_eq!(
                                (e.a.offset, e.b.offset, e.c.offset),
                                (
                                    e0.a.offset + i * st.stride_a,
                                    e0.b.offset + i * st.stride_b,
                                    e0.c.offset + i * st.stride_c
                                )
                            );
                        }
                        strided += 1;
                    }
                }
                for layer in &launched {
                    let mut outs: Vec<usize> = layer
                        .iter()
                        .flat_map(|b| b.entries.iter().map(|e| e.c.offset))
                        .collect();
                    let n = outs.len();
                    outs.sort_unstable();
                    outs.dedup();
                    assert_eq!(outs.len(), n, "a layer writes one matrix twice");
                    // What the batched and grouped GEMMs check before a launch.
                    let cs: Vec<MatLayout> = layer
                        .iter()
                        .flat_map(|b| b.entries.iter().map(|e| e.c))
                        .collect();
                    for (i, x) in cs.iter().enumerate() {
                        for y in &cs[..i] {
                            assert!(!may_overlap(x, y), "{x:?} and {y:?} in one layer");
                        }
                    }
                }
                assert_eq!(
                    launched
                        .iter()
                        .flatten()
                        .map(|b| b.entries.len())
                        .sum::<usize>(),
                    calls.len()
                );
                for mut fc in results {
                    let n_rows = plan.product.n_codomain();
                    for &i in &plan.idle {
                        let m = tessera_blocks::block_matrix(&plan.product, i, n_rows).unwrap();
                        for j in 0..m.cols {
                            fc[m.offset + j * m.ld..][..m.rows].fill(0.0);
                        }
                    }
                    let product = unflat(&plan.product, &fc);
                    let got = match &plan.output_permute {
                        Some((perm, permuted)) => {
                            let out = AsyncArray::empty(Arc::clone(plan.output()));
                            product.permute_into_with(permuted, perm, &out).unwrap();
                            out
                        }
                        None => product,
                    }
                    .to_dense()
                    .unwrap();
                    let scale = want.iter().fold(1.0_f64, |m, x| m.max(x.abs()));
                    for (x, y) in got.iter().zip(&want) {
                        assert!(
                            (x - y).abs() <= 1e-12 * scale,
                            "{spec} case {n}: {x} vs {y}\n{plan}"
                        );
                    }
                }
                cases += 1;
                sectors += usize::from(plan.sector_gemms() > 0);
                pairs += usize::from(plan.gemms() > plan.sector_gemms());
            }
            assert!(
                cases > 60 && sectors > 5 && pairs > 2,
                "{}: {cases} cases, {sectors} with sector GEMMs, {pairs} with pairs ({strided} \
                 strided batches)",
                std::any::type_name::<S>()
            );
        }
        tessera_blocks::for_each_kind!(run);
    }

    /// Runs everywhere: one block per sector, sectors of one size (the block-GEMM benchmark's
    /// shape) is one strided-batched call; sizes that differ are one batch per size, strided
    /// only where that size's sectors lie evenly. strided
    /// only where that size's sectors lie evenly.
    #[test]
    fn uniform_sectors_lower_to_one_strided_batch() {
        use tessera_blocks::{Direction, U1};
        let lower = |dims: &[usize]| {
            let v = Leg::new(
                Direction::In,
                dims.iter().enumerate().map(|(q, &d)| (U1(q as i32), d)),
            )
            .unwrap();
            let s = BlockStructure::new(vec![v.clone()], vec![v.dual()], U1(0)).unwrap();
            let a = AsyncArray::<f64, U1>::zeros(s);
            let plan = Contraction::new("ab,bc->ac").unwrap().plan(&a, &a).unwrap();
            layers(&gemm_calls(
                &plan,
                a.structure(),
                a.structure(),
                &plan.product,
            ))
        };
        let uniform = lower(&[4; 16]);
        assert_eq!((uniform.len(), uniform[0].len()), (1, 1));
        for grouped in [false, true] {
            let launched = launches::<f64>(uniform.clone(), grouped);
            assert!(
                matches!(&launched[..], [Launch::Independent(l)] if l.len() == 1 && l[0].strided.count == 16)
            );
        }
        assert_eq!(
            as_strided(&uniform[0][0].entries),
            Some(StridedBatch {
                count: 16,
                stride_a: 16,
                stride_b: 16,
                stride_c: 16
            })
        );
        // Sectors of 16, 25, 16, 16 elements: the 4 x 4 ones at offsets 0, 41, 57.
        let mixed = lower(&[4, 5, 4, 4]);
        assert_eq!((mixed.len(), mixed[0].len()), (1, 2));
        let counts: Vec<usize> = mixed[0].iter().map(|b| b.entries.len()).collect();
        assert_eq!(counts, [3, 1]);
        assert!(mixed[0].iter().all(|b| as_strided(&b.entries).is_none()));
        let even = lower(&[4, 5, 4, 5, 4]);
        let first = as_strided(&even[0][0].entries).map(|b| (b.count, b.stride_c));
        assert_eq!(first, Some((3, 41)));
    }
}
