//! The scheduler: a worker pool that runs tasks when the epochs they wait for are reached.
//!
//! Owns: [`Runtime`], the `Job` a ready node carries, task execution, host waits and the
//! public [`schedule`] entry points. Invariants:
//!
//! - A task is enrolled on the caller's thread, at the call, in program order; it runs on a
//!   worker once its pending count reaches zero. An eager task (an enqueue-only kernel) that
//!   is ready at enrollment runs on the caller's thread instead, before the outermost eager
//!   call on that thread returns (see *Eager tasks never nest* below), and hands every
//!   successor it releases to the workers. A sequential task (a kernel that
//!   starts no parallel work) that is queued, not yet taken by a worker, when a host waits
//!   for it directly (it is among the last predecessors of the host's access) runs on that
//!   host's thread instead; the queued node is taken once, under its lock, by the worker or
//!   the host, whichever comes first.
//! - A worker never blocks on another task: kernels run to completion, a ready successor is
//!   either continued inline (one, on the same runtime) or spawned, and host waits are
//!   refused inside a task with [`Error::WaitInsideTask`].
//! - A failed kernel (error or panic) poisons every record it was to write; a task that reads
//!   a poisoned record skips its kernel and poisons its outputs with the same origin; an
//!   overwrite that succeeds clears the poison of what it wrote.
//! - A job's buffers (and so the owner tokens of the storage it touches) are dropped after its
//!   outputs are published and before its successors are released.
//! - A deferred job (`Body::Defer`, see `deferred`) is *started* where a kernel would run,
//!   even on poisoned inputs; it completes later, on whatever thread completes its
//!   `Completion`, with the same publish-then-drop-then-release order. Until then the
//!   worker that started it has moved on, and its successors wait.
//!
//! # Eager tasks never nest
//!
//! An eager kernel may itself schedule an eager task that is ready at once (a launch that
//! enqueues the next launch). Run where it is scheduled, it would run inside the kernel
//! that scheduled it, one stack frame deeper per level: 10^5 levels from the host
//! overflowed the stack and aborted. Instead each thread has a trampoline: the first eager
//! task run on a thread starts a loop (`run_here`) that owns a thread-local queue; an eager
//! task made ready on that thread while the loop runs (by a kernel the loop is running) is
//! pushed on the queue and the call returns at once; the loop runs the queued tasks in the
//! order they were scheduled, each after the kernel before it has returned, and returns
//! when the queue is empty. So nested eager work runs on one frame whatever its depth
//! (10^6 levels are tested), and still before the outermost eager call returns; only a
//! *nested* eager task now runs after the kernel that scheduled it rather than inside it,
//! which no kernel can observe (it cannot wait for a task). Successors that an eager task
//! releases are never run inline: they are handed to the workers, so they cannot nest
//! either. Should the loop unwind (a kernel panic is caught before it, so only a bug
//! could), the tasks still queued are handed to the workers rather than lost.
//!
//! # Why dependency-counted continuations
//!
//! The alternative, futures polled by an executor, costs a waker, a poll and a wake-up per
//! dependency and per task. A continuation costs one atomic decrement per edge and one
//! spawn per ready task (none when it is continued inline), which is what the
//! empty-task figure in `benches/empty_task_overhead.rs` measures, and the code reads as the
//! rule it implements: a node runs when its predecessors are done.

use crate::access::{Access, AccessList};
use crate::deferred::Deferred;
use crate::enroll::enroll;
use crate::error::{Error, FailureCause, KernelError, Result, TaskFailure, TaskId};
use crate::primitive::{Arc, Latch};
use crate::task::{TaskNode, Work};
use crate::trace::{Recorder, Trace};
use crossbeam_queue::SegQueue;
use smallvec::SmallVec;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

type Kernel = Box<dyn FnOnce() -> std::result::Result<(), FailureCause> + Send>;

/// What a job does once it is ready.
pub(crate) enum Body {
    /// Runs a kernel to completion; the task completes when it returns.
    Run(Kernel),
    /// Starts work that completes later, elsewhere: the task completes when the
    /// [`Deferred`] handed over is completed or dropped (see `deferred`).
    Defer(Box<dyn FnOnce(Deferred) + Send>),
}

/// A ready-to-run kernel with its runtime and its declared accesses.
pub(crate) struct Job {
    runtime: std::sync::Arc<Inner>,
    name: &'static str,
    accesses: AccessList,
    kernel: Body,
    /// The kernel runs sequentially and starts no parallel work, so a waiting host may run
    /// it on its own thread (see [`Runtime::schedule_sequential_named`]).
    sequential: bool,
}

/// How a task is handed over once it is ready.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// To a worker.
    Worker,
    /// On the enrolling thread when ready at enrollment, else to a worker.
    Eager,
    /// To a worker, or to a host that waits for it and finds it still queued.
    Sequential,
}

struct Inner {
    pool: rayon::ThreadPool,
    threads: usize,
    /// Ready nodes whose jobs are queued (the job stays in the node: a waiting host may
    /// claim it first), drained by at most `threads` drainer jobs on the pool.
    ready: SegQueue<Arc<TaskNode>>,
    /// How many drainers are running (or spawned and about to run).
    drainers: AtomicUsize,
    /// The task timeline, when recording.
    trace: Recorder,
}

impl Inner {
    /// Queues a ready job and makes sure a drainer will run it.
    ///
    /// Why a queue and drainers rather than one pool spawn per task: a spawn from the host
    /// allocates and, when the workers are parked, wakes one with a system call; a running
    /// drainer picks the next job up with one lock-free pop. The queue never delays a job:
    /// either a drainer is running (and pops it), or this call spawns one.
    fn inject(self: &std::sync::Arc<Self>, node: Arc<TaskNode>) {
        self.ready.push(node);
        // SeqCst pairs with the fence in `drain`: either this load sees the drainer's
        // decrement (and spawns), or that drainer's emptiness check sees this push.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.spawn_drainer();
    }

    /// Spawns a drainer if fewer than `threads` are running.
    fn spawn_drainer(self: &std::sync::Arc<Self>) {
        let mut running = self.drainers.load(Ordering::SeqCst);
        while running < self.threads {
            match self.drainers.compare_exchange_weak(
                running,
                running + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    let inner = std::sync::Arc::clone(self);
                    self.pool.spawn(move || inner.drain());
                    return;
                }
                Err(now) => running = now,
            }
        }
    }

    /// Runs ready jobs until the queue is empty, then retires.
    fn drain(self: std::sync::Arc<Self>) {
        loop {
            while let Some(node) = self.ready.pop() {
                // `None`: a host waiting for the node ran it.
                if let Some(Work::Job(job)) = node.take_queued(|_| true) {
                    execute(node, job);
                }
            }
            self.drainers.fetch_sub(1, Ordering::SeqCst);
            std::sync::atomic::fence(Ordering::SeqCst);
            // A push may have seen all drainers running just before this one retired.
            if self.ready.is_empty() {
                return;
            }
            let running = self.drainers.load(Ordering::SeqCst);
            if running >= self.threads
                || self
                    .drainers
                    .compare_exchange(running, running + 1, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
            {
                return; // another drainer runs, or a pusher is spawning one
            }
        }
    }
}

/// A worker pool that runs scheduled tasks.
///
/// Cloning a `Runtime` shares the pool. [`Runtime::global`] is the default, created on first
/// use with one worker per core; [`Runtime::enter`] makes another one the default for a
/// scope, explicitly.
#[derive(Clone)]
pub struct Runtime {
    inner: std::sync::Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("threads", &self.inner.threads)
            .finish()
    }
}

thread_local! {
    /// The task whose kernel this thread is running, if any.
    static CURRENT_TASK: Cell<Option<TaskId>> = const { Cell::new(None) };
    /// Whether this thread is a worker of some runtime's pool (a host wait here could park
    /// the very worker the awaited task needs).
    static ON_WORKER: Cell<bool> = const { Cell::new(false) };
    /// The runtime made current by [`Runtime::enter`], or by running one of its tasks.
    static CURRENT_RUNTIME: RefCell<Option<Runtime>> = const { RefCell::new(None) };
    /// The eager trampoline's queue: `Some` while a `run_here` loop runs on this thread,
    /// holding the ready eager tasks it has yet to run (see *Eager tasks never nest*).
    static EAGER_QUEUE: RefCell<Option<VecDeque<Arc<TaskNode>>>> = const { RefCell::new(None) };
}

static NEXT_TASK: AtomicU64 = AtomicU64::new(0);
static GLOBAL: OnceLock<Runtime> = OnceLock::new();

fn next_task_id() -> TaskId {
    TaskId(NEXT_TASK.fetch_add(1, Ordering::Relaxed))
}

/// Restores the previous current runtime when dropped.
struct EnterGuard {
    previous: Option<Runtime>,
}

impl EnterGuard {
    fn new(runtime: Runtime) -> Self {
        let previous = CURRENT_RUNTIME.with(|c| c.replace(Some(runtime)));
        Self { previous }
    }
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT_RUNTIME.with(|c| *c.borrow_mut() = previous);
    }
}

impl Runtime {
    /// A runtime with `threads` workers (at least one).
    pub fn new(threads: usize) -> Result<Self> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("tessera-worker-{i}"))
            .start_handler(|_| ON_WORKER.with(|w| w.set(true)))
            .build()
            .map_err(|e| Error::Runtime {
                threads,
                message: e.to_string(),
            })?;
        Ok(Self {
            inner: std::sync::Arc::new(Inner {
                pool,
                threads,
                ready: SegQueue::new(),
                drainers: AtomicUsize::new(0),
                trace: Recorder::default(),
            }),
        })
    }

    /// The process-wide default runtime, with one worker per available core.
    pub fn global() -> &'static Runtime {
        GLOBAL.get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            Runtime::new(threads).expect("the default runtime's thread pool could not start")
        })
    }

    /// The runtime that free functions use here: the one entered with [`Runtime::enter`] or
    /// running the current task, else [`Runtime::global`].
    pub fn current() -> Runtime {
        CURRENT_RUNTIME
            .with(|c| c.borrow().clone())
            .unwrap_or_else(|| Runtime::global().clone())
    }

    /// Runs `f` with `self` as the current runtime of this thread.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = EnterGuard::new(self.clone());
        f()
    }

    /// Starts recording the task timeline (discarding any earlier recording). Off by default;
    /// when off it costs one relaxed load per task.
    pub fn start_trace(&self) {
        self.inner.trace.start();
    }

    /// Stops recording and returns the timeline of the tasks that ran meanwhile.
    pub fn stop_trace(&self) -> Trace {
        self.inner.trace.stop()
    }

    /// How many workers the pool has.
    pub fn threads(&self) -> usize {
        self.inner.threads
    }

    /// Runs `f` inside the worker pool, so that rayon (and faer's rayon parallelism) called
    /// from `f` uses these workers.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.inner.pool.install(f)
    }

    /// Schedules `kernel` over the views of `access`, named `"task"`. See [`schedule`].
    pub fn schedule<A, F>(&self, access: A, kernel: F) -> Result<TaskId>
    where
        A: Access,
        F: for<'a> FnOnce(A::View<'a>) -> std::result::Result<(), KernelError> + Send + 'static,
    {
        self.schedule_named("task", access, kernel)
    }

    /// Schedules `kernel` over the views of `access` under `name` (which errors and traces
    /// carry). Returns once the task is enrolled; it runs when the epochs it waits for are
    /// reached.
    pub fn schedule_named<A, F>(&self, name: &'static str, access: A, kernel: F) -> Result<TaskId>
    where
        A: Access,
        F: for<'a> FnOnce(A::View<'a>) -> std::result::Result<(), KernelError> + Send + 'static,
    {
        self.submit(name, access, kernel, Placement::Worker)
    }

    /// Like [`schedule_named`](Self::schedule_named), for a kernel that only *enqueues* work
    /// (a device launch: microseconds on the host): if the task waits for nothing when it is
    /// enrolled, its kernel runs here, on the calling thread, before this returns; otherwise
    /// it runs on a worker like any task. Program order, poisoning and the successors it
    /// releases are as for any task. Called from an eager kernel running on this thread, the
    /// ready task runs on this thread too, once that kernel has returned (and before the
    /// outermost eager call returns): eager tasks that schedule eager tasks never nest on
    /// the stack, whatever the depth (the module docs say how).
    ///
    /// Why: handing a ready task to a worker costs a queue push, a futex wake and, for the
    /// host that then waits for it, a park and a wake; for a kernel that only enqueues a
    /// device launch that hand-off is most of the task's latency. A kernel that blocks (a
    /// copy to the host, a reduction that waits for the device) must not be scheduled
    /// eagerly: the caller would wait for it.
    ///
    /// # Errors
    ///
    /// As [`schedule`].
    pub fn schedule_eager_named<A, F>(
        &self,
        name: &'static str,
        access: A,
        kernel: F,
    ) -> Result<TaskId>
    where
        A: Access,
        F: for<'a> FnOnce(A::View<'a>) -> std::result::Result<(), KernelError> + Send + 'static,
    {
        self.submit(name, access, kernel, Placement::Eager)
    }

    /// Like [`schedule_named`](Self::schedule_named), for a kernel that runs sequentially
    /// and starts no parallel work of its own (no rayon, no faer parallelism): a host that
    /// waits for the task ([`host`], a value's `get`, an array's `wait`) and finds it still
    /// queued, not yet started by a worker, runs it on its own thread instead of sleeping.
    ///
    /// Why: a host that waits has a core and nothing to do with it, and the workers it woke
    /// may not have started yet; running what it waits for removes a worker's wake-up and
    /// the host's own from the critical path. A kernel that parallelises inside must not be
    /// scheduled so: run on the host thread, its rayon work would go to rayon's global pool,
    /// not to this runtime's workers.
    ///
    /// # Errors
    ///
    /// As [`schedule`].
    pub fn schedule_sequential_named<A, F>(
        &self,
        name: &'static str,
        access: A,
        kernel: F,
    ) -> Result<TaskId>
    where
        A: Access,
        F: for<'a> FnOnce(A::View<'a>) -> std::result::Result<(), KernelError> + Send + 'static,
    {
        self.submit(name, access, kernel, Placement::Sequential)
    }

    /// Enrolls a task and, once it is ready, hands it over as `placement` says.
    fn submit<A, F>(
        &self,
        name: &'static str,
        access: A,
        kernel: F,
        placement: Placement,
    ) -> Result<TaskId>
    where
        A: Access,
        F: for<'a> FnOnce(A::View<'a>) -> std::result::Result<(), KernelError> + Send + 'static,
    {
        let (node, accesses) = self.enroll_access(&access)?;
        let id = node.id();
        let mut access = access;
        let kernel: Kernel = Box::new(move || {
            // SAFETY: this closure runs only from `run_job`, after the node became ready,
            // that is after every epoch declared by `access` was reached; the views live
            // only for the kernel call.
            let views = unsafe { access.resolve() }.map_err(FailureCause::Resolve)?;
            kernel(views).map_err(FailureCause::Error)
        });
        self.attach_and_release(node, name, accesses, Body::Run(kernel), placement);
        Ok(id)
    }

    /// Enrolls a new task node on the records `access` declares, holding its submission
    /// guard. Nothing is enrolled on error.
    pub(crate) fn enroll_access<A: Access>(
        &self,
        access: &A,
    ) -> Result<(Arc<TaskNode>, AccessList)> {
        let mut accesses = AccessList::new();
        access.declare(&mut accesses);
        accesses.normalize()?;
        let node = TaskNode::new(next_task_id());
        enroll(&node, &accesses);
        Ok((node, accesses))
    }

    /// Attaches a job to an enrolled node, drops its submission guard, and hands it over as
    /// `placement` says if that made it ready.
    pub(crate) fn attach_and_release(
        &self,
        node: Arc<TaskNode>,
        name: &'static str,
        accesses: AccessList,
        kernel: Body,
        placement: Placement,
    ) {
        node.attach(Work::Job(Job {
            runtime: std::sync::Arc::clone(&self.inner),
            name,
            accesses,
            kernel,
            sequential: placement == Placement::Sequential,
        }));
        if let Some(ready) = TaskNode::finish_enrollment(node) {
            if placement == Placement::Eager {
                run_here(ready);
            } else {
                dispatch(ready);
            }
        }
    }
}

/// Schedules `kernel` over the views of `access` on the [current](Runtime::current) runtime.
///
/// The accesses are enrolled here, on the caller's thread, in one step: the task waits for
/// the last write of every record it reads and for every earlier access of every record it
/// writes. The kernel sees plain views (`&T`, `&mut T`, strided block views) and returns
/// `Ok(())` or an error; an error or a panic poisons what the task was to write.
///
/// # Errors
///
/// [`Error::Alias`] if an output shares a hazard record with another access of the task;
/// nothing is enrolled then.
///
/// ```
/// use tessera_core::{Async, schedule};
///
/// let a = Async::new(20.0_f64);
/// let b = Async::new(0.0_f64);
/// schedule((a.read(), b.write()), |(a, b)| {
///     *b = *a * 2.0 + 2.0;
///     Ok(())
/// })?;
/// assert_eq!(b.get()?, 42.0);
/// # Ok::<(), tessera_core::Error>(())
/// ```
pub fn schedule<A, F>(access: A, kernel: F) -> Result<TaskId>
where
    A: Access,
    F: for<'a> FnOnce(A::View<'a>) -> std::result::Result<(), KernelError> + Send + 'static,
{
    Runtime::current().schedule(access, kernel)
}

/// Like [`schedule`], with the name the task timeline shows for it (see
/// [`Runtime::start_trace`]).
///
/// # Errors
///
/// As [`schedule`].
pub fn schedule_named<A, F>(name: &'static str, access: A, kernel: F) -> Result<TaskId>
where
    A: Access,
    F: for<'a> FnOnce(A::View<'a>) -> std::result::Result<(), KernelError> + Send + 'static,
{
    Runtime::current().schedule_named(name, access, kernel)
}

/// [`Runtime::schedule_eager_named`] on the [current](Runtime::current) runtime: a kernel
/// that only enqueues work runs on the calling thread when its task waits for nothing.
///
/// ```
/// use tessera_core::{Async, schedule_eager_named};
///
/// let a = Async::new(20.0_f64);
/// let b = Async::new(0.0_f64);
/// let caller = std::thread::current().id();
/// let here = Async::new(false);
/// schedule_eager_named("double", (a.read(), b.write(), here.overwrite()), move |(a, b, h)| {
///     *b = *a * 2.0 + 2.0;
///     *h = std::thread::current().id() == caller;
///     Ok(())
/// })?;
/// assert_eq!(b.get()?, 42.0);
/// assert!(here.get()?, "nothing to wait for: it ran on the caller's thread");
/// # Ok::<(), tessera_core::Error>(())
/// ```
///
/// # Errors
///
/// As [`schedule`].
pub fn schedule_eager_named<A, F>(name: &'static str, access: A, kernel: F) -> Result<TaskId>
where
    A: Access,
    F: for<'a> FnOnce(A::View<'a>) -> std::result::Result<(), KernelError> + Send + 'static,
{
    Runtime::current().schedule_eager_named(name, access, kernel)
}

/// [`Runtime::schedule_sequential_named`] on the [current](Runtime::current) runtime: a
/// kernel that runs sequentially, which a host waiting for it may run itself.
///
/// ```
/// use tessera_core::{Async, schedule_sequential_named};
///
/// let a = Async::new(20.0_f64);
/// let b = Async::new(0.0_f64);
/// schedule_sequential_named("double", (a.read(), b.write()), |(a, b)| {
///     *b = *a * 2.0 + 2.0;
///     Ok(())
/// })?;
/// assert_eq!(b.get()?, 42.0);
/// # Ok::<(), tessera_core::Error>(())
/// ```
///
/// # Errors
///
/// As [`schedule`].
pub fn schedule_sequential_named<A, F>(name: &'static str, access: A, kernel: F) -> Result<TaskId>
where
    A: Access,
    F: for<'a> FnOnce(A::View<'a>) -> std::result::Result<(), KernelError> + Send + 'static,
{
    Runtime::current().schedule_sequential_named(name, access, kernel)
}

/// [`schedule_sequential_named`] where `sequential` (the kernel runs sequentially and starts
/// no parallel work: the caller knows its work is too small to), else [`schedule_named`].
///
/// ```
/// use tessera_core::{Async, schedule_sequential_if};
///
/// let n = 1000_usize;
/// let sum = Async::new(0_usize);
/// schedule_sequential_if(n < 1 << 18, "sum", sum.write(), move |s| {
///     *s = (0..n).sum();
///     Ok(())
/// })?;
/// assert_eq!(sum.get()?, 499_500);
/// # Ok::<(), tessera_core::Error>(())
/// ```
///
/// # Errors
///
/// As [`schedule`].
pub fn schedule_sequential_if<A, F>(
    sequential: bool,
    name: &'static str,
    access: A,
    kernel: F,
) -> Result<TaskId>
where
    A: Access,
    F: for<'a> FnOnce(A::View<'a>) -> std::result::Result<(), KernelError> + Send + 'static,
{
    if sequential {
        schedule_sequential_named(name, access, kernel)
    } else {
        schedule_named(name, access, kernel)
    }
}

/// Hands a ready node to whoever runs it: its runtime's ready queue for a job (the job stays
/// in the node), the host for a wait.
fn dispatch(node: Arc<TaskNode>) {
    let mut runtime = None;
    let taken = node.queue_or_take(|work| match work {
        Work::Job(job) => {
            runtime = Some(std::sync::Arc::clone(&job.runtime));
            true
        }
        Work::Wake(_) => false,
    });
    match (runtime, taken) {
        (Some(runtime), _) => runtime.inject(node),
        (None, Some(Work::Wake(latch))) => latch.set(),
        _ => debug_assert!(false, "{} dispatched twice", node.id()),
    }
}

type Ready = SmallVec<[Arc<TaskNode>; 4]>;

/// Runs a ready eager task on this thread, then dispatches every successor it made ready:
/// none is continued here, since this may be the host thread, which must return to the
/// program. Inside a kernel run by an eager loop on this thread, the task is queued for that
/// loop instead; otherwise this call is the loop (see *Eager tasks never nest*).
fn run_here(node: Arc<TaskNode>) {
    let first = EAGER_QUEUE.with(|q| {
        let mut q = q.borrow_mut();
        match q.as_mut() {
            Some(queue) => {
                queue.push_back(node);
                None
            }
            None => {
                *q = Some(VecDeque::new());
                Some(node)
            }
        }
    });
    let Some(mut node) = first else {
        return; // the loop below, further up this thread's stack, runs it
    };
    let _queue = EagerLoop;
    loop {
        let Some(Work::Job(job)) = node.take_work() else {
            unreachable!("{} is a task made ready by its enrollment", node.id());
        };
        run_job_here(node, job);
        match EAGER_QUEUE.with(|q| q.borrow_mut().as_mut().and_then(VecDeque::pop_front)) {
            Some(next) => node = next,
            None => break,
        }
    }
}

/// Ends the eager loop of this thread when dropped: removes its queue, and hands any task
/// still on it (only if the loop unwound) to the workers.
struct EagerLoop;

impl Drop for EagerLoop {
    fn drop(&mut self) {
        let left = EAGER_QUEUE.with(|q| q.borrow_mut().take());
        for node in left.into_iter().flatten() {
            dispatch(node);
        }
    }
}

/// Runs `job` (the work of `node`) on this thread and dispatches every successor it made
/// ready (see [`run_here`]).
fn run_job_here(node: Arc<TaskNode>, job: Job) {
    let _current = EnterGuard::new(Runtime {
        inner: std::sync::Arc::clone(&job.runtime),
    });
    if run_job(&node, job) {
        complete_and_dispatch(&node);
    }
}

/// Runs a job, then continues inline with one successor it made ready on the same runtime
/// (a chain runs without a spawn per link) and dispatches the others.
fn execute(mut node: Arc<TaskNode>, mut job: Job) {
    let _current = EnterGuard::new(Runtime {
        inner: std::sync::Arc::clone(&job.runtime),
    });
    let mut ready = Ready::new();
    loop {
        let runtime = std::sync::Arc::clone(&job.runtime);
        if !run_job(&node, job) {
            break; // deferred: completed elsewhere, later
        }
        node.complete(&mut ready);
        let mut next = None;
        for succ in ready.drain(..) {
            if next.is_none() {
                let same_runtime = |work: &Work| match work {
                    Work::Job(j) => std::sync::Arc::ptr_eq(&j.runtime, &runtime),
                    Work::Wake(_) => false,
                };
                if let Some(Work::Job(j)) = succ.take_work_if(same_runtime) {
                    next = Some((succ, j));
                    continue;
                }
            }
            dispatch(succ);
        }
        match next {
            Some((n, j)) => (node, job) = (n, j),
            None => break,
        }
    }
}

/// Runs one job's kernel (unless an input is poisoned) and publishes its outcome on the
/// records it writes; returns whether the task is complete. The job, and with it every
/// buffer and owner token, is dropped here. A deferred job ([`Body::Defer`]) is started
/// instead, poisoned input or not, and returns `false`: its [`Deferred`] publishes the
/// outcome and completes the node later.
fn run_job(node: &Arc<TaskNode>, job: Job) -> bool {
    let Job {
        runtime,
        name,
        accesses,
        kernel,
        ..
    } = job;
    let runtime = Runtime { inner: runtime };
    let started = runtime.inner.trace.is_on().then(std::time::Instant::now);
    let inherited = accesses
        .items
        .iter()
        .filter(|a| a.mode.reads())
        .find_map(|a| a.span.table.poison(&a.span.range));
    let kernel = match kernel {
        Body::Run(kernel) => kernel,
        Body::Defer(start) => {
            let deferred = Deferred {
                node: Arc::clone(node),
                runtime,
                name,
                accesses,
                inherited,
                started,
            };
            // A panicking start drops its `Deferred` while unwinding, which fails the task.
            let previous = CURRENT_TASK.with(|c| c.replace(Some(node.id())));
            let _ = catch_unwind(AssertUnwindSafe(move || start(deferred)));
            CURRENT_TASK.with(|c| c.set(previous));
            return false;
        }
    };
    let outcome = match inherited {
        Some(origin) => {
            // The kernel's captures are user values: a panicking `Drop` must not unwind out
            // of the worker.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(kernel)));
            Err(origin)
        }
        None => run_kernel(node.id(), name, kernel),
    };
    publish(&runtime, node.id(), name, &accesses, outcome, started);
    true
}

/// Runs a kernel as task `id`, catching a panic; the failure it makes, if any.
pub(crate) fn run_kernel(
    id: TaskId,
    name: &'static str,
    kernel: impl FnOnce() -> std::result::Result<(), FailureCause>,
) -> std::result::Result<(), std::sync::Arc<TaskFailure>> {
    let previous = CURRENT_TASK.with(|c| c.replace(Some(id)));
    let result = catch_unwind(AssertUnwindSafe(kernel));
    CURRENT_TASK.with(|c| c.set(previous));
    let cause = match result {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(cause)) => cause,
        Err(panic) => FailureCause::Panic(panic_message(&*panic)),
    };
    Err(std::sync::Arc::new(TaskFailure {
        task: id,
        name,
        cause,
    }))
}

/// Publishes a task's outcome on the records it writes (poisoned with its failure, or
/// clean) and records it in the timeline.
pub(crate) fn publish(
    runtime: &Runtime,
    id: TaskId,
    name: &'static str,
    accesses: &AccessList,
    outcome: std::result::Result<(), std::sync::Arc<TaskFailure>>,
    started: Option<std::time::Instant>,
) {
    for a in accesses.items.iter().filter(|a| a.mode.writes()) {
        a.span
            .table
            .set_poison(&a.span.range, outcome.as_ref().err().cloned());
    }
    if let Some(started) = started {
        runtime
            .inner
            .trace
            .record(id, name, started, outcome.is_err());
    }
}

/// Completes a node whose task has finished and dispatches what it made ready.
pub(crate) fn complete_and_dispatch(node: &TaskNode) {
    let mut ready = Ready::new();
    node.complete(&mut ready);
    ready.into_iter().for_each(dispatch);
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

/// Runs `f` on this (host) thread over the views of `access`, once every access it declares
/// is granted; returns what `f` returns.
///
/// This is the host counterpart of [`schedule`]: enrolled at the call, in program order, on
/// all declared records in one step. A read waits for exactly the last write enrolled before
/// it on each record, a write for every earlier access. If a value read is poisoned, `f` does
/// not run and [`Error::Poisoned`] names the origin; a host write that succeeds leaves clean
/// values.
///
/// `f` must not wait for work enrolled on these records after this call (that work waits for
/// `f`). Called inside a task it returns [`Error::WaitInsideTask`], and on a worker thread
/// (inside [`Runtime::install`], or a rayon job a kernel started) [`Error::WaitOnWorker`];
/// either way it enrolls nothing.
///
/// ```
/// use tessera_core::{Async, host};
///
/// let a = Async::new(2.0_f64);
/// let b = Async::new(0.0_f64);
/// host((a.read(), b.overwrite()), |(a, b)| *b = a * 21.0)?;
/// assert_eq!(b.get()?, 42.0);
/// # Ok::<(), tessera_core::Error>(())
/// ```
pub fn host<A: Access, R>(access: A, f: impl FnOnce(A::View<'_>) -> R) -> Result<R> {
    let mut declared = AccessList::new();
    access.declare(&mut declared);
    let mut access = access;
    host_enrolled(declared, move || {
        // SAFETY: `host_enrolled` runs this closure only once every declared access is
        // granted, and the views do not escape the closure.
        unsafe { access.resolve() }.map(f)
    })
}

/// The shared body of host accesses: enroll `accesses`, wait, check poison, run `f`,
/// publish the outcome on written records, release.
fn host_enrolled<R>(mut accesses: AccessList, f: impl FnOnce() -> Result<R>) -> Result<R> {
    if let Some(task) = CURRENT_TASK.with(Cell::get) {
        return Err(Error::WaitInsideTask { task });
    }
    if ON_WORKER.with(Cell::get) {
        return Err(Error::WaitOnWorker {
            thread: std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .to_owned(),
        });
    }
    accesses.normalize()?;
    let latch = std::sync::Arc::new(Latch::new());
    let id = next_task_id();
    let node = TaskNode::new(id);
    let predecessors = enroll(&node, &accesses);
    node.attach(Work::Wake(std::sync::Arc::clone(&latch)));
    if let Some(ready) = TaskNode::finish_enrollment(Arc::clone(&node)) {
        dispatch(ready);
    }
    help_then_wait(&latch, predecessors.nodes());
    let written = || accesses.items.iter().filter(|a| a.mode.writes());
    let poison = accesses
        .items
        .iter()
        .filter(|a| a.mode.reads())
        .find_map(|a| a.span.table.poison(&a.span.range));
    let result = match poison {
        Some(origin) => Err(Error::Poisoned { origin }),
        None => match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(value)) => {
                // A host write that ran to completion leaves clean values (an update runs
                // only on clean inputs; an overwrite starts a clean epoch).
                for a in written() {
                    a.span.table.set_poison(&a.span.range, None);
                }
                Ok(value)
            }
            // Nothing was written (the views could not be resolved): the epochs keep
            // whatever state, and origin, they had.
            Ok(Err(e)) => Err(e),
            Err(panic) => {
                // A half-done host write must not read as clean: poison what it wrote, then
                // release, so later work neither waits forever nor trusts the value.
                let failure = std::sync::Arc::new(TaskFailure {
                    task: id,
                    name: "host access",
                    cause: FailureCause::Panic(panic_message(&*panic)),
                });
                for a in written() {
                    a.span
                        .table
                        .set_poison(&a.span.range, Some(std::sync::Arc::clone(&failure)));
                }
                complete_and_dispatch(&node);
                std::panic::resume_unwind(panic)
            }
        },
    };
    complete_and_dispatch(&node);
    result
}

/// Waits for `latch`, first running on this (host) thread every sequential job among
/// `predecessors` (the host node's) that is still queued, not started by a worker: the host
/// would otherwise sleep while that job waits for a worker to wake up and take it. Only
/// direct predecessors, which the host waits for anyway, so helping never delays the wait
/// with unrelated work.
fn help_then_wait(latch: &Latch, predecessors: &[Arc<TaskNode>]) {
    let sequential = |work: &Work| matches!(work, Work::Job(job) if job.sequential);
    while !latch.is_set() {
        let claimed = predecessors
            .iter()
            .find_map(|p| p.take_queued(sequential).map(|w| (p, w)));
        match claimed {
            Some((pred, Work::Job(job))) => run_job_here(Arc::clone(pred), job),
            Some((_, Work::Wake(_))) => unreachable!("only jobs are queued"),
            None => break,
        }
    }
    latch.wait();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::value::Async;

    /// 10^5 reads of one value scheduled behind a write that is held back: enrolling them
    /// visits a bounded number of reader entries each (a scan of the pending reads per read
    /// made it quadratic: 11-14 s), a write after them waits for all of them, and every read
    /// sees the held-back write's value.
    // Far too slow to interpret with 10^5 tasks: not under Miri.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn reads_behind_a_pending_write_enroll_without_scanning_the_pending_ones() {
        let rt = Runtime::new(2).unwrap();
        let n = 100_000_usize;
        let value = Async::new(0_u64);
        let (release, held) = std::sync::mpsc::channel::<()>();
        rt.schedule(value.write(), move |v| {
            held.recv().unwrap();
            *v = 5;
            Ok(())
        })
        .unwrap();
        let done = std::sync::Arc::new(AtomicUsize::new(0));
        let wrong = std::sync::Arc::new(AtomicUsize::new(0));
        let before = crate::hazard::reader_steps_so_far();
        for _ in 0..n {
            let (done, wrong) = (std::sync::Arc::clone(&done), std::sync::Arc::clone(&wrong));
            rt.schedule(value.read(), move |v| {
                if *v != 5 {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
                done.fetch_add(1, Ordering::Release);
                Ok(())
            })
            .unwrap();
        }
        let steps = crate::hazard::reader_steps_so_far() - before;
        assert!(
            steps <= 8 * n as u64,
            "{n} reads visited {steps} reader entries"
        );
        let d = std::sync::Arc::clone(&done);
        rt.schedule(value.write(), move |v| {
            assert_eq!(
                d.load(Ordering::Acquire),
                n,
                "the write ran before every read"
            );
            *v += 1;
            Ok(())
        })
        .unwrap();
        release.send(()).unwrap();
        assert_eq!(value.get().unwrap(), 6);
        assert_eq!(done.load(Ordering::Acquire), n);
        assert_eq!(wrong.load(Ordering::Relaxed), 0, "a read saw another epoch");
    }
}
