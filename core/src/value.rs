//! `Async<T>`: an independent value on its own timeline.
//!
//! Owns: [`Async`] and [`ValueRegion`]. Invariants: every `Async` has its own hazard record,
//! created with it; `Async` is not `Clone` (a copy is the explicit, scheduled
//! [`Async::duplicate`] onto a new record); its aliases ([`Async::alias`], [`Async::view`])
//! share its slot and its record.

use crate::access::{Access, AccessList};
use crate::alias::{Alias, ReadAlias, ReadBuffer, Region, WriteBuffer};
use crate::error::{RecordId, Result, TaskId};
use crate::hazard::{HazardRecord, HazardSet, Mode};
use crate::runtime::Runtime;
use crate::storage::Slot;

/// The region of an independent value: its slot (the owner token).
pub struct ValueRegion<T> {
    slot: std::sync::Arc<Slot<T>>,
}

impl<T> Clone for ValueRegion<T> {
    fn clone(&self) -> Self {
        Self {
            slot: std::sync::Arc::clone(&self.slot),
        }
    }
}

impl<T> std::fmt::Debug for ValueRegion<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ValueRegion")
    }
}

// SAFETY: the views reach only the slot, which the region keeps alive; a value's region is
// paired only with the value's own record (in `Async::new` / `Async::unconstructed`).
unsafe impl<T: Send + Sync + 'static> Region for ValueRegion<T> {
    type Ref<'a> = &'a T;
    type Mut<'a> = &'a mut T;

    unsafe fn resolve(&self) -> Result<&T> {
        // SAFETY: the caller holds a granted read of the slot's record.
        unsafe { self.slot.get() }
    }

    unsafe fn resolve_mut(&self) -> Result<&mut T> {
        // SAFETY: the caller holds a granted write of the slot's record.
        unsafe { self.slot.get_mut() }
    }
}

/// A value that lives on its own timeline: tasks read and write it in program order, and
/// host reads wait for exactly the work it depends on.
///
/// ```
/// use tessera_core::{Async, schedule};
///
/// let x = Async::new(vec![1.0_f64, 2.0, 3.0]);
/// schedule(x.write(), |x| {
///     x.iter_mut().for_each(|v| *v *= 10.0);
///     Ok(())
/// })?;
/// let copy = x.duplicate()?; // an explicit, scheduled copy onto a new timeline
/// x.set(vec![0.0]);
/// assert_eq!(copy.get()?, vec![10.0, 20.0, 30.0]);
/// assert_eq!(x.get()?, vec![0.0]);
/// # Ok::<(), tessera_core::Error>(())
/// ```
pub struct Async<T> {
    alias: Alias<ValueRegion<T>>,
}

impl<T> std::fmt::Debug for Async<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Async")
            .field("record", &self.alias.hazards().ids().next())
            .finish()
    }
}

/// A task's view of a value it constructs: the cell, empty or holding an old value.
struct Fill<T> {
    region: ValueRegion<T>,
    hazards: HazardSet,
}

// SAFETY: declares an overwrite of the value's only record, which covers the slot.
unsafe impl<T: Send + Sync + 'static> Access for Fill<T> {
    type View<'a> = &'a mut Option<T>;

    fn declare(&self, list: &mut AccessList) {
        list.push_set(&self.hazards, Mode::Overwrite);
    }

    unsafe fn resolve(&mut self) -> Result<&mut Option<T>> {
        // SAFETY: the caller holds the granted overwrite of the slot's record.
        Ok(unsafe { self.region.slot.cell_mut() })
    }
}

impl<T: Send + Sync + 'static> Async<T> {
    /// A new value on a fresh timeline.
    pub fn new(value: T) -> Self {
        Self::from_cell(Some(value))
    }

    fn from_cell(value: Option<T>) -> Self {
        let record = HazardRecord::new();
        let slot = std::sync::Arc::new(Slot::new(value, record.id()));
        // SAFETY: the slot is new and reachable only through this region, paired with its
        // own fresh record.
        let alias = unsafe { Alias::from_parts(ValueRegion { slot }, HazardSet::one(record)) };
        Self { alias }
    }

    fn record(&self) -> HazardRecord {
        self.alias
            .hazards()
            .records()
            .next()
            .expect("a value has one record")
    }

    /// The identity of this value's hazard record.
    pub fn record_id(&self) -> RecordId {
        self.record().id()
    }

    /// How many writes have been enrolled on this value so far.
    pub fn epoch(&self) -> u64 {
        self.record().epoch()
    }

    /// A shared read, for a task.
    pub fn read(&self) -> ReadBuffer<ValueRegion<T>> {
        self.alias.read()
    }

    /// An exclusive update, for a task (a poisoned value poisons the update).
    pub fn write(&self) -> WriteBuffer<ValueRegion<T>> {
        self.alias.write()
    }

    /// An exclusive overwrite, for a task that does not read the old value.
    pub fn overwrite(&self) -> WriteBuffer<ValueRegion<T>> {
        self.alias.overwrite()
    }

    /// A mutable alias: shares this value's storage and record; `Clone` is structural.
    pub fn alias(&self) -> Alias<ValueRegion<T>> {
        self.alias.clone()
    }

    /// A read-only alias.
    pub fn view(&self) -> ReadAlias<ValueRegion<T>> {
        self.alias.read_only()
    }

    /// Schedules an overwrite with `value`: a clean epoch, whatever came before.
    pub fn set(&self, value: T) -> TaskId {
        let fill = self.fill();
        Runtime::current()
            .schedule_named("set", fill, move |cell| {
                *cell = Some(value);
                Ok(())
            })
            .expect("a single overwrite cannot alias")
    }

    fn fill(&self) -> Fill<T> {
        Fill {
            region: self.alias.region().clone(),
            hazards: self.alias.hazards().clone(),
        }
    }

    /// An explicit, scheduled copy of the value onto a new, independent timeline. The copy
    /// is ordered after the writes enrolled on `self` so far; later writes to either value do
    /// not touch the other. If the copy fails (a poisoned source), the copy is poisoned and
    /// holds no value: [`Async::set`] revives it, while `overwrite()` buffers, which hand out
    /// `&mut T`, fail with [`Error::Unconstructed`](crate::Error::Unconstructed).
    pub fn duplicate(&self) -> Result<Async<T>>
    where
        T: Clone,
    {
        let copy = Async::from_cell(None);
        Runtime::current().schedule_named(
            "duplicate",
            (self.read(), copy.fill()),
            |(src, dst): (&T, &mut Option<T>)| {
                match dst {
                    Some(old) => old.clone_from(src),
                    None => *dst = Some(src.clone()),
                }
                Ok(())
            },
        )?;
        Ok(copy)
    }

    /// Blocks until the value is ready: the last write enrolled before this call is done.
    pub fn wait(&self) -> Result<()> {
        self.alias.wait()
    }

    /// Waits for the value and returns a copy of it.
    pub fn get(&self) -> Result<T>
    where
        T: Clone,
    {
        self.alias.with(T::clone)
    }

    /// Waits for the value, then runs `f` on the host with a reference to it.
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Result<R> {
        self.alias.with(f)
    }
}
