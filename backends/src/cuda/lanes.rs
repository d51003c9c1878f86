//! Independent GEMMs side by side: the products of one call write disjoint C matrices, so they
//! are spread over a few side streams (lanes) forked from the device's stream and joined back
//! into it, and products too small to fill the GPU alone run at the same time.
//!
//! Owns: [`IndependentGemm`], [`CudaDevice::gemm_independent`] and a device's [`LaneSet`].
//!
//! Invariants:
//!
//! - A lane runs only the launches of one call at a time (the set's lock is held from the
//!   fork to the join), and each call's lanes wait for an event the device's stream recorded
//!   after everything enqueued before the call; the device's stream waits for an event of
//!   every lane used before anything enqueued after the call. Seen from the device's stream
//!   the call is one step, as any other call of this backend.
//! - The buffers' cudarc guards are taken on the device's stream before the fork (so the
//!   waits cudarc inserts for other streams come before it) and dropped after the join (so
//!   the events cudarc records mark the end of every lane's work). The lanes launch through
//!   raw pointers: cudarc's per-buffer events would otherwise order every lane after the
//!   one before it, which writes the same buffer.
//! - cuBLAS is called only after every product was checked as [`CudaDevice::gemm`] checks
//!   one (every batch member inside its buffer, sizes within cuBLAS's integers) and no two C
//!   matrices of the call share an element; otherwise nothing is enqueued.

use super::batched::{BatchBuffers, GemmEntry, check_disjoint};
use super::blas1::element;
use super::device::{CudaDevice, CudaScalar};
use super::gemm::{self, Op, Operand, StridedBatch};
use super::skinny::{SkinnyArgs, skinny_shape};
use super::{CudaError, cublas, driver};
use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream, DevicePtr, DevicePtrMut};
use std::sync::{Arc, Mutex, PoisonError};

/// Side streams one call spreads its products over, unless the device was opened with
/// another count ([`CudaDevice::with_lanes`]): enough for a few products of a few hundred
/// rows each to fill an H200's 132 SMs together, few enough that each lane's share stays
/// worth a launch.
pub const LANES: usize = 4;

/// One side stream and a cuBLAS handle bound to it (field order is drop order: the handle
/// before its stream).
#[derive(Debug)]
struct Lane {
    blas: CudaBlas,
    done: CudaEvent,
    stream: Arc<CudaStream>,
}

/// A device's lanes and the event its stream records at a fork, made on first use.
#[derive(Debug)]
pub(crate) struct LaneSet {
    /// How many lanes to make; 1 or less: none (every product on the device's stream).
    count: usize,
    inner: Mutex<Option<(CudaEvent, Vec<Lane>)>>,
}

impl Default for LaneSet {
    fn default() -> Self {
        Self {
            count: LANES,
            inner: Mutex::new(None),
        }
    }
}

/// One product, or a uniform strided batch of them, of a [`CudaDevice::gemm_independent`]
/// call: `C_i <- alpha * op_a(A_i) op_b(B_i) + beta * C_i` for the `batch.count` products
/// from `entry` on, `batch.stride_*` elements apart.
#[derive(Debug, Clone, Copy)]
pub struct IndependentGemm<T> {
    /// The first product's A, B and C.
    pub entry: GemmEntry,
    /// How many products and how far apart (a count of 1 for one product).
    pub batch: StridedBatch,
    /// What cuBLAS applies to every A.
    pub op_a: Op,
    /// What cuBLAS applies to every B.
    pub op_b: Op,
    /// Scales the products.
    pub alpha: T,
    /// Scales the old C (zero: C is not read).
    pub beta: T,
}

/// A checked product: cuBLAS's arguments, with offsets in place of pointers.
struct Checked<T> {
    cfg: cudarc::cublas::GemmConfig<T>,
    offsets: [usize; 3],
    strides: [i64; 3],
    count: i32,
    /// Its cost in flops, or in bytes moved (times 16, about an H200's FP64 flops per byte
    /// of bandwidth) where that is more.
    cost: u128,
    /// `Some(wide)`: a skinny product ([`skinny_shape`]), for the skinny kernels.
    skinny: Option<bool>,
}

/// Checks every product of a call against the buffers' lengths and that no two C matrices
/// share an element; returns the non-empty ones. Needs no device.
fn check_all<T: Copy>(
    lens: [usize; 3],
    gemms: &[IndependentGemm<T>],
) -> Result<Vec<Checked<T>>, CudaError> {
    let mut checked = Vec::with_capacity(gemms.len());
    let mut cs = Vec::new();
    for (k, g) in gemms.iter().enumerate() {
        let operand = |layout, op, len| Operand { layout, op, len };
        let c = gemm::check(
            g.batch,
            operand(g.entry.c, Op::Identity, lens[2]),
            g.beta,
            operand(g.entry.a, g.op_a, lens[0]),
            operand(g.entry.b, g.op_b, lens[1]),
            g.alpha,
        )?;
        if c.empty {
            continue;
        }
        cs.extend((0..g.batch.count).map(|i| {
            let layout = gemm::MatLayout {
                offset: g.entry.c.offset + i * g.batch.stride_c,
                ..g.entry.c
            };
            ((k, i), layout)
        }));
        let stride = |what, s| gemm::long(what, s);
        let cfg = c.cfg;
        let (m, n, k) = (g.entry.c.rows, g.entry.c.cols, g.entry.a.op_dims(g.op_a).1);
        let count = g.batch.count as u128;
        let flops = 2 * (m * n * k) as u128 * count;
        let bytes = (m * k + k * n + m * n) as u128 * count * size_of::<T>() as u128;
        let plain = g.batch.count == 1 && g.op_a == Op::Identity && g.op_b == Op::Identity;
        checked.push(Checked {
            offsets: [g.entry.a.offset, g.entry.b.offset, g.entry.c.offset],
            strides: [
                stride("A's batch stride", g.batch.stride_a)?,
                stride("B's batch stride", g.batch.stride_b)?,
                stride("C's batch stride", g.batch.stride_c)?,
            ],
            count: gemm::int("the batch count", g.batch.count)?,
            cost: flops.max(16 * bytes),
            skinny: plain.then(|| skinny_shape(m, n, k)).flatten(),
            cfg,
        });
    }
    check_disjoint(&cs)?;
    Ok(checked)
}

/// Which lane each product goes to: the costliest first, each to the lane with the least
/// work so far, so the lanes finish close together.
fn assign(costs: &[u128], lanes: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(costs[i]));
    let mut load = vec![0_u128; lanes];
    let mut lane_of = vec![0; costs.len()];
    for i in order {
        let lane = (0..lanes).min_by_key(|&l| load[l]).unwrap_or(0);
        load[lane] += costs[i];
        lane_of[i] = lane;
    }
    lane_of
}

impl CudaDevice {
    /// Every product of `gemms` (each a single GEMM or a uniform strided batch, from the
    /// three buffers of `bufs`), with no two writing one element of C, enqueued so that
    /// they may run at the same time: spread over up to [`LANES`] side streams forked from
    /// this device's stream and joined back into it (one product runs on the stream
    /// itself). Work enqueued on this device before the call runs before every product, and
    /// work enqueued after it, after all of them. Returns once enqueued.
    ///
    /// # Errors
    ///
    /// As [`CudaDevice::gemm_strided_batched`] for each product, and
    /// [`CudaError::OverlappingOutputs`] when two C matrices share an element: nothing is
    /// enqueued. The driver's or cuBLAS's error if a launch fails (the lanes are joined back
    /// all the same).
    pub fn gemm_independent<T: CudaScalar>(
        &self,
        bufs: BatchBuffers<'_, T>,
        gemms: &[IndependentGemm<T>],
    ) -> Result<(), CudaError> {
        self.check_batch_devices(&bufs)?;
        let checked = check_all([bufs.a.len(), bufs.b.len(), bufs.c.len()], gemms)?;
        if checked.is_empty() {
            return Ok(());
        }
        self.bind()?;
        let stream = self.stream();
        let (a_base, _a_read) = bufs.a.as_cuda_slice().device_ptr(stream);
        let (b_base, _b_read) = bufs.b.as_cuda_slice().device_ptr(stream);
        let (c_base, _c_write) = bufs.c.as_cuda_slice_mut().device_ptr_mut(stream);
        // The skinny kernels, where a product is skinny and NVRTC loads (else cuBLAS).
        let kernels = (checked.iter().any(|g| g.skinny.is_some()))
            .then(|| self.skinny_kernels().ok())
            .flatten();
        let launch = |handle, on: &CudaStream, g: &Checked<T>| {
            let [oa, ob, oc] = g.offsets;
            let cfg = &g.cfg;
            if let (Some(wide), Some(kernels)) = (g.skinny, kernels.as_deref()) {
                let args = SkinnyArgs {
                    a: element::<T>(a_base, oa),
                    b: element::<T>(b_base, ob),
                    c: element::<T>(c_base, oc),
                    cfg,
                    wide,
                };
                // SAFETY: as for cuBLAS below; `skinny_shape` accepted the dims (one
                // untransposed product), and `on` is this device's stream or a lane of it.
                return unsafe { self.launch_skinny(on, kernels, args) };
            }
            // SAFETY: `check_all` put every batch member of A, B and C inside its buffer
            // (leading dims at least the rows), kept all C matrices of the call apart, and
            // fitted every size to cuBLAS's integers; the buffers are on this device, whose
            // context is current, and C's is borrowed mutably, so it is neither A's nor B's.
            // The handle's stream is this device's or a lane that waits for it (module doc),
            // and the buffers stay allocated: their guards are dropped after the join, and a
            // free is ordered on this device's stream. Alpha and beta are host values read
            // during the call (host pointer mode).
            unsafe {
                (T::GEMM_STRIDED_RAW)(
                    handle,
                    cfg.transa,
                    cfg.transb,
                    cfg.m,
                    cfg.n,
                    cfg.k,
                    &cfg.alpha,
                    element::<T>(a_base, oa) as *const T,
                    cfg.lda,
                    g.strides[0],
                    element::<T>(b_base, ob) as *const T,
                    cfg.ldb,
                    g.strides[1],
                    &cfg.beta,
                    element::<T>(c_base, oc) as *mut T,
                    cfg.ldc,
                    g.strides[2],
                    g.count,
                )
            }
            .result()
            .map_err(cublas("run an independent GEMM"))
        };
        // Costliest first: each lane starts on its largest product, so the lanes end close
        // together (their shares are balanced by `assign`).
        let mut checked = checked;
        checked.sort_by_key(|g| std::cmp::Reverse(g.cost));
        if checked.len() == 1 || self.lanes.count <= 1 {
            let handle = *self.blas.handle();
            return checked.iter().try_for_each(|g| launch(handle, stream, g));
        }
        let mut guard = self
            .lanes
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if guard.is_none() {
            *guard = Some(self.make_lanes()?);
        }
        let (fork, lanes) = guard.as_ref().expect("made above");
        let used = lanes.len().min(checked.len());
        let costs: Vec<u128> = checked.iter().map(|g| g.cost).collect();
        let lane_of = assign(&costs, used);
        fork.record(stream).map_err(driver("record a fork"))?;
        let mut result = Ok(());
        let mut waited = 0;
        for lane in &lanes[..used] {
            match lane.stream.wait(fork) {
                Ok(()) => waited += 1,
                Err(e) => {
                    result = Err(driver("make a lane wait for the fork")(e));
                    break;
                }
            }
        }
        if result.is_ok() {
            for (g, &l) in checked.iter().zip(&lane_of) {
                result = launch(*lanes[l].blas.handle(), &lanes[l].stream, g);
                if result.is_err() {
                    break;
                }
            }
        }
        // Joined back whatever happened: nothing after the call may overtake a lane.
        for lane in &lanes[..waited] {
            let joined = lane
                .done
                .record(&lane.stream)
                .and_then(|()| stream.wait(&lane.done))
                .map_err(driver("join a lane"));
            if let (Ok(()), Err(e)) = (&result, joined) {
                result = Err(e);
            }
        }
        result
    }

    /// This device with `lanes` side streams for [`gemm_independent`](Self::gemm_independent)
    /// instead of [`LANES`] (1 or 0: none, every product on the device's stream). For
    /// measuring; the default suits current GPUs.
    pub fn with_lanes(mut self, lanes: usize) -> Self {
        self.lanes.count = lanes;
        self
    }

    /// The fork event and the lanes: as many side streams of this device as the set's count,
    /// each with a cuBLAS handle (host pointer mode, the default) and a join event.
    fn make_lanes(&self) -> Result<(CudaEvent, Vec<Lane>), CudaError> {
        let flags = Some(CUevent_flags::CU_EVENT_DISABLE_TIMING);
        let ctx = self.context();
        let fork = ctx
            .new_event(flags)
            .map_err(driver("create a fork event"))?;
        let lanes = (0..self.lanes.count)
            .map(|_| {
                let stream = ctx.new_stream().map_err(driver("create a lane"))?;
                Ok(Lane {
                    blas: CudaBlas::new(stream.clone())
                        .map_err(cublas("create a lane's handle"))?,
                    done: ctx
                        .new_event(flags)
                        .map_err(driver("create a join event"))?,
                    stream,
                })
            })
            .collect::<Result<_, CudaError>>()?;
        Ok((fork, lanes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::MatLayout;

    fn product(
        c_offset: usize,
        m: usize,
        n: usize,
        k: usize,
        count: usize,
    ) -> IndependentGemm<f64> {
        IndependentGemm {
            entry: GemmEntry {
                a: MatLayout::contiguous(m, k),
                b: MatLayout::contiguous(k, n),
                c: MatLayout {
                    offset: c_offset,
                    ..MatLayout::contiguous(m, n)
                },
            },
            batch: StridedBatch {
                count,
                stride_a: 0,
                stride_b: 0,
                stride_c: m * n,
            },
            op_a: Op::Identity,
            op_b: Op::Identity,
            alpha: 1.0,
            beta: 0.0,
        }
    }

    /// Runs everywhere: what a call checks before any launch.
    #[test]
    fn independent_gemms_are_checked_before_any_launch() {
        let lens = [64, 64, 100];
        // Two products side by side, one a batch of two; an empty one is left out.
        let ok = [
            product(0, 4, 4, 4, 2),
            product(32, 4, 4, 4, 1),
            product(48, 0, 4, 4, 1),
        ];
        let checked = check_all(lens, &ok).unwrap();
        assert_eq!(checked.len(), 2);
        assert_eq!(checked[0].count, 2);
        // 2 x 128 flops, 2 x 384 bytes (48 elements of 8 bytes): the bytes count.
        assert_eq!(checked[0].cost, 16 * 768);
        assert_eq!(checked[0].skinny, None);
        // A wide product: 4 rows, 4 inner, 8192 columns; not when transposed or batched.
        let wide = |op_b, count| IndependentGemm {
            op_b,
            batch: StridedBatch {
                count,
                ..product(0, 4, 8192, 4, 1).batch
            },
            ..product(0, 4, 8192, 4, 1)
        };
        let wide_lens = [16, 4 * 8192, 2 * 4 * 8192];
        let skinny = |g| check_all(wide_lens, &[g]).unwrap()[0].skinny;
        assert_eq!(skinny(wide(Op::Identity, 1)), Some(true));
        let mut transposed = wide(Op::Transpose, 1);
        transposed.entry.b = MatLayout::contiguous(8192, 4);
        assert_eq!(skinny(transposed), None);
        assert_eq!(skinny(wide(Op::Identity, 2)), None);
        assert_eq!(checked[1].offsets, [0, 0, 32]);
        // The batch's second C reaches the other product's C.
        let clash = [product(0, 4, 4, 4, 2), product(16, 4, 4, 4, 1)];
        assert!(matches!(
            check_all(lens, &clash),
            Err(CudaError::OverlappingOutputs { .. })
        ));
        // A C past its buffer's end.
        assert!(matches!(
            check_all(lens, &[product(90, 4, 4, 4, 1)]),
            Err(CudaError::OutOfBounds { operand: "C", .. })
        ));
    }

    /// Runs everywhere: the largest products go first, each to the least loaded lane.
    #[test]
    fn products_are_balanced_over_the_lanes() {
        assert_eq!(assign(&[8, 1, 1, 4, 4, 2], 2), [0, 1, 1, 1, 1, 0]);
        assert_eq!(assign(&[5, 5, 5], 4), [0, 1, 2]);
        assert_eq!(assign(&[], 4), Vec::<usize>::new());
    }
}
