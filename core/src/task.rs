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
//! # Gates
//!
//! A *gate* ([`TaskNode::gate`]) is a node with no work: it stands for a group of reads of
//! one hazard run, so that a later write waits for the whole group through one edge instead
//! of one per read (see `hazard`). Each read of the group is a predecessor of the gate; the
//! gate's submission guard is held while the group is *open* (reads may still join it) and
//! dropped when the group is *closed* (a write, or a split of the run, takes it over). A
//! gate is never ready before it is closed, and once closed it gains no predecessor. A gate
//! that becomes ready is completed at once by whoever made it ready, inside
//! [`complete`](TaskNode::complete), in a loop (gates released by gates never recurse), so
//! it is never handed to a scheduler. Its successors are the one write that closed it, or
//! the two gates of the halves of a split run; both are still held by their own guards when
//! it is closed, so closing a gate never makes a task ready by itself.
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

/// The id gates carry (they are no task: no error or trace names them).
const GATE_ID: TaskId = TaskId(u64::MAX);

/// One enrolled operation, or a gate (see the module docs).
pub(crate) struct TaskNode {
    id: TaskId,
    /// A gate: no work; completed by whoever makes it ready.
    gate: bool,
    pending: AtomicUsize,
    /// `state.done`, readable without the lock (set in the same critical section): for
    /// pruning finished readers, a hint that may lag, never for adding edges.
    finished: AtomicBool,
    state: Mutex<NodeState>,
}

impl TaskNode {
    /// A node holding its submission guard (`pending == 1`), with no work attached yet.
    pub(crate) fn new(id: TaskId) -> Arc<Self> {
        Self::make(id, false)
    }

    /// An open gate: holding its guard (`pending == 1`), no predecessor yet, never any work.
    pub(crate) fn gate() -> Arc<Self> {
        Self::make(GATE_ID, true)
    }

    fn make(id: TaskId, gate: bool) -> Arc<Self> {
        Arc::new(Self {
            id,
            gate,
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

    /// Whether `succ` waits for this node directly (for tests of enrollment).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn has_successor(&self, succ: &TaskNode) -> bool {
        let state = self.state.lock();
        state.successors.iter().any(|s| std::ptr::eq(&**s, succ))
    }

    /// Whether `succ` waits for this node, directly or through gates (for tests of
    /// enrollment: a write waits for a group of reads through their gate).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn precedes(&self, succ: &TaskNode) -> bool {
        let mut todo: Vec<Arc<TaskNode>> = self.state.lock().successors.to_vec();
        while let Some(s) = todo.pop() {
            if std::ptr::eq(&*s, succ) {
                return true;
            }
            if s.gate {
                todo.extend(s.state.lock().successors.iter().cloned());
            }
        }
        false
    }

    /// Closes an open gate: drops its guard (see the module docs). Called under the lock of
    /// the table whose run held it, after its successor (a write or the gates of the halves
    /// of a split) was made to wait for it.
    pub(crate) fn close_gate(gate: Arc<TaskNode>) {
        debug_assert!(gate.gate, "{} closed as a gate", gate.id);
        if gate.release_one() {
            // Every read of the group is done. Its successors are held by their own guards,
            // so nothing becomes ready (module docs, *Gates*).
            let mut ready: SmallVec<[Arc<TaskNode>; 0]> = SmallVec::new();
            gate.complete(&mut ready);
            debug_assert!(ready.is_empty(), "closing a gate made a task ready");
        }
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

    /// Marks the node done and pushes the successors it made ready onto `ready`. Gates it
    /// makes ready are completed here too, in a loop (not by recursion: a chain of gates,
    /// one per split of a run, costs no stack), and their ready successors pushed instead.
    pub(crate) fn complete(&self, ready: &mut impl Extend<Arc<TaskNode>>) {
        let mut gates: SmallVec<[Arc<TaskNode>; 2]> = SmallVec::new();
        self.finish_into(ready, &mut gates);
        while let Some(gate) = gates.pop() {
            gate.finish_into(ready, &mut gates);
        }
    }

    /// Marks this node done and releases its successors: the ready ones go to `ready`, or to
    /// `gates` for gates.
    fn finish_into(
        &self,
        ready: &mut impl Extend<Arc<TaskNode>>,
        gates: &mut SmallVec<[Arc<TaskNode>; 2]>,
    ) {
        let successors = {
            let mut state = self.state.lock();
            debug_assert!(!state.done, "{} completed twice", self.id);
            state.done = true;
            self.finished.store(true, Ordering::Release);
            std::mem::take(&mut state.successors)
        };
        for succ in successors {
            if succ.release_one() {
                if succ.gate {
                    gates.push(succ);
                } else {
                    ready.extend(Some(succ));
                }
            }
        }
    }
}
