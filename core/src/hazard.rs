//! Hazard records with epochs: the ordering of accesses to one piece of storage.
//!
//! Owns: [`RecordTable`], [`HazardRecord`] and [`HazardSet`]. A record orders the accesses
//! enrolled on it:
//!
//! - a **read** waits for the last write enrolled before it;
//! - a **write** (update or overwrite) waits for every access enrolled before it: the reads
//!   since the last write, or that write itself when there were none;
//! - reads between two writes wait for nothing but that first write, so they run
//!   concurrently.
//!
//! # State of one record
//!
//! - `epoch`: how many writes were enrolled so far. A read is enrolled at the current epoch
//!   (it sees the value of write number `epoch`); a write opens epoch `epoch + 1`.
//! - `last_write`: the node of the last enrolled write, or `None` before the first one.
//!   It may already be done; edges to done nodes are never added (see `task`).
//! - `readers` and `gate`: the reads enrolled since `last_write`. The first
//!   [`READERS_DIRECT`] are held directly, in `readers` (done ones are pruned when the list
//!   is full); any further read joins the run's *gate* (see `task`, *Gates*), a node without
//!   work that each such read is a predecessor of. A write then waits for the direct readers
//!   and for the gate, which completes once every read that joined it is done.
//! - poison: the state of the *completed* value. Set by each write when it completes,
//!   clean after a success or `Some(origin)` after a failure. A reader looks at it when it
//!   runs: at that moment the write it waits for has completed and no later write can have
//!   completed (a later write waits for this reader), so it sees exactly its own epoch.
//!
//! Impossible states: a done reader whose `last_write` is not done (readers wait for it); a
//! write enrolled while `readers` holds a node not yet done that it does not wait for; a
//! gate held by two runs, or a closed gate held by a run (a run's gate is open and its own).
//!
//! # Cost of an enrollment, whatever is pending
//!
//! Enrolling a read costs O(1) on each run it covers: one edge from the last write, and at
//! most [`READERS_DIRECT`] pruning steps before it is held directly or joins the gate by one
//! edge. It never scans the reads already pending, so `n` reads of one value behind a
//! pending write enroll in O(`n`) in total (a scan of the pending reads per enrollment made
//! that O(`n`^2): 10^5 such reads took 11-14 s). A write costs O(1) per run too: at most
//! [`READERS_DIRECT`] edges and one to the gate, however many reads the gate stands for;
//! the reads release the gate as they complete, one atomic decrement each, which they
//! would have paid for an edge to the write anyway. Splitting a run (an access to part of
//! it) copies at most [`READERS_DIRECT`] readers and replaces the run's gate by one gate per
//! half, each waiting for the old one (then closed): O(1), where copying a list of every
//! pending read would be O(pending reads) per split.
//!
//! # Tables and runs
//!
//! Records are made in [`RecordTable`]s: the blocks of one array get one table of records
//! with consecutive ids, a value gets a table of one. A table keeps its records run-length
//! encoded: a *run* is a range of consecutive records whose state (epoch, last write,
//! readers) is the same, and the poison is kept as a list of poisoned ranges. An access to
//! a span of records (a coalesced view over many blocks, a whole array) then costs one step
//! per run it covers, not one per record, and a table holds one lock, not one per record.
//! The encoding is invisible: every operation on a span has exactly the effect it has on
//! each of its records separately (the module's tests replay random programs against a
//! per-record model). Invariants: the runs are non-empty, sorted, and cover the table's
//! records exactly; two neighbouring runs whose states became equal are merged by the
//! operation that made them equal; poisoned ranges are non-empty, sorted and disjoint, and
//! `poisoned` mirrors "the list is not empty" (written under the lock).
//!
//! Enrollment of one task on several tables happens in one step in `enroll`: all table
//! locks are taken in increasing [`RecordId`] order before any of them is changed, so the
//! enrollments on every record are linearised in one global order and every dependency edge
//! points from a later enrollment to an earlier one. The graph is acyclic: no deadlock.

use crate::error::{RecordId, TaskFailure};
use crate::primitive::{Arc, AtomicBool, Mutex, MutexGuard, Ordering};
use crate::task::TaskNode;
use smallvec::SmallVec;
use std::ops::Range;
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

/// How many reads a run holds directly (pruning the done ones when full) before further
/// reads join its gate. Direct readers are what a host write may help with (it runs queued
/// sequential jobs among its direct predecessors), so this matches [`RECENT_EDGES`].
#[cfg(not(loom))]
const READERS_DIRECT: usize = RECENT_EDGES;
/// Under loom, one: the models reach gates with two reads, not nine.
#[cfg(loom)]
const READERS_DIRECT: usize = 1;

#[cfg(all(test, not(loom)))]
thread_local! {
    /// How many reader entries enrollments on this thread visited (pruned, copied, waited
    /// for): the tests check that it grows with the enrollments, not with what is pending.
    static READER_STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts `n` reader entries visited (for the tests; nothing otherwise).
#[inline]
fn reader_steps(n: usize) {
    #[cfg(all(test, not(loom)))]
    READER_STEPS.with(|c| c.set(c.get() + n as u64));
    #[cfg(not(all(test, not(loom))))]
    let _ = n;
}

/// How many reader entries enrollments on this thread have visited so far (see
/// [`READER_STEPS`]).
#[cfg(all(test, not(loom)))]
pub(crate) fn reader_steps_so_far() -> u64 {
    READER_STEPS.with(std::cell::Cell::get)
}

/// Records `start..` (up to the next run) in one state.
struct Run {
    start: u32,
    epoch: u64,
    last_write: Option<Arc<TaskNode>>,
    /// At most [`READERS_DIRECT`] reads since `last_write`.
    readers: SmallVec<[Arc<TaskNode>; 2]>,
    /// The open gate the further reads since `last_write` joined, if any (held by this run
    /// alone).
    gate: Option<Arc<TaskNode>>,
}

impl Run {
    /// Splits the run: it keeps records up to `start` and the run of records `start..` is
    /// returned, both in the state this one had. The direct readers are copied (at most
    /// [`READERS_DIRECT`]); the gate cannot be shared, since a read of one half must not
    /// delay a write of the other, so each half gets a new gate that waits for the old one,
    /// which is closed: it stands for the reads so far, of both halves.
    fn split_off(&mut self, start: u32) -> Run {
        reader_steps(self.readers.len());
        let gate = self.gate.take().map(|old| {
            let (head, tail) = (TaskNode::gate(), TaskNode::gate());
            // `old` is open (its guard held), so both edges are added.
            TaskNode::depend_on(&head, &old);
            TaskNode::depend_on(&tail, &old);
            TaskNode::close_gate(old);
            self.gate = Some(head);
            tail
        });
        Run {
            start,
            epoch: self.epoch,
            last_write: self.last_write.clone(),
            readers: self.readers.clone(),
            gate,
        }
    }

    /// Whether two runs hold the same state (the same nodes, by identity).
    fn same_state(&self, other: &Run) -> bool {
        let same = |a: &Option<Arc<TaskNode>>, b: &Option<Arc<TaskNode>>| match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        let same_write = same(&self.last_write, &other.last_write);
        self.epoch == other.epoch
            && same_write
            && same(&self.gate, &other.gate)
            && self.readers.len() == other.readers.len()
            && self
                .readers
                .iter()
                .zip(&other.readers)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

struct TableState {
    /// Inline for a table of one (a value): no allocation beyond the table itself.
    runs: SmallVec<[Run; 1]>,
    /// Poisoned ranges of the completed values, with their origins.
    poison: Vec<(Range<u32>, std::sync::Arc<TaskFailure>)>,
}

/// The hazard records of one array's blocks (or of one value): `len` records with
/// consecutive ids, kept run-length encoded under one lock (see the module docs).
pub struct RecordTable {
    first: u64,
    len: u32,
    /// Mirrors `!state.poison.is_empty()`, so the common clean case costs no lock. Written
    /// only under the state lock; read with `Acquire`, which pairs with the `Release` store
    /// made under the lock (and the task graph's own edges already order writer and reader).
    poisoned: AtomicBool,
    state: Mutex<TableState>,
}

impl std::fmt::Debug for RecordTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordTable")
            .field("first", &RecordId(self.first))
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

static NEXT_RECORD: AtomicU64 = AtomicU64::new(0);

impl RecordTable {
    /// A table of `len` fresh records, each at epoch 0 with no accesses.
    ///
    /// # Panics
    ///
    /// If `len` does not fit in `u32`.
    pub fn new(len: usize) -> Arc<Self> {
        let len = u32::try_from(len).expect("a record table holds fewer than 2^32 records");
        let first = NEXT_RECORD.fetch_add(u64::from(len), std::sync::atomic::Ordering::Relaxed);
        let mut runs = SmallVec::new();
        if len > 0 {
            runs.push(Run {
                start: 0,
                epoch: 0,
                last_write: None,
                readers: SmallVec::new(),
                gate: None,
            });
        }
        Arc::new(Self {
            first,
            len,
            poisoned: AtomicBool::new(false),
            state: Mutex::new(TableState {
                runs,
                poison: Vec::new(),
            }),
        })
    }

    /// How many records the table holds.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the table holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The identity of record `index`.
    ///
    /// # Panics
    ///
    /// If `index` is not a record of the table.
    pub fn id(&self, index: usize) -> RecordId {
        assert!(
            index < self.len(),
            "record {index} of a table of {}",
            self.len
        );
        RecordId(self.first + index as u64)
    }

    /// How many writes have been enrolled on record `index` so far.
    ///
    /// # Panics
    ///
    /// If `index` is not a record of the table.
    pub fn epoch(&self, index: usize) -> u64 {
        assert!(
            index < self.len(),
            "record {index} of a table of {}",
            self.len
        );
        let state = self.state.lock();
        let run = state.runs.partition_point(|r| r.start as usize <= index) - 1;
        state.runs[run].epoch
    }

    /// The failure that poisoned the completed value of a record of `span`, if any (the one
    /// of the lowest poisoned record).
    pub(crate) fn poison(&self, span: &Range<u32>) -> Option<std::sync::Arc<TaskFailure>> {
        if !self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        let state = self.state.lock();
        state
            .poison
            .iter()
            .find(|(r, _)| r.start < span.end && span.start < r.end)
            .map(|(_, origin)| std::sync::Arc::clone(origin))
    }

    /// Publishes the outcome of a completed write of `span`.
    pub(crate) fn set_poison(
        &self,
        span: &Range<u32>,
        poison: Option<std::sync::Arc<TaskFailure>>,
    ) {
        if poison.is_none() && !self.poisoned.load(Ordering::Acquire) {
            return; // clean stays clean: no lock
        }
        let mut state = self.state.lock();
        let old = std::mem::take(&mut state.poison);
        for (r, origin) in old {
            if r.end <= span.start || span.end <= r.start {
                state.poison.push((r, origin));
                continue;
            }
            // Keep the parts outside `span`.
            if r.start < span.start {
                state
                    .poison
                    .push((r.start..span.start, std::sync::Arc::clone(&origin)));
            }
            if span.end < r.end {
                state.poison.push((span.end..r.end, origin));
            }
        }
        if let Some(origin) = poison {
            let at = state.poison.partition_point(|(r, _)| r.start < span.start);
            state.poison.insert(at, (span.clone(), origin));
        }
        self.poisoned
            .store(!state.poison.is_empty(), Ordering::Release);
    }

    pub(crate) fn lock(&self) -> Locked<'_> {
        Locked {
            len: self.len,
            guard: self.state.lock(),
        }
    }
}

/// The lock guard of a table, held during enrollment.
pub(crate) struct Locked<'a> {
    len: u32,
    guard: MutexGuard<'a, TableState>,
}

/// The predecessors an enrollment already made its task wait for, across the runs it enrolls
/// on: a task over many runs last written (or read) by a few tasks asks for each edge once,
/// not once per run, even where their runs interleave (a permutation's blocks scatter over
/// the tasks that wrote them). It keeps the last [`RECENT_EDGES`] alive, so a pointer match is
/// always the same task; asking again for an older one only adds a duplicate edge, which is
/// harmless (counted twice, released twice).
#[derive(Default)]
pub(crate) struct RecentEdges(SmallVec<[Arc<TaskNode>; RECENT_EDGES]>);

/// How many predecessors [`RecentEdges`] remembers.
const RECENT_EDGES: usize = 8;

impl RecentEdges {
    /// The remembered predecessors, oldest first.
    pub(crate) fn nodes(&self) -> &[Arc<TaskNode>] {
        &self.0
    }

    fn wait_for(&mut self, node: &Arc<TaskNode>, pred: &Arc<TaskNode>) {
        // A finished predecessor needs no edge (and no lock): `finished` is set after `done`,
        // under the node's lock, so it implies what `depend_on` would find.
        if pred.is_done() || self.0.iter().any(|p| Arc::ptr_eq(p, pred)) {
            return;
        }
        TaskNode::depend_on(node, pred);
        if self.0.len() == RECENT_EDGES {
            self.0.remove(0);
        }
        self.0.push(Arc::clone(pred));
    }
}

impl Locked<'_> {
    /// Makes a run start at record `at` (splitting the run that holds it); returns its index,
    /// or the number of runs when `at` is the end of the table.
    fn split_at(&mut self, at: u32) -> usize {
        let runs = &mut self.guard.runs;
        if at == self.len {
            return runs.len();
        }
        let i = runs.partition_point(|r| r.start <= at) - 1;
        if runs[i].start == at {
            return i;
        }
        let tail = runs[i].split_off(at);
        runs.insert(i + 1, tail);
        i + 1
    }

    /// Merges equal neighbours among runs `from..to` (and the run after them).
    fn merge(&mut self, from: usize, to: usize) {
        let runs = &mut self.guard.runs;
        let end = (to + 1).min(runs.len());
        let mut kept = from;
        for next in from + 1..end {
            if runs[kept].same_state(&runs[next]) {
                continue; // `next` joins the run `kept`; it is dropped below
            }
            kept += 1;
            runs.swap(kept, next);
        }
        runs.drain(kept + 1..end);
    }

    /// Enrolls `node` with `mode` on records `span` (non-empty, inside the table).
    pub(crate) fn enroll(
        &mut self,
        span: &Range<u32>,
        node: &Arc<TaskNode>,
        mode: Mode,
        last: &mut RecentEdges,
    ) {
        debug_assert!(span.start < span.end && span.end <= self.len);
        let lo = self.split_at(span.start);
        let hi = self.split_at(span.end);
        for run in &mut self.guard.runs[lo..hi] {
            match mode {
                Mode::Read => {
                    if let Some(writer) = &run.last_write {
                        last.wait_for(node, writer);
                    }
                    if run.readers.len() == READERS_DIRECT {
                        reader_steps(READERS_DIRECT);
                        run.readers.retain(|r| !r.is_done());
                    }
                    if run.readers.len() < READERS_DIRECT {
                        run.readers.push(Arc::clone(node));
                    } else {
                        // `node` is being enrolled (not done), so the edge is added; the
                        // gate is open (its guard held), so it is not ready before a write
                        // or a split closes it.
                        let gate = run.gate.get_or_insert_with(TaskNode::gate);
                        TaskNode::depend_on(gate, node);
                    }
                }
                Mode::Update | Mode::Overwrite => {
                    let gate = run.gate.take();
                    if run.readers.is_empty() && gate.is_none() {
                        if let Some(writer) = &run.last_write {
                            last.wait_for(node, writer);
                        }
                    } else {
                        // The readers (direct, and those behind the gate) waited for
                        // `last_write`, so waiting for them is enough.
                        reader_steps(run.readers.len());
                        for reader in run.readers.drain(..) {
                            last.wait_for(node, &reader);
                        }
                        if let Some(gate) = gate {
                            // Open, so not done: the edge is added before it is closed.
                            last.wait_for(node, &gate);
                            TaskNode::close_gate(gate);
                        }
                    }
                    run.last_write = Some(Arc::clone(node));
                    run.epoch += 1;
                }
            }
        }
        self.merge(lo.saturating_sub(1), hi);
    }
}

/// One hazard record: record `index` of a [`RecordTable`]. The handle is cheap to clone and
/// names the record; its state lives in the table.
#[derive(Clone, Debug)]
pub struct HazardRecord {
    table: Arc<RecordTable>,
    index: u32,
}

impl Default for HazardRecord {
    /// A fresh record (a table of one).
    fn default() -> Self {
        Self::new()
    }
}

impl HazardRecord {
    /// A fresh record, at epoch 0, with no accesses: a table of one.
    pub fn new() -> Self {
        Self {
            table: RecordTable::new(1),
            index: 0,
        }
    }

    /// Record `index` of `table`.
    ///
    /// # Panics
    ///
    /// If `index` is not a record of the table.
    pub fn of(table: &Arc<RecordTable>, index: usize) -> Self {
        assert!(
            index < table.len(),
            "record {index} of a table of {}",
            table.len()
        );
        Self {
            table: Arc::clone(table),
            index: index as u32,
        }
    }

    /// The record's identity.
    pub fn id(&self) -> RecordId {
        RecordId(self.table.first + u64::from(self.index))
    }

    /// How many writes have been enrolled on this record so far.
    pub fn epoch(&self) -> u64 {
        self.table.epoch(self.index as usize)
    }
}

/// Records `range` of one table.
#[derive(Clone, Debug)]
pub(crate) struct Span {
    pub(crate) table: Arc<RecordTable>,
    pub(crate) range: Range<u32>,
}

impl Span {
    /// The id of the span's first record (the order enrollment locks and sorts in).
    pub(crate) fn first_id(&self) -> u64 {
        self.table.first + u64::from(self.range.start)
    }
}

/// The records an alias is ordered by: one for a block, several for a coalesced view.
///
/// Held as spans of consecutive records of their tables, in increasing id order, each
/// record once. Cloning shares the records (the exact same ones): it never creates a record.
#[derive(Clone, Debug)]
pub struct HazardSet {
    spans: SmallVec<[Span; 1]>,
}

impl HazardSet {
    /// A set holding one fresh record: a new, independent timeline.
    pub fn fresh() -> Self {
        Self::one(HazardRecord::new())
    }

    /// The set of one record.
    pub fn one(record: HazardRecord) -> Self {
        let index = record.index;
        Self {
            spans: smallvec::smallvec![Span {
                table: record.table,
                range: index..index + 1,
            }],
        }
    }

    /// Records `range` of `table` (for a view over consecutive blocks): one span, however
    /// many records.
    ///
    /// # Panics
    ///
    /// If `range` does not lie inside the table.
    pub fn span(table: &Arc<RecordTable>, range: Range<usize>) -> Self {
        assert!(
            range.start <= range.end && range.end <= table.len(),
            "records {range:?} of a table of {}",
            table.len()
        );
        let mut spans = SmallVec::new();
        if !range.is_empty() {
            spans.push(Span {
                table: Arc::clone(table),
                range: range.start as u32..range.end as u32,
            });
        }
        Self { spans }
    }

    /// The composite of several records (for a view that spans several blocks). A record
    /// given twice is kept once.
    pub fn composite(records: impl IntoIterator<Item = HazardRecord>) -> Self {
        let mut records: Vec<HazardRecord> = records.into_iter().collect();
        records.sort_unstable_by_key(HazardRecord::id);
        records.dedup_by_key(|r| r.id());
        let mut spans: SmallVec<[Span; 1]> = SmallVec::new();
        for r in records {
            match spans.last_mut() {
                Some(last) if Arc::ptr_eq(&last.table, &r.table) && last.range.end == r.index => {
                    last.range.end += 1;
                }
                _ => spans.push(Span {
                    table: r.table,
                    range: r.index..r.index + 1,
                }),
            }
        }
        Self { spans }
    }

    /// The composite of records `indices` of `table`, without a handle per record. An index
    /// given twice is kept once.
    ///
    /// # Panics
    ///
    /// If an index is not a record of the table.
    pub fn of_table(table: &Arc<RecordTable>, indices: impl IntoIterator<Item = usize>) -> Self {
        Self::of_ranges(table, indices.into_iter().map(|i| i..i + 1))
    }

    /// The composite of records `ranges` of `table` (for a view over several sectors, whose
    /// blocks are consecutive records): one span per stretch of consecutive records, in one
    /// pass when the ranges come in increasing order. A record given twice is kept once.
    ///
    /// # Panics
    ///
    /// If a range does not lie inside the table.
    pub fn of_ranges(
        table: &Arc<RecordTable>,
        ranges: impl IntoIterator<Item = Range<usize>>,
    ) -> Self {
        let mut ranges: SmallVec<[Range<usize>; 32]> =
            ranges.into_iter().filter(|r| !r.is_empty()).collect();
        if let Some(bad) = ranges.iter().find(|r| r.end > table.len()) {
            panic!("records {bad:?} of a table of {}", table.len());
        }
        if !ranges.is_sorted_by_key(|r| r.start) {
            ranges.sort_unstable_by_key(|r| r.start);
        }
        // At most one span per range: one allocation, not a doubling per spill.
        let mut spans: SmallVec<[Span; 1]> = SmallVec::with_capacity(ranges.len());
        for r in ranges {
            let (start, end) = (r.start as u32, r.end as u32);
            match spans.last_mut() {
                // Sorted by start: a range meets or overlaps only the last span.
                Some(last) if start <= last.range.end => {
                    last.range.end = last.range.end.max(end);
                }
                _ => spans.push(Span {
                    table: Arc::clone(table),
                    range: start..end,
                }),
            }
        }
        Self { spans }
    }

    /// How many records the set holds.
    pub fn len(&self) -> usize {
        self.spans.iter().map(|s| s.range.len()).sum()
    }

    /// Whether the set holds no record.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The records, in increasing id order, each once.
    pub fn records(&self) -> impl Iterator<Item = HazardRecord> + '_ {
        self.spans.iter().flat_map(|s| {
            s.range.clone().map(|index| HazardRecord {
                table: Arc::clone(&s.table),
                index,
            })
        })
    }

    /// The identities of the records, in increasing order.
    pub fn ids(&self) -> impl Iterator<Item = RecordId> + '_ {
        self.spans.iter().flat_map(|s| {
            s.range
                .clone()
                .map(|i| RecordId(s.table.first + u64::from(i)))
        })
    }

    /// Whether two sets share a record.
    pub fn overlaps(&self, other: &HazardSet) -> bool {
        self.spans.iter().any(|a| {
            other.spans.iter().any(|b| {
                Arc::ptr_eq(&a.table, &b.table)
                    && a.range.start < b.range.end
                    && b.range.start < a.range.end
            })
        })
    }

    pub(crate) fn spans(&self) -> &[Span] {
        &self.spans
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! The run-length encoding against a per-record model, on random programs.
    use super::*;
    use crate::access::AccessList;
    use crate::enroll::enroll;
    use crate::error::{FailureCause, TaskId};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// What one record holds in the model: epoch, last writer, readers since (task indices).
    #[derive(Clone, Default)]
    struct Model {
        epoch: u64,
        last_write: Option<usize>,
        readers: Vec<usize>,
    }

    fn check_runs(table: &RecordTable) {
        let state = table.state.lock();
        let runs = &state.runs;
        assert_eq!(runs.first().map(|r| r.start), Some(0), "runs start at 0");
        for w in runs.windows(2) {
            assert!(w[0].start < w[1].start, "runs are sorted and non-empty");
        }
        assert!(runs.last().unwrap().start < table.len);
    }

    // Safe code only, and far too slow to interpret: Miri skips the random programs.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn spans_enroll_exactly_as_their_records_would_one_by_one() {
        let modes = [Mode::Read, Mode::Read, Mode::Update, Mode::Overwrite];
        replay_random_programs(0..40, modes, 0.3);
    }

    /// Mostly reads, few completions: runs hold more pending reads than they keep directly,
    /// so reads join gates, writes wait for gates, and splits hand gates down to the halves.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn read_heavy_programs_through_gates_enroll_as_their_records_would() {
        let mut modes = [Mode::Read; 40];
        modes[0] = Mode::Update;
        modes[1] = Mode::Overwrite;
        replay_random_programs(100..130, modes, 0.01);
    }

    /// Random programs of tasks over spans of four tables, with modes drawn from `modes`
    /// and an earlier task completed after a step with probability `complete`, checked step
    /// by step against a per-record model: each task waits (directly or through gates) for
    /// exactly the unfinished tasks the model says, and the epochs agree.
    fn replay_random_programs<const M: usize>(seeds: Range<u64>, modes: [Mode; M], complete: f64) {
        let sizes = [1_usize, 5, 12, 40];
        for seed in seeds {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let tables: Vec<_> = sizes.iter().map(|&n| RecordTable::new(n)).collect();
            let mut model: Vec<Vec<Model>> =
                sizes.iter().map(|&n| vec![Model::default(); n]).collect();
            let mut nodes: Vec<Arc<TaskNode>> = Vec::new();
            let mut done: Vec<bool> = Vec::new();
            for step in 0..250 {
                // One task: one to three spans of random tables, in random modes.
                let mut list = AccessList::new();
                let mut items = Vec::new();
                for _ in 0..rng.gen_range(1..=3) {
                    let t = rng.gen_range(0..tables.len());
                    let a = rng.gen_range(0..sizes[t]);
                    let len = rng.gen_range(1..16);
                    let b = rng.gen_range(a + 1..=sizes[t].min(a + len));
                    let mode = modes[rng.gen_range(0..M)];
                    list.push_set(&HazardSet::span(&tables[t], a..b), mode);
                    items.push((t, a..b, mode));
                }
                // The model's verdict on aliasing: a record named twice, once writing.
                let mut seen: std::collections::HashMap<(usize, usize), Mode> = Default::default();
                let mut alias = false;
                for (t, r, mode) in &items {
                    for i in r.clone() {
                        if let Some(m) = seen.insert((*t, i), *mode) {
                            alias |= m.writes() || mode.writes();
                        }
                    }
                }
                if list.normalize().is_err() {
                    assert!(alias, "seed {seed} step {step}: refused without aliasing");
                    continue;
                }
                assert!(!alias, "seed {seed} step {step}: aliasing accepted");
                let k = nodes.len();
                let node = TaskNode::new(TaskId(k as u64));
                enroll(&node, &list);
                // The model: the predecessors each record asks for, and its new state.
                let mut want = std::collections::BTreeSet::new();
                for ((t, i), mode) in &seen {
                    let rec = &mut model[*t][*i];
                    if mode.writes() {
                        if rec.readers.is_empty() {
                            want.extend(rec.last_write);
                        } else {
                            want.extend(rec.readers.drain(..));
                        }
                        rec.last_write = Some(k);
                        rec.epoch += 1;
                    } else {
                        want.extend(rec.last_write);
                        rec.readers.push(k);
                    }
                }
                want.retain(|&j| !done[j]);
                let got: std::collections::BTreeSet<usize> =
                    (0..k).filter(|&j| nodes[j].precedes(&node)).collect();
                assert_eq!(got, want, "seed {seed} step {step}: predecessors");
                nodes.push(node);
                done.push(false);
                // Sometimes an earlier task completes (edges to it are no longer added).
                if rng.gen_bool(complete) {
                    let j = rng.gen_range(0..nodes.len());
                    if !done[j] {
                        nodes[j].complete(&mut Vec::new());
                        done[j] = true;
                    }
                }
            }
            for (t, table) in tables.iter().enumerate() {
                check_runs(table);
                for (i, rec) in model[t].iter().enumerate() {
                    assert_eq!(table.epoch(i), rec.epoch, "seed {seed}: epoch of {t}/{i}");
                }
            }
        }
    }

    /// Enrolls a task `id` with `mode` on records `range` of `table`.
    fn enroll_on(
        table: &Arc<RecordTable>,
        range: Range<usize>,
        id: u64,
        mode: Mode,
    ) -> Arc<TaskNode> {
        let node = TaskNode::new(TaskId(id));
        let mut list = AccessList::new();
        list.push_set(&HazardSet::span(table, range), mode);
        list.normalize().unwrap();
        enroll(&node, &list);
        node
    }

    /// 10^5 reads of one value behind a pending write: each enrollment visits at most
    /// [`READERS_DIRECT`] reader entries, so the count grows with the reads, not with the
    /// reads pending (the list scanned at each read once 32 were pending made it ~5 * 10^9).
    /// The write after them waits for every one, through a bounded number of edges.
    #[test]
    fn reads_behind_a_pending_write_enroll_in_bounded_steps_each() {
        let table = RecordTable::new(1);
        // Fewer under Miri, which interprets every step (it checks the gates' safety, not
        // their cost).
        let n = if cfg!(miri) { 40 } else { 100_000_u64 };
        let writer = enroll_on(&table, 0..1, 0, Mode::Overwrite);
        let before = reader_steps_so_far();
        let readers: Vec<_> = (1..=n)
            .map(|k| enroll_on(&table, 0..1, k, Mode::Read))
            .collect();
        let steps = reader_steps_so_far() - before;
        assert!(
            steps <= READERS_DIRECT as u64 * n,
            "{n} reads visited {steps} reader entries"
        );
        assert!(
            readers.iter().all(|r| r.pending() == 2),
            "the guard and the write"
        );
        let before = reader_steps_so_far();
        let second = enroll_on(&table, 0..1, n + 1, Mode::Update);
        assert!(reader_steps_so_far() - before <= READERS_DIRECT as u64);
        assert!(
            second.pending() <= READERS_DIRECT + 2,
            "guard, direct readers, gate"
        );
        assert!(readers.iter().all(|r| r.precedes(&second)));
        writer.complete(&mut Vec::new());
        let (last, rest) = readers.split_last().unwrap();
        for r in rest {
            r.complete(&mut Vec::new());
        }
        assert!(second.pending() > 1, "one read is still pending");
        assert!(last.precedes(&second));
        last.complete(&mut Vec::new());
        assert_eq!(
            second.pending(),
            1,
            "every read done: only the guard is left"
        );
    }

    /// Reads of a whole table behind a pending write, then a read and a write of each record
    /// alone: splitting a run with many pending reads costs no step per read, and each write
    /// waits for exactly the reads of its record.
    #[test]
    fn splitting_a_run_with_many_pending_reads_does_not_copy_them() {
        let (k, n) = if cfg!(miri) {
            (6, 20)
        } else {
            (200_usize, 2_000_u64)
        };
        let table = RecordTable::new(k);
        let _writer = enroll_on(&table, 0..k, 0, Mode::Overwrite);
        let whole: Vec<_> = (1..=n)
            .map(|i| enroll_on(&table, 0..k, i, Mode::Read))
            .collect();
        let before = reader_steps_so_far();
        let single: Vec<_> = (0..k)
            .map(|i| enroll_on(&table, i..i + 1, n + 1 + i as u64, Mode::Read))
            .collect();
        let writes: Vec<_> = (0..k)
            .map(|i| enroll_on(&table, i..i + 1, n + 1 + (k + i) as u64, Mode::Overwrite))
            .collect();
        let steps = reader_steps_so_far() - before;
        assert!(
            steps <= 3 * READERS_DIRECT as u64 * k as u64,
            "{k} splits and writes visited {steps} reader entries"
        );
        for (i, w) in writes.iter().enumerate() {
            assert!(w.pending() <= READERS_DIRECT + 2);
            for (j, s) in single.iter().enumerate() {
                assert_eq!(s.precedes(w), i == j, "write {i}, read of record {j}");
            }
        }
        for r in whole.iter().step_by(97) {
            assert!(writes.iter().all(|w| r.precedes(w)));
        }
    }

    /// A read over records written alternately by two tasks (runs that interleave, as a
    /// permutation's scattered blocks leave them) waits for each writer through one edge, and
    /// for a finished writer through none.
    #[test]
    fn interleaved_writers_are_waited_for_once_each() {
        let table = RecordTable::new(16);
        let writers: Vec<_> = (0..2_u64)
            .map(|w| {
                let node = TaskNode::new(TaskId(w));
                let mut list = AccessList::new();
                for i in (w as usize..16).step_by(2) {
                    list.push_set(&HazardSet::span(&table, i..i + 1), Mode::Overwrite);
                }
                list.normalize().unwrap();
                enroll(&node, &list);
                node
            })
            .collect();
        assert_eq!(table.state.lock().runs.len(), 16);
        let read = |id| {
            let node = TaskNode::new(TaskId(id));
            let mut list = AccessList::new();
            list.push_set(&HazardSet::span(&table, 0..16), Mode::Read);
            list.normalize().unwrap();
            enroll(&node, &list);
            node
        };
        let reader = read(10);
        assert!(writers.iter().all(|w| w.has_successor(&reader)));
        assert_eq!(reader.pending(), 1 + 2, "the guard and one edge per writer");
        writers[0].complete(&mut Vec::new());
        assert_eq!(read(11).pending(), 1 + 1, "no edge to the finished writer");
    }

    #[test]
    fn a_whole_table_write_merges_its_runs_into_one() {
        let table = RecordTable::new(64);
        let mut list = AccessList::new();
        let nodes: Vec<_> = (0..8)
            .map(|k| {
                let node = TaskNode::new(TaskId(k));
                let mut list = AccessList::new();
                list.push_set(
                    &HazardSet::span(&table, 8 * k as usize..8 * k as usize + 4),
                    Mode::Read,
                );
                list.normalize().unwrap();
                enroll(&node, &list);
                node
            })
            .collect();
        assert!(table.state.lock().runs.len() > 8);
        list.push_set(&HazardSet::span(&table, 0..64), Mode::Overwrite);
        list.normalize().unwrap();
        let writer = TaskNode::new(TaskId(99));
        enroll(&writer, &list);
        assert_eq!(table.state.lock().runs.len(), 1);
        assert!(nodes.iter().all(|n| n.has_successor(&writer)));
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn poison_of_spans_matches_a_per_record_model() {
        for seed in 0..20 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let n = 30;
            let table = RecordTable::new(n);
            let mut model: Vec<Option<usize>> = vec![None; n];
            let failures: Vec<_> = (0..4)
                .map(|k| {
                    std::sync::Arc::new(TaskFailure {
                        task: TaskId(k),
                        name: "test",
                        cause: FailureCause::Panic(format!("failure {k}")),
                    })
                })
                .collect();
            for step in 0..200 {
                let a = rng.gen_range(0..n);
                let b = rng.gen_range(a + 1..=n);
                let span = a as u32..b as u32;
                if rng.gen_bool(0.5) {
                    let f = rng.gen_range(0..=failures.len());
                    let poison = failures.get(f).cloned();
                    table.set_poison(&span, poison);
                    for m in &mut model[a..b] {
                        *m = (f < failures.len()).then_some(f);
                    }
                } else {
                    let got = table.poison(&span).map(|p| p.task.0 as usize);
                    let want = model[a..b].iter().find_map(|m| *m);
                    assert_eq!(got, want, "seed {seed} step {step}: poison of {a}..{b}");
                }
                let state = table.state.lock();
                for w in state.poison.windows(2) {
                    assert!(
                        w[0].0.end <= w[1].0.start,
                        "poisoned ranges sorted, disjoint"
                    );
                }
                assert_eq!(
                    table.poisoned.load(Ordering::Acquire),
                    !state.poison.is_empty()
                );
            }
        }
    }
}
