//! Task nodes: the dependency-counted continuations the scheduler runs.
//!
//! Owns: [`TaskNode`], its pending count, its successor list and its work. Invariants:
//!
//! - `pending` counts the predecessors that have not completed, plus one *submission guard*
//!   held while the node is being enrolled. A node becomes ready exactly once, when the
//!   count reaches zero, and whoever makes it reach zero dispatches it.
//! - An edge `pred -> succ` is added only under `pred`'s state lock and only while `pred` is
//!   not done; `succ.pending` is raised before the edge is visible. So a completing `pred`
//!   either sees the edge (and lowers `succ.pending`) or the edge is never added.
//! - A ready node's work is taken exactly once, under the node's lock: by whoever made the
//!   node ready, or, for a job that was put on a runtime's ready queue (`queued`), by the
//!   worker that pops the node or by a host waiting for the node's completion that claims it
//!   first ([`TaskNode::take_queued`]). A node is queued only once it is ready, so a claim
//!   never runs a job early.
//! - Completion sets `done` and takes the successor list in one critical section; it never
//!   holds a node lock while taking a hazard-record lock (enrollment takes record locks, then
//!   node locks), so the two lock classes cannot deadlock.
//!
//! # Memory ordering
//!
//! `pending` is lowered with `AcqRel`: the thread that brings it to zero acquires every
//! predecessor's release, so all writes made by the predecessors' kernels (and their poison
//! updates) happen-before the successor's kernel. Raising it is `Relaxed`: it happens under
//! the predecessor's lock while the submission guard keeps the count above zero.

use crate::error::TaskId;
use crate::primitive::{Arc, AtomicBool, AtomicUsize, Latch, Mutex, Ordering};
use smallvec::SmallVec;

/// What a node does once it is ready.
pub(crate) enum Work {
    /// Run a kernel on a worker; the scheduler owns what is inside.
    Job(crate::runtime::Job),
    /// Wake a host thread that waits for this node (a host read or write).
    Wake(std::sync::Arc<Latch>),
}

struct NodeState {
    done: bool,
    successors: SmallVec<[Arc<TaskNode>; 2]>,
    work: Option<Work>,
    /// The node is ready and its job waits on a runtime's ready queue.
    queued: bool,
}

/// One enrolled operation.
pub(crate) struct TaskNode {
    id: TaskId,
    pending: AtomicUsize,
    /// `state.done`, readable without the lock (set in the same critical section): for
    /// pruning finished readers, a hint that may lag, never for adding edges.
    finished: AtomicBool,
    state: Mutex<NodeState>,
}

impl TaskNode {
    /// A node holding its submission guard (`pending == 1`), with no work attached yet.
    pub(crate) fn new(id: TaskId) -> Arc<Self> {
        Arc::new(Self {
            id,
            pending: AtomicUsize::new(1),
            finished: AtomicBool::new(false),
            state: Mutex::new(NodeState {
                done: false,
                successors: SmallVec::new(),
                work: None,
                queued: false,
            }),
        })
    }

    /// Attaches the node's work. Called once, before the submission guard is dropped, so
    /// nobody can have taken the work yet.
    pub(crate) fn attach(&self, work: Work) {
        let mut state = self.state.lock();
        debug_assert!(state.work.is_none(), "{} got work twice", self.id);
        state.work = Some(work);
    }

    pub(crate) fn id(&self) -> TaskId {
        self.id
    }

    /// Makes `node` wait for `pred`. Called during enrollment, while `node` still holds its
    /// submission guard.
    pub(crate) fn depend_on(node: &Arc<Self>, pred: &Arc<TaskNode>) {
        let mut state = pred.state.lock();
        if state.done {
            return;
        }
        // Relaxed: the submission guard keeps `pending` above zero, and the edge becomes
        // visible to the completing thread only through `pred`'s lock.
        node.pending.fetch_add(1, Ordering::Relaxed);
        state.successors.push(Arc::clone(node));
    }

    /// Whether `succ` waits for this node (for tests of enrollment).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn has_successor(&self, succ: &TaskNode) -> bool {
        let state = self.state.lock();
        state.successors.iter().any(|s| std::ptr::eq(&**s, succ))
    }

    /// How many predecessors (plus the submission guard, while enrolling) the node still
    /// waits for (for tests of enrollment).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Whether the node has completed (its successors were released).
    pub(crate) fn is_done(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Drops one pending count; returns `true` when this made the node ready.
    fn release_one(&self) -> bool {
        self.pending.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Drops the submission guard; returns the node if it is ready now.
    pub(crate) fn finish_enrollment(node: Arc<Self>) -> Option<Arc<Self>> {
        node.release_one().then_some(node)
    }

    /// Takes the node's work. Called once, by whoever made the node ready.
    pub(crate) fn take_work(&self) -> Option<Work> {
        self.state.lock().work.take()
    }

    /// Takes the node's work if `accept` says so (for whoever made the node ready, choosing
    /// what to run itself).
    pub(crate) fn take_work_if(&self, accept: impl FnOnce(&Work) -> bool) -> Option<Work> {
        self.state.lock().work.take_if(|work| accept(work))
    }

    /// Dispatches a ready node's work, in one critical section: work that `queue` accepts
    /// stays in the node, marked queued (the caller then puts the node on a ready queue, and
    /// [`take_queued`](Self::take_queued) takes the work); other work is taken and returned.
    /// Called once, by whoever made the node ready.
    pub(crate) fn queue_or_take(&self, queue: impl FnOnce(&Work) -> bool) -> Option<Work> {
        let mut state = self.state.lock();
        if state.work.as_ref().is_some_and(queue) {
            state.queued = true;
            None
        } else {
            state.work.take()
        }
    }

    /// Takes the work of a queued node if nobody has taken it yet and `accept` says so: for
    /// the worker that popped the node from its queue, and for a host that waits for the
    /// node's completion and runs the work itself rather than sleep. `None` for a node that
    /// is not queued (not ready yet, or handed out otherwise).
    pub(crate) fn take_queued(&self, accept: impl FnOnce(&Work) -> bool) -> Option<Work> {
        let mut state = self.state.lock();
        if !state.queued {
            return None;
        }
        state.work.take_if(|work| accept(work))
    }

    /// Marks the node done and pushes the successors it made ready onto `ready`.
    pub(crate) fn complete(&self, ready: &mut impl Extend<Arc<TaskNode>>) {
        let successors = {
            let mut state = self.state.lock();
            debug_assert!(!state.done, "{} completed twice", self.id);
            state.done = true;
            self.finished.store(true, Ordering::Release);
            std::mem::take(&mut state.successors)
        };
        for succ in successors {
            if succ.release_one() {
                ready.extend(Some(succ));
            }
        }
    }
}
