//! Tessera's asynchronous runtime: programs read as sequential, the runtime overlaps what
//! cannot be observed, and host reads wait for exactly what they depend on.
//!
//! ```
//! use tessera_core::{Async, schedule};
//!
//! let a = Async::new(1.0_f64);
//! let b = Async::new(0.0_f64);
//! let c = Async::new(0.0_f64);
//! // Two tasks that read `a` run concurrently; each waits only for what it reads.
//! schedule((a.read(), b.overwrite()), |(a, b)| { *b = *a + 1.0; Ok(()) })?;
//! schedule((a.read(), c.overwrite()), |(a, c)| { *c = *a + 2.0; Ok(()) })?;
//! // This write of `a` waits for both reads: program order is kept.
//! schedule(a.write(), |a| { *a = 100.0; Ok(()) })?;
//! assert_eq!((b.get()?, c.get()?, a.get()?), (2.0, 3.0, 100.0));
//! # Ok::<(), tessera_core::Error>(())
//! ```
//!
//! # The pieces
//!
//! - [`HazardRecord`] (module `hazard`): orders the accesses to one value or block, with
//!   epochs; records live in a [`RecordTable`] (one per array, run-length encoded, so a
//!   view over many blocks enrolls in one step per run). [`HazardSet`]: the records of one
//!   alias (several for a coalesced view).
//! - [`Access`]: what a task declares; [`ReadBuffer`] and [`WriteBuffer`] own the owner token
//!   and the records, and resolve to plain views inside the task.
//! - [`Async`]: an independent value. [`Alias`] / [`ReadAlias`]: handles that share a parent's
//!   storage and exact records, over any [`Region`] (a value, a block, a coalesced view).
//! - [`Runtime`] and [`schedule`]: enrollment at the call, execution on a worker pool.
//!   [`Completion`]: a deferred task, enrolled like any task and completed from outside the
//!   runtime (a message that arrives), [`Runtime::schedule_deferred_named`].
//! - [`Error`]: typed errors; failures travel with the epochs they poisoned.
//! - [`Trace`]: the task timeline a runtime records on request
//!   ([`Runtime::start_trace`]), as Chrome trace-event JSON for Perfetto.
//!
//! Tasks are dependency-counted continuations rather than futures; the `runtime` module says
//! why, and how eager tasks that schedule eager tasks run without nesting on the stack. The
//! models of the hazard record (with its reader gates) and of composite enrollment are loom
//! tests (`RUSTFLAGS="--cfg loom" cargo test -p tessera-core --release --lib loom`).

#![deny(missing_docs)]

mod access;
mod alias;
mod buffer;
pub mod cache;
mod deferred;
mod domain;
mod enroll;
mod error;
mod hazard;
mod pool;
mod primitive;
mod runtime;
mod send_ptr;
mod storage;
mod task;
mod trace;
mod value;

#[cfg(all(test, loom))]
mod loom_models;

pub use access::{Access, AccessList};
pub use alias::{Alias, ReadAlias, ReadBuffer, Region, WriteBuffer};
pub use buffer::{
    ALIGN, AllocError, AnyBits, SharedBuffer, StridedMut, StridedRef, Zeroable,
    for_each_common_run, for_each_offset, zip_runs, zip_runs_ref,
};
pub use cache::{CacheStats, LruCache};
pub use deferred::{Completion, schedule_deferred_named};
pub use domain::Domain;
pub use error::{Error, FailureCause, KernelError, RecordId, Result, TaskFailure, TaskId};
pub use hazard::{HazardRecord, HazardSet, Mode, RecordTable};
pub use pool::{
    BufferPoolStats, POOL_BYTES, POOL_ENTRIES, POOL_MIN_BYTES, buffer_pool_stats, pooled_bytes,
    set_buffer_pool_limits, trim_buffer_pool,
};
pub use runtime::{
    Runtime, host, schedule, schedule_eager_named, schedule_named, schedule_sequential_if,
    schedule_sequential_named,
};
pub use send_ptr::SendPtr;
pub use trace::{Trace, TraceEvent};
pub use value::{Async, ValueRegion};
