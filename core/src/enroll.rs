//! Composite enrollment: one task enrolled on all of its records in one step.
//!
//! Owns: [`enroll`]. Invariant: the tables of a normalised [`AccessList`] are locked in
//! increasing [`RecordId`](crate::RecordId) order, all of them before any is changed, and
//! released only after every span is enrolled. Two enrollments that share a record are
//! therefore ordered the same way on every record they share (the one that locked the
//! lowest shared table first holds all shared tables first), so a dependency edge always
//! points from a later enrollment to an earlier one and the task graph stays acyclic.
//! Locking in one global order also keeps the table locks themselves deadlock-free.

use crate::access::AccessList;
use crate::hazard::RecentEdges;
use crate::primitive::Arc;
use crate::task::TaskNode;
use smallvec::SmallVec;

/// Enrolls `node` on every record of a normalised `list`; returns its most recent distinct
/// predecessors (at most [`RecentEdges`]' window: a host wait claims queued work among
/// them).
pub(crate) fn enroll(node: &Arc<TaskNode>, list: &AccessList) -> RecentEdges {
    debug_assert!(
        list.items
            .windows(2)
            .all(|w| w[0].span.first_id() + w[0].span.range.len() as u64 <= w[1].span.first_id()),
        "enroll needs a normalised access list"
    );
    let mut last = RecentEdges::default();
    if let [item] = list.items.as_slice() {
        item.span
            .table
            .lock()
            .enroll(&item.span.range, node, item.mode, &mut last);
        return last;
    }
    // One guard per table; a table's spans are neighbours in a normalised list.
    let mut guards: SmallVec<[_; 4]> = SmallVec::new();
    let mut table_of: SmallVec<[usize; 8]> = SmallVec::new();
    for (i, item) in list.items.iter().enumerate() {
        let same = i > 0 && Arc::ptr_eq(&list.items[i - 1].span.table, &item.span.table);
        if !same {
            guards.push(item.span.table.lock());
        }
        table_of.push(guards.len() - 1);
    }
    for (item, &g) in list.items.iter().zip(&table_of) {
        guards[g].enroll(&item.span.range, node, item.mode, &mut last);
    }
    last
}
