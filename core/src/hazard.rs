//! Hazard records with epochs: the ordering of accesses to one piece of storage.
//!
//! Owns: [`HazardRecord`] and [`HazardSet`]. A record orders the accesses enrolled on it:
//!
//! - a **read** waits for the last write enrolled before it;
//! - a **write** (update or overwrite) waits for every access enrolled before it: the reads
//!   since the last write, or that write itself when there were none;
//! - reads between two writes wait for nothing but that first write, so they run
//!   concurrently.
//!
//! # State, field by field
//!
//! - `epoch`: how many writes were enrolled so far. A read is enrolled at the current epoch
//!   (it sees the value of write number `epoch`); a write opens epoch `epoch + 1`.
//! - `last_write`: the node of the last enrolled write, or `None` before the first one.
//!   It may already be done; edges to done nodes are never added (see `task`).
//! - `readers`: the reads enrolled since `last_write`. Reads that are done are pruned when
//!   the list grows, so it stays bounded by the reads still in flight (plus a constant).
//! - `poison`: the state of the *completed* value. Set by each write when it completes,
//!   `None` after a success or `Some(origin)` after a failure. A reader looks at it when it
//!   runs: at that moment the write it waits for has completed and no later write can have
//!   completed (a later write waits for this reader), so it sees exactly its own epoch.
//!
//! Impossible states: a done reader whose `last_write` is not done (readers wait for it); a
//! write enrolled while `readers` holds a node not yet done that it does not wait for.
//!
//! Enrollment of one task on several records happens in one step in `enroll`: all record
//! locks are taken in increasing [`RecordId`] order before any of them is changed, so the
//! enrollments on every record are linearised in one global order and every dependency edge
//! points from a later enrollment to an earlier one. The graph is acyclic: no deadlock.

use crate::error::{RecordId, TaskFailure};
use crate::primitive::{Arc, AtomicBool, Mutex, MutexGuard, Ordering};
use crate::task::TaskNode;
use smallvec::SmallVec;
use std::sync::atomic::AtomicU64;

/// How a task accesses a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Shared read of the current value.
    Read,
    /// Exclusive read-modify-write: sees the current value and may change it. A poisoned
    /// input poisons the update.
    Update,
    /// Exclusive overwrite: does not read the current value, so it starts a clean epoch
    /// even after a failure.
    Overwrite,
}

impl Mode {
    /// Whether the access reads the value it finds (and so inherits its poison).
    pub fn reads(self) -> bool {
        matches!(self, Mode::Read | Mode::Update)
    }

    /// Whether the access writes (and so is exclusive).
    pub fn writes(self) -> bool {
        matches!(self, Mode::Update | Mode::Overwrite)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Read => "a read",
            Mode::Update => "an update",
            Mode::Overwrite => "an overwrite",
        }
    }
}

/// Prune finished readers once the list holds this many.
const READER_PRUNE_AT: usize = 32;

struct RecordState {
    epoch: u64,
    last_write: Option<Arc<TaskNode>>,
    readers: Vec<Arc<TaskNode>>,
    poison: Option<std::sync::Arc<TaskFailure>>,
}

/// The hazard record of one independent value or one block.
pub struct HazardRecord {
    id: RecordId,
    /// Mirrors `state.poison.is_some()`, so the common clean case costs no lock. Written only
    /// under the state lock; read with `Acquire`, which pairs with the `Release` store made
    /// under the lock (and the task graph's own edges already order writer and reader).
    poisoned: AtomicBool,
    state: Mutex<RecordState>,
}

impl std::fmt::Debug for HazardRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HazardRecord")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

static NEXT_RECORD: AtomicU64 = AtomicU64::new(0);

/// The lock guard of a record, held during enrollment.
pub(crate) struct Locked<'a> {
    guard: MutexGuard<'a, RecordState>,
}

impl HazardRecord {
    /// A fresh record, at epoch 0, with no accesses.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            id: RecordId(NEXT_RECORD.fetch_add(1, std::sync::atomic::Ordering::Relaxed)),
            poisoned: AtomicBool::new(false),
            state: Mutex::new(RecordState {
                epoch: 0,
                last_write: None,
                readers: Vec::new(),
                poison: None,
            }),
        })
    }

    /// The record's identity.
    pub fn id(&self) -> RecordId {
        self.id
    }

    /// How many writes have been enrolled on this record so far.
    pub fn epoch(&self) -> u64 {
        self.state.lock().epoch
    }

    /// The failure that poisoned the completed value, if any.
    pub(crate) fn poison(&self) -> Option<std::sync::Arc<TaskFailure>> {
        if !self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        self.state.lock().poison.clone()
    }

    /// Publishes the outcome of a completed write.
    pub(crate) fn set_poison(&self, poison: Option<std::sync::Arc<TaskFailure>>) {
        if poison.is_none() && !self.poisoned.load(Ordering::Acquire) {
            return; // clean stays clean: no lock
        }
        let mut state = self.state.lock();
        self.poisoned.store(poison.is_some(), Ordering::Release);
        state.poison = poison;
    }

    pub(crate) fn lock(&self) -> Locked<'_> {
        Locked {
            guard: self.state.lock(),
        }
    }
}

/// The predecessor an enrollment last made its task wait for, across the records it
/// enrolls on: a task over many records last written (or read) by one task asks for that
/// edge once, not once per record. It holds the predecessor alive, so a pointer match is
/// always the same task.
#[derive(Default)]
pub(crate) struct LastEdge(Option<Arc<TaskNode>>);

impl LastEdge {
    fn wait_for(&mut self, node: &Arc<TaskNode>, pred: &Arc<TaskNode>) {
        if self.0.as_ref().is_some_and(|last| Arc::ptr_eq(last, pred)) {
            return;
        }
        TaskNode::depend_on(node, pred);
        self.0 = Some(Arc::clone(pred));
    }
}

impl Locked<'_> {
    /// Enrolls `node` with `mode`.
    pub(crate) fn enroll(&mut self, node: &Arc<TaskNode>, mode: Mode, last: &mut LastEdge) {
        let state = &mut *self.guard;
        match mode {
            Mode::Read => {
                if let Some(writer) = &state.last_write {
                    last.wait_for(node, writer);
                }
                if state.readers.len() >= READER_PRUNE_AT {
                    state.readers.retain(|r| !r.is_done());
                }
                state.readers.push(Arc::clone(node));
            }
            Mode::Update | Mode::Overwrite => {
                if state.readers.is_empty() {
                    if let Some(writer) = &state.last_write {
                        last.wait_for(node, writer);
                    }
                } else {
                    // The readers waited for `last_write`, so waiting for them is enough.
                    for reader in state.readers.drain(..) {
                        last.wait_for(node, &reader);
                    }
                }
                state.last_write = Some(Arc::clone(node));
                state.epoch += 1;
            }
        }
    }
}

/// The records an alias is ordered by: one for a block, several for a coalesced view.
///
/// Cloning shares the records (the exact same ones): it never creates a record.
#[derive(Clone, Debug)]
pub struct HazardSet {
    records: SmallVec<[Arc<HazardRecord>; 1]>,
}

impl HazardSet {
    /// A set holding one fresh record: a new, independent timeline.
    pub fn fresh() -> Self {
        Self::one(HazardRecord::new())
    }

    /// The set of one record.
    pub fn one(record: Arc<HazardRecord>) -> Self {
        Self {
            records: smallvec::smallvec![record],
        }
    }

    /// The composite of several records (for a view that spans several blocks). A record
    /// given twice is kept once.
    pub fn composite(records: impl IntoIterator<Item = Arc<HazardRecord>>) -> Self {
        let mut records: SmallVec<[Arc<HazardRecord>; 1]> = records.into_iter().collect();
        records.sort_unstable_by_key(|r| r.id());
        records.dedup_by_key(|r| r.id());
        Self { records }
    }

    /// The records (for a composite: in increasing id order, each once).
    pub fn records(&self) -> &[Arc<HazardRecord>] {
        &self.records
    }

    /// Whether two sets share a record.
    pub fn overlaps(&self, other: &HazardSet) -> bool {
        self.records
            .iter()
            .any(|a| other.records.iter().any(|b| a.id == b.id))
    }
}
