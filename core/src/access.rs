//! Access declarations: what a task reads and writes, and how its buffers become views.
//!
//! Owns: the [`Access`] trait, [`AccessList`], and the normalisation that turns a list into
//! one enrollment (sorted by record, duplicate reads merged, aliasing refused). Invariant: a
//! normalised list names each record once, in spans of consecutive records of one table,
//! sorted by [`RecordId`] (so each table's spans are neighbours), so composite enrollment
//! can lock tables in that order.

use crate::error::{Error, RecordId, Result};
use crate::hazard::{HazardRecord, HazardSet, Mode, Span};
use crate::primitive::Arc;
use smallvec::SmallVec;

/// One declared access: records of one table and a mode.
#[derive(Clone, Debug)]
pub(crate) struct AccessItem {
    pub(crate) span: Span,
    pub(crate) mode: Mode,
}

/// The records a task declares, with their modes. Filled by [`Access::declare`].
#[derive(Debug, Default)]
pub struct AccessList {
    pub(crate) items: SmallVec<[AccessItem; 4]>,
}

impl AccessList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares an access to `record`.
    pub fn push(&mut self, record: &HazardRecord, mode: Mode) {
        self.push_set(&HazardSet::one(record.clone()), mode);
    }

    /// Declares an access to every record of `set`.
    pub fn push_set(&mut self, set: &HazardSet, mode: Mode) {
        self.items.extend(set.spans().iter().map(|span| AccessItem {
            span: span.clone(),
            mode,
        }));
    }

    /// How many spans of records are declared (a span is consecutive records of one table).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Sorts by record and merges repeated reads of one record (and touching spans of one
    /// table in one mode). Two accesses to one record of which one writes are refused: an
    /// output must not share a record with an input or another output.
    pub(crate) fn normalize(&mut self) -> Result<()> {
        let items = &mut self.items;
        if items.len() > 1 {
            // Tables own disjoint id ranges, so sorting by the first id groups each table's
            // spans together and orders them by position.
            items.sort_unstable_by_key(|i| i.span.first_id());
            let mut kept = 0;
            for next in 1..items.len() {
                let (a, b) = (&items[kept], &items[next]);
                if Arc::ptr_eq(&a.span.table, &b.span.table) {
                    let (ra, rb) = (&a.span.range, &b.span.range);
                    // Sorted by start, kept spans disjoint: `b` can only meet the last kept.
                    if rb.start < ra.end {
                        if a.mode.writes() || b.mode.writes() {
                            let shared = b.span.table.id(rb.start as usize);
                            return Err(alias_error(shared, a.mode, b.mode));
                        }
                        // Two reads of shared records: one read of their union.
                        let end = ra.end.max(rb.end);
                        items[kept].span.range.end = end;
                        continue;
                    }
                    if rb.start == ra.end && a.mode == b.mode {
                        let end = rb.end;
                        items[kept].span.range.end = end;
                        continue;
                    }
                }
                kept += 1;
                items.swap(kept, next);
            }
            items.truncate(kept + 1);
        }
        Ok(())
    }
}

fn alias_error(record: RecordId, first: Mode, second: Mode) -> Error {
    Error::Alias {
        record,
        first: first.name(),
        second: second.name(),
    }
}

/// Something a task can declare and, once its accesses are granted, resolve into a view.
///
/// Implemented by the read and write buffers of values and aliases, by tuples of accesses
/// and by `Vec`s of them. Leaf kernels receive [`Access::View`] and never see async types.
///
/// # Safety
///
/// `declare` must name, with a writing [`Mode`] where `resolve` hands out mutable access,
/// every hazard record that covers memory `resolve` can reach; and the storage behind the
/// views must stay alive as long as `self` does (the buffer owns the owner token).
pub unsafe trait Access: Send + 'static {
    /// The resolved view a kernel receives.
    type View<'a>;

    /// Declares every record this access touches.
    fn declare(&self, list: &mut AccessList);

    /// Resolves the buffer into its view.
    ///
    /// # Safety
    ///
    /// Called by the scheduler only, once every access declared by `declare` has been
    /// granted (the epochs it waits for are complete), and the view must not outlive that
    /// grant (the task's kernel call).
    unsafe fn resolve(&mut self) -> Result<Self::View<'_>>;
}

macro_rules! tuple_access {
    ($($name:ident $idx:tt),+) => {
        // SAFETY: a tuple declares exactly what its members declare and resolves them.
        unsafe impl<$($name: Access),+> Access for ($($name,)+) {
            type View<'a> = ($($name::View<'a>,)+);

            fn declare(&self, list: &mut AccessList) {
                $(self.$idx.declare(list);)+
            }

            unsafe fn resolve(&mut self) -> Result<Self::View<'_>> {
                // SAFETY: the caller's grant covers every member, since each was declared.
                Ok(($(unsafe { self.$idx.resolve() }?,)+))
            }
        }
    };
}

tuple_access!(A 0);
tuple_access!(A 0, B 1);
tuple_access!(A 0, B 1, C 2);
tuple_access!(A 0, B 1, C 2, D 3);
tuple_access!(A 0, B 1, C 2, D 3, E 4);
tuple_access!(A 0, B 1, C 2, D 3, E 4, F 5);

// SAFETY: a vector declares what its elements declare and resolves each of them.
unsafe impl<A: Access> Access for Vec<A> {
    type View<'a> = Vec<A::View<'a>>;

    fn declare(&self, list: &mut AccessList) {
        for a in self {
            a.declare(list);
        }
    }

    unsafe fn resolve(&mut self) -> Result<Self::View<'_>> {
        self.iter_mut()
            // SAFETY: the caller's grant covers every element, since each was declared.
            .map(|a| unsafe { a.resolve() })
            .collect()
    }
}

// SAFETY: the unit access declares nothing and resolves to nothing.
unsafe impl Access for () {
    type View<'a> = ();

    fn declare(&self, _list: &mut AccessList) {}

    unsafe fn resolve(&mut self) -> Result<()> {
        Ok(())
    }
}
