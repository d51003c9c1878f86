//! Composite enrollment: one task enrolled on all of its records in one step.
//!
//! Owns: [`enroll`]. Invariant: the records of a normalised [`AccessList`] are locked in
//! increasing [`RecordId`](crate::RecordId) order, all of them before any is changed, and
//! released only after every one is enrolled. Two enrollments that share a record are
//! therefore ordered the same way on every record they share (the one that locked the
//! lowest shared record first holds all shared records first), so a dependency edge always
//! points from a later enrollment to an earlier one and the task graph stays acyclic.
//! Locking in one global order also keeps the record locks themselves deadlock-free.

use crate::access::AccessList;
use crate::hazard::LastEdge;
use crate::primitive::Arc;
use crate::task::TaskNode;
use smallvec::SmallVec;

/// Enrolls `node` on every record of a normalised `list`.
pub(crate) fn enroll(node: &Arc<TaskNode>, list: &AccessList) {
    debug_assert!(
        list.items
            .windows(2)
            .all(|w| w[0].record.id() < w[1].record.id()),
        "enroll needs a normalised access list"
    );
    let mut last = LastEdge::default();
    if let [item] = list.items.as_slice() {
        item.record.lock().enroll(node, item.mode, &mut last);
        return;
    }
    let mut guards: SmallVec<[_; 8]> = list.items.iter().map(|i| i.record.lock()).collect();
    for (guard, item) in guards.iter_mut().zip(&list.items) {
        guard.enroll(node, item.mode, &mut last);
    }
}
