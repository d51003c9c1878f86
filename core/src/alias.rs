//! Alias handles and their access buffers: the one mechanism behind values, blocks and
//! coalesced views.
//!
//! Owns: the [`Region`] trait, [`Alias`] and [`ReadAlias`], and the [`ReadBuffer`] /
//! [`WriteBuffer`] they hand out. Invariants:
//!
//! - An alias pairs a region (owner token plus descriptor) with the exact hazard records
//!   that order every byte the region's views can reach. The pair is fixed at creation:
//!   there is no method that changes either, so an alias can never be retargeted.
//! - `Clone` is structural: a clone shares the owner token and the very same records, so
//!   writes through any clone, the parent, or the alias are ordered together.
//! - A [`ReadAlias`] has no writing method at all.
//! - A buffer owns its region (and so the owner token) and its records until the task that
//!   took it is done: dropping every handle after submission loses nothing.

use crate::access::{Access, AccessList};
use crate::error::Result;
use crate::hazard::{HazardSet, Mode};
use crate::runtime::host;

/// A piece of storage that views can be resolved from: an owner token and a descriptor.
///
/// # Safety
///
/// Implementors promise that the views from `resolve` and `resolve_mut` reach only memory
/// the region keeps alive (it holds the owner token), and that two regions whose views can
/// overlap are only ever paired with hazard sets that share a record covering the overlap
/// (this is the duty [`Alias::from_parts`] states).
pub unsafe trait Region: Clone + Send + Sync + 'static {
    /// The shared view (`&T`, a strided read view, a faer `MatRef`).
    type Ref<'a>;
    /// The exclusive view (`&mut T`, a strided write view, a faer `MatMut`).
    type Mut<'a>;

    /// Resolves the shared view.
    ///
    /// # Safety
    ///
    /// The caller holds a granted read (or write) of every record of the region's hazard set
    /// for as long as the view lives.
    unsafe fn resolve(&self) -> Result<Self::Ref<'_>>;

    /// Resolves the exclusive view.
    ///
    /// # Safety
    ///
    /// The caller holds a granted write of every record of the region's hazard set for as
    /// long as the view lives.
    unsafe fn resolve_mut(&self) -> Result<Self::Mut<'_>>;
}

/// A mutable, write-through alias: a region and the exact records that order it.
#[derive(Clone, Debug)]
pub struct Alias<R> {
    region: R,
    hazards: HazardSet,
}

/// A read-only alias: like [`Alias`], without any way to write.
///
/// ```compile_fail
/// let a = tessera_core::Async::new(1.0_f64);
/// let view = a.view();
/// let _ = view.write(); // a read-only alias has no write access
/// ```
#[derive(Clone, Debug)]
pub struct ReadAlias<R> {
    region: R,
    hazards: HazardSet,
}

impl<R> Alias<R> {
    /// The region (owner token and descriptor).
    pub fn region(&self) -> &R {
        &self.region
    }

    /// The records that order this alias.
    pub fn hazards(&self) -> &HazardSet {
        &self.hazards
    }
}

impl<R: Region> Alias<R> {
    /// Pairs a region with the records that order it.
    ///
    /// # Safety
    ///
    /// `hazards` must include a record shared with every other alias, value or buffer whose
    /// memory can overlap the region's (for a sub-view: the parent's records covering it),
    /// so that every overlapping access is ordered. Fresh records are correct only for memory
    /// nothing else can reach.
    pub unsafe fn from_parts(region: R, hazards: HazardSet) -> Self {
        Self { region, hazards }
    }

    /// A shared read of the current value, for a task.
    pub fn read(&self) -> ReadBuffer<R> {
        ReadBuffer {
            region: self.region.clone(),
            hazards: self.hazards.clone(),
        }
    }

    /// An exclusive update (read-modify-write), for a task.
    pub fn write(&self) -> WriteBuffer<R> {
        self.write_with(Mode::Update)
    }

    /// An exclusive overwrite, for a task that does not read the old value: it starts a
    /// clean epoch even after a failure.
    pub fn overwrite(&self) -> WriteBuffer<R> {
        self.write_with(Mode::Overwrite)
    }

    fn write_with(&self, mode: Mode) -> WriteBuffer<R> {
        WriteBuffer {
            region: self.region.clone(),
            hazards: self.hazards.clone(),
            mode,
        }
    }

    /// Like [`read`](Alias::read), consuming the alias: the buffer takes its region and
    /// records without cloning them (for an alias made just to be scheduled).
    pub fn into_read(self) -> ReadBuffer<R> {
        ReadBuffer {
            region: self.region,
            hazards: self.hazards,
        }
    }

    /// Like [`write`](Alias::write), consuming the alias.
    pub fn into_write(self) -> WriteBuffer<R> {
        WriteBuffer {
            region: self.region,
            hazards: self.hazards,
            mode: Mode::Update,
        }
    }

    /// Like [`overwrite`](Alias::overwrite), consuming the alias.
    pub fn into_overwrite(self) -> WriteBuffer<R> {
        WriteBuffer {
            region: self.region,
            hazards: self.hazards,
            mode: Mode::Overwrite,
        }
    }

    /// The same alias without write access.
    pub fn read_only(&self) -> ReadAlias<R> {
        ReadAlias {
            region: self.region.clone(),
            hazards: self.hazards.clone(),
        }
    }

    /// Blocks until the value is ready (the last write enrolled before this call is done).
    pub fn wait(&self) -> Result<()> {
        host(self.read(), |_| ())
    }

    /// Waits for the value, then runs `f` on the host with its view.
    pub fn with<T>(&self, f: impl FnOnce(R::Ref<'_>) -> T) -> Result<T> {
        host(self.read(), f)
    }

    /// Waits for every earlier access, then runs `f` on the host with the exclusive view.
    pub fn with_mut<T>(&self, f: impl FnOnce(R::Mut<'_>) -> T) -> Result<T> {
        host(self.write(), f)
    }
}

impl<R> ReadAlias<R> {
    /// The region (owner token and descriptor).
    pub fn region(&self) -> &R {
        &self.region
    }

    /// The records that order this alias.
    pub fn hazards(&self) -> &HazardSet {
        &self.hazards
    }
}

impl<R: Region> ReadAlias<R> {
    /// A shared read of the current value, for a task.
    pub fn read(&self) -> ReadBuffer<R> {
        ReadBuffer {
            region: self.region.clone(),
            hazards: self.hazards.clone(),
        }
    }

    /// Blocks until the value is ready.
    pub fn wait(&self) -> Result<()> {
        host(self.read(), |_| ())
    }

    /// Waits for the value, then runs `f` on the host with its view.
    pub fn with<T>(&self, f: impl FnOnce(R::Ref<'_>) -> T) -> Result<T> {
        host(self.read(), f)
    }
}

/// A shared read access: owns the region (owner token) and the records to enroll on.
#[derive(Debug)]
pub struct ReadBuffer<R> {
    region: R,
    hazards: HazardSet,
}

/// An exclusive access (update or overwrite): owns the region and the records.
#[derive(Debug)]
pub struct WriteBuffer<R> {
    region: R,
    hazards: HazardSet,
    mode: Mode,
}

// SAFETY: declares a read of every record of the hazard set, which by `Alias::from_parts`
// covers every byte `Region::resolve` reaches; the region owns the storage.
unsafe impl<R: Region> Access for ReadBuffer<R> {
    type View<'a> = R::Ref<'a>;

    fn declare(&self, list: &mut AccessList) {
        list.push_set(&self.hazards, Mode::Read);
    }

    unsafe fn resolve(&mut self) -> Result<R::Ref<'_>> {
        // SAFETY: the caller holds the granted reads this buffer declared.
        unsafe { self.region.resolve() }
    }
}

// SAFETY: declares a writing access of every record of the hazard set, which covers every
// byte `Region::resolve_mut` reaches; the region owns the storage.
unsafe impl<R: Region> Access for WriteBuffer<R> {
    type View<'a> = R::Mut<'a>;

    fn declare(&self, list: &mut AccessList) {
        list.push_set(&self.hazards, self.mode);
    }

    unsafe fn resolve(&mut self) -> Result<R::Mut<'_>> {
        // SAFETY: the caller holds the granted writes this buffer declared.
        unsafe { self.region.resolve_mut() }
    }
}
