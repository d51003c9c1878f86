//! The storage of an independent value: one cell whose accesses the hazard record orders.
//!
//! Owns: [`Slot`], the only place in `tessera-core` that turns a shared pointer into `&T` or
//! `&mut T`. Invariant: a slot is reached only through a region paired with the slot's own
//! record, so at any time either one writer or any number of readers hold views.

use crate::error::{Error, RecordId, Result};
use std::cell::UnsafeCell;

/// A value cell, possibly not yet constructed (the target of a scheduled copy).
pub(crate) struct Slot<T> {
    value: UnsafeCell<Option<T>>,
    record: RecordId,
}

// SAFETY: the cell is reached only under the hazard record's grants: one writer (needs
// `T: Send`, the value moves between workers) or many concurrent readers (need `T: Sync`).
unsafe impl<T: Send + Sync> Sync for Slot<T> {}

impl<T> Slot<T> {
    pub(crate) fn new(value: Option<T>, record: RecordId) -> Self {
        Self {
            value: UnsafeCell::new(value),
            record,
        }
    }

    /// # Safety
    ///
    /// The caller holds a granted read (or write) of the slot's record while the reference
    /// lives.
    pub(crate) unsafe fn get(&self) -> Result<&T> {
        // SAFETY: per the caller's grant no writer holds a `&mut` to the cell now.
        unsafe { &*self.value.get() }
            .as_ref()
            .ok_or(Error::Unconstructed {
                record: self.record,
            })
    }

    /// # Safety
    ///
    /// The caller holds a granted write of the slot's record while the reference lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn get_mut(&self) -> Result<&mut T> {
        // SAFETY: per the caller's grant this is the only access to the cell now.
        unsafe { self.cell_mut() }
            .as_mut()
            .ok_or(Error::Unconstructed {
                record: self.record,
            })
    }

    /// # Safety
    ///
    /// The caller holds a granted write of the slot's record while the reference lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn cell_mut(&self) -> &mut Option<T> {
        // SAFETY: per the caller's grant this is the only access to the cell now.
        unsafe { &mut *self.value.get() }
    }
}
